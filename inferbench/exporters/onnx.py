"""ONNX via tf2onnx (Keras' own ``export(format="onnx")``), with a dynamic batch dimension.

tf2onnx's transpose optimiser logs internal ``ValueError`` tracebacks on these models and then
skips that optimisation pass; the model it writes is valid (and the parity gate checks it). The
tracebacks go to ``onnx/converter.log`` instead of the user's terminal.
"""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Any

import numpy as np

from . import REFERENCE_INPUTS, ExportContext


def export(ctx: ExportContext) -> dict[str, Any]:
    import keras
    import onnx

    out = ctx.path("onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.parent / "converter.log"
    handler = logging.FileHandler(log_path, mode="w")
    tf2onnx_logger = logging.getLogger("tf2onnx")
    tf2onnx_logger.addHandler(handler)
    tf2onnx_logger.propagate = False
    try:
        model = keras.saving.load_model(ctx.path("keras"), compile=False)
        model(np.load(ctx.folder / REFERENCE_INPUTS)[:1])  # export needs a model that has been called
        with contextlib.redirect_stdout(io.StringIO()):
            model.export(out, format="onnx")
    finally:
        tf2onnx_logger.removeHandler(handler)
        handler.close()

    proto = onnx.load(out)
    for value in list(proto.graph.input) + list(proto.graph.output):  # name the dynamic dimension
        dim = value.type.tensor_type.shape.dim[0]
        if not dim.dim_value:
            dim.dim_param = "batch"
    onnx.checker.check_model(proto)
    onnx.save(proto, out)

    notes = []
    log_text = log_path.read_text() if log_path.exists() else ""
    if "Traceback" in log_text:
        notes.append(
            f"tf2onnx logged {log_text.count('Traceback')} internal traceback(s) (a skipped optimisation "
            f"pass, not a failed export); see {log_path}"
        )
    return {
        "paths": ["onnx"],
        "input_signature": {"name": proto.graph.input[0].name,
                            "shape": ["batch", ctx.resolution, ctx.resolution, 3],
                            "dtype": "float32", "layout": "NHWC", "opset": proto.opset_import[0].version},
        "notes": notes,
    }
