"""A run in its own folder: the checks before anything is written (the cache, the output folder), a new folder
named by time, model and device, the cells executed under its lock, and nothing left behind where bad input was
found while exporting. What ``inferbench run`` and :func:`inferbench.api.run` share."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..analysis.runfiles import note_time_budget
from ..base.errors import UsageError
from ..base.files import check_writable, new_folder
from ..exporters.cache import check_cache_dir
from ..timeline.keep import location
from . import budget
from .executors import check_cluster, executor_class
from .folders import folder_lock
from .pipeline import Executed, execute
from .plan import Built


@dataclass(frozen=True)
class Ran:
    """A run that ended: its folder, what it executed, and its --time-budget (None without one)."""

    folder: Path
    executed: Executed
    deadline: budget.Deadline | None


def run_in_folder(values: dict[str, Any], built: Built, objective: str, verbosity: int,
                  announce: Callable[[], None] = lambda: None) -> Ran:
    """Execute ``built`` in a new folder under ``values["output_dir"]``; ``announce`` once the checks have passed,
    before the folder is made (the plan's notes)."""
    config = built.config
    out_root = Path(values["output_dir"])
    new_root = not out_root.exists()
    check_cache_dir(Path(config.cache_dir), bool(values.get("trust_cache")))
    check_cluster(config)  # --executor ray or slurm: its cluster answers, before anything is written
    check_writable(out_root)
    announce()
    first = built.cells[0]
    what = f"{first.model}_{first.resolution}" if len({c.model for c in built.cells}) == 1 else "multi"
    run_dir = new_folder(out_root, f"{time.strftime('%Y%m%d-%H%M%S')}_{what}_{config.device.label}")
    deadline = budget.Deadline(values["time_budget"]) if values.get("time_budget") else None
    try:
        with folder_lock(run_dir):
            executed = execute(config, list(built.cells), run_dir, run_dir.name, objective=objective,
                               verbosity=verbosity, deadline=deadline, executor=executor_class(config),
                               planned_s=built.expected_s, history=location(values))
    except (UsageError, OSError):  # bad input found while exporting, a disk too full for the lock's few bytes
        if not any(run_dir.iterdir()):  # nothing of the run in it (folder_lock took its .lock): leave nothing behind
            shutil.rmtree(run_dir)
            if new_root and not any(out_root.iterdir()):
                out_root.rmdir()
        raise
    if deadline is not None:  # what the budget was and what was spent, in the run's answer
        note_time_budget(run_dir, deadline.spent())
    return Ran(run_dir, executed, deadline)
