"""The summary table printed at the end of a run (and reused by reports)."""

from __future__ import annotations

import shutil
import sys
from typing import Any

from ..analysis.answer import recommendation_lines
from ..analysis.ranking import recommendations
from ..base.size import rank
from ..records.table import busy, compute_rate, field, peak_note, record_name, roofs, stability_said, stability_word
from ..registry.scenarios import scenario


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)  # None or NaN: not measured


def terminal_width() -> int | None:
    """The terminal's columns when stdout is one; None when piped or a file (the full table)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _rate(record: dict[str, Any]) -> str:
    """Achieved GFLOP/s and its share of the device's measured peak FP32 rate: "133 (28%)"."""
    rate = compute_rate(record)
    if rate["gflop_per_s"] is None:
        return "-"
    note = peak_note(record)
    share = f" ({rate['fraction_of_peak']:.0%})" if rate["fraction_of_peak"] is not None else \
        f" ({note})" if note else ""
    return f"{rate['gflop_per_s']:.3g}{share}"


def _roofs(record: dict[str, Any]) -> str:
    """What bounds the row and its share of the memory roof, perfect fusion to none, and by the runtime's own count
    where it gives one: "compute (12-81%, cache)", "overhead (4-9%, XLA 7%, cache)"."""
    r = roofs(record)
    said = [f"{r['memory_roof_pct_low']:.0f}-{r['memory_roof_pct_high']:.0f}%"] \
        if r["memory_roof_pct_low"] is not None else []
    said += [f"{str(r['bytes_runtime_by']).split()[0]} {r['memory_roof_pct_runtime']:.0f}%"] \
        if r["memory_roof_pct_runtime"] is not None else []
    said += ["cache"] if r["cache_resident"] else []
    return (r["limit"] or "-") + (f" ({', '.join(said)})" if said else "")


def _top1(record: dict[str, Any]) -> str:
    """A cell's top-1 accuracy on the labelled images and its difference from FP32's, in points: "76.2% (-0.3)"."""
    block = (record.get("parity") or {}).get("accuracy") or {}
    if block.get("short"):  # a task's own measure (a detector's mAP)
        return str(block["short"])
    top1 = block.get("top1") or {}
    if top1.get("accuracy") is None:
        return "-"
    return f"{top1['accuracy']:.1%} ({float(top1['difference']) * 100:+.1f})"


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Aligned text columns under a header and a rule."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    return lines + ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


#: Columns a narrow terminal loses first (summary.csv keeps them all).
EXPENDABLE = ("peak MB", "1st call s", "load s", "limit (memory roof)", "GFLOP/s (peak)", "n", "status", "p99 ms",
              "stability")


Row = tuple[str, ...]


def fit(header: Row, rows: list[Row], width: int | None) -> tuple[Row, list[Row], list[str]]:
    """Drop :data:`EXPENDABLE` columns, in that order, until the table fits ``width`` (None: keep all)."""
    dropped: list[str] = []
    for name in EXPENDABLE:
        if width is None or len(table(header, rows)[1]) <= width:
            break
        if name in header:
            i = header.index(name)
            header, rows = header[:i] + header[i + 1:], [row[:i] + row[i + 1:] for row in rows]
            dropped.append(name)
    return header, rows, dropped


#: What the zoo says instead of a recommendation: its timings are one short round each.
NOT_A_BENCHMARK = ("no recommendation: one short round per cell, one framework loaded at a time — a support matrix, "
                   "not a benchmark (inferbench run or sweep measures and compares)")


