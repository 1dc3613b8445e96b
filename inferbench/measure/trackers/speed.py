"""The machine's own speed around every timed block (a tracker, see :mod:`inferbench.measure.trackers`): a fixed
matrix product (float32, 512 x 512, NumPy on the run's threads) timed for a few tens of milliseconds just before
and just after each block, as GFLOP/s. On this project's 2-core VM the same product ran at 148 or 201 GFLOP/s,
switching every few seconds to minutes as the hypervisor placed the virtual CPUs, and ONNX Runtime's median latency
moved with it (9.0 and 4.9 ms): a state no other process causes, that lasts a whole run and changes between runs.
The record keeps the speed of every block and its median (``machine_state.speed``); ``compare`` never sets side by
side two cells measured at different speeds, and a cell whose blocks saw more than one speed says so in its
stability. Written into ``machine_state`` beside the machine tracker's figures."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SIZE = 512
PROBE_S = 0.03  # per reading: a dozen products


_MATRIX: list[Any] = []


def probe(seconds: float = PROBE_S, clock: Callable[[], float] = time.perf_counter) -> float:
    """GFLOP/s of the median float32 matrix product over ``seconds``."""
    if not _MATRIX:
        import numpy as np

        _MATRIX.append(np.random.default_rng(0).standard_normal((SIZE, SIZE)).astype(np.float32))
    a = _MATRIX[0]
    times = []
    start = clock()
    while clock() - start < seconds or len(times) < 3:
        t = clock()
        a @ a
        times.append(clock() - t)
    return 2 * SIZE**3 / statistics.median(times) / 1e9


@dataclass
class SpeedMonitor:
    read: Callable[[], float] = field(default=probe)

    def start(self) -> None:
        self.before = self.read()

    def stop(self, window_s: float) -> dict[str, Any]:
        return {"before_gflops": round(self.before, 2), "after_gflops": round(self.read(), 2)}


class SpeedTracker:
    name = "speed"
    provides = ("machine_state",)
    min_block_s = 0.0

    def __init__(self, read: Callable[[], float] = probe) -> None:
        self.read = read

    @classmethod
    def open(cls, job: Any) -> SpeedTracker | None:
        return cls() if job.config.device.kind == "cpu" else None  # a GPU's speed is its clocks (nvml)

    def setup(self, emit: Callable[[str], None]) -> None:
        pass

    def monitor(self) -> SpeedMonitor:
        return SpeedMonitor(self.read)

    def finish(self, done: Any) -> Any:
        from . import Contribution

        readings = [b.monitors[self.name] for b in done.blocks]
        return Contribution({"machine_state": {"speed": summarize(readings)}})


#: Two speeds are one state when they differ by less than this share (the probe's own noise is ~3%).
SAME_STATE = 0.10


def summarize(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The speed over a cell's blocks: each block's readings, their median and extremes, and whether the blocks
    saw more than one state (the slowest and fastest apart by more than :data:`SAME_STATE`)."""
    values = [v for r in readings for v in (r["before_gflops"], r["after_gflops"])]
    if not values:
        return {"method": f"matmul-{SIZE}-fp32-median", "blocks": readings}
    low, high = min(values), max(values)
    return {"method": f"matmul-{SIZE}-fp32-median", "gflops_median": round(statistics.median(values), 2),
            "gflops_min": low, "gflops_max": high, "states": 1 if high <= low * (1 + SAME_STATE) else 2,
            "blocks": readings}


def same_state(a: float | None, b: float | None) -> bool | None:
    """Were two runs' machines at one speed (within :data:`SAME_STATE`)? None when either is unknown."""
    if a is None or b is None or not (a > 0 and b > 0):  # NaN and missing alike: unknown
        return None
    return abs(a / b - 1) <= SAME_STATE
