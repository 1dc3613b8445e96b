"""A model file in a format other than Keras (``--model model.onnx`` or a SavedModel folder), imported as
the artifact of its kind: copied into the cache folder as it is, plus the reference outputs of the 16
parity inputs from its own framework. Every other artifact is made from it where a converter can."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..base.size import Size, hw
from ..registry.artifacts import ExportContext
from ..registry.models import get_model
from ..registry.sideinputs import bind, split
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
    notes = bound_sides(target, spec.source.side_inputs, ctx.resolution)
    facts = write_parity_reference(ctx, spec, predictor(spec, ctx))
    return {
        "paths": [target.relative_to(ctx.folder).parts[0], "reference"],
        "input_signature": {"shape": [spec.fixed_batch, *spec.input_shape(1, ctx.resolution)[1:]],
                            "dtype": "float32", "layout": spec.layout},
        "imported_from": spec.source.path,
        "reference": facts,
        "notes": notes,
    }


def bound_sides(target: Path, said: tuple[str, ...], resolution: Size) -> list[str]:
    """An ONNX file's side inputs bound into the copy's graph (registry/sideinputs.py), each said as a note."""
    if not said:
        return []
    import onnx

    model = onnx.load(str(target), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    _, sides = split([i for i in model.graph.input if i.name not in inits], target)
    bind(target, tuple(sides), *hw(resolution))
    return [f"side input {s.phrase()}: {s.value(*hw(resolution))}" for s in sides]