def format_summary(records: list[dict[str, Any]], objective: str = "p50", width: int | None = None,
                   benchmark: bool = True, unmeasured: list[str] | tuple[str, ...] = (), advise: bool = True) -> str:
    """The answer first (the recommendation per group; ``benchmark`` False, the zoo's orientation timings: the line
    that says why there is none) with the cells --time-budget left unmeasured beside it, then a row per cell
    (``advise`` False, a check such as selftest's: no advice naming options of run it does not take)
    (narrowed to ``width``, a terminal's), then what is not ranked and why."""
    groups = sorted({(r["model"], r["resolution"]) for r in records}, key=lambda g: (g[0], rank(g[1])))
    energy = any((r.get("energy") or {}).get("available") for r in records)
    gpu = any(((r.get("config") or {}).get("device") or {}).get("kind") == "gpu" for r in records)
    multi = len(groups) > 1
    labelled = any((r.get("parity") or {}).get("accuracy") for r in records)  # --eval-dir
    kinds = {scenario(r.get("scenario")) for r in records}
    own = kinds.pop() if len(kinds) == 1 else scenario(None)  # one scenario's columns, else the closed loop's
    post = any(r.get("postprocess") and not r["postprocess"].get("in_graph") for r in records)  # timed on its own
    lead: tuple[str, ...] = ((own.rate_column, own.latency_column) if own.rate_column else (own.latency_column,)) + (
        ("+ post ms",) if post else ())
    own_measure = any(((r.get("parity") or {}).get("accuracy") or {}).get("short") for r in records)  # a detector's mAP
    accuracy = ("accuracy (vs FP32)" if own_measure else "top-1 (vs FP32)",) if labelled else ()
    header = (("model@res",) if multi else ()) + ("framework", "bs", "status", "parity") + accuracy + lead + (
        "p99 ms", "n", "stability", "valid") + (() if own.rate_column else ("samples/s",)) + (
        "GFLOP/s (peak)", "limit (memory roof)", "load s", "1st call s", "peak MB") + (("dev MB",) if gpu else ()) + (
        ("W", "J/inf") if energy else ())
    rows = [_row(r, multi, labelled, own.rate_column != "", gpu, energy, post) for r in records]
    recs = [r if advise else r | {"stability_advice": ""} for r in recommendations(records, objective)]
    answer = recommendation_lines(recs) if benchmark else [NOT_A_BENCHMARK]
    if unmeasured and answer:  # the answer is among what was measured: what the budget left out, beside it
        answer.append(f"  left out by --time-budget (not measured, so not in the answer): {', '.join(unmeasured)}")
    header, rows, dropped = fit(header, rows, width)
    lines = answer + ([""] if answer else []) + table(header, rows)
    if dropped:
        lines.append(f"({', '.join(dropped)} left out to fit the terminal: summary.csv has every column)")
    unstable = []
    for r in records:
        st = (r.get("latency_ms") or {}).get("stability") or {}
        if r["status"] != "ok":
            lines.append(f"{record_name(r)} bs{r['batch_size']} failed: {r['error']}")
        elif r["parity"]["status"] == "failed":
            lines.append(f"{record_name(r)} bs{r['batch_size']} FAILED PARITY ({r['parity'].get('reason')}): "
                         "not ranked")
        elif r["parity"]["status"] == "unjudged" and benchmark:
            pass  # INT8 without labels: the answer's reduced-precision section says why, once
        elif r["parity"]["status"] != "passed":
            lines.append(f"{record_name(r)} bs{r['batch_size']} UNVERIFIED ({r['parity'].get('reason')}: outputs "
                         "not checked against the reference): not ranked")
        if r["status"] == "ok" and stability_word(r) == "unstable":
            unstable.append(f"{record_name(r)} bs{r['batch_size']} (p50 ±{st['half_width']:.0%}, drift "
                            f"{st['drift']:+.0%})")
    if unstable:  # one line: on a noisy machine it can be every row
        lines.append(f"unstable estimates: {', '.join(unstable)}; " + (
            "run more rounds (--rounds) or on a quieter machine before trusting small differences" if advise else
            "a short check's rounds (inferbench run measures)"))
    tuned = [tuning_line(r) for r in records if r.get("tuning")]
    lines += model_lines(records)
    if tuned:
        lines += ["tuning (each runtime's grid tried in short paired rounds; the setting measured above):", *tuned]
    return "\n".join(lines)


