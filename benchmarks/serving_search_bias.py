"""How close the server search's answer comes to the load a runtime really holds, simulated where that load is known
and is not the search's own model: a test at load q on a runtime of capacity mu is VALID when its p99,
``base * exp(sigma * Z) / (1 - q / mu)``, is within the bound, and, with probability ``hiccup``, INVALID whatever the
load (a neighbour's burst). The truth is the load where a test is VALID with probability 0.9 (found by bisection on
that formula). Two ways to answer from the same tests are scored:

- **shipped** (``inferbench.scenarios.serve``): the bracketing search, then confirmations at its largest VALID load,
  stepping down after each failure; the answer is the largest load VALID 3 tests in a row with no INVALID test at or
  below it (:func:`~inferbench.scenarios.serve.search.held`);
- **logistic** (considered, not shipped): the same search, then confirmations at the load a Firth-penalized logistic
  fit of VALID on log load puts at probability 0.9, refitted after each test (at least 3, at most 9, stopping once
  its 95% interval is within 1.3x); the answer is the fit's 0.9 load, with its delta-method interval.

Printed per noise model: the answer over the truth (10th, 50th, 90th percentile of the trials), the share with no
answer, the interval's coverage (logistic), and the tests spent. No timing: the result depends only on the seed.

    python benchmarks/serving_search_bias.py [--trials 300]

Looks inside: the server scenario's search and confirmation rule; the Python API (inferbench.api) has no such piece,
so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

import numpy as np

from inferbench.scenarios.serve.loadgen import Knobs
from inferbench.scenarios.serve.search import CONFIRM_MAX, SEARCH_PRECISION, SEARCH_STEPS, Search
from inferbench.scenarios.serve.session import Session

MODELS = [(0.05, 0.0), (0.2, 0.0), (0.5, 0.0), (0.2, 0.05), (0.5, 0.05)]  # (sigma, hiccup)


def truth(mu: float, base_over_bound: float, sigma: float, hiccup: float) -> tuple[Callable[[float], float], float]:
    def p_valid(q: float) -> float:
        return 0.0 if q >= mu else (1 - hiccup) * NormalDist().cdf(math.log((1 - q / mu) / base_over_bound) / sigma)

    lo, hi = 1e-6, mu
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_valid(mid) >= 0.9 else (lo, mid)
    return p_valid, lo


def shipped(verdict: Callable[[float], bool], start: float) -> tuple[float | None, int]:
    s = Session.__new__(Session)  # the session's own planning, counting and answer, LoadGen replaced by verdict
    s.scenario, s.steps, s.confirmed, s.in_a_row, s.failed_in_a_row = "server", [], None, 0, 0
    s.knob_grid = [Knobs(1)]
    s.searches = [Search(k, start) for k in s.knob_grid]
    for r in range(SEARCH_STEPS + CONFIRM_MAX):
        if s._settled():
            break
        knobs, target = s._plan(r)
        phase = "search" if any(not x.done for x in s.searches) else "measure"
        valid = verdict(target)
        s.steps.append({"round": r, "phase": phase, "knobs": knobs.__dict__, "target": target, "valid": valid})
        s._learn(phase, knobs, target, valid)
    found = s._held()
    return (None if found is None else found[0]), len(s.steps)


def logistic_fit(tests: list[tuple[float, bool]], p: float = 0.9) -> dict[str, Any] | None:
    """Firth-penalized logistic regression of VALID on log load; the load at probability ``p`` and its interval."""
    loads = np.array([q for q, _ in tests])
    ok = np.array([float(v) for _, v in tests])
    if not ok.any():
        return None
    if ok.all():
        return {"aim": float(loads.max()), "load": float(loads.max()), "ci95": None}
    x = np.log(loads)
    centre = float(x.mean())
    design = np.column_stack([np.ones_like(x), x - centre])
    beta = np.zeros(2)
    for _ in range(100):
        prob = 1 / (1 + np.exp(-design @ beta))
        weight = prob * (1 - prob)
        cov = np.linalg.inv(design.T @ (design * weight[:, None]))
        leverage = weight * np.einsum("ij,jk,ik->i", design, cov, design)
        step = cov @ (design.T @ (ok - prob + leverage * (0.5 - prob)))
        step *= min(1.0, 5.0 / max(float(np.abs(step).max()), 1e-300))
        beta = beta + step
        if np.abs(step).max() < 1e-9:
            break
    if beta[1] >= 0:
        return None
    prob = 1 / (1 + np.exp(-design @ beta))
    cov = np.linalg.inv(design.T @ (design * (prob * (1 - prob))[:, None]))
    where = (math.log(p / (1 - p)) - beta[0]) / beta[1]
    grad = np.array([-1 / beta[1], -where / beta[1]])
    half = 1.959964 * math.sqrt(max(float(grad @ cov @ grad), 0.0))
    aim = math.exp(centre + where)
    inside = aim >= loads.min() / SEARCH_PRECISION  # no answer below every load tried
    return {"aim": aim, "load": aim if inside else None,
            "ci95": [math.exp(centre + where - half), math.exp(centre + where + half)] if inside else None}


def logistic(verdict: Callable[[float], bool], start: float) -> tuple[float | None, int, list[float] | None]:
    search, tests = Search(Knobs(1), start), []
    while not search.done:
        q = search.next_qps
        valid = verdict(q)
        tests.append((q, valid))
        search.record(q, valid)
    if search.valid is None:
        return None, len(tests), None
    for n in range(CONFIRM_MAX):
        fit = logistic_fit(tests)
        if n >= 3 and fit and fit["ci95"] and fit["ci95"][1] / fit["ci95"][0] <= 1.3:
            break
        q = max(fit["aim"] if fit else search.valid, search.floor)
        tests.append((q, verdict(q)))
    fit = logistic_fit(tests)
    return (fit or {}).get("load"), len(tests), (fit or {}).get("ci95")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(1)
    print("sigma hiccup | shipped: answer/truth p10 p50 p90, none, tests"
          " | logistic: p10 p50 p90, none, coverage, tests")
    for sigma, hiccup in MODELS:
        p_valid, true = truth(200.0, 0.2, sigma, hiccup)
        rows: dict[str, list[Any]] = {"shipped": [], "logistic": []}
        spent = {"shipped": [], "logistic": []}
        covered = 0
        for _ in range(args.trials):
            start = 0.6 * 200.0 * rng.uniform(0.6, 1.4)  # the search starts at 60% of a single-query estimate

            def verdict(q: float, p_valid: Callable[[float], float] = p_valid) -> bool:
                return rng.random() < p_valid(q)

            answer, tests = shipped(verdict, start)
            rows["shipped"].append(answer)
            spent["shipped"].append(tests)
            answer, tests, ci = logistic(verdict, start)
            rows["logistic"].append(answer)
            spent["logistic"].append(tests)
            covered += bool(ci and ci[0] <= true <= ci[1])
        said = []
        for name, answers in rows.items():
            found = [a / true for a in answers if a]
            p10, p50, p90 = np.percentile(found, [10, 50, 90])
            said.append(f"{p10:.2f} {p50:.2f} {p90:.2f}, none {1 - len(found) / len(answers):.0%}"
                        + (f", coverage {covered / max(len(found), 1):.0%}" if name == "logistic" else "")
                        + f", {np.mean(spent[name]):.1f} tests")
        print(f"{sigma:.2f} {hiccup:.2f} | " + " | ".join(said))


if __name__ == "__main__":
    main()
