"""The comparison behind ``inferbench compare OLD NEW``: has anything become slower? Per cell, NEW's median
latency over OLD's, with a 95% interval, for a CI job. ``inferbench compare RUN`` (one folder, made by
``run --ab-python``): each ``+ab-<digest>`` twin (B) over its cell (A), paired within the rounds of that one run
(:func:`ab_frame`), with the same verdicts and exit statuses; nothing between invocations enters, since one
invocation measured both.

Cells are matched on their identity (device model, threads, model, resolution, batch size, framework
with precision and variant — the variant names the environment passed on with ``--pass-env`` — scenario; a model
file's name carries its content's hash; not the host: a CI runner is rebuilt). Where both sides hold two or more
invocations of a cell (runs in sub-folders), they are pooled (:func:`pooled`): each run's log centre over its steady
rounds at its machine speed, NEW's mean over OLD's within each speed both ran at, with a t interval from the runs' own
spread between invocations — what no single run can see, measured, with no calibration. Otherwise, where a folder
holds several records of one cell, the latest is used and the line says so. One run a side: the interval is the
unpaired one (:func:`inferbench.analysis.ranking.comparison`): each side's spread between rounds and between its
worker processes, as measured in its run (records from before schema 6 have no measured process spread: an assumed
one is used and the line says so), plus the machine's spread between invocations beyond each run's own error
where ``benchmarks/aa_calibration.py --across`` measured it (the framework's own, else the largest). Only rounds the
machine ran through at one common speed are set side by side (a fixed matrix product read before and after every
round: :func:`inferbench.measure.trackers.speed.matched`); with no such speed for 4 rounds on each side, or a cell
measured while the machine was busy (not valid) on either side, or a tuned cell whose tuning chose another setting
(the record's ``tuning.digest``: the setting is part of the cell), the cell is ``not comparable``: never a regression,
never "faster". The geometric mean of the judged cells' ratios follows the table.

Verdicts: ``faster`` / ``slower`` (the interval excludes 1), ``no significant difference``, ``no
interval`` (fewer than 3 rounds, or no raw samples, on a side), ``not comparable``, and with ``--fail-above PCT``:
``REGRESSION`` when the whole interval lies above 1 + PCT/100 (slower by more than PCT percent with 95%
confidence: a noisy machine does not make CI flaky), or when NEW's outputs no longer pass parity, or
NEW failed where OLD ran. Exit status: 0, or 1 when ``--fail-above`` is given and a cell regressed; 2
for bad input; 3 when no cell in common could be judged (none has an interval): a gate that judged nothing
does not pass.

Why one file: compare's three ways of judging a cell (one run a side, several invocations pooled, an A/B's twins)
share their verdicts, the columns each side fills and the rounds at one machine speed; they read side by side.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import numbers
import re
import statistics
from typing import Any

from ..measure.stats import centre, geometric_mean, log_centre, t975
from ..measure.trackers.speed import matched, same_state
from ..records.table import device_model
from ..spec import IDENTITY
from .ranking import comparison, sample_of
from .ranking import has_raw as has_latencies

#: A variant's part that names an A/B twin (``--ab-python``).
AB_TAG = re.compile(r"ab-[0-9a-f]{8}")

#: Steady rounds at one common speed each side needs to be judged: two per worker process at two processes, so
#: that the spread within a process is measured (with 3, its interval ran to 0.97-2.63 for a true 1.3x).
MATCHED_ROUNDS = 4

#: What makes two records the same cell across folders (the host may differ: a CI runner is rebuilt).
KEY = ["device_model", "threads", *IDENTITY]
COLUMNS = (*KEY, "old_p50_ms", "new_p50_ms", "ratio", "ratio_ci_low", "ratio_ci_high", "verdict", "method",
           "drift_pct_per_h",
           "old_valid", "new_valid", "old_source", "new_source")
#: An A/B in one run's own columns (``compare RUN``): the twin's tag and B's interpreter.
AB_COLUMNS = ("b", "b_interpreter")


def compare_frames(old: Any, new: Any, fail_above: float | None = None, time_term: bool = True,
                   ) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per cell found in both frames (of :func:`inferbench.records.load`), and the lines about
    cells found on one side only or several times: several invocations on both sides are pooled
    (:func:`pooled`; ``time_term`` False: without its drift in time, as before it had one), else the latest record
    of each side is used."""
    notes = []
    sides: dict[str, dict[tuple[Any, ...], list[Any]]] = {}
    for name, df in (("OLD", old), ("NEW", new)):
        df = df.assign(device_model=[device_model(r) for _, r in df.iterrows()])
        sides[name] = {}
        for _, r in df.sort_values("created_at").iterrows():  # each cell's records, the latest last
            sides[name].setdefault(tuple(r[k] for k in KEY), []).append(r)
    for name, other in (("OLD", "NEW"), ("NEW", "OLD")):
        for key in sorted(set(sides[name]) - set(sides[other]), key=str):
            notes.append(f"only in {name}: {_label(dict(zip(KEY, key)))}")
    rows = []
    for key in sorted(set(sides["OLD"]) & set(sides["NEW"]), key=str):
        olds, news = sides["OLD"][key], sides["NEW"][key]
        if len(olds) >= POOLED_RUNS and len(news) >= POOLED_RUNS:
            row, why = pooled(dict(zip(KEY, key)), olds, news, fail_above, time_term)
            copies = "" if distinct(olds) == len(olds) and distinct(news) == len(news) else \
                f" ({len(olds)} and {len(news)} records: copies of one run count once)"
            notes.append(f"OLD holds {distinct(olds)} and NEW {distinct(news)} distinct invocations of "
                         f"{_label(dict(zip(KEY, key)))}{copies}: {why}")
            rows.append(row)
            continue
        for name, found in (("OLD", olds), ("NEW", news)):
            if len(found) > 1:
                notes.append(f"{name} holds {len(found)} records of {_label(dict(zip(KEY, key)))}: the latest is "
                             f"used (pooled only with {POOLED_RUNS} or more invocations on both sides)")
        rows.append(judged(dict(zip(KEY, key)), olds[-1], news[-1], fail_above, across=True))
    return rows, notes


