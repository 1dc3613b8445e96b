"""The work shared by ``run`` and ``sweep``: export once per (model, resolution), then run each cell
in its own child process and write its record atomically.

The chain, in order: :class:`~inferbench.spec.RunConfig` + :class:`~inferbench.spec.CellKey` ->
:class:`~inferbench.spec.CellJob` (sent to the child) -> :class:`~inferbench.spec.ChildResult`
(sent back) -> :class:`~inferbench.records.record.Record` (written under the cell's file name).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..analysis.runfiles import RunFiles
from ..base.errors import UsageError
from ..records.record import Record, as_written, record_key, upgrade, write_record
from ..registry.frameworks import get_framework, unavailable_reason
from ..registry.scenarios import scenario
from ..scenarios.slowdown import TEST_SLOWDOWN, test_slowdown
from ..spec import CellJob, CellKey, ChildResult, RunConfig, groups_of
from .budget import Deadline, export_s, group_estimate, say, to_export
from .childenv import child_env, ignored_shell_variables, recorded_env
from .exports import ensure_exports, exported, memory_refusal, model_stats, provenance, training_plan
from .folders import set_aside_if_unreadable
from .progress import Progress


def cell_job(config: RunConfig, cell: CellKey, folder: Path, batch_sizes: tuple[int, ...],
             interleaving: dict[str, Any], run_dir: Path | None = None) -> CellJob:
    from ..registry.artifacts import EXPORTERS, INT8_FILES, int8_artifact
    from ..registry.models import get_model

    fw = get_framework(cell.framework)
    kind = fw.artifact_for(get_model(cell.model), cell.scenario, cell.precision)
    if kind in INT8_FILES and config.calibration is None:
        raise RuntimeError(f"{cell.label}: an INT8 cell without its calibration set")
    artifact = None if kind == "none" else str(folder / (
        int8_artifact(kind, config.calibration.digest) if kind in INT8_FILES and config.calibration
        else EXPORTERS[kind].path))
    log_dir = None if run_dir is None else str(run_dir / (Path(cell.filename).stem + ".loadgen"))
    return CellJob(cell=cell, framework=fw, config=config, artifact_dir=str(folder), artifact=artifact,
                   group_batch_sizes=batch_sizes, interleaving=interleaving,
                   log_dir=log_dir if scenario(cell.scenario).serves else None)


def cannot_run(config: RunConfig, cell: CellKey, failed_exports: dict[str, str]) -> str | None:
    from ..registry.models import get_model

    fw = get_framework(cell.framework)
    spec = get_model(cell.model)
    kind = fw.artifact_for(spec, cell.scenario, cell.precision)
    reason = unavailable_reason(fw, config.device.kind, spec, cell.options, exported(config, spec, [cell.resolution]),
                                cell.scenario)
    # every cell's parity needs the reference outputs (a training cell: the reference steps)
    for needed in (kind, scenario(cell.scenario).reference):
        if reason is None and needed in failed_exports:
            reason = f"export of {needed} failed: {failed_exports[needed]}"
    return reason


def run_group(config: RunConfig, cells: list[CellKey], folder: Path, failed_exports: dict[str, str], run_id: str,
              environment: dict[str, Any], batch_sizes: tuple[int, ...], progress: Progress,
              run_dir: Path | None = None, strict: bool = False,
              deadline: Deadline | None = None) -> list[Record | None]:
    """The records of one group's cells, measured together in interleaved rounds (:mod:`.rounds`); None for a cell
    --time-budget left out before it was loaded."""
    from .rounds import measure_group

    c = cells[0]
    outcomes = {cell: ChildResult(ok=False, error=reason) for cell in cells
                if (reason := cannot_run(config, cell, failed_exports)) is not None}
    runnable = [cell for cell in cells if cell not in outcomes]
    stats = model_stats(folder)
    together, too_big = True, memory_refusal(stats, len(runnable))
    if scenario(c.scenario).trains:  # gradients, the optimizer's state and the activations too
        together, too_big = training_plan(stats, len(runnable), config.processes, c.batch_size,
                                          config.options.optimizer)
        if too_big and strict:  # a batch the memory cannot hold: one line, nothing written
            raise UsageError(too_big)
        if not together and not too_big:
            progress.result(f"{c.model}@{c.resolution} bs{c.batch_size}", "one cell at a time: the group's training "
                            "workers side by side would not fit in memory (comparisons unpaired, intervals wider)")
    if too_big:
        outcomes.update({cell: ChildResult(ok=False, error=too_big) for cell in runnable})
        runnable = []
    # a nonce per invocation: it names the group (a cell re-run by --resume is never paired with earlier
    # rounds) and draws the order of its rounds
    nonce = uuid.uuid4().hex[:8]
    interleaving = {"group": f"{run_id}/{c.model}@{c.resolution}/bs{c.batch_size}/{nonce}", "group_cells": len(cells)}
    if not together:
        interleaving.update(group_cells=1, alone="memory")
    jobs = {cell: cell_job(config, cell, folder, batch_sizes, interleaving, run_dir) for cell in cells}
    envs = {cell: child_env(config, get_framework(cell.framework), cell) for cell in cells}
    measured: list[ChildResult] = []
    for part in [runnable] if together else [[cell] for cell in runnable]:
        before, size = len(measured) + len(outcomes), len(part)  # the group's cells measured (or refused) before
        measured += measure_group([jobs[x] for x in part], [envs[x] for x in part],
                                  int(nonce, 16), progress.say, config.timeout_s, progress.result,
                                  lambda share, b=before, n=size: progress.partial(b + n * share), deadline)
    outcomes.update(zip(runnable, measured))
    refused = [o for o in measured if o.usage_error]
    if strict and refused and len(refused) == len(runnable):  # bad input found by every worker (a bound no load
        raise UsageError(str(refused[0].error))  # can meet): one line, exit 2; a cell or two: their failed records
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return [None if outcomes[cell].left_out else  # never loaded (--time-budget): no record, --resume measures it
            Record.of(jobs[cell], run_id, created, installed(environment, config, cell), recorded_env(envs[cell]),
                      outcomes[cell], stats, provenance(folder, cell)) for cell in cells]


def installed(environment: dict[str, Any], config: RunConfig, cell: CellKey) -> dict[str, Any]:
    """The environment a cell's record says: the run's, with B's interpreter, Python and packages for an A/B twin
    (``--ab-python``: ``interpreter`` names it)."""
    if cell.options.ab and config.ab:
        return {**environment, "interpreter": config.ab["executable"], "python": config.ab["python"],
                "packages": config.ab["packages"]}
    return environment


def peak_fp32(config: RunConfig) -> dict[str, Any]:
    """The device's peak FP32 rate, measured once per machine and thread count (:mod:`inferbench.measure.peak`)."""
    import socket

    from ..base.machine import cpu_model
    from ..measure.peak import peak_fp32 as measured

    gpu = config.device.gpu
    key = {"host": socket.gethostname(), "device": gpu.uuid if gpu else cpu_model(), "threads": config.threads}
    return measured(config.device.kind, key, child_env(config), config.cache_dir)


