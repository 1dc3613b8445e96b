"""The one non-maximum suppression every runtime's detections go through (NumPy; the same code whichever runtime
computed the head), and the box arithmetic it needs. Defaults as Ultralytics' predict mode documents them (a score of
0.25 at least, overlap 0.7, 300 boxes an image, 30,000 candidates), so a YOLO user's boxes are the ones they know."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Settings:
    score: float = 0.25  # a box below this score is dropped before suppression
    iou: float = 0.7  # a box overlapping a kept one of its class by more than this is suppressed
    max_boxes: int = 300  # kept an image, best first
    max_candidates: int = 30_000  # considered an image, best first

    def said(self) -> str:
        return (f"score >= {self.score:g}, IoU > {self.iou:g} suppressed within a class, at most {self.max_boxes} "
                "boxes an image")


DEFAULT = Settings()


def xyxy(centre_size: np.ndarray) -> np.ndarray:
    """Boxes given as centre x, centre y, width, height -> corners x1, y1, x2, y2 (the last axis)."""
    c = np.asarray(centre_size, dtype=np.float64)
    half = c[..., 2:4] / 2
    return np.concatenate([c[..., 0:2] - half, c[..., 0:2] + half], axis=-1)


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of one x1y1x2y2 box with each of ``boxes``."""
    lt = np.maximum(box[:2], boxes[:, :2])
    rb = np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
    area = np.prod(np.clip(box[2:] - box[:2], 0, None))
    areas = np.prod(np.clip(boxes[:, 2:] - boxes[:, :2], 0, None), axis=1)
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def suppress(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, settings: Settings = DEFAULT) -> np.ndarray:
    """Indices of the boxes kept, best score first: greedy suppression within each class (a box never suppresses
    another class's), after dropping scores below ``settings.score``. A kept box is compared with the later boxes of
    its own class only (each class's ranks found once), so the cost grows with the boxes a class holds, not all."""
    order = np.flatnonzero(scores >= settings.score)
    order = order[np.argsort(-scores[order], kind="stable")][:settings.max_candidates]
    ranked = classes[order]
    by_class = {c: np.flatnonzero(ranked == c) for c in np.unique(ranked).tolist()}  # each class's ranks, ascending
    kept: list[int] = []
    alive = np.ones(len(order), dtype=bool)
    for i in range(len(order)):
        if not alive[i]:
            continue
        kept.append(int(order[i]))
        if len(kept) == settings.max_boxes:
            break
        same = by_class[ranked[i].item()]
        same = same[np.searchsorted(same, i, side="right"):]
        same = same[alive[same]]
        alive[same[iou(boxes[order[i]], boxes[order[same]]) > settings.iou]] = False
    return np.array(kept, dtype=np.int64)


def match(reference: dict[str, Any], candidate: dict[str, Any], threshold: float) -> list[tuple[int, int, float]]:
    """Two runtimes' detections of one image paired one to one, the reference's best first: each with the free
    candidate detection of its class that it overlaps most, where that overlap is at least ``threshold``; (reference
    index, candidate index, overlap) a pair."""
    free = np.ones(len(candidate["scores"]), dtype=bool)
    pairs = []
    for i in np.argsort(-reference["scores"], kind="stable"):
        options = np.flatnonzero(free & (candidate["classes"] == reference["classes"][i]))
        if not len(options):
            continue
        overlap = iou(reference["boxes"][i], candidate["boxes"][options])
        j = int(np.argmax(overlap))
        if overlap[j] >= threshold:
            free[options[j]] = False
            pairs.append((int(i), int(options[j]), float(overlap[j])))
    return pairs
