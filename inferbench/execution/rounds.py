"""Parent side of the rounds: the cells of a group measured in interleaved blocks.

Every cell of a group (a run's cells of one model, resolution and batch size) gets ``config.processes`` worker
processes of its own (3 by default where the rounds give each two, else 2), started one after another so that load
and first-call times are not contended. Once all are ready, each round sends each cell's block to one of its workers
(round r to worker r mod P: every worker measures some of the rounds), the cells in a fresh random order per round,
and waits for each block before the next: one worker measures at a time, the others wait idle, so isolation is as
strict as one process per run, and a slow change of the machine lands on every cell of a round alike. Each framework
is loaded once per worker, not once per round. What differs between a cell's workers and stays for their whole life
(memory layout, thread placement) is what a second invocation meets anew: its size is measured from them
(:mod:`inferbench.measure.stats`), and the scenario merges the workers' outcomes into the cell's.

A cell asked to be tuned (``+tuned``) first goes through a tuning phase (:func:`_tune`): a worker for each of its
runner's load-time settings beside its own, every (worker, live setting) pair a short block per tuning round, all
of the group's candidates in a fresh random order each round; :func:`inferbench.measure.tuning.choose` picks the
setting, the chosen worker measures the cell with it, the others are closed.

With ``--target-ci`` the rounds go on past the configured count, one at a time, until every paired ratio of the
group is known within it (:func:`inferbench.measure.stats.widest_interval`, from the block medians the workers
reply with), or :data:`TARGET_CI_ROUNDS` times the count have run; the records say which (``timing.target_ci``).

A worker that fails (at set-up or in a block) or runs out of its time ends with a failed result; the
other cells go on.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..base.codec import plain
from ..measure.stats import widest_interval
from ..measure.tuning import setting_digest
from ..registry.scenarios import scenario
from ..spec import CellJob, ChildResult
from .budget import (
    TUNE_FACTOR,
    Deadline,
    fewest_rounds,
    measured_setups,
    remember_setups,
    round_s,
    setup_key,
    worker_setup_s,
)
from .isolate import Child

#: Pause before each block, so that the previous worker's spinning thread pools (ONNX Runtime, OpenMP)
#: have gone to sleep before the next block is timed.
SETTLE_S = 0.02
#: Pause before the machine's speed is read, so that the last block's spinning thread pools have gone to sleep.
PROBE_SETTLE_S = 0.05
#: Rounds of the tuning phase: the fewest that give a paired interval.
TUNE_ROUNDS = 3
#: --target-ci adds rounds up to this many times --rounds.
TARGET_CI_ROUNDS = 4


@dataclass
class _Cell:
    """A worker process of a cell."""

    job: CellJob
    child: Child
    used_s: float = 0.0  # the worker's own time so far (set-up and blocks): what --timeout limits
    result: ChildResult | None = None  # set when it has ended
    tuning: dict[str, Any] | None = None  # the tuning phase's decision this worker measures with
    rounds: int | None = None  # the rounds its scenario asked for when ready (a search's steps)
    setup_s: float | None = None  # its start to ready (on --time-budget's clock): what the next plans foresee


def measure_group(jobs: list[CellJob], envs: list[dict[str, str]], seed: int,
                  progress: Callable[[str, str], None], timeout_s: float | None = None,
                  note: Callable[[str, str], None] | None = None,
                  rounds_done: Callable[[float], None] | None = None,
                  deadline: Deadline | None = None) -> list[ChildResult]:
    """Measure ``jobs`` in interleaved rounds; one result per job, in order (its workers' outcomes merged by the
    scenario). ``seed`` draws the order of every round; ``progress(label, text)`` hears the passing phases,
    ``note`` what lasts (a tuning's outcome), ``rounds_done(share)`` the share of the rounds done after each;
    ``deadline`` (:class:`~inferbench.execution.budget.Deadline`, --time-budget) stops a group's rounds early when
    another would pass it (never below its minimum), in every scenario; the workers are told why (``stopped``)."""
    from ..registry.scenarios import scenario_module

    replicas: list[list[_Cell]] = []  # per job: its workers, the first one tuned (if asked) and the others alike
    spawned: list[_Cell] = []  # the tuning phase's extra workers
    probe: SpeedProbe | None = None
    clock = time.monotonic if deadline is None else deadline.clock  # set-ups and rounds timed as the budget is
    budgeted = _Budgeted(deadline, jobs[0].config if jobs else None)
    try:
        for job, env in zip(jobs, envs):
            if replicas and not budgeted.room_to_load(job, _alive(replicas)):
                (note or progress)(job.cell.label, LEFT_OUT)  # not loaded, left for --resume
                replicas.append([])
                continue
            worker = _start(job, env, progress, timeout_s, clock=clock)
            budgeted.started(job, worker)
            replicas.append([worker])
        order = random.Random(seed)
        tuned = [(r[0], env) for r, env in zip(replicas, envs)
                 if r and r[0].job.cell.options.tune and r[0].result is None]
        _tune(tuned, order, progress, note or progress, timeout_s, spawned,
              budgeted.room_to_tune([c for c, _ in tuned], _alive(replicas)), clock)
        # the cells' other processes, at the first one's setting: a second for every cell before any third (the
        # budget may leave room for some only)
        wanted = [min(w[0].job.config.processes, w[0].job.config.timing.rounds) if w and w[0].result is None else 1
                  for w in replicas]
        for i in range(1, max(wanted, default=1)):
            for workers, env, count in zip(replicas, envs, wanted):
                if i >= count or len(workers) < i or any(w.result is not None for w in workers):
                    continue  # all it wants, one not started, or a worker of it failed (the cell with it)
                first = workers[0]
                if not budgeted.room_for_process(first, i + 1, _alive(replicas)):
                    continue
                worker = _start(first.job, env, progress, timeout_s, f" (process {i + 1})", clock)
                workers.append(worker)
                if worker.result is None and first.tuning is not None:
                    worker.child.send({"apply": {"setting": first.tuning["chosen_live"], "tuning": first.tuning}})
                    _await(worker, "apply", timeout_s)
        for workers, count in zip(replicas, wanted):
            if workers and len(workers) < count and all(w.result is None for w in workers):
                (note or progress)(workers[0].job.cell.label, fewer_processes(len(workers), count))
        setups: dict[str, list[float]] = {}  # each worker's set-up, kept for the next plan on this machine
        for worker in (w for ws in replicas for w in ws):
            if worker.setup_s is not None and not worker.job.cell.options.ab:  # B's are another install's
                setups.setdefault(setup_key(worker.job.cell.framework, worker.job.cell.scenario), []).append(
                    worker.setup_s)
        if jobs:
            remember_setups(jobs[0].config, setups)
        rounds = max([jobs[0].config.timing.rounds if jobs else 0] + [w.rounds or 0 for ws in replicas for w in ws])
        if jobs and rounds != jobs[0].config.timing.rounds:  # the group's announcement said the configured count
            (note or progress)(_group_label(jobs), f"{rounds} interleaved rounds, the scenario's own (its search and "
                               f"confirmations), not the {jobs[0].config.timing.rounds} configured")
        probe = SpeedProbe(envs[0]) if jobs and jobs[0].config.device.kind == "cpu" else None
        if rounds_done is not None:
            rounds_done(0.0)  # the rounds begin: what came before was the group's set-up
        closed = bool(jobs) and scenario(jobs[0].cell.scenario).closed_loop
        cut = deadline is not None
        stopped: str | None = None  # why the rounds ended before the scenario's own count, told to the workers
        target = jobs[0].config.target_ci if closed else None
        medians: list[dict[int, float]] = [{} for _ in replicas]  # each cell's block medians (--target-ci)

        def widest() -> dict[str, Any] | None:  # the cells still measuring, each with its own workers
            return widest_interval([(m if ws and all(x.result is None for x in ws) else {}, max(1, len(ws)))
                                    for m, ws in zip(medians, replicas)])

        done, round_started, found = 0, clock(), None
        for r in range(rounds * TARGET_CI_ROUNDS if target else rounds):
            live = [(i, w[r % len(w)]) for i, w in enumerate(replicas) if w and all(x.result is None for x in w)]
            if not live:
                break
            if target and r >= rounds:
                found = widest()
                if found is not None and found["half"] <= target:
                    break
            if cut and r and deadline is not None and not deadline.another_round(
                    r, clock() - round_started, max(len(w) for w in replicas)):
                stopped = f"--time-budget: rounds stopped at {r} of {rounds}, another would pass it"
                (note or progress)(_group_label(jobs), stopped)
                break
            round_started = clock()
            if probe is not None:
                probe.read(r)
            order.shuffle(live)
            for i, worker in live:
                time.sleep(SETTLE_S)
                worker.child.send({"block": r})
                reply = _await(worker, "block", timeout_s)
                if reply is not None and isinstance(reply["block"], dict) and reply["block"].get("p50_ms"):
                    medians[i][r] = reply["block"]["p50_ms"]
            progress(_group_label(jobs), f"round {r + 1}/{rounds} done" if r < rounds else
                     f"round {r + 1} done (--target-ci: at most {rounds * TARGET_CI_ROUNDS})")
            done = r + 1
            if rounds_done is not None:
                rounds_done(min(1.0, done / rounds))
        reached = None
        if target and done >= rounds:
            found = widest()
            reached = {"target": target, "rounds": done, "reached": found is not None and found["half"] <= target,
                       "widest": None if found is None else {
                           "cell": _name(jobs[found["cell"]]), "ratio": found["ratio"], "ci95": found["ci95"],
                           "against": None if found["against"] is None else _name(jobs[found["against"]])}}
            (note or progress)(_group_label(jobs), _target_said(reached))
        if probe is not None and done:
            probe.read(done)  # after the last round: every round read before and after (speed.steady)
        finishing = [x for w in replicas if all(x.result is None for x in w) for x in w]
        for worker in finishing:  # every worker idle at once while its trackers read what follows the rounds (the
            worker.child.send({"idle": True})  # idle power again): none collects its record until all have
        for worker in finishing:
            _await(worker, "idle", timeout_s)
        finishing = [x for x in finishing if x.result is None]
        for worker in finishing:  # all at once: the workers collect and exit side by side
            worker.child.send({"finish": True, **({"stopped": stopped} if stopped else {})})
        for worker in finishing:
            worker.result = worker.child.result(_left(worker, timeout_s))
    finally:
        for worker in [x for w in replicas for x in w] + spawned:
            worker.child.close()
        if probe is not None:
            probe.close()
    out = []
    for job, workers in zip(jobs, replicas):
        if not workers:
            out.append(ChildResult(ok=False, error=LEFT_OUT, left_out=True))
            continue
        failed = next((w.result or ChildResult(ok=False, error="not measured") for w in workers
                       if w.result is None or not w.result.ok), None)
        out.append(failed or ChildResult(ok=True, cell=scenario_module(job.cell.scenario).merge(
            [w.result.cell for w in workers if w.result is not None], job.cell.batch_size)))
    if jobs:  # what the group's cells share (the between-process spread), pooled over them
        cells = scenario_module(jobs[0].cell.scenario).finalize_group([r.cell if r.ok else None for r in out])
        out = [dataclasses.replace(r, cell=c) if r.ok else r for r, c in zip(out, cells)]
    if probe is not None and probe.readings:  # the machine's speed, every round
        out = [dataclasses.replace(r, cell=_with_speed(r.cell, probe.readings)) if r.ok and r.cell else r
               for r in out]
    if reached is not None:  # what --target-ci reached, in every record of the group
        out = [dataclasses.replace(r, cell=dataclasses.replace(r.cell, blocks={**r.cell.blocks, "timing": {
            **r.cell.blocks["timing"], "target_ci": reached}})) if r.ok and r.cell else r for r in out]
    return out


def fewer_processes(started: int, wanted: int) -> str:
    """Said of a loaded cell whose other worker processes were not all started: the budget left no room for them."""
    missing = "the " + ("second" if started == 1 and wanted == 2 else "third" if started == 2 and wanted == 3 else
                        "others")
    covered = "this process" if started == 1 else f"these {started} processes"
    return (f"{started} of {wanted} worker processes: too little of --time-budget was left to start {missing} (its "
            f"interval covers {covered} only)")


def _alive(replicas: list[list[_Cell]]) -> int:
    """The cells loaded whose workers are all measuring (what a round holds)."""
    return sum(1 for workers in replicas if workers and all(w.result is None for w in workers))


#: Said of a loaded cell whose other worker processes were not started because the budget left no room for them.
FEWER_PROCESSES = "worker processes: too little of --time-budget was left to start"
#: A tuned cell's tuning reason when the budget left no room for its tuning phase.
NOT_TUNED = ("not tuned: too little of --time-budget was left for its tuning phase; inferbench's own setting is "
             "measured")
#: A cell whose worker was never started: the budget left no room to load it when its turn came.
LEFT_OUT = ("left out: too little of --time-budget was left to load it (no record; a sweep's --resume, or a new run, "
            "measures it)")


class _Budgeted:
    """What --time-budget leaves room for while a group sets up (``deadline`` None: everything): a worker is started,
    or a tuning phase begun, only where its foreseen time and the group's fewest rounds with it still fit. A worker's
    set-up is foreseen as this machine measured it (:func:`~inferbench.execution.budget.worker_setup_s`), as many
    times longer as this group's set-ups have taken so far over their foresight; a cell's other process as its
    first one took."""

    def __init__(self, deadline: Deadline | None, config: Any) -> None:
        self.deadline, self.config = deadline, config
        self.measured = measured_setups(config) if deadline is not None and config is not None else {}
        self.took, self.foreseen = 0.0, 0.0  # this group's set-ups so far, and what was foreseen for them

    def _setup(self, job: CellJob) -> float:
        return worker_setup_s(job.cell, self.config, self.measured)

    def _fits(self, seconds: float, cells: int, processes: int = 1) -> bool:
        return self.deadline is None or self.deadline.fits(
            seconds + fewest_rounds(processes) * round_s(cells, self.config))

    def room_to_load(self, job: CellJob, loaded: int) -> bool:
        return self._fits(self._slower() * self._setup(job), loaded + 1)

    def started(self, job: CellJob, worker: _Cell) -> None:
        if worker.setup_s is not None:
            self.took, self.foreseen = self.took + worker.setup_s, self.foreseen + self._setup(job)

    def room_to_tune(self, cells: list[_Cell], loaded: int) -> bool:
        """Room for the tuning phase of ``cells``: its timed blocks (:func:`~inferbench.execution.budget.tuning_s`'s
        share) and a worker of its own for each load-time setting other than the default, each as long to set up as
        this group's have been so far over their foresight."""
        if not cells:
            return True
        seconds = sum(TUNE_FACTOR * cell.job.config.tune_budget_s
                      + (len(_grid(cell)[0]) - 1) * self._slower() * self._setup(cell.job) for cell in cells)
        return self._fits(seconds, loaded)

    def _slower(self) -> float:
        return max(1.0, self.took / self.foreseen) if self.foreseen > 0 else 1.0

    def room_for_process(self, first: _Cell, processes: int, loaded: int) -> bool:
        setup = first.setup_s if first.setup_s is not None else self._setup(first.job)
        return self._fits(setup, loaded, processes)


def _name(job: CellJob) -> str:
    c = job.cell
    return c.framework + ("" if c.precision == "fp32" else f":{c.precision}")


def _target_said(reached: dict[str, Any]) -> str:
    """--target-ci's outcome in words: how many rounds, and the widest interval with both its bounds."""
    w = reached["widest"]
    what = "no interval yet" if w is None else (
        f"{w['cell']}'s median {w['ratio']:.4g} ms [95% CI {w['ci95'][0]:.4g}-{w['ci95'][1]:.4g}]"
        if w["against"] is None else
        f"{w['cell']} over {w['against']} {w['ratio']:.3f}x [95% CI {w['ci95'][0]:.3f}-{w['ci95'][1]:.3f}]")
    if reached["reached"]:
        return f"--target-ci +-{reached['target']:.1%} reached after {reached['rounds']} rounds; the widest: {what}"
    return (f"--target-ci +-{reached['target']:.1%} not reached: stopped at {reached['rounds']} rounds "
            f"({TARGET_CI_ROUNDS}x --rounds); the widest: {what}; the rounds could not narrow it (a busy machine, "
            "or a level that moves from round to round)")


def _with_speed(outcome: Any, readings: list[dict[str, Any]]) -> Any:
    from ..measure.trackers.speed import summarize

    blocks = dict(outcome.blocks)
    blocks["machine_state"] = {**(blocks.get("machine_state") or {}), "speed": summarize(readings)}
    return dataclasses.replace(outcome, blocks=blocks)


class SpeedProbe:
    """The machine's own speed before every round and after the last, read by a probe process of its own with the
    run's threads (:mod:`inferbench.measure.trackers.speed`), every worker idle."""

    def __init__(self, env: dict[str, str]) -> None:
        import subprocess
        import sys

        self.readings: list[dict[str, Any]] = []
        from .isolate import _PACKAGE_PARENT

        env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)}
        try:
            self.proc: Any = subprocess.Popen([sys.executable, "-m", "inferbench.measure.trackers.speed"],
                                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None

    def read(self, round_index: int) -> None:
        if self.proc is None:
            return
        time.sleep(PROBE_SETTLE_S)  # the last block's spinning threads asleep
        try:
            self.proc.stdin.write("probe\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            self.readings.append({"round": round_index, "gflops": float(line)})
        except (OSError, ValueError):
            self.proc = None

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def _start(job: CellJob, env: dict[str, str], progress: Callable[[str, str], None], timeout_s: float | None,
           suffix: str = "", clock: Callable[[], float] = time.monotonic) -> _Cell:
    """A worker for ``job``, loaded and ready (or ended with its failure), its set-up timed on ``clock``."""
    started = clock()
    worker = _Cell(job, Child(job, env, lambda phase, lb=job.cell.label + suffix: progress(lb, phase)))
    try:
        ready = _await(worker, "ready", timeout_s)
    except BaseException:  # interrupted while it sets up (a SIGTERM during its served-parity test): its folder too
        worker.child.close()
        raise
    worker.rounds = (ready or {}).get("rounds")
    worker.setup_s = clock() - started if ready is not None else None
    return worker


def _grid(cell: _Cell) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A cell's runner's tuning grid on this machine: its load-time settings and its live ones, the default first."""
    from ..registry.frameworks import load_runner

    runner: Any = load_runner(cell.job.framework)
    return runner.tuning_grid(cell.job.config.threads, cell.job.config.device.kind)


def _tune(cells: list[tuple[_Cell, dict[str, str]]], order: random.Random, progress: Callable[[str, str], None],
          note: Callable[[str, str], None], timeout_s: float | None, spawned: list[_Cell],
          room: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
    """The tuning phase of ``cells`` (with their workers' environments): candidates measured in interleaved rounds,
    each cell then measured by the worker of its chosen setting, with its chosen live setting. Without ``room`` for it
    (--time-budget), no tuning worker is started: each cell is measured at inferbench's own setting, and its
    record's tuning block says why."""
    from ..measure.tuning import Candidate, choose

    if not cells:
        return
    if not room:
        for cell, _ in cells:
            config = cell.job.config
            load_grid, live_grid = _grid(cell)
            decision = {**choose([Candidate(load_grid[0], live_grid[0])]), "reason": NOT_TUNED, "seconds": 0.0,
                        "rounds": 0, "block_s": 0.0}
            decision["digest"] = setting_digest(decision["chosen"])
            cell.tuning = plain(decision)
            cell.child.send({"apply": {"setting": decision["chosen_live"], "tuning": cell.tuning}})
            if _await(cell, "apply", timeout_s) is not None:
                note(cell.job.cell.label, NOT_TUNED)
        return
    plans: list[tuple[_Cell, list[_Cell], list[tuple[_Cell, Candidate]], float]] = []
    before = {id(cell): cell.used_s for cell, _ in cells}  # the tuning's own time: its workers' from here on
    for cell, env in cells:
        config = cell.job.config
        load_grid, live_grid = _grid(cell)
        workers = [cell]
        for setting in load_grid[1:]:  # a worker of its own for each load-time setting
            job = dataclasses.replace(cell.job, setting=setting)
            extra = _start(job, env, progress, timeout_s, f" ({', '.join(f'{k}={v}' for k, v in setting.items())})",
                           clock)
            spawned.append(extra)
            if extra.result is None:
                workers.append(extra)
            else:
                extra.child.close()
        candidates = [(w, Candidate(w.job.setting, live)) for w in workers for live in live_grid]
        block_s = max(0.05, config.tune_budget_s / (TUNE_ROUNDS * len(candidates)))
        plans.append((cell, workers, candidates, block_s))
    for r in range(TUNE_ROUNDS):
        pairs = [(w, cand, block_s) for _, _, candidates, block_s in plans for w, cand in candidates]
        order.shuffle(pairs)
        for worker, cand, block_s in pairs:
            if worker.result is not None:
                continue
            time.sleep(SETTLE_S)
            worker.child.send({"tune": {"setting": cand.live, "round": r, "block_s": block_s}})
            reply = _await(worker, "tune", timeout_s)
            if reply is not None:
                cand.medians_ms[r] = float(reply["tune"]["p50_ms"])
        progress(_group_label([c.job for c, _ in cells]), f"tuning round {r + 1}/{TUNE_ROUNDS} done")
    decisions = [choose([cand for _, cand in candidates]) for _, _, candidates, _ in plans]
    _confirm(plans, decisions, order, progress, timeout_s)
    for (cell, workers, candidates, block_s), decision in zip(plans, decisions):
        chosen = next((w for w, cand in candidates if cand.load == decision["chosen_load"] and w.result is None), cell)
        seconds = sum(w.used_s for w in workers) - before[id(cell)]
        if chosen is not cell:  # the cell goes on in the worker of its chosen load-time setting
            cell.child.close()
            cell.child, cell.job = chosen.child, chosen.job
            cell.setup_s = chosen.setup_s if chosen.setup_s is not None else cell.setup_s  # its next process's
            cell.used_s, cell.result = cell.used_s + chosen.used_s, None
        for worker in workers[1:]:
            if worker is not chosen:
                worker.child.close()
        if cell.result is not None:
            continue
        decision.update(seconds=seconds, rounds=TUNE_ROUNDS, block_s=block_s, digest=setting_digest(decision["chosen"]))
        cell.tuning = plain(decision)
        cell.child.send({"apply": {"setting": decision["chosen_live"], "tuning": cell.tuning}})
        if _await(cell, "apply", timeout_s) is not None:
            note(cell.job.cell.label, f"tuned in {decision['seconds']:.0f} s: " + (
                "inferbench's own setting kept" if decision["is_default"] else
                ", ".join(f"{k}={v}" for k, v in decision["chosen"].items())) + f" ({decision['reason']})")


def _confirm(plans: list[Any], decisions: list[dict[str, Any]], order: random.Random,
             progress: Callable[[str, str], None], timeout_s: float | None) -> None:
    """Fresh rounds for each cell whose tuning switched: its chosen setting and its default alone, interleaved as
    the tuning's; each decision confirmed or undone on them (:func:`inferbench.measure.tuning.confirm`), in place."""
    from ..measure.tuning import Candidate, confirm

    pairs: list[tuple[int, list[tuple[_Cell, Candidate]], float]] = []
    for i, ((_, _, candidates, block_s), decision) in enumerate(zip(plans, decisions)):
        if decision["is_default"]:
            continue
        default = candidates[0]
        chosen = next(c for c in candidates if (c[1].load, c[1].live) == (decision["chosen_load"],
                                                                          decision["chosen_live"]))
        pairs.append((i, [(w, Candidate(c.load, c.live)) for w, c in (default, chosen)], block_s))
    if not pairs:
        return
    for r in range(TUNE_ROUNDS):
        blocks = [(w, cand, block_s) for _, pair, block_s in pairs for w, cand in pair]
        order.shuffle(blocks)
        for worker, cand, block_s in blocks:
            if worker.result is not None:
                continue
            time.sleep(SETTLE_S)
            worker.child.send({"tune": {"setting": cand.live, "round": TUNE_ROUNDS + r, "block_s": block_s}})
            reply = _await(worker, "tune", timeout_s)
            if reply is not None:
                cand.medians_ms[r] = float(reply["tune"]["p50_ms"])
        progress(_group_label([plans[i][0].job for i, _, _ in pairs]), f"confirming round {r + 1}/{TUNE_ROUNDS} done")
    for i, pair, _ in pairs:
        (_, default), (_, chosen) = pair
        decisions[i] = confirm(decisions[i], chosen, default)


def _left(cell: _Cell, timeout_s: float | None) -> float | None:
    return None if timeout_s is None else max(0.0, timeout_s - cell.used_s)


def _await(cell: _Cell, key: str, timeout_s: float | None) -> dict[str, Any] | None:
    """Wait for the worker's ``key`` message and return it; on its end or time-out, its result is the failure
    (and None is returned)."""
    start = time.monotonic()
    try:
        message = cell.child.reply(_left(cell, timeout_s))
    except TimeoutError:
        cell.child.close()
        cell.result = ChildResult(ok=False, error=f"timed out after {timeout_s:g} s")
        return None
    cell.used_s += time.monotonic() - start
    if message is None or key not in message:  # it ended: its result says why
        cell.result = cell.child.result(30.0)
        return None
    return message


def _group_label(jobs: list[CellJob]) -> str:
    c = jobs[0].cell
    return f"{c.model}@{c.resolution} bs{c.batch_size}"
