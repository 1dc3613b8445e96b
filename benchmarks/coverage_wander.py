"""How often a cell's 95% p50 interval covers its level when the machine's speed wanders from round to round (an
AR(1) level of correlation phi: a drift that comes and goes), simulated where the truth is known and is not the
estimator's own model (tests/sims.py ``wandering_cell``: shifted-gamma iterations, uniform process offsets), with
the rounds' lag-1 correlation taken into the interval (``inferbench.measure.stats.wander``, now) and without it
(before: the rounds taken as independent). Also the stability verdict's share of "wandering" and the interval's
median width (high / low). No timing: the result depends on nothing but the seeds.

    python benchmarks/coverage_wander.py [--trials 400]
    python benchmarks/coverage_wander.py --lone   # few processes: the process term's count, before and now

Looks inside: the cell interval (measure.stats) on simulated rounds; the Python API (inferbench.api) has no such
piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sims import WANDERING_TRUTH, wandering_cell  # noqa: E402

from inferbench.measure import stats  # noqa: E402

CASES = [(r, p, phi, sd) for r, p in ((8, 2), (12, 3), (24, 3)) for phi in (0.0, 0.5, 0.8) for sd in (0.0, 0.03)]
#: --lone: few processes, where a process term is measured most roughly (and comes out at 0 most often)
LONE_CASES = [(r, p, 0.0, sd) for r, p in ((6, 2), (8, 2), (12, 2), (6, 3), (12, 3)) for sd in (0.0, 0.03, 0.06)]


def trial(case: tuple[int, int, float, float], trials: int, said: str = "wandering") -> tuple[float, float, float]:
    """Coverage, median width and the share of cells ``said`` wandering (or, ``said="assumed"``, whose interval
    took the assumed process part)."""
    rounds, processes, phi, process_sd = case
    rng = np.random.default_rng(1)
    hits, widths, flagged = 0, [], 0
    for _ in range(trials):
        x, r = wandering_cell(rng, phi, rounds, processes, process_sd=process_sd)
        found = stats.interval(x, r, "p50", processes)
        assert found is not None
        lo, hi, _ = found
        hits += lo <= WANDERING_TRUTH <= hi
        widths.append(hi / lo)
        flagged += bool(stats.stability(x, r, processes)["wandering"]) if said == "wandering" else \
            stats.assumed_part(stats.round_medians(x, r), processes)
    return hits / trials, float(np.median(widths)), flagged / trials


#: The rule now (what --lone's "before" wraps).
COUNTED_WHOLE = stats.Spread.se


def _counted_alone(self: stats.Spread, *args: object, **kwargs: object) -> tuple[float, float]:
    """The rule before 2026-12-07: a measured process term's degrees of freedom counted for its between part alone."""
    return COUNTED_WHOLE(self, *args, **{**kwargs, "whole": False})  # type: ignore[arg-type]


def lone(trials: int) -> int:
    """Lone cells of few processes: the process term's degrees of freedom counted for its between part alone
    (before, Satterthwaite's rule over the within and between parts) or for the whole mean square of process means
    (now: :meth:`inferbench.measure.stats.Spread.se`), and the share whose term came out at 0 from few degrees of
    freedom and took the assumed part (:data:`inferbench.measure.stats.FEW_BETWEEN_DF`)."""
    print("| rounds | processes | process sd | covered before | now | width before | now | assumed now |")
    print("|---|---|---|---|---|---|---|---|")
    for case in LONE_CASES:
        with mock.patch.object(stats.Spread, "se", _counted_alone):
            before, width_before, _ = trial(case, trials, "assumed")
        now, width_now, assumed = trial(case, trials, "assumed")
        r, p, _, sd = case
        print(f"| {r} | {p} | {sd:.0%} | {before:.1%} | {now:.1%} | {width_before:.3f} | {width_now:.3f} "
              f"| {assumed:.1%} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--lone", action="store_true", help="lone cells of few processes: the process term's count")
    args = parser.parse_args(argv)
    if args.lone:
        return lone(args.trials)
    print("| rounds | processes | phi | process sd | covered before | now | width before | now | said wandering |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        with mock.patch.object(stats, "wander", lambda residuals: None):
            before, width_before, _ = trial(case, args.trials)
        now, width_now, said = trial(case, args.trials)
        r, p, phi, sd = case
        print(f"| {r} | {p} | {phi:g} | {sd:.0%} | {before:.1%} | {now:.1%} | {width_before:.3f} | {width_now:.3f} "
              f"| {said:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
