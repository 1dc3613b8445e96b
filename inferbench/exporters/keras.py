"""The source artifact: the reference Keras model as a ``.keras`` file, plus the reference outputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..models import build_keras_model, get_model, make_inputs
from ..parity import DegenerateReference, check_reference
from . import PARITY_INPUTS, REFERENCE_INPUTS, REFERENCE_LOGITS, ExportContext


def export(ctx: ExportContext) -> dict[str, Any]:
    from ..errors import UsageError

    spec = get_model(ctx.model)
    model = build_keras_model(spec, ctx.resolution, ctx.weights, ctx.seed)
    ctx.path("keras").parent.mkdir(parents=True, exist_ok=True)
    model.save(ctx.path("keras"))

    inputs = make_inputs(spec, PARITY_INPUTS, ctx.resolution, ctx.seed + 2)
    logits = np.asarray(model(inputs, training=False), dtype=np.float32)
    try:
        facts = check_reference(logits)
    except DegenerateReference as exc:
        raise UsageError(f"{exc}: these weights cannot tell a correct export from a broken one") from None
    (ctx.folder / "reference").mkdir(exist_ok=True)
    np.save(ctx.folder / REFERENCE_INPUTS, inputs)
    np.save(ctx.folder / REFERENCE_LOGITS, logits)
    return {
        "paths": ["keras", "reference"],
        "input_signature": {"shape": [None, ctx.resolution, ctx.resolution, 3], "dtype": "float32",
                            "layout": "NHWC"},
        "reference": facts,
        "notes": [],
    }