#: A group's records as an executor hands them back: the machine that measured them (None: this one), its cells,
#: their records.
Finished = tuple[str | None, list[CellKey], list[Record | None]]  # None: a cell left out before it was loaded


class Executor(Protocol):
    """What the one group loop (:func:`_run_groups`) asks of an executor, and all it asks: start a group on a
    machine, say whether a machine is free and how many groups are running, hand back the groups that ended, and
    stop everything (Ctrl-C). :class:`Local` here; :class:`~inferbench.execution.distributed.RayGroups` on Ray."""

    cells_left: int  # the run's cells and groups to measure when the loop starts: the progress line's ETA
    groups_left: int

    def start(self, machine: str | None, group: list[CellKey], folder: Path, failed: dict[str, str],
              batch_sizes: tuple[int, ...], deadline: Deadline | None) -> None: ...

    def busy(self) -> int: ...

    def free(self, machine: str | None) -> bool: ...

    def wait(self) -> list[Finished]: ...

    def cancel(self) -> None: ...


#: How the group loop makes its executor: ``make(config, run_id, run_dir, progress, strict)`` (a class).
MakeExecutor = Callable[[RunConfig, str, Path, Progress, bool], Executor]


@dataclass
class Executed:
    records: list[dict[str, Any]]  # every record of the run's cells in its folder, at the current schema
    unwritten: dict[str, str] = field(default_factory=dict)  # cell label -> why its record could not be written
    unmeasured: list[str] = field(default_factory=list)  # cell labels --time-budget left for later


