"""Raw: a model file whose outputs have no known meaning. Each output is compared as numbers (relative error and
cosine, by name); nothing runs after the call, and there is no accuracy to measure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..registry.outputs import Output


def kinds(outputs: Sequence[Output], where: str) -> list[Output]:
    return [Output(o.name, o.shape, "values") for o in outputs]


def parts(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> dict[str, tuple[np.ndarray, str]]:
    return {o.name: (arrays[o.name], o.kind) for o in outputs}


def postprocess(arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> list[Any] | None:
    return None


def agreement(reference: list[Any], candidate: list[Any]) -> dict[str, Any]:
    return {}


def said(agreement: dict[str, Any]) -> str:
    return ""
