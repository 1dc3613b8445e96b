"""INT8 for TensorRT: the ONNX export quantised as :mod:`inferbench.exporters.quantize_onnx` quantises it, with
symmetric pairs only — signed 8-bit activations and weights, zero points 0 —, which TensorRT's explicit quantisation
requires (``onnx-int8-sym/<digest>.onnx``). It runs in ONNX Runtime on a CPU too, which the tests use to check it."""

from __future__ import annotations

from typing import Any

from ..registry.artifacts import ExportContext
from . import quantize_onnx


def export(ctx: ExportContext) -> dict[str, Any]:
    return quantize_onnx.export(ctx, "onnx-int8-sym")
