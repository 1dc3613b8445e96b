"""``--time-budget``: a run or sweep bounded in time, in every scenario. The plan says up front what fits, and the run
keeps to it.

Up front (:func:`fit`), the plan's time is estimated from what a cell costs: each framework's set-up as runs on this
machine shape measured it (:func:`measured_setups`; else :data:`SETUP_S`, measured on a 2-core CPU), the rounds' own
length, the exports not in the cache yet. When it does not fit, the rounds and blocks shrink, down to
``--quick``'s (6 rounds of 0.5 s a cell, one worker process), then the costliest frameworks are left out one by
one, each said in a line;
a plan that still does not fit is refused (one group) or runs its first groups (a sweep: the others stay for
``--resume``). While it runs (:class:`Deadline`), the time measured so far replaces the estimate: a group that would
end past the budget is not started, a worker or tuning phase whose foreseen time would pass it is not started either
(``execution/rounds.py``), and a group's rounds stop early (never below :data:`MIN_ROUNDS`, nor two per
worker process) when another round would pass it — a serving scenario's LoadGen tests too: its answer then stands on
the tests that ran, and a server search cut short says the largest load VALID so far.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..base.size import Size
from ..exporters.cache import artifact_dir, read_manifest
from ..measure.trackers.machine import MIN_JUDGED_S, MachineMonitor, Readers
from ..registry.frameworks import get_framework
from ..registry.models import get_model
from ..registry.scenarios import scenario
from ..spec import QUICK, CellKey, RunConfig, TimingConfig, groups_of
from .exports import cache_key
from .remembered import _ranking_key, likely_first, measured_setups, rankings, setup_key

# --quick's blocks are never shorter than the machine check can judge (spec.QUICK says why)
assert QUICK["min_duration_s"] / QUICK["rounds"] >= MIN_JUDGED_S

#: Seconds a worker takes to start, load its framework, check parity and make its first call (warm-up not
#: included), on the 2-core AMD EPYC VM: a default run's phases (2026-11-26, -v) and the committed records' cold
#: starts, rounded up; torch-inductor compiles on its first call. A framework not listed: :data:`OTHER_SETUP_S`.
SETUP_S = {"onnxrt": 0.5, "openvino": 2.0, "tf": 4.0, "tfxla": 7.0, "keras": 6.0, "keras-eager": 6.0,
           "kerasxla": 10.0, "torch": 4.5, "torch-native": 11.0, "torch-inductor": 14.5, "tensorrt": 30.0}


OTHER_SETUP_S = 3.0


#: An artifact kind's export when it is not in the cache (the default set's five took 36 s on that VM).
EXPORT_S = 8.0


#: The most a busy machine's set-ups are counted longer than a quiet one's (:func:`busy_slowdown`).
MAX_BUSY_SLOWDOWN = 4.0


#: Tuning takes about this many times its timed budget (its rounds' minimum calls, the settings' switches), plus half
#: a worker's set-up (a load-time setting starts a worker of its own).
TUNE_FACTOR = 2.0


#: Per block: the settling pause, the block's warm-up calls and the parent's messages.
BLOCK_OVERHEAD_S = 0.1


#: Per round: the machine's speed read by the probe (CPU runs).
PROBE_S = 0.3


#: The fewest rounds a group keeps when the budget cuts them: enough for an interval, two per worker process.
MIN_ROUNDS = 3


#: The steps tried between the plan's own timing (1) and the floor (0).
STEPS = (1.0, 0.75, 0.5, 0.3, 0.15, 0.0)


#: A LoadGen test's seconds at the least (its minimum duration, --quick's or the default, plus LoadGen's start and
#: the detail log parsed; a test also waits for its minimum queries, 662 for a server's or a multi-stream's p99:
#: longer on a slow model, which the plan cannot know); a cell runs its scenario's ``tests`` at least, else one a
#: round. The single query loop and the served parity are in its set-up (:data:`SERVE_SETUP_S`).
SERVE_TEST_S = {True: 0.8, False: 2.3}


SERVE_SETUP_S = 2.5


def say(seconds: float) -> str:
    """Seconds for people: 45 s, 7m30s, 1h05m."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def setup_s(framework: str, processes: int, timing: TimingConfig, measured: dict[str, float] | None = None,
            scenario: str = "inference", slowdown: float = 1.0) -> float:
    """A cell's workers started one after another, each warmed up: as measured on this machine for its scenario
    (``measured``: :func:`measured_setups`, the warm-up included), else from :data:`SETUP_S`; ``slowdown`` times
    that where other work takes the cores now (:func:`busy_slowdown`)."""
    if measured and setup_key(framework, scenario) in measured:
        return slowdown * processes * measured[setup_key(framework, scenario)]
    return slowdown * processes * (SETUP_S.get(framework, OTHER_SETUP_S) + timing.warmup_seconds)


