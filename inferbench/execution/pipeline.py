"""The work shared by ``run`` and ``sweep``: export once per (model, resolution), then run each cell
in its own child process and write its record atomically.

The chain, in order: :class:`~inferbench.spec.RunConfig` + :class:`~inferbench.spec.CellKey` ->
:class:`~inferbench.spec.CellJob` (sent to the child) -> :class:`~inferbench.spec.ChildResult`
(sent back) -> :class:`~inferbench.records.record.Record` (written under the cell's file name).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.ranking import RunFiles
from ..base.errors import UsageError
from ..records.record import Record, as_written, record_key, upgrade, write_record
from ..registry.frameworks import get_framework, unavailable_reason
from ..registry.scenarios import SERVING
from ..spec import CellJob, CellKey, ChildResult, RunConfig
from .childenv import child_env, ignored_shell_variables, recorded_env
from .exports import ensure_exports, exported, memory_refusal, model_stats, provenance
from .folders import set_aside_if_unreadable
from .progress import Progress


def cell_job(config: RunConfig, cell: CellKey, folder: Path, batch_sizes: tuple[int, ...],
             interleaving: dict[str, Any], run_dir: Path | None = None) -> CellJob:
    from ..registry.artifacts import EXPORTERS
    from ..registry.models import get_model

    fw = get_framework(cell.framework)
    kind = fw.artifact_for(get_model(cell.model))
    artifact = None if kind == "none" else str(folder / EXPORTERS[kind].path)
    log_dir = None if run_dir is None else str(run_dir / (Path(cell.filename).stem + ".loadgen"))
    return CellJob(cell=cell, framework=fw, config=config, artifact_dir=str(folder), artifact=artifact,
                   group_batch_sizes=batch_sizes, interleaving=interleaving,
                   log_dir=log_dir if cell.scenario in SERVING else None)


def cannot_run(config: RunConfig, cell: CellKey, failed_exports: dict[str, str]) -> str | None:
    from ..registry.models import get_model

    fw = get_framework(cell.framework)
    spec = get_model(cell.model)
    kind = fw.artifact_for(spec)
    reason = unavailable_reason(fw, config.device.kind, spec, cell.options, exported(config, spec, [cell.resolution]))
    for needed in (kind, "reference"):  # every cell's parity needs the reference outputs
        if reason is None and needed in failed_exports:
            reason = f"export of {needed} failed: {failed_exports[needed]}"
    return reason


def run_group(config: RunConfig, cells: list[CellKey], folder: Path, failed_exports: dict[str, str], run_id: str,
              environment: dict[str, Any], batch_sizes: tuple[int, ...], progress: Progress,
              run_dir: Path | None = None, strict: bool = False) -> list[Record]:
    """The records of one group's cells, measured together in interleaved rounds (:mod:`.rounds`)."""
    from .rounds import measure_group

    c = cells[0]
    # a nonce per invocation: it names the group (a cell re-run by --resume is never paired with earlier
    # rounds) and draws the order of its rounds
    nonce = uuid.uuid4().hex[:8]
    interleaving = {"group": f"{run_id}/{c.model}@{c.resolution}/bs{c.batch_size}/{nonce}", "group_cells": len(cells)}
    jobs = {cell: cell_job(config, cell, folder, batch_sizes, interleaving, run_dir) for cell in cells}
    envs = {cell: child_env(config, get_framework(cell.framework), cell) for cell in cells}
    outcomes = {cell: ChildResult(ok=False, error=reason) for cell in cells
                if (reason := cannot_run(config, cell, failed_exports)) is not None}
    runnable = [cell for cell in cells if cell not in outcomes]
    stats = model_stats(folder)
    too_big = memory_refusal(stats, len(runnable))
    if too_big:
        outcomes.update({cell: ChildResult(ok=False, error=too_big) for cell in runnable})
        runnable = []
    measured = measure_group([jobs[c] for c in runnable], [envs[c] for c in runnable],
                             int(nonce, 16), progress.say, config.timeout_s, progress.result)
    outcomes.update(zip(runnable, measured))
    refused = next((o for o in measured if o.usage_error), None)
    if strict and refused is not None:  # bad input found by a worker (a bound no load can meet): one line, exit 2
        raise UsageError(str(refused.error))
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return [Record.of(jobs[cell], run_id, created, environment, recorded_env(envs[cell]), outcomes[cell],
                              stats, provenance(folder, cell)) for cell in cells]


def peak_fp32(config: RunConfig) -> dict[str, Any]:
    """The device's peak FP32 rate, measured once per machine and thread count (:mod:`inferbench.measure.peak`)."""
    import socket

    from ..base.machine import cpu_model
    from ..measure.peak import peak_fp32 as measured

    gpu = config.device.gpu
    key = {"host": socket.gethostname(), "device": gpu.uuid if gpu else cpu_model(), "threads": config.threads}
    return measured(config.device.kind, key, child_env(config), config.cache_dir)


@dataclass
class Executed:
    records: list[dict[str, Any]]  # every record of the run's cells in its folder, at the current schema
    unwritten: dict[str, str] = field(default_factory=dict)  # cell label -> why its record could not be written


