"""Scenarios: the protocol a cell follows in its child process (phases, in order, in each module's
docstring). Adding a scenario = one module with a session class + one entry here (``--scenario`` offers every
entry): ``Session(job, emit)`` sets the cell up, ``.block(round)`` measures one round's block and
returns a short summary, ``.finish()`` returns the :class:`~inferbench.spec.CellOutcome`.
"""

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
