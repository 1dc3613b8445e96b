"""The machine's own speed, round by round: a fixed matrix product (float32, 512 x 512, NumPy on the run's threads)
timed for a few tens of milliseconds, as GFLOP/s. On this project's 2-core VM the same product ran at 148 or 201
GFLOP/s, switching every few seconds to minutes as the hypervisor placed the virtual CPUs, and ONNX Runtime's median
latency moved with it (9.0 and 4.9 ms): a state no other process causes, that can last a whole run and change
between runs.

It is read by a probe process of its own (``python -m inferbench.measure.trackers.speed``, started by
:mod:`inferbench.execution.rounds` with the run's thread count) just before every round and after the last, while
every worker is idle: read inside a runtime's worker, the runtime's own spinning threads slowed it by up to ten
times. The record keeps every reading and their median (``machine_state.speed``). A round is *steady* when the
readings before and after it agree; ``compare`` sets side by side only two runs' steady rounds at one common speed
(:func:`matched`), never a round at another speed."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
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
    times: list[float] = []
    start = clock()
    while clock() - start < seconds or len(times) < 3:
        t = clock()
        a @ a
        times.append(clock() - t)
    return 2 * SIZE**3 / statistics.median(times) / 1e9


#: Two speeds are one state when they differ by less than this share (the probe's own noise is ~3%).
SAME_STATE = 0.10


def summarize(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The speed over a run's rounds (``{"round", "gflops"}`` each): their median and extremes, and whether the
    rounds saw more than one state (the slowest and fastest apart by more than :data:`SAME_STATE`)."""
    values = [r["gflops"] for r in readings if r.get("gflops")]
    method = f"matmul-{SIZE}-fp32-median, a probe process before each round"
    if not values:
        return {"method": method, "rounds": readings}
    low, high = min(values), max(values)
    return {"method": method, "gflops_median": round(statistics.median(values), 2), "gflops_min": low,
            "gflops_max": high, "states": 1 if high <= low * (1 + SAME_STATE) else 2,
            "steady_rounds": len(steady(readings)), "rounds": readings}


def steady(readings: list[dict[str, Any]]) -> dict[int, float]:
    """The rounds the machine ran through at one speed: round r's reading (before it) and the next one (after it)
    at one state, with their mean. On the 2-core VM the state switched inside about one round in eight; a round
    read only before was wrong in either direction (9.2 ms at a fast reading, 4.9 ms at a slow one)."""
    by = {int(r["round"]): r.get("gflops") for r in readings}
    return {r: (g + by[r + 1]) / 2 for r, g in by.items() if same_state(g, by.get(r + 1))}  # type: ignore[operator]


def matched(a: list[dict[str, Any]], b: list[dict[str, Any]], need: int, with_data_a: Any = None,
            with_data_b: Any = None) -> tuple[list[int], list[int], float] | None:
    """The rounds of two runs to set side by side: those of each run that the machine ran through steadily at one
    common speed (within :data:`SAME_STATE` of it), the speed with the most such rounds on the sparser side; None
    when no speed has ``need`` steady rounds on each side. ``with_data_a``/``_b``: the rounds that have samples
    (a serving cell keeps only the tests its answer stands on); None: every round."""
    sa = {r: g for r, g in steady(a).items() if with_data_a is None or r in with_data_a}
    sb = {r: g for r, g in steady(b).items() if with_data_b is None or r in with_data_b}
    best: tuple[int, list[int], list[int], float] | None = None
    for centre in sorted(set(sa.values()) | set(sb.values())):
        ra = sorted(r for r, g in sa.items() if same_state(g, centre))
        rb = sorted(r for r, g in sb.items() if same_state(g, centre))
        if min(len(ra), len(rb)) >= need and (best is None or min(len(ra), len(rb)) > best[0]):
            best = (min(len(ra), len(rb)), ra, rb, centre)
    return None if best is None else best[1:]


def main() -> None:
    """The probe process: a reading (GFLOP/s, one line) for every line read."""
    for _ in sys.stdin:
        print(round(probe(), 2), flush=True)


if __name__ == "__main__":
    main()


def same_state(a: float | None, b: float | None) -> bool | None:
    """Were two runs' machines at one speed (within :data:`SAME_STATE`)? None when either is unknown."""
    if a is None or b is None or not (a > 0 and b > 0):  # NaN and missing alike: unknown
        return None
    return abs(a / b - 1) <= SAME_STATE
