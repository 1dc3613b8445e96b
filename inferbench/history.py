"""``inferbench history add|show|check``: results over time. Every run adds its records to a store as it ends (a
DuckDB file, ``inferbench-results/history.duckdb`` by default, or PostgreSQL); ``add`` brings in older or committed
results, ``show`` lists the series (one cell on one kind of machine) with the steps found in each, ``check`` exits 1
on a step slower than ``--fail-on-step PCT`` (for CI). The method: :mod:`inferbench.timeline.steps` and
docs/history.md."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .base.errors import UsageError
from .cli.common import Parser, guarded, typed
from .cli.jsonout import Emit, json_mode
from .cli.options import add_options
from .cli.summary import fmt, table
from .options import non_negative_float, path_value
from .records.load import iter_records
from .timeline.keep import ENV, add, location
from .timeline.series import KEY, Series, series_of, versions
from .timeline.steps import MIN_POINTS, Found, Step, detect
from .timeline.store import is_server, opened, shown

NOTHING_JUDGED = 3  # exit status of check: no series had enough comparable points to be searched


def build_parser(prog: str = "python -m inferbench.history") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Results over time: every run's records are kept in a database as the run "
               "ends; series per cell and machine, steps found by change-point detection (docs/history.md).",
               examples=[f"{prog} show", f"{prog} add benchmark_results/", f"{prog} show --framework onnxrt --points",
                         f"{prog} check --fail-on-step 10   # in CI",
                         f"{prog} confirm 3fa2b1c9 --ab-python ../old-venv/bin/python"],
               exits=["0  done (check: no step above PCT)", "1  check: a step slower than --fail-on-step PCT",
                      "2  bad input: one line", "3  check: no series had enough comparable points to search"])
    p.add_argument("action", choices=("add", "show", "check", "confirm"), help="add result folders or records; show "
                   "the series and their steps; check for steps (exit 1 above --fail-on-step); confirm a step by an "
                   "A/B in one run (--ab-python: the install on the step's other side)")
    p.add_argument("paths", nargs="*", default=[], metavar="PATH|STEP", type=path_value,
                   help="add: result folders (searched recursively) or record files; confirm: the step's id (as show "
                   "and check print it)")
    p.add_argument("--model", default=None, help="only this model's series")
    p.add_argument("--framework", default=None, help="only this framework's series")
    p.add_argument("--points", action="store_true", help="show: every point of each series, not only its summary")
    p.add_argument("--fail-on-step", metavar="PCT", type=non_negative_float, default=None,
                   help="check: exit 1 on a step slower by more than PCT percent (default 0: any step found)")
    add_options(p, "history")
    return p


def store_of(args: argparse.Namespace) -> str:
    where = location({"history": getattr(args, "history", None)})  # the runs' own rule: --history, $ENV, default
    if not where:
        raise UsageError(f"--history is off ({ENV}=off): name a store with --history PATH|URL")
    return where


def _main(argv: list[str] | None, prog: str) -> int:
    args = build_parser(typed(prog)).parse_args(argv)
    return json_mode(getattr(args, "json", False), "history", lambda emit: _history(args, emit))


def _history(args: argparse.Namespace, emit: Emit) -> int:
    where = store_of(args)  # printed and emitted as shown(where): a URL's password never is
    if args.action == "add":
        return _add(where, args.paths, emit)
    if args.paths and args.action != "confirm":
        raise UsageError(f"history {args.action} takes no PATH (got {args.paths[0]}): history add PATH adds results")
    if not is_server(where) and not Path(where).is_file():
        raise UsageError(f"no history at {where}: runs add their records as they end; inferbench history add "
                         "RESULTS adds older ones")
    with opened(where) as store:
        rows, confirmed = store.rows(), store.confirmations()
    rows = [r for r in rows if (args.model in (None, r["model"])) and (args.framework in (None, r["framework"]))]
    if not rows:
        raise UsageError(f"the history at {shown(where)} holds no record" + (" of that model or framework" if
                                                                      args.model or args.framework else ""))
    found = [(s, detect(s)) for s in series_of(rows)]
    if args.action == "show":
        _show(found, args.points, confirmed)
        emit({"store": shown(where), "series": [_said(s, f, confirmed) for s, f in found]})
        return 0
    if args.action == "confirm":
        return confirm(args, where, found, emit)
    return _check(found, args.fail_on_step or 0.0, where, confirmed, emit)


def _add(where: str, paths: list[str], emit: Emit) -> int:
    if not paths:
        raise UsageError("history add needs a PATH: a result folder or a record file")
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in paths:
        got, left = iter_records(Path(path))
        if not got and not left:
            raise UsageError(f"no inferbench record under {path}")
        records += got
        skipped += left
    new, old = add(where, records)
    print(f"history {shown(where)}: {new} record(s) added, {old} already there" +
          (f"; {len(skipped)} file(s) skipped, e.g. {skipped[0]}" if skipped else ""))
    emit({"store": shown(where), "added": new, "already": old, "skipped": skipped})
    return 0


def _show(found: list[tuple[Series, Found]], points: bool, confirmed: dict[str, dict[str, Any]]) -> None:
    labels = _labels([s for s, _ in found])
    rows: list[tuple[str, ...]] = []
    for (s, f), label in zip(found, labels):
        last = s.kept[-1].row if s.kept else s.points[-1].row
        steps = ", ".join(f"{x.pct:+.1f}%" for x in f.steps) or (
            f"not yet ({len(s.kept)} of {MIN_POINTS} runs)" if f.why_not else "none")
        rows.append((label, f"{len(s.kept)}/{len(s.points)}", str(last["created_at"])[:10],
                     fmt(last["p50_ms"], ".3f") + _ci(last), str(last["runtime_version"] or "-"),
                     "-" if f.floor is None else f"{100 * f.floor:.1f}%", steps))
    print("\n".join(table(("series", "kept/runs", "latest", "p50 ms [95% CI]", "runtime", "floor", "steps"), rows)))
    for (s, f), label in zip(found, labels):
        for x in f.steps:
            print(f"step {x.id}: {label}: {_step_line(x, confirmed.get(x.id))}")
        if points:
            lines = table(("run", "when", "p50 ms [95% CI]", "runtime", "inferbench", "apart"), [
                (str(p.row["run_id"]), str(p.row["created_at"])[:19], fmt(p.row["p50_ms"], ".3f") + _ci(p.row),
                 str(p.row["runtime_version"] or "-"), str(p.row["inferbench_version"] or "-"), p.apart or "")
                for p in s.points])
            print(f"\n{label}{': ' + f.why_not if f.why_not else ''}:\n" + "\n".join(lines))


def _labels(series: list[Series]) -> list[str]:
    """Each series' label, with its machine's digest where two machines' labels would read the same (another CPU
    of one model name, with other flags)."""
    import hashlib

    counts: dict[str, int] = {}
    for s in series:
        counts[s.label] = counts.get(s.label, 0) + 1
    return [s.label + (f" [machine {hashlib.sha256(repr(s.key[-4:]).encode()).hexdigest()[:6]}]"
                       if counts[s.label] > 1 else "") for s in series]


def _check(found: list[tuple[Series, Found]], pct: float, where: str, confirmed: dict[str, dict[str, Any]],
           emit: Emit) -> int:
    """Exit 1 on a step slower than ``pct`` percent: by its confirmation where it has one (a confirmation whose
    interval holds 1 clears it), else as detected."""
    searched = [(s, f) for s, f in found if f.why_not is None]
    slower = []
    for s, x in ((s, x) for s, f in searched for x in f.steps):
        c = confirmed.get(x.id)
        ratio = x.ratio if c is None else c["ratio"]
        fails = (ratio - 1) * 100 > pct and (c is None or c["ratio_ci95_low"] > 1)
        slower += [(s, x)] if fails else []
        print(f"{'STEP ABOVE --fail-on-step' if fails else 'step'} {x.id}: {s.label}: {_step_line(x, c)}")
    emit({"store": shown(where), "fail_on_step": pct, "series": [_said(s, f, confirmed) for s, f in found],
          "failing": [{"series": s.label, "step": x.id, "at_run": x.at_run, "pct": x.pct} for s, x in slower]})
    if not searched:
        print(f"nothing could be judged: none of the {len(found)} series has enough comparable points to look for "
              f"steps (e.g. {found[0][0].label}: {found[0][1].why_not})", file=sys.stderr)
        return NOTHING_JUDGED
    print(f"{len(searched)} series searched, {sum(len(f.steps) for _, f in searched)} step(s) found, "
          f"{len(slower)} slower by more than {pct:g}%", file=sys.stderr)
    return 1 if slower else 0


def confirm(args: argparse.Namespace, where: str, found: list[tuple[Series, Found]], emit: Emit) -> int:
    """Re-measure a step's cell here and by the install on its other side (``--ab-python``) as an A/B in one run,
    and keep the step's ratio (after over before, paired within rounds) beside it."""
    from . import api

    if len(args.paths) != 1:
        raise UsageError("history confirm takes one STEP: its id, as history show and check print it")
    steps = {x.id: (s, x) for s, f in found for x in f.steps}
    if args.paths[0] not in steps:
        raise UsageError(f"no step {args.paths[0]} in {shown(where)}: " + (f"its steps are {', '.join(list(steps)[:8])}"
                                                                     if steps else "no series there has a step"))
    s, x = steps[args.paths[0]]
    r = s.points[0].row
    other = getattr(args, "ab_python", None)
    if not other:
        raise UsageError(f"history confirm needs the install on the other side of step {x.id} "
                         f"({_step_line(x)}): --ab-python PYTHON")
    if r["variant"]:
        raise UsageError(f"step {x.id}'s cell runs with its own options ({r['variant']}): measure it by hand, "
                         "inferbench run ... --ab-python PYTHON, then inferbench compare RUN")
    side = this_side(r["framework"], x)
    size = r["resolution"]
    ran = api.run(output_dir=getattr(args, "output_dir", None) or "inferbench-results", models=[r["model"]],
                  resolutions=[int(size) if size.isdigit() else size], batch_sizes=[r["batch_size"]],
                  frameworks=[r["framework"]], precisions=[r["precision"]], scenario=r["scenario"],
                  device="gpu" if r["device"] == "gpu" else "cpu", ab_python=other, history=where,
                  quick=bool(getattr(args, "quick", False)), **({"threads": r["threads"]} if r["threads"] else {}))
    row = next((c for c in api.compare(ran.folder).rows if c["framework"] == r["framework"]), None)
    if row is None or row["ratio_ci_low"] is None:
        why = row["verdict"] if row else "the run has no A/B pair of that cell"
        print(f"step {x.id} not confirmed: {why} ({ran.folder})", file=sys.stderr)
        emit({"store": shown(where), "step": x.id, "run_dir": str(ran.folder), "confirmed": None})
        return NOTHING_JUDGED
    b_over_a = (row["ratio"], row["ratio_ci_low"], row["ratio_ci_high"])  # B: the other side
    ratio, lo, hi = b_over_a if side == "before" else (1 / b_over_a[0], 1 / b_over_a[2], 1 / b_over_a[1])
    verdict = ("no difference: the A/B in one run does not confirm it" if lo <= 1 <= hi else
               "confirmed" if (ratio > 1) == (x.ratio > 1) else "reversed: the A/B in one run says the other way")
    said = {"confirmation_id": digest_of(x.id, str(ran.folder)), "step_id": x.id, "series": s.label,
            "at_run": x.at_run, "run_dir": str(ran.folder), "confirmed_at": datetime.now(timezone.utc),
            "this_side": side, "other_python": other, "ratio": ratio, "ratio_ci95_low": lo, "ratio_ci95_high": hi,
            "verdict": verdict}
    with opened(where) as store:
        store.add([said], "confirmations")
    print(f"step {x.id}: {s.label}: {_step_line(x, said)} (this install: {side} the step; {ran.folder})")
    emit({"store": shown(where), "step": x.id, "run_dir": str(ran.folder), "confirmed": _confirmation(said)})
    return 0


