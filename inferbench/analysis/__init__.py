"""Analysis of result records: pandas in, tables and matplotlib figures out.

Used by ``python -m inferbench.report`` and by the notebooks; no analysis lives only in a notebook.
Records that failed parity are kept and shown as such, never ranked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import UsageError
from ..ranking import verdict
from ..results import ENERGY_J_PER_INF, load, tidy

XLA_STEPS = {  # family -> (eager, graph, xla)
    "keras": ("keras-eager", "keras", "kerasxla"),
    "tf": ("keras-eager", "tf", "tfxla"),
}


def ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"]


#: One identity per record (``framework`` here is the display name: key, precision and variant; the thread
#: count is a run-level setting that changes what is measured, so it is part of it too).
CELL_KEY = ["device_name", "host", "threads", "cell", "batch_size", "framework", "scenario"]


def latest(df: pd.DataFrame) -> pd.DataFrame:
    """One record per device, host, cell, batch size and framework: the most recent run.

    Repeated runs (a default run and a sweep over the same cell, say) stay in the frame for tables
    and plots; comparisons and rankings use the latest one.
    """
    return df.sort_values("created_at").groupby(CELL_KEY, dropna=False).tail(1)


def compare(df: pd.DataFrame, a: str, b: str, **where: Any) -> str:
    """"A is 2.4x the speed of B [95% CI]" or "no significant difference", from the raw samples."""
    sel = latest(ok(df))
    for key, value in where.items():
        sel = sel[sel[key] == value]
    rows = {fw: sel[sel["framework"] == fw] for fw in (a, b)}
    for fw, rows_fw in rows.items():
        if len(rows_fw) != 1:
            raise UsageError(f"need exactly one record of {fw} for {where or 'this selection'}, found {len(rows_fw)}")
    ra, rb = rows[a].iloc[0], rows[b].iloc[0]
    for r, fw in ((ra, a), (rb, b)):
        if r["parity.status"] == "failed":
            return f"{fw} failed parity: not compared"
    return verdict(a, ra, b, rb)


def xla_decomposition(df: pd.DataFrame) -> pd.DataFrame:
    """Eager -> graph -> XLA speedups per model, resolution, batch size and device (p50 latency ratios).

    The seeds compared XLA with *eager* execution and called it "XLA off"; here the graph step and
    the XLA step are separate columns, so the part of the gain that is just leaving eager mode shows.
    """
    rows = []
    good = latest(df[df["ranked"]])
    for (device, cell, bs), g in good.groupby(["device_name", "cell", "batch_size"]):
        p50 = dict(zip(g["framework"], g["p50_ms"]))
        for family, (eager, graph, xla) in XLA_STEPS.items():
            if not {eager, graph, xla} <= set(p50):
                continue
            rows.append({
                "device_name": device, "cell": cell, "batch_size": bs, "path": family,
                "eager_ms": p50[eager], "graph_ms": p50[graph], "xla_ms": p50[xla],
                "graph_vs_eager": p50[eager] / p50[graph], "xla_vs_graph": p50[graph] / p50[xla],
                "xla_vs_eager": p50[eager] / p50[xla],
            })
    return pd.DataFrame(rows)


def pareto_front(df: pd.DataFrame, x: str = "p50_ms", y: str = "throughput", minimize_x: bool = True) -> pd.DataFrame:
    """Ranked records not dominated on (x, y): lower x (latency) and higher y (throughput) are better."""
    good = df[df["ranked"] & df[x].notna() & df[y].notna()]
    keep = []
    for i, row in good.iterrows():
        better_x = good[x] <= row[x] if minimize_x else good[x] >= row[x]
        strictly = (good[x] < row[x] if minimize_x else good[x] > row[x]) | (good[y] > row[y])
        if not (better_x & (good[y] >= row[y]) & strictly).any():
            keep.append(i)
    return good.loc[keep].sort_values(x)


#: A ranking compares only like with like: one model, resolution, batch size and precision on one device.
GROUP = ["device_name", "model", "resolution", "batch_size", "precision"]
#: A latency/throughput frontier spans the batch sizes of one model, resolution and precision on one device.
FRONTIER_GROUP = ["device_name", "model", "resolution", "precision"]


def podiums(df: pd.DataFrame, top: int = 3) -> dict[str, pd.DataFrame]:
    """Per device, model, resolution, batch size and precision (:data:`GROUP`): the fastest frameworks
    (throughput), the largest XLA gains, the most inferences per joule; verified cells only."""
    good = latest(df[df["ranked"]])

    def top_of(frame: pd.DataFrame, metric: str, keys: list[str]) -> pd.DataFrame:
        best = frame.sort_values(metric, ascending=False).groupby(keys).head(top)
        return best.sort_values([*keys, metric], ascending=[True] * len(keys) + [False])

    out = {"throughput": top_of(good, "throughput", GROUP)[[*GROUP, "framework", "throughput", "p50_ms"]]}
    dec = xla_decomposition(df)
    if not dec.empty:
        out["xla_gain"] = top_of(dec, "xla_vs_graph", ["device_name", "cell", "batch_size"])
    if "inferences_per_joule" in good and good["inferences_per_joule"].notna().any():
        out["inferences_per_joule"] = top_of(good.dropna(subset=["inferences_per_joule"]), "inferences_per_joule",
                                             GROUP)[[*GROUP, "framework", "inferences_per_joule"]]
    return out


def linear_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least-squares line y = slope * x + intercept with its R²."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 2 or np.ptp(xa) == 0:
        return {"slope": float("nan"), "intercept": float("nan"), "r2": float("nan"), "n": int(xa.size)}
    slope, intercept = np.polyfit(xa, ya, 1)
    resid = ya - (slope * xa + intercept)
    ss_tot = float(((ya - ya.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "n": int(xa.size)}


def has_energy(df: pd.DataFrame) -> bool:
    return "energy.mean_power_w" in df and df["energy.mean_power_w"].notna().any()


def normalise(df: pd.DataFrame, baseline: str, column: str = "throughput") -> pd.DataFrame:
    """``column`` relative to ``baseline`` framework on the same device, cell and batch size."""
    keys = ["device_name", "cell", "batch_size"]
    if baseline not in set(df["framework"]):
        raise UsageError(f"cannot normalise to {baseline!r}: no such framework in these records "
                         f"(found: {', '.join(sorted(set(df['framework'])))})")
    df = latest(df)
    base = df[(df["framework"] == baseline) & df["ranked"]].set_index(keys)[column].rename("baseline")
    out = df.join(base, on=keys)
    out[f"{column}_vs_{baseline}"] = out[column] / out["baseline"]
    return out.drop(columns="baseline")


from .reference import load_reference  # noqa: E402  (re-exported)

__all__ = ["ENERGY_J_PER_INF", "load", "tidy", "latest", "compare", "xla_decomposition", "pareto_front", "podiums",
           "linear_fit", "normalise", "has_energy", "load_reference"]
