"""Figures for reports and notebooks. Each function takes the frame of :func:`inferbench.records.load`
and returns a closed matplotlib Figure (shown once in a notebook, saved by the report), or None when the
records hold no data for it.

The rules every figure follows: one fixed colour and name per framework (the registry's order), the
metric and the cell in every title, legends outside the data, integer batch-size ticks, intervals from
the rounds where the records have them, no bars on a log scale (dot charts instead), a dot chart where
there is a single batch size, text no smaller than 8 pt. Records that failed parity, or whose outputs
could not be checked, are drawn hollow and labelled, never hidden and never ranked.

Why one file: every figure shares these rules and their helpers (colours, hollow markers, interval bars, the
layout of panels); one function a figure, each short.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from ..records.table import busy
from ..registry.frameworks import display_order
from ..registry.scenarios import scenario as scenario_entry
from .frames import FRONTIER_GROUP, has_energy, latest, linear_fit, ok, pareto_front, xla_decomposition
from .ranking import judged_reduced

SMALL = 8  # the smallest text in any figure, in points
#: The report saves figures at this resolution; none is taller than MAX_HEIGHT_PX there: small multiples show at most
#: MAX_PANELS panels (those with the most data; the figure says how many it left out, the report's tables hold all).
DPI = 110
MAX_HEIGHT_PX = 3000
MAX_PANELS = 12
#: A dot chart or a stacked panel shows at most this many rows (the rest: in the report's tables).
MAX_ROWS = 60
#: A least-squares line is drawn only when it explains this much of the variance, over this many points.
MIN_R2, MIN_FIT_POINTS = 0.5, 4
plt.rcParams.update({"font.size": 9, "axes.titlesize": 9, "legend.fontsize": SMALL, "xtick.labelsize": SMALL,
                     "ytick.labelsize": SMALL,
                     # names come from records: "$x$" in a model name is text, never TeX (a bad one raised on save)
                     "text.parse_math": False})


def _order(fw: str) -> int:
    """The registry's display order (``torch:bf16`` and ``torch+compile`` sort with ``torch``)."""
    return display_order(fw.split(":")[0].split("+")[0])


def _color(fw: str) -> Any:
    """The one colour of a framework, in every figure (published rows use the key they map to): its family's own hue
    (tab10's ten, then the dark shades of tab20b's and tab20c's five hue groups: 20 families apart), a variant
    (``tf+tuned``, ``torch-native+channels-last``) that hue half-way to white, never another family's colour."""
    i = _order(fw) % 20
    base = plt.get_cmap("tab10")(i) if i < 10 else plt.get_cmap("tab20b" if i < 15 else "tab20c")(4 * (i % 5))
    return tuple(c + (1 - c) * 0.5 for c in base[:3]) + (1.0,) if _variant(fw) else base


def _variant(fw: str) -> bool:
    return "+" in fw


def _style(fw: str, hollow: bool = False) -> str:
    """A line's style: dashed for an unverified framework, dash-dotted for a variant, else solid."""
    return "--" if hollow else "-." if _variant(fw) else "-"


#: A reduced precision keeps its runtime's colour and takes its own marker (``openvino`` a dot, ``openvino:bf16`` a
#: triangle), said in the legend by the name.
MARKERS = {"fp16": "s", "bf16": "^", "tf32": "D", "int8": "P"}


def _marker(fw: str) -> str:
    """The marker of a framework's display name: a reduced precision's (``torch:bf16``, or a key that names it:
    ``tensorrt-fp16``), else a dot."""
    name = fw.split("+")[0]
    return MARKERS.get(name.partition(":")[2], next((m for p, m in MARKERS.items() if name.endswith(p)), "o"))


def _few(panels: list[Any], size: Any = lambda panel: len(panel[1]), limit: int = MAX_PANELS) -> list[Any]:
    """At most ``limit`` of ``panels`` (in their order): the fullest (``size``), ties in their order (by name)."""
    if len(panels) <= limit:
        return panels
    keep = set(sorted(range(len(panels)), key=lambda i: -size(panels[i]))[:limit])
    return [p for i, p in enumerate(panels) if i in keep]


def _grid(n: int, width: float = 5.0, height: float = 3.8, of: int | None = None) -> tuple[Figure, np.ndarray]:
    """``n`` panels, three a row, each ``height`` inches at most (smaller when the rows would pass MAX_HEIGHT_PX);
    ``of``: how many panels there were before :func:`_few` chose (said on the figure)."""
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    height = min(height, (MAX_HEIGHT_PX / DPI - 0.6) / rows)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    if of is not None and of > n:
        left_out(fig, n, of, "panels")
    return fig, axes


def left_out(fig: Figure, shown: int, total: int, what: str, rule: str = "the fullest, ties in name order") -> None:
    """The figure shows ``shown`` of ``total`` panels or rows, chosen by ``rule``: said under it (and in the report's
    caption)."""
    fig.inferbench_shown = (shown, total, what, rule)  # type: ignore[attr-defined]
    fig.text(0.0, 0.0, f"{shown} of {total} {what} shown ({rule}); every cell is in the report's tables",
             fontsize=SMALL, va="top", style="italic")


def _largest_steps(g: pd.DataFrame) -> pd.DataFrame:
    """At most MAX_ROWS rows of an XLA decomposition: those whose XLA step is the largest either way."""
    return g.iloc[np.argsort(-np.abs(np.log(g["xla_vs_graph"].to_numpy(dtype=float))), kind="stable")[:MAX_ROWS]]


def _finish(fig: Figure, handles: dict[str, Any] | None = None, title: str = "") -> Figure:
    """One legend for the figure, outside the panels on the right; log axes with enough labelled ticks to read; the
    figure closed (a notebook shows the returned figure once, the report saves it)."""
    for ax in fig.axes:
        if ax.get_visible():
            _readable_log(ax)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if handles:
        handles = {**{k: v for k, v in handles.items() if k not in (UNSTABLE, NOT_VALID)},
                   **{k: handles[k] for k in (UNSTABLE, NOT_VALID) if k in handles}}  # the marks last
        fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.95),
                   frameon=False)
    plt.close(fig)
    return fig


def _readable_log(ax: Any) -> None:
    """A log axis whose view holds fewer than three labelled decade ticks (a span of 3 to 5 ms) gets four round
    values across it instead (an axis whose ticks were set, a batch-size axis, is left alone)."""
    for which, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if which.get_scale() != "log" or not isinstance(which.get_major_locator(), LogLocator):
            continue
        lo, hi = sorted(limits)
        if lo <= 0 or len([t for t in which.get_majorticklocs() if lo <= t <= hi]) >= 3:
            continue
        values = sorted({float(f"{v:.2g}") for v in np.geomspace(lo, hi, 6)[1:-1]})
        which.set_ticks(values)
        which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        which.set_minor_formatter(NullFormatter())


