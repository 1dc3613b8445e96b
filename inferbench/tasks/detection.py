"""Detection from a raw anchor-free head in YOLOv8's layout: one output of ``[4 + classes, anchors]`` an image, box
centre x, centre y, width and height in input pixels, then each class's score (already a probability). Parity judges
the boxes (in pixels) and the scores apart, before anything runs after the call; then every runtime's head goes
through the same decoding and suppression (:mod:`.nms`), and two runtimes' detections are matched box by box."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..registry.outputs import Output
from . import nms

#: Two detections are the same where their class is and their boxes overlap by at least this (COCO's loosest).
MATCH_IOU = 0.5


def kinds(outputs: Sequence[Output], where: str) -> list[Output]:
    if len(outputs) != 1 or len(outputs[0].shape) != 2 or outputs[0].shape[0] < 5:
        shapes = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
        raise UsageError(f"{where}: --task detection reads one raw head of [4 + classes, anchors] an image (YOLOv8's "
                         f"layout); this model gives {shapes} (--task raw compares them as numbers)")
    return [Output(outputs[0].name, outputs[0].shape, "values")]


def _split(head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A batch's head [N, 4 + C, A] as boxes [N, A, 4] (centre and size, pixels) and scores [N, A, C]."""
    head = np.asarray(head)
    return np.swapaxes(head[:, :4, :], 1, 2), np.swapaxes(head[:, 4:, :], 1, 2)


def parts(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> dict[str, tuple[np.ndarray, str]]:
    name = outputs[0].name
    boxes, scores = _split(arrays[name])
    return {f"{name}.boxes": (boxes, "boxes"), f"{name}.scores": (scores, "values")}


def postprocess(arrays: dict[str, np.ndarray], outputs: Sequence[Output],
                settings: nms.Settings = nms.DEFAULT) -> list[Any] | None:
    """Each image's detections: boxes (x1, y1, x2, y2 in pixels), scores and classes, best first."""
    boxes, scores = _split(arrays[outputs[0].name])
    out = []
    for b, s in zip(boxes, scores):
        corners, best, cls = nms.xyxy(b), s.max(axis=1), s.argmax(axis=1)
        keep = nms.suppress(corners, best, cls, settings)
        out.append({"boxes": corners[keep], "scores": best[keep], "classes": cls[keep]})
    return out


def agreement(reference: list[Any], candidate: list[Any]) -> dict[str, Any]:
    """Detections matched one to one, the reference's best first: same class, boxes overlapping by at least
    :data:`MATCH_IOU`. ``matched`` of the larger of the two counts (1 where neither found anything), the mean overlap
    and the largest score difference of the matched pairs."""
    matched = boxes_ref = boxes_cand = 0
    overlaps: list[float] = []
    score_diff = 0.0
    for ref, cand in zip(reference, candidate):
        boxes_ref, boxes_cand = boxes_ref + len(ref["scores"]), boxes_cand + len(cand["scores"])
        free = np.ones(len(cand["scores"]), dtype=bool)
        for i in np.argsort(-ref["scores"], kind="stable"):
            options = np.flatnonzero(free & (cand["classes"] == ref["classes"][i]))
            if not len(options):
                continue
            overlap = nms.iou(ref["boxes"][i], cand["boxes"][options])
            j = int(np.argmax(overlap))
            if overlap[j] >= MATCH_IOU:
                free[options[j]] = False
                matched += 1
                overlaps.append(float(overlap[j]))
                score_diff = max(score_diff, abs(float(ref["scores"][i]) - float(cand["scores"][options[j]])))
    larger = max(boxes_ref, boxes_cand)
    return {"method": f"boxes matched at IoU >= {MATCH_IOU:g} and the same class, after {nms.DEFAULT.said()}",
            "images": len(reference), "boxes_reference": boxes_ref, "boxes_candidate": boxes_cand,
            "matched": matched, "matched_share": matched / larger if larger else 1.0,
            "mean_iou": float(np.mean(overlaps)) if overlaps else None, "max_score_difference": score_diff}


def said(agreement: dict[str, Any]) -> str:
    return (f"its detections after the shared suppression match FP32's on {agreement['matched_share']:.1%} of "
            f"{max(agreement['boxes_reference'], agreement['boxes_candidate'])} boxes over {agreement['images']} "
            "reference inputs")
