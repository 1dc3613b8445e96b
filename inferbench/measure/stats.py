"""Statistics derived from raw per-iteration latencies.

Percentiles use linear interpolation between closest ranks (NumPy's default 'linear' method,
Hyndman & Fan type 7); tools disagree at small n, so every record names the rule and carries n.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Codes recorded with every statistic (README's schema table spells them out).
PERCENTILE_RULE = "numpy-linear"  # linear interpolation between closest ranks, Hyndman-Fan type 7
CI_METHOD = "bootstrap-iid-median-95"  # percentile bootstrap of the median, 2000 resamples, seed 0
#: A measurement is flagged noisy above either threshold (torch.utils.benchmark warns at IQR > 10% of
#: the median; trtexec's 2.5% CV is too strict for shared CPU machines, so 10% is used for both).
NOISY_CV = 0.10
NOISY_IQR_OVER_MEDIAN = 0.10


def bootstrap_median_ci(
    samples: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median (deterministic for a given seed)."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    medians = np.empty(resamples)
    chunk = max(1, 2_000_000 // x.size)  # bound memory for long runs
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        medians[start:stop] = np.median(x[idx], axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def summarize(latencies_ms: Sequence[float]) -> dict[str, Any]:
    """Summary of per-iteration latencies in milliseconds (the ``latency_ms`` block of a record)."""
    x = np.asarray(latencies_ms, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        raise ValueError("no latency samples")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    p25, p50, p75, p90, p95, p99 = (float(v) for v in np.percentile(x, [25, 50, 75, 90, 95, 99]))
    lo, hi = bootstrap_median_ci(x)
    cv = std / mean if mean > 0 else float("nan")
    iqr = p75 - p25
    reasons = []
    if cv > NOISY_CV:
        reasons.append(f"CV {cv:.1%} > {NOISY_CV:.0%}")
    if p50 > 0 and iqr / p50 > NOISY_IQR_OVER_MEDIAN:
        reasons.append(f"IQR {iqr / p50:.1%} of median > {NOISY_IQR_OVER_MEDIAN:.0%}")
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "cv": cv,
        "min": float(x.min()),
        "max": float(x.max()),
        "p25": p25,
        "p50": p50,
        "p75": p75,
        "p90": p90,
        "p95": p95,
        "p99": p99,
        "iqr": iqr,
        "p50_ci95": [lo, hi],
        "percentile_rule": PERCENTILE_RULE,
        "ci_method": CI_METHOD,
        "noisy": bool(reasons),
        "noisy_reasons": reasons,
    }


def compare_medians(a_ms: Sequence[float], b_ms: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """Is A's median latency really different from B's? Bootstrap CI of the ratio of medians.

    Returns the ratio median(A)/median(B), its 95% interval, and whether the interval excludes 1.
    """
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ratios = np.empty(2000)
    for i in range(ratios.size):
        ratios[i] = np.median(a[rng.integers(0, a.size, a.size)]) / np.median(
            b[rng.integers(0, b.size, b.size)]
        )
    lo, hi = (float(v) for v in np.quantile(ratios, [0.025, 0.975]))
    return {
        "ratio": float(np.median(a) / np.median(b)),
        "ci95": [lo, hi],
        "significant": not (lo <= 1.0 <= hi),
    }
