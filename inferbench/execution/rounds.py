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

A cell asked to be tuned (``+tuned``) first goes through a tuning phase (:mod:`.tune_phase`); each worker is handled
through :mod:`.handle` (started, its replies awaited within its share of --timeout).

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
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from ..measure.stats import widest_interval
from ..measure.trackers.speed import summarize
from ..registry.scenarios import scenario, scenario_module
from ..spec import CellJob, ChildResult
from . import handle, tune_phase
from .budget import TUNE_FACTOR, Deadline, fewest_rounds, round_s, worker_setup_s
from .handle import SETTLE_S, Worker, group_label
from .isolate import _PACKAGE_PARENT
from .remembered import measured_setups, remember_setups, setup_key

#: Pause before the machine's speed is read, so that the last block's spinning thread pools have gone to sleep.
PROBE_SETTLE_S = 0.05


#: --target-ci adds rounds up to this many times --rounds.
TARGET_CI_ROUNDS = 4


class _Group:
    """One group's measurement, phase by phase (:func:`measure_group`): its workers started, tuned, their other
    processes started, the interleaved rounds, the idle readings and the finish, the results merged."""

    def __init__(self, jobs: list[CellJob], envs: list[dict[str, str]], progress: Callable[[str, str], None],
                 timeout_s: float | None, note: Callable[[str, str], None] | None, deadline: Deadline | None) -> None:
        self.jobs, self.envs, self.progress, self.timeout_s, self.deadline = jobs, envs, progress, timeout_s, deadline
        self.say = note or progress  # what lasts (a tuning's outcome, a cell left out)
        self.replicas: list[list[Worker]] = []  # per job: its workers, the first one tuned (if asked), the others alike
        self.spawned: list[Worker] = []  # the tuning phase's extra workers
        self.probe: SpeedProbe | None = None
        self.clock = time.monotonic if deadline is None else deadline.clock  # set-ups and rounds timed as the budget is
        self.budgeted = _Budgeted(deadline, jobs[0].config if jobs else None)
        self.label = group_label(jobs)

    def measuring(self, workers: list[Worker]) -> bool:
        """A cell loaded whose workers have all gone on measuring (none failed)."""
        return bool(workers) and all(w.result is None for w in workers)

    def start_workers(self) -> None:
        """Each cell's first worker, one after another, where the budget leaves room to load it."""
        for job, env in zip(self.jobs, self.envs):
            if self.replicas and not self.budgeted.room_to_load(job, _alive(self.replicas)):
                self.say(job.cell.label, LEFT_OUT)  # not loaded, left for --resume
                self.replicas.append([])
                continue
            worker = handle.start(job, env, self.progress, self.timeout_s, clock=self.clock)
            self.budgeted.started(job, worker)
            self.replicas.append([worker])

    def tune(self, order: random.Random) -> None:
        tuned = [(r[0], env) for r, env in zip(self.replicas, self.envs)
                 if r and r[0].job.cell.options.tune and r[0].result is None]
        tune_phase.tune(tuned, order, self.progress, self.say, self.timeout_s, self.spawned,
              self.budgeted.room_to_tune([c for c, _ in tuned], _alive(self.replicas)), self.clock)

    def start_other_processes(self) -> None:
        """The cells' other processes, at the first one's setting: a second for every cell before any third (the
        budget may leave room for some only); a cell given fewer than it wanted says so."""
        wanted = [min(w[0].job.config.processes, w[0].job.config.timing.rounds) if w and w[0].result is None else 1
                  for w in self.replicas]
        for i in range(1, max(wanted, default=1)):
            for workers, env, count in zip(self.replicas, self.envs, wanted):
                if i >= count or len(workers) < i or any(w.result is not None for w in workers):
                    continue  # all it wants, one not started, or a worker of it failed (the cell with it)
                first = workers[0]
                if not self.budgeted.room_for_process(first, i + 1, _alive(self.replicas)):
                    continue
                job = dataclasses.replace(first.job, judged=first.judged)  # counted once a cell, in its first
                worker = handle.start(job, env, self.progress, self.timeout_s, f" (process {i + 1})", self.clock)
                workers.append(worker)
                if worker.result is None and first.tuning is not None:
                    worker.child.send({"apply": {"setting": first.tuning["chosen_live"], "tuning": first.tuning}})
                    handle.await_reply(worker, "apply", self.timeout_s)
        for workers, count in zip(self.replicas, wanted):
            if workers and len(workers) < count and all(w.result is None for w in workers):
                self.say(workers[0].job.cell.label, fewer_processes(len(workers), count))

    def keep_setups(self) -> None:
        """Each worker's set-up, kept for the next plan on this machine (B's of an A/B are another install's)."""
        setups: dict[str, list[float]] = {}
        for worker in (w for ws in self.replicas for w in ws):
            if worker.setup_s is not None and not worker.job.cell.options.ab:
                setups.setdefault(setup_key(worker.job.cell.framework, worker.job.cell.scenario), []).append(
                    worker.setup_s)
        remember_setups(self.jobs[0].config, setups)

    def rounds(self) -> int:
        """The rounds to measure: the configured count, or a scenario's own (a server's search and confirmations),
        said where they differ (the group's announcement said the configured count)."""
        configured = self.jobs[0].config.timing.rounds
        rounds = max([configured] + [w.rounds or 0 for ws in self.replicas for w in ws])
        if rounds != configured:
            self.say(self.label, f"{rounds} interleaved rounds, the scenario's own (its search and confirmations), "
                     f"not the {configured} configured")
        return rounds

    def measure_rounds(self, rounds: int, order: random.Random, rounds_done: Callable[[float], None] | None,
                       ) -> tuple[int, str | None, dict[str, Any] | None]:
        """The interleaved rounds: each live cell's block in a fresh random order per round, the machine's speed read
        before each; --target-ci goes on past ``rounds`` until every paired ratio is known well enough (or the cap),
        --time-budget stops where another round would pass it. (rounds done, why stopped early, --target-ci's
        outcome)."""
        target = self.jobs[0].config.target_ci if scenario(self.jobs[0].cell.scenario).closed_loop else None
        medians: list[dict[int, float]] = [{} for _ in self.replicas]  # each cell's block medians (--target-ci)

        def widest() -> dict[str, Any] | None:  # the cells still measuring, each with its own workers
            return widest_interval([(m if self.measuring(ws) else {}, max(1, len(ws)))
                                    for m, ws in zip(medians, self.replicas)])

        if rounds_done is not None:
            rounds_done(0.0)  # the rounds begin: what came before was the group's set-up
        done, round_started, stopped = 0, self.clock(), None
        for r in range(rounds * TARGET_CI_ROUNDS if target else rounds):
            live = [(i, w[r % len(w)]) for i, w in enumerate(self.replicas) if self.measuring(w)]
            if not live or target and r >= rounds and _narrow_enough(widest(), target):
                break
            if self.deadline is not None and r and not self.deadline.another_round(
                    r, self.clock() - round_started, max(len(w) for w in self.replicas)):
                stopped = f"--time-budget: rounds stopped at {r} of {rounds}, another would pass it"
                self.say(self.label, stopped)
                break
            round_started = self.clock()
            self.block_round(r, live, order, medians)
            self.progress(self.label, f"round {r + 1}/{rounds} done" if r < rounds else
                          f"round {r + 1} done (--target-ci: at most {rounds * TARGET_CI_ROUNDS})")
            done = r + 1
            if rounds_done is not None:
                rounds_done(min(1.0, done / rounds))
        reached = self.target_reached(target, done, widest()) if target and done >= rounds else None
        return done, stopped, reached

    def block_round(self, r: int, live: list[tuple[int, Worker]], order: random.Random,
                    medians: list[dict[int, float]]) -> None:
        """Round ``r``: the machine's speed read, then each live cell's block, in a fresh random order."""
        if self.probe is not None:
            self.probe.read(r)
        order.shuffle(live)
        for i, worker in live:
            time.sleep(SETTLE_S)
            worker.child.send({"block": r})
            reply = handle.await_reply(worker, "block", self.timeout_s)
            if reply is not None and isinstance(reply["block"], dict) and reply["block"].get("p50_ms"):
                medians[i][r] = reply["block"]["p50_ms"]

    def target_reached(self, target: float, done: int, found: dict[str, Any] | None) -> dict[str, Any]:
        """What --target-ci reached (said, and written into every record of the group)."""
        reached = {"target": target, "rounds": done, "reached": _narrow_enough(found, target),
                   "widest": None if found is None else {
                       "cell": _name(self.jobs[found["cell"]]), "ratio": found["ratio"], "ci95": found["ci95"],
                       "against": None if found["against"] is None else _name(self.jobs[found["against"]])}}
        self.say(self.label, _target_said(reached))
        return reached

    def finish(self, stopped: str | None) -> None:
        """Every measuring worker idle at once while its trackers read what follows the rounds (the idle power
        again), none collecting its record until all have; then all collect and exit side by side."""
        finishing = [x for w in self.replicas if self.measuring(w) for x in w]
        for worker in finishing:
            worker.child.send({"idle": True})
        for worker in finishing:
            handle.await_reply(worker, "idle", self.timeout_s)
        finishing = [x for x in finishing if x.result is None]
        for worker in finishing:
            worker.child.send({"finish": True, **({"stopped": stopped} if stopped else {})})
        for worker in finishing:
            worker.result = worker.child.result(handle.time_left(worker, self.timeout_s))

    def close(self) -> None:
        for worker in [x for w in self.replicas for x in w] + self.spawned:
            worker.child.close()
        if self.probe is not None:
            self.probe.close()

    def results(self, reached: dict[str, Any] | None) -> list[ChildResult]:
        """One result per job: its workers' outcomes merged by the scenario, what the group's cells share pooled
        (the between-process spread), the machine's speed every round and --target-ci's outcome added."""
        module = scenario_module(self.jobs[0].cell.scenario)
        out = []
        for job, workers in zip(self.jobs, self.replicas):
            if not workers:
                out.append(ChildResult(ok=False, error=LEFT_OUT, left_out=True))
                continue
            failed = next((w.result or ChildResult(ok=False, error="not measured") for w in workers
                           if w.result is None or not w.result.ok), None)
            out.append(failed or ChildResult(ok=True, cell=module.merge(
                [w.result.cell for w in workers if w.result is not None], job.cell.batch_size)))
        cells = module.finalize_group([r.cell if r.ok else None for r in out])
        out = [dataclasses.replace(r, cell=c) if r.ok else r for r, c in zip(out, cells)]
        if self.probe is not None and self.probe.readings:  # the machine's speed, every round
            out = [dataclasses.replace(r, cell=_with_speed(r.cell, self.probe.readings)) if r.ok and r.cell else r
                   for r in out]
        if reached is not None:  # what --target-ci reached, in every record of the group
            out = [dataclasses.replace(r, cell=dataclasses.replace(r.cell, blocks={**r.cell.blocks, "timing": {
                **r.cell.blocks["timing"], "target_ci": reached}})) if r.ok and r.cell else r for r in out]
        return out


