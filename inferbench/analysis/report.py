"""The report: the records of one or several result folders as ``report.md`` with PNG figures, written as a list of
small sections (:data:`SECTIONS`), each a function of the report's :class:`Context` that returns its Markdown lines
and asks for its figures. Figures are saved only once every section is done (a bad input leaves no half-report),
each atomically.

Why one file: the sections share one :class:`Context` and read in the order the report prints them; each is a
small function, and a reader finds a section where it appears.
"""

from __future__ import annotations

import base64
import io
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..base import markdown
from ..base.errors import UsageError
from ..base.files import atomic_write_bytes, atomic_write_text, check_writable
from ..base.size import column_key
from ..records.table import busy, stability_said
from ..registry.scenarios import scenario
from ..spec import IDENTITY
from .answer import recommendation_lines
from .ranking import comparison, contenders, judged_reduced, not_judged, recommendations
from .runfiles import write_recommendation


@dataclass
class Context:
    """What every section reads (the records, the published figures if asked for) and where figures go."""

    df: Any  # the records (inferbench.records.load)
    paths: list[str]
    objective: str | None  # None: each scenario ranked by its own objective
    ref: Any = None  # published external figures (--reference)
    normalise_to: str | None = None
    norm: Any = None
    recs: list[dict[str, Any]] = field(default_factory=list)
    pending: list[tuple[str, Any]] = field(default_factory=list)  # figures, saved once the report is known good
    quick: Any = None  # the quick looks set apart from measured records (None: none, or every record is one)
    all_quick: bool = False
    history: str | None = None  # the history store whose series of these cells the report shows over time

    def figure(self, name: str, fig: Any, caption: str) -> list[str]:
        """A figure's Markdown (nothing where there was no data for it); the figure is saved later."""
        if fig is None:
            return []
        self.pending.append((name, fig))
        shown = getattr(fig, "inferbench_shown", None)
        said = caption + (f" ({shown[0]} of {shown[1]} {shown[2]}: {shown[3]}; every cell is in the tables)"
                          if shown else "")
        return [f"![{caption}]({name})", "", f"*{said}*", ""]


def recommendation(ctx: Context) -> list[str]:
    from .frames import latest

    last = latest(ctx.df)
    rows = [{**row.to_dict(), "framework": row["framework_key"]} for _, row in last.iterrows()]
    ctx.recs, lines = [], []

    def scenario_of(row: dict[str, Any]) -> str:  # records from before scenarios measured the closed loop
        return row["scenario"] if isinstance(row.get("scenario"), str) and row["scenario"] else "inference"

    for name in dict.fromkeys(map(scenario_of, rows)):  # each scenario by its own objective unless one was given
        recs = recommendations([r for r in rows if scenario_of(r) == name], ctx.objective or scenario(name).objective)
        ctx.recs += recs
        lines += recommendation_lines(recs)
    runs = sorted({str(r) for r in last["run_id"]})
    return ["## Recommendation", "", "```", *map(markdown.code, lines), "```", "",
            f"From the latest record of each cell ({len(last)} of {len(ctx.df)} records; run"
            f"{'s' if len(runs) > 1 else ''} {markdown.text(', '.join(runs))}). The margin is the runner-up's figure "
            "over the recommended one's, paired within rounds when both ran in the same run; 'within the noise' "
            "means its 95% interval contains 1. `recommendation.json` beside this report holds the same in full.", ""]


def set_apart(ctx: Context) -> list[str]:
    """The quick looks the report left out, or that it is made of nothing else (first: before any number)."""
    from .frames import MEASURED_ROUNDS

    what = f"`--quick`, or fewer than {MEASURED_ROUNDS} rounds: the zoo's one short round per cell"
    if ctx.all_quick:
        return [f"**Every record here is a quick look** ({what}): read it as orientation, not a benchmark.", ""]
    if ctx.quick is None:
        return []
    held = Counter(os.path.relpath(Path(str(s)).parent) for s in ctx.quick["_source"])
    folders = sorted(held, key=lambda f: (-held[f], f))  # the folders holding most first
    shown = ", ".join(folders[:8]) + (f" and {len(folders) - 8} more" if len(folders) > 8 else "")
    return ["## Quick looks, set apart", "",
            f"{len(ctx.quick)} records are quick looks ({what}) and are left out of every table, figure and ranking "
            f"of this report, which come from the {len(ctx.df)} measured records. Report them on their own to see "
            f"them: {markdown.text(shown)}.", ""]