def busy_slowdown(threads: int, window_s: float = 0.5, readers: Any = None) -> tuple[float, float | None]:
    """How much longer loading and first calls take now than on a quiet machine: ``threads`` over the cores other
    work leaves free, read over ``window_s`` (1 when they fit; at most :data:`MAX_BUSY_SLOWDOWN`), with the cores
    other work took (None where /proc cannot be read: 1 then)."""
    monitor = MachineMonitor(readers or Readers())
    monitor.start()
    time.sleep(window_s)
    seen = monitor.stop(window_s)
    if not seen.get("known"):
        return 1.0, None
    others, cores = float(seen["other_cores"]), os.cpu_count() or 1
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return slowdown_for(threads, others + max(0, cores - mine), cores), others  # cores outside our affinity: taken


def slowdown_for(threads: int, other_cores: float, cores: int) -> float:
    """``threads`` over the cores ``other_cores`` of other work leave free (a quarter of one at least): 1 when they
    fit, at most :data:`MAX_BUSY_SLOWDOWN`."""
    free = max(cores - other_cores, 0.25)
    return min(max(1.0, threads / free), MAX_BUSY_SLOWDOWN)


def group_s(cells: list[CellKey], config: RunConfig, measured: dict[str, float] | None = None,
            slowdown: float = 1.0) -> float:
    """One group (cells of one model, resolution and batch size), set-up and rounds; a serving scenario's cells by
    their LoadGen tests (:data:`SERVE_TEST_S`), the server's search by its steps."""
    timing = config.timing
    entry = scenario(config.scenario)
    measured = measured_setups(config) if measured is None else measured
    if entry.serves:  # one worker a cell; its set-up measured includes the single queries and the served parity
        tests = max(timing.rounds, entry.quick_tests if config.quick else entry.tests)
        return sum(worker_setup_s(c, config, measured, slowdown) for c in cells) + tests * round_s(len(cells), config)
    processes = min(config.processes, timing.rounds)
    set_up = sum(processes * worker_setup_s(c, config, measured, slowdown) for c in cells)
    return set_up + tuning_s(cells, config, measured, slowdown) + timing.rounds * round_s(len(cells), config)


def worker_setup_s(cell: CellKey, config: RunConfig, measured: dict[str, float] | None = None,
                   slowdown: float = 1.0) -> float:
    """One worker of ``cell`` started, loaded and warmed up (:func:`setup_s`); a serving worker's also runs its single
    queries and served parity (:data:`SERVE_SETUP_S` where no run measured it)."""
    measured = measured_setups(config) if measured is None else measured
    served = scenario(cell.scenario).serves and setup_key(cell.framework, cell.scenario) not in measured
    return setup_s(cell.framework, 1, config.timing, measured, cell.scenario, slowdown) + (
        slowdown * SERVE_SETUP_S if served else 0.0)


def tuning_s(cells: list[CellKey], config: RunConfig, measured: dict[str, float] | None = None,
             slowdown: float = 1.0) -> float:
    """The tuning phase of ``cells`` (those tuned): :data:`TUNE_FACTOR` times its timed budget, plus half a worker's
    set-up (a load-time setting starts a worker of its own)."""
    measured = measured_setups(config) if measured is None else measured
    return sum(TUNE_FACTOR * config.tune_budget_s + worker_setup_s(c, config, measured, slowdown) / 2
               for c in cells if c.options.tune)


def round_s(cells: int, config: RunConfig) -> float:
    """One interleaved round of ``cells`` cells: each one's block (a serving scenario's: a LoadGen test,
    :data:`SERVE_TEST_S`) with its overhead, and the machine's speed read before it (CPU runs)."""
    block = SERVE_TEST_S[config.quick] if scenario(config.scenario).serves else config.timing.block_s
    return cells * (block + BLOCK_OVERHEAD_S) + (PROBE_S if config.device.kind == "cpu" else 0.0)


