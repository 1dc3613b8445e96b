"""Detections a graph computes whole, its suppression inside (torchvision's Faster R-CNN as
:mod:`inferbench.exporters.torch_rcnn` exports it): ``boxes`` ``[cap, 4]`` (x1, y1, x2, y2 in input pixels),
``scores`` ``[cap]`` and ``labels`` ``[cap]`` an image, best first, padded to the cap with rows of score 0. Nothing
runs after the call: the detections are read as they are, the padded rows left out.

Parity judges the same detections on both sides, whatever order they came in (:func:`align`): two detections whose
scores differ by less than the runtimes' rounding may swap places, and the arithmetic is the same. Each of the
reference's detections is paired with the runtime's of its class that overlaps it most (IoU >= 0.5), and parity
compares the pairs: the boxes in pixels, the scores and labels as numbers. A suppression is discontinuous: where a
score or an overlap lies within rounding of its threshold, equal arithmetic may keep a box or drop it, or keep one of
two overlapping boxes of tied scores in one runtime and the other in the other. So a detection only one side kept is
left out where it is at a boundary (its score within :data:`BOUNDARY` of the batch's lowest, the score floor, or of
the other side's lowest in an image where that side kept its cap full), and the other lone detections and the pairs
whose boxes are apart (:data:`TIE_PX`) are left out while, together, they are at most :data:`TIES` of the
detections; more is no rounding but a broken export (a wrong decoding moves every box), and every one of them fails
parity, naming the output. A padding row (score 0) that is not all zeros fails too. The detections are matched box
by box (``after_postprocess``) as the other layouts' are after their suppression."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..registry.outputs import Output
from . import nms

#: The outputs, by the names torchvision's detectors give them.
NAMES = ("boxes", "scores", "labels")
#: What kept the detections, as the agreement and the accuracy say it.
KEPT_BY = "the graph's own suppression"
#: A detection only one runtime kept is left out of parity where its score is within this of the lowest its image kept.
BOUNDARY = 0.01
#: Two detections are the same where their class is and their boxes overlap by at least this (the matching's).
MATCH_IOU = 0.5
#: A pair whose boxes are more than this apart (FP32's tolerance for boxes, pixels) may be a tie broken otherwise...
TIE_PX = 0.5
#: ...and with the detections only one side kept (away from a boundary), at most this share of the detections may be
#: left out: where a score or an overlap lies within rounding of a suppression's threshold, equal arithmetic decides
#: either way (seen: 2-5 of 1,600 at 800 px, the region proposals' suppression among 3,000 boxes an image).
TIES = 0.01


def is_layout(outputs: Sequence[Output]) -> bool:
    """The three named outputs, with one cap: ``boxes [cap, 4]``, ``scores [cap]``, ``labels [cap]``."""
    shapes = {o.name: tuple(o.shape) for o in outputs}
    if set(shapes) != set(NAMES) or len(shapes["boxes"]) != 2 or shapes["boxes"][1:] != (4,):
        return False
    return shapes["scores"] == shapes["labels"] == shapes["boxes"][:1]


def kinds(outputs: Sequence[Output]) -> list[Output]:
    """The boxes in pixels, the scores as a graph's kept scores (their FP32 gate the widest: the proposals they were
    pooled from carry each runtime's rounding), the labels as numbers."""
    kind = {"boxes": "boxes", "scores": "kept_scores"}
    return [Output(o.name, o.shape, kind.get(o.name, "values")) for o in outputs]


def cap(outputs: Sequence[Output]) -> int:
    """The most detections the graph keeps an image (its outputs' padded length)."""
    return int(next(o.shape[0] for o in outputs if o.name == "scores"))


