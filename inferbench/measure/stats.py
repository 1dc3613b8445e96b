"""Statistics from raw per-iteration latencies measured in rounds.

Successive iterations on a shared machine are not independent (lag-1 correlation 0.88 measured on
onnxrt), so no interval here resamples single iterations. A cell is measured in R rounds (a block per
round, the cells of a run in a fresh random order each round); what varies between rounds is what the
intervals are made of:

- a cell's p50 interval: ``p50 * exp(+-t * s / sqrt(R))``, with ``s`` the standard deviation of the
  log round medians and ``t`` Student's 97.5% quantile with R-1 degrees of freedom (``between-rounds-t-95``,
  widened as below);
- A vs B measured in the same rounds (paired): the per-round ratios of round medians, their geometric
  mean and a t-interval on their logs (``paired-rounds-t-95``): a slow change of the machine hits both
  cells of a round and cancels in the ratio;
- A vs B from different runs (unpaired): the ratio of p50s, with both cells' between-round variances
  (``unpaired-rounds-t-95``, degrees of freedom of the smaller side);
- fewer than 3 rounds on either side (records from before rounds): no interval, and no claim.

Rounds cannot see what stays fixed for a whole run: each worker process's memory layout and thread
placement, and the state the machine was in that minute. On a quiet machine that part dominates: the
same two-framework ratio moved with a standard deviation of 2.1% over six invocations whose own
intervals were +-0.3%, and an A/A comparison of two workers of one configuration was "significant"
in 14 of 20 repeats (2026-11-24, the 2-core machine; ``benchmarks/``). So every interval adds
:data:`INVOCATION_SD` per cell as a known variance (normal quantile) to the between-round term:
``half = sqrt((t * se_rounds)**2 + cells * (1.96 * INVOCATION_SD)**2)``, ``cells`` 1 for a p50 and
2 for a ratio; the method codes say so (``...+invocation-sd-1.5%``).

Percentiles use linear interpolation between closest ranks (NumPy's default 'linear' method,
Hyndman & Fan type 7); tools disagree at small n, so every record names the rule and carries n.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Codes recorded with every statistic (docs/results-schema.md spells them out).
PERCENTILE_RULE = "numpy-linear"  # linear interpolation between closest ranks, Hyndman-Fan type 7
#: Relative standard deviation of one cell's median between invocations (processes) of one
#: configuration that the rounds of a single run cannot see (module docstring; re-measure it on another
#: machine with benchmarks/reproducibility.py and benchmarks/aa_calibration.py).
INVOCATION_SD = 0.015
_INVOCATION = f"+invocation-sd-{INVOCATION_SD:.1%}"
CI_METHOD = "between-rounds-t-95" + _INVOCATION
PAIRED_METHOD = "paired-rounds-t-95" + _INVOCATION
UNPAIRED_METHOD = "unpaired-rounds-t-95" + _INVOCATION
_Z975 = 1.959964
MIN_ROUNDS = 3  # fewer rounds give no interval
#: Stability verdict thresholds: the p50's 95% interval half-width, and the drift first -> last third of rounds.
UNSTABLE_HALF_WIDTH = 0.10
UNSTABLE_DRIFT = 0.10

# Student's t, 97.5% quantile, for 1..30 degrees of freedom (beyond: a Cornish-Fisher expansion).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("need at least one degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


#: The statistics a comparison can be about: the median (the default), the 99th percentile (tail
#: latency) and the mean (throughput, at a fixed batch size, is the batch over the mean latency).
STATISTICS = {"p50": np.median, "p99": lambda x: np.percentile(x, 99), "mean": np.mean}


def round_stats(latencies: Sequence[float], rounds: Sequence[int] | None, stat: str = "p50") -> dict[int, float]:
    """``stat`` of each round's latencies (one round when ``rounds`` is None: a record from before rounds)."""
    x = np.asarray(latencies, dtype=np.float64)
    r = np.zeros(x.size, dtype=int) if rounds is None else np.asarray(rounds, dtype=int)
    if r.size != x.size:
        raise ValueError(f"{x.size} latencies but {r.size} round indices")
    f = STATISTICS[stat]
    return {int(k): float(f(x[r == k])) for k in np.unique(r)}


def round_medians(latencies: Sequence[float], rounds: Sequence[int] | None) -> dict[int, float]:
    """Median latency of each round."""
    return round_stats(latencies, rounds, "p50")


def _log_spread(logs: np.ndarray) -> tuple[float, float]:
    """(mean, standard error) of log values."""
    return float(logs.mean()), float(logs.std(ddof=1) / math.sqrt(logs.size))


def _half_width(t: float, se: float, cells: int) -> float:
    """Half-width on the log scale: the rounds' t-interval and the invocation term of ``cells`` cells."""
    return math.hypot(t * se, math.sqrt(cells) * _Z975 * INVOCATION_SD)


def interval(latencies: Sequence[float], rounds: Sequence[int] | None,
             stat: str = "p50") -> tuple[float, float, float] | None:
    """95% interval of ``stat`` (of :data:`STATISTICS`) from the variation between rounds, and the pooled
    value it is centred on: (low, high, value); None with fewer than 3 rounds."""
    per_round = np.array(list(round_stats(latencies, rounds, stat).values()))
    if per_round.size < MIN_ROUNDS or np.any(per_round <= 0):
        return None
    value = float(STATISTICS[stat](np.asarray(latencies, dtype=np.float64)))
    half = _half_width(t975(per_round.size - 1), _log_spread(np.log(per_round))[1], cells=1)
    return value * math.exp(-half), value * math.exp(half), value