#: Invocations of a cell each side needs for ``compare OLD NEW`` to pool them (:func:`pooled`): two give the spread
#: between invocations one degree of freedom a side (at least two: a side's spread is measured from them). One
#: against one cannot gate a 1.3x slowdown on a machine whose invocations differ by 6% (docs/method.md); three a side
#: do (simulated in tests/test_commands.py).
POOLED_RUNS = 2
assert POOLED_RUNS >= 2


def pooled(row: dict[str, Any], olds: list[Any], news: list[Any], fail_above: float | None, time_term: bool = True,
           ) -> tuple[dict[str, Any], str]:
    """``row`` judged from several invocations a side, and how (or why it was not pooled). Each run's log centre
    over its steady rounds at its most frequent machine speed (:func:`_steady`) is one sample; the runs are grouped by
    speed (this VM runs at two), NEW's mean over OLD's taken within each speed both sides ran at and combined (each
    speed weighted as its runs allow), with a t interval from the runs' own spread between invocations within
    speeds, pooled over the speeds and the sides — each run's own error lies within that spread, and nothing from a
    calibration is added. Where every run's time is known, a common drift in time is fitted beside the sides
    (:func:`_fit`: centre = group + slope × time), so that runs made one after another on a machine that drifts do
    not read as a difference; its slope is said, and its uncertainty is in the interval. The runs used are those alike
    the latest of their side (ran, verified, on a quiet machine, tuned to the same setting; a record found twice counts
    once); where the latest pair is not judged on its numbers (a failure, lost parity, a busy machine, another tuned
    setting), that verdict stands, and with fewer than two usable runs a side at speeds both ran at, the latest pair is
    judged as one."""
    latest = judged(row, olds[-1], news[-1], fail_above, across=True)
    if latest["ratio"] is None and not latest["verdict"].startswith("not comparable: no machine speed"):
        return latest, "the latest pair's verdict stands (its runs are not judged on their numbers)"
    found = [(side, *steady) for side, runs in (("old", olds), ("new", news)) for r in _alike(runs)
             for steady in [_steady(r)] if steady is not None]
    states: list[float | None] = []
    for _, speed, _, _ in found:
        if not any(_same(s, speed) for s in states):
            states.append(speed)
    times = _one_clock([when for *_, when in found])
    runs = [(side, next(i for i, s in enumerate(states) if _same(s, speed)), v, t)
            for (side, speed, v, _), t in zip(found, times)]
    both = [i for i in range(len(states)) if {"old", "new"} <= {side for side, g, _, _ in runs if g == i}]
    used = [sum(side == name and g in both for side, g, _, _ in runs) for name in ("old", "new")]
    groups = {(side, g) for side, g, _, _ in runs}
    if used[0] < POOLED_RUNS or used[1] < POOLED_RUNS or len(runs) - len(groups) < 1:
        return latest, (f"not pooled: {used[0]} OLD and {used[1]} NEW runs ran alike at machine speeds both sides ran "
                        f"at (steady for {MATCHED_ROUNDS} rounds), {POOLED_RUNS} a side needed; the latest pair is "
                        "judged as one")
    fit = _fit(runs, both, time_term)
    main = max(both, key=lambda g: _weight(runs, g))  # the speed most of the runs ran at: what the table shows
    centres = {side: statistics.fmean(v for s, g, v, _ in runs if s == side and g == main) for side in ("old", "new")}
    speeds = ",".join(f"{states[g]:.0f}" for g in both if states[g] is not None)
    out = row | _sides(olds[-1], news[-1]) | {
        "old_p50_ms": math.exp(centres["old"]), "new_p50_ms": math.exp(centres["new"]),
        "ratio": math.exp(fit["estimate"]),
        "method": f"invocations-pooled-t-95:{used[0]}/{len(olds)},{used[1]}/{len(news)}"
                  + (f"-at-{speeds}-gflops" if speeds else "") + ("+time" if fit["slope"] is not None else "")}
    said = "pooled, their spread between invocations measured from them" + (f"; {fit['said']}" if fit["said"] else "")
    if fit["inflation"] is not None and fit["inflation"] > MAX_INFLATION:
        wider = "without end" if math.isinf(fit["inflation"]) else f"{math.sqrt(fit['inflation']):.1f}x"
        return out | {"ratio": None, "verdict": "not comparable: OLD's runs and NEW's were not interleaved in time: a "
                      f"drift of the machine cannot be told from a change (a term for it widens the ratio's standard "
                      f"error {wider}); alternate OLD and NEW invocations (docs/cli.md) or measure both in one run "
                      "(--ab-python)"}, said
    if fit["slope"] is not None:
        out["drift_pct_per_h"] = _per_hour(fit["slope"])
    if fit["spread"] <= 0:  # runs that agree to the last digit: the same record found twice, not invocations
        return out | {"verdict": "no interval (the runs do not differ at all: the same records twice?)"}, said
    half = t975(fit["df"]) * math.sqrt(fit["spread"] * fit["variance"])
    ci = [math.exp(fit["estimate"] - half), math.exp(fit["estimate"] + half)]
    return out | {"ratio_ci_low": ci[0], "ratio_ci_high": ci[1], "verdict": _verdict(out["ratio"], ci, fail_above)}, \
        said