def failures(ctx: Context) -> list[str]:
    df = ctx.df
    failed = df[df["status"] != "ok"]
    bad_parity = df[(df["status"] == "ok") & (df["parity.status"] == "failed")]
    if not (len(failed) or len(bad_parity)):
        return []
    md = ["## Failures (shown, never ranked)", ""]
    for _, r in failed.iterrows():
        md.append("- " + markdown.text(f"{r['cell']} {r['framework']} bs{r['batch_size']}: failed — {r['error']}"))
    for _, r in bad_parity.iterrows():
        md.append(f"- {markdown.text(str(r['cell']) + ' ' + str(r['framework']))} bs{r['batch_size']}: "
                  f"**parity failed** ({markdown.text(r['parity.reason'])})")
    md.append("")
    if "parity.blocks.errors" in bad_parity and bad_parity["parity.blocks.errors"].notna().any():
        from . import plots

        md += ctx.figure("parity_blocks.png", plots.divergence(bad_parity), "where parity failed: each block's "
                         "error against the same program computed exactly (FP64; ONNX Runtime: the same file "
                         "unoptimised), the gate dashed, the first block past it ringed")
    return md


def results(ctx: Context) -> list[str]:
    from .frames import ok

    table = ok(ctx.df).sort_values(["device_name", "cell", "batch_size", "p50_ms"])
    summary = table.assign(
        p50_ci=[f"{a:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, list) and not busy(r) else "")
                for a, ci, (_, r) in zip(table["p50_ms"], table["latency_ms.p50_ci95"], table.iterrows())],
        stability=[stability_said(r) for _, r in table.iterrows()],
        valid=[{True: "yes", False: "NO"}.get(v, "unknown") for v in table["validity.valid"]],
        rate=[f"{g:.3g}" + (f" ({p:.0%})" if p == p else "") if g == g else "-"
              for g, p in zip(table["gflop_per_s"], table["fraction_of_peak"])],
    )[["device_name", "cell", "batch_size", "framework", "parity.status", "p50_ci", "stability", "valid", "p99_ms",
       "latency_ms.n", "throughput", "rate"]].rename(columns={"p50_ci": "p50 ms [95% CI]", "latency_ms.n": "n",
                                                            "throughput": "samples/s", "parity.status": "parity",
                                                            "rate": "GFLOP/s (of peak)"})
    return ["## Results", "", "Latency is per batch (one call); percentiles are NumPy 'linear'; the interval of the "
            "median comes from the variation between rounds (records from before rounds have none); stability "
            "is about that estimate. Only cells whose outputs passed parity are ranked.", "", markdown.table(summary),
            ""]


def batch_sizes(ctx: Context) -> list[str]:
    from . import plots

    df = ctx.df
    return ["## Throughput and latency vs batch size", "",
            *ctx.figure("throughput_vs_batch.png", plots.throughput_vs_batch(df), "throughput vs batch size"),
            *ctx.figure("latency_p50_vs_batch.png", plots.latency_vs_batch(df, "p50"), "p50 latency vs batch size"),
            *ctx.figure("latency_p99_vs_batch.png", plots.latency_vs_batch(df, "p99"), "p99 latency vs batch size"),
            *ctx.figure("latency_distributions.png", plots.latency_distributions(df),
                        "latency distributions (raw samples)"),
            *ctx.figure("postprocess_share.png", plots.postprocess_share(df),
                        "the model's call and the task's post-processing after it (a detector's suppression), a batch")]


def xla_steps(ctx: Context) -> list[str]:
    from . import plots
    from .frames import xla_decomposition

    dec = xla_decomposition(ctx.df)
    if dec.empty:  # no runtime measured eager, graph and XLA here: nothing to say
        return []
    return ["## Eager → graph → XLA", "",
            "What XLA adds, apart from leaving eager mode: eager → graph and graph → XLA measured as separate steps "
            "(p50 latency ratios; > 1 means faster). An eager baseline alone would credit XLA with both.", "",
            markdown.table(dec[["device_name", "cell", "batch_size", "path", "eager_ms", "graph_ms", "xla_ms",
                                "graph_vs_eager", "xla_vs_graph", "xla_vs_eager"]]), "",
            *ctx.figure("xla_steps.png", plots.xla_steps(ctx.df), "eager→graph→XLA speedups")]


def across_models(ctx: Context) -> list[str]:
    return _across_models(ctx.df, ctx.ref, ctx.figure) if ctx.df["model"].nunique() > 1 else []


