"""Steps found in simulated histories with a known truth (tests/history_sim.py), no timing: inferbench's detector
(``inferbench.timeline.steps``) beside the single-previous-point rule and a fixed threshold over a window, on the same
series. Each series: 60 runs, two true 10% slowdowns at runs 20 and 40 (or none, for the false-step rate).

    python benchmarks/history_steps.py [--series 200] [--out benchmark_results/history-steps-sim-<date>/]

Looks inside: the history's detector (inferbench.timeline), on rows made as the store holds them.

A step counts as found when one is reported within 3 runs of the true one (up to 3 runs before or after it); every
other report is a false step, counted per 100 runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inferbench.timeline.series import series_of  # noqa: E402
from inferbench.timeline.steps import detect  # noqa: E402
from tests.history_sim import series_rows  # noqa: E402

TRUE = (20, 40)
WITHIN = 3


def inferbench_steps(rows: list[dict]) -> list[int]:
    """The runs (indices in the whole series) at which inferbench reports a step."""
    series = series_of(rows)[0]
    kept = series.kept
    index = {id(p.row): i for i, p in enumerate(series.points)}
    return [index[id(kept[s.index].row)] for s in detect(series).steps]


def previous_point(rows: list[dict], pct: float = 5.0) -> list[int]:
    """A step wherever a valid run differs from the valid run before it by more than ``pct`` percent."""
    valid = [(i, r["p50_ms"]) for i, r in enumerate(rows) if not r["busy"]]
    return [i for (_, a), (i, b) in zip(valid, valid[1:]) if abs(math.log(b / a)) > math.log1p(pct / 100)]


def fixed_threshold(rows: list[dict], pct: float = 10.0, window: int = 5) -> list[int]:
    """A step wherever a valid run differs from the mean of the ``window`` valid runs before it by more than
    ``pct`` percent (a window baseline with a threshold, as the code-benchmark trackers offer)."""
    valid = [(i, math.log(r["p50_ms"])) for i, r in enumerate(rows) if not r["busy"]]
    out = []
    for k in range(window, len(valid)):
        base = sum(v for _, v in valid[k - window:k]) / window
        if abs(valid[k][1] - base) > math.log1p(pct / 100):
            out.append(valid[k][0])
    return out


def score(found: list[int], truth: tuple[int, ...]) -> tuple[int, int]:
    """(true steps found within WITHIN runs, false reports)."""
    hit = {t for t in truth if any(abs(f - t) <= WITHIN for f in found)}
    false = [f for f in found if not any(abs(f - t) <= WITHIN for t in truth)]
    return len(hit), len(false)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--series", type=int, default=200, help="simulated series per case (default 200)")
    p.add_argument("--out", type=Path, default=None, help="write results.json and README.md here")
    args = p.parse_args(argv)
    rules = {"inferbench": inferbench_steps, "previous point > 5%": previous_point,
             "window of 5, > 10%": fixed_threshold}
    cases = {"two 10% steps": {t: 1.10 for t in TRUE}, "no step": {}}
    results: dict[str, dict[str, dict[str, float]]] = {}
    for case, steps in cases.items():
        truth = tuple(steps)
        for name, rule in rules.items():
            both = hits = false = 0
            for seed in range(args.series):
                rows = series_rows(60, steps, seed=10_000 * (len(steps) + 1) + seed)
                h, f = score(rule(rows), truth)
                both += h == len(truth) and bool(truth)
                hits, false = hits + h, false + f
            results.setdefault(case, {})[name] = {
                "both_found_share": both / args.series if truth else None,
                "steps_found_share": hits / (len(truth) * args.series) if truth else None,
                "false_steps_per_100_runs": 100 * false / (60 * args.series)}
    lines = ["| series | rule | both steps found (within 3 runs) | false steps per 100 runs |", "|---|---|---|---|"]
    for case, by_rule in results.items():
        for name, r in by_rule.items():
            both = "—" if r["both_found_share"] is None else f"{100 * r['both_found_share']:.0f}%"
            lines.append(f"| {case} | {name} | {both} | {r['false_steps_per_100_runs']:.2f} |")
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps({"series": args.series, "runs": 60, "true_steps": TRUE,
                                                           "within_runs": WITHIN, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
