"""The server scenario's search for the largest load that holds the latency bound: a bracketing search per serving
configuration (:class:`Search`), then the rule that says which load held (:func:`held`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .loadgen import Knobs

SEARCH_PRECISION = 1.10  # the server search stops when its bracket is this narrow
SEARCH_STEPS = 7  # per serving configuration
#: The server search halves at most down to this share of its start (itself 60% of the runtime's capacity at that
#: concurrency): at a few percent of capacity a query hardly ever waits, so a p99 over the bound there is the runtime's
#: own tail, not its load, and lower loads only make every test longer (662 queries at 1 QPS: 11 minutes).
SEARCH_FLOOR = 1 / 8
CONFIRM_ROUNDS = 3  # the answer: this many VALID tests in a row at one load
CONFIRM_MAX = 9  # confirmation tests at most; each failure steps the load down by SEARCH_PRECISION and starts again
#: --quick: one serving configuration (the runtime's own concurrency, no batching delay), a shorter search (its
#: bracket wider) and fewer confirmations: 4 + 5 tests at most instead of 2 x 7 + 9 (the registry's quick_tests)
QUICK_SEARCH_STEPS, QUICK_CONFIRM_MAX = 4, 5


def limits(quick: bool) -> tuple[int, int]:
    """The search's steps per configuration and the confirmation tests at most."""
    return (QUICK_SEARCH_STEPS, QUICK_CONFIRM_MAX) if quick else (SEARCH_STEPS, CONFIRM_MAX)


@dataclass
class Search:
    """A bracketing search for the largest VALID target QPS: double until a run is INVALID, halve until one is
    VALID (not below :data:`SEARCH_FLOOR` of the start), then bisect geometrically until the bracket is within
    :data:`SEARCH_PRECISION`."""

    knobs: Knobs
    next_qps: float
    valid: float | None = None  # the largest VALID target so far
    invalid: float | None = None  # the smallest INVALID one
    steps: int = 0
    floor: float = 0.0  # the lowest target the search tries
    at_floor: bool = False  # INVALID at the floor: no load held
    max_steps: int = SEARCH_STEPS

    def __post_init__(self) -> None:
        self.floor = self.floor or self.next_qps * SEARCH_FLOOR

    @property
    def done(self) -> bool:
        return self.steps >= self.max_steps or self.at_floor or (
            self.valid is not None and self.invalid is not None and self.invalid / self.valid <= SEARCH_PRECISION)

    def record(self, qps: float, is_valid: bool) -> None:
        self.steps += 1
        if is_valid:
            self.valid = max(self.valid or 0.0, qps)
        else:
            self.invalid = qps if self.invalid is None else min(self.invalid, qps)
        if self.invalid is None:
            self.next_qps = qps * 2
        elif self.valid is None:
            self.at_floor = qps <= self.floor * 1.0001
            self.next_qps = max(qps / 2, self.floor)
        else:
            self.next_qps = math.sqrt(self.valid * self.invalid)


def held(tests: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]] | None:
    """The largest load one configuration held, from its tests in the order they ran (search and confirmation
    alike): the largest L such that :data:`CONFIRM_ROUNDS` tests in a row were VALID at loads of L or more (a load
    that holds a higher rate holds a lower one) and none of its tests at L or below was INVALID; with the tests it
    stands on. None when no load held: one VALID test, or two, is luck on a shared machine, not an answer."""
    best = None
    for i in range(len(tests) - CONFIRM_ROUNDS + 1):
        window = tests[i:i + CONFIRM_ROUNDS]
        if not all(t["valid"] for t in window):
            continue
        load = min(t["target"] for t in window)
        if any(not t["valid"] and t["target"] <= load for t in tests):
            continue
        if best is None or load > best[0]:
            best = (load, window)
    return best

