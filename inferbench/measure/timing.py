"""The one measurement loop, shared by every framework.

Runners never time themselves: they give a ``call`` and a ``synchronize``, and this loop does the
rest. One clock read per iteration: each latency runs from the end of the previous synchronised
call to the end of this one, so the latencies add up exactly to the timed window and the loop's
own cost stays at one clock read and one list append.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Clock = Callable[[], float]


class WindowMonitor(Protocol):
    """Something read around the timed window (energy counters, power samplers); never inside it."""

    def start(self) -> None: ...

    def stop(self, window_s: float) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TimingConfig:
    warmup_iterations: int = 10
    warmup_seconds: float = 2.0
    min_duration_s: float = 10.0
    min_iterations: int = 100

    def __post_init__(self) -> None:
        if self.warmup_iterations < 0 or self.warmup_seconds < 0:
            raise ValueError("warm-up must not be negative")
        if self.min_iterations < 1:
            raise ValueError("min_iterations must be at least 1")
        if self.min_duration_s < 0:
            raise ValueError("min_duration_s must not be negative")


@dataclass
class Measurement:
    latencies_s: list[float]
    window_s: float
    warmup_iterations: int
    warmup_s: float
    monitors: dict[str, Any] = field(default_factory=dict)

    @property
    def iterations(self) -> int:
        return len(self.latencies_s)

    def throughput(self, batch_size: int) -> float:
        """Samples per second over the wall-clock of the whole timed window."""
        return self.iterations * batch_size / self.window_s if self.window_s > 0 else float("nan")


def run_timed(
    call: Callable[[], Any],
    synchronize: Callable[[Any], None],
    config: TimingConfig,
    clock: Clock = time.perf_counter,
    monitors: Sequence[tuple[str, WindowMonitor]] = (),
    on_phase: Callable[[str], None] | None = None,
) -> Measurement:
    """Warm up (count *and* time), then time until both the minimum duration and count are reached."""
    if on_phase:
        on_phase("warm-up")
    warm_start = clock()
    warm_n = 0
    now = warm_start
    while warm_n < config.warmup_iterations or now - warm_start < config.warmup_seconds:
        synchronize(call())
        warm_n += 1
        now = clock()
    warm_s = now - warm_start

    for _, monitor in monitors:
        monitor.start()
    if on_phase:
        on_phase("measuring")
    latencies: list[float] = []
    append = latencies.append
    min_n, min_s = config.min_iterations, config.min_duration_s
    start = prev = clock()
    while True:
        synchronize(call())
        now = clock()
        append(now - prev)
        prev = now
        if len(latencies) >= min_n and now - start >= min_s:
            break
    window = prev - start
    results = {name: monitor.stop(window) for name, monitor in monitors}
    return Measurement(latencies, window, warm_n, warm_s, results)
