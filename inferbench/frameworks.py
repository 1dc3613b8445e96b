"""Framework keys, as users type them, mapped lazily to runner classes.

Adding a framework = one runner module + one entry here. Nothing is imported until a child
process calls :func:`load_runner`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from .errors import UsageError


@dataclass(frozen=True)
class Framework:
    key: str
    runner: str  # "module:Class", imported only in the child that runs it
    artifact: str  # exporter kind whose artifact the runner loads
    packages: tuple[str, ...]  # import names that must be installed
    extra: str  # pip extra that installs them
    description: str
    devices: tuple[str, ...] = ("cpu", "gpu")
    precision: str = "fp32"
    parity: bool = True  # False: independent weights, parity not applicable
    precisions: tuple[str, ...] = ()  # other precisions it can run with --precision (besides its own)
    keras_backend: bool = False  # runs on the Keras backend chosen by --keras-backend

    def precision_for(self, requested: str | None) -> str:
        """The precision this framework runs at when the user asks for ``requested`` (None: its own)."""
        if requested is None or requested == self.precision:
            return self.precision
        if requested in self.precisions:
            return requested
        raise UsageError(f"{self.key} runs in {self.precision} only; --precision {requested} applies to: "
                         + ", ".join(k for k, fw in FRAMEWORKS.items() if requested in fw.precisions))


_TF = ("tensorflow", "keras")
_TORCH = ("torch",)

FRAMEWORKS: dict[str, Framework] = {
    fw.key: fw
    for fw in [
        Framework("keras-eager", "inferbench.runners.keras:KerasEagerRunner", "keras", _TF, "cpu",
                  "Keras model called eagerly, model(x, training=False): the eager baseline",
                  keras_backend=True),
        Framework("keras", "inferbench.runners.keras:KerasRunner", "keras", _TF, "cpu",
                  "Keras' compiled predict step (predict_on_batch), jit_compile=False", keras_backend=True),
        Framework("kerasxla", "inferbench.runners.keras:KerasXlaRunner", "keras", _TF, "cpu",
                  "Keras' compiled predict step (predict_on_batch), jit_compile=True (XLA; torch.compile on torch)",
                  keras_backend=True),
        Framework("tf", "inferbench.runners.tf:TfRunner", "savedmodel", ("tensorflow",), "cpu",
                  "TF SavedModel serving function (graph mode, no XLA)"),
        Framework("tfxla", "inferbench.runners.tf:TfXlaRunner", "savedmodel", ("tensorflow",), "cpu",
                  "the same SavedModel function under tf.function(jit_compile=True) (XLA)"),
        Framework("onnxrt", "inferbench.runners.onnxrt:OnnxRuntimeRunner", "onnx", ("onnxruntime",), "cpu",
                  "ONNX Runtime (tf2onnx export), all graph optimisations, provider chosen by device"),
        Framework("onnxrt-trt", "inferbench.runners.onnxrt:OnnxRuntimeTrtRunner", "onnx", ("onnxruntime",), "gpu",
                  "ONNX Runtime with its TensorRT execution provider (--precision fp16 for FP16)",
                  devices=("gpu",), precisions=("fp16",)),
        Framework("torch", "inferbench.runners.torch:TorchRunner", "torch", ("torch", "onnx2torch"), "cpu",
                  "PyTorch module converted from the ONNX export (identical weights), inference_mode",
                  precisions=("fp16", "bf16")),
        Framework("torch-native", "inferbench.runners.torch:TorchNativeRunner", "none",
                  ("torch", "torchvision"), "cpu",
                  "torchvision's implementation of the same architecture (own random weights)",
                  parity=False, precisions=("fp16", "bf16")),
        Framework("tensorrt-fp32", "inferbench.runners.tensorrt:TensorRTRunner", "tensorrt",
                  ("tensorrt", "torch"), "tensorrt", "TensorRT engine built from the ONNX export, FP32",
                  devices=("gpu",)),
        Framework("tensorrt-fp16", "inferbench.runners.tensorrt:TensorRTRunner", "tensorrt",
                  ("tensorrt", "torch"), "tensorrt", "TensorRT engine built from the ONNX export, FP16",
                  devices=("gpu",), precision="fp16"),
    ]
}


def get_framework(key: str) -> Framework:
    try:
        return FRAMEWORKS[key]
    except KeyError:
        raise UsageError(
            f"unknown framework {key!r}; valid frameworks: {', '.join(FRAMEWORKS)}, all"
        ) from None


def parse_frameworks(text: str, device: str) -> list[Framework]:
    """``all`` (every framework that can run on ``device``) or a comma list of keys."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise UsageError("--framework is empty")
    chosen: list[Framework] = []
    for key in keys:
        if key == "all":
            chosen.extend(fw for fw in FRAMEWORKS.values() if device in fw.devices)
            continue
        fw = get_framework(key)
        if device not in fw.devices:
            raise UsageError(f"{key} needs an NVIDIA GPU (--device gpu); it cannot run on the {device}")
        chosen.append(fw)
    return list(dict.fromkeys(chosen))  # keep order, drop repeats


def for_model(frameworks: list[Framework], model: Any, named: str) -> list[Framework]:
    """The frameworks that have an implementation of ``model``: ``torch-native`` needs torchvision's.
    Left out of ``all`` quietly; named explicitly (in ``named``, the user's list), it is an error."""
    if model.torchvision_builder is not None:
        return frameworks
    if "torch-native" in [k.strip() for k in named.split(",")]:
        raise UsageError(f"torch-native: torchvision has no implementation of {model.name}")
    return [fw for fw in frameworks if fw.key != "torch-native"]


def missing_packages(fw: Framework) -> list[str]:
    """Import names of ``fw``'s packages that are not installed (checked without importing them)."""
    return [pkg for pkg in fw.packages if importlib.util.find_spec(pkg) is None]


def unavailable_reason(fw: Framework, device: str) -> str | None:
    """Why ``fw`` cannot run here, or None if it can."""
    if device not in fw.devices:
        return "needs an NVIDIA GPU"
    missing = missing_packages(fw)
    if missing:
        return f"{', '.join(missing)} not installed: pip install -e \".[{fw.extra}]\""
    return None


def load_runner(fw: Framework) -> type:
    module_name, _, cls = fw.runner.partition(":")
    return getattr(importlib.import_module(module_name), cls)