def _why_not_ranked(g: pd.DataFrame) -> str:
    if (g["parity.status"] == "failed").any():
        return " (parity FAILED)"
    if (g["parity.status"] == "unjudged").any():
        return " (speed only: accuracy not judged)"
    return "" if g["parity_ok"].all() else " (unverified: own weights)"


def _log(ax: Any, axis: str = "x") -> None:
    """A log axis labelled with plain numbers (1, 10, 100, or 0.1), at most a few labels."""
    getattr(ax, f"set_{axis}scale")("log")
    which = ax.xaxis if axis == "x" else ax.yaxis
    which.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=8))
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    which.set_minor_formatter(NullFormatter())


def _batch_axis(ax: Any, sizes: list[int]) -> None:
    """Batch sizes on a log2 axis, labelled with the integers measured."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(b) for b in sizes])
    ax.minorticks_off()
    ax.set_xlabel("batch size")


def _interval(g: pd.DataFrame, metric: str) -> np.ndarray | None:
    """Error bars (2 x n) from the rounds' 95% interval of the median latency; for throughput, the batch
    over that interval. None when no record has an interval."""
    cis = g.get("latency_ms.p50_ci95")
    if cis is None or not any(isinstance(c, list) for c in cis):
        return None
    cis = [None if unjudged else c for c, unjudged in zip(cis, busy_rows(g))]  # a busy cell's: not judged, not drawn
    lo = np.array([c[0] if isinstance(c, list) else np.nan for c in cis])
    hi = np.array([c[1] if isinstance(c, list) else np.nan for c in cis])
    value = g[metric].to_numpy(dtype=float)
    if metric == "throughput":  # samples/s scale as 1 / latency
        lo, hi = value * g["p50_ms"].to_numpy() / hi, value * g["p50_ms"].to_numpy() / lo
    return np.nan_to_num(np.vstack([value - lo, hi - value]), nan=0.0)


#: How a point whose estimate is unstable, or whose cell was not valid, is marked (and named in the legend), in every
#: figure that draws cells; the Pareto frontier's points have a mark of their own.
UNSTABLE = "ringed: unstable estimate (rounds disagree)"
NOT_VALID = "crossed: NOT VALID (other work during a block)"
FRONTIER = "grey hexagon: on the Pareto frontier"


def busy_rows(g: pd.DataFrame) -> np.ndarray:
    """Which rows of ``g`` the machine was too busy to judge (:func:`inferbench.records.table.busy`): no interval
    drawn, no stability ring."""
    read = [c for c in ("validity.valid", "config.allow_busy", "validity", "config") if c in g.columns]
    return np.array([busy(row) for row in g[read].to_dict("records")], dtype=bool)  # the two fields: a wide frame's
    # rows whole were 40% of a report's time


def _mark(ax: Any, x: Any, y: Any, g: pd.DataFrame, handles: dict[str, Any]) -> None:
    """Ring the points of ``g`` whose estimate is unstable and cross those whose cell was not valid."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    unstable = (g["latency_ms.stability.verdict"] == "unstable").to_numpy() & ~busy_rows(g)  # busy: not judged
    invalid = g["validity.valid"].map(lambda v: v is False or v is np.False_).to_numpy(dtype=bool)  # None: unknown
    if unstable.any():
        handles[UNSTABLE] = ax.scatter(x[unstable], y[unstable], s=110, facecolors="none", edgecolors="k",
                                       linewidths=0.8, zorder=4)
    if invalid.any():
        handles[NOT_VALID] = ax.scatter(x[invalid], y[invalid], s=70, marker="x", color="k", linewidths=1.2,
                                        zorder=5)


def _panels(df: pd.DataFrame) -> list[tuple[tuple[Any, str, str], pd.DataFrame]]:
    """A panel per device, model@resolution and scenario (a server's QPS is never a line with a call's rate)."""
    return list(latest(ok(df)).groupby(["device_name", "cell", "scenario"]))


def _where(cell: str, scenario: str) -> str:
    label = scenario_entry(scenario).label
    return f"{cell}, {label}" if label else cell


def metric_vs_batch(df: pd.DataFrame, metric: str, label: str, log_y: bool = False) -> Figure | None:
    """One panel per device and model@resolution, one line per framework against batch size, with the
    rounds' 95% intervals; a dot chart per panel when it holds a single batch size."""
    every = _panels(df)
    if not every:
        return None
    panels = _few(every)
    fig, axes = _grid(len(panels), of=len(every))
    handles: dict[str, Any] = {}
    for ax, ((device, cell, scenario), g) in zip(axes.flat, panels):
        sizes = sorted(int(b) for b in g["batch_size"].unique())
        series = sorted(g.groupby("framework"), key=lambda kv: (_order(kv[0]), kv[0]))
        if len(sizes) == 1:  # a dot chart: one row per framework, best at the top
            rows = sorted(series, key=lambda kv: float(kv[1][metric].iloc[0]), reverse=metric != "throughput")
            for y, (fw, gf) in enumerate(rows):
                hollow = not gf["parity_ok"].all()
                dot = ax.errorbar(gf[metric], [y], xerr=_interval(gf, metric), fmt=_marker(fw), color=_color(fw),
                                  mfc="white" if hollow else _color(fw), capsize=3)
                handles.setdefault(fw + _why_not_ranked(gf), dot)  # every plotted framework in the legend
                _mark(ax, gf[metric], [y] * len(gf), gf, handles)
            ax.set_yticks(range(len(rows)))
            ax.set_yticklabels([fw + _why_not_ranked(gf) for fw, gf in rows])
            ax.set_xlabel(label + f" (batch {sizes[0]})")
            if log_y:
                _log(ax, "x")
            else:  # a rate on a linear axis starts at zero: 47-61 samples/s must not read as a fourfold gap
                ax.set_xlim(left=0)
            ax.grid(alpha=0.3, axis="x")
        else:
            for fw, gf in series:
                gf = gf.sort_values("batch_size")
                hollow = not gf["parity_ok"].all()
                line = ax.errorbar(gf["batch_size"], gf[metric], yerr=_interval(gf, metric), marker=_marker(fw),
                                   color=_color(fw), linestyle=_style(fw, hollow),
                                   mfc="white" if hollow else _color(fw), capsize=2)
                handles.setdefault(fw + _why_not_ranked(gf), line)
                _mark(ax, gf["batch_size"], gf[metric], gf, handles)
            _batch_axis(ax, sizes)
            ax.set_ylabel(label)
            if log_y:
                _log(ax, "y")
            else:
                ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        ax.set_title(f"{label.split(',')[0]}: {_where(cell, scenario)}\n{device}")
    return _finish(fig, handles)