def execute(config: RunConfig, cells: list[CellKey], run_dir: Path, run_id: str,
            progress: Progress | None = None, strict: bool = True, objective: str = "p50",
            verbosity: int = 0, deadline: Deadline | None = None, executor: MakeExecutor | None = None) -> Executed:
    """Run every cell whose record is not in ``run_dir`` yet (the caller holds :func:`folder_lock`).

    The cells of one model, resolution and batch size form a group, measured together in interleaved rounds; the
    groups run one after another here (:class:`Local`), or one a node on a Ray cluster (``--executor ray``:
    :class:`~inferbench.execution.distributed.RayGroups`, a folder per named machine). Records are written
    atomically under the cell's file name when their group ends: an interrupted run (Ctrl-C or a kill) loses at most
    the group in progress, and running ``execute`` again on the same folder resumes without repeating or duplicating
    a cell. A record that cannot be read is set aside and its cell runs again; a record that cannot be written (disk
    full, permissions) fails that cell only. With a ``deadline`` (:class:`~inferbench.execution.budget.Deadline`,
    --time-budget), a group that would end past it is not started (its cells are ``unmeasured``), and a group's
    rounds stop when another would pass it.
    ``executor``: the class that measures a group (:class:`Local` unless given: ``RayGroups`` for ``--executor
    ray``), built as ``executor(config, run_id, run_dir, progress, strict)``.
    """
    ignored = ignored_shell_variables(config)
    if ignored:
        print(f"inferbench: not passed on to the frameworks (they change what is measured; inferbench sets its own "
              f"values, recorded in config.child_env; --pass-env NAME passes one on): {', '.join(ignored)}",
              file=sys.stderr)
    hook = os.environ.get(TEST_SLOWDOWN)
    if hook:  # a test hook that changes every timing of that framework: never silent outside the tests
        test_slowdown(hook.partition(":")[0])  # a factor that is no number above 1: one line, before anything runs
        print(f"inferbench: WARNING: {TEST_SLOWDOWN}={hook} is set: that framework's timed calls are slowed on "
              "purpose (a test hook, said in each record's timing.test_slowdown); unset it to measure",
              file=sys.stderr)
    progress = progress or Progress(len(cells), verbosity=verbosity, deadline=deadline,  # phases on the budget's clock
                                    clock=time.monotonic if deadline is None else deadline.clock)
    try:
        return _execute(config, cells, run_dir, run_id, progress, strict, objective, deadline, executor)
    finally:
        progress.close()  # a status line never swallows the next message (an error, Ctrl-C)


def pending(run_dir: Path, cells: list[CellKey]) -> list[CellKey]:
    """The cells of ``run_dir`` without a record yet (a write cut short by a kill is removed, an unreadable record
    set aside: its cell runs again)."""
    for stale in run_dir.glob(".*.tmp"):  # a write cut short by a kill; we hold the folder, no one else writes
        stale.unlink(missing_ok=True)
    for cell in cells:
        note = set_aside_if_unreadable(run_dir / cell.filename)
        if note:
            print(f"inferbench: {note}", file=sys.stderr)
    return [c for c in cells if not (run_dir / c.filename).exists()]


def environment_of(config: RunConfig) -> dict[str, Any]:
    """The machine a run measures on, as every record of it says (captured where the cells run)."""
    from .environment import capture, invocation_calibration

    return {**capture(config.device), "peak_fp32": peak_fp32(config),
            "invocation_spread": invocation_calibration(config.cache_dir, config.threads)}


