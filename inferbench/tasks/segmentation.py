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
from ..registry.outputs import Output

#: The output read as the masks' scores where a model gives several (torchvision's name for it), else the first of
#: three dimensions.
MAIN = "out"


def _main(outputs: Sequence[Output]) -> str | None:
    masks = [o.name for o in outputs if len(o.shape) == 3 and o.shape[0] != 1]
    return MAIN if MAIN in masks else (masks[0] if masks else None)


def kinds(outputs: Sequence[Output], where: str) -> list[Output]:
    main = _main(outputs)
    if main is None:
        shapes = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
        raise UsageError(f"{where}: --task segmentation reads class scores a pixel, [classes, height, width] an image; "
                         f"this model gives {shapes} (--task raw compares them as numbers)")
    return [Output(o.name, o.shape, "masks" if o.name == main else "values") for o in outputs]


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


def said(agreement: dict[str, Any]) -> str:
    return (f"its masks give FP32's class to {agreement['pixel_agreement']:.1%} of {agreement['pixels']} pixels "
            f"(mean IoU {agreement['mean_iou']:.3f}) over {agreement['images']} reference inputs")


def accuracy(labels: Any, candidate: dict[str, np.ndarray], reference: dict[str, np.ndarray],
             outputs: Sequence[Output], precision: str) -> dict[str, Any]:
    return {"status": "not_measured", "images": len(next(iter(candidate.values()))),
            "reason": "mean IoU on labelled masks is not measured yet"}