def detections(arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Each image's detections as the graph kept them (the rows of score 0 that pad them to the cap left out);
    torchvision's labels are COCO's category ids (``category_ids``)."""
    out = []
    for boxes, scores, labels in zip(*(np.asarray(arrays[n]) for n in NAMES)):
        real = scores > 0
        out.append({"boxes": boxes[real].astype(np.float64), "scores": scores[real].astype(np.float64),
                    "classes": np.rint(labels[real]).astype(np.int64), "category_ids": True,
                    "kept_by": KEPT_BY})
    return out


def align(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], ...]:
    """Both sides' outputs with the same detections in the same rows, image by image: the pairs first (in the
    reference's order), then what only one side holds beside a row of zeros (a detection the other lacks, a padding
    row that is not all zeros). Left out (rows of zeros on both sides): the lone detections at a boundary
    (:func:`_cap_edge`, the batch's score floor), and the other lone ones and the ties a suppression broke otherwise
    (:func:`_apart`) where, together, they are at most :data:`TIES` of the detections; more fail."""
    sides = (reference, candidate)
    out = [{n: np.zeros_like(np.asarray(side[n])) for n in NAMES} for side in sides]
    cap = out[0]["scores"].shape[1]
    found = [detections(side) for side in sides]
    real = [[np.flatnonzero(np.asarray(side["scores"])[k] > 0) for k in range(len(out[0]["scores"]))]
            for side in sides]
    floor = min((s for f in found for d in f for s in d["scores"]), default=0.0) + BOUNDARY
    rows, doubt = [], []
    for k, (ref, cand) in enumerate(zip(*found)):
        pairs = [(real[0][k][i], real[1][k][j]) for i, j, _ in nms.match(ref, cand, MATCH_IOU)]
        edges = max(floor, _cap_edge(cand, cap)), max(floor, _cap_edge(ref, cap))
        lone: list[tuple[Any, Any]] = [(row, None) for row in _alone(ref, real[0][k], {a for a, _ in pairs}, edges[0])]
        lone += [(None, row) for row in _alone(cand, real[1][k], {b for _, b in pairs}, edges[1])]
        apart = _apart(sides, k, pairs)
        rows.append([p for p in pairs if p not in apart] + [(row, None) for row in _junk(sides[0], k)] +
                    [(None, row) for row in _junk(sides[1], k)])
        doubt.append(apart + lone)
    if sum(map(len, doubt)) > TIES * max(sum(len(d["scores"]) for d in f) for f in found):
        rows = [r + d for r, d in zip(rows, doubt)]  # more than a suppression's rounding leaves: every one judged
    for k, image in enumerate(rows):
        for slot, row in enumerate(image[:cap]):
            for into, side, index in zip(out, sides, row):
                if index is not None:
                    for n in NAMES:
                        into[n][k, slot] = np.asarray(side[n])[k, index]
    return out[0], out[1]


def _apart(sides: tuple[dict[str, np.ndarray], ...], k: int, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pairs of image ``k`` whose boxes are more than :data:`TIE_PX` apart: two overlapping detections of one
    class whose scores tie within rounding, one kept by one runtime's suppression and the other by the other's (or
    boxes that moved: a wrong decoding moves them all, more than :data:`TIES` of them)."""
    return [(a, b) for a, b in pairs
            if np.abs(np.asarray(sides[0]["boxes"])[k, a] - np.asarray(sides[1]["boxes"])[k, b]).max() > TIE_PX]


def _cap_edge(other: dict[str, Any], cap: int) -> float:
    """Below this score a detection only one side kept is at the cap's boundary: where the other side kept the cap
    full, within :data:`BOUNDARY` of its lowest score (equal arithmetic may keep the 100th box or the 101st); else
    none is."""
    return float(other["scores"].min()) + BOUNDARY if len(other["scores"]) == cap else -np.inf


def _alone(found: dict[str, Any], real: np.ndarray, paired: set[int], edge: float) -> list[int]:
    """The rows of the detections of ``found`` (at rows ``real``) left unpaired, but those below ``edge`` (at the
    boundary of the score floor or the cap: :func:`align`)."""
    return [int(row) for i, row in enumerate(real) if row not in paired and found["scores"][i] >= edge]


def _junk(side: dict[str, np.ndarray], k: int) -> list[int]:
    """The padding rows of image ``k`` (score 0 or less) that are not all zeros: never left out."""
    scores, labels, boxes = (np.asarray(side[n])[k] for n in ("scores", "labels", "boxes"))
    return [int(row) for row in np.flatnonzero((scores <= 0) & ((scores != 0) | (labels != 0) | boxes.any(axis=1)))]
