"""One group of cells measured on this machine: each cell's job (its artifact, the run's configuration), the group's
rounds (:mod:`.rounds`), each record built from what came back, with the environment it was measured in."""

from __future__ import annotations

import functools
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..base.machine import cpu_model
from ..measure.peak import peak_fp32 as measured
from ..records.record import Record
from ..registry import artifacts
from ..registry.artifacts import INT8_FILES, int8_artifact
from ..registry.frameworks import get_framework, unavailable_reason
from ..registry.models import get_model
from ..registry.scenarios import scenario
from ..spec import CellJob, CellKey, ChildResult, RunConfig
from .budget import Deadline
from .childenv import child_env, recorded_env
from .environment import capture, invocation_calibration
from .exports import exported, memory_refusal, model_stats, provenance, training_plan
from .progress import Progress
from .remembered import remember_ranking
from .rounds import measure_group


def cell_job(config: RunConfig, cell: CellKey, folder: Path, batch_sizes: tuple[int, ...],
             interleaving: dict[str, Any], run_dir: Path | None = None) -> CellJob:
    fw = get_framework(cell.framework)
    kind = fw.artifact_for(get_model(cell.model), cell.scenario, cell.precision)
    if kind in INT8_FILES and config.calibration is None:
        raise RuntimeError(f"{cell.label}: an INT8 cell without its calibration set")
    artifact = None if kind == "none" else str(folder / (
        int8_artifact(kind, config.calibration.digest) if kind in INT8_FILES and config.calibration
        else artifacts.EXPORTERS[kind].path))
    log_dir = None if run_dir is None else str(run_dir / (Path(cell.filename).stem + ".loadgen"))
    return CellJob(cell=cell, framework=fw, config=config, artifact_dir=str(folder), artifact=artifact,
                   group_batch_sizes=batch_sizes, interleaving=interleaving,
                   log_dir=log_dir if scenario(cell.scenario).serves else None)


def cannot_run(config: RunConfig, cell: CellKey, failed_exports: dict[str, str]) -> str | None:
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


def _partial(progress: Progress, before: int, size: int, share: float) -> None:
    """The group's cells measured so far: those before this part, and this part's share of its rounds."""
    progress.partial(before + size * share)


def run_group(config: RunConfig, cells: list[CellKey], folder: Path, failed_exports: dict[str, str], run_id: str,
              environment: dict[str, Any], batch_sizes: tuple[int, ...], progress: Progress,
              run_dir: Path | None = None, strict: bool = False,
              deadline: Deadline | None = None) -> list[Record | None]:
    """The records of one group's cells, measured together in interleaved rounds (:mod:`.rounds`); None for a cell
    --time-budget left out before it was loaded."""
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
            progress.result(c.group_label, "one cell at a time: the group's training "
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
                                  functools.partial(_partial, progress, before, size), deadline)
    outcomes.update(zip(runnable, measured))
    refused = [o for o in measured if o.usage_error]
    if strict and refused and len(refused) == len(runnable):  # bad input found by every worker (a bound no load
        raise UsageError(str(refused[0].error))  # can meet): one line, exit 2; a cell or two: their failed records
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    records = [None if outcomes[cell].left_out else  # never loaded (--time-budget): no record, --resume measures it
               Record.of(jobs[cell], run_id, created, installed(environment, config, cell), recorded_env(envs[cell]),
                         outcomes[cell], stats, provenance(folder, cell)) for cell in cells]
    remember_ranking(config, records)  # what the next --time-budget here loads first
    return records


def installed(environment: dict[str, Any], config: RunConfig, cell: CellKey) -> dict[str, Any]:
    """The environment a cell's record says: the run's, with B's interpreter, Python and packages for an A/B twin
    (``--ab-python``: ``interpreter`` names it)."""
    if cell.options.ab and config.ab:
        return {**environment, "interpreter": config.ab["executable"], "python": config.ab["python"],
                "packages": config.ab["packages"]}
    return environment


def peak_fp32(config: RunConfig) -> dict[str, Any]:
    """The device's peak FP32 rate, measured once per machine and thread count (:mod:`inferbench.measure.peak`)."""
    gpu = config.device.gpu
    key = {"host": socket.gethostname(), "device": gpu.uuid if gpu else cpu_model(), "threads": config.threads}
    return measured(config.device.kind, key, child_env(config), config.cache_dir)


def environment_of(config: RunConfig) -> dict[str, Any]:
    """The machine a run measures on, as every record of it says (captured where the cells run)."""
    return {**capture(config.device), "peak_fp32": peak_fp32(config),
            "invocation_spread": invocation_calibration(config.cache_dir, config.threads)}