def this_side(framework: str, x: Step) -> str:
    """Which side of step ``x`` this install is on, by its runtime's version ("after" when it cannot tell)."""
    from importlib import metadata

    from .registry.frameworks import FRAMEWORKS

    before, after = x.changed.get("runtime", [None, None])
    for name in FRAMEWORKS[framework].distributions if framework in FRAMEWORKS else ():
        try:
            here = f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
        if here == before:
            return "before"
    return "after"


def digest_of(*parts: str) -> str:
    import hashlib

    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _step_line(x: Step, confirmation: dict[str, Any] | None = None) -> str:
    what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in list(x.changed.items())[:3]) or "no version changed"
    line = (f"{x.pct:+.1f}% [{100 * (x.ratio_ci95[0] - 1):+.1f}, {100 * (x.ratio_ci95[1] - 1):+.1f}] at run "
            f"{x.at_run} ({x.before_ms:.3f} -> {x.after_ms:.3f} ms; {what})")
    if confirmation:
        c = confirmation
        line += (f"; A/B in one run: {100 * (c['ratio'] - 1):+.1f}% [{100 * (c['ratio_ci95_low'] - 1):+.1f}, "
                 f"{100 * (c['ratio_ci95_high'] - 1):+.1f}], {c['verdict']}")
    return line


