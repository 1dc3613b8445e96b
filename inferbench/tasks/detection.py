"""Detection from raw heads, in one of two layouts: YOLOv8's anchor-free head, one output of ``[4 + classes, anchors]``
an image (box centre x, centre y, width and height in input pixels, then each class's score, already a probability),
or SSD's (torchvision's SSDlite cut before its decoding: :mod:`.ssd`); or from detections the graph computed whole,
its own suppression inside (torchvision's Faster R-CNN: :mod:`.ingraph`). Parity judges the boxes (in pixels) and the
scores apart, before anything runs after the call; then every runtime's heads go through the same decoding and
suppression (:mod:`.nms`; nothing for detections the graph kept), and two runtimes' detections are matched box by
box."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..measure.parity import INT8_GROSS_FLOOR
from ..registry.outputs import Output
from . import ingraph, nms, paired, ssd

#: Two detections are the same where their class is and their boxes overlap by at least this (COCO's loosest).
MATCH_IOU = 0.5


#: YOLOv8's head predicts at three strides: one anchor a cell of each grid (8400 at 640x640, 5040 at 384x640).
STRIDES = (8, 16, 32)


def anchors(size: tuple[int, int]) -> int:
    """The anchors of a YOLOv8-layout head for images of ``size`` (height, width)."""
    return sum(-(-size[0] // s) * -(-size[1] // s) for s in STRIDES)


def claims(outputs: Sequence[Output], size: tuple[int, int]) -> bool:
    """SSD's named heads, or one head of [4 + classes, anchors] with exactly the anchors of YOLOv8's three strides
    at this image size (a coincidence of shape that no classifier or segmenter output has)."""
    if ssd.is_layout(outputs) or ingraph.is_layout(outputs):
        return True
    return len(outputs) == 1 and len(outputs[0].shape) == 2 and outputs[0].shape[0] >= 5 \
        and outputs[0].shape[1] == anchors(size)


def kinds(outputs: Sequence[Output], where: str) -> list[Output]:
    if ssd.is_layout(outputs):
        return ssd.kinds(outputs)
    if ingraph.is_layout(outputs):
        return ingraph.kinds(outputs)
    if len(outputs) != 1 or len(outputs[0].shape) != 2 or outputs[0].shape[0] < 5:
        shapes = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
        raise UsageError(f"{where}: --task detection reads one raw head of [4 + classes, anchors] an image (YOLOv8's "
                         f"layout), SSD's heads ({', '.join(ssd.NAMES)}) or the detections a graph kept "
                         f"({', '.join(ingraph.NAMES)}: [cap, 4], [cap], [cap]); this model gives {shapes} (--task raw "
                         "compares them as numbers)")
    return [Output(outputs[0].name, outputs[0].shape, "values")]


def _split(head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A batch's head [N, 4 + C, A] as boxes [N, A, 4] (centre and size, pixels) and scores [N, A, C]."""
    head = np.asarray(head)
    return np.swapaxes(head[:, :4, :], 1, 2), np.swapaxes(head[:, 4:, :], 1, 2)


