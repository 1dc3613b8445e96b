"""A task's metric on labelled images beside FP32's, with intervals, and MLPerf's gate: what detection's mAP and
segmentation's mean IoU share. The images are resampled (:data:`BOOTSTRAP` times, the same resample for the cell and
for FP32, so that their difference has an interval of its own), and a reduced precision passes at
:data:`~inferbench.measure.parity.ACCURACY_GATE` of FP32's value."""

from __future__ import annotations

from collections.abc import Callable
from statistics import NormalDist
from typing import Any

import numpy as np

from ..measure.parity import ACCURACY_GATE
from ..measure.stats import Z975 as Z95

BOOTSTRAP = 200
#: A metric: (key in the block, index in what the scorer returns, its name).
Metric = tuple[str, int, str]


def draws(n: int) -> list[np.ndarray]:
    """The resamples of ``n`` images (seeded: the same for every cell of a run)."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, n, n) for _ in range(BOOTSTRAP)]


def scored(score: Callable[[Any, np.ndarray | None], list[float]], mine: Any, fp32: Any, n: int,
           metrics: tuple[Metric, ...]) -> dict[str, Any]:
    """Each metric of ``score(results, draw)`` (``draw`` None: every image) for the cell's results and FP32's, with
    95% intervals (:func:`interval`: bias-corrected percentile) and their paired difference's."""
    point = [score(mine, None), score(fp32, None)]
    boot = np.array([[score(mine, d), score(fp32, d)] for d in draws(n)])
    out: dict[str, Any] = {"images": n, "gate": ACCURACY_GATE}
    for key, i, _ in metrics:
        block: dict[str, Any] = {"value": point[0][i], "fp32": point[1][i], "difference": point[0][i] - point[1][i]}
        widened = {}
        for name, ci, values in (("value", "ci95", boot[:, 0, i]), ("fp32", "fp32_ci95", boot[:, 1, i]),
                                 ("difference", "difference_ci95", boot[:, 0, i] - boot[:, 1, i])):
            block[ci], why = interval(values, block[name])
            if why:
                widened[name] = why
        out[key] = block | ({"ci_widened": widened} if widened else {})
    return out


def interval(values: np.ndarray, point: float) -> tuple[list[float], str | None]:
    """Efron's bias-corrected percentile interval of the resamples' ``values`` about the whole set's ``point`` (mAP
    on resampled images runs high: a category absent from a resample drops out of the mean over categories): the
    percentiles moved by z0, the normal quantile of the resamples' share below the point. Where the point still lies
    outside (fewer than 2.5% of the resamples on one side of it), the interval is widened to reach it, and why is
    returned (None where it was not)."""
    below = float(np.mean(values < point) + 0.5 * np.mean(values == point))
    lo, hi = _pct(values)
    if 0 < below < 1:
        z0 = NormalDist().inv_cdf(below)
        lo, hi = (float(np.percentile(values, 100 * NormalDist().cdf(2 * z0 + z))) for z in (-Z95, Z95))
    if lo <= point <= hi:
        return [lo, hi], None
    side, share = ("above", 1 - below) if point < lo else ("below", below)
    return [min(lo, point), max(hi, point)], (f"{share:.0%} of the {BOOTSTRAP} resamples lie {side} the whole set's "
                                              "value (biased resamples): its interval widened to reach it")


def _pct(values: np.ndarray) -> list[float]:
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def say(out: dict[str, Any], key: str, name: str, short: str, other: str, other_name: str) -> None:
    """The block's sentences: ``said`` (the metric ``key`` called ``name``, with its interval, FP32's and their paired
    difference's, and the metric ``other`` beside FP32's) and ``short`` (the table's: ``short`` and the difference)."""
    main, second = out[key], out[other]
    ci, diff = main["ci95"], main["difference_ci95"]
    widened = ", widened: biased resamples" if "value" in (main.get("ci_widened") or {}) else ""
    out["said"] = (f"{name} {main['value']:.3f} [95% CI {ci[0]:.3f}-{ci[1]:.3f}{widened}] on {out['images']} labelled "
                   "images, "
                   f"FP32's {main['fp32']:.3f}: {main['difference']:+.3f} [{diff[0]:+.3f} to {diff[1]:+.3f}]; "
                   f"{other_name} {second['value']:.3f} (FP32's {second['fp32']:.3f})")
    out["short"] = f"{short} {main['value']:.3f} ({main['difference']:+.3f})"


def judged(out: dict[str, Any], key: str, name: str, precision: str, nothing: str, hint: str = "") -> dict[str, Any]:
    """The block's verdict on its main metric ``key`` (called ``name``): FP32 measured; a reduced precision passed at
    MLPerf's 99% of FP32's value, else failed; not measured where FP32's is 0 (``nothing``: what FP32 did not find;
    ``hint``: why that may be)."""
    main, n = out[key], out["images"]
    if precision == "fp32":
        return {"status": "measured", "reason": None, **out}
    if main["fp32"] <= 0:
        return {"status": "not_measured",
                "reason": f"{nothing} in the {n} images ({name} 0): nothing to hold it to{hint}", **out}
    if main["value"] >= ACCURACY_GATE * main["fp32"] - 1e-12:
        return {"status": "passed", "reason": None, **out}
    return {"status": "failed", "reason": (
        f"{name} {main['value']:.3f} against FP32's {main['fp32']:.3f} on {n} labelled images: "
        f"{main['value'] / main['fp32']:.1%} of FP32, below MLPerf's {ACCURACY_GATE:.0%}"), **out}