#: How much wider the time term may make a pooled interval's variance before the sides count as not interleaved
#: (the variance inflation factor of the side given time; 10 is the usual bound for collinearity): three runs a side
#: made one after another inflate it 4.4x, alternated 1.1x, OLD's made hours before NEW's minutes apart by thousands.
MAX_INFLATION = 10.0


def _weight(runs: list[tuple[str, int, float, float | None]], g: int) -> float:
    """A speed's weight in the pooled ratio: 1 / (1/k_old + 1/k_new) of its runs."""
    k = [sum(s == side and gg == g for s, gg, _, _ in runs) for side in ("old", "new")]
    return 1 / (1 / k[0] + 1 / k[1])


def _fit(runs: list[tuple[str, int, float, float | None]], both: list[int], time_term: bool) -> dict[str, Any]:
    """The pooled log ratio by least squares: a mean per side and speed (``runs``: side, speed group, log centre, start
    time in seconds) and, with ``time_term`` where every time is known and a degree of freedom is left, one slope in
    time common to all; NEW over OLD within each speed in ``both``, combined with :func:`_weight`. Returns the
    ``estimate``, its ``variance`` in units of the residual ``spread`` (with ``df``), the ``slope`` (log per second,
    None without one), the ``inflation`` of that variance a time term brings (None where no time is known or none
    differs; infinite where time and the sides cannot be told apart) and what was ``said`` of it."""
    import numpy as np

    groups = sorted({(side, g) for side, g, _, _ in runs})
    x = np.array([[float((side, g) == k) for k in groups] for side, g, _, _ in runs])
    y = np.array([v for _, _, v, _ in runs])
    weights = {g: _weight(runs, g) for g in both}
    c = np.array([(1 if side == "new" else -1) * weights.get(g, 0.0) for side, g in groups]) / sum(weights.values())
    plain = float(c @ np.linalg.inv(x.T @ x) @ c)
    said, inflation, times = None, None, [when for *_, when in runs]
    if time_term and None in times:
        said = "no term for time: a run's start is not known"
    elif time_term:
        t = np.array(times, dtype=float) - statistics.fmean(times)  # type: ignore[arg-type]
        xt, ct = np.column_stack([x, t]), np.append(c, 0.0)
        if not t.any():
            said = "no term for time: the runs' times do not differ"
        elif np.linalg.matrix_rank(xt) < xt.shape[1]:  # time is the groups' own: a drift and the sides are one
            inflation = math.inf
        else:
            inflation = float(ct @ np.linalg.inv(xt.T @ xt) @ ct) / plain
            if len(runs) - xt.shape[1] >= 1:
                x, c = xt, ct
            elif inflation <= MAX_INFLATION:  # else not comparable, and the verdict says why
                said = (f"no term for time: {len(runs)} runs in {len(groups)} groups leave no degree of freedom for "
                        f"it (the sides interleave: it would widen the ratio's standard error "
                        f"{math.sqrt(inflation):.1f}x)")
    inverse = np.linalg.inv(x.T @ x)
    theta = inverse @ x.T @ y
    residual = y - x @ theta
    df = len(runs) - x.shape[1]
    spread = float(residual @ residual) / df
    slope = float(theta[-1]) if x.shape[1] > len(groups) else None
    if slope is not None and inflation is not None and inflation <= MAX_INFLATION:
        se = math.sqrt(spread * inverse[-1, -1])
        lo, hi = (_per_hour(slope + k * t975(df) * se) for k in (-1, 1))
        said = (f"a drift in time fitted beside the sides: {_per_hour(slope):+.3g}%/h [95% CI {lo:+.3g} to "
                f"{hi:+.3g}], its uncertainty in the ratio's interval (the table's p50s are the sides' own, not at "
                "equal time)" + ("" if inflation <= 2 else f"; its standard error {math.sqrt(inflation):.1f}x wider "
                                 "for it: OLD and NEW were not alternated in time"))
    return {"estimate": float(c @ theta), "variance": float(c @ inverse @ c), "spread": spread, "df": df,
            "slope": slope, "inflation": inflation, "said": said}


