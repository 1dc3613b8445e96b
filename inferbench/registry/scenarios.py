"""The scenarios a cell can follow: one entry each, naming its session class (nothing is imported until a
worker runs one)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

SCENARIOS: dict[str, str] = {
    "inference": "inferbench.scenarios.inference:Session",
    # MLPerf LoadGen's four (one module: the scenario is the cell's)
    "single-stream": "inferbench.scenarios.serve:Session",
    "multi-stream": "inferbench.scenarios.serve:Session",
    "server": "inferbench.scenarios.serve:Session",
    "offline": "inferbench.scenarios.serve:Session",
    "train": "inferbench.scenarios.train:Session",
}
#: The scenarios that serve queries under LoadGen (what --slo-p99 and --quick's LoadGen settings apply to).
SERVING = ("single-stream", "multi-stream", "server", "offline")


def get_scenario(name: str) -> Callable[..., Any]:
    """The scenario's session class (what a worker runs)."""
    module, _, func = SCENARIOS[name].partition(":")
    return getattr(importlib.import_module(module), func)


def scenario_module(name: str) -> Any:
    """The scenario's module: besides its session class, ``merge(outcomes, batch_size)`` (one cell's processes as
    one outcome) and ``finalize_group(outcomes)`` (what a group's cells share), which the parent calls."""
    return importlib.import_module(SCENARIOS[name].partition(":")[0])