def phrases(value: Any) -> list[str]:
    """A record's list of side-input phrases, its strings only (a record is a file a hand may have edited)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def model_lines(records: list[dict[str, Any]]) -> list[str]:
    """What the model's own file adds to every call: its side inputs as they were filled, and its post-processing
    (the task's, timed on its own; or the suppression its graph holds, timed as it is)."""
    config = [r.get("config") or {} for r in records]
    sides = [(f.get("name"), side) for c in config for f in c.get("model_files") or [] if isinstance(f, dict)
             for side in phrases(f.get("side_inputs"))]
    sides += [(r.get("model"), side) for r, c in zip(records, config)  # a SavedModel's: read when it was imported
              for entry in (c.get("artifacts") or {}).values() if isinstance(entry, dict)
              for side in phrases(entry.get("side_inputs"))]
    lines = [f"side input of {name}: {side}" for name, side in dict.fromkeys(sides)]
    said = next((r["postprocess"] for r in records if (r.get("postprocess") or {}).get("where")), None)
    if said and said.get("in_graph"):
        lines.append(f"post-processing: {said['what']}, in the model's own graph: inside every timed call, timed as it "
                     "is; nothing of inferbench's runs after it")
    elif said:
        inside = [record_name(r) for r in records if (r.get("postprocess") or {}).get("inside")]
        lines.append(f"+ post ms: {said['what']}, timed on its own (outside the timed call: on the host, after "
                     "the outputs are copied there, the same code for every runtime); the median a batch, not in "
                     "the latency beside it" + (f" but for {', '.join(dict.fromkeys(inside))}, whose calls held "
                                                "it (--postprocess inside)" if inside else ""))
    return lines


def tuning_line(record: dict[str, Any]) -> str:
    """What a tuned cell's tuning phase chose, and why, in one line."""
    t = record["tuning"]
    chosen = "its own setting" if t["chosen"] == t["default"] else \
        ", ".join(f"{k}={v}" for k, v in t["chosen"].items())
    took = f" in {t['seconds']:.0f} s" if t.get("seconds") is not None else ""
    return f"  {record_name(record)} bs{record['batch_size']}: {chosen}: {t['reason']} ({len(t['table'])} " \
           f"settings tried{took})"


def valid_word(record: dict[str, Any]) -> str:
    """A cell's validity in a word or two, for a table: yes, NO (the machine was busy), unknown."""
    valid = (record.get("validity") or {}).get("valid")
    if record.get("status") != "ok":
        return "-"
    return "yes" if valid is True else "NO" if valid is False else "unknown"


def _row(r: dict[str, Any], multi: bool, labelled: bool, rate: bool, gpu: bool, energy: bool,
         post: bool = False) -> tuple[str, ...]:
    """A record's row of the table, in :func:`format_summary`'s header's order."""
    lat, cold, mem, power = (r.get(k) or {} for k in ("latency_ms", "cold_start", "memory", "energy"))
    return ((f"{r['model']}@{r['resolution']}",) if multi else ()) + (
        record_name(r), str(r["batch_size"]), r["status"] if r["status"] == "ok" else "FAILED",
        r["parity"]["status"]) + ((_top1(r),) if labelled else ()) + ((rate_said(r),) if rate else ()) + (
        p50_said(r),) + ((fmt((r.get("postprocess") or {}).get("ms_p50"), ".3f"),) if post else ()) + (
        fmt(lat.get("p99"), ".3f"), fmt(lat.get("n"), "d"), stability_said(r), valid_word(r)) + (
        () if rate else (fmt(r.get("throughput_per_s"), ".1f"),)) + (
        _rate(r), _roofs(r), fmt(cold.get("load_s"), ".2f"), fmt(cold.get("first_call_s"), ".2f"),
        fmt(mem.get("peak_host_mb"), ".0f")) + ((_device_mb(mem),) if gpu else ()) + (
        (fmt(power.get("mean_power_w"), ".1f"), fmt(power.get("joules_per_inference"), ".4f")) if energy else ())


def p50_said(record: dict[str, Any]) -> str:
    """The median latency with its interval (none where the machine was busy: not judged)."""
    lat = record.get("latency_ms") or {}
    if not lat:
        return "-"
    ci = None if busy(record) else lat.get("p50_ci95")
    return f"{lat['p50']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def rate_said(record: dict[str, Any]) -> str:
    """A rate scenario's figure with its span: a server's QPS at the bound with the search's bracket, offline's
    samples/s with its interval over the rounds, a training step's samples/s over the median's interval (none where
    the machine was busy: not judged)."""
    answer = field(record, "serving.answer") or {}
    value = answer.get("qps") if answer else record.get("throughput_per_s")
    if value is None:
        return "-"
    span = None
    if not busy(record):
        span = answer.get("bracket") or answer.get("qps_ci95") if answer else None
        ci, p50 = field(record, "latency_ms.p50_ci95"), field(record, "latency_ms.p50")
        if not answer and ci and p50:  # the batch over the median's interval
            span = [value * p50 / ci[1], value * p50 / ci[0]]
    return f"{value:.1f}" + (f" [{fmt(span[0], '.1f')}, {fmt(span[1], '.1f')}]" if span else "")


def _device_mb(memory: dict[str, Any]) -> str:
    """The allocator's peak, else NVML's figure for the process at the end (marked: not a peak)."""
    if memory.get("peak_device_mb") is not None:
        return f"{memory['peak_device_mb']:.0f}"
    if memory.get("device_used_mb_at_end") is not None:
        return f"{memory['device_used_mb_at_end']:.0f} (nvml)"
    return "-"
