"""``python -m inferbench.report RESULTS... --out DIR``: a Markdown report with PNG figures.

RESULTS are result folders (or files), from one machine or several: every record carries its
hardware, so folders merge into one cross-device report. Published figures from other projects are
added as a separate, labelled external dataset (``--no-reference`` to leave them out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .cli import Parser, check_writable, guarded
from .errors import UsageError
from .ranking import contenders
from .results import atomic_write_text


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m inferbench.report", description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="result folders or files")
    p.add_argument("--out", required=True, help="folder for report.md and the figures")
    p.add_argument("--reference", default=None, help="folder of published figures (default: the bundled copy)")
    p.add_argument("--no-reference", action="store_true", help="leave published external figures out")
    p.add_argument("--normalise-to", metavar="FRAMEWORK", help="add throughput relative to this framework per device")
    return p


def _md_table(df: Any, floatfmt: str = ".3g") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            cells.append(format(v, floatfmt) if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(paths: list[str], out: Path, reference_dir: str | None = None, use_reference: bool = True,
                 normalise_to: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display (notebooks keep their inline backend)
    import matplotlib.pyplot as plt

    from . import analysis
    from .analysis import plots

    df = analysis.load(paths)
    if analysis.ok(df).empty:
        first = df["error"].dropna().astype(str).iloc[0] if df["error"].notna().any() else "no error recorded"
        raise UsageError(f"no successful measurement among the {len(df)} records (e.g. {first}): nothing to report")
    ref = analysis.load_reference(reference_dir) if use_reference else None
    check_writable(out)  # only once the inputs are known to be good
    md: list[str] = ["# inferbench report", ""]
    pending: list[tuple[str, Any]] = []  # figures are saved once the whole report is known to be good

    devices = df.groupby("device_name").agg(
        records=("framework", "size"), hosts=("host", lambda s: ", ".join(sorted(set(map(str, s))))),
        threads=("config.threads", lambda s: ", ".join(sorted({str(int(v)) for v in s.dropna()}))),
        first=("created_at", "min"), last=("created_at", "max"),
        commits=("environment.inferbench.commit", lambda s: ", ".join(sorted({str(v)[:8] for v in s.dropna()}))),
    ).reset_index()
    md += ["## Sources", "", f"{len(df)} records from: {', '.join(map(str, paths))}", "", _md_table(devices), ""]

    failed = df[df["status"] != "ok"]
    bad_parity = df[(df["status"] == "ok") & (df["parity.status"] == "failed")]
    if len(failed) or len(bad_parity):
        md += ["## Failures (shown, never ranked)", ""]
        for _, r in failed.iterrows():
            md.append(f"- {r['cell']} {r['framework']} bs{r['batch_size']}: failed — {r['error']}")
        for _, r in bad_parity.iterrows():
            md.append(f"- {r['cell']} {r['framework']} bs{r['batch_size']}: **parity failed** ({r['parity.reason']})")
        md.append("")

    table = analysis.ok(df).sort_values(["device_name", "cell", "batch_size", "p50_ms"])
    summary = table.assign(
        p50_ci=[f"{a:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, list) else "")
                for a, ci in zip(table["p50_ms"], table["latency_ms.p50_ci95"])],
        stability=table["latency_ms.stability.verdict"],
    )[["device_name", "cell", "batch_size", "framework", "parity.status", "p50_ci", "p99_ms", "latency_ms.n",
       "throughput", "stability"]].rename(columns={"p50_ci": "p50 ms [95% CI]", "latency_ms.n": "n",
                                                    "throughput": "samples/s", "parity.status": "parity"})
    md += ["## Results", "", "Latency is per batch (one call); percentiles are NumPy 'linear'; the interval of the "
           "median comes from the variation between rounds (records from before rounds have none); stability "
           "is about that estimate. Only cells whose outputs passed parity are ranked.", "", _md_table(summary), ""]

    def figure(name: str, fig: Any, caption: str) -> None:
        if fig is None:
            md.extend([f"*{caption}: no data in these records.*", ""])
            return
        pending.append((name, fig))
        md.extend([f"![{caption}]({name})", "", f"*{caption}*", ""])

    md += ["## Throughput and latency vs batch size", ""]
    figure("throughput_vs_batch.png", plots.throughput_vs_batch(df), "throughput vs batch size")
    figure("latency_vs_batch.png", plots.latency_vs_batch(df), "p50 and p99 latency vs batch size")
    figure("latency_distributions.png", plots.latency_distributions(df), "latency distributions (raw samples)")

    md += ["## Eager → graph → XLA", "",
           "The seeds compared XLA with *eager* execution; here leaving eager mode and adding XLA are separate "
           "steps (p50 latency ratios; > 1 means faster).", ""]
    dec = analysis.xla_decomposition(df)
    if not dec.empty:
        md += [_md_table(dec[["device_name", "cell", "batch_size", "path", "eager_ms", "graph_ms", "xla_ms",
                              "graph_vs_eager", "xla_vs_graph", "xla_vs_eager"]]), ""]
    figure("xla_steps.png", plots.xla_steps(df), "eager→graph→XLA speedups")

    md += ["## Pareto frontier and podiums", ""]
    figure("pareto.png", plots.pareto(df), "latency vs throughput, Pareto frontier")
    good = analysis.latest(df[df["ranked"]])
    energy_col = analysis.ENERGY_J_PER_INF
    with_energy = good[good[energy_col].notna()] if energy_col in good else good.iloc[:0]
    if with_energy.empty:
        md += ["*Energy frontier (joules per inference vs throughput): no energy fields in these records.*", ""]
    else:
        md += ["**Energy frontier**: records no other beats on both joules per inference and throughput", ""]
        for (device, model, res, precision), g in with_energy.groupby(analysis.FRONTIER_GROUP):
            front = analysis.pareto_front(g, x=energy_col, y="throughput")
            md += [f"{model}@{res} {precision}, {device}:", "",
                   _md_table(front[["batch_size", "framework", energy_col, "throughput", "p50_ms"]]), ""]
    for name, pod in analysis.podiums(df).items():
        md += [f"**Podium: {name.replace('_', ' ')}** (top 3 per device, model, resolution, batch size and "
               "precision; verified cells only)", "", _md_table(pod), ""]

    md += ["## Is the difference real?", ""]
    for (device, cell, bs, precision), g in analysis.latest(df).groupby(["device_name", "cell", "batch_size",
                                                                          "precision"]):
        ranked = contenders([row for _, row in g.iterrows()], lambda r: r["status"], lambda r: r["parity.status"],
                            lambda r: r["p50_ms"])
        pairs = [(ranked[0]["framework"], ranked[1]["framework"])] if len(ranked) > 1 else []
        pairs += [(x, y) for x, y in (("tfxla", "tf"), ("kerasxla", "keras"), ("onnxrt", "torch"),
                                      ("torch-inductor", "torch-native"))
                  if {x, y} <= {r["framework"] for r in ranked}]
        for a, b in dict.fromkeys(pairs):
            where = {"device_name": device, "cell": cell, "batch_size": bs, "precision": precision}
            md.append(f"- {cell} bs{bs} {precision} on {device}: {analysis.compare(df, a, b, **where)}")
    md.append("")

    md += ["## Power and energy", ""]
    if not analysis.has_energy(df):
        md += ["Our records here carry no energy fields (CPU runs without a readable RAPL counter; GPU runs record "
               "NVML energy). The figure shows published external figures only.", ""]
    fig, fits = plots.power_vs_throughput(df, ref)
    figure("power_vs_throughput.png", fig, "power vs throughput with least-squares fits")
    if not fits.empty:
        md += [_md_table(fits), ""]

    md += ["## Across devices", ""]
    if normalise_to:
        norm = analysis.normalise(df[df["ranked"]], normalise_to)
        col = f"throughput_vs_{normalise_to}"
        md += [f"Throughput relative to `{normalise_to}` on the same device, cell and batch:", "",
               _md_table(norm[["device_name", "cell", "batch_size", "framework", col]].dropna()), ""]
    figure("cross_device.png", plots.cross_device(df, ref), "throughput across devices")

    if ref is not None:
        md += ["## Published external figures", "",
               "Not our measurements: other projects' published numbers, kept apart and labelled. Caveats:", ""]
        for source, g in ref.groupby("source"):
            md.append(f"- **{source}** ({len(g)} rows): {g['caveat'].iloc[0]}; framework notes: "
                      + "; ".join(sorted({f'{a} = {b}' for a, b in zip(g['framework_published'], g['framework_note'])
                                          if b})))
        md.append("")
    for name, fig in pending:
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    return path


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    path = write_report(args.results, Path(args.out), args.reference, not args.no_reference, args.normalise_to)
    print(f"report: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return guarded("inferbench.report", _main, argv, "no report written")


if __name__ == "__main__":
    sys.exit(main())
