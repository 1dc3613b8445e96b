"""Simulated result histories with a known truth, for the history's tests and benchmarks/history_steps.py.

The truth is not the detector's model: a run's level is the true level (with its steps) times a heavy-tailed
invocation effect (Student t, 4 degrees of freedom), times a slow machine-speed state some runs land in (the probe's
GFLOP/s lower by the same factor), times a busy machine's slowdown for a few runs (marked NOT VALID, as the harness
marks them); each run's own interval comes from its rounds alone (six rounds of lognormal noise), so it leaves the
invocation effect out, as a real run's does."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from inferbench.timeline.rows import COLUMNS


def series_rows(n: int, steps: dict[int, float], seed: int, invocation_sd: float = 0.03, round_sd: float = 0.02,
                slow_share: float = 0.1, busy_share: float = 0.05, framework: str = "onnxrt",
                base_ms: float = 4.0) -> list[dict[str, Any]]:
    """``n`` runs of one cell, oldest first; ``steps``: run index -> factor on the level from that run on (1.1: 10%
    slower); the runtime's version changes at each step (as a real step usually comes with one)."""
    rng = np.random.default_rng(seed)
    level, version, start = base_ms, 0, datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = []
    for i in range(n):
        if i in steps:
            level, version = level * steps[i], version + 1
        effect = float(np.exp(invocation_sd * rng.standard_t(4) / np.sqrt(2)))  # t4 has variance 2
        slow = rng.random() < slow_share
        busy = not slow and rng.random() < busy_share
        centre = level * effect * (1.3 if slow else 1.0) * (float(rng.uniform(1.5, 3.0)) if busy else 1.0)
        rounds = centre * np.exp(rng.normal(0, round_sd, 6))
        se = float(np.std(np.log(rounds), ddof=1) / np.sqrt(6))
        p50 = float(np.exp(np.mean(np.log(rounds))))
        rows.append(row(i, start + timedelta(hours=6 * i), p50, se, framework, version,
                        speed=340.0 / (1.3 if slow else 1.0) * float(np.exp(rng.normal(0, 0.02))), busy=busy))
    return rows


def row(i: int, when: datetime, p50: float, se: float, framework: str = "onnxrt", version: int = 0,
        speed: float | None = 340.0, busy: bool = False, **over: Any) -> dict[str, Any]:
    """One stored row with every column, as :func:`inferbench.timeline.rows.row` makes it."""
    r: dict[str, Any] = {k: None for k in COLUMNS}
    r.update(record_id=f"sim-{framework}-{i:04d}", run_id=f"run-{i:04d}", created_at=when, model="mobilenet_v3_large",
             resolution="224", batch_size=1, framework=framework, precision="fp32", variant="", scenario="inference",
             task="classification", host="vm", device="cpu", device_name="Simulated CPU", cpu_model="Simulated CPU",
             cpu_flags="avx2,fma", threads=2, runtime_version=f"onnxruntime 1.{30 + version}.0",
             inferbench_version="0.1.0", python="3.11.7",
             packages=f'{{"onnxruntime": "1.{30 + version}.0"}}', speed_gflops=speed, valid=not busy, busy=busy,
             status="ok", parity="passed", p50_ms=p50, p50_ci95_low_ms=p50 * float(np.exp(-1.96 * se)),
             p50_ci95_high_ms=p50 * float(np.exp(1.96 * se)), n=600, rounds=6)
    r.update(over)
    return r