def frontier(ctx: Context) -> list[str]:
    from . import plots
    from .frames import ENERGY_J_PER_INF, FRONTIER_GROUP, latest, pareto_front, podiums

    df = ctx.df
    md = ["## Pareto frontier and podiums", "",
          *ctx.figure("pareto.png", plots.pareto(df), "latency vs throughput, Pareto frontier")]
    good = latest(df[df["ranked"]])
    with_energy = good[good[ENERGY_J_PER_INF].notna()] if ENERGY_J_PER_INF in good else good.iloc[:0]
    if not with_energy.empty:  # (no energy sensor: the answer says why once; no empty section here)
        md += ["**Energy frontier**: records no other beats on both joules per inference and throughput", ""]
        for key, g in with_energy.groupby(FRONTIER_GROUP):
            where = dict(zip(FRONTIER_GROUP, key))
            front = pareto_front(g, x=ENERGY_J_PER_INF, y="throughput")
            md += [markdown.text(f"{where['model']}@{where['resolution']}, {where['device_name']}:"), "",
                   markdown.table(front[["batch_size", "framework", ENERGY_J_PER_INF, "throughput", "p50_ms"]]), ""]
    for name, pod in podiums(df).items():
        md += [f"**Podium: {name.replace('_', ' ')}** (top 3 per device, model, resolution and batch size, every "
               "precision; verified cells only)", "", markdown.table(pod), ""]
    return md


def reduced_precision(ctx: Context) -> list[str]:
    """Each reduced-precision cell that labelled images judged: its gain over its own FP32 and the share of FP32's
    accuracy it keeps (a table and a figure); nothing where none was judged."""
    from . import plots

    rows = [{"cell": f"{rec['model']}@{rec['resolution']}", "batch_size": rec["batch_size"], "runtime": c["cell"],
             "gain over its FP32": f"{c['gain']:.2f}x" + (f" [{c['gain_ci95'][0]:.2f}-{c['gain_ci95'][1]:.2f}]"
                                                           if c.get("gain_ci95") else ""),
             "accuracy kept": f"{c['accuracy_kept']:.1%} of FP32's {c['accuracy_metric']}",
             "MLPerf's gate (99%)": c.get("accuracy_gate")} for rec, c in judged_reduced(ctx.recs)]
    if not rows:
        return []
    import pandas as pd

    return ["## Reduced precision: what it gains, what it keeps", "",
            "Each reduced-precision cell judged on labelled images (--eval-dir): its speed over its own runtime's FP32 "
            "(paired within rounds) and the share of FP32's main metric it keeps on the same images; MLPerf's gate "
            "is 99%.", "", markdown.table(pd.DataFrame(rows)), "",
            *ctx.figure("precision_tradeoff.png", plots.precision_tradeoff(ctx.recs),
                        "reduced precision: speed over its own FP32 against the accuracy it keeps")]


def roofs(ctx: Context) -> list[str]:
    """Each verified row against its machine's roofs (:mod:`inferbench.records.roofline`): the figure, then a table."""
    from . import plots
    from .frames import latest

    df = latest(ctx.df[ctx.df["ranked"]])
    if "limit" not in df or df["limit"].isna().all():
        return []
    roof = df.dropna(subset=["limit"]).iloc[0]
    md = ["## Against the machine's roofs", "",
          f"The compute roof is the peak FP32 rate measured on the machine ({roof['peak_gflops']:.0f} GFLOP/s on "
          f"{markdown.text(roof['device_name'])}), the memory roof its bandwidth measured beside it "
          f"({roof['memory_roof_gbps']:.0f} GB/s); bytes per image range from perfect fusion (the weights once per "
          "batch, the image in, the outputs out) to none (every intermediate tensor written and read once). "
          "*runtime's own count*: the share of the memory roof by the bytes the runtime says its compiled kernels "
          "move (XLA's cost analysis, inductor's kernel count plus the weights it froze; a tick on the bar in the "
          "figure). "
          "*overhead*: below a fifth of what the roofs allow; *cache*: the weights and a batch fit in the "
          "last-level cache. Method: docs/method.md.", "",
          *ctx.figure("roofline.png", plots.roofline_chart(df), "each row under its machine's compute and memory "
                      "roofs")]
    rows = df.dropna(subset=["limit"]).sort_values(["cell", "batch_size", "framework"])
    table = rows.assign(**{
        "GFLOP/s": rows["gflop_per_s"].map(lambda v: f"{v:.3g}"),
        "% compute roof": rows["compute_roof_pct"].map(lambda v: "-" if v != v or v is None else f"{v:.0f}%"),
        "% memory roof (fused–unfused)": [f"{a:.0f}–{b:.0f}%" for a, b in
                                          zip(rows["memory_roof_pct_low"], rows["memory_roof_pct_high"])],
        "runtime's own count": [f"{v:.0f}% ({str(by).split()[0]})" if v == v and v is not None else "" for v, by in
                                zip(rows["memory_roof_pct_runtime"], rows["bytes_runtime_by"])],
        "cache": rows["cache_resident"].map(lambda v: "yes" if v is True else "")})
    columns = ["cell", "framework", "batch_size", "GFLOP/s", "% compute roof", "% memory roof (fused–unfused)",
               "runtime's own count", "limit", "cache"]
    return md + [markdown.table(table[columns]), ""]