def _narrow_enough(found: dict[str, Any] | None, target: float) -> bool:
    return found is not None and found["half"] <= target


def measure_group(jobs: list[CellJob], envs: list[dict[str, str]], seed: int,
                  progress: Callable[[str, str], None], timeout_s: float | None = None,
                  note: Callable[[str, str], None] | None = None,
                  rounds_done: Callable[[float], None] | None = None,
                  deadline: Deadline | None = None) -> list[ChildResult]:
    """Measure ``jobs`` in interleaved rounds; one result per job, in order (its workers' outcomes merged by the
    scenario). ``seed`` draws the order of every round; ``progress(label, text)`` hears the passing phases,
    ``note`` what lasts (a tuning's outcome), ``rounds_done(share)`` the share of the rounds done after each;
    ``deadline`` (:class:`~inferbench.execution.Deadline`, --time-budget) stops a group's rounds early when
    another would pass it (never below its minimum), in every scenario; the workers are told why (``stopped``)."""
    if not jobs:
        return []
    group = _Group(jobs, envs, progress, timeout_s, note, deadline)
    try:
        group.start_workers()
        order = random.Random(seed)
        group.tune(order)
        group.start_other_processes()
        group.keep_setups()
        rounds = group.rounds()
        group.probe = SpeedProbe(envs[0]) if jobs[0].config.device.kind == "cpu" else None
        done, stopped, reached = group.measure_rounds(rounds, order, rounds_done)
        if group.probe is not None and done:
            group.probe.read(done)  # after the last round: every round read before and after (speed.steady)
        group.finish(stopped)
    finally:
        group.close()
    return group.results(reached)


