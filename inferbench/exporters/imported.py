"""A model file in a format other than Keras (``--model model.onnx`` or a SavedModel folder), imported as
the artifact of its kind: copied into the cache folder as it is, plus the reference outputs of the 16
parity inputs from its own framework. Every other artifact is made from it where a converter can."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..registry.artifacts import ExportContext
from ..registry.models import get_model
from .reference import predictor, write_parity_reference


def export(ctx: ExportContext) -> dict[str, Any]:
    spec = get_model(ctx.model)
    assert spec.source is not None, "only a model file is imported"
    source, target = Path(spec.source.path), ctx.path(spec.source.format)
    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copyfile(source, target)
    facts = write_parity_reference(ctx, spec, predictor(spec, ctx))
    return {
        "paths": [target.relative_to(ctx.folder).parts[0], "reference"],
        "input_signature": {"shape": [spec.fixed_batch, *spec.input_shape(1, ctx.resolution)[1:]],
                            "dtype": "float32", "layout": spec.layout},
        "imported_from": spec.source.path,
        "reference": facts,
        "notes": [],
    }
