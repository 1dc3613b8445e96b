"""What a task with nothing after the call gives (classification, raw): no post-processing, so no results to match
after it, none lost, nothing to say of them; outputs whose rows stay where they are (a segmenter's too), nothing to
pair before parity. Its modules take these as theirs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..registry.outputs import Output


def align(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
          outputs: Sequence[Output]) -> tuple[dict[str, np.ndarray], ...]:
    return reference, candidate  # the same rows on both sides: nothing to pair


def postprocess(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> list[Any] | None:
    return None  # the outputs are the answer (a classifier's top-k is read where it is needed)


def agreement(reference: list[Any], candidate: list[Any]) -> dict[str, Any]:
    return {}


def broken(agreement: dict[str, Any]) -> bool:
    return False


def said(agreement: dict[str, Any], inputs: str = "reference inputs") -> str:
    return ""
