"""Tables of result records in pandas: the latest of each cell, decompositions, podiums, fronts, fits.

Used by ``python -m inferbench.report`` and by the notebooks; no analysis lives only in a notebook.
Records that failed parity are kept and shown as such, never ranked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..base.errors import UsageError
from ..base.size import column_key
from ..records.load import ENERGY_J_PER_INF, load, tidy
from ..spec import GROUP_FIELDS, IDENTITY
from .ranking import comparison, not_judged, verdict
from .reference import load_reference

XLA_STEPS = {  # family -> (eager, graph, xla)
    "keras": ("keras-eager", "keras", "kerasxla"),
    "tf": ("keras-eager", "tf", "tfxla"),
}


def ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"]


#: A record timed in fewer rounds than this (the zoo's one short round per cell) or run with --quick is a quick look:
#: a report never pools it with measured records.
MEASURED_ROUNDS = 3


def quick_looks(df: pd.DataFrame) -> pd.Series:
    """True for each record that is a quick look (:data:`MEASURED_ROUNDS`): run with --quick, or configured for fewer
    rounds than that. A record from before rounds (schema 1: one timed stretch of at least 2 s, no interval) is not
    one: it was a measurement of its day, and makes no claim without an interval anyway."""
    rounds = pd.to_numeric(df.get("config.timing.rounds", pd.Series(np.nan, index=df.index)), errors="coerce")
    quick = df.get("config.quick", pd.Series(False, index=df.index)).map(lambda v: v is True or v is np.True_)
    return (rounds < MEASURED_ROUNDS) | quick


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """The records that are not quick looks, or all of them when every one is (a quick run on its own)."""
    quick = quick_looks(df)
    return df if quick.all() else df[~quick]


#: One identity per record: the cell's (:data:`inferbench.spec.IDENTITY`) on one device of one host at one thread
#: count (a run-level setting that changes what is measured).
CELL_KEY = ["device_name", "host", "threads", *IDENTITY]


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
    """Eager -> graph -> XLA speedups per model, resolution, batch size and device (p50 latency ratios, > 1 is
    faster), with the 95% interval of the XLA steps, paired within rounds where the cells were interleaved.

    The seeds compared XLA with *eager* execution and called it "XLA off"; here the graph step and
    the XLA step are separate columns, so the part of the gain that is just leaving eager mode shows.
    ``xla_vs_graph_significant`` is False where the interval contains 1.
    """
    rows = []
    good = latest(df[df["ranked"]])
    others = [k for k in IDENTITY if k not in ("model", "resolution", "batch_size", "framework")]
    for (device, model, res, bs, *_), g in good.groupby(["device_name", "model", "resolution", "batch_size",
                                                         *others]):  # the identity but the framework
        by = {r["framework"]: r for _, r in g.iterrows()}
        for family, (eager, graph, xla) in XLA_STEPS.items():
            if not {eager, graph, xla} <= set(by):
                continue
            p50 = {k: by[k]["p50_ms"] for k in (eager, graph, xla)}
            row = {"device_name": device, "model": model, "resolution": res, "cell": f"{model}@{res}",
                   "batch_size": bs, "path": family, "eager_ms": p50[eager], "graph_ms": p50[graph],
                   "xla_ms": p50[xla], "graph_vs_eager": p50[eager] / p50[graph],
                   "xla_vs_graph": p50[graph] / p50[xla], "xla_vs_eager": p50[eager] / p50[xla],
                   "xla_throughput": by[xla]["throughput"], "graph_throughput": by[graph]["throughput"],
                   "eager_throughput": by[eager]["throughput"],
                   # Keras 3 on TensorFlow runs grouped convolutions through XLA even outside jit_compile
                   "graph_has_xla": bool((by[graph].get("model_stats.grouped_convolutions") or 0) > 0)}
            for base, name in ((graph, "graph"), (eager, "eager")):
                cmp = comparison(by[xla], by[base])  # XLA's latency over the baseline's: speedup = 1 / ratio
                ci = cmp["ci95"]
                row[f"xla_vs_{name}_ci95"] = [1 / ci[1], 1 / ci[0]] if ci else None
                row[f"xla_vs_{name}_significant"] = None if not_judged([by[xla], by[base]]) else cmp["significant"]
            rows.append(row)
    return pd.DataFrame(rows)


def xla_podiums(df: pd.DataFrame, path: str = "tf", top: int = 3) -> dict[str, pd.DataFrame]:
    """keras-xla-benchmarks' podiums, across models, per device, resolution and batch size, on one XLA path
    (``tf``: tf -> tfxla; ``keras``: keras -> kerasxla): the highest XLA throughput, the largest absolute
    speedup (samples/s gained over graph mode) and the largest speedup in percent (over graph mode, and
    over eager as the seed measured it). Verified cells only."""
    dec = xla_decomposition(df)
    if dec.empty or path not in set(dec["path"]):
        return {}
    dec = dec[dec["path"] == path].assign(
        gain_per_s=lambda d: d["xla_throughput"] - d["graph_throughput"],
        gain_pct=lambda d: 100 * (d["xla_vs_graph"] - 1), gain_vs_eager_pct=lambda d: 100 * (d["xla_vs_eager"] - 1))
    keys = ["device_name", "resolution", "batch_size"]
    out = {}
    for name, metric in (("XLA throughput", "xla_throughput"), ("absolute speedup over graph", "gain_per_s"),
                         ("speedup % over graph", "gain_pct"), ("speedup % over eager (the seed's)",
                                                               "gain_vs_eager_pct")):
        best = dec.sort_values(metric, ascending=False).groupby(keys).head(top)
        out[name] = best.sort_values([*keys, metric], ascending=[True] * len(keys) + [False], key=column_key)[
            [*keys, "model", metric, "xla_vs_graph_significant"]]
    return out


def fastest_models(df: pd.DataFrame, top: int = 3) -> pd.DataFrame:
    """Per device, resolution and batch size: the models (each on its fastest verified framework) with the
    highest throughput, with their GFLOP per image and achieved GFLOP/s."""
    good = latest(df[df["ranked"]])
    if good.empty:
        return good
    best = good.sort_values("throughput", ascending=False).groupby(
        ["device_name", "resolution", "batch_size", "model"]).head(1)
    best = best.sort_values("throughput", ascending=False).groupby(
        ["device_name", "resolution", "batch_size"]).head(top)
    return best.sort_values(["device_name", "resolution", "batch_size", "throughput"],
                            ascending=[True, True, True, False], key=column_key)[
        ["device_name", "resolution", "batch_size", "model", "framework", "throughput", "gflop_per_image",
         "gflop_per_s", "fraction_of_peak"]]


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


#: A ranking compares only like with like: one model, resolution, batch size and scenario on one device
#: (:data:`inferbench.spec.GROUP_FIELDS`); every precision that passed parity takes part, named in the framework.
GROUP = ["device_name", *GROUP_FIELDS]
#: A latency/throughput frontier spans the batch sizes of one group.
FRONTIER_GROUP = [k for k in GROUP if k != "batch_size"]


def podiums(df: pd.DataFrame, top: int = 3) -> dict[str, pd.DataFrame]:
    """Per device, model, resolution, batch size and scenario (:data:`GROUP`): the fastest frameworks
    (throughput), the largest XLA gains, the most inferences per joule; verified cells only."""
    good = latest(df[df["ranked"]])

    def top_of(frame: pd.DataFrame, metric: str, keys: list[str]) -> pd.DataFrame:
        best = frame.sort_values(metric, ascending=False).groupby(keys).head(top)
        return best.sort_values([*keys, metric], ascending=[True] * len(keys) + [False], key=column_key)

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



__all__ = ["ENERGY_J_PER_INF", "load", "tidy", "latest", "compare", "xla_decomposition", "xla_podiums",
           "fastest_models", "pareto_front", "podiums", "linear_fit", "normalise", "has_energy", "load_reference"]
