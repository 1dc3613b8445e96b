"""The ``jax`` runner: ``jax.jit`` of the Keras model's stateless call (XLA), its weights and inputs on the device,
outputs left there until ``block_until_ready``: JAX as its own docs time it.

``keras``/``kerasxla`` on ``--keras-backend jax`` go through Keras' ``predict_on_batch`` (a host NumPy array back from
every call): the seeds' Keras-with-XLA path, 3.8x slower than this on an H100 at batch 1 (1.63 ms jitted against
6.2 ms). Both load the same ``.keras`` artifact; this one sets ``KERAS_BACKEND=jax`` in its worker itself.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import numpy as np

from ..base.errors import MissingDependency
from ..registry.keras_models import load_keras
from ..registry.outputs import host
from .base import LoadContext, Runner


def setup_jax(gpu: bool) -> tuple[Any, bool | None]:
    """JAX imported on the run's device; returns it and whether TF32 is allowed (None on the CPU). XLA's GPU default
    for FP32 convolutions and products is TF32: FP32 means FP32."""
    if importlib.util.find_spec("jax") is None:
        raise MissingDependency("jax", "jax", "JAX")
    import jax

    platform = jax.devices()[0].platform
    if gpu and platform != "gpu":
        raise RuntimeError(f"JAX runs on {platform}, not on the GPU (is JAX's CUDA plugin installed? "
                           "pip install -U 'jax[cuda13]')")
    if gpu:
        jax.config.update("jax_default_matmul_precision", "highest")
    return jax, (False if gpu else None)


def xla_cpu_flags(setting: dict[str, Any]) -> list[str]:
    """XLA:CPU's own threading settings for a load-time ``setting`` of :meth:`JaxRunner.tuning_grid`: its Eigen
    kernels single-threaded (``multi_thread_eigen``: False) and its intra-op pool's size (``intra_op_threads``). XLA
    reads them from ``XLA_FLAGS`` once, when JAX starts; an unknown flag aborts the process, so only these two."""
    flags = []
    if setting.get("multi_thread_eigen") is False:
        flags.append("--xla_cpu_multi_thread_eigen=false")
    if setting.get("intra_op_threads"):
        flags.append(f"intra_op_parallelism_threads={int(setting['intra_op_threads'])}")
    return flags


class JaxRunner(Runner):
    name = "jax"

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """On the CPU: XLA's thread pool as JAX sizes it (the worker's --threads CPUs), one thread, and its Eigen
        kernels single-threaded; each read when JAX starts: a worker each. (On a shared 2-core machine the default
        measured 70.6 ms where ONNX Runtime took 7.4: XLA's pool spins against other work, as torch's and ONNX
        Runtime's defaults did before they were tuned.)"""
        if device != "cpu":
            return [{}], [{}]
        return [{}, *([{"intra_op_threads": 1}] if threads > 1 else []), {"multi_thread_eigen": False}], [{}]

    def load(self, ctx: LoadContext) -> None:
        os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported in this worker
        self.cpus, self.xla_flags = None, xla_cpu_flags(ctx.setting) if ctx.device == "cpu" else []
        if ctx.device == "cpu":  # XLA:CPU sizes its thread pool by the CPUs it may use: --threads of them
            allowed = sorted(os.sched_getaffinity(0))
            if ctx.threads < len(allowed):
                os.sched_setaffinity(0, allowed[:ctx.threads])
            self.cpus = min(ctx.threads, len(allowed))
        if self.xla_flags:  # read once, when JAX starts: a load-time setting has a worker of its own
            if "jax" in sys.modules:
                raise RuntimeError("jax: XLA's CPU settings must be set before JAX is imported in this worker")
            os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *self.xla_flags]).strip()
        self.jax, self.tf32 = setup_jax(ctx.device == "gpu")
        import keras

        if keras.backend.backend() != "jax":
            raise RuntimeError(f"Keras runs on {keras.backend.backend()} in this worker, not on JAX")
        jax = self.jax
        self.device = jax.devices()[0]
        model = load_keras(ctx.path)
        self.params = jax.device_put(([v.value for v in model.trainable_variables],
                                      [v.value for v in model.non_trainable_variables]), self.device)

        def infer(params: Any, x: Any) -> Any:
            out, _ = model.stateless_call(params[0], params[1], x, training=False)
            return out

        self.fn = jax.jit(infer)
        self.take = jax.jit(lambda samples, indices: samples[indices])
        self.timed = (ctx.model.input_shape(ctx.batch_size, ctx.resolution), ctx.batch_size) if ctx.model else None

    def prepare(self, batch: np.ndarray) -> Any:
        return self.jax.device_put(batch, self.device)

    def resident(self, samples: np.ndarray) -> Any:
        return self.prepare(samples)

    def gather(self, resident: Any, indices: np.ndarray) -> Any:
        return self.take(resident, self.jax.device_put(indices, self.device))

    def placement(self) -> dict[str, Any]:
        return {"resident": True,
                "placement": f"JAX array on {self.device} (NHWC, float32); each batch a jitted index select there"}

    def call(self, prepared: Any) -> Any:
        return self.fn(self.params, prepared)

    def synchronize(self, outputs: Any) -> None:
        self.jax.block_until_ready(outputs)  # one array, or a model's several

    def to_numpy(self, outputs: Any) -> Any:
        return host(outputs)

    def peak_device_memory_mb(self) -> float | None:
        if self.device.platform != "gpu":
            return None
        stats = self.device.memory_stats() or {}  # since the process started: JAX has no reset
        return float(stats.get("peak_bytes_in_use", 0)) / 2**20 or None

    def details(self) -> dict[str, Any]:
        return {"sync": "jax.block_until_ready", "compiler": "XLA", "jit": "jax.jit(stateless_call)",
                "keras_backend": "jax", "platform": self.device.platform, "tf32": self.tf32,
                "intra_op_threads": self.cpus, "xla_cpu_flags": self.xla_flags or None,
                "threads_note": "XLA's own thread pool, the worker bound to that many CPUs (sched_setaffinity)"
                if self.cpus else None,
                "jax": self.jax.__version__, "runtime_cost": self.runtime_cost()}

    def runtime_cost(self) -> dict[str, Any]:
        """XLA's own cost analysis of the compiled call at the cell's batch size (the executable the cell timed, from
        JAX's cache: no second compilation), per image: the bytes its fused kernels access and its FLOPs."""
        if self.timed is None:  # loaded without a model's spec (a bare file): no shape to ask XLA about
            return {"by": "XLA cost analysis", "why": "no input shape known"}
        shape, batch = self.timed
        try:
            found = self.fn.lower(self.params, self.jax.ShapeDtypeStruct(shape, np.float32)).compile().cost_analysis()
        except Exception as exc:  # noqa: BLE001 - a backend without a cost model: the row goes without
            return {"by": "XLA cost analysis", "why": f"{type(exc).__name__}: {str(exc)[:160]}"}
        found = (found[0] if found else {}) if isinstance(found, list) else found or {}
        moved, flops = found.get("bytes accessed"), found.get("flops")
        return {"by": "XLA cost analysis", "bytes_per_image": moved / batch if moved else None,
                "flops_per_image": flops / batch if flops else None}