#: Pairs worth a sentence wherever both ran: the steps the scripts inferbench replaces asked about.
PAIRS = (("tfxla", "tf"), ("kerasxla", "keras"), ("onnxrt", "torch"), ("torch-inductor", "torch-native"))


def significance(ctx: Context) -> list[str]:
    from .frames import GROUP, compare, latest, ok

    md = ["## Is the difference real?", ""]
    busy_now = not_judged(row for _, row in latest(ctx.df).iterrows())
    if busy_now:  # said once, with the validity line's figure, not beside every pair
        md += [markdown.text(f"Not judged where {busy_now} (the recommendation's first line): the pairs below say "
                             "so; --allow-busy judges them anyway."), ""]
    chosen = latest(ok(ctx.df))  # what compare chooses from, chosen once: per pair, the frame's sort was most of it
    groups = dict(iter(chosen.groupby(GROUP)))
    for key, g in latest(ctx.df).groupby(GROUP):
        where = dict(zip(GROUP, key))
        ranked = contenders([row for _, row in g.iterrows()], lambda r: r["status"], lambda r: r["parity.status"],
                            lambda r: r["p50_ms"])
        names = {r["framework"] for r in ranked}
        pairs = [(ranked[0]["framework"], ranked[1]["framework"])] if len(ranked) > 1 else []
        pairs += [(x, y) for x, y in PAIRS if {x, y} <= names]
        said: set[frozenset[str]] = set()
        for a, b in pairs:
            if frozenset((a, b)) in said:  # the top two may also be a pair of the list: say it once
                continue
            said.add(frozenset((a, b)))
            md.append("- " + markdown.text(f"{where['model']}@{where['resolution']} bs{where['batch_size']} "
                                           f"on {where['device_name']}: "
                                           f"{compare(groups.get(key, chosen.iloc[:0]), a, b, **where)}"))
    return [*md, ""]


def serving(ctx: Context) -> list[str]:
    """The serving scenarios: the load each runtime serves within the bound (server), or its samples per second
    (offline), from LoadGen's tests, with the p99-against-load figure."""
    from . import plots
    from .frames import latest

    df = ctx.df
    if "serving.scenario" not in df or df["serving.scenario"].isna().all():
        return []
    served = latest(df[df["serving.scenario"].notna() & (df["status"] == "ok")])
    rows = []
    for _, r in served.iterrows():
        answer, bound = r["serving.answer"], scenario(r["serving.scenario"]).bound
        knobs = answer.get("knobs") or {}
        rows.append({"device": r["device_name"], "cell": r["cell"], "batch_size": r["batch_size"],
                     "scenario": r["serving.scenario"], "framework": r["framework"],
                     "answer": (f"{answer['max_valid_qps']:.1f} QPS at p99 ≤ {answer['bound_ms']:g} ms"
                                if bound and answer.get("found")
                                else f"no load held (INVALID down to {answer['smallest_invalid_qps']:.1f} QPS)"
                                if bound and answer.get("smallest_invalid_qps")
                                else "no VALID load" if bound
                                else f"{r['throughput']:.1f} samples/s"),
                     "bracket / 95% CI": _span(answer.get("bracket") or answer.get("qps_ci95")),
                     "configuration": f"concurrency {knobs.get('concurrency', 1)}"
                     + (f", delay {knobs['max_delay_ms']:g} ms" if knobs.get("max_delay_ms") else ""),
                     "tests": len(r["serving.steps"]), "served parity": (r.get("parity.served.status") or "-"),
                     "J/query": _number(r.get("energy.joules_per_inference"), ".4g")})
    import pandas as pd

    md = ["## Serving under load (MLPerf LoadGen)", "",
          "Each runtime under LoadGen's traffic (Poisson arrivals for the server scenario), its served outputs "
          "checked against the reference first. The server's answer is the largest load whose p99 stayed within the "
          "bound in every confirmation run (LoadGen's VALID), with the search's bracket; offline's, the samples "
          "per second of its best configuration with the interval between rounds. LoadGen's verdicts come from "
          "shortened tests: comparable between runtimes, not an MLPerf submission.", "",
          markdown.table(pd.DataFrame(rows)), ""]
    return md + ctx.figure("p99_vs_qps.png", plots.p99_vs_qps(df), "server: p99 latency against load, per runtime")