def throughput_vs_batch(df: pd.DataFrame) -> Figure | None:
    return metric_vs_batch(df, "throughput", "throughput, samples / s (higher is better)")


def latency_vs_batch(df: pd.DataFrame, percentile: str = "p50") -> Figure | None:
    """p50 (with the rounds' interval) or p99 latency per batch, each its own figure."""
    if percentile not in ("p50", "p99"):
        raise ValueError(f"percentile must be p50 or p99, got {percentile!r}")
    if percentile == "p50":
        return metric_vs_batch(df, "p50_ms", "p50 latency per batch, ms (lower is better)", log_y=True)
    plain = df.drop(columns=["latency_ms.p50_ci95"], errors="ignore")  # the interval is the median's, not p99's
    return metric_vs_batch(plain, "p99_ms", "p99 latency per batch, ms (lower is better)", log_y=True)


#: The legend's name for the centre a box plot marks: the table's p50 (the rounds' centre, starved rounds left out),
#: not the box's line (the median of every sample pooled), which a few slow rounds can pull away from it.
RANKED_CENTRE = "black diamond: the table's p50, 95% CI"


def latency_distributions(df: pd.DataFrame, batch_size: int | None = None) -> Figure | None:
    """Box plots of the raw per-iteration latencies, one panel per device and model@resolution, each with the
    table's p50 and its interval on it (:data:`RANKED_CENTRE`)."""
    sel = latest(ok(df))
    if batch_size is None and not sel.empty:
        batch_size = int(sel["batch_size"].min())
    sel = sel[sel["batch_size"] == batch_size]
    every = list(sel.groupby(["device_name", "cell", "scenario"]))
    if not every:
        return None
    panels = _few(every)
    fig, axes = _grid(len(panels), width=6.0, of=len(every))
    handles: dict[str, Any] = {}
    for ax, ((device, cell, scenario), g) in zip(axes.flat, panels):
        g = g.assign(order=g["framework"].map(_order)).sort_values("order")
        box = ax.boxplot(list(g["raw_latencies_ms"]), showfliers=True, flierprops={"markersize": 2},
                         patch_artist=True)
        for patch, fw in zip(box["boxes"], g["framework"]):
            patch.set_facecolor(_color(fw))
            patch.set_alpha(0.6)
        ax.set_xticks(range(1, len(g) + 1))
        ax.set_xticklabels([f"{f}\nn={len(r)}" for f, r in zip(g["framework"], g["raw_latencies_ms"])],
                           rotation=45, ha="right")
        _log(ax, "y")
        ax.set_ylabel("latency per iteration, ms")
        x = np.arange(1, len(g) + 1)
        handles[RANKED_CENTRE] = ax.errorbar(x + 0.32, g["p50_ms"], yerr=_interval(g, "p50_ms"), fmt="D", color="k",
                                             mec="white", ms=6, lw=1.2, capsize=3, zorder=6)  # beside its box
        _mark(ax, x + 0.32, g["p50_ms"], g, handles)
        ax.set_title(f"latency distribution: {_where(cell, scenario)}, batch {batch_size}\n{device}")
        ax.grid(alpha=0.3, axis="y")
    return _finish(fig, handles)


_STEPS = {"graph_vs_eager": ("graph vs eager", "o"), "xla_vs_graph": ("XLA vs graph", "s")}


def xla_steps(df: pd.DataFrame) -> Figure | None:
    """Speedups of graph over eager and of XLA over graph (p50 latency ratios, > 1 is faster), a dot
    chart per device and path: one row per model@resolution and batch, both steps on it."""
    dec = xla_decomposition(df)
    if dec.empty:
        return None
    every = list(dec.groupby(["device_name", "path"]))
    panels = [(key, _largest_steps(g)) for key, g in _few(every)]
    rows = max(len(g) for _, g in panels)
    fig, axes = _grid(len(panels), width=5.5, height=max(2.0, 0.3 * rows + 1.5))
    if sum(len(g) for _, g in panels) < len(dec):
        left_out(fig, sum(len(g) for _, g in panels), len(dec), "rows",
                 f"the largest XLA steps, at most {MAX_ROWS} a panel, of the {MAX_PANELS} fullest panels")
    for ax, ((device, path), g) in zip(axes.flat, panels):
        g = g.sort_values(["cell", "batch_size"], ascending=False)
        y = np.arange(len(g))
        for column, (label, marker) in _STEPS.items():
            ax.plot(g[column], y, marker, label=label, color="C0" if column == "graph_vs_eager" else "C3")
        ax.axvline(1.0, color="k", lw=0.8)
        _log(ax, "x")
        ax.set_yticks(y)
        ax.set_yticklabels([f"{c} bs{b}" for c, b in zip(g["cell"], g["batch_size"])])
        ax.set_ylim(-0.5, max(len(g), 3) - 0.5)  # a panel of one row is not stretched over the figure
        ax.set_xlabel("speedup, p50 latency ratio (log; > 1 is faster)")
        steps = "keras-eager → keras → kerasxla" if path == "keras" else "keras-eager → tf → tfxla"
        ax.set_title(f"XLA steps: {steps}\n{device}")
        ax.grid(alpha=0.3, axis="x")
    handles = {label: Line2D([], [], marker=m, ls="", color="C0" if c == "graph_vs_eager" else "C3")
               for c, (label, m) in _STEPS.items()}
    return _finish(fig, handles)