def parts(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> dict[str, tuple[np.ndarray, str]]:
    if ssd.is_layout(outputs) or ingraph.is_layout(outputs):
        return {o.name: (arrays[o.name], o.kind) for o in outputs}
    name = outputs[0].name
    boxes, scores = _split(arrays[name])
    return {f"{name}.boxes": (boxes, "boxes"), f"{name}.scores": (scores, "values")}


def align(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
          outputs: Sequence[Output]) -> tuple[dict[str, np.ndarray], ...]:
    """Detections a graph kept, paired with the reference's before parity compares them (:func:`.ingraph.align`);
    raw heads as they are (one row an anchor: the same order on both sides)."""
    return ingraph.align(reference, candidate) if ingraph.is_layout(outputs) else (reference, candidate)


def postprocess(arrays: dict[str, np.ndarray], outputs: Sequence[Output], evaluation: bool = False) -> list[Any] | None:
    """Each image's detections: boxes (x1, y1, x2, y2 in pixels), scores and classes, best first (``evaluation``: as
    mAP reads them, :data:`EVALUATION`; an SSD's as torchvision's postprocessing keeps them; a graph's as it kept
    them)."""
    if ingraph.is_layout(outputs):
        return ingraph.detections(arrays)
    if ssd.is_layout(outputs):
        return ssd.detections(arrays, ssd.EVALUATION if evaluation else ssd.DEFAULT)
    settings = EVALUATION if evaluation else nms.DEFAULT
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
        for i, j, overlap in nms.match(ref, cand, MATCH_IOU):
            matched += 1
            overlaps.append(overlap)
            score_diff = max(score_diff, abs(float(ref["scores"][i]) - float(cand["scores"][j])))
    larger = max(boxes_ref, boxes_cand)
    kept = next((r["kept_by"] for r in reference if r.get("kept_by")), None) or (  # what kept the boxes
        ssd.DEFAULT if any(r.get("category_ids") for r in reference) else nms.DEFAULT).said()
    return {"method": f"boxes matched at IoU >= {MATCH_IOU:g} and the same class, after {kept}",
            "images": len(reference), "boxes_reference": boxes_ref, "boxes_candidate": boxes_cand,
            "matched": matched, "matched_share": matched / larger if larger else 1.0,
            "mean_iou": float(np.mean(overlaps)) if overlaps else None, "max_score_difference": score_diff}


def broken(agreement: dict[str, Any]) -> bool:
    """FP32 found boxes (10 at least) and fewer than :data:`INT8_GROSS_FLOOR` of them are matched: an INT8 head whose
    scores were quantised to nothing (a YOLO head's boxes in pixels and scores in [0, 1] share one output and one
    scale)."""
    return agreement["boxes_reference"] >= 10 and agreement["matched_share"] < INT8_GROSS_FLOOR


def said(agreement: dict[str, Any], inputs: str = "reference inputs") -> str:
    kept = ingraph.KEPT_BY if str(agreement.get("method", "")).endswith(ingraph.KEPT_BY) else "the shared suppression"
    return (f"its detections after {kept} match FP32's on {agreement['matched_share']:.1%} of "
            f"{max(agreement['boxes_reference'], agreement['boxes_candidate'])} boxes over {agreement['images']} "
            f"{inputs}")


#: Detections for mAP are kept from a score of 0.001 (Ultralytics' validation's threshold), 100 an image (what COCO's
#: mAP reads: its largest maxDets), one class an anchor (Ultralytics' validation keeps every class above the
#: threshold: its mAP can be a little higher).
EVALUATION = nms.Settings(score=0.001, iou=0.7, max_boxes=100)
#: Resamples of the images for the intervals (each an evaluation of the cell's and of FP32's detections).
METRICS = (("map", 0, "mAP@[.5:.95]"), ("map50", 1, "mAP@.5"))


def accuracy(labels: Any, candidate: dict[str, np.ndarray], reference: dict[str, np.ndarray],
             outputs: Sequence[Output], precision: str) -> dict[str, Any]:
    """COCO mAP@[.5:.95] and mAP@.5 (faster-coco-eval) of the cell's detections and of FP32's on the labelled images,
    each with a 95% interval and their paired difference's (:func:`inferbench.tasks.paired.scored`); a reduced
    precision passes at MLPerf's 99% of FP32's mAP@[.5:.95]."""
    if not isinstance(labels, dict):
        raise UsageError("--eval-dir: a detector's labelled images are a COCO instances file's boxes")
    mine, fp32 = (_detections(labels, postprocess(x, outputs, evaluation=True) or []) for x in (candidate, reference))
    n = len(labels["images"])
    by_image: dict[Any, list[dict[str, Any]]] = {}
    for a in labels["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    out = paired.scored(lambda found, draw: _map(labels, by_image, found, draw), mine, fp32, n, METRICS)
    out.update(metric="COCO mAP@[.5:.95]", method=(
        f"faster-coco-eval on the images resized whole to the input, boxes clipped to it and scaled back; "
        f"{kept_for_map(outputs)}; "
        f"intervals: {paired.BOOTSTRAP} resamples of the images, bias-corrected percentile"))
    paired.say(out, "map", "COCO mAP@[.5:.95]", "mAP", "map50", "mAP@.5")
    return paired.judged(out, "map", "mAP@[.5:.95]", precision, "FP32 finds none of the labelled objects",
                         " (labels in another category order than the model's?)")


def kept_for_map(outputs: Sequence[Output]) -> str:
    """What kept the detections mAP reads, in a phrase: the graph's own suppression, or the shared one's settings."""
    if ingraph.is_layout(outputs):
        return f"{ingraph.KEPT_BY} (at most {ingraph.cap(outputs)} an image)"
    return (ssd.EVALUATION if ssd.is_layout(outputs) else EVALUATION).said()


def _detections(truth: dict[str, Any], found: list[Any]) -> list[list[dict[str, Any]]]:
    """Each image's detections as COCO results: boxes clipped to the input (as Ultralytics' validation clips them
    after its suppression; torchvision's detectors clip their own), scaled back to the image, ``[x, y, w, h]``, the
    model's class ``i`` the ``i``-th category by id, or the category id itself where the detections say their classes
    are ids (torchvision's detectors); a class that names no category is left out."""
    (ih, iw), ids = truth["input_hw"], [c["id"] for c in truth["categories"]]
    out = []
    for im, d in zip(truth["images"], found):
        sx, sy = im["width"] / iw, im["height"] / ih
        boxes = np.clip(np.asarray(d["boxes"], dtype=np.float64).reshape(-1, 4), 0, [iw, ih, iw, ih])
        category = {c: c for c in ids} if d.get("category_ids") else dict(enumerate(ids))
        out.append([{"category_id": category[int(c)], "score": float(s),
                     "bbox": [float(b[0] * sx), float(b[1] * sy), float((b[2] - b[0]) * sx), float((b[3] - b[1]) * sy)]}
                    for b, s, c in zip(boxes, d["scores"], d["classes"]) if int(c) in category])
    return out


def _map(truth: dict[str, Any], by_image: dict[Any, list[dict[str, Any]]], found: list[list[dict[str, Any]]],
         draw: np.ndarray | None = None) -> list[float]:
    """mAP@[.5:.95] and mAP@.5 of ``found`` (each image's detections) against ``truth`` (its annotations ``by_image``),
    over the images ``draw`` picks (a resample: an image drawn twice counts twice, as two images); 0 where nothing
    was found."""
    from faster_coco_eval import COCO, COCOeval_faster

    order = range(len(truth["images"])) if draw is None else draw
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for new, i in enumerate(order, 1):
        im = truth["images"][i]
        images.append({**im, "id": new})
        annotations += [{**a, "image_id": new, "id": len(annotations) + k + 1}
                        for k, a in enumerate(by_image.get(im["id"], []))]
        results += [{**r, "image_id": new} for r in found[i]]
    if not results or not annotations:
        return [0.0, 0.0]
    gt = COCO()
    gt.dataset = {"images": images, "annotations": annotations, "categories": truth["categories"]}
    gt.createIndex()
    ev = COCOeval_faster(gt, gt.loadRes(results), "bbox", print_function=lambda *_: None)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return [max(0.0, float(ev.stats[0])), max(0.0, float(ev.stats[1]))]
