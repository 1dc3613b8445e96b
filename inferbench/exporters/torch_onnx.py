"""The ONNX export of a PyTorch program (a ``torchvision:``/``timm:`` model's, or the user's ``.pt2`` file), made by
torch's own exporter (``torch.onnx.export``, dynamo: the program's graph translated, not traced again): the input
named ``images``, each output by the name the reference declares, the batch dimension left as the program has it,
the weights inside the one file. ONNX Runtime, OpenVINO's ONNX route and TensorRT load it."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from ..registry.artifacts import REFERENCE_OUTPUTS, ExportContext
from ..registry.inputs import make_inputs
from ..registry.models import get_model
from ..registry.outputs import read_layout
from .onnx_stats import counted
from .torch_program import load_exported

INPUT = "images"


def export(ctx: ExportContext) -> dict[str, Any]:
    import torch

    spec = get_model(ctx.model)
    program = load_exported(ctx.path("pt2"))
    names = [o.name for o in read_layout(ctx.folder / REFERENCE_OUTPUTS)]
    out = ctx.path("onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.stem + ".part.onnx")
    batch = spec.fixed_batch or 2  # a program of a fixed batch takes only that
    example = torch.from_numpy(make_inputs(spec, batch, ctx.resolution, ctx.seed + 1))
    with contextlib.redirect_stdout(sys.stderr):  # its progress lines: never on the channel to the parent
        torch.onnx.export(program, (example,), str(part), dynamo=True, external_data=False, input_names=[INPUT],
                          output_names=names, verbose=False)
    part.replace(out)  # whole or not at all
    return {"paths": ["onnx"], "converter": f"torch.onnx.export (dynamo), torch {torch.__version__}",
            "model_stats": counted(out, ctx.resolution),
            "input_signature": {"shape": [spec.fixed_batch, *spec.input_shape(1, ctx.resolution)[1:]],
                                "dtype": "float32", "layout": spec.layout},
            "notes": []}
