"""TensorFlow runners: ``tf`` (SavedModel serving function) and ``tfxla`` (the same under XLA).

XLA is switched on only for ``tfxla``, by ``tf.function(jit_compile=True)`` in its own process;
no global auto-jit flag is ever set, so it cannot leak into other frameworks' runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..registry.filecheck import check_savedmodel
from ..registry.keras_models import load_keras
from ..registry.outputs import LOGITS, host, natural
from . import keras_train
from .base import LoadContext, Runner
from .keras_train import KerasTraining


def setup_tensorflow(ctx: LoadContext) -> Any:
    """Import TensorFlow with the run's thread count and GPU memory growth; returns the module."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(int(ctx.setting.get("intra_op_threads", ctx.threads)))
    tf.config.threading.set_inter_op_parallelism_threads(int(ctx.setting.get("inter_op_threads", 1)))
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)  # so peak memory means something
    if ctx.device == "gpu" and not tf.config.list_physical_devices("GPU"):
        raise RuntimeError("TensorFlow sees no GPU (is the CUDA build of TensorFlow installed?)")
    if ctx.device == "gpu":  # TF runs FP32 convolutions on TF32 tensor cores by default: FP32 means FP32
        tf.config.experimental.enable_tensor_float_32_execution(False)
    return tf


def load_saved_model(path: str | Path) -> Any:
    """``tf.saved_model.load`` of ``path`` once its ops are read and found to be inference only
    (:func:`~inferbench.registry.filecheck.check_savedmodel`): nothing of it runs before."""
    import tensorflow as tf


    check_savedmodel(Path(path))
    return tf.saved_model.load(str(path))


def serving_function(loaded: Any) -> Any:
    """A loaded SavedModel's inference function on one batch: the ``serve`` endpoint Keras exports (its outputs as the
    model gives them: one tensor, a list, a mapping), else the ``serving_default`` signature of a SavedModel from
    elsewhere (its one input; its one output, or its several by name: :func:`serving_names`)."""
    if hasattr(loaded, "serve"):
        return lambda x: loaded.serve(x)  # the closure keeps the loaded object (and its variables) alive
    signature = loaded.signatures.get("serving_default")
    inputs = signature.structured_input_signature[1] if signature is not None else {}
    if signature is None or len(inputs) != 1:
        raise UsageError("the SavedModel has neither a 'serve' endpoint nor a 'serving_default' signature with "
                         "one input")
    (name,) = inputs
    if len(signature.structured_outputs) > 1:
        return lambda x: signature(**{name: x})  # the signature keeps ``loaded`` alive
    (output,) = signature.structured_outputs
    return lambda x: signature(**{name: x})[output]


def serving_names(loaded: Any) -> tuple[str, ...]:
    """The names of a SavedModel's outputs, in the order its exports keep: its ``serving_default`` signature's keys
    (``output_0``, ``output_1``... for a Keras model's list, in its order; a mapping's keys, sorted); one output is
    ``logits``."""
    signature = loaded.signatures.get("serving_default")
    keys = sorted(signature.structured_outputs, key=natural) if signature is not None else []
    return tuple(keys) if len(keys) > 1 else (LOGITS,)


class TfBase(Runner):
    jit = False

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """On the CPU: intra-op threads (the run's count, and 1). TensorFlow reads them once, at start-up: a worker
        each. (Inter-op threads {1, 2} measured within the noise here, 0.83-1.03x, at a TensorFlow worker each: not
        in the grid.)"""
        if device != "cpu" or threads == 1:
            return [{}], [{}]
        return [{}, {"intra_op_threads": 1}], [{}]

    def load(self, ctx: LoadContext) -> None:
        tf = self.tf = setup_tensorflow(ctx)
        self.device_name = "/GPU:0" if ctx.device == "gpu" else "/CPU:0"
        self.gpu = ctx.device == "gpu"
        loaded = load_saved_model(ctx.path)
        self._loaded = loaded  # keep the variables alive
        serve = serving_function(loaded)
        self.fn = tf.function(serve, jit_compile=True) if self.jit else serve

    def prepare(self, batch: np.ndarray) -> Any:
        with self.tf.device(self.device_name):
            return self.tf.identity(self.tf.constant(batch))

    def resident(self, samples: np.ndarray) -> Any:
        return self.prepare(samples)

    def gather(self, resident: Any, indices: np.ndarray) -> Any:
        with self.tf.device(self.device_name):
            return self.tf.gather(resident, self.tf.constant(indices))

    def placement(self) -> dict[str, Any]:
        return {"resident": True, "placement": f"TensorFlow tensor on {self.device_name}; each batch a tf.gather there"}

    def call(self, prepared: Any) -> Any:
        return self.fn(prepared)

    def synchronize(self, outputs: Any) -> None:
        if self.gpu:
            self.tf.test.experimental.sync_devices()

    def to_numpy(self, outputs: Any) -> Any:
        return host(outputs)

    def peak_device_memory_mb(self) -> float | None:
        if not self.gpu:
            return None
        return float(self.tf.config.experimental.get_memory_info("GPU:0")["peak"]) / 2**20

    def reset_peak_device_memory(self) -> None:
        if self.gpu:
            self.tf.config.experimental.reset_memory_stats("GPU:0")

    def details(self) -> dict[str, Any]:
        return {
            "sync": "tf.sync_devices" if self.gpu else "none-cpu",
            "jit_compile": self.jit,
            # XLA the shell asked for (--pass-env TF_XLA_FLAGS): auto-jit compiles graph-mode functions too
            "tf_xla_flags": os.environ.get("TF_XLA_FLAGS"),
            "auto_jit": "auto_jit" in (os.environ.get("TF_XLA_FLAGS") or ""),
            "intra_op_threads": self.tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": self.tf.config.threading.get_inter_op_parallelism_threads(),
            "tf32": self.tf.config.experimental.tensor_float_32_execution_enabled() if self.gpu else None,
        }


class TfRunner(TfBase):
    name = "tf"


class TfXlaRunner(TfBase):
    name = "tfxla"
    jit = True


class TapeTrainer(TfBase, KerasTraining):
    """TensorFlow's own training step on the Keras model: a ``tf.function`` computing the loss under a
    GradientTape and applying the gradients (Keras' optimizer), without XLA (``tf``) or with (``tfxla``)."""

    name = "tf"

    def load(self, ctx: LoadContext) -> None:
        tf = self.tf = setup_tensorflow(ctx)
        self.device_name = "/GPU:0" if ctx.device == "gpu" else "/CPU:0"
        self.gpu = ctx.device == "gpu"
        import keras

        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(f"Keras runs on {keras.backend.backend()}: a TensorFlow step needs it on TensorFlow")
        model = self.ready(load_keras(ctx.path), ctx.options)
        variables = model.trainable_variables
        self.optimizer = optimizer = keras_train.optimizer(ctx.options.optimizer)
        optimizer.build(variables)
        loss_fn = keras_train.loss_function()

        def step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        self.fn = tf.function(step, jit_compile=self.jit)

    def step(self, prepared: Any) -> Any:
        return self.fn(*prepared)

    def loss_value(self, loss: Any) -> float:
        return float(loss.numpy())

    def gradients(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        return keras_train.tf_gradients(self.model, *prepared)

    def training_details(self) -> dict[str, Any]:
        return {**super().training_details(), "step": "tf.function+GradientTape+apply_gradients"}


class TapeXlaTrainer(TapeTrainer):
    name = "tfxla"
    jit = True