def execute(config: RunConfig, cells: list[CellKey], run_dir: Path, run_id: str,
            progress: Progress | None = None, strict: bool = True, objective: str = "p50",
            verbosity: int = 0) -> Executed:
    """Run every cell whose record is not in ``run_dir`` yet (the caller holds :func:`folder_lock`).

    The cells of one model, resolution and batch size form a group, measured together in interleaved
    rounds; the groups run one after another. Records are written atomically under the cell's file
    name when their group ends: an interrupted run (Ctrl-C or a kill) loses at most the group in
    progress, and running ``execute`` again on the same folder resumes without repeating or
    duplicating a cell. A record that cannot be read is set aside and its
    cell runs again; a record that cannot be written (disk full, permissions) fails that cell only.
    """
    ignored = ignored_shell_variables(config)
    if ignored:
        print(f"inferbench: not passed on to the frameworks (they change what is measured; inferbench sets its own "
              f"values, recorded in config.child_env; --pass-env NAME passes one on): {', '.join(ignored)}",
              file=sys.stderr)
    for stale in run_dir.glob(".*.tmp"):  # a write cut short by a kill; we hold the folder, no one else writes
        stale.unlink(missing_ok=True)
    for cell in cells:
        note = set_aside_if_unreadable(run_dir / cell.filename)
        if note:
            print(f"inferbench: {note}", file=sys.stderr)
    todo = [c for c in cells if not (run_dir / c.filename).exists()]
    unwritten: dict[str, str] = {}
    progress = progress or Progress(len(cells), verbosity=verbosity)
    progress.total, progress.done = len(cells), len(cells) - len(todo)
    progress.base = progress.done
    try:
        return _execute(config, cells, todo, run_dir, run_id, progress, strict, objective, unwritten)
    finally:
        progress.close()  # a status line never swallows the next message (an error, Ctrl-C)


def _execute(config: RunConfig, cells: list[CellKey], todo: list[CellKey], run_dir: Path, run_id: str,
             progress: Progress, strict: bool, objective: str, unwritten: dict[str, str]) -> Executed:
    from .environment import capture, invocation_calibration

    environment = {**capture(config.device), "peak_fp32": peak_fp32(config),
                   "invocation_spread": invocation_calibration(config.cache_dir, config.threads)}
    exports: dict[tuple[str, int], tuple[Path, dict[str, str]]] = {}

    def group_of(cell: CellKey) -> tuple[tuple[str, int], tuple[int, ...]]:
        group = (cell.model, cell.resolution)
        same = [c for c in cells if (c.model, c.resolution) == group]
        batch_sizes = tuple(sorted({c.batch_size for c in same}))
        if group not in exports:
            frameworks = [get_framework(k) for k in dict.fromkeys(c.framework for c in same)]
            exports[group] = ensure_exports(config, cell.model, cell.resolution, frameworks, batch_sizes,
                                            progress, strict)
        return group, batch_sizes

    if strict:  # bad input (weights a model cannot load) stops the run before any record is written
        for cell in todo:
            group_of(cell)
    groups: dict[tuple[Any, ...], list[CellKey]] = {}
    for cell in todo:  # interleaved: a group per model, resolution and batch size; --sequential: a cell each
        key = (cell.model, cell.resolution, cell.batch_size) + ((cell,) if config.sequential else ())
        groups.setdefault(key, []).append(cell)
    # every record of the run, kept in memory as it is written (read from disk once, for a resumed folder); the
    # summary files grow with each cell (RunFiles), never rebuilt by reading every record back
    kept = {record_key(r): r for r in records_of(run_dir, cells)}
    files = _run_files(run_dir, objective, ordered(kept, cells), unwritten, progress)
    for same in groups.values():
        group, batch_sizes = group_of(same[0])
        folder, failed = exports[group]
        c = same[0]
        if not config.sequential:
            progress.result(f"{c.model}@{c.resolution} bs{c.batch_size}",
                            f"group of {len(same)} cell{'s' if len(same) > 1 else ''}, {config.timing.rounds} "
                            "interleaved rounds")
        records = run_group(config, same, folder, failed, run_id, environment, batch_sizes, progress, run_dir,
                            strict)
        progress.done += len(same)
        for cell, record in zip(same, records):
            try:
                path = write_record(run_dir, record)
            except OSError as exc:  # disk full, permissions: this cell fails, the others still run
                unwritten[cell.label] = f"{exc.strerror or exc} ({exc.filename or run_dir})"
                progress.result(cell.label, f"RECORD NOT WRITTEN: {unwritten[cell.label]}", failure=True)
                continue
            written = as_written(record)
            kept[record_key(written)] = written
            _summary_file(files, lambda f, r=written: f.add(r), run_dir, unwritten, progress)
            if config.log_to:
                from .tracking import log

                unwritten.update(log(config.log_to, written, path))
            progress.result(cell.label, one_line(record), failure=record.status != "ok"
                            or record.parity["status"] == "failed")
        _summary_file(files, RunFiles.flush, run_dir, unwritten, progress)
    return Executed(ordered(kept, cells), unwritten)


def _run_files(run_dir: Path, objective: str, records: list[dict[str, Any]], unwritten: dict[str, str],
               progress: Progress) -> RunFiles | None:
    """The run's summary files, started from the records already in the folder (None when they cannot be
    written: the records still are, and the final line names only what exists)."""
    try:
        return RunFiles(run_dir, objective, records)
    except OSError as exc:
        _not_written(exc, run_dir, unwritten, progress)
        return None


def _summary_file(files: RunFiles | None, update: Any, run_dir: Path, unwritten: dict[str, str],
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
