"""The source artifact: the reference Keras model as a ``.keras`` file (built from the registry, or the
user's own file), plus the reference outputs of the 16 parity inputs."""

from __future__ import annotations

from typing import Any

from ..models import build_keras_model, get_model
from . import ExportContext
from .reference import predictor, write_parity_reference


def export(ctx: ExportContext) -> dict[str, Any]:
    spec = get_model(ctx.model)
    model = build_keras_model(spec, ctx.resolution, ctx.weights, ctx.seed)
    ctx.path("keras").parent.mkdir(parents=True, exist_ok=True)
    model.save(ctx.path("keras"))
    facts = write_parity_reference(ctx, spec, predictor(spec, ctx, model))
    return {
        "paths": ["keras", "reference"],
        "input_signature": {"shape": [None, ctx.resolution, ctx.resolution, 3], "dtype": "float32",
                            "layout": "NHWC"},
        "reference": facts,
        "notes": [],
    }