def _per_hour(slope: float) -> float:
    """A drift in log per second as percent per hour (a rise too steep to say: infinite; a fall ends at -100)."""
    try:
        return 100 * math.expm1(slope * 3600)
    except OverflowError:  # only a rise overflows: a fall tends to -100
        return math.inf


def content(r: Any) -> str:
    """What makes a record one invocation: its raw latencies and their rounds (a copy of a run, its ids or dates
    edited or not, is the same invocation), else its run and creation."""
    raw, rounds = r.get("raw_latencies_ms"), r.get("raw_rounds")
    what: Any = [list(raw), list(rounds) if isinstance(rounds, list) else None] if isinstance(raw, list) and raw \
        else [r.get("run_id"), r.get("created_at")]
    return hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()


def distinct(runs: list[Any]) -> int:
    """How many invocations ``runs`` holds, counted by content (:func:`content`)."""
    return len({content(r) for r in runs})


def _alike(runs: list[Any]) -> list[Any]:
    """A side's runs alike its latest: ran, verified, measured on a quiet machine, tuned to the same setting (by the
    records' digests where both have one), each invocation once (by its content: :func:`content`)."""
    latest, seen, out = runs[-1], set(), []
    for r in runs:
        key = content(r)
        if key in seen or r["status"] != "ok" or r.get("validity.valid") is False or r["parity.status"] == "failed":
            continue
        a, b = _chosen(r), _chosen(latest)
        if (a is None) != (b is None) or _tuned_otherwise(a, b):
            continue
        seen.add(key)
        out.append(r)
    return out


def _steady(r: Any) -> tuple[float | None, float, tuple[float | None, float | None]] | None:
    """A run's machine speed, log centre over its steady rounds at its most frequent speed (a run without per-round
    readings: its median speed, else None, and all its rounds) and when it measured them (:func:`_when`); None where
    it has too few such rounds."""
    readings = r.get("machine_state.speed.rounds")
    median = r.get("machine_state.speed.gflops_median")
    speed = float(median) if isinstance(median, numbers.Real) and median == median and float(median) > 0 else None
    kept = r
    if isinstance(readings, list) and readings and _has_raw(r):
        found = matched(readings, readings, MATCHED_ROUNDS, set(r["raw_rounds"]), set(r["raw_rounds"]))
        if found is None:
            return None
        kept, speed = _rounds(r, found[0]), found[2]
    side = log_centre(sample_of(kept)) if _has_raw(kept) else None
    return None if side is None else (speed, side[0], _when(kept))