def _span(span: Any) -> str:
    """A bracket or interval as 'low–high'; '-' where either end is unknown (a server that held no load has a
    bracket of (None, smallest INVALID load): no span to show)."""
    if not span or len(span) != 2 or any(_number(v) == "-" for v in span):
        return "-"
    return f"{span[0]:.1f}–{span[1]:.1f}"


def _number(value: Any, fmt: str = ".1f") -> str:
    """A figure as text, '-' where there is none (None, NaN: no energy sensor)."""
    return "-" if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value else \
        format(value, fmt)


def energy(ctx: Context) -> list[str]:
    from . import plots
    from .frames import has_energy

    df, ref = ctx.df, ctx.ref
    if not has_energy(df) and ref is None:  # nothing to show: the answer already says why energy is missing
        return []
    md = ["## Power and energy", ""]
    if not has_energy(df):
        reasons = sorted({str(r) for r in df.get("energy.reason", []) if isinstance(r, str)})
        md += ["These records carry no energy figures" + (f" ({markdown.text('; '.join(reasons))})" if reasons else "")
               + ": energy needs NVML on an NVIDIA GPU or a readable RAPL counter on the CPU."
               + (" The figure below shows published external figures only." if ref is not None else ""), ""]
    if has_energy(df) or ref is not None:
        fig, fits = plots.power_vs_throughput(df, ref)
        md += ctx.figure("power_vs_throughput.png", fig, "power vs throughput with least-squares fits")
        if not fits.empty:
            md += [markdown.table(fits), ""]
    return md


def devices(ctx: Context) -> list[str]:
    from . import plots

    md = ["## Across devices", ""]
    if ctx.norm is not None:
        col = f"throughput_vs_{ctx.normalise_to}"
        md += [f"Throughput relative to `{ctx.normalise_to}` on the same device, cell and batch:", "",
               markdown.table(ctx.norm[["device_name", "cell", "batch_size", "framework", col]].dropna()), ""]
    same = across_machines(ctx.df)
    if same is not None:
        md += ["The same cell on each machine (speed relative to the first machine named; intervals unpaired, the "
               "between-process spread included; energy where a sensor measured it):", "", markdown.table(same), ""]
    across = plots.cross_device(ctx.df, ctx.ref)
    if across is None:  # one device and nothing published asked for: a section with nothing in it is left out
        return md if len(md) > 2 else []
    return md + ctx.figure("cross_device.png", across, "throughput across devices")


def across_machines(df: Any) -> Any:
    """One row per cell measured on more than one machine (device and host, or a Ray machine's name) and each
    machine but the first: its speed relative to the first's with the interval (unpaired), and both energies."""
    import pandas as pd

    from .frames import ok

    cells = ok(df)
    cells = cells.assign(machine=cells["device_name"])  # "<device> @ <host>" where one device is on several hosts
    key = list(IDENTITY)  # the cell's whole identity: an FP16 and an FP32 cell, a tuned and a plain one, stay apart
    rows = []
    for values, g in cells.groupby(key, dropna=False):
        g = g.sort_values(["machine", "created_at"]).drop_duplicates("machine", keep="last")
        if len(g) < 2:
            continue
        base = g.iloc[0]
        for _, other in g.iloc[1:].iterrows():
            cmp = comparison(other, base)
            ci = cmp.get("ci95")
            energy = "energy.joules_per_inference"
            where = dict(zip(key, values))
            rows.append({"cell": f"{where['model']}@{where['resolution']} bs{where['batch_size']}"
                                 + (f" ({label})" if (label := scenario(where["scenario"]).label) else ""),
                         "framework": where["framework"],
                         "machine": other["machine"], "vs": base["machine"],
                         "speed": f"{1 / cmp['ratio']:.2f}x" + (f" [{1 / ci[1]:.2f}-{1 / ci[0]:.2f}]" if ci else ""),
                         "p50 ms": f"{other['p50_ms']:.3f} vs {base['p50_ms']:.3f}",
                         "J/inference": "" if pd.isna(other.get(energy)) or pd.isna(base.get(energy))
                         else f"{other[energy]:.4g} vs {base[energy]:.4g}"})
    return pd.DataFrame(rows) if rows else None


