"""Scenarios: the protocol a cell follows in its child process (phases, in order, in each module's
docstring). Adding a scenario = one module with ``run(job, emit) -> CellOutcome`` + one entry here
(``--scenario`` offers every entry).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

SCENARIOS: dict[str, str] = {
    "inference": "inferbench.scenarios.inference:run",
}


def get_scenario(name: str) -> Callable[..., dict[str, Any]]:
    module, _, func = SCENARIOS[name].partition(":")
    return getattr(importlib.import_module(module), func)
