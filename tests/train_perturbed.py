"""Real trainers made wrong on purpose, for the slow training test (tests/test_train_real.py): real TensorFlow with
its learning rate 10% off, real torch with its first layer's gradient dropped before the optimizer's step. Training
parity must fail both. Imported by the measured child processes from the ``tests`` folder (on PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from inferbench.runners.tf import TapeTrainer
from inferbench.runners.torch_train import TorchTrainer


class LrTapeTrainer(TapeTrainer):
    def set_learning_rate(self, rate: float) -> None:
        super().set_learning_rate(rate * 1.1)


class DropGradTorchTrainer(TorchTrainer):
    def load(self, ctx: Any) -> None:
        super().load(ctx)
        first = next(iter(self.params.values()))
        step = self.opt.step

        def without_first(*args: Any, **kwargs: Any) -> Any:
            first.grad = None  # the optimizer skips a parameter without a gradient
            return step(*args, **kwargs)

        self.opt.step = without_first  # type: ignore[method-assign]


PERTURBED = {"tf-lr": ("tf", "LrTapeTrainer"), "torch-native-dropgrad": ("torch-native", "DropGradTorchTrainer")}
