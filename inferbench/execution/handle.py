"""The parent's handle on a cell's worker process: started and waited for (its set-up timed), its replies awaited
within its share of --timeout, its failure kept as its result."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..spec import CellJob, ChildResult
from .isolate import Child

#: Pause before each block, so that the previous worker's spinning thread pools (ONNX Runtime, OpenMP)
#: have gone to sleep before the next block is timed.
SETTLE_S = 0.02


@dataclass
class Worker:
    """A worker process of a cell."""

    job: CellJob
    child: Child
    used_s: float = 0.0  # the worker's own time so far (set-up and blocks): what --timeout limits
    result: ChildResult | None = None  # set when it has ended
    tuning: dict[str, Any] | None = None  # the tuning phase's decision this worker measures with
    rounds: int | None = None  # the rounds its scenario asked for when ready (a search's steps)
    setup_s: float | None = None  # its start to ready (on --time-budget's clock): what the next plans foresee
    judged: dict[str, Any] = field(default_factory=dict)  # its agreement and accuracy, for the cell's other processes


def start(job: CellJob, env: dict[str, str], progress: Callable[[str, str], None], timeout_s: float | None,
           suffix: str = "", clock: Callable[[], float] = time.monotonic) -> Worker:
    """A worker for ``job``, loaded and ready (or ended with its failure), its set-up timed on ``clock``."""
    started = clock()
    label = job.cell.label + suffix
    worker = Worker(job, Child(job, env, functools.partial(progress, label)))
    try:
        ready = await_reply(worker, "ready", timeout_s)
    except BaseException:  # interrupted while it sets up (a SIGTERM during its served-parity test): its folder too
        worker.child.close()
        raise
    worker.rounds, worker.judged = (ready or {}).get("rounds"), (ready or {}).get("judged") or {}
    worker.setup_s = clock() - started if ready is not None else None
    return worker


def time_left(cell: Worker, timeout_s: float | None) -> float | None:
    return None if timeout_s is None else max(0.0, timeout_s - cell.used_s)


def await_reply(cell: Worker, key: str, timeout_s: float | None) -> dict[str, Any] | None:
    """Wait for the worker's ``key`` message and return it; on its end or time-out, its result is the failure
    (and None is returned)."""
    start = time.monotonic()
    try:
        message = cell.child.reply(time_left(cell, timeout_s))
    except TimeoutError:
        cell.child.close()
        cell.result = ChildResult(ok=False, error=f"timed out after {timeout_s:g} s")
        return None
    cell.used_s += time.monotonic() - start
    if message is None or key not in message:  # it ended: its result says why
        cell.result = cell.child.result(30.0)
        return None
    return message


def group_label(jobs: list[CellJob]) -> str:
    return jobs[0].cell.group_label
