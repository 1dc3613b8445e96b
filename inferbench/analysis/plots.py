"""Figures for reports and notebooks. Each function takes a tidy frame and returns a matplotlib Figure
(or None when the records hold no data for it). Records that failed parity are drawn hollow and
labelled, never hidden and never ranked."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..frameworks import display_order
from . import FRONTIER_GROUP, has_energy, latest, linear_fit, ok, pareto_front, xla_decomposition


def _order(fw: str) -> int:
    """The registry's display order (``torch:bf16`` and ``torch+compile`` sort with ``torch``)."""
    return display_order(fw.split(":")[0].split("+")[0])


def _color(fw: str) -> Any:
    i = _order(fw)  # tab20's even entries are tab10's colours; the 11th framework on takes the light ones
    return plt.get_cmap("tab20")((2 * i) % 20 + (i // 10) % 2)


def _grid(n: int, width: float = 5.0, height: float = 3.8) -> tuple[Figure, np.ndarray]:
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def _panels(df: pd.DataFrame) -> list[tuple[tuple[Any, str], pd.DataFrame]]:
    return list(latest(ok(df)).groupby(["device_name", "cell"]))


def metric_vs_batch(df: pd.DataFrame, metric: str, ylabel: str, log_y: bool = False) -> Figure | None:
    """One panel per device and model@resolution, one line per framework, against batch size."""
    panels = _panels(df)
    if not panels:
        return None
    fig, axes = _grid(len(panels))
    for ax, ((device, cell), g) in zip(axes.flat, panels):
        for fw, gf in sorted(g.groupby("framework"), key=lambda kv: (_order(kv[0]), kv[0])):
            gf = gf.sort_values("batch_size")
            failed = (~gf["parity_ok"]).any()
            why = " (parity FAILED)" if (gf["parity.status"] == "failed").any() else " (unverified: own weights)"
            ax.plot(gf["batch_size"], gf[metric], marker="o", color=_color(fw),
                    linestyle="--" if failed else "-", mfc="none" if failed else _color(fw),
                    label=fw + (why if failed else ""))
        ax.set_xscale("log", base=2)
        if log_y:
            ax.set_yscale("log")
        ax.set_title(f"{cell}\n{device}", fontsize=9)
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def throughput_vs_batch(df: pd.DataFrame) -> Figure | None:
    return metric_vs_batch(df, "throughput", "samples / s")


def latency_vs_batch(df: pd.DataFrame) -> Figure | None:
    """p50 (solid markers) and p99 (crosses) latency per batch."""
    fig = metric_vs_batch(df, "p50_ms", "latency per batch, ms (p50 o, p99 x)", log_y=True)
    if fig is None:
        return None
    for ax, ((_, _), g) in zip(fig.axes, _panels(df)):
        for fw, gf in g.groupby("framework"):
            gf = gf.sort_values("batch_size")
            ax.plot(gf["batch_size"], gf["p99_ms"], marker="x", linestyle=":", color=_color(fw), alpha=0.7)
    return fig


def latency_distributions(df: pd.DataFrame, batch_size: int | None = None) -> Figure | None:
    """Box plots of the raw per-iteration latencies, one panel per device and model@resolution."""
    sel = latest(ok(df))
    if batch_size is None and not sel.empty:
        batch_size = int(sel["batch_size"].min())
    sel = sel[sel["batch_size"] == batch_size]
    panels = list(sel.groupby(["device_name", "cell"]))
    if not panels:
        return None
    fig, axes = _grid(len(panels), width=6.0)
    for ax, ((device, cell), g) in zip(axes.flat, panels):
        g = g.assign(order=g["framework"].map(_order))
        g = g.sort_values("order")
        ax.boxplot(list(g["raw_latencies_ms"]), showfliers=True, flierprops={"markersize": 2})
        ax.set_xticks(range(1, len(g) + 1))
        ax.set_xticklabels([f"{f}\nn={len(r)}" for f, r in zip(g["framework"], g["raw_latencies_ms"])],
                           rotation=45, fontsize=7, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("latency per iteration, ms")
        ax.set_title(f"{cell}, batch {batch_size}\n{device}", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def xla_steps(df: pd.DataFrame) -> Figure | None:
    """Speedups of graph over eager and XLA over graph, side by side per model@resolution and batch."""
    dec = xla_decomposition(df)
    if dec.empty:
        return None
    panels = list(dec.groupby(["device_name", "path"]))
    fig, axes = _grid(len(panels), width=max(5.0, 0.5 * dec["cell"].nunique() * dec["batch_size"].nunique()))
    for ax, ((device, path), g) in zip(axes.flat, panels):
        g = g.sort_values(["cell", "batch_size"])
        x = np.arange(len(g))
        ax.bar(x - 0.2, g["graph_vs_eager"], 0.4, label="graph vs eager")
        ax.bar(x + 0.2, g["xla_vs_graph"], 0.4, label="XLA vs graph")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(x)
        ax.set_xticklabels([f"{c}\nbs{b}" for c, b in zip(g["cell"], g["batch_size"])], rotation=45, fontsize=7,
                           ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("speedup (p50 latency ratio)")
        steps = "keras-eager → keras → kerasxla" if path == "keras" else "keras-eager → tf → tfxla"
        ax.set_title(f"{steps}\n{device}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def pareto(df: pd.DataFrame) -> Figure | None:
    """Latency vs throughput of every ranked record, one panel per device, model, resolution and precision
    (the points are its frameworks at each batch size), with that panel's Pareto frontier."""
    good = latest(df[df["ranked"]])
    if good.empty:
        return None
    panels = list(good.groupby(FRONTIER_GROUP))
    fig, axes = _grid(len(panels), width=6.0, height=4.5)
    for ax, ((device, model, res, precision), g) in zip(axes.flat, panels):
        for fw, gf in g.groupby("framework"):
            ax.scatter(gf["p50_ms"], gf["throughput"], color=_color(fw), label=fw, s=18)
        front = pareto_front(g)
        ax.plot(front["p50_ms"], front["throughput"], color="k", lw=1, label="Pareto frontier")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("p50 latency per batch, ms (lower is better)")
        ax.set_ylabel("samples / s (higher is better)")
        ax.set_title(f"{model}@{res} {precision}, {device}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def power_vs_throughput(df: pd.DataFrame, reference: pd.DataFrame | None = None) -> tuple[Figure | None, pd.DataFrame]:
    """Mean power against throughput, one panel per device, one series per framework, with a
    least-squares line and its R².

    Our records need energy fields (NVML on GPUs, RAPL on CPUs); published figures, if given, get
    their own panels marked "external", hollow markers and dashed fits. Returns the figure and the fits.
    """
    series: list[tuple[str, str, pd.DataFrame, bool]] = []  # (panel, framework, rows, external)
    if has_energy(df):
        good = df[df["ranked"] & df["energy.mean_power_w"].notna()]
        for (device, fw), g in good.groupby(["device_name", "framework"]):
            series.append((str(device), fw, g.assign(mean_power_w=g["energy.mean_power_w"]), False))
    if reference is not None and not reference.empty:
        ref = reference.dropna(subset=["mean_power_w"])
        for (device, fw), g in ref.groupby(["device_name", "framework_published"]):
            series.append((f"external: {device}", str(fw), g, True))
    if not series:
        return None, pd.DataFrame()
    panels = list(dict.fromkeys(s[0] for s in series))
    fig, axes = _grid(len(panels), width=5.0, height=4.0)
    fits = []
    for ax, panel in zip(axes.flat, panels):
        for i, (_, fw, g, external) in enumerate(s for s in series if s[0] == panel):
            fit = linear_fit(g["throughput"], g["mean_power_w"])
            fits.append({"device": panel, "framework": fw, "external": external, **fit})
            color = plt.get_cmap("tab10")(i % 10)
            ax.scatter(g["throughput"], g["mean_power_w"], s=16, edgecolors=color,
                       facecolors="none" if external else color, label=f"{fw} (R²={fit['r2']:.2f})")
            if np.isfinite(fit["slope"]):
                xs = np.linspace(g["throughput"].min(), g["throughput"].max(), 20)
                ax.plot(xs, fit["slope"] * xs + fit["intercept"], color=color, lw=0.8, ls="--" if external else "-")
        ax.set_title(panel + ("\n(published figures, not our measurements)" if panel.startswith("external") else ""),
                     fontsize=9)
        ax.set_xlabel("throughput, samples / s")
        ax.set_ylabel("mean power, W")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig, pd.DataFrame(fits)


def cross_device(df: pd.DataFrame, reference: pd.DataFrame | None = None, batch_size: int | None = None,
                 model: str = "mobilenet_v3_large", resolution: int = 224) -> Figure | None:
    """Throughput per framework on every device of the merged records; published figures beside, hollow."""
    ours = latest(df[df["ranked"] & (df["model"] == model) & (df["resolution"] == resolution)])
    ref = None
    if reference is not None:
        ref = reference[(reference["model"] == model) & (reference["resolution"] == resolution)]
    if ours.empty and (ref is None or ref.empty):
        return None
    fig, ax = plt.subplots(figsize=(10, 5))
    labels: list[str] = []
    values: list[float] = []
    colors: list[Any] = []
    hollow: list[bool] = []
    if batch_size is not None:
        ours = ours[ours["batch_size"] == batch_size]
    for _, r in ours.sort_values("throughput").groupby(["device_name", "framework"]).tail(1) \
            .sort_values(["device_name", "throughput"]).iterrows():
        labels.append(f"{r['framework']} bs{r['batch_size']}\n{r['device_name']}")
        values.append(float(r["throughput"]))
        colors.append(_color(r["framework"]))
        hollow.append(False)
    if ref is not None and not ref.empty:
        best = ref.sort_values("throughput").groupby(["device_name", "framework_published"]).tail(1)
        for _, r in best.sort_values(["device_name", "throughput"]).iterrows():
            labels.append(f"ext: {r['framework_published']} bs{r['batch_size']}\n{r['device_name']}")
            values.append(float(r["throughput"]))
            colors.append(_color(r["framework"]))
            hollow.append(True)
    x = np.arange(len(values))
    for xi, v, c, h in zip(x, values, colors, hollow):
        ax.bar(xi, v, color="none" if h else c, edgecolor=c, hatch="//" if h else None)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel("samples / s")
    ax.set_title(f"{model}@{resolution}, best batch size per framework and device: ours (filled) and published "
                 "external figures (hatched)",
                 fontsize=9)
    fig.tight_layout()
    return fig
