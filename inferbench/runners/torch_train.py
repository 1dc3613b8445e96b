"""PyTorch's training step (``--scenario train``): torch-native's and torch-inductor's trainers, on the torchvision
twin with the Keras weights ported in."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..measure.training import ADAM, LEARNING_RATES, MOMENTUM
from ..registry import ports
from ..registry.ports import FOLDS_CONV_BIASES
from .base import LoadContext, Trainer
from .torch import TorchNativeRunner


class TorchTrainer(TorchNativeRunner, Trainer):
    """torch-native training: the torchvision twin with the Keras weights ported in, ``train()`` mode (dropout and
    stochastic depth off, batch norm frozen for --bn-mode frozen), cross-entropy, ``backward``, the optimizer's
    step; channels-last and ``torch.compile`` as the options say (the compiled module's backward is compiled too)."""

    name = "torch-native"

    def load(self, ctx: LoadContext) -> None:
        torch = self.setup(ctx)
        if self.cuda_graphs:
            raise UsageError("--cuda-graphs is for inference: a training step is not captured here")

        if ctx.options.bn_mode == "frozen" and ctx.model.name in FOLDS_CONV_BIASES and ctx.artifact:
            raise UsageError(f"--bn-mode frozen: {ctx.model.name}'s Keras convolutions have biases that torchvision's "
                             "have not (the weight port folds them into the batch norm), and frozen, Keras trains "
                             "them: torch would train another model; use --bn-mode train")
        self.model_name, self.bn_mode, self.optimizer_name = ctx.model.name, ctx.options.bn_mode, ctx.options.optimizer
        self.ported = ctx.artifact  # the Keras weights (None: own weights, nothing to port)
        module = self.build(ctx).to(self.dev, self.dtype)
        module.train()
        for m in module.modules():
            if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
                m.p = 0.0  # random masks cannot match across frameworks (as in every trainer)
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and self.bn_mode == "frozen":
                m.eval()
                for p in m.parameters():
                    p.requires_grad_(False)
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.module = module
        self.step_module = torch.compile(module) if self.compiled else module
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        if self.optimizer_name == "sgd":
            self.opt = torch.optim.SGD(self.params.values(), lr=LEARNING_RATES["sgd"], momentum=MOMENTUM)
        else:
            self.opt = torch.optim.Adam(self.params.values(), lr=LEARNING_RATES["adam"],
                                        betas=(ADAM["beta_1"], ADAM["beta_2"]), eps=ADAM["epsilon"])
        self.steps = 0
        self.classes = 1000  # torchvision's heads, and the ported Keras models'

    def prepare_batch(self, inputs: np.ndarray, labels: np.ndarray) -> Any:
        return self.prepare(inputs), self.torch.from_numpy(labels.astype(np.int64)).to(self.dev)

    def _loss(self, prepared: Any, module: Any) -> Any:
        x, y = prepared
        return self.torch.nn.functional.cross_entropy(module(x).float(), y)

    def step(self, prepared: Any) -> Any:
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(prepared, self.step_module)
        loss.backward()
        self.steps += 1
        if self.optimizer_name == "adam":  # epsilon where Keras adds it (inferbench.measure.training.ADAM)

            for group in self.opt.param_groups:
                group["eps"] = ADAM["epsilon"] / np.sqrt(1 - ADAM["beta_2"] ** self.steps)
        self.opt.step()
        return loss.detach()

    def loss_value(self, loss: Any) -> float:
        return float(loss.item())

    def set_learning_rate(self, rate: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = rate

    def gradients(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(prepared, self.module)
        loss.backward()
        grads = {n: p.grad.detach().float().cpu().numpy().copy() for n, p in self.params.items()}
        self.opt.zero_grad(set_to_none=True)
        return float(loss.item()), grads

    def weights(self) -> dict[str, np.ndarray]:
        return {n: p.detach().float().cpu().numpy().copy() for n, p in self.params.items()}

    def own(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The Keras-named arrays ported as the weights were (:func:`inferbench.registry.ports.build_torchvision`,
        whose layout changes are linear: they carry gradients and changes as they carry weights), the other Keras
        weights (moving statistics, epsilons) from the ported artifact."""
        if self.ported is None:
            raise RuntimeError(f"{self.model_name}: its own weights have no Keras arrays to port")
        with np.load(self.ported) as full:
            twin = ports.build_torchvision(self.model_name, {**{k: full[k] for k in full.files}, **arrays})
        return {n: p.detach().numpy().copy() for n, p in twin.named_parameters() if n in self.params}

    def details(self) -> dict[str, Any]:
        return {**super().details(), "inference_mode": False}

    def training_details(self) -> dict[str, Any]:
        return {"layout": "NHWC" if self.channels_last else "NCHW", "batch_norm_kernel": "torch",
                "step": "zero_grad+forward+cross_entropy+backward+optimizer.step", "compiled": self.compiled}


class TorchInductorTrainer(TorchTrainer):
    """torch-inductor's training: the twin channels-last and ``torch.compile``d (inductor; no weight freezing,
    which is for inference)."""

    name = "torch-inductor"

    def load(self, ctx: LoadContext) -> None:
        super().load(dataclasses.replace(ctx, options=dataclasses.replace(
            ctx.options, channels_last=True, torch_compile=True)))

    def details(self) -> dict[str, Any]:
        return {**super().details(), "compile_backend": "inductor"}
