"""The work shared by ``run`` and ``sweep``: export once per (model, resolution), then run each cell
in its own child process and write its record atomically.

The chain, in order: :class:`~inferbench.spec.RunConfig` + :class:`~inferbench.spec.CellKey` ->
:class:`~inferbench.spec.CellJob` (sent to the child) -> :class:`~inferbench.spec.ChildResult`
(sent back) -> :class:`~inferbench.records.record.Record` (written under the cell's file name).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.runfiles import RunFiles
from ..base.size import Size
from ..records.record import Record, as_written, record_key, upgrade, write_record
from ..registry.frameworks import get_framework
from ..scenarios.slowdown import TEST_SLOWDOWN, test_slowdown
from ..spec import CellKey, RunConfig, groups_of
from ..timeline.keep import keep
from .budget import Deadline, export_s, group_estimate, say, to_export
from .childenv import ignored_shell_variables
from .executors import Executor, Local, MakeExecutor
from .exports import ensure_exports
from .folders import set_aside_if_unreadable
from .progress import Progress
from .tracking import log


@dataclass
class Executed:
    records: list[dict[str, Any]]  # every record of the run's cells in its folder, at the current schema
    unwritten: dict[str, str] = field(default_factory=dict)  # cell label -> why its record could not be written
    unmeasured: list[str] = field(default_factory=list)  # cell labels --time-budget left for later


def execute(config: RunConfig, cells: list[CellKey], run_dir: Path, run_id: str,
            progress: Progress | None = None, strict: bool = True, objective: str = "p50",
            verbosity: int = 0, deadline: Deadline | None = None, executor: MakeExecutor | None = None,
            planned_s: float | None = None, history: str = "") -> Executed:
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
    ray``), built as ``executor(config, run_id, run_dir, progress, strict)``. ``history``: the store the run's
    records are added to as it ends (:func:`inferbench.timeline.keep.location`; "": none).
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
                                    clock=time.monotonic if deadline is None else deadline.clock, planned_s=planned_s)
    try:
        executed = _execute(config, cells, run_dir, run_id, progress, strict, objective, deadline, executor)
    finally:
        progress.close()  # a status line never swallows the next message (an error, Ctrl-C)
    keep(history, executed.records, run_dir)
    return executed


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


class Exports:
    """A run's artifacts per (model, resolution), exported or taken from the cache on first need (every batch size
    and framework of the run's cells of that pair at once)."""

    def __init__(self, config: RunConfig, cells: list[CellKey], progress: Progress, strict: bool) -> None:
        self.config, self.cells, self.progress, self.strict = config, cells, progress, strict
        self.done: dict[tuple[str, Size], tuple[Path, dict[str, str]]] = {}

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
            _summary_file(self.files, functools.partial(RunFiles.add, record=written), run_dir, unwritten, progress)
            if self.config.log_to:
                unwritten.update(log(self.config.log_to, written, path))
            progress.result(cell.label + where, one_line(record), failure=record.status != "ok"
                            or record.parity.status == "failed")
        _summary_file(self.files, RunFiles.flush, run_dir, unwritten, progress)

    def executed(self) -> Executed:
        return Executed(ordered(self.kept, self.cells), self.unwritten)


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
    """Where each machine's records go: a folder per machine named on a Ray or Slurm sweep (``--machines``), else the
    run's."""
    machines = list(config.machines) if config.executor != "local" and config.machines else [None]
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
    """A finished cell's progress line: its median (with its interval and an unstable verdict only where the machine
    was quiet enough to judge them: the one vocabulary of :func:`inferbench.records.table.stability_word`)."""
    if rec.status != "ok" or rec.latency_ms is None:
        return f"FAILED: {rec.error}"
    lat = rec.latency_ms
    unjudged = rec.validity is not None and rec.validity.valid is False and not rec.config.allow_busy
    ci = None if unjudged else lat.p50_ci95
    interval = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    unstable = "  not judged (busy)" if unjudged else "  UNSTABLE" if lat.stability.verdict == "unstable" else ""
    return (f"p50 {lat.p50:.3f} ms{interval}  {rec.throughput_per_s:.1f}/s  "
            f"parity {rec.parity.status}{unstable}")