def fewest_rounds(processes: int) -> int:
    """The rounds a group keeps however its budget goes: :data:`MIN_ROUNDS`, and two per worker process."""
    return max(MIN_ROUNDS, 2 * processes)


def kinds(cells: list[CellKey]) -> set[str]:
    """The artifact kinds ``cells`` load, with the Keras export and the reference outputs every cell needs."""
    return ({get_framework(c.framework).artifact_for(get_model(c.model), c.scenario, c.precision) for c in cells}
            | {"keras", "reference"}) - {"none"}


def by_pair(cells: list[CellKey]) -> dict[tuple[str, Size], list[CellKey]]:
    """``cells`` per (model, resolution): what one export serves."""
    pairs: dict[tuple[str, Size], list[CellKey]] = {}
    for c in cells:
        pairs.setdefault((c.model, c.resolution), []).append(c)
    return pairs


def export_s(cells: list[CellKey], to_export: dict[tuple[str, Size], set[str]]) -> float:
    """The exports ``cells`` need that ``to_export`` (per (model, resolution), the kinds not in the cache) lacks."""
    return EXPORT_S * sum(len(to_export.get(pair, set()) & kinds(same)) for pair, same in by_pair(cells).items())


def estimate(config: RunConfig, cells: list[CellKey], to_export: dict[tuple[str, Size], set[str]],
             measured: dict[str, float] | None = None, slowdown: float = 1.0) -> float:
    """Seconds the plan takes: every group, plus the exports its cells need that are not in the cache (their
    set-ups ``slowdown`` times longer while other work takes the cores)."""
    measured = measured_setups(config) if measured is None else measured  # read once, not per group
    return slowdown * export_s(cells, to_export) + sum(group_s(g, config, measured, slowdown)
                                                       for g in groups_of(cells, config.sequential))


def shrunk(config: RunConfig, step: float) -> RunConfig:
    """The plan ``step`` of the way from --quick's settings (0) to its own (1), never longer than its own: its blocks,
    warm-up and tuning shortened, its rounds fewer (two per worker process at least); at 0, --quick's, one worker
    process a cell included (its records say they were quick)."""
    timing, floor = config.timing, step <= 0

    def between(own: float, least: float) -> float:  # at step 0: the smaller of the two
        return own if own <= least else least + max(step, 0.0) * (own - least)

    processes = min(config.processes, int(QUICK["processes"])) if floor else config.processes
    rounds = int(max(min(timing.rounds, 2 * processes), round(between(timing.rounds, QUICK["rounds"]))))
    return dataclasses.replace(
        config, quick=config.quick or floor, processes=processes,
        tune_budget_s=between(config.tune_budget_s, QUICK["tune_budget_s"]),
        timing=dataclasses.replace(timing, rounds=rounds,
                                   min_duration_s=between(timing.min_duration_s, QUICK["min_duration_s"]),
                                   warmup_seconds=between(timing.warmup_seconds, QUICK["warmup_seconds"])))


def said(config: RunConfig) -> str:
    return (f"{config.timing.rounds} rounds, {config.timing.min_duration_s:.2g} s a cell, "
            f"{config.processes} process{'es' if config.processes > 1 else ''}")


@dataclass(frozen=True)
class Fitted:
    config: RunConfig
    cells: tuple[CellKey, ...]
    left_out: dict[str, str]  # framework -> why the budget may leave it out (loaded only where time is left)
    lines: tuple[str, ...]  # what the plan says up front
    estimate_s: float