class Exports:
    """A run's artifacts per (model, resolution), exported or taken from the cache on first need (every batch size
    and framework of the run's cells of that pair at once)."""

    def __init__(self, config: RunConfig, cells: list[CellKey], progress: Progress, strict: bool) -> None:
        self.config, self.cells, self.progress, self.strict = config, cells, progress, strict
        self.done: dict[tuple[str, int], tuple[Path, dict[str, str]]] = {}

    def of(self, cell: CellKey) -> tuple[Path, dict[str, str], tuple[int, ...]]:
        """The cache folder of ``cell``'s model and resolution, the kinds that failed to export (with why), and
        every batch size of the run at that pair."""
        pair = (cell.model, cell.resolution)
        same = [c for c in self.cells if (c.model, c.resolution) == pair]
        batch_sizes = tuple(sorted({c.batch_size for c in same}))
        if pair not in self.done:
            frameworks = [get_framework(k) for k in dict.fromkeys(c.framework for c in same)]
            reduced = any(c.precision != "fp32" for c in same)
            quantized = tuple(dict.fromkeys(c.framework for c in same if c.precision == "int8"))
            self.done[pair] = ensure_exports(self.config, cell.model, cell.resolution, frameworks, batch_sizes,
                                             self.progress, self.strict,
                                             self.config.agreement_inputs if reduced else 0, quantized)
        return (*self.done[pair], batch_sizes)


class Writer:
    """A run's records as their groups end: written atomically under their cell's file name, added to the summary
    files (which grow with each cell, never rebuilt by reading every record back), logged to the trackers, each
    said in one line. Every record of the run is kept in memory as it is written (read from disk once, for a
    resumed folder)."""

    def __init__(self, config: RunConfig, run_dir: Path, cells: list[CellKey], objective: str,
                 progress: Progress) -> None:
        self.config, self.run_dir, self.cells, self.progress = config, run_dir, cells, progress
        self.unwritten: dict[str, str] = {}
        self.left_out: list[str] = []  # cells --time-budget left out of a group before they were loaded
        self.kept = {record_key(r): r for r in records_of(run_dir, cells)}
        self.files = _run_files(run_dir, objective, ordered(self.kept, cells), self.unwritten, progress)

    def write(self, cells: list[CellKey], records: list[Record | None], where: str = "") -> None:
        """Write a group's ``records`` (``where``: the machine that measured them, for the progress line); a cell
        without one (left out by --time-budget before it was loaded) is counted unmeasured."""
        run_dir, unwritten, progress = self.run_dir, self.unwritten, self.progress
        self.left_out += [cell.label + where for cell, record in zip(cells, records) if record is None]
        for cell, record in ((c, r) for c, r in zip(cells, records) if r is not None):
            try:
                path = write_record(run_dir, record)
            except OSError as exc:  # disk full, permissions: this cell fails, the others still run
                unwritten[cell.label] = f"{exc.strerror or exc} ({exc.filename or run_dir})"
                progress.result(cell.label, f"RECORD NOT WRITTEN: {unwritten[cell.label]}", failure=True)
                continue
            written = as_written(record)
            self.kept[record_key(written)] = written
            _summary_file(self.files, lambda f, r=written: f.add(r), run_dir, unwritten, progress)
            if self.config.log_to:
                from .tracking import log

                unwritten.update(log(self.config.log_to, written, path))
            progress.result(cell.label + where, one_line(record), failure=record.status != "ok"
                            or record.parity["status"] == "failed")
        _summary_file(self.files, RunFiles.flush, run_dir, unwritten, progress)

    def executed(self) -> Executed:
        return Executed(ordered(self.kept, self.cells), self.unwritten)


