"""``inferbench zoo``: every registered model through every framework that can run here, briefly (parity plus
a short timing), and a support matrix of the outcome: ``matrix.md`` and ``matrix.csv``.

    inferbench zoo                                   # every model, each at its own resolution
    inferbench zoo --model 'efficientnet*' --resolution 96
    inferbench zoo --resume inferbench-results/zoo/zoo-20261125-090000

A zoo is a sweep (its plan in ``sweep.json``, a record per cell, resumable after any interruption) whose
cells run one at a time (``--sequential``: one framework loaded at a time, so that the biggest models fit),
with a short timing by default. Each (model, framework) pair of the matrix is one of: passed (with its
max error relative to max |reference|), failed parity (the numbers), failed (the error), unverified (a
torchvision twin on its own weights: outputs only checked to be finite and non-degenerate), speed only (INT8
without labelled images, ``--precision fp32,int8``: a column of its own per runtime), unsupported
(the reason: no torchvision twin, no weight port, a model file's format), too big here (refused before it
started: it would not fit this machine's memory) or not run here (not installed, needs a GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import __version__
from .analysis.answer import agreement_phrase
from .base import markdown
from .base.errors import UsageError
from .base.files import atomic_write_text
from .base.reading import read_json, read_text
from .cli.common import Parser, guarded, typed
from .cli.options import add_options, given
from .execution.plan import Plan
from .exporters import cache as artifact_cache
from .records.table import compute_rate, display_name, roofs, write_csv
from .registry import frameworks
from .registry.frameworks import SETS, in_set, unavailable_reason
from .registry.models import get_model
from .sweep import PLAN, PLAN_BYTES, execute_sweep

MATRIX_COLUMNS = ("model", "family", "resolution", "params", "gflop_per_image", "export_s", "framework", "status",
                  "max_rel_err", "cosine", "top1_agreement", "p50_ms", "throughput_per_s", "gflop_per_s", "limit",
                  "reason")
#: One mark per status in the Markdown matrix.
MARKS = {"passed": "✓", "failed parity": "✗", "failed": "!", "unverified": "~", "speed only": "s",
         "unsupported": "—",
         "too big here": "M", "not run here": "·", "not run yet": "?"}
#: How a memory refusal's error begins (the group's workers or the ONNX export would not fit this machine).
REFUSED = "not run:"


def build_parser(prog: str = "python -m inferbench.zoo") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Run every registered model (or those --model names or matches) through every "
               "framework that can run here: export, parity on the reference inputs and the timed batch, a short "
               "timing. Writes a support matrix (matrix.md, matrix.csv) beside the records; resumable like a sweep.",
               examples=[f"{prog}                                        # every model at its own resolution",
                         f"{prog} --model 'efficientnet*,vit_b_16' --resolution 96",
                         f"{prog} --resume inferbench-results/zoo/zoo-20261125-090000"])
    add_options(p, "zoo")
    return p


def main(argv: list[str] | None = None, prog: str = "inferbench.zoo") -> int:
    return guarded(prog, lambda a: _main(a, prog), argv, "finish it with --resume (completed cells are kept)")


def _main(argv: list[str] | None, prog: str) -> int:
    values = given(build_parser(typed(prog)).parse_args(argv))
    for key, flag in (("resolutions", "--resolution"), ("batch_sizes", "--batch-size")):
        if len(values.get(key, [])) > 1:  # the matrix has one cell per (model, framework)
            raise UsageError(f"the zoo takes one {flag} (a support matrix has one cell per model and framework); "
                             "use inferbench sweep for a grid")
    if "resume" not in values:
        values["sequential"] = True  # one framework loaded at a time: the biggest models fit, nothing is compared
    return execute_sweep(values, "zoo", finish=write_matrix)


# --------------------------------------------------------------------------- the matrix
def _short(text: str | None, limit: int = 160) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


#: Per model, the seconds its exports took, kept in the zoo's folder: the artifact cache may be deleted (a full
#: matrix's cache held 51 GB here) and the matrix re-written by a later --resume.
EXPORTS = "exports.json"


def _export_seconds(records: list[dict[str, Any]], folder: Path | None = None) -> dict[str, float]:
    """Per model, the seconds its exports took: every kind in its artifact folder's manifest, where that still
    exists, else what ``folder``'s ``exports.json`` kept from an earlier writing (which this updates)."""
    kept = folder / EXPORTS if folder is not None else None
    try:
        out: dict[str, float] = read_json(kept, 2**20, "the zoo's export times") \
            if kept is not None and kept.exists() else {}
    except ValueError:  # a damaged file: what the manifests still say
        out = {}
    seen: set[str] = set()
    for r in records:
        where = (r.get("config") or {}).get("artifact_dir")
        if r["model"] in seen or not where:
            continue
        artifacts = artifact_cache.read_manifest(Path(where)).get("artifacts", {})
        if artifacts:
            seen.add(r["model"])
            out[r["model"]] = round(sum(float(a.get("export_s") or 0.0) for a in artifacts.values()), 1)
    if kept is not None and out:
        atomic_write_text(kept, json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def matrix_rows(plan: Any, records: list[dict[str, Any]], folder: Path | None = None) -> list[dict[str, Any]]:
    """One row per (model of the plan, framework and precision): its outcome. The frameworks are those the plan
    names, or with a set ('all', 'best'), every framework of the registry on the plan's device; each in every
    precision the plan gave its cells (``--precision fp32,int8``: a column ``onnxrt:int8`` beside ``onnxrt``)."""
    device = plan.config.device.kind
    asked = plan.grid.get("frameworks") or ["all"]
    keys = [k for k, fw in frameworks.FRAMEWORKS.items() if device in fw.devices
            and (k in asked or any(s in SETS and in_set(fw, s, device) for s in asked))]
    precisions = {k: list(dict.fromkeys(c.precision for c in plan.cells if c.framework == k)) for k in keys}
    columns = [(k, p) for k in keys for p in precisions[k] or [frameworks.FRAMEWORKS[k].precision]]
    by_cell = {(r["model"], display_name(r["framework"], r.get("precision", "fp32"))): r for r in records}
    exports = _export_seconds(records, folder)
    models = list(dict.fromkeys(c.model for c in plan.cells))
    resolution = {c.model: c.resolution for c in plan.cells}
    rows = []
    for model in models:
        spec = get_model(model)
        stats = next((r.get("model_stats") for r in records if r["model"] == model and r.get("model_stats")), None)
        for key, precision in columns:
            fw, name = frameworks.FRAMEWORKS[key], display_name(key, precision)
            row: dict[str, Any] = {
                "model": model, "family": spec.family, "resolution": resolution[model],
                "params": stats.get("params") if stats else None,
                "gflop_per_image": round(stats["flops_per_image"] / 1e9, 4)
                if stats and stats.get("flops_per_image") is not None else None,  # none counted: an in-graph NMS's
                "export_s": exports.get(model), "framework": name}
            r = by_cell.get((model, name))
            if r is not None:
                row.update(_outcome(r))
            elif (why := fw.unsupported(spec)) is not None:
                row.update(status="unsupported", reason=why)
            elif (why := unavailable_reason(fw, device, spec)) is not None:
                row.update(status="not run here", reason=why)
            else:
                row.update(status="not run yet", reason="")
            rows.append({c: row.get(c) for c in MATRIX_COLUMNS})
    return rows


def _numbers(parity: dict[str, Any]) -> str:
    """A failed parity's figures where it gave no reason (a classifier's top-1 agreement where it has one)."""
    if parity.get("max_rel_err") is None:
        return ""
    top1 = parity.get("top1_agreement")
    return f"max_rel_err {parity['max_rel_err']:.3g}, cosine {parity.get('cosine') or 0:.6f}" + \
        (f", top-1 {top1:.3g}" if top1 is not None else "")


def _outcome(r: dict[str, Any]) -> dict[str, Any]:
    lat, parity = r.get("latency_ms") or {}, r["parity"]
    out: dict[str, Any] = {"max_rel_err": parity.get("max_rel_err"), "cosine": parity.get("cosine"),
                           "top1_agreement": parity.get("top1_agreement"), "p50_ms": lat.get("p50"),
                           "throughput_per_s": r.get("throughput_per_s")}
    rate = compute_rate(r)["gflop_per_s"]
    if rate is not None:
        out["gflop_per_s"] = round(rate, 2)
    out["limit"] = roofs(r)["limit"]  # against this machine's roofs: compute, memory or overhead
    if r["status"] != "ok":
        error = str(r.get("error") or "")
        refused = error.startswith(REFUSED) or f": {REFUSED}" in error  # the cell's, or a needed export's
        return {**out, "status": "too big here" if refused else "failed", "reason": _short(error, 240)}
    if parity["status"] == "passed":
        return {**out, "status": "passed", "reason": ""}
    if parity["status"] == "failed":
        return {**out, "status": "failed parity", "reason": _short(parity.get("reason") or _numbers(parity))}
    if parity["status"] == "unjudged":  # INT8 without labelled images: measured, its agreement with FP32 said

        top1 = ((parity.get("agreement") or {}).get("top1") or {})
        agreement = "; " + agreement_phrase(top1["agreement"], parity["agreement"].get("inputs")) \
            if top1.get("agreement") is not None else ""
        return {**out, "status": "speed only", "reason": _short(f"accuracy not judged (no --eval-dir){agreement}")}
    return {**out, "status": "unverified", "reason": "own weights (no Keras weight port): outputs not compared"}


def _cell_text(row: dict[str, Any]) -> str:
    mark = MARKS[row["status"]]
    if row["status"] in ("passed", "failed parity") and row["max_rel_err"] is not None:
        return f"{mark} {row['max_rel_err']:.0e}"
    if row["status"] == "speed only" and row["p50_ms"] is not None:  # no error to show: its speed, apart
        return f"{mark} {row['p50_ms']:.3g} ms"
    return mark


def render_markdown(plan: Any, rows: list[dict[str, Any]], environment: dict[str, Any] | None) -> str:
    frameworks = list(dict.fromkeys(r["framework"] for r in rows))  # the columns, in matrix_rows' order
    models = list(dict.fromkeys(r["model"] for r in rows))
    cell = {(r["model"], r["framework"]): r for r in rows}
    counts = {s: sum(r["status"] == s for r in rows) for s in MARKS}
    tried = sum(counts[s] for s in ("passed", "failed parity", "failed", "unverified"))  # speed only: said apart
    env = environment or {}
    t = plan.config.timing
    device = (env.get("gpu") or {}).get("name") or (env.get("cpu") or {}).get("model") or plan.config.device.kind
    lines = [
        "# Support matrix",
        "",
        f"Every model of the plan through every framework that runs on this device: {device}, "
        f"{plan.config.threads} threads, {env.get('memory_gb', '?')} GB "
        f"({env.get('hostname', '?')}; inferbench {__version__}, {time.strftime('%Y-%m-%d')}). "
        f"Batch {plan.cells[0].batch_size if plan.cells else 1}; each model at the resolution in its row; parity "
        "against each model's reference (its Keras model's outputs, or a PyTorch program's or a model file's own) "
        "on 16 seeded inputs and on the timed batch; a short timing "
        f"({t.min_duration_s:g} s, {t.rounds} round(s), one framework loaded at a time): for orientation, not a "
        "benchmark.",
        "",
        f"**{counts['passed']} of {tried} (model, framework) pairs that ran pass parity**; "
        f"{counts['failed parity']} fail parity, {counts['failed']} fail to run, {counts['unverified']} run "
        f"unverified (own weights)"
        + (f", {counts['speed only']} run as speed only (INT8 without labelled images: accuracy not judged, "
           "its p50 shown)" if counts["speed only"] else "")
        + f"; {counts['unsupported']} pairs are unsupported"
        + (f", {counts['too big here']} refused as too big for this machine's memory" if counts["too big here"]
           else "")
        + (f", {counts['not run here']} not run here" if counts["not run here"] else "")
        + (f", {counts['not run yet']} not run yet" if counts["not run yet"] else "") + ".",
        "",
        "Marks: " + ", ".join(f"{m} {s}" for s, m in MARKS.items()) + ". The number is the largest error relative "
        "to max |reference| (FP32 gate: within 1e-3, and a cosine within 1e-6 of 1; each image within 3x the "
        "model's own eager-against-graph spread where that is wider: the record's parity.thresholds). GFLOP: per "
        "image, counted from the Keras graph; export s: every artifact made for the model, exported once and "
        "shared by its frameworks.",
        "",
        "| model | px | params | GFLOP | export s | " + " | ".join(frameworks) + " |",
        "|---|---:|---:|---:|---:|" + "---|" * len(frameworks),
    ]
    for model in models:
        first = cell[(model, frameworks[0])] if frameworks else {}
        params = f"{first['params'] / 1e6:.1f}M" if first.get("params") else "-"
        gflop = f"{first['gflop_per_image']:.3g}" if first.get("gflop_per_image") is not None else "-"
        export = f"{first['export_s']:.0f}" if first.get("export_s") is not None else "-"
        lines.append(f"| {markdown.text(model)} | {first.get('resolution', '')} | {params} | {gflop} | {export} | "
                     + " | ".join(_cell_text(cell[(model, k)]) for k in frameworks) + " |")
    problems = [r for r in rows if r["status"] in ("failed parity", "failed")]
    lines += ["", "## What fails, and why", ""]
    lines += ["- " + markdown.text(f"{r['model']} × {r['framework']}: {r['status']}: {r['reason']}")
              for r in problems] or ["- nothing"]
    apart = [r for r in rows if r["status"] == "speed only"]
    if apart:
        lines += ["", "## Speed only: INT8 whose accuracy was not judged", ""]
        lines += ["- " + markdown.text(f"{r['model']} × {r['framework']}: {r['reason']}") for r in apart]
    reasons: dict[str, list[str]] = {}
    for r in rows:
        if r["status"] in ("unsupported", "too big here", "not run here"):
            reasons.setdefault(f"{r['framework']}: {_generic(r['reason'], r['model'])}", []).append(r["model"])
    lines += ["", "## Unsupported, too big or not run here, and why", ""]
    lines += ["- " + markdown.text(f"{why} ({len(ms)} model{'s' if len(ms) > 1 else ''}: {', '.join(ms)})")
              for why, ms in reasons.items()] or ["- nothing"]
    return "\n".join(lines) + "\n"


def _generic(reason: str, model: str) -> str:
    """A reason with its model's name taken out, so that one line covers every model it applies to."""
    return reason.replace(f"of {model}", "of the model").replace(f"for {model}", "for the model")


def write_matrix(folder: Path, records: list[dict[str, Any]]) -> None:
    """``matrix.csv`` and ``matrix.md`` in a zoo folder, from its plan and records (the sweep's finish step)."""
    plan = Plan.from_json(read_text(folder / PLAN, PLAN_BYTES, "plan"), str(folder / PLAN))
    rows = matrix_rows(plan, records, folder)
    write_csv(folder / "matrix.csv", MATRIX_COLUMNS, rows, lineterminator="\n")
    environment = next((r.get("environment") for r in records if r.get("environment")), None)
    atomic_write_text(folder / "matrix.md", render_markdown(plan, rows, environment))
    passed = sum(r["status"] == "passed" for r in rows)
    print(f"\nsupport matrix: {folder / 'matrix.md'} ({passed} pairs pass parity; matrix.csv has every pair)",
          file=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
