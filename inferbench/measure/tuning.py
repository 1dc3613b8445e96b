"""Each runtime at its best setting measured here: the decision of the tuning phase.

Vendor guides give a runtime's best-known setting for a quiet machine; on a busy one the same setting can be the
worst (measured here, paired in one process: ONNX Runtime with spinning threads took 4.3x the time of threads that
sleep; a compiled torch module on 2 threads 7x the time of 1). So before its timed rounds a cell tries a small,
documented grid of the settings that matter (each runner's ``tuning_grid``), in short interleaved rounds: every
candidate gets one block per round, in a fresh random order. :func:`choose` then keeps inferbench's own setting
(the grid's first) unless another was faster in a way the rounds can see: its per-round medians paired with the
default's give a ratio whose 95% interval lies wholly below 1 *and* whose point estimate saves at least
:data:`MIN_GAIN` (a winner picked from several candidates is otherwise favoured by chance alone). A switch is then
measured again on fresh rounds of the chosen setting and the default alone (:func:`confirm`): the rounds that picked
a winner overstate its gain (the winner's curse: a true 1.00 read 0.57-0.93), so the gain said is the fresh rounds',
and a switch they show slower than the default is undone.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .stats import MIN_ROUNDS, t975

#: A setting must save at least this share of the default's median latency to replace it.
MIN_GAIN = 0.05


@dataclass
class Candidate:
    """One setting: its load-time part (a worker of its own) and its live part (switched in the worker), and the
    median latency of each tuning round's block."""

    load: dict[str, Any]
    live: dict[str, Any]
    medians_ms: dict[int, float] = field(default_factory=dict)

    @property
    def setting(self) -> dict[str, Any]:
        return {**self.load, **self.live}

    def centre(self) -> float:
        """The geometric mean of the round medians (inf with none)."""
        values = [v for v in self.medians_ms.values() if v > 0]
        return math.exp(float(np.mean(np.log(values)))) if values else math.inf


def paired(a: Candidate, b: Candidate) -> dict[str, Any] | None:
    """A's latency over B's from the rounds both measured: geometric mean of the per-round ratios and its 95%
    t-interval; None with fewer than :data:`~inferbench.measure.stats.MIN_ROUNDS` common rounds."""
    common = sorted(set(a.medians_ms) & set(b.medians_ms))
    if len(common) < MIN_ROUNDS:
        return None
    logs = np.log([a.medians_ms[r] / b.medians_ms[r] for r in common])
    mean, se = float(logs.mean()), float(logs.std(ddof=1) / math.sqrt(logs.size))
    half = t975(len(common) - 1) * se
    return {"ratio": math.exp(mean), "ci95": [math.exp(mean - half), math.exp(mean + half)], "rounds": len(common)}


def choose(candidates: list[Candidate]) -> dict[str, Any]:
    """The setting to measure with: the fastest candidate if it beats the default (``candidates[0]``) clearly,
    else the default. Returns the decision with the whole table (each candidate against the default)."""
    default = candidates[0]
    table = []
    for c in candidates:
        cmp = None if c is default else paired(c, default)
        table.append({"setting": c.setting, "load": c.load, "live": c.live,
                      "p50_ms": None if math.isinf(c.centre()) else c.centre(), "rounds": len(c.medians_ms),
                      "vs_default": cmp})
    measured = [c for c in candidates if c.medians_ms]
    best = min(measured, key=Candidate.centre) if measured else default
    if best is default:
        why = "inferbench's own setting was the fastest"
        chosen = default
    else:
        cmp = paired(best, default)
        clear = cmp is not None and cmp["ci95"][1] < 1.0 and cmp["ratio"] <= 1.0 - MIN_GAIN
        chosen = best if clear else default
        if clear and cmp is not None:
            why = f"{cmp['ratio']:.2f}x the default's time [95% CI {cmp['ci95'][0]:.2f}-{cmp['ci95'][1]:.2f}]"
        elif cmp is None:
            why = f"fewer than {MIN_ROUNDS} tuning rounds: the default is kept"
        else:
            why = (f"the fastest, {_words(best.setting)}, was within the noise of the default ({cmp['ratio']:.2f}x "
                   f"[95% CI {cmp['ci95'][0]:.2f}-{cmp['ci95'][1]:.2f}], at least {MIN_GAIN:.0%} faster needed)")
    return {"chosen": chosen.setting, "chosen_load": chosen.load, "chosen_live": chosen.live,
            "default": default.setting, "is_default": chosen is default, "reason": why, "table": table,
            "rule": f"fastest unless within the noise: 95% paired interval below 1 and >= {MIN_GAIN:.0%} faster"}


def setting_digest(setting: dict[str, Any]) -> str:
    """A short digest of a chosen setting (its names and values): the record's ``tuning.digest``, part of the cell's
    identity as ``+env-<digest>`` is, so that ``compare`` never sets a cell tuned otherwise beside it."""
    return hashlib.sha256(json.dumps(setting, sort_keys=True, default=str).encode()).hexdigest()[:8]


def _words(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or "the default"


def confirm(decision: dict[str, Any], chosen: Candidate, default: Candidate) -> dict[str, Any]:
    """``decision`` (:func:`choose`'s, a switch) after fresh rounds of the ``chosen`` setting and the ``default``
    alone: the gain said is the fresh rounds' (never conditioned on a second test, so it stays unbiased); the switch
    is undone only where they show the chosen setting slower than the default (its interval wholly above 1)."""
    selected = decision["reason"]
    cmp = paired(chosen, default)
    out = {**decision, "selection": selected, "confirmation": cmp}
    if cmp is None:
        return {**out, "reason": f"{selected}; too few fresh rounds to measure its gain again"}
    said = f"{cmp['ratio']:.2f}x the default's time [95% CI {cmp['ci95'][0]:.2f}-{cmp['ci95'][1]:.2f}] in " \
        f"{cmp['rounds']} fresh rounds"
    if cmp["ci95"][0] > 1.0:
        return {**out, "chosen": default.setting, "chosen_load": default.load, "chosen_live": default.live,
                "is_default": True, "reason": f"{_words(chosen.setting)} was slower in fresh rounds ({said}; the "
                                              f"selection's: {selected}): the default is kept"}
    return {**out, "reason": f"{said} (the selection's rounds: {selected})"}