def divergence(df: pd.DataFrame) -> Figure | None:
    """Where parity failed: for each failed cell whose blocks could be read (``parity.blocks``), its error block by
    block against the same program in FP64 (ONNX Runtime: the same file unoptimised), log scale, the gate dashed and
    the first block past it ringed."""
    rows = [r for _, r in df.iterrows() if isinstance(r.get("parity.blocks.errors"), (list, tuple))]
    if not rows:
        return None
    panels = _few([(f"{r['cell']} {r['framework']} bs{r['batch_size']}", r) for r in rows], lambda p: 1)
    fig, axes = _grid(len(panels), width=5.0, height=3.2, of=len(rows))
    for ax, (title, r) in zip(axes.flat, panels):
        names, errors = list(r["parity.blocks.names"]), np.asarray(r["parity.blocks.errors"], dtype=float)
        gate = float(r["parity.blocks.threshold"])
        finite = np.isfinite(errors)
        top = 3 * max(gate, float(np.max(errors[finite])) if finite.any() else gate)  # where a non-finite one sits
        color = _color(str(r["framework"]))
        ax.plot(np.arange(len(names))[finite], np.maximum(errors[finite], 1e-12), marker=".", color=color)
        if not finite.all():
            ax.scatter(np.flatnonzero(~finite), [top] * int((~finite).sum()), marker="x", color="tab:red", zorder=4)
        ax.axhline(gate, color="k", ls="--", lw=0.8)
        ax.annotate(f"gate {gate:.2g}", (0, gate), fontsize=SMALL, xytext=(2, 3), textcoords="offset points")
        first = r.get("parity.blocks.first")
        if isinstance(first, str) and first in names:
            i = names.index(first)
            y = errors[i] if np.isfinite(errors[i]) else top
            ax.scatter([i], [y], s=90, facecolors="none", edgecolors="k", zorder=5)
            ax.annotate(f"first: {first}" + ("" if np.isfinite(errors[i]) else " (not finite)"), (i, y),
                        fontsize=SMALL, xytext=(-8, -2), textcoords="offset points", ha="right", va="top")
        _log(ax, "y")
        step = max(1, len(names) // 8)
        ax.set_xticks(range(0, len(names), step))
        ax.set_xticklabels([names[i] for i in range(0, len(names), step)], rotation=45, ha="right", fontsize=SMALL)
        against = r.get("parity.blocks.against")
        ax.set_ylabel("relative error vs the file, unoptimised" if isinstance(against, str) and "ONNX" in against
                      else "relative error vs FP64")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def pareto(df: pd.DataFrame) -> Figure | None:
    """Latency vs throughput of every ranked record, one panel per device, model, resolution and scenario
    (the points are its frameworks at each batch size), with that panel's Pareto frontier."""
    good = latest(df[df["ranked"]])
    if good.empty:
        return None
    every = list(good.groupby(FRONTIER_GROUP))
    panels = _few(every)
    fig, axes = _grid(len(panels), width=6.0, height=4.5, of=len(every))
    handles: dict[str, Any] = {}
    for ax, ((device, model, res, _scenario), g) in zip(axes.flat, panels):
        for fw, gf in sorted(g.groupby("framework"), key=lambda kv: _order(kv[0])):
            handles.setdefault(fw, ax.scatter(gf["p50_ms"], gf["throughput"], color=_color(fw), s=24, zorder=3,
                                              marker=_marker(fw)))
            _mark(ax, gf["p50_ms"], gf["throughput"], gf, handles)
            for _, r in gf.iterrows():
                ax.annotate(f"bs{r['batch_size']}", (r["p50_ms"], r["throughput"]), fontsize=SMALL,
                            xytext=(3, 3), textcoords="offset points")
        front = pareto_front(g)
        if len(front) > 1:
            handles["Pareto frontier"] = ax.plot(front["p50_ms"], front["throughput"], color="k", lw=1)[0]
        handles[FRONTIER] = ax.scatter(front["p50_ms"], front["throughput"], s=150, marker="h", facecolors="none",
                                       edgecolors="grey", linewidths=0.8, zorder=2)
        _log(ax, "x")
        _log(ax, "y")
        ax.set_xlabel("p50 latency per batch, ms (lower is better)")
        ax.set_ylabel("samples / s (higher is better)")
        ax.set_title(f"latency vs throughput: {model}@{res}\n{device}")
        ax.grid(alpha=0.3)
    return _finish(fig, handles)


def postprocess_share(df: pd.DataFrame) -> Figure | None:
    """Each verified cell's time a batch as two stacked bars: the model's call (its p50, the ranked figure) and the
    task's post-processing after it (its own phase, timed outside the call), with the share the post-processing
    takes; one panel per device, model and resolution."""
    column = "postprocess.ms_p50"
    if column not in df:
        return None
    good = latest(df[df["ranked"] & df[column].notna()])
    if good.empty:
        return None
    every = list(good.groupby(["device_name", "model", "resolution"]))
    panels = _few(every)
    fig, axes = _grid(len(panels), width=6.5, height=1.2 + 0.42 * max(len(g) for _, g in panels), of=len(every))
    handles: dict[str, Any] = {}
    for ax, ((device, model, res), g) in zip(axes.flat, panels):
        g = g.sort_values(["batch_size", "framework"], key=lambda s: s.map(_order) if s.name == "framework" else s)
        y = np.arange(len(g))[::-1]
        model_ms, post_ms = g["p50_ms"].to_numpy(dtype=float), g[column].to_numpy(dtype=float)
        handles["the model's call (p50)"] = ax.barh(y, model_ms, color="#4477aa", height=0.6)
        handles["post-processing after it (p50)"] = ax.barh(y, post_ms, left=model_ms, color="#ee7733", height=0.6)
        for yi, m, p in zip(y, model_ms, post_ms):
            ax.annotate(f"{p / (m + p):.0%} post", (m + p, yi), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=SMALL)
        ax.set_yticks(y, [f"{fw} bs{bs}" for fw, bs in zip(g["framework"], g["batch_size"])])
        ax.set_xlim(0, 1.25 * float(np.max(model_ms + post_ms)))
        ax.set_xlabel("ms a batch (lower is better)")
        ax.set_title(f"where a batch's time goes: {model}@{res}\n{device}")
        ax.grid(alpha=0.3, axis="x")
    return _finish(fig, handles)


def precision_tradeoff(recs: list[dict[str, Any]]) -> Figure | None:
    """What a reduced precision gains and what it keeps, from the recommendations (:func:`.ranking.recommendations`):
    each cell judged on labelled images, its speed over its own runtime's FP32 (paired within rounds, with its 95%
    interval) against the share of FP32's main metric it keeps on the same images (top-1, mAP, mean IoU), one panel
    per device, model and resolution; MLPerf's 99% gate dashed, as fast as FP32 dotted. Above the gate and right of
    1x: a gain that costs nothing the gate can see."""
    points: dict[tuple[Any, ...], list[tuple[dict[str, Any], int]]] = {}
    for rec, c in judged_reduced(recs):
        panel = (rec["device"], f"{rec['model']}@{rec['resolution']}")
        points.setdefault(panel, []).append((c, int(rec["batch_size"])))
    if not points:
        return None
    every = sorted(points.items(), key=lambda kv: tuple(map(str, kv[0])))
    panels = _few(every)
    fig, axes = _grid(len(panels), width=5.5, height=4.0, of=len(every))
    handles: dict[str, Any] = {}
    for ax, ((device, cell), cs) in zip(axes.flat, panels):
        for i, (c, bs) in enumerate(sorted(cs, key=lambda p: (_order(p[0]["cell"]), p[1]))):
            gain, kept, ci = float(c["gain"]), 100 * float(c["accuracy_kept"]), c.get("gain_ci95")
            err = None if ci is None else [[gain - ci[0]], [ci[1] - gain]]
            handles.setdefault(c["cell"], ax.errorbar([gain], [kept], xerr=err, color=_color(c["cell"]),
                                                      marker=_marker(c["cell"]), ms=7, capsize=3, ls="none"))
            ax.annotate(f"bs{bs}", (gain, kept), fontsize=SMALL, xytext=(4, 4 if i % 2 == 0 else -12),
                        textcoords="offset points")  # a runtime's batch sizes above and below: near gains stay apart
        handles["MLPerf's gate: 99% of FP32's"] = ax.axhline(99, color="k", ls="--", lw=0.8)
        handles["as fast as FP32"] = ax.axvline(1, color="grey", ls=":", lw=0.8)
        metrics = sorted({str(c["accuracy_metric"]) for c, _ in cs})
        ax.set_ylim(0, max(105.0, 1.08 * max(100 * float(c["accuracy_kept"]) for c, _ in cs)))  # above: a set's quirk
        _log(ax, "x")
        ax.set_xlabel("speed over its own FP32, p50 (x, higher is better)")
        ax.set_ylabel(f"{' / '.join(metrics)} kept, % of FP32's")
        ax.set_title(f"{cell}\n{device}")
        ax.grid(alpha=0.3)
    return _finish(fig, handles, title="what a reduced precision gains over its own FP32, and what it keeps")


def power_vs_throughput(df: pd.DataFrame, reference: pd.DataFrame | None = None) -> tuple[Figure | None, pd.DataFrame]:
    """Mean power against throughput, one panel per device, one series per framework; a least-squares
    line only where it means something (R² ≥ 0.5 over ≥ 4 points), its R² always in the legend.

    Our records need energy fields (NVML on GPUs, RAPL on CPUs); published figures, if given, get their own
    panels marked "external", hollow markers and dashed fits. Returns the figure and the fits.
    """
    series: list[tuple[str, str, pd.DataFrame, bool]] = []  # (panel, framework, rows, external)
    if has_energy(df):
        good = df[df["ranked"] & df["energy.mean_power_w"].notna()]
        for (device, fw), g in good.groupby(["device_name", "framework"]):
            series.append((str(device), fw, g.assign(mean_power_w=g["energy.mean_power_w"]), False))
    if reference is not None and not reference.empty:
        ref = reference.dropna(subset=["mean_power_w"])
        for (device, fw), g in ref.groupby(["device_name", "framework"]):
            series.append((f"external: {device}", str(fw), g, True))
    if not series:
        return None, pd.DataFrame()
    every = list(dict.fromkeys(s[0] for s in series))
    panels = _few(every, lambda panel: sum(len(s[2]) for s in series if s[0] == panel))
    fig, axes = _grid(len(panels), width=5.5, height=4.0, of=len(every))
    fits = []
    for ax, panel in zip(axes.flat, panels):
        for _, fw, g, external in sorted((s for s in series if s[0] == panel), key=lambda s: _order(s[1])):
            fit = linear_fit(g["throughput"], g["mean_power_w"])
            drawn = fit["n"] >= MIN_FIT_POINTS and np.isfinite(fit["r2"]) and fit["r2"] >= MIN_R2
            fits.append({"device": panel, "framework": fw, "external": external, "drawn": drawn, **fit})
            color = _color(fw)
            why = f"R²={fit['r2']:.2f}" if fit["n"] >= MIN_FIT_POINTS and np.isfinite(fit["r2"]) else \
                f"{fit['n']} point{'s' if fit['n'] != 1 else ''}"
            ax.scatter(g["throughput"], g["mean_power_w"], s=18, edgecolors=color, marker=_marker(fw),
                       facecolors="none" if external else color,
                       label=f"{fw}: {why}" + ("" if drawn else ", no line"))
            if drawn:
                xs = np.linspace(g["throughput"].min(), g["throughput"].max(), 20)
                ax.plot(xs, fit["slope"] * xs + fit["intercept"], color=color, lw=0.8, ls="--" if external else "-")
        ax.set_title(f"mean power vs throughput: {panel}"
                     + ("\n(published figures, not our measurements)" if panel.startswith("external") else ""))
        ax.set_xlabel("throughput, samples / s")
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_formatter(FuncFormatter(_thousands))
        ax.set_ylabel("mean power, W")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)  # each panel its own fits
    fig.tight_layout()
    plt.close(fig)
    return fig, pd.DataFrame(fits)


