"""Semantic segmentation: class scores a pixel, ``[classes, height, width]`` an image (torchvision's LR-ASPP and
DeepLabV3 give theirs as ``out``, an auxiliary head as ``aux``). Parity judges the scores as numbers and counts the
pixels whose top class moved away from a near-tie; after the call every runtime's scores become a mask (each pixel's
top class), and two runtimes' masks are compared pixel by pixel and class by class (their mean IoU)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..measure.parity import INT8_GROSS_FLOOR
from ..registry.masks import IGNORE
from ..registry.outputs import Output
from . import paired, plain

#: The output read as the masks' scores where a model gives several (torchvision's name for it), else the first of
#: three dimensions.
MAIN = "out"


def _main(outputs: Sequence[Output]) -> str | None:
    masks = [o.name for o in outputs if len(o.shape) == 3 and o.shape[0] != 1]
    return MAIN if MAIN in masks else (masks[0] if masks else None)


def claims(outputs: Sequence[Output], size: tuple[int, int]) -> bool:
    """Class scores a pixel: an output of [classes, height, width] at the image's own height and width."""
    main = _main(outputs)
    return main is not None and next(tuple(o.shape[1:]) for o in outputs if o.name == main) == tuple(size)


def kinds(outputs: Sequence[Output], where: str) -> list[Output]:
    main = _main(outputs)
    if main is None:
        shapes = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
        raise UsageError(f"{where}: --task segmentation reads class scores a pixel, [classes, height, width] an image; "
                         f"this model gives {shapes} (--task raw compares them as numbers)")
    return [Output(o.name, o.shape, "masks" if o.name == main else "values") for o in outputs]


align = plain.align  # a mask's pixels stay where they are


def parts(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> dict[str, tuple[np.ndarray, str]]:
    return {o.name: (arrays[o.name], o.kind) for o in outputs}


def postprocess(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> list[Any] | None:
    """Each image's mask: every pixel's top class."""
    main = next(o.name for o in outputs if o.kind == "masks")
    return [{"mask": scores.argmax(axis=0), "classes": scores.shape[0]} for scores in np.asarray(arrays[main])]


def agreement(reference: list[Any], candidate: list[Any]) -> dict[str, Any]:
    """The share of pixels given the same class, and the candidate's mean IoU against the reference's masks (over
    the classes either one uses)."""
    same = total = 0
    inter: dict[int, int] = {}
    union: dict[int, int] = {}
    for ref, cand in zip(reference, candidate):
        a, b = ref["mask"], cand["mask"]
        same, total = same + int(np.sum(a == b)), total + a.size
        for c in np.union1d(np.unique(a), np.unique(b)).tolist():
            inter[c] = inter.get(c, 0) + int(np.sum((a == c) & (b == c)))
            union[c] = union.get(c, 0) + int(np.sum((a == c) | (b == c)))
    return {"method": "each pixel's top class; IoU per class over every image, their mean", "images": len(reference),
            "pixels": total, "pixel_agreement": same / total if total else None,
            "mean_iou": float(np.mean([inter[c] / union[c] for c in union])) if union else None}


def broken(agreement: dict[str, Any]) -> bool:
    """The masks' mean IoU against FP32's below :data:`INT8_GROSS_FLOOR`: pixels given classes at random, or none."""
    return agreement["mean_iou"] is not None and agreement["mean_iou"] < INT8_GROSS_FLOOR


def said(agreement: dict[str, Any], inputs: str = "reference inputs") -> str:
    return (f"its masks give FP32's class to {agreement['pixel_agreement']:.1%} of {agreement['pixels']} pixels "
            f"(mean IoU {agreement['mean_iou']:.3f}) over {agreement['images']} {inputs}")


#: The measures on labelled masks: (key, index in :func:`_score`'s list, name).
METRICS = (("miou", 0, "mean IoU"), ("pixel_accuracy", 1, "pixel accuracy"))


def accuracy(labels: Any, candidate: dict[str, np.ndarray], reference: dict[str, np.ndarray],
             outputs: Sequence[Output], precision: str) -> dict[str, Any]:
    """Mean IoU (each class's intersection over union summed over the images, their mean over the classes present in
    the masks or the predictions) and pixel accuracy of the cell's masks and of FP32's against the labelled masks
    (resized whole to the input, nearest neighbour; 255 and classes the model lacks not counted), each with a 95%
    interval and their paired difference's (:func:`inferbench.tasks.paired.scored`); a reduced precision passes at
    MLPerf's 99% of FP32's mean IoU."""
    if not isinstance(labels, np.ndarray) or labels.ndim != 3:
        raise UsageError("--eval-dir: a segmenter's labelled images are masks (images/ and masks/)")
    main = next(o for o in outputs if o.kind == "masks")
    classes, n = main.shape[0], len(labels)
    if tuple(main.shape[1:]) != labels.shape[1:]:
        return {"status": "not_measured", "images": n, "reason": f"its masks are {main.shape[1]}x{main.shape[2]}, "
                f"the labelled masks resized to the input {labels.shape[1]}x{labels.shape[2]}"}
    mine, fp32 = (_counts(np.asarray(x[main.name]), labels, classes) for x in (candidate, reference))
    out = paired.scored(_score, mine, fp32, n, METRICS)
    lacking = int(np.sum((labels != IGNORE) & (labels >= classes)))
    out.update(metric="mean IoU", method=(
        f"each pixel's top class against the masks resized whole to the input (nearest neighbour); {IGNORE} "
        f"(and {lacking} pixels of classes past the model's {classes}) not counted; IoU per class summed over the "
        f"images, the mean over classes present; intervals: {paired.BOOTSTRAP} resamples of the images, "
        "bias-corrected percentile"))
    paired.say(out, "miou", "mean IoU", "mIoU", "pixel_accuracy", "pixel accuracy")
    return paired.judged(out, "miou", "mean IoU", precision, "FP32 labels no pixel right",
                         " (masks whose class numbers are not the model's?)")


def _counts(scores: np.ndarray, truth: np.ndarray, classes: int) -> dict[str, np.ndarray]:
    """Each image's intersections and unions a class, and its pixels right and counted: from its confusion matrix
    (``np.bincount`` of truth x classes + prediction over the counted pixels)."""
    n = len(truth)
    inter, union = np.zeros((n, classes), np.int64), np.zeros((n, classes), np.int64)
    right, counted = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        t, p = truth[i].ravel(), scores[i].argmax(axis=0).ravel()
        keep = (t != IGNORE) & (t >= 0) & (t < classes)
        confusion = np.bincount(t[keep] * classes + p[keep], minlength=classes * classes).reshape(classes, classes)
        inter[i] = np.diag(confusion)
        union[i] = confusion.sum(0) + confusion.sum(1) - inter[i]
        right[i], counted[i] = inter[i].sum(), keep.sum()
    return {"inter": inter, "union": union, "right": right, "counted": counted}


def _score(counts: dict[str, np.ndarray], draw: np.ndarray | None) -> list[float]:
    """Mean IoU and pixel accuracy over the images ``draw`` picks (None: every one)."""
    pick = slice(None) if draw is None else draw
    inter, union = counts["inter"][pick].sum(0), counts["union"][pick].sum(0)
    present = union > 0
    miou = float(np.mean(inter[present] / union[present])) if present.any() else 0.0
    counted = counts["counted"][pick].sum()
    return [miou, float(counts["right"][pick].sum() / counted) if counted else 0.0]