def over_time(ctx: Context) -> list[str]:
    """The history of the report's cells (the store ``--history`` names): each series' runs over time, the steps
    found (docs/history.md)."""
    if not ctx.history:
        return []
    from ..timeline.series import series_of
    from ..timeline.steps import detect
    from ..timeline.store import opened
    from . import plots

    with opened(ctx.history) as store:
        rows = store.rows()
    key = ("model", "resolution", "batch_size", "framework", "precision", "scenario")
    cells = {tuple(map(str, r)) for r in ctx.df[[*key[:3], "framework_key", *key[4:]]].itertuples(index=False)}
    found = [(s, detect(s)) for s in series_of([r for r in rows if tuple(str(r[k]) for k in key) in cells])]
    if not any(len(s.points) >= 2 for s, _ in found):
        return []
    md = ["## Over time", "", f"The series of these cells in the history {markdown.code(ctx.history)}: one cell on one "
          "kind of machine, each run's median with its 95% interval; a step is reported only above the series' own "
          "noise floor (docs/history.md).", ""]
    md += ctx.figure("history.png", plots.history_trends(found), "median latency over time, per series")
    steps = [{"series": s.label, "step": f"{x.pct:+.1f}% [{100 * (x.ratio_ci95[0] - 1):+.1f}, "
              f"{100 * (x.ratio_ci95[1] - 1):+.1f}]", "at run": x.at_run,
              "what changed": ", ".join(f"{k} {a} → {b}" for k, (a, b) in x.changed.items()) or "no version changed"}
             for s, f in found for x in f.steps]
    import pandas as pd

    return md + ([markdown.table(pd.DataFrame(steps)), ""] if steps else ["No step found in these series.", ""])


def sources(ctx: Context) -> list[str]:
    df, ref = ctx.df, ctx.ref
    machines = df.groupby("device_name").agg(
        records=("framework", "size"), hosts=("host", lambda s: ", ".join(sorted(set(map(str, s))))),
        threads=("config.threads", lambda s: ", ".join(sorted({str(int(v)) for v in s.dropna()}))),
        first=("created_at", "min"), last=("created_at", "max"),
        commits=("environment.inferbench.commit", lambda s: ", ".join(sorted({str(v)[:8] for v in s.dropna()}))),
    ).reset_index()
    md = ["## Sources", "", f"{len(df)} records from: {markdown.text(', '.join(map(str, ctx.paths)))}", "",
          markdown.table(machines), ""]
    if ref is None:
        return md
    md += ["## Published external figures", "",
           "Not our measurements: other projects' published numbers, kept apart and labelled. Caveats:", ""]
    for source, g in ref.groupby("source"):
        notes = sorted({f"{a} = {b}" for a, b in zip(g["framework_published"], g["framework_note"]) if b})
        md.append(f"- **{markdown.text(source)}** ({len(g)} rows): {markdown.text(g['caveat'].iloc[0])}; framework "
                  "notes: " + markdown.text("; ".join(notes)))
    return [*md, ""]


#: The report, section by section, in order.
SECTIONS: tuple[Callable[[Context], list[str]], ...] = (  # the answer first; a section with nothing to say is left out
    recommendation, set_apart, failures, results, serving, batch_sizes, xla_steps, across_models, frontier,
    reduced_precision, roofs, significance, energy, devices, over_time, sources)


def title_of(df: Any) -> str:
    """What the report is about, in its first line: the model (or how many), the machine (or how many), the date of
    its latest record."""
    cells = sorted({str(c) for c in df["cell"].dropna()}) if "cell" in df else []
    machines = sorted({str(d) for d in df["device_name"].dropna()}) if "device_name" in df else []
    dates = sorted(str(c)[:10] for c in df.get("created_at", []) if isinstance(c, str))
    what = cells[0] if len(cells) == 1 else f"{len(cells)} model cells"
    where = machines[0] if len(machines) == 1 else f"{len(machines)} devices"
    return f"inferbench report: {what} on {where}" + (f", {dates[-1]}" if dates else "")


