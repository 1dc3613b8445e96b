"""A test-only hook (``benchmarks/aa_calibration.py``, the A/B tests): a known slowdown of one framework's timed
calls, so that ``compare`` can be shown a difference it must find. Nothing of it runs unless
``INFERBENCH_TEST_SLOWDOWN`` is set; the record says so (``timing.test_slowdown``)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..base.errors import UsageError

#: Test-only (benchmarks/aa_calibration.py): ``FRAMEWORK:FACTOR`` makes every timed call of that framework's cells
#: FACTOR times as long as the runtime's own median call, by a sleep after each call in proportion to that call's
#: own time, the proportion calibrated once in the worker: the median of :data:`SLOWDOWN_CALLS` plain calls (after
#: :data:`SLOWDOWN_WARMUP`), then :data:`SLOWDOWN_STEPS` corrections of the proportion until a call with its sleep
#: takes FACTOR x that median (a pause slows the next call too: ONNX Runtime's threads stop spinning; a sleep of 0.3x
#: the call alone made 1.41-1.48x). The record says so (``timing.test_slowdown``), the cell's identity does not change,
#: so that ``compare`` can be shown a known slowdown of one configuration, which ``benchmarks/aa_calibration.py``
#: verifies by a paired A/B. A sleep in proportion follows the VM's switches of speed; the fixed sleep it replaces
#: (2026-11-27) was calibrated at the speed the machine had then, and three workers of one slowed cell read 1.27,
#: 1.33 and 1.63x. (Busy work in proportion to each call measured 1.58-2.56x for a nominal 1.3x on a loaded machine.)
TEST_SLOWDOWN = "INFERBENCH_TEST_SLOWDOWN"


SLOWDOWN_WARMUP, SLOWDOWN_CALLS, SLOWDOWN_STEPS = 5, 31, 3


def test_slowdown(framework: str) -> float | None:
    """The factor ``INFERBENCH_TEST_SLOWDOWN`` slows ``framework`` by (None: not this one); a UsageError for one that
    is no number above 1 (or over 100)."""
    key, _, factor = os.environ.get(TEST_SLOWDOWN, "").partition(":")
    if key != framework or not factor:
        return None
    try:
        value = float(factor)
    except ValueError:
        value = math.nan
    if not 1.0 < value <= 100.0:
        raise UsageError(f"{TEST_SLOWDOWN}={key}:{factor}: the factor must be a number above 1 (at most 100)")
    return value


def slowed_call(runner: Any, prepared: Any, factor: float) -> Callable[[], Any]:
    """One timed call of ``runner`` made ``factor`` times as long as its own median call: the call, synchronised, then
    a sleep in proportion to its own time, the proportion calibrated here (:data:`TEST_SLOWDOWN`)."""
    def slowed(share: float) -> Any:
        start = time.perf_counter()
        out = runner.call(prepared)
        runner.synchronize(out)
        if share > 0:
            time.sleep(share * (time.perf_counter() - start))
        return out

    def median(share: float) -> float:
        took = []
        for _ in range(SLOWDOWN_CALLS):
            start = time.perf_counter()
            slowed(share)
            took.append(time.perf_counter() - start)
        return float(np.median(took))

    for _ in range(SLOWDOWN_WARMUP):
        slowed(0.0)
    plain = median(0.0)
    share = factor - 1.0
    for _ in range(SLOWDOWN_STEPS):  # a pause slows the next call too (a thread pool gone idle): aim at the whole
        share = max(0.0, share + (factor * plain - median(share)) / plain)
    return lambda: slowed(share)
