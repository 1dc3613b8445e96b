"""The one ranking rule and the one "is A really faster than B?" sentence, for the terminal summary,
``comparisons.csv``, reports and notebooks alike.

Only a cell that ran and whose outputs were checked against the reference (parity passed) is ranked:
a cell that failed parity, or whose outputs could not be checked (a framework with its own weights),
is shown but never a winner, runner-up, baseline, podium or frontier entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ..measure.parity import SENSITIVITY_OF
from ..measure.stats import ASSUMED, MIN_ROUNDS, TAILS, Sample, compare, interval, needed_samples
from ..measure.trackers.machine import combine
from ..records.table import busy, device_of, field, ranked, record_name, stability_word
from ..registry.scenarios import scenario
from ..registry.tasks import task, task_module
from ..spec import GROUP_FIELDS

T = TypeVar("T")
COMPARISON_COLUMNS = (*GROUP_FIELDS, "framework", "baseline", "ratio", "ratio_ci_low", "ratio_ci_high", "significant",
                      "verified", "method")


def contenders(rows: Iterable[T], status: Callable[[T], str], parity: Callable[[T], str],
               p50: Callable[[T], float]) -> list[T]:
    """The ranked rows of one group (same model, resolution, batch size, scenario, device), fastest
    first: the first is "fastest", the second the runner-up it is compared with."""
    return sorted((r for r in rows if ranked(status(r), parity(r))), key=p50)


def _group(record: Mapping[str, Any]) -> str | None:
    timing = record.get("timing")
    return timing.get("group") if isinstance(timing, Mapping) else record.get("timing.group")


def comparison(a: Mapping[str, Any], b: Mapping[str, Any], stat: str = "p50") -> dict[str, Any]:
    """A's median latency (or p99, or mean) over B's from two records (or rows of
    :func:`inferbench.records.load`): paired within rounds when they were measured in the same group of
    the same run, else unpaired."""
    if not (has_raw(a) and has_raw(b)):  # a record without its samples: the point ratio, and no claim
        key = {"p50": "latency_ms.p50", "p99": "latency_ms.p99", "mean": "latency_ms.mean"}[stat]
        return {"ratio": field(a, key) / field(b, key), "ci95": None, "significant": None,
                "method": "none-no-raw-latencies", "rounds": 0}
    group = _group(a)
    return compare(sample_of(a), sample_of(b), paired=group is not None and group == _group(b), stat=stat)


def sample_of(record: Mapping[str, Any]) -> Any:
    """A record's raw latencies as the statistics take them: with the process of each round and the group's pooled
    between-process variance (absent in records from before schema 6: then assumed, and the method says so)."""
    blocks = field(record, "timing.blocks") or []
    processes = {int(b["round"]): int(b.get("process", 0)) for b in blocks} or None
    var = field(record, "latency_ms.spread.pooled_between_var")
    df = field(record, "latency_ms.spread.pooled_between_df")
    framework = field(record, "framework_key") or field(record, "framework")
    own = field(record, f"environment.invocation_spread.per_framework.{framework}")  # its own, measured
    # else the machine's largest (a framework's own 0 is a measurement: nothing beyond each run's own error)
    invocation = own if own is not None else field(record, "environment.invocation_spread.sd")
    runs = field(record, "environment.invocation_spread.invocations")
    inv_df = (field(record, f"environment.invocation_spread.df_per_framework.{framework}") if own is not None else
              field(record, "environment.invocation_spread.df")) or (runs - 1 if runs and runs > 1 else None)
    return Sample(record["raw_latencies_ms"], field(record, "raw_rounds"), processes,
                  (float(var), int(df)) if var is not None and df else None,
                  None if invocation is None else float(invocation) ** 2, None if inv_df is None else float(inv_df))


def verdict(a_name: str, a: Mapping[str, Any], b_name: str, b: Mapping[str, Any]) -> str:
    """"A is 2.4x the speed of B [95% CI 2.2-2.6x]" or "no significant difference" (or not judged: a busy
    machine's cells)."""
    unjudged = not_judged([a, b])
    if unjudged:
        return f"{a_name} vs {b_name}: not judged (the machine was busy)"  # how busy: said once, where it is read
    cmp = comparison(a, b)
    ratio = cmp["ratio"]
    if cmp["ci95"] is None:
        return (f"{a_name} vs {b_name}: no claim (no interval: fewer than 3 rounds, or measured before rounds; "
                f"the medians' ratio is {1 / ratio:.2f})")
    lo, hi = cmp["ci95"]
    if not cmp["significant"]:
        return (f"{a_name} vs {b_name}: no significant difference "
                f"(speed ratio {1 / ratio:.3f} [95% CI {1 / hi:.3f}-{1 / lo:.3f}])")
    return f"{a_name} is {1 / ratio:.2f}x the speed of {b_name} [95% CI {1 / hi:.2f}-{1 / lo:.2f}x]"


def comparison_rows(records: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``comparisons.csv``: per (model, resolution, batch size, scenario), every cell that ran against the
    fastest verified cell (the baseline): ratio = its median latency / the baseline's, with the interval."""
    rows = []
    key = GROUP_FIELDS
    for group in sorted({tuple(r.get(k) for k in key) for r in records}, key=str):
        cells = [r for r in records if tuple(r.get(k) for k in key) == group and r["status"] == "ok"
                 and r.get("raw_latencies_ms")]
        best = contenders(cells, lambda r: r["status"], lambda r: r["parity"]["status"],
                          lambda r: r["latency_ms"]["p50"])
        if not best:
            continue
        base, unjudged = best[0], not_judged(cells)
        for r in sorted(cells, key=lambda r: r["latency_ms"]["p50"]):
            cmp: dict[str, Any] = comparison(r, base) if r is not base else {
                "ratio": 1.0, "ci95": None, "significant": None, "method": "baseline"}
            ci = [None, None] if unjudged else cmp["ci95"] or [None, None]
            rows.append(dict(zip(key, group)) | {
                "framework": record_name(r), "baseline": record_name(base), "ratio": cmp["ratio"],
                "ratio_ci_low": ci[0], "ratio_ci_high": ci[1], "significant": None if unjudged else cmp["significant"],
                "verified": ranked(r["status"], r["parity"]["status"]), "method": cmp["method"]})
    return rows


# --------------------------------------------------------------------------- the answer first
#: ``--objective``: what "best" means -> (record field, lower is better, statistic the margin compares
#: within rounds (None: energy, each round's joules per inference: :func:`energy_margin`), unit, words).
OBJECTIVES = {
    "p50": ("latency_ms.p50", True, "p50", "ms", "median latency"),
    # a tail ranked is a typical round's (the rounds' geometric mean, what its interval describes); the whole run's,
    # every sample pooled, is latency_ms.p99_pooled with its own interval
    "p90": ("latency_ms.p90", True, "p90", "ms", "a typical round's p90 latency"),
    "p99": ("latency_ms.p99", True, "p99", "ms", "a typical round's p99 latency"),
    "throughput": ("throughput_per_s", False, "mean", "samples/s", "throughput"),
    "energy": ("energy.joules_per_inference", True, None, "J/inference", "energy per inference"),
}
_FORMAT = {"ms": ".3f", "samples/s": ".1f", "J/inference": ".4g"}
#: One recommendation per group: cells that differ in any of these are never compared.
RECOMMENDATION_KEY = ("device", "threads", *GROUP_FIELDS)


def _group_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (device_of(r), field(r, "config.threads"),
            *(field(r, k) or ("inference" if k == "scenario" else None) for k in GROUP_FIELDS))


def _sortable(key: tuple[Any, ...]) -> list[tuple[int, Any, str]]:
    """A group key in an order that puts numbers before text and never compares the two."""
    return [(0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in key]


#: Why a cell measured whose accuracy was not judged (INT8 without --eval-dir) is not ranked, where its record does
#: not say (its ``parity.reason`` does: no labelled images, or why they could not judge it).
SPEED_ONLY = "speed only: accuracy not judged (INT8 without labelled images, --eval-dir)"


def reduced_cell(r: Mapping[str, Any], cells: list[Mapping[str, Any]], path: str, lower: bool,
                 stat: str | None, why: str | None) -> dict[str, Any]:
    """A reduced-precision cell beside its own runtime's FP32: its figure, its gain over the same runtime's verified
    FP32 cell of the group (> 1: better; paired within rounds as :func:`comparison` pairs them, a point ratio where it
    cannot, no interval where the machine was busy), what it costs (its accuracy on labelled images against FP32's,
    else its top-1 agreement with FP32 over seeded inputs), and ``why`` it is not ranked (None: ranked)."""
    out: dict[str, Any] = {"cell": record_name(r), "precision": field(r, "precision"), "value": field(r, path),
                           "ranked": why is None, "why": why, "fp32": None, "gain": None, "gain_ci95": None}
    fp32 = next((c for c in cells if c["framework"] == r["framework"] and c.get("precision", "fp32") == "fp32"
                 and c.get("variant", "") == r.get("variant", "") and c["status"] == "ok"
                 and field(c, "parity.status") == "passed" and field(c, path) is not None), None)
    if fp32 is not None:
        out["fp32"] = record_name(fp32)
        if stat in ("p50", "p99", "mean") and lower:  # latency: FP32's over the reduced cell's, paired where they can
            cmp = comparison(fp32, r, stat)
            out.update(gain=cmp["ratio"], gain_ci95=None if not_judged([r, fp32]) else cmp["ci95"])
        else:
            a, b = field(r, path), field(fp32, path)
            out.update(gain=(b / a if lower else a / b) if a and b else None)
    top1 = field(r, "parity.accuracy.top1") or {}
    if top1.get("difference") is not None:  # labelled images: the accuracy it gives up, in points
        out.update(accuracy_points=float(top1["difference"]) * 100, accuracy_points_ci95=[
            float(v) * 100 for v in top1["difference_ci95"]] if top1.get("difference_ci95") else None,
            accuracy_images=field(r, "parity.accuracy.images"), accuracy_gate=field(r, "parity.accuracy.status"))
    if (kept := accuracy_kept(r)) is not None:  # its main metric on labelled images: the share of FP32's it keeps
        out.update(accuracy_kept=kept, accuracy_said=field(r, "parity.accuracy.said"),
                   accuracy_metric=field(r, "parity.accuracy.metric") or "top-1 accuracy",
                   accuracy_gate=field(r, "parity.accuracy.status"))
    agreement = field(r, "parity.agreement.top1.agreement")  # a record's nested block or a table's flat column
    if agreement is not None:
        out.update(top1_agreement=agreement, top1_agreement_ci95=field(r, "parity.agreement.top1.ci95"),
                   agreement_inputs=field(r, "parity.agreement.inputs"),
                   own_agreement=field(r, "parity.agreement.top1.own"))
    after = field(r, "parity.after_postprocess")
    if field(r, "parity.agreement.said"):  # a detector's or segmenter's results after the post-processing, over
        out.update(after_postprocess=field(r, "parity.agreement.said"))  # the agreement inputs where counted
    elif isinstance(after, dict) and after:  # else on the 16 reference inputs
        out.update(after_postprocess=task_module(str(field(r, "task") or "classification")).said(after))
    return out


def accuracy_kept(r: Mapping[str, Any]) -> float | None:
    """A reduced cell's main metric on labelled images (its task's ``headline``: top-1, mAP, mean IoU) as a share of
    FP32's on the same images; None where labels did not judge it or FP32's is 0."""
    if field(r, "parity.accuracy.status") not in ("passed", "failed"):
        return None
    key = f"parity.accuracy.{task(field(r, 'task')).headline}"
    value, fp32 = field(r, f"{key}.value"), field(r, f"{key}.fp32")
    if value is None:  # a classifier's top-1 block names its value "accuracy"
        value = field(r, f"{key}.accuracy")
    return float(value) / float(fp32) if value is not None and fp32 else None


def judged_reduced(recs: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], dict[str, Any]]]:
    """Each reduced-precision cell of the recommendations ``recs`` that labelled images judged and that has a gain
    over its FP32, with its group's recommendation (the report's table and figure of what it gains and keeps)."""
    return [(rec, c) for rec in recs for c in rec.get("reduced") or []
            if c.get("accuracy_kept") is not None and c.get("gain") is not None]


def recommendations(records: Iterable[Mapping[str, Any]], objective: str = "p50") -> list[dict[str, Any]]:
    """Per device, thread count, scenario, model, resolution and batch size: the best verified cell for
    ``objective`` (every precision that passed parity competing, each named), its interval, the margin over the
    runner-up (paired within rounds where they share a run), its stability verdict, its energy or why there is none,
    and for a reduced precision what it costs in agreement with FP32 (:func:`precision_cost`)."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(_group_key(r), []).append(r)
    return [_recommend(key, groups[key], objective) for key in sorted(groups, key=_sortable)]


def _recommend(key: tuple[Any, ...], cells: list[Mapping[str, Any]], objective: str) -> dict[str, Any]:
    """One group's recommendation (:func:`recommendations`)."""
    path, lower, stat, unit, words = OBJECTIVES[objective]
    rec: dict[str, Any] = dict(zip(RECOMMENDATION_KEY, key)) | {"objective": objective, "unit": unit,
                                                                 "validity": validity_of(cells)}
    rec["not_ranked"] = not_ranked(cells, objective)
    # each reduced-precision cell measured: its gain over its own FP32 and what it costs, ranked or not (INT8 without
    # labelled images is measured, its accuracy not judged: shown here, never ranked)
    rec["reduced"] = sorted((reduced_cell(r, cells, path, lower, stat, rec["not_ranked"].get(record_name(r)))
                             for r in cells if r["status"] == "ok" and field(r, "precision") not in (None, "fp32")
                             and field(r, path) is not None and field(r, "serving.answer.found") is not False),
                            key=lambda c: c["value"] * (1 if lower else -1))
    scored = sorted((r for r in cells if ranked(r["status"], field(r, "parity.status"))
                     and field(r, path) is not None and record_name(r) not in rec["not_ranked"]),
                    key=lambda r: field(r, path) * (1 if lower else -1))
    if not scored:
        reasons = {field(r, "energy.reason") for r in cells} - {None} if objective == "energy" else set()
        return rec | {"recommended": None, "reason": f"no verified cell with {words}" + (
            f" ({'; '.join(sorted(reasons))})" if reasons else "")}
    best, unjudged = scored[0], not_judged(cells)
    value = field(best, path)
    answer = field(best, "serving.answer")
    direct = isinstance(answer, Mapping) and objective == "throughput"  # a serving answer brings its own span
    rec.update(recommended=record_name(best), value=value,
               ci95=None if unjudged else _interval(best, objective, value, direct), not_judged=unjudged,
               assumed=None if not str(field(best, "latency_ms.ci_method") or "").endswith(ASSUMED) else
               "this process only" if field(best, "timing.processes") == 1 else "between-process spread assumed",
               stability="not judged" if unjudged else stability_word(best) or "unknown",
               stability_advice="" if unjudged else field(best, "latency_ms.stability.advice") or "",
               energy_j_per_inference=field(best, "energy.joules_per_inference"),
               energy_missing=None if field(best, "energy.available") else
               (field(best, "energy.reason") or "no energy figures in this record"),
               run_id=field(best, "run_id"), precision_cost=precision_cost(best), accuracy=accuracy_said(best))
    if direct:  # a serving answer: LoadGen's verdicts and the search's bracket, not the rounds' statistics
        return rec | _served(best, scored, answer, path, unjudged)
    if len(scored) > 1:  # the runner-up's statistic over the best's (> 1: the best is better); energy's per round
        second = scored[1]
        cmp = energy_margin(best, second) if stat is None else comparison(second, best, stat)
        rec.update(runner_up=record_name(second))
        if not unjudged:  # a busy run's margin is no claim: the runner-up is named, never compared
            rec["margin"] = cmp
    return rec


def not_ranked(cells: list[Mapping[str, Any]], objective: str) -> dict[str, str]:
    """Each cell of a group that is not ranked, with why: failed, parity not passed, speed only (INT8 without labelled
    images), a server that held no load, the zoo's one round, an A/B's twin, a tail without the samples it needs."""
    out = {record_name(r): (r.get("error") or "failed") if r["status"] != "ok" else
           (field(r, "parity.reason") or SPEED_ONLY) if field(r, "parity.status") == "unjudged" else
           f"parity {field(r, 'parity.status')}" for r in cells if not ranked(r["status"], field(r, "parity.status"))}
    out.update({record_name(r): f"no load held p99 <= {field(r, 'serving.answer.bound_ms') or 0:g} ms for 3 tests "
                "in a row" + cut_short(r) for r in cells if field(r, "serving.answer.found") is False})
    out.update({record_name(r): f"timed in {field(r, 'config.timing.rounds')} round(s), one framework loaded at a "
                "time: the zoo's timing, for orientation, never ranked" for r in cells
                if ranked(r["status"], field(r, "parity.status"))
                and 0 < (field(r, "config.timing.rounds") or MIN_ROUNDS) < MIN_ROUNDS
                and str(field(r, "config.sequential")) == "True"})
    out.update({record_name(r): "an A/B twin (--ab-python): B's install, judged against its cell by inferbench "
                "compare RUN, never ranked beside it" for r in cells if field(r, "options.ab")})
    if objective in ("p90", "p99"):  # a tail is ranked only where each round holds it, over rounds to judge
        out.update({record_name(r): f"too few samples for a {objective} interval ({needed_samples(TAILS[objective])} "
                    f"a round needed, over {MIN_ROUNDS} rounds at least)" for r in cells
                    if ranked(r["status"], field(r, "parity.status"))
                    and field(r, f"latency_ms.{objective}_ci95") is None})
    return out


def _interval(best: Mapping[str, Any], objective: str, value: float, direct: bool) -> list[float] | None:
    """The recommended cell's 95% interval for ``objective``: latency's from its rounds (a tail's and energy's the
    record's own: raw samples may be a subsample), throughput's as the batch over the mean latency, a serving
    answer's its own span (offline's interval, a server's bracket)."""
    _, lower, stat, _, _ = OBJECTIVES[objective]
    sample = sample_of(best) if has_raw(best) else None
    found = None if stat is None or sample is None else interval(
        sample.latencies, sample.rounds, stat, sample.processes, sample.between)
    if objective in ("p90", "p99", "energy"):
        own = field(best, "energy.joules_per_inference_ci95" if objective == "energy" else
                    f"latency_ms.{objective}_ci95")
        found = None if own is None else (own[0], own[1], value)
    if direct:
        answer = field(best, "serving.answer")
        span = answer.get("qps_ci95") or answer.get("bracket")
        found = (span[0], span[1], value) if span and None not in span else None
    if found is None:
        return None
    lo, hi, centre = found
    return [lo, hi] if lower or direct else [value * centre / hi, value * centre / lo]


def _served(best: Mapping[str, Any], scored: list[Mapping[str, Any]], answer: Mapping[str, Any], path: str,
            unjudged: str | None) -> dict[str, Any]:
    """A serving answer's own figures (LoadGen's verdicts, the search's bracket, the configuration), and the
    runner-up's: offline's margin judged from the rounds, a server's bracket only."""
    out: dict[str, Any] = {"serving": {
        "scenario": field(best, "scenario"), "bound_ms": answer.get("bound_ms"), "bracket": answer.get("bracket"),
        "knobs": answer.get("knobs"), "confirmed": answer.get("held_in_a_row") or 0,
        "mlperf_valid": field(best, "serving.mlperf_valid"),
        "min_duration_ms": field(best, "serving.settings.min_duration_ms"), "stopped": answer.get("stopped")},
        "stability": "n/a", "stability_advice": ""}
    if len(scored) > 1:
        out.update(runner_up=record_name(scored[1]), runner_up_value=field(scored[1], path))
        if not scenario(str(field(best, "scenario"))).bound and not unjudged:  # samples/s a round: a margin to judge
            out["margin"] = served_margin(best, scored[1])
    return out


def precision_cost(record: Mapping[str, Any]) -> str | None:
    """What a reduced-precision cell's answer costs, said beside its speed: how its parity was judged and its top-1
    agreement with FP32 over many inputs (docs/method.md); None for FP32."""
    precision = field(record, "precision")
    if precision in (None, "fp32"):
        return None
    top1, n = field(record, "parity.agreement.top1.agreement"), field(record, "parity.agreement.inputs")
    ci, own = field(record, "parity.agreement.top1.ci95"), field(record, "parity.agreement.top1.own")
    if field(record, "parity.agreement.said"):  # a task's own measure after its post-processing, said by its task
        return f"computes in {precision.upper()}: {field(record, 'parity.agreement.said')}"
    if top1 is None:
        why = field(record, "parity.agreement.reason") or "not counted (--agreement-inputs 0)"
        return (f"computes in {precision.upper()}: passed its parity gate on 16 reference inputs; its agreement with "
                f"FP32 over many inputs: {why}")
    return (f"computes in {precision.upper()}: its top class is FP32's on {top1:.1%}"
            + (f" [95% CI {ci[0]:.1%}-{ci[1]:.1%}]" if ci else "") + f" of {int(n)} seeded inputs"
            + (f" (the model's own {SENSITIVITY_OF[precision].upper()}: {own:.1%})" if own is not None else ""))


def accuracy_said(record: Mapping[str, Any]) -> str | None:
    """A cell's top-1 accuracy on the user's labelled images (``--eval-dir``) beside FP32's, with intervals, and for a
    reduced precision MLPerf's verdict (docs/method.md); None without labelled images."""
    block = field(record, "parity.accuracy") or {}
    top1 = block.get("top1") or {}
    if not top1 and not block.get("said"):
        return f"accuracy {block['status'].replace('_', ' ')}: {block['reason']}" if block.get("reason") else None
    if block.get("said"):  # a task's own measure (a detector's mAP), said by its task
        text = str(block["said"])
    else:
        ci: Sequence[Any] = top1.get("ci95") or (None, None)
        diff: Sequence[Any] = top1.get("difference_ci95") or (None, None)
        points = float(top1["difference"]) * 100
        text = (f"top-1 accuracy {top1['accuracy']:.1%}" + (f" [95% CI {ci[0]:.1%}-{ci[1]:.1%}]" if None not in ci
                                                             else "")
                + f" on {block['images']} labelled images, FP32's {top1['fp32']:.1%}: "
                + f"{points:+.1f} points" + (
                    f" [{diff[0] * 100:+.1f} to {diff[1] * 100:+.1f}]" if None not in diff else ""))
    if block.get("decides"):
        text += f"; MLPerf's gate ({block.get('gate', 0.99):.0%} of FP32) {block['status']}"
    return text + (f" ({block['note']})" if block.get("note") else "")


def served_margin(best: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """The best's samples per second over the runner-up's (> 1: the best is better) from the rounds both measured in
    one run (paired: the same interleaved rounds), with a 95% interval; no claim where they were not paired."""
    def per_round(record: Mapping[str, Any]) -> dict[int, float]:
        used = set(field(record, "serving.answer.steps") or [])
        return {int(s["round"]): float(s["qps"]) for s in field(record, "serving.steps") or []
                if s.get("round") in used and isinstance(s.get("qps"), (int, float)) and s["qps"] > 0}

    return paired_margin(best, second, per_round, False, field(best, "throughput_per_s") / field(
        second, "throughput_per_s"), None)


def energy_margin(best: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """The runner-up's energy per inference over the best's (> 1: the best is better), each round's measured in the
    same interleaved rounds of one run (paired: a round's machine state weighs on both alike), with a 95% interval
    with the processes' part; no claim where they were not paired."""
    def per_round(record: Mapping[str, Any]) -> dict[int, float]:
        return {int(r): float(v) for r, v in (field(record, "energy.per_round_j_per_inference") or {}).items()
                if isinstance(v, (int, float)) and v > 0}

    return paired_margin(best, second, per_round, True, field(second, "energy.joules_per_inference") / field(
        best, "energy.joules_per_inference"), field(best, "timing.processes") or None)


def paired_margin(best: Mapping[str, Any], second: Mapping[str, Any],
                  per_round: Callable[[Mapping[str, Any]], dict[int, float]], lower: bool, point: float,
                  processes: int | None) -> dict[str, Any]:
    """How much better the best is than the runner-up (> 1: better) from a figure both measured in each of the same
    rounds of one run (``per_round``; ``lower``: lower is better), paired within rounds exactly as latency's margin
    is (:func:`inferbench.measure.stats.compare`: the ratio's own process part, ``processes`` workers a cell);
    ``point``, unjudged, where they were not paired."""
    a, b = per_round(best), per_round(second)
    common = sorted(set(a) & set(b)) if _group(best) is not None and _group(best) == _group(second) else []
    if len(common) < MIN_ROUNDS:
        return {"ratio": point, "ci95": None, "significant": None, "method": "none-not-paired-within-rounds"}
    first, other = (Sample([m[r] for r in common], common, processes) for m in ((b, a) if lower else (a, b)))
    cmp = compare(first, other, paired=True)
    return {k: cmp[k] for k in ("ratio", "ci95", "significant", "method")}


def not_judged(records: Iterable[Mapping[str, Any]]) -> str | None:
    """Why the margins, significance and stability of ``records`` (a group) are not judged: other work took the
    machine while they were measured, and the run did not say --allow-busy. None: they are judged."""
    records = list(records)  # records or rows of records.load (whose booleans may be NumPy's)
    taken = [r for r in records if busy(r)]  # the worst block's figure, as the validity line says it
    return f"the machine was busy: {validity_of(taken)['reason']}" if taken else None


def validity_of(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One verdict for records (a group, a run): not valid if one is not, unknown if one is unknown
    (:func:`inferbench.measure.trackers.machine.combine`); older records, which nothing watched, are unknown."""
    return combine([{"valid": field(r, "validity.valid"), "reason": field(r, "validity.reason")
                     or "machine state unknown: not recorded", "other_cores": field(r, "validity.other_cores")}
                    for r in records])


def has_raw(record: Mapping[str, Any]) -> bool:
    raw = field(record, "raw_latencies_ms")
    return raw is not None and not isinstance(raw, float) and len(raw) > 0


def cut_short(record: Mapping[str, Any]) -> str:
    """Where --time-budget cut a server search short: what it said, and the largest load one of its tests passed."""
    stopped, largest = field(record, "serving.answer.stopped"), field(record, "serving.answer.largest_valid_qps")
    if not stopped:
        return ""
    return f" before {stopped}" + (f" (the largest load VALID in one test: {largest:.1f} QPS, not confirmed)"
                                   if largest else "")
