"""The one measurement loop, shared by every framework, and the rounds it runs in.

Runners never time themselves: they give a ``call`` and a ``synchronize``, and :func:`run_block` does
the rest. One clock read per iteration: each latency runs from the end of the previous synchronised
call to the end of this one, so the latencies add up exactly to the block's window and the loop's
own cost stays at one clock read and one list append.

A cell is timed in ``rounds`` blocks (the parent interleaves the blocks of a run's cells, see
:mod:`inferbench.execution.rounds`); ``min_duration_s`` and ``min_iterations`` are per cell, split evenly over
the rounds. :func:`run_timed` runs the warm-up and all blocks back to back, for in-process use.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..spec import TimingConfig

Clock = Callable[[], float]
BLOCK_WARMUP_CALLS = 1  # untimed calls before each block: caches warm again after the other cells' blocks
GC_DURING_BLOCKS = "disabled"  # Python's garbage collector is off inside every timed block (recorded)


class WindowMonitor(Protocol):
    """Something read around a timed block (energy counters, power samplers); never inside it."""

    def start(self) -> None: ...

    def stop(self, window_s: float) -> dict[str, Any]: ...


@dataclass
class Block:
    """One round's timed block of one cell."""

    round: int
    latencies_s: list[float]
    window_s: float
    monitors: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0  # wall clock (time.time): comparable across the processes of a group


@dataclass
class Measurement:
    """Every block of a cell, in the order they ran."""

    blocks: list[Block]
    warmup_iterations: int
    warmup_s: float

    @property
    def latencies_s(self) -> list[float]:
        return [t for b in self.blocks for t in b.latencies_s]

    @property
    def rounds(self) -> list[int]:
        """The round of each latency in :attr:`latencies_s`."""
        return [b.round for b in self.blocks for _ in b.latencies_s]

    @property
    def window_s(self) -> float:
        return sum(b.window_s for b in self.blocks)

    @property
    def iterations(self) -> int:
        return sum(len(b.latencies_s) for b in self.blocks)

    def throughput(self, batch_size: int) -> float:
        """Samples per second over the wall-clock of the timed blocks."""
        return self.iterations * batch_size / self.window_s if self.window_s > 0 else float("nan")


def warm_up(call: Callable[[], Any], synchronize: Callable[[Any], None], config: TimingConfig,
            clock: Clock = time.perf_counter) -> tuple[int, float]:
    """Warm up by count *and* time; returns (calls, seconds)."""
    start = now = clock()
    n = 0
    while n < config.warmup_iterations or now - start < config.warmup_seconds:
        synchronize(call())
        n += 1
        now = clock()
    return n, now - start


def run_block(call: Callable[[], Any], synchronize: Callable[[Any], None], config: TimingConfig, round_index: int,
              clock: Clock = time.perf_counter, monitors: Sequence[tuple[str, WindowMonitor]] = ()) -> Block:
    """One timed block: until both the block's share of the duration and of the iterations are reached."""
    started_at = time.time()
    for _ in range(BLOCK_WARMUP_CALLS):
        synchronize(call())
    for _, monitor in monitors:
        monitor.start()
    latencies: list[float] = []
    append = latencies.append
    min_n, min_s = config.block_iterations, config.block_s
    collecting = gc.isenabled()
    gc.disable()  # no collection inside the window, as timeit does (GC_DURING_BLOCKS)
    try:
        start = prev = clock()
        while True:
            synchronize(call())
            now = clock()
            append(now - prev)
            prev = now
            if len(latencies) >= min_n and now - start >= min_s:
                break
    finally:
        if collecting:
            gc.enable()
    window = prev - start
    return Block(round_index, latencies, window, {name: monitor.stop(window) for name, monitor in monitors},
                 started_at)


def run_timed(call: Callable[[], Any], synchronize: Callable[[Any], None], config: TimingConfig,
              clock: Clock = time.perf_counter, monitors: Sequence[tuple[str, WindowMonitor]] = ()) -> Measurement:
    """Warm-up, then every round's block back to back (one cell alone, in this process)."""
    n, seconds = warm_up(call, synchronize, config, clock)
    blocks = [run_block(call, synchronize, config, r, clock, monitors) for r in range(config.rounds)]
    return Measurement(blocks, n, seconds)
