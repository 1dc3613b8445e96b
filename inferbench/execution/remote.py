"""One group measured on another machine, as Ray's and Slurm's executors send it there: the driver's registry
entries shipped as data (:func:`registries`, :func:`adopt`), the run's configuration and cells decoded, the group
measured by the one-group pipeline (:func:`inferbench.execution.group.run_group`) with that machine's own GPU,
environment and machine state, and its records sent back as JSON data with the phases measured there."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from ..base.codec import decode, encode
from ..base.device import resolve
from ..exporters import cache as artifact_cache
from ..records.record import Record
from ..registry import artifacts, frameworks
from ..registry.artifacts import export_order
from ..registry.frameworks import artifacts_of, get_framework
from ..registry.modelfiles import ModelFile
from ..registry.models import get_model, register
from ..spec import CellKey, ChildResult, RunConfig
from . import budget
from .group import cell_job, environment_of, run_group
from .progress import Progress


def kinds_of(group: list[CellKey], folder: Path) -> list[str]:
    """The artifact kinds ``group``'s cells load, of those exported in ``folder``, in export order."""
    spec = get_model(group[0].model)
    exported = set(artifact_cache.read_manifest(folder).get("artifacts", {}))
    return [k for k in export_order([kind for cell in group for kind in artifacts_of(
        get_framework(cell.framework), spec, cell.scenario, cell.precision)], spec) if k in exported]


def not_run(config: RunConfig, cell: CellKey, why: str, run_id: str, folder: Path, where: dict[str, Any]) -> Record:
    """The record of a cell that did not run on the cluster, with why (``where``: the environment it says)."""
    job = cell_job(config, cell, folder, (cell.batch_size,), {})
    return Record.of(job, run_id, time.strftime("%Y-%m-%dT%H:%M:%S%z"), where, {}, ChildResult(ok=False, error=why))


def registries(cells: list[CellKey]) -> dict[str, Any]:
    """The driver's registry entries a group needs (its frameworks, every exporter, its model files), as data: the
    node measures what the driver planned, whatever its own install registers."""
    return {"frameworks": [encode(get_framework(c.framework)) for c in cells],
            "exporters": [encode(e) for e in artifacts.EXPORTERS.values()],
            "model_files": [encode(get_model(c.model).source) for c in cells if get_model(c.model).source]}


def adopt(shipped: dict[str, Any]) -> None:
    """On a node: the driver's registry entries (:func:`registries`) in this process's registries."""
    for data in shipped["frameworks"]:
        fw = decode(frameworks.Framework, data, "framework")
        frameworks.FRAMEWORKS[fw.key] = fw
    for data in shipped["exporters"]:
        exporter = decode(artifacts.Exporter, data, "exporter")
        artifacts.EXPORTERS[exporter.kind] = exporter
    register(*(decode(ModelFile, data, "model file") for data in shipped["model_files"]))


def received(config_data: dict[str, Any], cells_data: list[dict[str, Any]],
             shipped: dict[str, Any]) -> tuple[RunConfig, list[CellKey]]:
    """On a node: the run's configuration (its GPU this node's, not the driver's) and the group's cells."""
    adopt(shipped)
    config = decode(RunConfig, config_data, "config")
    if config.device.kind == "gpu":
        config = dataclasses.replace(config, device=resolve("gpu", None))
    return config, [decode(CellKey, c, "cell") for c in cells_data]


def measure_here(config: RunConfig, cells: list[CellKey], folder: Path, failed: dict[str, str], run_id: str,
                 batch_sizes: tuple[int, ...], where: dict[str, Any], budget_left_s: float | None) -> dict[str, Any]:
    """One group measured on this node, its rounds kept to ``budget_left_s`` (None: no --time-budget); ``where``
    joins the environment each record says (``{"ray": ...}``, ``{"slurm": ...}``). The records as JSON data (None:
    a cell the budget left out before it was loaded), with the group's phases as measured here (the driver budgets
    its next groups on them, as a local run does)."""
    config = dataclasses.replace(config, cache_dir=str(folder.parent))
    environment = {**environment_of(config), **where}
    with open(os.devnull, "w") as quiet:
        progress = Progress(len(cells), stream=quiet, verbosity=-1)
        progress.measuring(len(cells), 1, len(cells))
        records = run_group(config, cells, folder, failed, run_id, environment, batch_sizes, progress,
                            deadline=None if budget_left_s is None else budget.Deadline(budget_left_s))
        progress.group_done(len(cells), sum(r is None for r in records))  # as the local executor counts them
    return {"records": [None if r is None else encode(r) for r in records], "phases": progress.phases()}
