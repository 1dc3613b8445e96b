"""How often a tail percentile's 95% interval covers the truth, simulated where the truth is known and is not the
estimator's own model (tests/sims.py: a shifted-gamma iteration time with AR(1) noise inside each round, a
uniform level per round, each round stopped on time), for the estimator inferbench uses since record schema 8
(the rounds' median-unbiased percentiles, their geometric mean and a random-effects interval over them:
``inferbench.measure.stats.tail_interval``) and the one it used before (order statistics of every sample pooled,
on an effective sample size; reproduced below, as it was).

Each estimator is scored against the quantity it claims: the new one the round percentile at the rounds' typical
(geometric-mean) level, the old one the percentile of all iterations pooled (the mixture of the rounds' levels,
count-weighted, as a long run pools them). No timing: the result depends on nothing but the seeds.

    python benchmarks/tail_coverage.py [--trials 400]

Looks inside: the tails' estimator (measure.stats) on simulated rounds; the Python API (inferbench.api) has no such
piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sims import tail_cell, true_tail  # noqa: E402

from inferbench.measure import stats  # noqa: E402


def order_statistics_interval(xs: np.ndarray, rounds: list[int], q: float) -> tuple[float, float] | None:
    """The interval before schema 8: the binomial count of samples below the quantile, on the effective sample
    size (lag-1 correlation within rounds), mapped back onto the sorted samples; None below 299 samples (p99)."""
    x = np.sort(xs)
    n_eff = int(math.floor(stats.effective_n(xs, rounds)))
    if n_eff < math.ceil(math.log(0.05) / math.log(q)):
        return None
    k = np.arange(n_eff + 1, dtype=np.float64)
    lgamma = np.vectorize(math.lgamma)
    logpmf = (math.lgamma(n_eff + 1) - lgamma(k + 1) - lgamma(n_eff - k + 1) + k * math.log(q)
              + (n_eff - k) * math.log1p(-q))
    cdf = np.cumsum(np.exp(logpmf - logpmf.max()))
    cdf /= cdf[-1]
    lo_k, hi_k = int(np.searchsorted(cdf, 0.025)), int(np.searchsorted(cdf, 0.975)) + 1
    scale = x.size / n_eff
    lo = x[min(x.size - 1, max(0, int(math.floor(lo_k * scale)) - 1))] if lo_k > 0 else x[0]
    return float(lo), float(x[min(x.size - 1, int(math.ceil(hi_k * scale)) - 1)])


def pooled_truth(q: float, shift: float) -> float:
    """The percentile of every iteration pooled over very many rounds (what the old interval claimed)."""
    xs, _ = tail_cell(np.random.default_rng(8), shift, rounds=2000)
    return float(np.percentile(xs, 100 * q))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args(argv)
    print("| tail | level moves between rounds (uniform) | rounds' interval (schema 8) | median width | "
          "pooled order statistics (before) | median width |")
    print("|---|---|---|---|---|---|")
    for stat, q in (("p99", 0.99), ("p90", 0.90)):
        for shift in (0.0, 0.1, 0.3, 0.5):
            rng = np.random.default_rng(11)
            new_truth, old_truth = true_tail(q, shift), pooled_truth(q, shift)
            new = old = 0
            new_w, old_w = [], []
            for _ in range(args.trials):
                xs, rs = tail_cell(rng, shift)
                found = stats.tail_interval(xs, rs, stat, processes=1, between=(0.0, 50))
                if found is not None:
                    new += found[0] <= new_truth <= found[1]
                    new_w.append(found[1] / found[0])
                before = order_statistics_interval(xs, rs, q)
                if before is not None:
                    old += before[0] <= old_truth <= before[1]
                    old_w.append(before[1] / before[0])
            print(f"| {stat} | ±{shift:.0%} | {new / args.trials:.0%} | ×{np.median(new_w):.3f} | "
                  f"{old / args.trials:.0%} | ×{np.median(old_w):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