class Local:
    """The local executor: each group measured here, one at a time, by its cells' worker processes
    (:func:`run_group`); the records of the machine this process runs on."""

    def __init__(self, config: RunConfig, run_id: str, run_dir: Path, progress: Progress, strict: bool) -> None:
        self.config, self.run_id, self.run_dir, self.progress, self.strict = config, run_id, run_dir, progress, strict
        self.environment = environment_of(config)
        calibration = self.environment["invocation_spread"] or {}
        if calibration.get("ignored"):  # read once, with the environment every record carries
            print(f"inferbench: WARNING: the calibration between invocations {calibration['file']} is ignored: "
                  f"{calibration['ignored']}; compare's intervals leave that spread out (python benchmarks/"
                  "aa_calibration.py --across measures it again)", file=sys.stderr)
        self.finished: list[Finished] = []
        self.cells_left, self.groups_left = 0, 0

    def start(self, machine: str | None, group: list[CellKey], folder: Path, failed: dict[str, str],
              batch_sizes: tuple[int, ...], deadline: Deadline | None) -> None:
        c, progress = group[0], self.progress
        if not self.config.sequential:
            progress.result(f"{c.model}@{c.resolution} bs{c.batch_size}",
                            f"group of {len(group)} cell{'s' if len(group) > 1 else ''}, {self.config.timing.rounds} "
                            "interleaved rounds")
        progress.measuring(self.cells_left, self.groups_left, len(group))
        records = run_group(self.config, group, folder, failed, self.run_id, self.environment, batch_sizes, progress,
                            self.run_dir, self.strict, deadline)
        progress.group_done(len(group), sum(r is None for r in records))
        self.finished.append((machine, group, records))

    def busy(self) -> int:
        return len(self.finished)

    def free(self, machine: str | None) -> bool:
        """May a group start now (one at a time here)?"""
        return not self.finished

    def wait(self) -> list[Finished]:
        finished, self.finished = self.finished, []
        return finished

    def cancel(self) -> None:
        """Nothing runs once start has returned."""


def _execute(config: RunConfig, cells: list[CellKey], run_dir: Path, run_id: str, progress: Progress, strict: bool,
             objective: str, deadline: Deadline | None = None, make: MakeExecutor | None = None) -> Executed:
    """The one group loop of every executor: pending cells per machine folder, the exports, the deadline checked
    before each group starts, the records written as each group ends."""
    folders = machine_folders(config, run_dir)
    machines = list(folders)
    todo: dict[str | None, list[CellKey]] = {}
    for m, folder in folders.items():
        folder.mkdir(exist_ok=True)
        todo[m] = pending(folder, cells)  # first: an unreadable record is set aside before the Writer reads them
    progress.total = len(cells) * len(machines)
    progress.done = progress.base = progress.total - sum(len(t) for t in todo.values())
    executor: Executor = (make or Local)(config, run_id, run_dir, progress, strict)
    exports = Exports(config, cells, progress, strict)
    if strict:  # bad input (weights a model cannot load) stops the run before any record is written
        for cell in (c for same in todo.values() for c in same):
            exports.of(cell)
    writers = {m: Writer(config, folders[m], cells, objective, progress) for m in machines}
    per_machine = {m: list(groups_of(todo[m], config.sequential)) for m in machines}
    queue = [(m, g) for i in range(max(map(len, per_machine.values()), default=0)) for m in machines
             for g in per_machine[m][i:i + 1]]  # the machines in turn: each node gets work from the start
    executor.cells_left, executor.groups_left = sum(len(g) for _, g in queue), len(queue)
    unmeasured = _run_groups(config, queue, writers, exports, executor, progress, deadline)
    unmeasured = [label for w in writers.values() for label in w.left_out] + unmeasured
    results = [w.executed() for w in writers.values()]
    return Executed([r for e in results for r in e.records], {k: v for e in results for k, v in e.unwritten.items()},
                    unmeasured)