def median_interval(latencies: Sequence[float], rounds: Sequence[int] | None) -> tuple[float, float] | None:
    """95% interval of the p50 from the variation between rounds, or None with fewer than 3 rounds."""
    found = interval(latencies, rounds, "p50")
    return None if found is None else found[:2]


def stability(latencies: Sequence[float], rounds: Sequence[int] | None) -> dict[str, Any]:
    """Is the p50 estimate stable? From the between-round spread (the interval's half-width) and the
    drift from the first to the last third of the rounds; ``advice`` is the one line for the user."""
    meds = np.array([m for _, m in sorted(round_medians(latencies, rounds).items())])
    if meds.size < MIN_ROUNDS:
        return {"verdict": "unknown", "rounds": int(meds.size), "half_width": None, "drift": None,
                "advice": f"fewer than {MIN_ROUNDS} rounds, so no interval: measure with --rounds {MIN_ROUNDS} or more"}
    logs = np.log(meds)
    half = math.expm1(_half_width(t975(meds.size - 1), _log_spread(logs)[1], cells=1))
    third = max(1, meds.size // 3)
    drift = math.expm1(float(logs[-third:].mean() - logs[:third].mean()))
    reasons = []
    if half > UNSTABLE_HALF_WIDTH:
        reasons.append(f"rounds disagree (p50 +-{half:.0%})")
    if abs(drift) > UNSTABLE_DRIFT:
        reasons.append(f"p50 drifted {drift:+.0%} from the first to the last rounds")
    advice = "" if not reasons else "; ".join(reasons) + \
        ": run more rounds (--rounds) or on a quieter machine before trusting small differences"
    return {"verdict": "unstable" if reasons else "stable", "rounds": int(meds.size), "half_width": half,
            "drift": drift, "advice": advice}


def summarize(latencies_ms: Sequence[float], rounds: Sequence[int] | None = None) -> dict[str, Any]:
    """Summary of per-iteration latencies in milliseconds (the ``latency_ms`` block of a record)."""
    x = np.asarray(latencies_ms, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        raise ValueError("no latency samples")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    p25, p50, p75, p90, p95, p99 = (float(v) for v in np.percentile(x, [25, 50, 75, 90, 95, 99]))
    ci = median_interval(x, rounds)
    return {
        "n": n, "mean": mean, "std": std, "cv": std / mean if mean > 0 else float("nan"),
        "min": float(x.min()), "max": float(x.max()),
        "p25": p25, "p50": p50, "p75": p75, "p90": p90, "p95": p95, "p99": p99, "iqr": p75 - p25,
        "p50_ci95": None if ci is None else list(ci),
        "percentile_rule": PERCENTILE_RULE,
        "ci_method": CI_METHOD,
        "stability": stability(x, rounds),
    }


def compare(a_ms: Sequence[float], a_rounds: Sequence[int] | None, b_ms: Sequence[float],
            b_rounds: Sequence[int] | None, paired: bool, stat: str = "p50") -> dict[str, Any]:
    """A's median latency over B's (or another of :data:`STATISTICS`), with a 95% interval and whether
    it excludes 1.

    ``paired``: A and B were measured in the same rounds of one run (their round indices pair up).
    ``ci95`` and ``significant`` are None where the records give no interval (fewer than 3 rounds).
    """
    ma, mb = round_stats(a_ms, a_rounds, stat), round_stats(b_ms, b_rounds, stat)
    common = sorted(set(ma) & set(mb))
    if paired and len(common) >= MIN_ROUNDS:
        logs = np.log([ma[k] / mb[k] for k in common])
        mean, se = _log_spread(logs)
        df, method = len(common) - 1, PAIRED_METHOD
    else:
        f = STATISTICS[stat]
        mean = math.log(float(f(np.asarray(a_ms, dtype=np.float64))) / float(f(np.asarray(b_ms, dtype=np.float64))))
        if min(len(ma), len(mb)) < MIN_ROUNDS:
            return {"ratio": math.exp(mean), "ci95": None, "significant": None, "method": "none-too-few-rounds",
                    "rounds": min(len(ma), len(mb))}
        se = math.hypot(*(_log_spread(np.log(list(m.values())))[1] for m in (ma, mb)))
        df, method = min(len(ma), len(mb)) - 1, UNPAIRED_METHOD
    half = _half_width(t975(df), se, cells=2)
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    return {"ratio": math.exp(mean), "ci95": [lo, hi], "significant": not lo <= 1.0 <= hi, "method": method,
            "rounds": df + 1}


def iid_compare(a_ms: Sequence[float], b_ms: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """The interval the seed projects (and inferbench before rounds) gave: a bootstrap over single
    iterations, as if they were independent. Kept only to show, in tests and benchmarks, how it fails."""
    a, b = np.asarray(a_ms, dtype=np.float64), np.asarray(b_ms, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ratios = np.array([np.median(a[rng.integers(0, a.size, a.size)]) / np.median(b[rng.integers(0, b.size, b.size)])
                       for _ in range(1000)])
    lo, hi = (float(v) for v in np.quantile(ratios, [0.025, 0.975]))
    return {"ratio": float(np.median(a) / np.median(b)), "ci95": [lo, hi], "significant": not lo <= 1.0 <= hi}