def _thousands(value: float, _pos: Any = None) -> str:
    """A tick label that stays short: 12500 -> 12.5k."""
    return f"{value / 1000:g}k" if abs(value) >= 1000 else f"{value:g}"


def cross_device(df: pd.DataFrame, reference: pd.DataFrame | None = None,
                 batch_size: int | None = None) -> Figure | None:
    """Throughput per framework and device at one model, resolution and batch size, a dot-chart panel for each such
    cell of *these records* seen on two devices or more (log scale, so dots, not bars), with published figures for
    the same cell beside them, hollow and labelled external; None when nothing spans devices. Rows at different
    batch sizes are never set side by side."""
    ours = latest(df[df["ranked"]])
    if batch_size is not None:
        ours = ours[ours["batch_size"] == batch_size]
    rows_per = []
    for (model, res, bs, scenario), g in ours.groupby(["model", "resolution", "batch_size", "scenario"]):
        best = g.sort_values("throughput").groupby(["device_name", "framework"]).tail(1)
        rows = [(f"{r['framework']}, {r['device_name']}", float(r["throughput"]), r["framework"], r)
                for _, r in best.sort_values(["device_name", "throughput"]).iterrows()]
        if reference is not None and not reference.empty and scenario_entry(scenario).closed_loop:
            ref = reference[(reference["model"] == model) & (reference["resolution"] == res)
                            & (reference["batch_size"] == bs)]
            ref = ref.sort_values("throughput").groupby(["device_name", "framework"]).tail(1)
            rows += [(f"{r['framework']}, {r['device_name']} (external)", float(r["throughput"]), r["framework"],
                      None) for _, r in ref.sort_values(["device_name", "throughput"]).iterrows()]
        if len({label.split(", ", 1)[1] for label, *_ in rows}) > 1:  # across devices: two or more
            rows_per.append(((_where(f"{model}@{res}", scenario), bs), rows))
    if not rows_per:
        return None
    total = sum(len(r) for _, r in rows_per)
    rows_per = [(key, rows[:MAX_ROWS]) for key, rows in _few(rows_per)]
    height = max(3.0, 0.22 * max(len(r) for _, r in rows_per) + 1.5)
    fig, axes = _grid(len(rows_per), width=7.5, height=height)
    if sum(len(r) for _, r in rows_per) < total:
        left_out(fig, sum(len(r) for _, r in rows_per), total, "rows",
                 f"the {MAX_PANELS} cells with the most rows, at most {MAX_ROWS} each")
    handles: dict[str, Any] = {}
    for ax, ((where, bs), rows) in zip(axes.flat, rows_per):
        y = np.arange(len(rows))[::-1]
        for yi, (_, value, fw, ours) in zip(y, rows):  # ours: the record's row (None: a published figure)
            mine = None if ours is None else ours.to_frame().T
            ax.errorbar([value], [yi], xerr=None if mine is None else _interval(mine, "throughput"),
                        fmt=_marker(fw), color=_color(fw), mfc="white" if mine is None else _color(fw), capsize=3)
            if mine is not None:  # each row its run's interval, and the marks every figure gives its cells
                _mark(ax, [value], [yi], mine, handles)
        ax.set_yticks(y)
        ax.set_yticklabels([label for label, *_ in rows])
        ax.set_ylim(-0.5, len(rows) - 0.5)
        _log(ax, "x")
        ax.set_xlabel("samples / s (log)")
        ax.set_title(f"throughput across devices: {where}, batch {bs}"
                     + ("\nfilled: these records; hollow: published external figures" if any(
                         r[3] is None for r in rows) else ""))
        ax.grid(alpha=0.3, axis="x")
    return _finish(fig, handles)


