"""SSD's raw heads (torchvision's SSDlite, its graph cut before the decoding and the suppression): per anchor, the
box regression against the anchor and the classes' logits (class 0 the background), with the anchors themselves in
input pixels and the input's size as outputs of the graph. After the call every runtime's heads are decoded and
suppressed here exactly as torchvision's ``SSD.postprocess_detections`` does (the box coder's weights 10, 10, 5, 5,
the boxes clipped to the image, a softmax over the classes, the best 300 an object class above 0.001, a suppression
within each class at IoU 0.55, 300 kept), with the one suppression every task shares (:mod:`.nms`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..registry.outputs import Output
from . import nms

#: The graph's outputs, by the names torchvision's head gives them (and the two the cut adds).
NAMES = ("bbox_regression", "cls_logits", "anchors", "image_size")
WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # torchvision's SSD box coder
CLIP = math.log(1000.0 / 16)  # the largest log scale a box may grow by (torchvision's bbox_xform_clip)
TOPK = 300  # the best candidates of a class before the suppression
#: torchvision's SSDlite defaults (its model's score_thresh, nms_thresh, detections_per_img), as every runtime's.
DEFAULT = nms.Settings(score=0.001, iou=0.55, max_boxes=300)
#: For mAP: the same, 100 an image (what COCO's mAP reads).
EVALUATION = nms.Settings(score=0.001, iou=0.55, max_boxes=100)


def is_layout(outputs: Sequence[Output]) -> bool:
    return set(NAMES) <= {o.name for o in outputs}


def kinds(outputs: Sequence[Output]) -> list[Output]:
    """The anchors are boxes in pixels; the regression, the logits and the size are judged as numbers."""
    return [Output(o.name, o.shape, "boxes" if o.name == "anchors" else "values") for o in outputs]


def decode(regression: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Boxes x1, y1, x2, y2 from the regression ``[A, 4]`` against the anchors ``[A, 4]`` (x1, y1, x2, y2), as
    torchvision's ``BoxCoder.decode_single``."""
    a = np.asarray(anchors, dtype=np.float64)
    r = np.asarray(regression, dtype=np.float64)
    widths, heights = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    cx, cy = a[:, 0] + 0.5 * widths, a[:, 1] + 0.5 * heights
    wx, wy, ww, wh = WEIGHTS
    dx, dy = r[:, 0] / wx, r[:, 1] / wy
    dw, dh = np.minimum(r[:, 2] / ww, CLIP), np.minimum(r[:, 3] / wh, CLIP)
    px, py = dx * widths + cx, dy * heights + cy
    half_w, half_h = 0.5 * np.exp(dw) * widths, 0.5 * np.exp(dh) * heights
    return np.stack([px - half_w, py - half_h, px + half_w, py + half_h], axis=1)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def candidates(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> tuple[np.ndarray, ...]:
    """Each object class's best :data:`TOPK` anchors above ``threshold`` (class 0, the background, left out): their
    boxes, scores and classes, class by class and best first within a class, as torchvision lays them out."""
    objects = scores[:, 1:]
    k = min(TOPK, len(objects))
    top = np.argpartition(-objects, k - 1, axis=0)[:k] if k < len(objects) else \
        np.broadcast_to(np.arange(len(objects))[:, None], objects.shape)
    values = np.take_along_axis(objects, top, axis=0)
    ranked = np.argsort(-values, axis=0, kind="stable")
    top, values = np.take_along_axis(top, ranked, axis=0).T, np.take_along_axis(values, ranked, axis=0).T
    labels = np.broadcast_to(np.arange(1, objects.shape[1] + 1)[:, None], values.shape)
    keep = values > threshold
    return boxes[top[keep]], values[keep], labels[keep].astype(np.int64)


def detections(arrays: dict[str, np.ndarray], settings: nms.Settings = DEFAULT) -> list[dict[str, Any]]:
    """Each image's detections: boxes (x1, y1, x2, y2 in input pixels), scores and classes (torchvision's labels:
    COCO's category ids for its COCO-trained detectors, ``category_ids`` says so), best first."""
    out = []
    for reg, logits, anchors, size in zip(*(np.asarray(arrays[n]) for n in NAMES)):
        boxes = decode(reg, anchors)
        height, width = float(size[0]), float(size[1])
        boxes = np.clip(boxes, 0.0, [width, height, width, height])
        b, s, c = candidates(boxes, softmax(logits), settings.score)
        keep = nms.suppress(b, s, c, nms.Settings(score=0.0, iou=settings.iou, max_boxes=settings.max_boxes,
                                                  max_candidates=len(s)))
        out.append({"boxes": b[keep], "scores": s[keep], "classes": c[keep], "category_ids": True})
    return out