def write_report(paths: list[str], out: Path, reference_dir: str | None = None, use_reference: bool = False,
                 normalise_to: str | None = None, objective: str | None = None, history: str | None = None) -> Path:
    """``report.md``, its figures and ``recommendation.json`` in ``out``, from the records under ``paths``
    (``history``: a history store, whose series of these cells the report shows over time)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display (notebooks keep their inline backend)
    import matplotlib.pyplot as plt

    from . import plots
    from .frames import load, load_reference, normalise, ok, quick_looks

    df = load(paths)
    quick = quick_looks(df)  # quick looks are never pooled with measured records (all quick: the report says so)
    all_quick = bool(quick.all())
    set_aside = df[quick] if quick.any() and not all_quick else None
    df = df[~quick] if set_aside is not None else df
    if ok(df).empty:
        first = df["error"].dropna().astype(str).iloc[0] if df["error"].notna().any() else "no error recorded"
        among = f"{len(df)} measured records ({len(set_aside)} quick looks set apart)" if set_aside is not None \
            else f"{len(df)} records"
        raise UsageError(f"no successful measurement among the {among} (e.g. {first}): nothing to report")
    ctx = Context(df, list(paths), objective, ref=load_reference(reference_dir) if use_reference else None,
                  normalise_to=normalise_to,
                  norm=normalise(df[df["ranked"]], normalise_to) if normalise_to else None,  # an unknown one: exit 2
                  quick=set_aside, all_quick=all_quick, history=history)
    check_writable(out)  # only once the inputs are known to be good
    title = title_of(df)
    md = [f"# {markdown.text(title)}", ""]
    for section in SECTIONS:
        part = section(ctx)
        said = [line for line in part if line.strip()]
        md += [] if len(said) == 1 and said[0].startswith("#") else part  # a heading alone: left out
    for name, fig in ctx.pending:
        image = io.BytesIO()
        fig.savefig(image, format="png", dpi=plots.DPI, bbox_inches="tight")  # legends sit outside the panels
        plt.close(fig)
        atomic_write_bytes(out / name, image.getvalue())  # a full disk leaves no half-written figure
    write_recommendation(out / "recommendation.json", ctx.recs, ctx.objective or "each scenario's own")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    atomic_write_text(out / "report.html", html_report("\n".join(md), out, title))
    return path


#: The single-file report's page: the Markdown report rendered, its figures inlined (no external reference).
HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<meta name="generator" content="inferbench {{ version }}">
<style>
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1300px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 12px; width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; overflow-wrap: anywhere; }
th { background: #f3f3f3; } img { max-width: 100%; height: auto; } code { background: #f5f5f5; padding: 0 3px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f7f7f7; padding: 0.8em; }
.bad { color: #fff; background: #b00020; font-weight: bold; padding: 0 4px; }
.good { color: #fff; background: #1b7a2f; font-weight: bold; padding: 0 4px; }
.unknown { color: #222; background: #f0c000; font-weight: bold; padding: 0 4px; }
</style></head><body>
{{ body }}
</body></html>
"""


def html_report(markdown: str, folder: Path, title: str = "inferbench report") -> str:
    """``report.md`` as one self-contained HTML page: rendered with markdown-it (raw HTML in the text escaped, never
    passed through), each figure the report links inlined as a data URI, no external reference (a page to send)."""
    import jinja2
    from markdown_it import MarkdownIt
    from markupsafe import Markup


    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = renderer.parse(markdown)
    for token in tokens:
        for child in token.children or []:
            if child.type == "image":
                src = str(child.attrGet("src") or "")
                figure = (folder / src).resolve()
                if figure.parent == folder.resolve() and figure.suffix == ".png" and figure.is_file():
                    child.attrSet("src", "data:image/png;base64," + base64.b64encode(figure.read_bytes()).decode())
                else:  # a link outside the report's own figures: not fetched, not kept
                    child.attrSet("src", "")
    body = renderer.renderer.render(tokens, renderer.options, {})
    # the verdict in colour, where the answer says it (the text is escaped already: these words hold no markup)
    body = re.sub(r"(?m)^(<pre><code>)?(NOT VALID|VALID|validity not known)\b",
                  lambda m: (m.group(1) or "") + f'<span class="{VERDICT_CLASS[m.group(2)]}">{m.group(2)}</span>', body)
    page = jinja2.Environment(autoescape=True).from_string(HTML_PAGE)
    return page.render(title=title, version=__version__, body=Markup(body))


#: How each verdict is coloured in report.html.
VERDICT_CLASS = {"NOT VALID": "bad", "VALID": "good", "validity not known": "unknown"}


