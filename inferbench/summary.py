"""The summary table printed at the end of a run (and reused by reports)."""

from __future__ import annotations

from typing import Any

from .ranking import contenders, record_name, verdict


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_summary(records: list[dict[str, Any]]) -> str:
    groups = sorted({(r["model"], r["resolution"]) for r in records})
    energy = any((r.get("energy") or {}).get("available") for r in records)
    gpu = any(((r.get("config") or {}).get("device") or {}).get("kind") == "gpu" for r in records)
    multi = len(groups) > 1
    header = (("model@res",) if multi else ()) + (
        "framework", "bs", "status", "parity", "p50 ms [95% CI]", "p99 ms", "n", "stability", "samples/s", "load s",
        "1st call s", "peak MB") + (("dev MB",) if gpu else ()) + (("W", "J/inf") if energy else ())
    rows = []
    for r in records:
        lat = r.get("latency_ms") or {}
        ci = lat.get("p50_ci95")
        cold = r.get("cold_start") or {}
        p50 = "-" if not lat else f"{lat['p50']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        status = r["status"] if r["status"] == "ok" else "FAILED"
        rows.append(((f"{r['model']}@{r['resolution']}",) if multi else ()) + (
            record_name(r), str(r["batch_size"]), status, r["parity"]["status"], p50,
            _fmt(lat.get("p99"), ".3f"), _fmt(lat.get("n"), "d"),
            _stability(lat), _fmt(r.get("throughput_per_s"), ".1f"),
            _fmt(cold.get("load_s"), ".2f"), _fmt(cold.get("first_call_s"), ".2f"),
            _fmt((r.get("memory") or {}).get("peak_host_mb"), ".0f"),
        ) + ((_device_mb(r.get("memory") or {}),) if gpu else ())
            + ((_fmt((r.get("energy") or {}).get("mean_power_w"), ".1f"),
                _fmt((r.get("energy") or {}).get("joules_per_inference"), ".4f")) if energy else ()))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    unstable = []
    for r in records:
        st = (r.get("latency_ms") or {}).get("stability") or {}
        if r["status"] != "ok":
            lines.append(f"{record_name(r)} bs{r['batch_size']} failed: {r['error']}")
        elif r["parity"]["status"] == "failed":
            lines.append(f"{record_name(r)} bs{r['batch_size']} FAILED PARITY ({r['parity'].get('reason')}): "
                         "not ranked")
        elif r["parity"]["status"] != "passed":
            lines.append(f"{record_name(r)} bs{r['batch_size']} UNVERIFIED ({r['parity'].get('reason')}: outputs "
                         "not checked against the reference): not ranked")
        if r["status"] == "ok" and st.get("verdict") == "unstable":
            unstable.append(f"{record_name(r)} bs{r['batch_size']} (p50 ±{st['half_width']:.0%}, drift "
                            f"{st['drift']:+.0%})")
    if unstable:  # one line: on a noisy machine it can be every row
        lines.append(f"unstable estimates: {', '.join(unstable)}; run more rounds (--rounds) or on a quieter "
                     "machine before trusting small differences")
    lines += _winners(records)
    return "\n".join(lines)


def _stability(lat: dict[str, Any]) -> str:
    st = lat.get("stability") or {}
    if not st:
        return "-"
    half = st.get("half_width")
    return st["verdict"] + (f" ±{half:.1%}" if half is not None else "")


def _device_mb(memory: dict[str, Any]) -> str:
    """The allocator's peak, else NVML's figure for the process at the end (marked: not a peak)."""
    if memory.get("peak_device_mb") is not None:
        return f"{memory['peak_device_mb']:.0f}"
    if memory.get("device_used_mb_at_end") is not None:
        return f"{memory['device_used_mb_at_end']:.0f} (nvml)"
    return "-"


def _winners(records: list[dict[str, Any]]) -> list[str]:
    """Fastest framework per model, resolution, batch size and precision among the ranked cells."""
    out = []
    key = ("model", "resolution", "batch_size", "precision")
    for model, res, bs, prec in sorted({tuple(r[k] for k in key) for r in records}):
        group = [r for r in records if tuple(r[k] for k in key) == (model, res, bs, prec)]
        ranked = contenders(group, lambda r: r["status"], lambda r: r["parity"]["status"],
                            lambda r: r["latency_ms"]["p50"])
        if not ranked:
            continue
        best = ranked[0]
        at = f"{model}@{res} batch {bs}" + ("" if prec == "fp32" else f" {prec}")
        line = f"fastest for {at}: {record_name(best)} (p50 {best['latency_ms']['p50']:.3f} ms)"
        if len(ranked) > 1 and best.get("raw_latencies_ms") and ranked[1].get("raw_latencies_ms"):
            line += "; " + verdict(record_name(best), best, record_name(ranked[1]), ranked[1])
        out.append(line)
    return out