def _when(r: Any) -> tuple[float | None, float | None]:
    """When a run measured its rounds, in seconds since the epoch, by two clocks: the mean start of its kept rounds'
    blocks (``timing.blocks``) and its record's ``created_at`` (written after them); None where one is not known."""
    blocks, rounds = r.get("timing.blocks"), r.get("raw_rounds")
    kept = set(rounds) if isinstance(rounds, list) else None
    starts = [float(b["started_at"]) for b in (blocks if isinstance(blocks, list) else []) if isinstance(b, dict)
              and _a_time(b.get("started_at")) and (kept is None or b.get("round") in kept)]
    try:
        created: float | None = datetime.datetime.strptime(str(r.get("created_at")), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        created = None
    return statistics.fmean(starts) if starts else None, created


def _a_time(value: Any) -> bool:
    """A wall-clock time in seconds since the epoch: a finite number after 2001 (not a flag, not the 0 of a default)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 1e9


def _one_clock(whens: list[tuple[float | None, float | None]]) -> list[float | None]:
    """The runs' times by one clock for all (their blocks' starts where every run has them, else their records'
    creation), so that no run's time is offset by the length of its rounds; all None where neither clock is whole."""
    for k in (0, 1):
        if all(w[k] is not None for w in whens):
            return [w[k] for w in whens]
    return [None] * len(whens)


def _same(a: float | None, b: float | None) -> bool:
    return a is None and b is None or a is not None and b is not None and bool(same_state(a, b))


def _verdict(ratio: float, ci: list[float], fail_above: float | None) -> str:
    """NEW over OLD's verdict from its 95% interval: faster or slower where it excludes 1, a REGRESSION with
    ``fail_above`` where it lies wholly above 1 + fail_above/100."""
    if ci[0] <= 1.0 <= ci[1]:
        return "no significant difference"
    if ratio < 1:
        return "faster"
    if fail_above is not None and ci[0] > 1 + fail_above / 100:
        return f"REGRESSION (slower by more than {fail_above:g}%)"
    return "slower"


