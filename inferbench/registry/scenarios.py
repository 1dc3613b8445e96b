"""The scenarios a cell can follow: one entry each, declaring what the rest of the code asks of it (its session
class, its objective, what its names say, and which rules apply: LoadGen, a latency bound, training, the closed
loop's rounds). Code outside ``inferbench/scenarios/`` asks the entry, never the name; nothing is imported until a
worker runs a session."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Session(Protocol):
    """What a worker calls on a cell's session (``execution/worker.py``), built as ``Session(job, emit)``: one block
    a round, ``idle`` once the rounds are over (its trackers read the idle device, the group's workers at once), then
    ``finish`` (the cell's outcome: its record's blocks)."""

    stopped: str | None  # why the rounds ended before the scenario's own count (--time-budget), set before finish

    def block(self, round_index: int) -> dict[str, Any]: ...

    def idle(self) -> dict[str, Any]: ...

    def finish(self) -> Any: ...


@runtime_checkable
class TunedSession(Session, Protocol):
    """A session of a scenario that tunes (``Scenario.tunes``): timed blocks under a live setting, then the chosen
    one applied before the timed rounds."""

    def tune(self, setting: dict[str, Any], round_index: int, block_s: float) -> dict[str, Any]: ...

    def apply(self, setting: dict[str, Any], tuning: dict[str, Any]) -> dict[str, Any]: ...


@runtime_checkable
class ScenarioModule(Protocol):
    """What the parent calls on a scenario's module (``execution/rounds.py``), besides its session class."""

    def merge(self, outcomes: list[Any], batch_size: int) -> Any:
        """One cell's processes as one outcome."""

    def finalize_group(self, outcomes: list[Any]) -> list[Any]:
        """What a group's cells share (a failed cell is None and stays None)."""


@dataclass(frozen=True)
class Scenario:
    session: str  # "module:Class": the Session a worker runs; the module is a ScenarioModule
    objective: str  # what "best" means for it unless --objective says otherwise
    label: str = ""  # what a cell's names and titles add for it (none for the default, inference)
    closed_loop: bool = False  # calls back to back in interleaved rounds: --target-ci adds rounds to it, and
    #                            published closed-loop figures compare with it (--time-budget cuts every scenario's)
    serves: bool = False  # under MLPerf LoadGen: one worker process a cell, LoadGen's logs kept beside the record
    bound: bool = False  # a latency bound (--slo-p99): the answer is the largest load that holds it
    trains: bool = False  # a training step: the trainer, the training artifact and reference steps, its memory
    reference: str = "reference"  # the artifact its parity compares with
    tunes: bool = False  # --tune applies: its session is a TunedSession
    tests: int = 0  # LoadGen tests a cell runs at least, whatever --rounds says (--time-budget's plan counts them)
    quick_tests: int = 0  # the same with --quick (one serving configuration, a shorter search)
    # the summary table's columns: what it leads with where its answer is a rate ("" : the latency leads), and what
    # its latency column is
    rate_column: str = ""
    latency_column: str = "p50 ms [95% CI]"


_SERVE = "inferbench.scenarios.serve.session:Session"  # MLPerf LoadGen's four: one module, the scenario is the cell's
SCENARIOS: dict[str, Scenario] = {
    "inference": Scenario("inferbench.scenarios.inference:Session", "p50", closed_loop=True, tunes=True),
    "single-stream": Scenario(_SERVE, "p90", "single-stream", serves=True),
    "multi-stream": Scenario(_SERVE, "p99", "multi-stream", serves=True),
    # a server search over two serving configurations (7 steps each at most) and 9 confirmations at most; offline
    # each configuration thrice (scenarios/serve/search.py: SEARCH_STEPS, CONFIRM_MAX); --quick one configuration,
    # 4 steps and 5 confirmations (QUICK_SEARCH_STEPS, QUICK_CONFIRM_MAX)
    "server": Scenario(_SERVE, "throughput", "server", serves=True, bound=True, tests=2 * 7 + 9, quick_tests=4 + 5,
                       rate_column="QPS at the bound [bracket]", latency_column="query p50 ms"),
    "offline": Scenario(_SERVE, "throughput", "offline", serves=True, tests=2 * 3, quick_tests=3,
                        rate_column="samples/s [95% CI]", latency_column="query p50 ms (from the burst)"),
    "train": Scenario("inferbench.scenarios.train:Session", "throughput", "train", trains=True,
                      reference="train-reference", rate_column="samples/s [95% CI]",
                      latency_column="step p50 ms [95% CI]"),
}
#: The scenarios that serve queries under LoadGen (what --slo-p99 and --quick's LoadGen settings apply to).
SERVING = tuple(k for k, s in SCENARIOS.items() if s.serves)


def scenario(name: str | None) -> Scenario:
    """The entry of scenario ``name`` (None or an unknown name: inference's, as a record from before scenarios)."""
    return SCENARIOS.get(str(name), SCENARIOS["inference"])


def get_scenario(name: str) -> Callable[..., Session]:
    """The scenario's session class (what a worker runs)."""
    module, _, func = SCENARIOS[name].session.partition(":")
    return getattr(importlib.import_module(module), func)


def scenario_module(name: str) -> ScenarioModule:
    """The scenario's module: besides its session class, ``merge(outcomes, batch_size)`` (one cell's processes as
    one outcome) and ``finalize_group(outcomes)`` (what a group's cells share), which the parent calls."""
    module = importlib.import_module(SCENARIOS[name].session.partition(":")[0])
    if not isinstance(module, ScenarioModule):
        raise TypeError(f"{module.__name__} lacks merge or finalize_group (registry/scenarios.ScenarioModule)")
    return module
