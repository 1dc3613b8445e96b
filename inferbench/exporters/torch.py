"""A PyTorch module with weights identical to the ONNX export (onnx2torch), saved whole."""

from __future__ import annotations

from typing import Any

from . import ExportContext


def export(ctx: ExportContext) -> dict[str, Any]:
    import onnx
    import onnx2torch
    import torch

    module = onnx2torch.convert(onnx.load(ctx.path("onnx"))).eval()
    out = ctx.folder / "torch" / "model.pt"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(module, out)
    return {
        "paths": ["torch"],
        "input_signature": {"shape": [None, ctx.resolution, ctx.resolution, 3], "dtype": "float32",
                            "layout": "NHWC (as the ONNX graph)"},
        "notes": ["loading needs onnx2torch installed (the module is pickled whole)"],
    }
