"""Accuracy on the user's labelled images (``--eval-dir``): the source's FP32 outputs on them (read and prepared by
:mod:`inferbench.registry.images`), against which every cell's top-1 / top-5 accuracy is paired
(:func:`inferbench.measure.parity.accuracy`). Exported only for runs with ``--eval-dir``, once per set (its digest);
sets made before are kept."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..registry import images
from ..registry.artifacts import ExportContext, evaluation_reference, source_kind
from ..registry.keras_models import load_keras
from ..registry.models import get_model
from ..registry.tasks import task
from .reference import predictor


def export(ctx: ExportContext) -> dict[str, Any]:
    es = ctx.eval_set
    if es is None:
        raise RuntimeError("the evaluation export needs the labelled images (--eval-dir)")
    spec = get_model(ctx.model)
    (ctx.folder / "evaluation").mkdir(exist_ok=True)
    path = ctx.folder / evaluation_reference(es.digest)
    if not path.exists():
        model = load_keras(ctx.path("keras")) if source_kind(spec) == "keras" else None
        predict = predictor(spec, ctx, model)
        out = np.concatenate([predict(x) for x in images.inputs(spec, images.items(es), ctx.resolution,
                                                                es.layout == "coco")])
        if not task(spec.task).classifier:
            pass  # a detector's labels are boxes: its task's accuracy reads them
        elif out.ndim != 2 or out.shape[1] < 2:
            raise UsageError(f"--eval-dir: {spec.name}'s outputs (shape {out.shape[1:]} an image) are no class "
                             "scores to measure accuracy on")
        if es.classes > out.shape[1]:
            raise UsageError(f"--eval-dir: the labels of {es.path} go up to {es.classes - 1}, but {spec.name} has "
                             f"{out.shape[1]} classes (0-{out.shape[1] - 1})")
        np.save(path, out)
    sets = ctx.sets(es.digest, evaluation_reference)  # made before, still there: kept
    return {"paths": [evaluation_reference(d) for d in sets], "variants": sets, "images": es.images}