def _name_points(ax: Any, points: list[tuple[str, float, float]]) -> list[str]:
    """Names beside points, each at the first of a few offsets where it overlaps no name placed before (the
    points in the order given) and stays inside the axes; returns the names that fit nowhere (left out rather
    than drawn over another). Call it once the figure is laid out: the names take no part in the layout."""
    renderer = ax.figure.canvas.get_renderer()
    placed: list[Any] = []
    left_out = []
    offsets = [(dx, dy, "left" if dx > 0 else "right") for dy in (2, -9, 10, -17, 18, -25) for dx in (4, -4)]
    for name, x, y in points:
        for dx, dy, ha in offsets:
            text = ax.annotate(name, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=SMALL, ha=ha,
                               alpha=0.85, annotation_clip=True)
            text.set_in_layout(False)
            box = text.get_window_extent(renderer).expanded(1.02, 1.1)
            if not any(box.overlaps(other) for other in placed) and ax.bbox.contains(box.x0, box.y0) \
                    and ax.bbox.contains(box.x1, box.y1):
                placed.append(box)
                break
            text.remove()
        else:
            left_out.append(name)
    return left_out


def throughput_vs_flops(df: pd.DataFrame) -> Figure | None:
    """How close each model comes to the machine's limit: throughput against GFLOP per image (log-log), one
    panel per device and batch size, one colour per framework, each model on its fastest verified
    framework marked by name; the diagonals are constant achieved rates: the device's measured peak FP32
    rate, and 10% and 1% of it."""
    good = latest(df[df["ranked"] & df["gflop_per_image"].notna()])
    if good["model"].nunique() < 2:
        return None
    every = list(good.groupby(["device_name", "batch_size"]))
    panels = _few(every, limit=6)
    fig, axes = _grid(len(panels), width=9.0, height=7.0, of=len(every))
    handles: dict[str, Any] = {}
    for ax, ((device, bs), g) in zip(axes.flat, panels):
        for fw, gf in sorted(g.groupby("framework"), key=lambda kv: _order(kv[0])):
            handles.setdefault(fw, ax.scatter(gf["gflop_per_image"], gf["throughput"], color=_color(fw), s=18,
                                              alpha=0.8, zorder=3, marker=_marker(fw)))
            _mark(ax, gf["gflop_per_image"], gf["throughput"], gf, handles)
        peaks = pd.to_numeric(g.get("peak_gflops"), errors="coerce")  # a busy one already left out (records.load)
        achieved = pd.to_numeric(g.get("gflop_per_s"), errors="coerce").max() if "gflop_per_s" in g else np.nan
        peak = peaks.max() if not peaks.max() < achieved else np.nan  # one below a rate achieved is no peak
        x = np.geomspace(g["gflop_per_image"].min() / 1.5, g["gflop_per_image"].max() * 1.5, 50)
        if peak == peak:  # measured on this device
            for share, style in ((1.0, "-"), (0.1, "--"), (0.01, ":")):
                handles.setdefault(f"{share:.0%} of the measured peak ({peak:.0f} GFLOP/s)" if share == 1 else
                                   f"{share:.0%} of the peak", ax.plot(x, share * peak / x, style, color="grey",
                                                                       lw=0.8)[0])
        _log(ax, "x")
        _log(ax, "y")
        ax.set_xlabel("GFLOP per image (counted from the Keras graph)")
        ax.set_ylabel("samples / s (higher is better)")
        ax.set_title(f"throughput vs model size, batch {bs}, {device}\n"
                     "each model named at its fastest verified framework (where the name fits)")
        ax.grid(alpha=0.3)
        ax.set_xlim(ax.get_xlim())  # fixed before the names are placed in display space
        ax.set_ylim(ax.get_ylim())
    fig.tight_layout()  # the final layout (the names take no part in it), then the names
    for ax, (_, g) in zip(axes.flat, panels):
        best = g.sort_values("gflop_per_s", ascending=False).groupby(["model", "resolution"]).head(1)
        unnamed = _name_points(ax, [(f"{r['model']}@{r['resolution']}", r["gflop_per_image"], r["throughput"])
                                    for _, r in best.iterrows()])
        if unnamed:
            note = ax.text(0.01, 0.01, "not named (no room): " + ", ".join(unnamed), transform=ax.transAxes,
                           fontsize=SMALL, va="bottom", wrap=True)
            note.set_in_layout(False)
    return _finish(fig, handles)


