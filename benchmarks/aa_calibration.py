"""A/A calibration: how often does inferbench call two measurements of the *same* thing different?

Two modes.

Within one run (default): one configuration (onnxrt, MobileNetV3-Large 224, batch 1) measured as two cells of one
group — two cells, each with its worker processes, interleaved in rounds exactly as a run measures its cells —
``--repeats`` times; each repeat asks the question a run answers for two frameworks: is the paired ratio of their
medians significantly different from 1 at 95%? The iid bootstrap of the scripts inferbench replaces is shown
beside it.

Across invocations (``--across``), what ``compare`` is used for in CI: first ``--invocations`` plain runs of one
configuration (``inferbench run --framework onnxrt,openvino --tune off``) measure this machine's spread between
invocations — per framework, over each run's steady rounds at one machine speed, as ``compare`` sets them side by
side — and write it beside the artifact cache (every later run records it, and ``compare`` adds it to both sides);
then as many again, and ``compare`` between every pair of those (45 pairs for 10 runs): of the pairs it judged (not
"not comparable"), how often does it call identical runs "significant", and "REGRESSION" with ``--fail-above
10`` (goal: at most 5%), and on how many pairs does it abstain (goal: at most 20% on a quiet machine)? Then, with
``--slowdown FRAMEWORK:FACTOR``, as many runs again with that framework slowed down on purpose (inferbench's
test-only ``INFERBENCH_TEST_SLOWDOWN``: a fixed sleep after each call, calibrated in the worker)
paired with the plain ones: a real slowdown must still be caught (goal for 1.3x: "REGRESSION" in at least 50% of
the judged pairs), and the slowdown the hook made is verified by a paired A/B within each run (the slowed
framework over the other, slowed runs over plain). ``--busy N`` runs every invocation with
N busy loops beside it: the runs must say they are not valid, and ``compare`` must call such pairs "not
comparable", never a regression.

An A/B in one run (``--ab``), what a CI job that can install both sides uses: ``--invocations`` runs of ``inferbench
run --ab-python B`` whose B is this interpreter (an A/A) and, with ``--slowdown``, as many whose B's workers alone
are slowed, alternating; ``compare RUN --fail-above 10`` on each: B against A paired within the run's rounds, with
no spread between invocations to estimate.

    python benchmarks/aa_calibration.py [--repeats 40] [--framework onnxrt] [--rounds 8] [--duration 2]
    python benchmarks/aa_calibration.py --ab --out DIR [--invocations 10] [--frameworks onnxrt,openvino]
                                        [--slowdown onnxrt:1.3] [--busy N] [--reuse]
    python benchmarks/aa_calibration.py --across --out DIR [--invocations 10] [--frameworks onnxrt,openvino]
                                        [--slowdown onnxrt:1.3] [--busy N] [--cache-dir DIR] [--reuse]
    python benchmarks/aa_calibration.py --pooled 3 --out DIR   # an --across calibration's runs, K a side pooled
    python benchmarks/aa_calibration.py --time-ordered DIR [DIR ...] --out OUT   # calibrations' runs in time order

Looks inside: compare's own estimators (the interval within a run, between invocations, pooled) and a group measured
in-process; the Python API (inferbench.api) has no such piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def wilson(k: int, n: int) -> str:
    """A rate with its Wilson score interval."""
    if not n:
        return "0/0"
    z, ph = 1.96, k / n
    centre = (ph + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{k}/{n} = {ph:.1%} [95% CI {max(0, centre - half):.1%}-{min(1, centre + half):.1%}]"


def within(args: argparse.Namespace) -> None:
    import numpy as np

    from inferbench.analysis.ranking import sample_of
    from inferbench.execution.childenv import child_env
    from inferbench.execution.exports import ensure_exports
    from inferbench.execution.group import cell_job
    from inferbench.execution.plan import build
    from inferbench.execution.progress import Progress
    from inferbench.execution.rounds import measure_group
    from inferbench.measure.stats import compare, iid_compare
    from inferbench.options import with_defaults
    from inferbench.registry.frameworks import get_framework

    values = with_defaults({"frameworks": [args.framework], "rounds": args.rounds, "duration": args.duration,
                            "cache_dir": args.cache_dir, "device": "cpu", "tune": "off"}, "run")
    built = build(values)
    config, (cell,) = built.config, built.cells
    fw = get_framework(cell.framework)
    quiet = Progress(1, open(os.devnull, "w"))
    folder, failed = ensure_exports(config, cell.model, cell.resolution, [fw], (cell.batch_size,), quiet)
    if failed:
        sys.exit(f"export failed: {failed}")
    env = child_env(config, fw, cell)
    print(f"A/A: {cell.label} measured as two cells, {args.repeats} times; {args.rounds} rounds over "
          f"{config.processes} processes each, {args.duration:g} s per cell, {config.threads} threads")
    paired_sig = iid_sig = 0
    start = time.monotonic()
    for i in range(args.repeats):
        jobs = [cell_job(config, cell, folder, (cell.batch_size,), {"group": f"aa/{i}", "group_cells": 2})] * 2
        a, b = measure_group(jobs, [env, env], config.seed + i, lambda label, text: None)
        if not (a.ok and b.ok):
            sys.exit(f"a measurement failed: {a.error or b.error}")
        ra, rb = ({**r.cell.blocks, "timing": r.cell.blocks["timing"]} for r in (a, b))
        cmp = compare(sample_of(ra), sample_of(rb), paired=True)
        iid = iid_compare(ra["raw_latencies_ms"], rb["raw_latencies_ms"])
        paired_sig += bool(cmp["significant"])
        iid_sig += bool(iid["significant"])
        print(f"  {i + 1:3d}: ratio {cmp['ratio']:.4f} [{cmp['ci95'][0]:.4f}, {cmp['ci95'][1]:.4f}]"
              f"{'  significant' if cmp['significant'] else ''}   iid: "
              f"{'significant' if iid['significant'] else 'not significant'}", flush=True)
    print(f"declared significant (nominal 5%): rounds and processes {wilson(paired_sig, args.repeats)}; iid "
          f"bootstrap {wilson(iid_sig, args.repeats)}; {time.monotonic() - start:.0f} s ({np.__name__} "
          f"{np.__version__})")


def invoke(folder: Path, frameworks: str, cache_dir: str, busy: int, slowdown: str | None,
           extra: tuple[str, ...] = ()) -> float:
    """One plain ``inferbench run`` into ``folder`` (with ``extra`` options), with ``busy`` busy loops beside it;
    returns its wall time."""
    env = {**os.environ, **({"INFERBENCH_TEST_SLOWDOWN": slowdown} if slowdown else {})}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(1.0 if busy else 0.0)
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "inferbench", "run", "--framework", frameworks, "--tune", "off",
                               "--output-dir", str(folder), "--cache-dir", cache_dir, "-q", *extra],
                              capture_output=True, text=True, env=env)
        wall = time.monotonic() - start
    finally:
        for hog in hogs:
            hog.kill()
    if proc.returncode not in (0, 1):
        sys.exit(f"inferbench run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return wall


def verdicts(old: Path | list[Path], new: Path | list[Path], fail_above: float = 10.0,
             sd: dict | None = None) -> list[dict]:
    """``compare``'s rows for one pair of runs (or of sets of runs: pooled), as the command computes them (``sd``: a
    calibration in place of the one the records carry, for runs re-analysed with ``--reuse``)."""
    from inferbench.analysis.comparison import compare_frames
    from inferbench.records.load import load

    frames = [load(old), load(new)]
    if sd is not None:
        frames = [calibrated(f, sd) for f in frames]
    rows, _ = compare_frames(*frames, fail_above)
    return rows


def tally(pairs: list[tuple[Any, Any]], sd: dict | None = None, ab: bool = False) -> dict[str, dict[str, int]]:
    """Per framework: pairs compared, called significant (faster or slower), REGRESSION, not comparable (``ab``:
    each pair's first folder is one A/B run, B judged against A within it, as ``compare RUN`` does)."""
    from inferbench.analysis.comparison import ab_frame
    from inferbench.records.load import load

    out: dict[str, dict[str, int]] = {}
    for old, new in pairs:
        for row in ab_frame(load(old), 10.0)[0] if ab else verdicts(old, new, sd=sd):
            t = out.setdefault(row["framework"], {"pairs": 0, "significant": 0, "slower": 0, "regression": 0,
                                                  "not_comparable": 0, "no_interval": 0})
            t["pairs"] += 1
            v = row["verdict"]
            t["significant"] += v in ("faster", "slower") or v.startswith("REGRESSION (slower")
            t["slower"] += v == "slower" or v.startswith("REGRESSION (slower")
            t["regression"] += "REGRESSION" in v
            t["not_comparable"] += v.startswith("not comparable")
            t["no_interval"] += v.startswith("no interval")
    return out


def across(args: argparse.Namespace) -> None:
    """Calibrate, then evaluate: the first ``--invocations`` plain runs measure this machine's spread between
    invocations (written beside the artifact cache, where every later run records it); the next ones, which carry
    it, are compared pairwise, with the slowed and busy runs, and give the rates."""
    import contextlib
    import io

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    modes = [("calibrate", 0, None, args.invocations), ("aa", 0, None, args.invocations)]
    if args.slowdown:
        modes.append(("slowed", 0, args.slowdown, max(3, args.invocations // 2)))
    if args.busy:
        modes.append((f"busy-{args.busy}", args.busy, None, args.invocations))
    runs: dict[str, list[Path]] = {}
    walls: dict[str, list[float]] = {}
    calibration = None
    for name, busy, slowdown, count in modes:
        runs[name], walls[name] = [], []
        for i in range(count):
            folder = out / name / f"{i:02d}"
            if args.reuse and folder.is_dir():  # re-analysed: the run made before
                walls[name].append(float("nan"))
            else:
                walls[name].append(invoke(folder, args.frameworks, args.cache_dir, busy, slowdown))
            (run_dir,) = [p for p in folder.iterdir() if p.is_dir()]
            runs[name].append(run_dir)
            print(f"{name} {i + 1}/{count}: {walls[name][-1]:.0f} s", file=sys.stderr, flush=True)
        if name == "calibrate":
            calibration = calibrate(runs[name], args.cache_dir, args.frameworks)
            print(f"calibrated: sd between invocations {calibration['sd']:.2%} -> {calibration['file']}",
                  file=sys.stderr, flush=True)
    quiet_io = io.StringIO()
    with contextlib.redirect_stderr(quiet_io):  # the loader's notes on every pair
        sd = calibration if args.reuse else None
        results = {"aa": tally(list(itertools.combinations(runs["aa"], 2)), sd)}
        if args.slowdown:
            results["slowed"] = tally([(a, s) for a in runs["aa"] for s in runs["slowed"]], sd)
        if args.busy:
            results[f"busy-{args.busy}"] = tally(list(itertools.combinations(runs[f"busy-{args.busy}"], 2)), sd)
    spread = process_spread(runs["aa"])
    verified = verify_slowdown(runs["aa"], runs["slowed"], args.slowdown) if args.slowdown else None
    lines = [f"calibration: {len(runs['calibrate'])} plain invocations of `inferbench run --framework "
             f"{args.frameworks} --tune off` measured the spread between invocations at one machine speed: "
             + ", ".join(f"{fw} {sd:.2%}" if sd is not None else f"{fw} not measured"
                         for fw, sd in calibration["per_framework"].items())  # type: ignore[index]
             + f" (the runs' speeds on a fixed matrix product: {calibration['speeds']})",  # type: ignore[index]
             f"then {len(runs['aa'])} more, which carry it, compared pairwise ({math.comb(len(runs['aa']), 2)} pairs "
             "per framework); --fail-above 10"]
    for name, table in results.items():
        for fw, t in sorted(table.items()):
            judged = t["pairs"] - t["not_comparable"] - t["no_interval"]  # the rates: of the pairs compare judged
            lines.append(f"  {name:8s} {fw:10s} of {t['pairs']} pairs, {t['not_comparable']} not comparable, "
                         f"{t['no_interval']} without an interval (abstained: "
                         f"{wilson(t['pairs'] - judged, t['pairs'])}); of the {judged} judged: significant "
                         f"{wilson(t['significant'], judged)}; slower {wilson(t['slower'], judged)}; REGRESSION "
                         f"{wilson(t['regression'], judged)}")
    if verified is not None:
        lines.append(verified["said"])
    lines.append("measured spread between worker processes within a run (pooled per run; median over the plain "
                 "runs): " + ", ".join(f"{fw} {sd:.2%}" for fw, sd in spread.items()))
    lines.append("wall time per invocation: " + ", ".join(f"{k} {sum(v) / len(v):.0f} s" for k, v in walls.items()))
    (out / "calibration.json").write_text(json.dumps({"frameworks": args.frameworks, "slowdown": args.slowdown,
                                                      "busy": args.busy, "calibration": calibration,
                                                      "results": results, "process_sd": spread, "walls_s": walls,
                                                      "slowdown_verified": verified},
                                                     indent=1))
    (out / "calibration.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def pooled_runs(args: argparse.Namespace) -> None:
    """``compare OLD NEW`` with ``--pooled K`` invocations a side, from the runs an ``--across`` calibration made in
    ``--out`` (nothing is run, and its own files are left as they are): 40 random splits of its plain runs (``aa/``
    and ``calibrate/``: alike, and no calibration enters a pooled comparison) into two sides of K (identical sides),
    and 40 of K slowed runs (``slowed/``) against K plain ones; the splits share runs, so their rates are not of
    independent trials. Written to ``pooled.txt`` and ``pooled.json``."""
    import contextlib
    import io
    import random

    out, k = Path(args.out), args.pooled
    runs = {m: sorted(p for f in sorted((out / m).iterdir()) for p in f.iterdir() if p.is_dir())
            for m in ("calibrate", "aa", "slowed") if (out / m).is_dir()}
    runs["aa"] = runs.pop("calibrate", []) + runs.get("aa", [])  # every plain run
    if len(runs["aa"]) < 2 * k:
        sys.exit(f"aa_calibration.py: --pooled {k} needs {2 * k} plain runs (calibrate/, aa/) in {out}; it has "
                 f"{len(runs['aa'])}: run --across first")
    rng = random.Random(0)
    splits = {"aa": [(s[:k], s[k:]) for s in (rng.sample(runs["aa"], 2 * k) for _ in range(40))]}
    if "slowed" in runs and len(runs["slowed"]) >= k:
        splits["slowed"] = [(rng.sample(runs["aa"], k), rng.sample(runs["slowed"], k)) for _ in range(40)]
    with contextlib.redirect_stderr(io.StringIO()):  # the loader's notes on every pair
        results = {mode: tally(pairs) for mode, pairs in splits.items()}
    lines = [f"compare OLD NEW with {k} invocations a side, pooled: 40 random splits of {len(runs['aa'])} plain runs "
             f"into two sides" + (f", and 40 of {k} of the {len(runs['slowed'])} slowed runs against {k} plain ones"
                                  if "slowed" in splits else "") + " (splits share runs); --fail-above 10"]
    for mode, table in results.items():
        for fw, t in sorted(table.items()):
            judged = t["pairs"] - t["not_comparable"] - t["no_interval"]
            apart = wilson(t["pairs"] - judged, t["pairs"])
            lines.append(f"  {mode:8s} {fw:10s} of {t['pairs']} splits, abstained {apart}; of the {judged} judged: "
                         f"significant {wilson(t['significant'], judged)}; slower {wilson(t['slower'], judged)}; "
                         f"REGRESSION {wilson(t['regression'], judged)}")
    print("\n".join(lines))
    (out / "pooled.txt").write_text("\n".join(lines) + "\n")
    (out / "pooled.json").write_text(json.dumps({"pooled": k, "results": results}, indent=1))


def time_ordered(args: argparse.Namespace) -> None:
    """Each interval's own error rate on identical sides, on **disjoint** sets of the runs of the calibrations named
    (``--across`` folders; ``--ab`` folders too), taken in the order they were made (nothing is run, their files are
    left as they are): per framework, one run against the next (pairs 0-1, 2-3, ...); windows of six consecutive runs
    pooled three a side, the older three as OLD (as a CI job that runs its baseline first) — with ``compare``'s term
    for time and without it, as before — and alternated (O N O N O N, docs/cli.md's recipe); the same trials with
    NEW's latencies made 1.3x (a known truth on real runs); the slowed runs (``slowed/``) each against a plain one;
    and, in an ``--ab`` folder, each run's twins (B over A, paired within its rounds). Only runs steady at their
    machine's most frequent speed enter (``compare`` sets no other beside them). Each rate with its Wilson interval;
    within a row no two trials share a run. Written to ``--out``: ``time_ordered.txt`` and ``time_ordered.json``."""
    results: dict[str, dict[str, dict[str, int]]] = {}
    lines, slowed_framework = [], None
    for folder in map(Path, args.time_ordered):
        made: dict = next((json.loads((folder / f).read_text()) for f in ("calibration.json", "ab.json")
                           if (folder / f).is_file()), {})
        slowed_framework = (made.get("slowdown") or "").partition(":")[0] or slowed_framework
        lines.append(ab_trials(folder, results) if (folder / "ab.json").is_file() else
                     across_trials(folder, made.get("calibration"), results))
    lines.append("disjoint trials (within a row no two share a run; rows reuse the same runs), --fail-above 10; 1.3x "
                 "made: NEW's latencies multiplied by 1.3 (both frameworks); slowed: "
                 f"{slowed_framework} slowed by the test hook, the other framework in those runs not; one against one "
                 "with each folder's own calibration between invocations; both*: the two frameworks' trials added "
                 "(measured in the same runs: not independent, their interval too narrow)")
    lines += report_lines(results, slowed_framework)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("\n".join(lines))
    (out / "time_ordered.txt").write_text("\n".join(lines) + "\n")
    (out / "time_ordered.json").write_text(json.dumps({"folders": args.time_ordered, "results": results}, indent=1))


def runs_of(folder: Path, mode: str) -> list[Path]:
    """A calibration's runs of one mode (``calibrate``, ``aa``, ``slowed``), in the order they were made (run folders
    are named by their start)."""
    return sorted((p for f in (folder / mode).iterdir() for p in f.iterdir() if p.is_dir()),
                  key=lambda p: p.name) if (folder / mode).is_dir() else []


def count_rows(results: dict[str, dict[str, dict[str, int]]], name: str, rows: list[dict]) -> None:
    """``compare``'s rows of one trial tallied under ``name``, per framework: judged, called different, REGRESSION."""
    for row in rows:
        t = results.setdefault(name, {}).setdefault(row["framework"], dict.fromkeys(
            ("trials", "judged", "different", "regression"), 0))
        t["trials"] += 1
        t["judged"] += row["ratio_ci_low"] is not None
        t["different"] += row["ratio_ci_low"] is not None and row["verdict"] != "no significant difference"
        t["regression"] += "REGRESSION" in row["verdict"]


def ab_trials(folder: Path, results: dict[str, dict[str, dict[str, int]]]) -> str:
    """An ``--ab`` calibration's runs, each judged alone (B over A, as ``compare RUN`` does); what it held."""
    import contextlib
    import io

    from inferbench.analysis.comparison import ab_frame
    from inferbench.records.load import load

    with contextlib.redirect_stderr(io.StringIO()):  # the loader's notes on every run
        for mode in ("aa", "slowed"):
            for run in runs_of(folder, mode):
                count_rows(results, f"A/B in one run, B {'slowed' if mode == 'slowed' else 'the same install'}",
                           ab_frame(load(run), 10.0)[0])
    return (f"{folder}: an A/B in one run, {len(runs_of(folder, 'aa'))} A/A runs and {len(runs_of(folder, 'slowed'))} "
            "with B slowed")


def across_trials(folder: Path, calibration: dict | None, results: dict[str, dict[str, dict[str, int]]]) -> str:
    """An ``--across`` calibration's trials (:func:`trials_of`) judged by ``compare``, its own ``calibration`` between
    invocations on every run (as ``--reuse`` applies it); what it held."""
    import contextlib
    import io

    from inferbench.analysis.comparison import compare_frames
    from inferbench.records.load import load

    plain, slowed = sorted(runs_of(folder, "calibrate") + runs_of(folder, "aa"), key=lambda p: p.name), \
        runs_of(folder, "slowed")
    with contextlib.redirect_stderr(io.StringIO()):  # the loader's notes on every run
        frames = {p: load(p) for p in plain + slowed}
        if calibration:
            frames = {p: calibrated(f, calibration) for p, f in frames.items()}
        kept = at_main_speed(plain, frames)
        for name, cases in trials_of(kept, slowed).items():
            for old, new, factor, term in cases:
                count_rows(results, name, compare_frames(side_of(frames, old), side_of(frames, new, factor), 10.0,
                                                         time_term=term)[0])
    return (f"{folder}: {len(kept)} of {len(plain)} plain runs steady at its most frequent machine speed, "
            f"{len(slowed)} slowed")


def trials_of(kept: list[Path], slowed: list[Path]) -> dict[str, list[tuple[list[Path], list[Path], float, bool]]]:
    """The disjoint trials of one calibration's runs ``kept`` (in time order): each as OLD's runs, NEW's, the factor
    NEW's latencies are multiplied by and whether ``compare`` fits its time term; each identical trial again with a
    1.3x made; the ``slowed`` runs each against a plain one."""
    windows = [kept[i:i + 6] for i in range(0, len(kept) - 5, 6)]
    pairs = [([a], [b]) for a, b in zip(kept[::2], kept[1::2])]
    base = [("one against one (consecutive runs)", "one against one", pairs, True),
            ("3 a side, older as OLD, no time term (before)", "3 a side, older as OLD, no time term",
             [(w[:3], w[3:]) for w in windows], False),
            ("3 a side, older as OLD, time term", "3 a side, older as OLD, time term",
             [(w[:3], w[3:]) for w in windows], True),
            ("3 a side, alternated, time term", "3 a side, alternated, time term",
             [(w[::2], w[1::2]) for w in windows], True)]
    trials = {name: [(o, n, 1.0, term) for o, n in sides] for name, _, sides, term in base}
    trials |= {f"1.3x made: {short}": [(o, n, 1.3, term) for o, n in sides] for _, short, sides, term in base}
    trials["slowed runs, one against one (each against a plain run)"] = [
        ([a], [b], 1.0, True) for a, b in zip(kept[::-1], slowed)]
    return trials


def report_lines(results: dict[str, dict[str, dict[str, int]]], slowed: str | None) -> list[str]:
    """:func:`time_ordered`'s table: a line per trial and framework, and the frameworks added where they share a
    truth (``both*``: the same runs, not independent); the added counts kept in ``results`` as ``together``."""
    lines = []
    for name, per in results.items():
        truths: dict[str, dict[str, int]] = {}
        for fw, t in sorted(per.items()):
            truth = truth_of(name, fw, slowed)
            lines.append(tally_line(name, fw, truth, t))
            both = truths.setdefault(truth, dict.fromkeys(t, 0))
            for k, v in t.items():
                both[k] += v
        for truth, t in truths.items():
            if sum(truth == truth_of(name, fw, slowed) for fw in per) > 1:
                lines.append(tally_line(name, "both*", truth, t))
        results[name]["together"] = {"truths": truths}  # type: ignore[dict-item]
    return lines


def side_of(frames: dict[Path, Any], runs: list[Path], factor: float = 1.0) -> Any:
    """The records of ``runs`` as one side of a comparison, their latencies multiplied by ``factor``."""
    import pandas as pd

    df = pd.concat([frames[p] for p in runs], ignore_index=True).copy()  # one block: no fragmentation warnings
    if factor != 1.0:
        df = df.assign(raw_latencies_ms=[[x * factor for x in v] if isinstance(v, list) else v
                                         for v in df["raw_latencies_ms"]], p50_ms=df["p50_ms"] * factor)
    return df


def truth_of(trial: str, framework: str, slowed: str | None) -> str:
    """What :func:`time_ordered`'s trial compares for a framework: a 1.3x slowdown (made, or the test hook's on the
    ``slowed`` framework) or identical sides."""
    return "1.3x" if trial.startswith("1.3x") or "slowed" in trial and framework == slowed else "identical"


def calibrated(frame: Any, sd: dict) -> Any:
    """``frame``'s records with the calibration between invocations ``sd`` (an ``--across`` calibration.json's) in
    place of the one they carry, as ``--reuse`` applies it."""
    return frame.assign(**{"environment.invocation_spread.sd": sd["sd"], "environment.invocation_spread.df": sd["df"]},
                        **{f"environment.invocation_spread.{k}.{fw}": v for k in ("per_framework", "df_per_framework")
                           for fw, v in sd[k].items()})


def tally_line(name: str, framework: str, truth: str, t: dict[str, int]) -> str:
    """One line of :func:`time_ordered`'s table: trials judged, called different, REGRESSION, with Wilson intervals."""
    return (f"  {name:56s} {framework:9s} {truth:9s} judged {t['judged']} of {t['trials']}; called different "
            f"{wilson(t['different'], t['judged'])}; REGRESSION {wilson(t['regression'], t['judged'])}")


def at_main_speed(runs: list[Path], frames: dict[Path, Any]) -> list[Path]:
    """The runs (in their order) whose rounds were steady at the machine's most frequent speed, by every record of each
    (as ``compare`` reads a run's speed: :func:`inferbench.analysis.comparison._steady`)."""
    from inferbench.analysis.comparison import _steady
    from inferbench.measure.trackers.speed import same_state

    speeds = {}
    for p in runs:  # a run at one speed by all its records' steady rounds
        found = [_steady(r) for _, r in frames[p].iterrows()]
        if found and all(f is not None and f[0] is not None and same_state(f[0], found[0][0]) for f in found):  # type: ignore[index]
            speeds[p] = found[0][0]  # type: ignore[index]
    if not speeds:
        return []
    main = max(speeds.values(), key=lambda s: sum(bool(same_state(s, o)) for o in speeds.values()))
    return [p for p in runs if p in speeds and same_state(speeds[p], main)]


def ab_runs(args: argparse.Namespace) -> None:
    """An A/B in one run (``run --ab-python``), as CI would use it: ``--invocations`` runs whose B is this very
    interpreter (an A/A) and as many, alternating with them, whose B has ``--slowdown`` set in its workers only;
    each run judged by ``compare RUN --fail-above 10``."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pythons = {"aa": out / "python-a", "slowed": out / "python-slowed"}
    for mode, path in pythons.items():
        hook = f"INFERBENCH_TEST_SLOWDOWN={args.slowdown} " if mode == "slowed" and args.slowdown else ""
        path.write_text(f'#!/bin/sh\n{hook}exec "{sys.executable}" "$@"\n')
        path.chmod(0o755)
    modes = ["aa", "slowed"] if args.slowdown else ["aa"]
    runs: dict[str, list[Path]] = {m: [] for m in modes}
    for i in range(args.invocations):
        for mode in modes:
            folder = out / mode / f"{i:02d}"
            if not (args.reuse and folder.exists()):
                wall = invoke(folder, args.frameworks, args.cache_dir, args.busy, None,
                              ("--ab-python", str(pythons[mode])))
                print(f"  {mode} {i + 1}/{args.invocations}: {wall:.0f} s", flush=True)
            runs[mode] += sorted(p for p in folder.iterdir() if p.is_dir())
    results = {m: tally([(r, r) for r in runs[m]], ab=True) for m in modes}
    lines = [f"A/B in one run: {args.invocations} runs a mode of inferbench run --framework {args.frameworks} --tune "
             f"off --ab-python B{f', {args.busy} busy loops beside each' if args.busy else ''}; compare RUN "
             "--fail-above 10 on each"]
    for mode, per in results.items():
        for fw, t in sorted(per.items()):
            judged = t["pairs"] - t["not_comparable"] - t["no_interval"]
            what = "B slowed " + args.slowdown if mode == "slowed" and fw == args.slowdown.partition(":")[0] \
                else "A/A" if mode == "aa" else "A/A (in the slowed runs, not slowed)"
            lines.append(f"  {fw:10s} {what:40s} judged {judged} of {t['pairs']}; called different "
                         f"{wilson(t['significant'], judged)}; REGRESSION {wilson(t['regression'], judged)}; "
                         f"abstained {wilson(t['pairs'] - judged, t['pairs'])}")
    text = "\n".join(lines)
    print(text)
    (out / "ab.txt").write_text(text + "\n")
    (out / "ab.json").write_text(json.dumps({"frameworks": args.frameworks, "slowdown": args.slowdown,
                                             "busy": args.busy, "invocations": args.invocations,
                                             "results": results}, indent=1))


def calibrate(run_dirs: list[Path], cache_dir: str, frameworks: str) -> dict:
    """This machine's spread between invocations, from plain runs of one configuration: per framework, each run's
    log centre over its steady rounds at its most frequent machine speed (:func:`inferbench.measure.trackers.speed.
    matched`, as ``compare`` sets rounds side by side) with the standard error ``compare`` gives that side
    (:func:`inferbench.measure.stats.log_centre`), and the variance between runs at one speed beyond those errors
    (:func:`inferbench.measure.stats.invocation_excess`: what compare adds to each side's own error); the largest
    over the frameworks; written where runs read it."""
    from inferbench.analysis.comparison import MATCHED_ROUNDS, _rounds
    from inferbench.analysis.ranking import sample_of
    from inferbench.execution.environment import calibration_path
    from inferbench.measure.stats import invocation_excess, log_centre
    from inferbench.measure.trackers.speed import matched, same_state

    per: dict[str, list[tuple[float, float, float, float]]] = {}
    threads, skipped = None, 0
    for run_dir in run_dirs:
        for path in run_dir.glob("*_bs1_*.json"):
            rec = json.loads(path.read_text())
            readings = ((rec.get("machine_state") or {}).get("speed") or {}).get("rounds") or []
            found = matched(readings, readings, MATCHED_ROUNDS)
            threads = rec["config"]["threads"]
            if found is None:  # no speed steady for as many rounds as compare needs: it would not use this run
                skipped += 1
                continue
            rounds, _, speed = found
            side = log_centre(sample_of(_rounds(rec, rounds)))
            if side is None:
                skipped += 1
                continue
            per.setdefault(rec["framework"], []).append((*side, speed))
    per_framework, dfs, totals, withins = {}, {}, {}, {}
    for fw, values in per.items():
        keys: list[float] = []  # runs at one speed together
        for speed in sorted(v[3] for v in values):
            if not keys or not same_state(keys[-1], speed):
                keys.append(speed)
        fit = invocation_excess([(v, se, df, next(k for k in keys if same_state(k, speed)))
                                 for v, se, df, speed in values])
        per_framework[fw] = None if fit is None else fit["sd"]  # null: not measured (JSON has no NaN)
        dfs[fw] = 0 if fit is None else fit["df"]
        totals[fw], withins[fw] = (None, None) if fit is None else (fit["total_sd"], fit["within_se"])
    largest = max((fw for fw, v in per_framework.items() if v is not None), key=lambda fw: per_framework[fw])
    sd = per_framework[largest]
    path = calibration_path(cache_dir, int(threads or 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"sd": sd, "per_framework": per_framework, "df": dfs[largest], "df_per_framework": dfs,
              "total_sd_per_framework": totals, "within_se_per_framework": withins,
              "invocations": len(run_dirs), "frameworks": frameworks,
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by": "benchmarks/aa_calibration.py --across",
              "method": "excess over each run's own standard error (random effects, moments) of the sd between "
                        "invocations of the log centre over each run's steady rounds at its most frequent machine "
                        "speed, pooled over speeds", "cells_without_a_steady_speed": skipped,
              "speeds": sorted({round(c) for vs in per.values() for *_, c in vs})}
    path.write_text(json.dumps(result, indent=1))
    return {**result, "file": str(path)}


def verify_slowdown(plain: list[Path], slowed: list[Path], slowdown: str) -> dict | None:
    """The slowdown the hook really made, by a paired A/B within each run: the slowed framework's median latency
    over the other's (the run's own paired ratio, ``comparisons.csv``) in the slowed runs over the same in the
    plain ones (geometric means, a t interval on the logs of the two sets of runs)."""
    import csv
    import statistics

    from inferbench.measure.stats import t975

    framework, _, factor = slowdown.partition(":")

    def ratios(run_dirs: list[Path]) -> list[float]:
        out = []
        for run_dir in run_dirs:
            rows = {r["framework"]: r for r in csv.DictReader((run_dir / "comparisons.csv").open())}
            other = next((f for f in rows if f != framework), None)
            if framework in rows and other and rows[framework]["ratio"] and rows[other]["ratio"]:
                out.append(math.log(float(rows[framework]["ratio"]) / float(rows[other]["ratio"])))
        return out

    a, b = ratios(plain), ratios(slowed)
    if len(a) < 2 or len(b) < 2:
        return None
    diff = statistics.fmean(b) - statistics.fmean(a)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if va + vb > 0 else len(a) + len(b) - 2
    half = t975(df) * math.sqrt(va + vb)
    lo, hi = math.exp(diff - half), math.exp(diff + half)
    return {"nominal": float(factor), "measured": math.exp(diff), "ci95": [lo, hi], "runs": [len(a), len(b)],
            "said": f"the slowdown made, by a paired A/B within each run ({framework} over the other framework, "
                    f"slowed runs over plain ones): {math.exp(diff):.3f}x [95% CI {lo:.3f}-{hi:.3f}] for a nominal "
                    f"{float(factor):g}x ({len(b)} slowed runs, {len(a)} plain)"}


def process_spread(run_dirs: list[Path]) -> dict[str, float]:
    """Per framework, the median over runs of the pooled between-process standard deviation its records carry."""
    import statistics

    per: dict[str, list[float]] = {}
    for run_dir in run_dirs:
        for path in run_dir.glob("*.json"):
            rec = json.loads(path.read_text())
            var = (((rec.get("latency_ms") or {}).get("spread") or {}).get("pooled_between_var"))
            if "framework" in rec and var is not None:
                per.setdefault(rec["framework"], []).append(math.sqrt(var))
    return {fw: statistics.median(v) for fw, v in per.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--across", action="store_true", help="across invocations (what compare is used for)")
    p.add_argument("--ab", action="store_true", help="A/B in one run (run --ab-python, then compare RUN): "
                   "--invocations A/A runs and, with --slowdown, as many with B slowed")
    p.add_argument("--repeats", type=int, default=40, help="within a run: A/A comparisons (default: %(default)s)")
    p.add_argument("--framework", default="onnxrt", help="within a run: framework key (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=8, help="within a run: rounds (default: %(default)s)")
    p.add_argument("--duration", type=float, default=2.0, help="within a run: seconds per cell (default: %(default)s)")
    p.add_argument("--invocations", type=int, default=10, help="across: plain runs (default: %(default)s)")
    p.add_argument("--frameworks", default="onnxrt,openvino", help="across: what each run measures")
    p.add_argument("--slowdown", default=None, metavar="FRAMEWORK:FACTOR", help="across: also runs slowed so")
    p.add_argument("--busy", type=int, default=0, help="across: also runs with N busy loops beside each")
    p.add_argument("--out", default="inferbench-results/calibration", help="across: where the runs go")
    p.add_argument("--reuse", action="store_true", help="across: re-analyse the runs already in --out (the "
                   "calibration recomputed and used in place of the one the records carry)")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bench-cache"))
    p.add_argument("--pooled", type=int, default=0, metavar="K", help="across: compare K invocations a side, pooled, "
                   "from the runs already in --out (nothing is run)")
    p.add_argument("--time-ordered", nargs="+", metavar="DIR", help="each interval's own error rate on disjoint sets "
                   "of these calibrations' runs, in the order they were made, written to --out (nothing is run)")
    args = p.parse_args()
    if args.time_ordered:
        time_ordered(args)
    elif args.pooled:
        pooled_runs(args)
    else:
        ab_runs(args) if args.ab else across(args) if args.across else within(args)


if __name__ == "__main__":
    main()
