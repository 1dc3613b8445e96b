"""The scenarios a cell can follow: one entry each, naming its session class (nothing is imported until a
worker runs one)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

SCENARIOS: dict[str, str] = {
    "inference": "inferbench.scenarios.inference:Session",
}


def get_scenario(name: str) -> Callable[..., Any]:
    module, _, func = SCENARIOS[name].partition(":")
    return getattr(importlib.import_module(module), func)