def xla_gain_by_model(df: pd.DataFrame, path: str = "tf") -> Figure | None:
    """XLA's speedup per model, over graph mode (with its 95% interval, paired within rounds) and over eager
    execution (keras-xla-benchmarks' "XLA off"), a dot chart per device, batch size and resolution, stacked on one
    shared axis; > 1 is faster."""
    dec = xla_decomposition(df)
    dec = dec[dec["path"] == path] if not dec.empty else dec
    if dec.empty or dec["model"].nunique() < 2:
        return None
    every = list(dec.groupby(["device_name", "batch_size", "resolution"]))
    every = [(key, _largest_steps(g)) for key, g in every]
    panels: list[tuple[Any, Any]] = []
    room = (MAX_HEIGHT_PX / DPI - 0.5) / 0.26  # as many panels as the height allows, the fullest first
    for key, g in sorted(every, key=lambda kv: -len(kv[1])):
        if sum(max(len(x), 3) + 2.5 for _, x in panels) + max(len(g), 3) + 2.5 <= room:
            panels.append((key, g))
    panels = [p for p in every if any(p[0] == key for key, _ in panels)]
    heights = [max(len(g), 3) + 2.5 for _, g in panels]  # one column, each panel as tall as its models need
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.5, 0.26 * sum(heights) + 0.5), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    shown, total = sum(len(g) for _, g in panels), len(dec)
    if shown < total:
        left_out(fig, shown, total, "(model, batch) rows", f"the largest XLA steps, at most {MAX_ROWS} a panel, "
                 "as many panels as fit")
    steps = {"xla_vs_graph": ("XLA over graph mode (95% CI)", "o", "C3"),
             "xla_vs_eager": ("XLA over eager (the seed's 'XLA off')", "^", "C0")}
    for ax, ((device, bs, res), g) in zip(axes.flat, panels):
        g = g.sort_values("xla_vs_graph")
        y = np.arange(len(g))
        for column, (_, marker, color) in steps.items():
            err = None
            if column == "xla_vs_graph" and g["xla_vs_graph_ci95"].notna().any():
                ci = [c if isinstance(c, list) else [v, v] for c, v in zip(g["xla_vs_graph_ci95"], g[column])]
                err = np.abs(np.array(ci).T - g[column].to_numpy())
            ax.errorbar(g[column], y, xerr=err, fmt=marker, color=color, ms=4, lw=1, capsize=2)
        ax.axvline(1.0, color="k", lw=0.8)
        _log(ax, "x")
        ax.set_yticks(y)
        ax.set_yticklabels([m + ("*" if partly else "") for m, partly in zip(g["model"], g["graph_has_xla"])])
        ax.set_ylim(-0.5, len(g) - 0.5)
        ax.xaxis.set_tick_params(labelbottom=True)
        ax.set_xlabel("speedup, p50 latency ratio (log; > 1: XLA is faster)")
        graph, xla = ("tf", "tfxla") if path == "tf" else ("keras", "kerasxla")
        ax.set_title(f"XLA gain per model: {xla} vs {graph} and vs keras-eager\n{res} px, batch {bs}, {device}")
        ax.grid(alpha=0.3, axis="x")
    handles = {label: Line2D([], [], marker=m, ls="", color=c) for label, m, c in steps.values()}
    if dec["graph_has_xla"].any():
        handles["* graph mode partly XLA already\n  (grouped convolutions)"] = Line2D([], [], ls="")
    return _finish(fig, handles)


def p99_vs_qps(df: pd.DataFrame) -> Figure | None:
    """The server scenario: each LoadGen test's p99 latency against the load it was scheduled at, one line per
    runtime (its best serving configuration; VALID tests filled, INVALID hollow), the bound as a line, and each
    runtime's answer marked (as Triton's Model Analyzer draws it). One panel per device, model and batch size."""
    if "serving.scenario" not in df:
        return None
    served = df[df["serving.scenario"].map(lambda s: scenario_entry(s).bound).astype(bool) & (df["status"] == "ok")]
    if served.empty:
        return None
    every = list(served.groupby(["device_name", "cell", "batch_size"]))
    panels = _few(every)
    fig, axes = _grid(len(panels), width=6.0, height=4.2, of=len(every))
    handles: dict[str, Any] = {}
    for ax, ((device, cell, bs), g) in zip(axes.flat, panels):
        bound = None
        for _, r in sorted(g.iterrows(), key=lambda kv: _order(kv[1]["framework"])):
            answer, steps = r["serving.answer"], r["serving.steps"]
            knobs = answer.get("knobs")
            mine = sorted((s for s in steps if s["knobs"] == knobs and s.get("p99_ms")), key=lambda s: s["target"])
            color = _color(r["framework"])
            label = f"{r['framework']} ({'concurrency ' + str(knobs.get('concurrency'))})"
            targets = sorted({s["target"] for s in mine})  # a line through each load's median p99 (repeats: points)
            handles[label] = ax.plot(targets, [float(np.median([s["p99_ms"] for s in mine if s["target"] == t]))
                                               for t in targets], color=color, lw=1, alpha=0.6)[0]
            for s in mine:
                ax.scatter(s["target"], s["p99_ms"], s=22, color=color if s["valid"] else "none",
                           edgecolors=color, zorder=3)
            if answer.get("found"):
                ax.axvline(answer["max_valid_qps"], color=color, lw=1, ls=":")
            bound = answer.get("bound_ms") or bound
        if bound:
            handles[f"p99 bound ({bound:g} ms)"] = ax.axhline(bound, color="k", lw=1, ls="--")
        _log(ax, "y")  # the bound's neighbourhood readable beside a run-away queue of seconds
        ax.set_xlabel("target load (QPS, LoadGen's Poisson arrivals)")
        ax.set_ylabel("p99 latency (ms, queueing included; log)")
        ax.set_title(f"{cell} bs{bs} on {device}", fontsize=SMALL + 1)
        ax.grid(alpha=0.3)
    handles["VALID test (filled) / INVALID (hollow)"] = ax.scatter([], [], s=22, color="grey")
    handles["the answer: the largest load that held (dotted)"] = ax.plot([], [], color="grey", ls=":")[0]
    return _finish(fig, handles, "server scenario: p99 latency against load, per runtime")


def history_trends(found: list[tuple[Any, Any]]) -> Figure | None:
    """One panel per series of the history (``found``: (series, its steps) from :mod:`inferbench.timeline`): each
    run's median latency with its 95% interval in the order the runs were made, the runs kept apart from the level
    hollow (busy ones crossed; beyond the kept runs' range: a triangle at the edge), the level between steps as a
    line, and each change of the runtime's version a labelled vertical line."""
    panels = _few([(s, f) for s, f in found if len(s.points) >= 2], lambda panel: len(panel[0].points))
    if not panels:
        return None
    fig, axes = _grid(len(panels), of=sum(len(s.points) >= 2 for s, _ in found))
    handles: dict[str, Any] = {}
    for ax, (s, f) in zip(axes.flat, panels):
        _history_panel(ax, s, f, handles)
    handles["hollow: kept apart (busy, another machine speed, failed)"] = plt.Line2D(
        [], [], marker="o", ls="", mfc="none", color="0.3")
    handles["triangle: beyond the kept runs' range, drawn at the edge"] = plt.Line2D(
        [], [], marker="^", ls="", mfc="none", color="0.3")
    return _finish(fig, handles)


