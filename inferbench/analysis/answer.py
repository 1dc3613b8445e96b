"""The answer as text: the validity line first, then per group the recommended cell, its margin, its accuracy and
each reduced-precision cell against its own FP32 — for the terminal, report.md and the zoo's matrix. The figures come
from :func:`inferbench.analysis.ranking.recommendations`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..measure.trackers.machine import combine
from ..registry.scenarios import scenario
from .ranking import _FORMAT, OBJECTIVES


def reduced_lines(rec: dict[str, Any]) -> list[str]:
    """Each reduced-precision cell against its own runtime's FP32, ranked or not: its gain (paired within rounds, with
    its interval), what it costs (accuracy on labelled images, else agreement with FP32) and, where it is not ranked,
    why (once, where every cell has the same reason)."""
    cells = rec.get("reduced") or []
    if not cells:
        return []
    whys = {c.get("why") for c in cells}
    shared = whys.pop() if len(whys) == 1 else None
    head = "    reduced precision against its own FP32 (gain > 1: better" + (
        "; not judged: the machine was busy" if rec.get("not_judged") else "") + (
        f"; none ranked: {shared}" if shared else "") + "):"
    return [head] + [f"      {reduced_phrase(c, rec, said=shared)}" for c in cells]


def reduced_phrase(c: dict[str, Any], rec: dict[str, Any], said: str | None = None) -> str:
    """One reduced-precision cell as the answer says it (:func:`reduced_lines`; ``said``: the reason not ranked
    that its heading gave)."""
    text = f"{c['cell']} {c['value']:{_FORMAT[rec['unit']]}} {rec['unit']}"
    if c.get("gain") is None:
        text += ", no verified FP32 cell of its runtime here to compare (without --reduced-only, each runs beside it)"
    else:
        ci = c.get("gain_ci95")
        text += f", gain {c['gain']:.2f}x over {c['fp32']}" + (
            f" [95% CI {ci[0]:.2f}-{ci[1]:.2f}]" if ci is not None else "" if rec.get("not_judged") else
            " (no interval: the two were not paired within rounds)")
    if c.get("accuracy_points") is not None:
        ci = c.get("accuracy_points_ci95")
        text += f"; top-1 accuracy {c['accuracy_points']:+.1f} points" + (
            f" [{ci[0]:+.1f} to {ci[1]:+.1f}]" if ci else "") + f" against FP32's on {c['accuracy_images']} " \
            f"labelled images (MLPerf's gate {c['accuracy_gate']})"
    elif c.get("accuracy_said"):  # a detector's mAP, a segmenter's mean IoU
        text += f"; {c['accuracy_said']}: {c['accuracy_kept']:.1%} of FP32's (MLPerf's gate {c['accuracy_gate']})"
    elif c.get("top1_agreement") is not None:
        text += "; " + agreement_phrase(c["top1_agreement"], c["agreement_inputs"], c.get("top1_agreement_ci95"))
        if c.get("own_agreement") is not None:  # what the model itself keeps in that precision (the gate's measure)
            text += f" (the model's own {c['precision'].upper()}: {c['own_agreement']:.3f})"
    elif c.get("after_postprocess"):
        text += "; " + c["after_postprocess"]
    else:
        text += "; its agreement with FP32 not counted (--agreement-inputs 0)"
    return text + (f"; not ranked: {c['why']}" if c.get("why") and c.get("why") != said else "")


def agreement_phrase(top1: float, inputs: Any, ci: Any = None) -> str:
    """An unjudged cell's top-1 agreement with FP32 as the answer and the zoo's matrix say it."""
    return f"top-1 agreement with FP32 {top1:.3f}" + (f" [{ci[0]:.3f}-{ci[1]:.3f}]" if ci is not None else "") \
        + f" over {inputs} seeded inputs"


def validity_line(recs: list[dict[str, Any]]) -> str:
    """The first line of every answer: is it what the runtimes can do, or what a busy machine gave?"""
    verdict = combine([r["validity"] for r in recs if r.get("validity")])
    if verdict["valid"] is True:
        return f"VALID: {verdict['reason']} ({verdict['cells']} cells)"
    if verdict["valid"] is False:
        return (f"NOT VALID ({verdict['not_valid']} of {verdict['cells']} cells): {verdict['reason']}. This ranking "
                "is what the busy machine gave, not what the runtimes can do: re-run when it is quiet")
    return f"validity not known: {verdict['reason']}"


def margin_text(rec: Mapping[str, Any]) -> str:
    """How far ahead the recommended cell is: "1.65x better than onnxrt [95% CI 1.58-1.72]", or that the
    runner-up is within the noise."""
    m, runner = rec["margin"], rec["runner_up"]
    if m["ci95"] is None:  # a ratio without an interval is no claim (the zoo's one round, a record without samples)
        return f"no claim over {runner}: no interval ({m['method']})"
    ci = f"[95% CI {m['ci95'][0]:.2f}-{m['ci95'][1]:.2f}]"
    if not m["significant"]:
        return f"{runner} is within the noise ({m['ratio']:.2f}x {ci}): either will do"
    if m["ratio"] < 1:  # the ranked figure puts it first, the paired rounds favour the runner-up
        return f"too close to call: paired within rounds, {runner} is {1 / m['ratio']:.2f}x better {ci}"
    # paired within one run, the interval knows nothing of what a second invocation meets anew (each runtime's
    # own start-up, placement, the machine's other state): said, not assumed away
    scope = " under this run's conditions" if str(m.get("method", "")).startswith("paired") else ""
    return f"{m['ratio']:.2f}x better than {runner} {ci}{scope}"


def cost_line(rec: Mapping[str, Any]) -> list[str]:
    """An FP32 answer's accuracy on labelled images (:func:`accuracy_said`); a reduced precision's is in its own line
    (:func:`reduced_lines`)."""
    mine = any(c["cell"] == rec["recommended"] for c in rec.get("reduced") or [])
    return [f"    {rec['recommended']} {rec['accuracy']}"] if rec.get("accuracy") and not mine else []


def serving_lines(rec: dict[str, Any], at: str) -> list[str]:
    """A serving scenario's answer: the server's load at the bound (confirmed, with the search's bracket), offline's
    samples per second with its interval; the runner-up's figure."""
    s, ci = rec["serving"], rec["ci95"]
    knobs = s.get("knobs") or {}
    how = f"concurrency {knobs.get('concurrency', 1)}" + (f", batching delay {knobs['max_delay_ms']:g} ms"
                                                         if knobs.get("max_delay_ms") else "")
    if scenario(s["scenario"]).bound:
        head = (f"  {at}: at p99 <= {s['bound_ms']:g} ms, {rec['recommended']} serves {rec['value']:.1f} QPS"
                + (f" (held {s['confirmed']} tests in a row at this load or more; INVALID at "
                   f"{ci[1]:.1f}; {how})" if ci else f" (held {s['confirmed']} tests in a row; {how})"))
        unit = "QPS"
    else:
        head = f"  {at}: {rec['recommended']}, {rec['value']:.1f} samples/s" + (
            f" [95% CI {ci[0]:.1f}-{ci[1]:.1f}]" if ci else "") + f" ({how})"
        unit = "samples/s"
    lines = [head]
    if rec.get("margin"):  # offline: judged from the rounds, as a latency margin is
        lines.append(f"    {margin_text(rec)}")
    elif rec.get("runner_up"):  # a server's search gives a bracket, not an interval: the figure, not compared
        lines.append(f"    next: {rec['runner_up']} at {rec['runner_up_value']:.1f} {unit} (a search's bracket: "
                     "not compared)")
    if s.get("stopped"):
        lines.append(f"    {s['stopped']}: the answer stands on the tests that ran")
    return lines + shortened(rec)


def shortened(rec: dict[str, Any]) -> list[str]:
    """A serving answer's LoadGen tests, shorter than MLPerf's: said where the figure is, not only in the record."""
    s = rec.get("serving") or {}
    if s.get("mlperf_valid") is not False:
        return []
    took = f" to {s['min_duration_ms'] / 1000:g} s" if s.get("min_duration_ms") else ""
    return [f"    LoadGen tests shortened{took} (MLPerf asks 600 s a test): comparable between the runtimes here, "
            "not MLPerf-valid"]


def recommendation_lines(recs: list[dict[str, Any]]) -> list[str]:
    """The answer: per group a line with the recommended cell, one with its margin (and one of advice
    when unstable), then why energy is missing, once; for the terminal and report.md."""
    if not recs:
        return []
    objective = recs[0]["objective"]
    _, lower, _, _, words = OBJECTIVES[objective]
    lines = [validity_line(recs),
             f"recommendation ({words}, {'lower' if lower else 'higher'} is better; verified cells only):"]
    for rec in recs:
        at = f"{rec['model']}@{rec['resolution']} batch {rec['batch_size']} on {rec['device']}" + (
            f", {rec['threads']} thread{'s' if rec['threads'] != 1 else ''}" if rec.get("threads") else "")
        if rec["recommended"] is None:  # and why each cell was not ranked
            lines.append(f"  {at}: none: {rec['reason']}")
            reduced = {c["cell"] for c in rec.get("reduced") or []}  # said in their own lines
            lines += [f"    {name}: {why}" for name, why in (rec.get("not_ranked") or {}).items()
                      if name not in reduced]
            lines += reduced_lines(rec)
            continue
        if rec.get("not_judged"):  # a best guess, and only that: no interval, margin or stability claimed
            lines.append(f"  {at}: best guess {rec['recommended']}, {rec['value']:{_FORMAT[rec['unit']]}} "
                         f"{rec['unit']}: not judged (the machine was busy: the first line says how much; "
                         "--allow-busy judges it anyway)")
            if rec.get("runner_up"):
                lines.append(f"    next: {rec['runner_up']}, not compared")
            lines += shortened(rec) + cost_line(rec) + reduced_lines(rec)
            continue
        if rec.get("serving"):
            lines += serving_lines(rec, at) + cost_line(rec) + reduced_lines(rec)
            continue
        ci, f = rec["ci95"], _FORMAT[rec["unit"]]
        only = f", {rec['assumed']}" if rec.get("assumed") and objective in ("p50", "throughput") else ""
        text = f"  {at}: {rec['recommended']}, {rec['value']:{f}} {rec['unit']}" + (
            f" [95% CI {ci[0]:{f}}-{ci[1]:{f}}{only}]" if ci else "") + f", {rec['stability']}"
        if rec["energy_missing"] is None and objective != "energy":
            text += f", {rec['energy_j_per_inference']:.4g} J/inference"
        lines.append(text)
        if "runner_up" in rec:
            lines.append(f"    {margin_text(rec)}")
        if rec["stability_advice"]:
            lines.append(f"    {rec['recommended']}: {rec['stability_advice']}")
        lines += cost_line(rec) + reduced_lines(rec)
    missing = sorted({r["energy_missing"] for r in recs if r.get("energy_missing")})
    if missing:  # said once: on a machine without a sensor it is the same for every line
        lines.append(f"  energy not measured: {'; '.join(missing)}")
    return lines