def _across_models(df: Any, ref: Any, figure: Any) -> list[str]:
    """keras-xla-benchmarks' XLA report across models, from these records: XLA's gain per model and resolution over
    graph mode and over eager, its podiums, the fastest models, throughput against FLOPs; and, when published
    figures were asked for, how they compare."""
    from . import frames as analysis
    from . import plots

    md = ["## Across models: XLA, podiums and the machine's limit", "",
          "keras-xla-benchmarks reported XLA's gain over *eager* execution; here the gain over "
          "graph mode (`tf` → `tfxla`, the SavedModel's serving function with and without `jit_compile`) is the "
          "headline, with its 95% interval paired within rounds, and the gain over eager (`keras-eager` → `tfxla`) "
          "is shown beside it for comparison with theirs.", ""]
    md += figure("xla_gain_by_model.png", plots.xla_gain_by_model(df),
                 "XLA's speedup per model, over graph mode and over eager")
    dec = analysis.xla_decomposition(df)
    if not dec.empty:
        tf_path = dec[dec["path"] == "tf"].sort_values(["device_name", "resolution", "batch_size", "xla_vs_graph"],
                                                      ascending=[True, True, True, False], key=column_key)
        if not tf_path.empty:
            shown = tf_path.assign(
                xla_vs_graph_ci=[f"{v:.2f}" + (f" [{c[0]:.2f}, {c[1]:.2f}]" if isinstance(c, list) else "")
                                 for v, c in zip(tf_path["xla_vs_graph"], tf_path["xla_vs_graph_ci95"])])
            faster = int((tf_path["xla_vs_graph_significant"].fillna(False) & (tf_path["xla_vs_graph"] > 1)).sum())
            slower = int((tf_path["xla_vs_graph_significant"].fillna(False) & (tf_path["xla_vs_graph"] < 1)).sum())
            md += [f"XLA over graph mode: significantly faster in {faster} and significantly slower in {slower} of "
                   f"{len(tf_path)} (model, resolution) cells; over eager it is faster in "
                   f"{int((tf_path['xla_vs_eager'] > 1).sum())}. `graph_has_xla`: Keras 3 on TensorFlow compiles "
                   "grouped convolutions with XLA even in graph mode (TensorFlow's CPU kernels lack them), so for "
                   "these models (ConvNeXt, RegNet) `tf` is partly XLA already and the step measures the rest.", "",
                   markdown.table(shown[["device_name", "model", "resolution", "batch_size", "eager_ms", "graph_ms",
                                    "xla_ms", "xla_vs_graph_ci", "xla_vs_eager", "graph_has_xla"]].rename(
                       columns={"xla_vs_graph_ci": "XLA vs graph [95% CI]", "xla_vs_eager": "XLA vs eager"})), ""]
    for name, pod in analysis.xla_podiums(df).items():
        md += [f"**Podium: {name}** (top 3 models per device, resolution and batch size; `tf` → `tfxla`)", "",
               markdown.table(pod), ""]
    fastest = analysis.fastest_models(df)
    if not fastest.empty:
        md += ["**Fastest models** per device, resolution and batch size (each on its fastest verified framework; "
               "fraction_of_peak: achieved GFLOP/s over the device's measured peak FP32 matrix-product rate)", "",
               markdown.table(fastest), ""]
    counted = df.loc[df["gflop_per_image"].notna(), "model"].nunique()
    if counted > 1:
        md += figure("throughput_vs_flops.png", plots.throughput_vs_flops(df),
                     "throughput against GFLOP per image, with the measured peak FP32 rate")
    else:
        md += [f"*FLOP counts for {'one model' if counted else 'no model'} in these records (records before schema "
               "4 have none): no throughput-against-FLOPs figure, which needs two models or more.*", ""]
    if ref is not None:
        md += _published_models(df, ref)
    return md


def _published_models(df: Any, ref: Any) -> list[str]:
    """Where these records agree and differ with keras-xla-benchmarks' published GPU figures (XLA on, batch 4)."""
    from . import frames as analysis

    published = ref[ref["source"].str.contains("keras-xla", case=False) & ref["model"].notna()][
        ["model", "resolution", "device_name", "throughput", "gflops"]]
    ours = analysis.latest(df[df["ranked"] & (df["framework"] == "tfxla")])[
        ["model", "resolution", "batch_size", "throughput", "gflop_per_image"]]
    both = ours.astype({"resolution": object}).merge(  # (a resolution may be "HxW": compared as values)
        published.astype({"resolution": object}), on=["model", "resolution"], suffixes=("", "_published"))
    if both.empty:
        return ["*Published keras-xla-benchmarks figures: none for the models and resolutions of these records.*",
                ""]
    table = both.assign(our_gflop=both["gflop_per_image"], published_gmac=both["gflops"],
                        flop_ratio=both["gflop_per_image"] / both["gflops"])[
        ["model", "resolution", "device_name", "throughput_published", "batch_size", "throughput",
         "our_gflop", "published_gmac", "flop_ratio"]].rename(columns={"device_name": "published_gpu"})
    return ["**Beside the published GPU figures** (keras-xla-benchmarks, XLA on, batch 4, external: not our "
            "measurements). Their FLOPs column counts multiply-adds, ours FLOPs (2 per multiply-add): a ratio near "
            "2 means both count the same network.", "", markdown.table(table), ""]


