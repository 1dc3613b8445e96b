"""Steps in a series, found by change-point detection and kept only above the series' own noise floor.

Detection is ruptures' PELT (exact, penalised) over the kept points' log centres with a weighted squared-error cost:
each point weighs 1 / (its own standard error² + the series' between-run variance), so a run with a wide interval
moves the fit less. The between-run variance (what a re-run adds beyond a run's own interval, as in an A/A) is
measured from the series itself: half the robust variance of successive differences, less the runs' own variance;
a step changes few successive differences, so it barely moves that estimate. A change point is a step only where
the level after differs from the level before by more than the noise floor (twice the spread of one run about its
level) and by more than its own 95% interval. Each step says what changed in the environment at that point."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ruptures
from ruptures.base import BaseCost

from .series import Z95, Series, versions

MIN_POINTS = 6  # kept points a series needs before it is searched for steps
MIN_SIZE = 3  # points on each side of a step
PENALTY = 3.0  # per change point, times log(n), on standardised residuals (tuned by benchmarks/history_steps.py)
FLOOR_SPREADS = 2.0  # the noise floor, in spreads of one run about its level


@dataclass(frozen=True)
class Step:
    """A step: the first run after it, the levels before and after (medians, ms), their ratio with its 95%
    interval, and what changed in the environment between the last run before and the first after."""

    id: str  # the series and the run after the step, digested: what `history confirm ID` names
    at_run: str
    at_time: str
    index: int  # among the series' kept points: the first after the step
    before_ms: float
    after_ms: float
    ratio: float
    ratio_ci95: tuple[float, float]
    changed: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def pct(self) -> float:
        return (self.ratio - 1) * 100


@dataclass(frozen=True)
class Found:
    """What the search found in a series: its steps, its noise floor (as a ratio, e.g. 0.06 for 6%), the spread
    between runs it measured, or why it was not searched."""

    steps: list[Step]
    floor: float | None
    between_sd: float | None
    why_not: str | None = None


def detect(series: Series) -> Found:
    kept = series.kept
    if len(kept) < MIN_POINTS:
        return Found([], None, None, f"{len(kept)} comparable point(s): at least {MIN_POINTS} are needed to "
                                     "look for steps")
    y = np.array([p.log_centre for p in kept], dtype=float)
    own = np.array([p.se for p in kept], dtype=float) ** 2
    between = between_variance(y, own)
    w = 1.0 / (own + between)
    floor = FLOOR_SPREADS * math.sqrt(float(np.median(own)) + between)
    breaks = change_points(y, w)
    steps = []
    edges = [0, *breaks, len(y)]
    for i, at in enumerate(breaks):
        lo, hi = edges[i], edges[i + 2]
        step = _step(series, y, w, lo, at, hi)
        if abs(math.log(step.ratio)) > floor and not step.ratio_ci95[0] <= 1 <= step.ratio_ci95[1]:
            steps.append(step)
    return Found(steps, math.exp(floor) - 1, math.sqrt(between))


def between_variance(y: np.ndarray, own: np.ndarray) -> float:
    """The variance between runs beyond their own intervals: half the robust (MAD) variance of successive
    differences, less the runs' mean own variance; 0 where the intervals explain it all."""
    d = np.diff(y)
    mad = float(np.median(np.abs(d - np.median(d)))) * 1.4826
    return max(0.0, mad ** 2 / 2 - float(np.mean(own)))


def change_points(y: np.ndarray, w: np.ndarray) -> list[int]:
    """The change points PELT finds in ``y`` weighted by ``w`` (indices of the first point after each)."""
    algo = ruptures.Pelt(custom_cost=WeightedL2(), min_size=MIN_SIZE, jump=1).fit(np.column_stack([y, w]))
    return [int(b) for b in algo.predict(pen=PENALTY * math.log(len(y)))[:-1]]


class WeightedL2(BaseCost):  # type: ignore[misc]
    """ruptures' cost (``fit``, ``error``, ``model``, ``min_size``) for a weighted squared error: a
    segment's cost is Σ w (y − ȳ_w)², from cumulative sums."""

    model = "weighted-l2"
    min_size = MIN_SIZE

    def fit(self, signal: np.ndarray) -> WeightedL2:
        self.signal = signal  # ruptures reads its length
        y, w = signal[:, 0], signal[:, 1]
        self.sw, self.swy, self.swyy = (np.concatenate([[0.0], np.cumsum(v)]) for v in (w, w * y, w * y * y))
        return self

    def error(self, start: int, end: int) -> float:
        sw, swy = self.sw[end] - self.sw[start], self.swy[end] - self.swy[start]
        return float(self.swyy[end] - self.swyy[start] - swy * swy / sw)


def _step(series: Series, y: np.ndarray, w: np.ndarray, lo: int, at: int, hi: int) -> Step:
    kept = series.kept
    before, after = (float(np.sum(w[a:b] * y[a:b]) / np.sum(w[a:b])) for a, b in ((lo, at), (at, hi)))
    se = math.sqrt(1 / float(np.sum(w[lo:at])) + 1 / float(np.sum(w[at:hi])))
    d = after - before
    first, last = kept[at].row, kept[at - 1].row
    ident = hashlib.sha256(repr((series.key, first["run_id"])).encode()).hexdigest()[:8]
    return Step(id=ident, at_run=str(first["run_id"]), at_time=str(first["created_at"]), index=at,
                before_ms=math.exp(before), after_ms=math.exp(after), ratio=math.exp(d),
                ratio_ci95=(math.exp(d - Z95 * se), math.exp(d + Z95 * se)), changed=changed(last, first))


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """What differs between two runs' environments: versions, the GPU driver, each recorded package."""
    out = {k: [v, versions(after)[k]] for k, v in versions(before).items() if v != versions(after)[k]}
    old, new = (json.loads(r["packages"] or "{}") for r in (before, after))
    out.update({f"package {name}": [old.get(name), new.get(name)] for name in sorted({*old, *new})
                if old.get(name) != new.get(name)})
    return out