def _history_panel(ax: Any, s: Any, f: Any, handles: dict[str, Any]) -> None:
    color = _color(s.points[0].row["framework"])
    kept_p50 = [p.row["p50_ms"] for p in s.kept] or [p.row["p50_ms"] for p in s.points if p.row["p50_ms"]]
    bottom, top = min(kept_p50) / 1.3, max(kept_p50) * 1.3  # the kept runs' range: a busy run does not squash it
    index = {id(p): i for i, p in enumerate(s.points)}
    for i, p in enumerate(s.points):
        y, lo, hi = p.row["p50_ms"], p.row["p50_ci95_low_ms"], p.row["p50_ci95_high_ms"]
        if y is None:
            continue
        if not bottom <= y <= top:
            ax.scatter([i], [top if y > top else bottom], marker="^" if y > top else "v", s=30, color=color,
                       facecolors="none", zorder=4)
            continue
        err = None if lo is None or hi is None else [[y - max(lo, bottom)], [min(hi, top) - y]]
        ax.errorbar([i], [y], yerr=err, fmt="o", ms=4, color=color, ecolor=color, elinewidth=0.8,
                    mfc=color if p.kept else "none", alpha=1.0 if p.kept else 0.6)
        if p.apart and p.apart.startswith("NOT VALID"):
            handles[NOT_VALID] = ax.scatter([i], [y], s=50, marker="x", color="k", zorder=5)
    kept = s.kept
    edges = [0, *(x.index for x in f.steps), len(kept)]
    for a, b in zip(edges, edges[1:]):  # the level between steps: the kept runs' median there
        if b > a:
            level = float(np.median([p.row["p50_ms"] for p in kept[a:b]]))
            handles["level between the steps found (median of the kept runs)"] = ax.plot(
                [index[id(kept[a])], index[id(kept[b - 1])]], [level, level], color="k", lw=1.2)[0]
    for i, (prev, p) in enumerate(zip(s.points, s.points[1:]), 1):
        if p.row["runtime_version"] != prev.row["runtime_version"]:
            ax.axvline(i - 0.5, color="0.5", ls=":", lw=1)
            ax.annotate(str(p.row["runtime_version"]), (i - 0.5, 1.0), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize=SMALL, color="0.3")
    ax.set_ylim(bottom / 1.05, top * 1.05)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    first, last = (str(s.points[k].row["created_at"])[:10] for k in (0, -1))
    ax.set_title(s.label, fontsize=SMALL)
    ax.set_xlabel(f"run, in the order made ({first} to {last})")
    ax.set_ylabel("median latency, ms [95% CI]")


def roofline_chart(df: pd.DataFrame) -> Figure | None:
    """Each verified row under its machine's two roofs, one panel per machine and model: its achieved GFLOP/s against
    its arithmetic intensity (FLOPs per byte moved), a bar from no fusion (the most bytes) to perfect fusion (the
    fewest), its batch size beside it; the compute roof (the measured peak FP32 rate) flat, the memory roof (the
    measured bandwidth) the diagonal. Rows cached in the last-level cache hollow."""
    need = ("bytes_per_image_low", "memory_roof_gbps", "peak_gflops", "gflop_per_s")
    g = df[df["ranked"]].dropna(subset=[c for c in need if c in df]) if all(c in df for c in need) else df.iloc[:0]
    g = g[g["precision"] == "fp32"] if "precision" in g else g  # the compute roof measured is FP32's
    panels = _few([(key, part) for key, part in g.groupby(["device_name", "cell"], sort=True)])
    if not panels:
        return None
    fig, axes = _grid(len(panels), of=g.groupby(["device_name", "cell"]).ngroups)
    handles: dict[str, Any] = {}
    for ax, ((device, cell), part) in zip(axes.flat, panels):
        flops = part["gflop_per_image"].astype(float) * 1e9
        lo, hi = flops / part["bytes_per_image_high"].astype(float), flops / part["bytes_per_image_low"].astype(float)
        peak, bw = float(part["peak_gflops"].iloc[0]), float(part["memory_roof_gbps"].iloc[0])
        xs = np.geomspace(min(lo.min(), peak / bw) / 3, max(hi.max(), peak / bw) * 3, 200)
        handles["roofs: measured peak FP32 rate and memory bandwidth"] = ax.plot(
            xs, np.minimum(peak, bw * xs), color="k", lw=1.2)[0]
        for (fw, bs), row in part.groupby(["framework", "batch_size"], sort=True):
            r = row.iloc[-1]
            x0, x1 = float(lo[row.index[-1]]), float(hi[row.index[-1]])
            y, hollow = float(r["gflop_per_s"]), bool(r.get("cache_resident"))
            ax.plot([x0, x1], [y, y], color=_color(fw), lw=2, alpha=0.7)
            own = pd.to_numeric(pd.Series([r.get("bytes_per_image_runtime")]), errors="coerce").iloc[0]
            if own == own:  # the runtime's own count of the bytes its kernels move: a tick on the bar
                ax.plot([flops[row.index[-1]] / own], [y], color=_color(fw), marker="|", ms=11, mew=2, zorder=5)
                handles["tick: the runtime's own count of the bytes (XLA, inductor)"] = Line2D(
                    [], [], marker="|", ls="", color="0.3", ms=11, mew=2)
            handles[fw] = ax.scatter([np.sqrt(x0 * x1)], [y], color=_color(fw), marker=_marker(fw), s=28, zorder=4,
                                     facecolors="none" if hollow else _color(fw))
            ax.annotate(f"bs{bs}", (np.sqrt(x0 * x1), y), textcoords="offset points", xytext=(3, 3), fontsize=SMALL)
        _log(ax, "x")
        _log(ax, "y")
        ax.set_title(f"{cell} on {device}", fontsize=SMALL)
        ax.set_xlabel("FLOPs per byte moved (bar: no fusion to perfect fusion)")
        ax.set_ylabel("achieved GFLOP/s")
    handles["hollow: weights and a batch fit in the last-level cache"] = Line2D([], [], marker="o", ls="",
                                                                              mfc="none", color="0.3")
    return _finish(fig, handles)
