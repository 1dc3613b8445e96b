"""Classification: one output, the class scores (logits), judged as parity always judged them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..measure import parity
from ..registry.outputs import Output
from ..registry.tasks import class_scores
from . import plain

#: Nothing runs after the call: this task's post-processing, agreement after it and their verdicts are plain's.
postprocess, agreement, broken, said = plain.postprocess, plain.agreement, plain.broken, plain.said
align = plain.align


def claims(outputs: Sequence[Output], size: tuple[int, int]) -> bool:
    return len(outputs) == 1 and class_scores(outputs[0])


def kinds(outputs: Sequence[Output], where: str) -> list[Output]:
    if len(outputs) != 1 or not class_scores(outputs[0]):
        shapes = ", ".join(f"{o.name} {list(o.shape)}" for o in outputs)
        raise UsageError(f"{where}: a classifier has one output of class scores an image; this one gives {shapes} "
                         "(--task raw compares them as numbers)")
    return [Output(outputs[0].name, outputs[0].shape, "scores")]


def parts(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> dict[str, tuple[np.ndarray, str]]:
    return {o.name: (arrays[o.name].reshape(len(arrays[o.name]), -1), "scores") for o in outputs}


def accuracy(labels: Any, candidate: dict[str, np.ndarray], reference: dict[str, np.ndarray],
             outputs: Sequence[Output], precision: str) -> dict[str, Any]:
    """Top-1 and top-5 on labelled classes (:func:`inferbench.measure.parity.accuracy`)."""
    if not isinstance(labels, np.ndarray):
        raise UsageError("--eval-dir: a classifier's labelled images are classes (a folder per class or a labels "
                       "file), not a COCO instances file")
    name = outputs[0].name
    return parity.accuracy(labels, candidate[name].reshape(len(labels), -1), reference[name].reshape(len(labels), -1),
                           precision)
