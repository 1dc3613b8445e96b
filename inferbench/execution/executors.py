"""The executors of the one group loop (:func:`inferbench.execution.pipeline.execute`): what it asks of one
(:class:`Executor`), and :class:`Local`, each group measured here, one at a time; Ray's is
:class:`inferbench.execution.distributed.RayGroups`, Slurm's :class:`inferbench.execution.slurm.SlurmGroups`
(:data:`CLASSES`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ..records.record import Record
from ..spec import CellKey, RunConfig
from .budget import Deadline
from .group import environment_of, run_group
from .progress import Progress

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
            progress.result(c.group_label,
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


#: Each --executor's class, as its module and name (a cluster's imported only when its executor is asked for); a
#: module's ``preflight(config)``, where it has one, checks its cluster before anything is written.
CLASSES = {"local": (__name__, "Local"), "ray": ("inferbench.execution.distributed", "RayGroups"),
           "slurm": ("inferbench.execution.slurm", "SlurmGroups")}


def executor_class(config: RunConfig) -> MakeExecutor:
    """The class that measures ``config``'s groups (``--executor``)."""
    module, name = CLASSES[config.executor]
    made: MakeExecutor = getattr(importlib.import_module(module), name)
    return made


def check_cluster(config: RunConfig) -> None:
    """Before anything is written: the executor's cluster answers and can run a cell (one line, exit 2 where not)."""
    check = getattr(importlib.import_module(CLASSES[config.executor][0]), "preflight", None)
    if check is not None:
        check(config)