def _run_groups(config: RunConfig, queue: list[tuple[str | None, list[CellKey]]], writers: dict[str | None, Writer],
                exports: Exports, executor: Executor, progress: Progress, deadline: Deadline | None) -> list[str]:
    """Start each group when the executor has a node free for it (``free``: here, when the last group ended) and the
    deadline leaves it time (the first group of an invocation was checked up front: fit, or a resumed sweep's
    check); write each group's records as it ends. Returns the labels of the cells --time-budget left unmeasured."""
    missing = to_export(config, [c for _, g in queue for c in g]) if deadline is not None else {}
    unmeasured: list[str] = []
    started = 0
    try:
        while queue or executor.busy():
            while queue:
                i = next((k for k, (m, _) in enumerate(queue) if executor.free(m)), None)
                if i is None:  # every node this queue needs is measuring
                    break
                machine, group = queue[i]
                if deadline is not None and started:  # the group's time as measured so far (or estimated), and
                    pair = (group[0].model, group[0].resolution)  # its exports still to make
                    needs = group_estimate(progress, group, config) + (
                        0.0 if pair in exports.done else export_s(group, missing))
                    if not deadline.fits(needs):
                        unmeasured = [c.label + on_machine(m) for m, g in queue for c in g]
                        progress.result("time budget", f"{len(unmeasured)} cell(s) in {len(queue)} group(s) left "
                                        f"unmeasured: the next would take about {say(needs)}, "
                                        f"{say(max(0.0, deadline.left()))} of --time-budget is left", failure=True)
                        queue = []
                        break
                queue.pop(i)
                folder, failed, batch_sizes = exports.of(group[0])
                executor.start(machine, group, folder, failed, batch_sizes, deadline)
                started += 1
            for machine, group, records in executor.wait() if executor.busy() else []:
                progress.done += len(group)
                writers[machine].write(group, records, on_machine(machine))
    except BaseException:
        executor.cancel()  # Ctrl-C, SIGTERM: nothing keeps measuring elsewhere
        raise
    return unmeasured


def machine_folders(config: RunConfig, run_dir: Path) -> dict[str | None, Path]:
    """Where each machine's records go: a folder per machine named on a Ray sweep (``--machines``), else the run's."""
    machines = list(config.machines) if config.executor == "ray" and config.machines else [None]
    return {m: run_dir / m if m else run_dir for m in machines}


def on_machine(machine: str | None) -> str:
    """What a progress line adds for a group measured on a named machine."""
    return f" on {machine}" if machine else ""


def _run_files(run_dir: Path, objective: str, records: list[dict[str, Any]], unwritten: dict[str, str],
               progress: Progress) -> RunFiles | None:
    """The run's summary files, started from the records already in the folder (None when they cannot be
    written: the records still are, and the final line names only what exists)."""
    try:
        return RunFiles(run_dir, objective, records)
    except OSError as exc:
        _not_written(exc, run_dir, unwritten, progress)
        return None


def _summary_file(files: RunFiles | None, update: Callable[[RunFiles], None], run_dir: Path, unwritten: dict[str, str],
                  progress: Progress) -> None:
    """Keep the summary files current; a failed write (disk full) is said once and the run goes on without them."""
    if files is None or "summary.csv" in unwritten:
        return
    try:
        update(files)
    except OSError as exc:
        _not_written(exc, run_dir, unwritten, progress)


def _not_written(exc: OSError, run_dir: Path, unwritten: dict[str, str], progress: Progress) -> None:
    unwritten["summary.csv"] = f"{exc.strerror or exc} ({exc.filename or run_dir})"
    progress.result("summary.csv", f"not written: {unwritten['summary.csv']}", failure=True)


def ordered(kept: dict[str, dict[str, Any]], cells: list[CellKey]) -> list[dict[str, Any]]:
    """The kept records of ``cells``, in the run's order of cells."""
    return [kept[c.filename] for c in cells if c.filename in kept]


def records_of(run_dir: Path, cells: list[CellKey]) -> list[dict[str, Any]]:
    """The records of ``cells`` in ``run_dir``, at the current schema."""
    out = []
    for cell in cells:
        path = run_dir / cell.filename
        if path.exists():
            out.append(upgrade(json.loads(path.read_text())))
    return out


def one_line(rec: Record) -> str:
    if rec.status != "ok" or rec.latency_ms is None:
        return f"FAILED: {rec.error}"
    lat = rec.latency_ms
    ci = lat.get("p50_ci95")
    interval = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    unstable = "  UNSTABLE" if lat["stability"]["verdict"] == "unstable" else ""
    return (f"p50 {lat['p50']:.3f} ms{interval}  {rec.throughput_per_s:.1f}/s  "
            f"parity {rec.parity['status']}{unstable}")