def fit(config: RunConfig, cells: list[CellKey], budget_s: float, to_export: dict[tuple[str, Size], set[str]],
        busy: tuple[float, float | None] = (1.0, None)) -> Fitted:
    """The plan within ``budget_s``: its own timing if it fits, else shrunk step by step; then the frameworks that
    may not fit are named (:func:`_at_risk`), kept in the plan, loaded last. UsageError when not even one group's
    time fits. ``busy``: how much longer set-ups take now, and the cores other work took (:func:`busy_slowdown`)."""
    measured = measured_setups(config)  # read once: every estimate below takes it
    slowdown = busy[0]
    own = estimate(config, cells, to_export, measured, slowdown)
    known = [fw for fw in dict.fromkeys(c.framework for c in cells) if setup_key(fw, config.scenario) in measured]
    source = (f" (set-up as this machine measured it for {', '.join(known)}" + (
        "; estimated for the others" if len(known) < len({c.framework for c in cells}) else "") + ")") if known else \
        " (set-up estimated: no run on this machine measured it yet)"
    if slowdown >= 1.05:  # (a few hundredths of a core: counted, not worth a line that reads "0.0 of 2 cores")
        source += (f"; the machine is busy now (other work took {busy[1]:.1f} of {os.cpu_count()} cores): set-ups "
                   f"and exports counted {slowdown:.1f}x longer")
    if own <= budget_s:  # (the likely winners first even so: a machine slower than foreseen may leave some out)
        return Fitted(config, tuple(likely_first(list(cells), rankings(config))), {},
                      (f"time budget {say(budget_s)}: the plan takes about {say(own)}{source}",), own)
    for step in STEPS:
        fitted = shrunk(config, step)
        took = estimate(fitted, cells, to_export, measured, slowdown)
        if took <= budget_s:
            break
    lines = []
    changed = [f"measuring {said(fitted)} instead of {said(config)}"] if said(fitted) != said(config) else []
    if fitted.tune_budget_s != config.tune_budget_s and any(c.options.tune for c in cells):
        changed.append(f"tuning {fitted.tune_budget_s:.2g} s instead of {config.tune_budget_s:.2g}")
    if fitted.timing.warmup_seconds != config.timing.warmup_seconds:
        changed.append(f"warming up {fitted.timing.warmup_seconds:.2g} s instead of {config.timing.warmup_seconds:.2g}")
    if changed:  # only what differs (a --quick plan is at the floor already but for its warm-up, say)
        lines.append(f"time budget {say(budget_s)}: the plan would take about {say(own)}; {', '.join(changed)}")
    ordered, at_risk, kept, took, said_risk = _at_risk(fitted, cells, budget_s, to_export, measured, slowdown)
    lines += said_risk
    if took > budget_s:  # the first group, and every export made before it (those of the frameworks at risk too)
        first = first_group_s(fitted, kept, to_export)[1] + slowdown * (export_s(list(cells), to_export)
                                                                        - export_s(kept, to_export))
        if first > budget_s:  # not even one group fits (its exports included): refused, nothing made
            raise UsageError(f"--time-budget {say(budget_s)} is too short: the smallest plan's first group "
                             f"({', '.join(dict.fromkeys(c.framework for c in kept))}, {said(fitted)}) takes about "
                             f"{say(first)}; give at least {say(first * 1.2)}")
        lines.append(f"time budget {say(budget_s)}: even so the plan takes about {say(took)}: the groups that fit "
                     "are measured, the others are left unmeasured (a sweep: for --resume)")
    else:
        lines.append(f"time budget {say(budget_s)}: the plan takes about {say(took)}{source}")
    return Fitted(fitted, tuple(ordered), at_risk, tuple(lines), took)


def _at_risk(config: RunConfig, cells: list[CellKey], budget_s: float, to_export: dict[tuple[str, Size], set[str]],
             measured: dict[str, float], slowdown: float,
             ) -> tuple[list[CellKey], dict[str, str], list[CellKey], float, list[str]]:
    """The frameworks a shrunk plan may still not fit, each with its share of the plan: the last of this machine's
    last valid ranking first (else the costliest), until the rest fits or one is left. Every framework stays in the
    plan, the likely winners first and those at risk last: each is loaded only where the time left allows it. (The
    cells in that order, those at risk, those kept, the kept cells' time, the line said.)"""
    ranked = rankings(config)
    remembered = any(_ranking_key(c) in ranked for c in cells)
    ordered = likely_first(list(cells), ranked)
    every = slowdown * export_s(list(cells), to_export)  # a framework at risk is still exported, up front

    def cost(part: list[CellKey]) -> float:
        return estimate(config, part, to_export, measured, slowdown) + every - slowdown * export_s(part, to_export)

    at_risk: dict[str, str] = {}
    kept = list(ordered)
    took = cost(kept)
    while took > budget_s and len({c.framework for c in kept}) > 1:
        saves = {fw: took - cost([c for c in kept if c.framework != fw]) for fw in dict.fromkeys(c.framework
                                                                                                for c in kept)}
        last = kept[-1].framework if remembered else max(saves, key=lambda fw: saves[fw])
        at_risk[last] = f"about {say(saves[last])} of the plan"
        kept = [c for c in kept if c.framework != last]
        took = cost(kept)
    if not at_risk:
        return ordered, at_risk, kept, took, []
    line = (f"time budget {say(budget_s)} may leave out " + ", ".join(f"{k} ({why})" for k, why in at_risk.items())
            + ": each framework is loaded only where the time left allows it (its set-up as measured "
            + ("here), the fastest of this machine's last valid run first" if remembered else
               "here), the costliest last") + "; the answer names any left out")
    ordered = likely_first([c for c in ordered if c.framework not in at_risk]
                           + [c for c in ordered if c.framework in at_risk], {})
    return ordered, at_risk, kept, took, [line]


