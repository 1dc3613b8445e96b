"""Raw: a model file whose outputs have no known meaning. Each output is compared as numbers (relative error and
cosine, by name); nothing runs after the call, and there is no accuracy to measure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..registry.outputs import Output
from . import plain

#: Nothing runs after the call: this task's post-processing, agreement after it and their verdicts are plain's.
postprocess, agreement, broken, said = plain.postprocess, plain.agreement, plain.broken, plain.said
align = plain.align


def claims(outputs: Sequence[Output], size: tuple[int, int]) -> bool:
    """Anything: raw is what inferbench cannot know the meaning of (the last task --task auto asks)."""
    return True


def kinds(outputs: Sequence[Output], where: str) -> list[Output]:
    return [Output(o.name, o.shape, "values") for o in outputs]


def parts(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> dict[str, tuple[np.ndarray, str]]:
    return {o.name: (arrays[o.name], o.kind) for o in outputs}


def accuracy(labels: Any, candidate: dict[str, np.ndarray], reference: dict[str, np.ndarray],
             outputs: Sequence[Output], precision: str) -> dict[str, Any]:
    return {"status": "not_measured", "images": len(next(iter(candidate.values()))),
            "reason": "outputs of no known meaning have no accuracy"}
