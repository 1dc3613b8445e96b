"""How often the paired margin's 95% interval (the number behind every "A is N x faster") covers the true ratio,
simulated where the truth is known and is not the estimator's own model (tests/sims.py ``paired_cells``: uniform
process offsets per cell, a Laplace machine state both cells share within a round, shifted-gamma iterations with
spikes), for the rule inferbench uses now (the ratio's between-process part fitted by process pair,
moderated toward the cells' own: ``inferbench.measure.stats.ratio_between``) and the one before it (the two cells'
own terms added; reproduced below, as it was). No timing: the result depends on nothing but the seeds.

    python benchmarks/coverage_paired.py [--trials 400]
    python benchmarks/coverage_paired.py --energy   # the energy margin: one J/inference a round and cell

Looks inside: the paired comparison (measure.stats) on simulated rounds; the Python API (inferbench.api) has no such
piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sims import energy_cells, paired_cells  # noqa: E402

from inferbench.measure import stats  # noqa: E402

CASES = [(p, r, sd, state, react) for p, r in ((3, 6), (2, 6), (3, 12))
         for sd, state, react in ((0.0, 0.10, 1.0), (0.02, 0.10, 1.0), (0.04, 0.10, 1.0), (0.06, 0.10, 1.0),
                                  (0.04, 0.04, 1.0), (0.03, 0.10, 0.6))]


def before(a: stats.Sample, b: stats.Sample) -> tuple[float, float]:
    """The paired interval before this rule: the ratio's rounds, with the two cells' own between-process terms added
    in place of the ratio's (the assumed 1.5% a side where either had none)."""
    ma, mb = stats.round_stats(a.latencies, a.rounds, "p50"), stats.round_stats(b.latencies, b.rounds, "p50")
    common = sorted(set(ma) & set(mb))
    pa, pb = stats.process_of(common, a.processes), stats.process_of(common, b.processes)
    ratios = {r: ma[r] / mb[r] for r in common}
    fit = stats.spread(ratios, {r: pa[r] * 1000 + pb[r] for r in common})
    assert fit is not None
    fit = dataclasses.replace(fit, drift_factor=1.0)  # (the rounds taken as independent, as they were)
    pooled: tuple[float | None, int] = (None, 0)
    if a.between and b.between and a.between[0] is not None and b.between[0] is not None:
        pooled = (a.between[0] + b.between[0], min(a.between[1], b.between[1]))
    with mock.patch.object(stats, "FEW_BETWEEN_DF", 0):  # a term estimated at 0 left out, as it was
        se, df = fit.se(*pooled, sides=2, whole=False)  # (the between part counted alone, as it was)
    mean = float(np.mean(np.log(list(ratios.values()))))
    half = stats.t975(df) * se
    return math.exp(mean - half), math.exp(mean + half)


def energy(trials: int) -> int:
    """The energy margin's coverage, before (its process part the assumed 1.5% a side, whatever was measured) and now
    (the ratio's own, fitted by process pair: latency's rule)."""
    print("| processes | rounds | process sd | shared state sd | before: coverage | half-width | now: coverage | "
          "half-width |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(20261202)
    for processes, rounds in ((2, 8), (3, 12)):
        for sd in (0.0, 0.03, 0.06):
            rows: dict[str, list[tuple[bool, float]]] = {"before": [], "now": []}
            for _ in range(trials):
                a, b, truth = energy_cells(rng, sd, 0.10, processes, rounds)
                for name, (lo, hi) in (("before", before(a, b)), ("now", stats.compare(a, b, paired=True)["ci95"])):
                    rows[name].append((lo <= truth <= hi, math.log(hi / lo) / 2))
            said = [f"{np.mean([h for h, _ in rows[k]]):.1%} | ±{np.median([w for _, w in rows[k]]):.1%}"
                    for k in ("before", "now")]
            print(f"| {processes} | {rounds} | {sd:.0%} | 10% | {said[0]} | {said[1]} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--energy", action="store_true", help="the energy margin (one figure a round) instead")
    args = parser.parse_args(argv)
    if args.energy:
        return energy(args.trials)
    print("| processes | rounds | process sd | shared state sd | B reacts | before: coverage | half-width "
          "| now: coverage | half-width |")
    print("|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(20261129)
    for processes, rounds, sd, state, react in CASES:
        rows: dict[str, list[tuple[bool, float]]] = {"before": [], "now": []}
        for _ in range(args.trials):
            a, b, truth = paired_cells(rng, sd, state, processes, rounds, react)
            now = stats.compare(a, b, paired=True)["ci95"]
            for name, (lo, hi) in (("before", before(a, b)), ("now", now)):
                rows[name].append((lo <= truth <= hi, math.log(hi / lo) / 2))
        said = [f"{np.mean([h for h, _ in rows[k]]):.1%} | ±{np.median([w for _, w in rows[k]]):.1%}"
                for k in ("before", "now")]
        print(f"| {processes} | {rounds} | {sd:.0%} | {state:.0%} | {react} | {said[0]} | {said[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
