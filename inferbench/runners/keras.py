"""Keras runners: ``keras-eager`` (model called eagerly), ``keras`` and ``kerasxla`` (Keras' compiled
predict step without / with XLA), all loading the same ``.keras`` artifact."""

from __future__ import annotations

from typing import Any

from .base import LoadContext
from .tf import TfBase, setup_tensorflow


class KerasEagerRunner(TfBase):
    name = "keras-eager"

    def load(self, ctx: LoadContext) -> None:
        self.tf = setup_tensorflow(ctx)
        self.device_name = "/GPU:0" if ctx.device == "gpu" else "/CPU:0"
        self.gpu = ctx.device == "gpu"
        import keras

        self.model = keras.saving.load_model(ctx.artifact, compile=False)

    def call(self, prepared: Any) -> Any:
        return self.model(prepared, training=False)


class KerasRunner(KerasEagerRunner):
    name = "keras"
    jit = False

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        # jit_compile must be explicit: Keras' "auto" may pick XLA on its own.
        self.model.compile(jit_compile=self.jit)
        if bool(self.model.jit_compile) != self.jit:
            raise RuntimeError(f"Keras resolved jit_compile={self.model.jit_compile}, wanted {self.jit}")

    def call(self, prepared: Any) -> Any:
        return self.model.predict_on_batch(prepared)

    def synchronize(self, outputs: Any) -> None:
        """predict_on_batch returns a NumPy array: the device work is finished when it returns."""

    def details(self) -> dict[str, Any]:
        out = super().details()
        out["sync"] = "predict_on_batch returns host NumPy (includes the device-to-host copy of the logits)"
        out["jit_compile"] = bool(self.model.jit_compile)
        return out


class KerasXlaRunner(KerasRunner):
    name = "kerasxla"
    jit = True