def ab_frame(df: Any, fail_above: float | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """An A/B in one run (``--ab-python``): one row per cell with a ``+ab-<digest>`` twin, B (the twin) over A paired
    within the rounds of the group that measured both (no term between invocations: one invocation measured both);
    a cell whose twin (or a twin whose cell) is missing, or was measured in another group (a sweep resumed), is
    ``not comparable``. The lines: several records of one cell (the latest is used), and B's install."""
    df = df.assign(device_model=[device_model(r) for _, r in df.iterrows()])
    sides: dict[tuple[Any, ...], dict[str, Any]] = {}  # the cell without its twin's tag -> {"A": row, "ab-...": row}
    notes: list[str] = []
    for _, r in df.sort_values("created_at").iterrows():
        parts = [p for p in (r["variant"] if isinstance(r["variant"], str) else "").split("+") if p]
        twin = next((p for p in parts if AB_TAG.fullmatch(p)), "A")
        key = (*(r[k] for k in KEY if k not in ("framework", "variant")), r["framework_key"],
               "+".join(p for p in parts if p != twin))
        if twin in sides.get(key, {}):
            notes.append(f"several records of {_label(dict(r[KEY]))}: the latest is used")
        sides.setdefault(key, {})[twin] = r
    rows = []
    for found in sides.values():
        twins = [t for t in found if t != "A"]
        if not twins:  # a cell of an A/B run (its config names B) whose own twin is missing: not judged, and said
            a = found["A"]
            if isinstance(a.get("config.ab.digest"), str):
                rows.append(_apart({k: a[k] for k in KEY}, a, None, "not comparable: its twin (B) was not measured "
                                   "(left out by --time-budget)"))
            continue
        for twin in twins:
            a, b = found.get("A"), found[twin]
            if a is None:
                rows.append(_apart({k: b[k] for k in KEY}, None, b, "not comparable: the twin's own cell (A) is not "
                                   "in this folder") | {"b": twin, "b_interpreter": b.get("environment.interpreter")})
                continue
            if a["status"] == b["status"] == "ok" and (_group(a) is None or _group(a) != _group(b)):
                row = _apart({k: a[k] for k in KEY}, a, b, "not comparable: A and B were measured in different "
                             "groups (a sweep resumed): not paired within rounds")
            else:
                row = judged({k: a[k] for k in KEY}, a, b, fail_above, across=False, sides=("A", "B"))
            rows.append(row | {"b": twin, "b_interpreter": b.get("environment.interpreter")})
    for install in sorted({str(r["b_interpreter"]) for r in rows if r.get("b_interpreter")}):
        notes.append(f"B: {install}")
    return rows, notes


def _group(r: Any) -> Any:
    group = r.get("timing.group")
    return group if isinstance(group, str) else None


def _sides(o: Any, n: Any) -> dict[str, Any]:
    """A row's columns for what each side has (None: a side missing), before any ratio is judged."""
    return {"old_p50_ms": None if o is None else o["p50_ms"], "new_p50_ms": None if n is None else n["p50_ms"],
            "ratio": None, "ratio_ci_low": None, "ratio_ci_high": None, "method": None, "drift_pct_per_h": None,
            "old_valid": "unknown" if o is None else _valid(o), "new_valid": "unknown" if n is None else _valid(n),
            "old_source": None if o is None else o["_source"], "new_source": None if n is None else n["_source"]}


def _apart(row: dict[str, Any], o: Any, n: Any, verdict: str) -> dict[str, Any]:
    """A row that is not judged, with what each side has."""
    return row | _sides(o, n) | {"verdict": verdict}


def judged(row: dict[str, Any], o: Any, n: Any, fail_above: float | None, across: bool,
           sides: tuple[str, str] = ("OLD", "NEW")) -> dict[str, Any]:
    """``row`` with NEW's (B's) latency over OLD's (A's), its interval and the verdict; ``across``: from two
    invocations (only rounds at one machine speed common to both), else two cells of one run, paired. A tuned cell
    whose tuning chose another setting on the other side is not comparable (its setting is part of the cell)."""
    gate = fail_above is not None
    old, new = sides
    row = row | _sides(o, n)
    busy = [side for side, r in ((old, o), (new, n)) if r.get("validity.valid") is False]
    chosen = {side: _chosen(r) for side, r in (("old", o), ("new", n))}
    settings = {side: {k: v for k, v in c.items() if k != "_digest"} for side, c in chosen.items() if c is not None}
    tuned_otherwise = _tuned_otherwise(chosen["old"], chosen["new"])
    speed = None
    if across:
        o, n, speed = _at_one_speed(o, n)
    if busy:
        row["verdict"] = f"not comparable: {' and '.join(busy)} measured on a busy machine (not valid)"
    elif speed is not None and speed["not_comparable"]:
        row["verdict"] = speed["not_comparable"]
    elif o["status"] != "ok" or n["status"] != "ok":
        row["verdict"] = "failed in " + " and ".join(s for s, r in ((old, o), (new, n)) if r["status"] != "ok")
        row["verdict"] += " (REGRESSION)" if gate and n["status"] != "ok" and o["status"] == "ok" else ""
    elif n["parity.status"] == "failed" and o["parity.status"] != "failed":
        row["verdict"] = ("REGRESSION: " if gate else "") + f"parity failed in {new}"
    elif n["parity.status"] == "unjudged" and o["parity.status"] == "passed":
        row["verdict"] = f"not comparable: {new}'s accuracy was not judged (no labelled images), {old}'s passed"
    elif tuned_otherwise:  # the setting is part of what is measured (the record's tuning.digest): not the same cell
        row.update(tuned=settings, verdict=(
            f"not comparable: tuning chose another setting ({old} {_setting(settings['old'])}, {new} "
            f"{_setting(settings['new'])}): the setting is part of the cell (--tune off gates the code alone)"))
    else:
        cmp = comparison(n, o)
        ci = cmp["ci95"] or [None, None]
        row.update(ratio=cmp["ratio"], ratio_ci_low=ci[0], ratio_ci_high=ci[1], method=cmp["method"])
        if speed is not None and speed.get("method"):
            row.update(method=f"{cmp['method']}+{speed['method']}", old_p50_ms=o["p50_ms"], new_p50_ms=n["p50_ms"])
        if cmp["ci95"] is None:
            row["verdict"] = f"no interval ({cmp['method']})"
        elif not across and not str(cmp["method"]).startswith("paired"):  # one run's twins, yet not in one group
            row.update(ratio_ci_low=None, ratio_ci_high=None,
                       verdict="not comparable: A and B were not measured in the same rounds (not paired)")
        else:
            row["verdict"] = _verdict(cmp["ratio"], ci, fail_above)
    return row


def _chosen(r: Any) -> dict[str, Any] | None:
    """The setting a tuned cell's tuning chose (its flattened ``tuning.chosen.*`` columns; {} for inferbench's own
    default) with its digest where the record has one (``_digest``), None for a cell that was not tuned."""
    if not isinstance(r.get("tuning.reason"), str):
        return None
    prefix = "tuning.chosen."
    chosen = {k[len(prefix):]: v for k, v in r.items() if k.startswith(prefix) and v is not None and v == v}
    return chosen | ({"_digest": r["tuning.digest"]} if isinstance(r.get("tuning.digest"), str) else {})


def _tuned_otherwise(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two tuned cells' chosen settings (:func:`_chosen`) differ: by the settings, or by the records' digests where
    both have one (False where either was not tuned)."""
    if a is None or b is None:
        return False
    digests = {a.get("_digest"), b.get("_digest")}
    return ({k: v for k, v in a.items() if k != "_digest"} != {k: v for k, v in b.items() if k != "_digest"}
            or None not in digests and len(digests) > 1)


def _setting(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(setting.items())) or "the default"


def _at_one_speed(o: Any, n: Any) -> tuple[Any, Any, dict[str, Any] | None]:
    """Both sides reduced to their rounds at one common machine speed (:func:`inferbench.measure.trackers.speed.
    matched`: steady rounds, read before and after, at one state), with what was done; ``not_comparable`` says why
    when no common speed has enough rounds. Sides without per-round readings (older records): their median speeds,
    compared whole; None when a side has no speed at all."""
    readings = [r.get("machine_state.speed.rounds") for r in (o, n)]
    if all(isinstance(x, list) and x for x in readings) and all(_has_raw(r) for r in (o, n)):
        found = matched(readings[0], readings[1], MATCHED_ROUNDS, set(o["raw_rounds"]), set(n["raw_rounds"]))
        if found is None:
            return o, n, {"not_comparable": f"not comparable: no machine speed common to both runs for "
                          f"{MATCHED_ROUNDS} or more rounds (the machine itself switched speed: a fixed matrix product "
                          "read before and after every round)"}
        ra, rb, centre = found
        total = [len({int(x["round"]) for x in r}) - 1 for r in readings]  # the last reading follows the last round
        method = f"rounds-at-{centre:.0f}-gflops:{len(ra)}/{total[0]},{len(rb)}/{total[1]}"
        return _rounds(o, ra), _rounds(n, rb), {"not_comparable": None, "method": method}
    speeds = [r.get("machine_state.speed.gflops_median") for r in (o, n)]
    if same_state(*speeds) is False:
        return o, n, {"not_comparable": f"not comparable: the machine itself ran at another speed ({speeds[0]:.0f} "
                                        f"and {speeds[1]:.0f} GFLOP/s on a fixed matrix product)"}
    return o, n, None


def _has_raw(r: Any) -> bool:
    """Raw latencies (:func:`inferbench.analysis.ranking.has_raw`) with the round of each."""
    return has_latencies(r) and isinstance(r.get("raw_rounds"), list)


def _rounds(r: Any, keep: list[int]) -> dict[str, Any]:
    """A side with only the raw latencies of rounds ``keep`` (and their p50: the rounds' centre, as ranked)."""
    wanted = set(keep)
    pairs = [(x, k) for x, k in zip(r["raw_latencies_ms"], r["raw_rounds"]) if k in wanted]
    out = dict(r)
    out.update(raw_latencies_ms=[x for x, _ in pairs], raw_rounds=[k for _, k in pairs],
               p50_ms=centre([x for x, _ in pairs], [k for _, k in pairs]))
    return out


def geometric_mean_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The geometric mean of the judged cells' NEW/OLD ratios with its interval (as pyperf's compare_to gives one)."""
    return geometric_mean([(r["ratio"], (math.log(r["ratio_ci_high"]) - math.log(r["ratio_ci_low"])) / (2 * 1.96))
                           for r in rows if r["ratio_ci_low"] is not None])


def summary_lines(rows: list[dict[str, Any]], ab: bool = False) -> list[str]:
    """How many cells were judged and how many abstained on (and why), the geometric mean of the judged cells'
    NEW/OLD ratios with its interval, and a line when some side's spread between processes was assumed, not
    measured (``ab``: an A/B in one run, B over A paired within its rounds)."""
    judged = [r for r in rows if r["ratio_ci_low"] is not None]
    of = "B/A" if ab else "NEW/OLD"
    apart = [r["verdict"] for r in rows if r["verdict"].startswith(("not comparable", "no interval"))]
    failed = len(rows) - len(judged) - len(apart)  # failed, or parity failed: said, with no ratio to judge
    out = [f"judged {len(judged)} of {len(rows)} " + ("cells of the A/B run" if ab else "cells in common")
           + (f", {failed} failed" if failed else "") + (
        f"; abstained on {len(apart)} ({len(apart) / len(rows):.0%}): "
        f"{sum(v.startswith('not comparable') for v in apart)} not comparable, "
        f"{sum(v.startswith('no interval') for v in apart)} without an interval" if apart else "")]
    gm = geometric_mean_of(rows)
    if gm is not None and len(judged) > 1:
        out.append(f"geometric mean {of} over {gm['cells']} cells: {gm['ratio']:.3f} "
                   f"[95% CI {gm['ci95'][0]:.3f}-{gm['ci95'][1]:.3f}]")
    calibrated = [r for r in judged if "invocation-calibrated" in (r.get("method") or "")
                  or (r.get("method") or "").startswith("invocations-pooled")]  # the runs' own spread, measured
    paired = [r for r in judged if (r.get("method") or "").startswith("paired")]
    if ab and judged:
        out.append(f"{len(paired)} of {len(judged)} judged cells paired with their twin within the run's rounds: one "
                   "invocation measured both, so no spread between invocations enters their intervals")
    elif judged and len(calibrated) < len(judged):
        out.append(f"{len(judged) - len(calibrated)} of {len(judged)} judged cells come from a machine whose spread "
                   "between invocations was never measured (python benchmarks/aa_calibration.py --across measures "
                   "it): their intervals hold within a run, and may call identical runs different")
    assumed = [r for r in judged if "assumed" in (r.get("method") or "")]
    if assumed:
        out.append(f"{len(assumed)} of {len(judged)} judged cells have a side whose spread between processes was not "
                   "measured (one process, a record of schema 5 or older) or came out at 0 from too few processes: an "
                   "assumed 1.5% stands in for it, not a measurement")
    return out


def calibration_lines(old: Any, new: Any) -> list[str]:
    """Per side, the calibration between invocations its intervals used (when and how it was measured, from which
    file), or the file that was ignored and why."""
    out = []
    for side, df in (("OLD", old), ("NEW", new)):
        cols = {k: df.get(f"environment.invocation_spread.{k}") for k in ("file", "sd", "measured_at", "by",
                                                                          "invocations", "ignored")}
        if cols["file"] is None:
            continue
        seen = {}
        for i in range(len(df)):
            file = cols["file"].iloc[i]
            if isinstance(file, str) and file not in seen:
                seen[file] = {k: (c.iloc[i] if c is not None else None) for k, c in cols.items()}
        for file, c in seen.items():
            if isinstance(c["ignored"], str):
                out.append(f"{side}: the calibration {file} was ignored: {c['ignored']}")
            elif isinstance(c["sd"], float):
                count = c["invocations"]
                runs = f" over {float(count):.0f} invocations" if isinstance(count, numbers.Real) \
                    and count == count else ""  # a NumPy number from the frame, NaN when absent
                out.append(f"{side}: intervals add the spread between invocations (largest sd {c['sd']:.2%}) measured "
                           f"{c['measured_at']} by {c['by']}{runs} ({file})")
    return out


def _valid(row: Any) -> str:
    """A side's validity (was the machine quiet enough?) in a word."""
    value = row.get("validity.valid")
    return "yes" if value is True else "NO" if value is False else "unknown"


#: Why two folders' cells do not pair, per identity field that differs, and how to get a comparison.
UNPAIRED = {
    "device_model": "measured on other machines (compare pairs one machine's cells; inferbench report OLD NEW sets "
                    "machines side by side)",
    "threads": "other thread counts (give both runs the same --threads)",
    "model": "other models", "resolution": "other resolutions (the same --resolution)",
    "batch_size": "other batch sizes (the same --batch-size)",
    "framework": "other runtimes (the same --framework)",
    "precision": "other precisions (the same --precision)",
    "scenario": "other scenarios (the same --scenario)",
    "variant": "other variants (tuned against untuned: --quick measures the best set untuned, a full run tunes it; "
               "give both the same --tune, and the same options such as --channels-last)",
}


def why_unpaired(old: Any, new: Any) -> str:
    """Why no cell of ``old`` pairs with one of ``new`` (frames of :func:`inferbench.records.load`): each identity
    field whose values the two sides do not share, with both sides' values and how to get a comparison."""
    sides = [df.assign(device_model=[device_model(r) for _, r in df.iterrows()]) for df in (old, new)]
    said = []
    for key in KEY:
        column = "framework_key" if key == "framework" else key  # the runtime alone (its display name has the rest)
        a, b = ({str(v) or "none" for v in df[column]} if column in df else {"none"} for df in sides)
        if a != b:
            show = [", ".join(sorted(v)[:4]) + (" ..." if len(v) > 4 else "") for v in (a, b)]
            said.append((bool(a & b), f"{UNPAIRED[key]}: OLD {show[0]}, NEW {show[1]}"))
    said.sort(key=lambda x: x[0])  # the fields with nothing in common first: those alone forbid every pair
    return "; ".join(text for _, text in said) or "the same cells, but none measured successfully on both sides"


def _label(cell: dict[str, Any]) -> str:
    return (f"{cell['model']}@{cell['resolution']} {cell['framework']} bs{cell['batch_size']} on "
            f"{cell['device_model']}, {cell['threads']} threads")