def _ci(r: dict[str, Any]) -> str:
    lo, hi = r["p50_ci95_low_ms"], r["p50_ci95_high_ms"]
    return f" [{lo:.3f}-{hi:.3f}]" if lo and hi else ""


def _said(s: Series, f: Found, confirmed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A series as the --json document lists it."""
    first = s.points[0].row
    return {"key": {k: first[k] for k in KEY}, "label": s.label, "floor": f.floor, "between_sd": f.between_sd,
            "not_searched": f.why_not,
            "points": [{"run_id": p.row["run_id"], "created_at": str(p.row["created_at"]), "p50_ms": p.row["p50_ms"],
                        "p50_ci95": [p.row["p50_ci95_low_ms"], p.row["p50_ci95_high_ms"]], "apart": p.apart,
                        "versions": versions(p.row)} for p in s.points],
            "steps": [{"id": x.id, "confirmed": _confirmation(confirmed.get(x.id)), "at_run": x.at_run,
                       "at_time": x.at_time, "before_ms": x.before_ms, "after_ms": x.after_ms,
                       "ratio": x.ratio, "ratio_ci95": list(x.ratio_ci95), "changed": x.changed} for x in f.steps]}


def _confirmation(c: dict[str, Any] | None) -> dict[str, Any] | None:
    keys = ("ratio", "ratio_ci95_low", "ratio_ci95_high", "verdict", "run_dir", "this_side", "other_python")
    return None if c is None else {k: c[k] for k in keys} | {"confirmed_at": str(c["confirmed_at"])}


def main(argv: list[str] | None = None, prog: str = "inferbench.history") -> int:
    return guarded(prog, lambda a: _main(a, prog), argv, "nothing changed")


if __name__ == "__main__":
    sys.exit(main())