def fewer_processes(started: int, wanted: int) -> str:
    """Said of a loaded cell whose other worker processes were not all started: the budget left no room for them."""
    missing = "the " + ("second" if started == 1 and wanted == 2 else "third" if started == 2 and wanted == 3 else
                        "others")
    covered = "this process" if started == 1 else f"these {started} processes"
    return (f"{started} of {wanted} worker processes: too little of --time-budget was left to start {missing} (its "
            f"interval covers {covered} only)")


def _alive(replicas: list[list[Worker]]) -> int:
    """The cells loaded whose workers are all measuring (what a round holds)."""
    return sum(1 for workers in replicas if workers and all(w.result is None for w in workers))


#: Said of a loaded cell whose other worker processes were not started because the budget left no room for them.
FEWER_PROCESSES = "worker processes: too little of --time-budget was left to start"


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

    def started(self, job: CellJob, worker: Worker) -> None:
        if worker.setup_s is not None:
            self.took, self.foreseen = self.took + worker.setup_s, self.foreseen + self._setup(job)

    def room_to_tune(self, cells: list[Worker], loaded: int) -> bool:
        """Room for the tuning phase of ``cells``: its timed blocks (:func:`~inferbench.execution.budget.tuning_s`'s
        share) and a worker of its own for each load-time setting other than the default, each as long to set up as
        this group's have been so far over their foresight."""
        if not cells:
            return True
        seconds = sum(TUNE_FACTOR * cell.job.config.tune_budget_s
                      + (len(tune_phase.grid(cell)[0]) - 1) * self._slower() * self._setup(cell.job) for cell in cells)
        return self._fits(seconds, loaded)

    def _slower(self) -> float:
        return max(1.0, self.took / self.foreseen) if self.foreseen > 0 else 1.0

    def room_for_process(self, first: Worker, processes: int, loaded: int) -> bool:
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
    blocks = dict(outcome.blocks)
    blocks["machine_state"] = {**(blocks.get("machine_state") or {}), "speed": summarize(readings)}
    return dataclasses.replace(outcome, blocks=blocks)


class SpeedProbe:
    """The machine's own speed before every round and after the last, read by a probe process of its own with the
    run's threads (:mod:`inferbench.measure.trackers.speed`), every worker idle."""

    def __init__(self, env: dict[str, str]) -> None:
        self.readings: list[dict[str, Any]] = []

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
