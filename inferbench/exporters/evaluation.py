"""Accuracy on the user's labelled images (``--eval-dir``): the source's FP32 outputs on them (read and prepared by
:mod:`inferbench.registry.images`), against which every cell's top-1 / top-5 accuracy is paired
(:func:`inferbench.measure.parity.accuracy`). Exported only for runs with ``--eval-dir``, once per set (its digest);
sets made before are kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..registry import images
from ..registry.artifacts import ExportContext, evaluation_reference, source_kind
from ..registry.keras_models import load_keras
from ..registry.models import get_model
from ..registry.tasks import task
from .reference import predictor

#: The source's outputs on the labelled images are held whole, here and in every cell: at most this many bytes (a
#: YOLO head at 640 px is 2.8 MB an image; a classifier's 4 kB).
MAX_BYTES = 2**30


def bounded(chunks: Iterator[np.ndarray], images: int, model: str) -> Iterator[np.ndarray]:
    """``chunks`` (the outputs on the labelled images, a chunk at a time) as they come, once the first has shown
    that all of them fit :data:`MAX_BYTES`; a UsageError naming how many images would."""
    for i, chunk in enumerate(chunks):
        per_image = chunk[0].nbytes if len(chunk) else 0
        if i == 0 and per_image * images > MAX_BYTES:
            raise UsageError(f"--eval-dir: {model}'s outputs take {per_image / 2**20:.1f} MB an image, "
                             f"{per_image * images / 2**30:.1f} GiB for {images} images, held whole: give "
                             f"--eval-images {MAX_BYTES // per_image} or fewer")
        yield chunk


def check_classes(out: np.ndarray, es: Any, model: str) -> None:
    """A classifier's outputs on the labelled images are class scores, as many as the labels need; one line if not."""
    if out.ndim != 2 or out.shape[1] < 2:
        raise UsageError(f"--eval-dir: {model}'s outputs (shape {out.shape[1:]} an image) are no class scores to "
                         "measure accuracy on")
    if es.classes > out.shape[1]:
        raise UsageError(f"--eval-dir: the labels of {es.path} go up to {es.classes - 1}, but {model} has "
                         f"{out.shape[1]} classes (0-{out.shape[1] - 1})")


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
        chunks = (predict(x) for x in images.inputs(spec, images.items(es), ctx.resolution,
                                                    task(spec.task).whole_image))
        out = np.concatenate(list(bounded(chunks, es.images, spec.name)))
        if task(spec.task).classifier:  # a detector's labels are boxes: its task's accuracy reads them
            check_classes(out, es, spec.name)
        np.save(path, out)
    sets = ctx.sets(es.digest, evaluation_reference)  # made before, still there: kept
    return {"paths": [evaluation_reference(d) for d in sets], "variants": sets, "images": es.images}