def first_group_s(config: RunConfig, cells: list[CellKey],
                  to_export: dict[tuple[str, Size], set[str]]) -> tuple[list[CellKey], float]:
    """The first group ``cells`` run in, and its time with its exports: what any budget must hold."""
    first = groups_of(cells, config.sequential)[0]
    return first, estimate(config, first, to_export)


class Deadline:
    """The budget kept while the run goes: ``clock`` seconds since it started against ``budget_s``."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s, self.clock = budget_s, clock
        self.started = clock()
        self.wall_started = time.monotonic()  # for the moment it passes (a timer), whatever ``clock`` is

    def wall_left(self) -> float:
        """Seconds left on the wall clock (what a timer waits for the moment the budget passes)."""
        return self.budget_s - (time.monotonic() - self.wall_started)

    def left(self) -> float:
        return self.budget_s - (self.clock() - self.started)

    def fits(self, seconds: float) -> bool:
        return seconds <= self.left()

    def overrun(self) -> str | None:
        """The line a run or sweep ends with when it passed its budget (None within it): the plan estimates what it
        cannot know yet (loading, first calls, compilation, tuning), and the user is told, not left to notice."""
        took = self.clock() - self.started
        if took <= self.budget_s:
            return None
        return (f"--time-budget {say(self.budget_s)} passed: this took {say(took)}, {say(took - self.budget_s)} more "
                "(loading, first calls, compilation and tuning are what its estimate foresees worst; each cell's "
                "record has its load and first-call times)")

    def passed_line(self) -> str:
        """The line said the moment the budget passes (:class:`~inferbench.execution.progress.Progress`)."""
        return (f"--time-budget {say(self.budget_s)} passed: the group running ends at its fewest rounds, its "
                "frameworks not yet loaded and the groups not started are left unmeasured (loading, first calls and "
                "tuning took longer than foreseen)")

    def spent(self) -> dict[str, Any]:
        """The budget and what was spent, as ``recommendation.json`` keeps it: ``budget_s``, ``took_s``,
        ``overrun_s`` (0 within it)."""
        took = self.clock() - self.started
        return {"budget_s": self.budget_s, "took_s": round(took, 1), "overrun_s": round(max(0.0, took - self.budget_s),
                                                                                         1)}

    def another_round(self, done: int, last_s: float, processes: int = 1) -> bool:
        """After ``done`` rounds of a group (the last took ``last_s``) with ``processes`` worker processes a cell:
        may another one start? Always below :func:`fewest_rounds`."""
        return done < fewest_rounds(processes) or self.fits(last_s)


def group_estimate(progress: Any, cells: list[CellKey], config: RunConfig) -> float:
    """A group's time from the phases measured so far (:class:`~inferbench.execution.progress.Progress`), or from
    :func:`group_s` before any was."""
    measured = progress.group_s(len(cells))
    return measured if measured is not None else group_s(cells, config)


def to_export(config: RunConfig, cells: list[CellKey]) -> dict[tuple[str, Size], set[str]]:
    """Per (model, resolution), the artifact kinds ``cells`` need that its cache folder lacks (read from the manifests:
    nothing is hashed)."""
    out = {}
    for (model, resolution), same in by_pair(cells).items():
        folder = artifact_dir(Path(config.cache_dir), cache_key(config, get_model(model), resolution))
        out[(model, resolution)] = kinds(same) - set(read_manifest(folder)["artifacts"])
    return out
