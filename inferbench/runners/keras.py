"""Keras runners: ``keras-eager`` (model called eagerly), ``keras`` and ``kerasxla`` (Keras' compiled
predict step without / with ``jit_compile``), all loading the same ``.keras`` artifact.

Keras 3 runs on TensorFlow (default), JAX or torch (``--keras-backend``; the child's
``KERAS_BACKEND`` is set before Keras is imported). ``jit_compile=True`` means XLA on TensorFlow
and JAX, and ``torch.compile`` on torch; the record says which (``runner.compiler``).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

from ..base.errors import MissingDependency
from ..exporters.reference import rebuilt
from ..measure.parity import pick_blocks, relative_l2
from ..registry.keras_models import load_keras
from ..registry.outputs import host
from . import keras_train
from .base import LoadContext
from .jax import setup_jax
from .keras_train import KerasTraining
from .tf import TfBase, setup_tensorflow
from .torch import cuda_uuid, strict_fp32

COMPILER = {"tensorflow": "XLA", "jax": "XLA", "torch": "torch.compile"}


class KerasEagerRunner(TfBase):
    name = "keras-eager"

    def load(self, ctx: LoadContext) -> None:
        self.backend = os.environ.get("KERAS_BACKEND", "tensorflow")
        self.gpu = ctx.device == "gpu"
        if self.backend == "tensorflow":
            self.tf = setup_tensorflow(ctx)
            self.device_name = "/GPU:0" if self.gpu else "/CPU:0"
        elif importlib.util.find_spec(self.backend) is None:
            raise MissingDependency(self.backend, "torch" if self.backend == "torch" else "jax",
                                    f"Keras' {self.backend} backend")
        elif self.backend == "torch":
            import torch


            torch.set_num_threads(ctx.threads)
            self.torch = torch
            self.tf32 = strict_fp32(torch, ctx)
        else:
            self.jax, self.tf32 = setup_jax(self.gpu)
        self.threads = ctx.threads
        import keras

        if keras.backend.backend() != self.backend:
            raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not {self.backend}")
        self.keras = keras
        self.model = load_keras(ctx.path)

    def prepare(self, batch: np.ndarray) -> Any:
        if self.backend == "tensorflow":
            return super().prepare(batch)
        if self.backend == "jax":
            return self.jax.device_put(batch)
        return self.torch.from_numpy(batch).to("cuda:0" if self.gpu else "cpu")

    def gather(self, resident: Any, indices: np.ndarray) -> Any:
        if self.backend == "tensorflow":
            return super().gather(resident, indices)
        if self.backend == "jax":
            return resident[self.jax.device_put(indices)]
        return resident.index_select(0, self.torch.as_tensor(indices, device=resident.device))

    def placement(self) -> dict[str, Any]:
        if self.backend == "tensorflow":
            return super().placement()
        where = {"jax": "JAX array on " + str(self.jax.devices()[0]), "torch": "torch tensor on " +
                 ("cuda:0" if self.gpu else "cpu")}[self.backend]
        return {"resident": True, "placement": f"{where} (NHWC, float32); each batch an index select there"}

    def call(self, prepared: Any) -> Any:
        return self.model(prepared, training=False)

    def synchronize(self, outputs: Any) -> None:
        if self.backend == "tensorflow":
            super().synchronize(outputs)
        elif self.backend == "jax":
            self.jax.block_until_ready(outputs)  # one array, or a model's several
        elif self.gpu:
            self.torch.cuda.synchronize()

    def to_numpy(self, outputs: Any) -> Any:
        return host(outputs, lambda v: np.asarray(self.keras.ops.convert_to_numpy(v)))

    def block_errors(self, inputs: np.ndarray) -> dict[str, Any] | None:
        """Each block's output (:func:`keras_blocks`) as this runner computes the model (eager, or Keras' compiled
        predict step with its jit_compile) against the same model rebuilt in FP64, called eagerly: relative L2."""
        blocks = keras_blocks(self.keras, self.model)
        if len(blocks) < 2:
            return None

        def probe(model: Any) -> Any:
            return self.keras.Model(model.inputs, [model.get_layer(name).output for name in blocks])

        mine = probe(self.model)
        jit = getattr(self, "jit", None)
        if jit is None:  # keras-eager
            got = mine(inputs, training=False)
        else:
            mine.compile(jit_compile=jit)
            got = mine.predict_on_batch(inputs)
        exact = probe(rebuilt(self.model, "float64"))(inputs.astype(np.float64), training=False)
        numpy = self.keras.ops.convert_to_numpy
        return {"names": list(blocks), "errors": [relative_l2(numpy(a), numpy(b)) for a, b in zip(got, exact)]}

    def peak_device_memory_mb(self) -> float | None:
        if self.backend == "tensorflow":
            return super().peak_device_memory_mb()
        if self.backend == "torch" and self.gpu:
            return float(self.torch.cuda.max_memory_allocated()) / 2**20
        if self.backend == "jax" and self.gpu:  # since the process started: JAX has no reset
            return float(self.jax.devices()[0].memory_stats().get("peak_bytes_in_use", 0)) / 2**20 or None
        return None

    def reset_peak_device_memory(self) -> None:
        if self.backend == "tensorflow":
            super().reset_peak_device_memory()
        elif self.backend == "torch" and self.gpu:
            self.torch.cuda.reset_peak_memory_stats()

    def device_uuid(self) -> str | None:
        if self.backend == "torch" and self.gpu:
            return cuda_uuid(self.torch)
        return None

    def details(self) -> dict[str, Any]:
        if self.backend == "tensorflow":
            out = super().details()
        else:
            sync = {"jax": "jax.block_until_ready", "torch": "torch.cuda.synchronize" if self.gpu else "none-cpu"}
            out = {"sync": sync[self.backend], "intra_op_threads": self.threads, "jit_compile": False,
                   "tf32": self.tf32}
        out["keras_backend"] = self.backend
        return out


def keras_blocks(keras: Any, model: Any) -> list[str]:
    """A functional Keras model's blocks in network order, by layer name: its ``Add`` layers, else its layers
    (:func:`inferbench.measure.parity.pick_blocks`), then its last layer."""
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    adds = [layer for layer in layers[:-1] if isinstance(layer, keras.layers.Add)]
    return [layer.name for layer in pick_blocks(adds, layers[:-1])] + [layers[-1].name] if layers else []


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
        out["sync"] = "predict_on_batch-host"  # returns host NumPy: the device-to-host copy is included
        out["jit_compile"] = bool(self.model.jit_compile)
        out["compiler"] = COMPILER[self.backend] if self.jit else None
        return out


class KerasXlaRunner(KerasRunner):
    name = "kerasxla"
    jit = True


class KerasEagerTrainer(KerasEagerRunner, KerasTraining):
    """Keras training, ``compile(run_eagerly=True)`` and ``train_on_batch``: the eager baseline."""

    name = "keras-eager"
    eager, jit = True, False

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        model = self.ready(self.model, ctx.options)
        model.compile(optimizer=keras_train.optimizer(ctx.options.optimizer), loss=keras_train.loss_function(),
                      run_eagerly=self.eager, jit_compile=self.jit)
        if not self.eager and bool(model.jit_compile) != self.jit:
            raise RuntimeError(f"Keras resolved jit_compile={model.jit_compile}, wanted {self.jit}")

    def step(self, prepared: Any) -> Any:
        """Keras' own train step; it returns the loss as a host number (the step has finished)."""
        return self.model.train_on_batch(*prepared)

    def gradients(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        x, y = prepared
        if self.backend == "tensorflow":
            return keras_train.tf_gradients(self.model, x, y)
        named = keras_train.trainable(self.model)
        if self.backend == "torch":
            for _, v in named:
                v.value.grad = None
            loss = keras_train.loss_function()(y, self.model(x, training=True))
            loss.backward()
            grads = {n: v.value.grad.detach().cpu().numpy().copy() for n, v in named}
            for _, v in named:
                v.value.grad = None
            return float(loss.item()), grads
        values = [v.value for _, v in named]
        frozen = [v.value for v in self.model.non_trainable_variables]

        def loss_of(trainable: Any) -> Any:
            out, _ = self.model.stateless_call(trainable, frozen, x, training=True)
            return keras_train.loss_function()(y, out)

        loss, grads = self.jax.value_and_grad(loss_of)(values)
        return float(loss), {n: np.asarray(g) for (n, _), g in zip(named, grads)}

    def details(self) -> dict[str, Any]:
        out = super().details()
        out.update(sync="train_on_batch-host", jit_compile=bool(self.model.jit_compile),
                   compiler=COMPILER[self.backend] if self.jit else None, run_eagerly=self.eager)
        return out

    def training_details(self) -> dict[str, Any]:
        return {**super().training_details(), "step": "train_on_batch"}


class KerasTrainer(KerasEagerTrainer):
    """Keras' compiled train step, ``jit_compile=False``."""

    name = "keras"
    eager = False


class KerasXlaTrainer(KerasTrainer):
    """Keras' compiled train step, ``jit_compile=True`` (XLA; torch.compile on torch)."""

    name = "kerasxla"
    jit = True
