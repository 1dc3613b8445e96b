"""The timing loop and statistics, with a fake clock so every number is exact."""

from __future__ import annotations

import numpy as np
import pytest

from inferbench.measure.stats import bootstrap_median_ci, compare_medians, summarize
from inferbench.measure.timing import TimingConfig, run_timed


class FakeClock:
    """Each call() advances time by the next scripted cost; sync adds a fixed device wait."""

    def __init__(self, costs: list[float], sync_cost: float = 0.0) -> None:
        self.now = 100.0
        self.costs = iter(costs)
        self.sync_cost = sync_cost
        self.calls = 0
        self.syncs = 0

    def __call__(self) -> float:
        return self.now

    def call(self) -> str:
        self.calls += 1
        self.now += next(self.costs)
        return "out"

    def sync(self, out: str) -> None:
        assert out == "out"
        self.syncs += 1
        self.now += self.sync_cost


def test_loop_times_every_call_including_sync():
    clock = FakeClock([0.010] * 1000, sync_cost=0.002)
    cfg = TimingConfig(warmup_iterations=3, warmup_seconds=0.0, min_duration_s=0.0, min_iterations=20)
    m = run_timed(clock.call, clock.sync, cfg, clock=clock)
    assert m.warmup_iterations == 3
    assert m.iterations == 20
    assert clock.calls == clock.syncs == 23
    assert m.latencies_s == pytest.approx([0.012] * 20)
    assert m.window_s == pytest.approx(0.24)
    assert m.throughput(batch_size=4) == pytest.approx(20 * 4 / 0.24)


def test_warmup_needs_count_and_time():
    clock = FakeClock([0.125] * 1000)
    cfg = TimingConfig(warmup_iterations=2, warmup_seconds=1.0, min_duration_s=0.0, min_iterations=1)
    m = run_timed(clock.call, clock.sync, cfg, clock=clock)
    assert m.warmup_iterations == 8  # 2 calls were not enough: 1 s of warm-up needs 8
    assert m.warmup_s == pytest.approx(1.0)


def test_measures_until_duration_and_count_are_both_reached():
    clock = FakeClock([0.125] * 1000)
    cfg = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=2.0, min_iterations=5)
    assert run_timed(clock.call, clock.sync, cfg, clock=clock).iterations == 16
    clock = FakeClock([0.5] * 1000)
    cfg = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=0.1, min_iterations=7)
    assert run_timed(clock.call, clock.sync, cfg, clock=clock).iterations == 7


def test_throughput_is_from_the_window_not_mean_latency():
    # One slow outlier: samples/window differs from batch/mean only if computed the wrong way round
    costs = [0.01] * 9 + [0.11]
    clock = FakeClock(costs)
    cfg = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=0.0, min_iterations=10)
    m = run_timed(clock.call, clock.sync, cfg, clock=clock)
    assert m.window_s == pytest.approx(0.2)
    assert m.throughput(1) == pytest.approx(50.0)


def test_monitors_bracket_the_window_only():
    events: list[tuple[str, int]] = []
    clock = FakeClock([0.01] * 100)

    class Monitor:
        def start(self) -> None:
            events.append(("start", clock.calls))

        def stop(self, window_s: float) -> dict:
            events.append(("stop", clock.calls))
            return {"window": window_s}

    cfg = TimingConfig(warmup_iterations=4, warmup_seconds=0.0, min_duration_s=0.0, min_iterations=6)
    m = run_timed(clock.call, clock.sync, cfg, clock=clock, monitors=[("energy", Monitor())])
    assert events == [("start", 4), ("stop", 10)]
    assert m.monitors["energy"]["window"] == pytest.approx(0.06)


def test_config_rejects_nonsense():
    with pytest.raises(ValueError):
        TimingConfig(min_iterations=0)
    with pytest.raises(ValueError):
        TimingConfig(warmup_seconds=-1)


def test_summary_statistics_are_exact():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["n"] == 5
    assert s["mean"] == 3.0
    assert s["std"] == pytest.approx(np.std([1, 2, 3, 4, 5], ddof=1))
    assert (s["min"], s["max"], s["p50"]) == (1.0, 5.0, 3.0)
    assert s["p90"] == pytest.approx(4.6)  # linear interpolation (type 7): 1 + 0.9 * 4
    assert s["p99"] == pytest.approx(4.96)
    assert "linear" in s["percentile_rule"]
    lo, hi = s["p50_ci95"]
    assert lo <= 3.0 <= hi


def test_noisy_flag():
    quiet = summarize([10.0 + 0.01 * (i % 3) for i in range(200)])
    assert not quiet["noisy"] and quiet["noisy_reasons"] == []
    noisy = summarize([10.0 if i % 2 else 14.0 for i in range(200)])
    assert noisy["noisy"]
    assert any("CV" in r for r in noisy["noisy_reasons"])


def test_bootstrap_ci_is_deterministic_and_covers_the_median():
    rng = np.random.default_rng(1)
    x = rng.lognormal(1.0, 0.2, 500)
    a = bootstrap_median_ci(x)
    assert a == bootstrap_median_ci(x)
    assert a[0] < np.median(x) < a[1]
    assert a[1] - a[0] < 0.2 * np.median(x)
    assert bootstrap_median_ci([7.0]) == (7.0, 7.0)


def test_compare_medians_tells_real_from_noise():
    rng = np.random.default_rng(2)
    a = rng.normal(10.0, 0.5, 300)
    b = rng.normal(12.0, 0.5, 300)
    same = rng.normal(10.0, 0.5, 300)
    assert compare_medians(a, b)["significant"]
    assert compare_medians(a, b)["ratio"] == pytest.approx(10 / 12, rel=0.02)
    assert not compare_medians(a, same)["significant"]
