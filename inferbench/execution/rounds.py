"""Parent side of the rounds: the cells of a group measured in interleaved blocks.

Every cell of a group (a run's cells of one model, resolution and batch size) gets a worker process of
its own, started one after another so that load and first-call times are not contended. Once all are
ready, each round sends every worker one block command, in a fresh random order per round, and waits
for its block before the next: one worker measures at a time, the others wait idle, so isolation is as
strict as one process per run, and a slow change of the machine lands on every cell of a round alike.
Each framework is loaded once per run, not once per round.

A worker that fails (at set-up or in a block) or runs out of its time ends with a failed result; the
other cells go on.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..spec import CellJob, ChildResult
from .isolate import Child

#: Pause before each block, so that the previous worker's spinning thread pools (ONNX Runtime, OpenMP)
#: have gone to sleep before the next block is timed.
SETTLE_S = 0.02


@dataclass
class _Cell:
    job: CellJob
    child: Child
    used_s: float = 0.0  # the worker's own time so far (set-up and blocks): what --timeout limits
    result: ChildResult | None = None  # set when it has ended


def measure_group(jobs: list[CellJob], envs: list[dict[str, str]], seed: int,
                  progress: Callable[[str, str], None], timeout_s: float | None = None) -> list[ChildResult]:
    """Measure ``jobs`` in interleaved rounds; one result per job, in order. ``seed`` draws the order of
    every round; ``progress(label, text)``."""
    cells: list[_Cell] = []
    try:
        for job, env in zip(jobs, envs):
            cell = _Cell(job, Child(job, env, lambda phase, lb=job.cell.label: progress(lb, phase)))
            cells.append(cell)
            _await(cell, "ready", timeout_s)
        rounds = jobs[0].config.timing.rounds if jobs else 0
        order = random.Random(seed)
        for r in range(rounds):
            live = [c for c in cells if c.result is None]
            if not live:
                break
            order.shuffle(live)
            for cell in live:
                time.sleep(SETTLE_S)
                cell.child.send({"block": r})
                _await(cell, "block", timeout_s)
            progress(_group_label(jobs), f"round {r + 1}/{rounds} done")
        finishing = [c for c in cells if c.result is None]
        for cell in finishing:  # all at once: the workers collect and exit side by side
            cell.child.send({"finish": True})
        for cell in finishing:
            cell.result = cell.child.result(_left(cell, timeout_s))
    finally:
        for cell in cells:
            cell.child.close()
    return [c.result or ChildResult(ok=False, error="not measured") for c in cells]


def _left(cell: _Cell, timeout_s: float | None) -> float | None:
    return None if timeout_s is None else max(0.0, timeout_s - cell.used_s)


def _await(cell: _Cell, key: str, timeout_s: float | None) -> None:
    """Wait for the worker's ``key`` message; on its end or time-out, its result is the failure."""
    start = time.monotonic()
    try:
        message = cell.child.reply(_left(cell, timeout_s))
    except TimeoutError:
        cell.child.close()
        cell.result = ChildResult(ok=False, error=f"timed out after {timeout_s:g} s")
        return
    cell.used_s += time.monotonic() - start
    if message is None or key not in message:  # it ended: its result says why
        cell.result = cell.child.result(30.0)


def _group_label(jobs: list[CellJob]) -> str:
    c = jobs[0].cell
    return f"{c.model}@{c.resolution} bs{c.batch_size}"
