"""``inferbench compare OLD NEW``: has anything become slower? Per cell, NEW's median latency over OLD's, with a 95%
interval, for a CI job; ``inferbench compare RUN`` judges the twins of one ``run --ab-python`` (an A/B in one run).
The rules, verdicts and exit statuses: :mod:`inferbench.analysis.comparison` and docs/cli.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .analysis.comparison import (
    AB_COLUMNS,
    COLUMNS,
    ab_frame,
    calibration_lines,
    compare_frames,
    geometric_mean_of,
    summary_lines,
    why_unpaired,
)
from .base.errors import UsageError
from .base.files import check_writable
from .cli.common import Parser, guarded, typed
from .cli.jsonout import Emit, json_mode
from .cli.options import add_options
from .cli.summary import fmt, table
from .options import non_negative_float, path_value
from .records.load import load
from .records.table import write_csv

NOTHING_JUDGED = 3  # exit status: cells in common, but none with an interval


def build_parser(prog: str = "python -m inferbench.compare") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Per cell, NEW's median latency over OLD's with a 95% interval; "
               "'no significant difference' where the interval contains 1. With --fail-above PCT, exit 1 when a "
               "cell is slower by more than PCT percent with 95% confidence, failed, or lost parity.",
               examples=[f"{prog} benchmark_results/main benchmark_results/branch",
                         f"{prog} OLD NEW --fail-above 10 --csv compare.csv   # in CI"])
    p.add_argument("old", metavar="OLD", help="result folder (searched recursively) or record file: the baseline")
    p.add_argument("new", metavar="NEW", nargs="?", default=None,
                   help="result folder or record file to check against it; left out, OLD is one run made with "
                   "--ab-python: each +ab twin (B) is judged against its cell (A), paired within the run's rounds")
    p.add_argument("--fail-above", metavar="PCT", type=non_negative_float, default=None,
                   help="exit 1 when a cell is slower by more than PCT percent with 95%% confidence (its whole "
                   "interval above 1 + PCT/100), failed, or lost parity (default: report only: exit 0, or 3 when no "
                   "cell in common could be judged)")
    p.add_argument("--csv", metavar="FILE", default=None, type=path_value,
                   help="also write the table as CSV (default: none)")
    add_options(p, "compare")
    return p


def _main(argv: list[str] | None, prog: str) -> int:
    args = build_parser(typed(prog)).parse_args(argv)
    return json_mode(getattr(args, "json", False), "compare", lambda emit: _compare(args, emit))


def _compare(args: argparse.Namespace, emit: Emit) -> int:
    if args.csv:  # bad input, not a regression: exit 2 before anything is read (exit 1 means "regressed")
        csv_path = Path(args.csv)
        if csv_path.is_dir():
            raise UsageError(f"--csv {args.csv} is a folder: name the file to write")
        check_writable(csv_path.parent if str(csv_path.parent) else Path("."), "--csv folder")
    if args.new is None:  # an A/B in one run
        old = new = load(args.old)
        rows, notes = ab_frame(old, args.fail_above)
        if not rows:
            raise UsageError(f"{args.old} holds no A/B twins (cells of run --ab-python, variant +ab-<digest>): "
                             "give OLD and NEW to compare two runs")
        sides = ("A", "B")
    else:
        old, new = load(args.old), load(args.new)
        rows, notes = compare_frames(old, new, args.fail_above)
        sides = ("OLD", "NEW")
    if not rows:
        devices = {side: ", ".join(sorted(set(df["device_name"]))) for side, df in (("OLD", old), ("NEW", new))}
        raise UsageError(f"no cell in common between {args.old} ({devices['OLD']}) and {args.new} "
                         f"({devices['NEW']}): {why_unpaired(old, new)}")
    where = [k for k in ("device_model", "threads") if len({r[k] for r in rows}) > 1]  # shown when they vary
    a_, b_ = sides
    lines = table(("cell", "bs", "framework", *where, f"{a_} p50 ms", f"{b_} p50 ms", f"{b_}/{a_} [95% CI]",
                   f"valid {a_}/{b_}", "verdict"), [
        (f"{r['model']}@{r['resolution']}", str(r["batch_size"]), r["framework"], *(str(r[k]) for k in where),
         fmt(r["old_p50_ms"], ".3f"), fmt(r["new_p50_ms"], ".3f"), fmt(r["ratio"], ".3f") + (
             "" if r["ratio_ci_low"] is None else f" [{r['ratio_ci_low']:.3f}-{r['ratio_ci_high']:.3f}]"),
         f"{r['old_valid']}/{r['new_valid']}", r["verdict"]) for r in rows])
    one_a_side = [r for r in rows if r["ratio_ci_low"] is not None  # judged one run against one, not pooled
                  and not (r.get("method") or "").startswith("invocations-pooled")]
    summary = summary_lines(rows, ab=args.new is None) + (  # a pooled row measures its own spread: no calibration
        calibration_lines(old, new) if args.new is not None and one_a_side else [])
    print("\n".join(lines + notes + summary))
    if args.csv:
        columns = (*COLUMNS, *(AB_COLUMNS if args.new is None else ()))
        write_csv(Path(args.csv), columns, [{k: r.get(k) for k in columns} for r in rows])
    emit({"old": args.old, "new": args.new, "ab": args.new is None, "fail_above": args.fail_above, "cells": rows,
          "notes": notes,
          "summary": summary, "geometric_mean": geometric_mean_of(rows)})
    unclear = [r for r in rows if r["verdict"].startswith(("no interval", "not comparable"))]
    if len(unclear) == len(rows):  # a gate that judged nothing must not pass
        whys = sorted({r["verdict"].split(": ", 1)[-1] if r["verdict"].startswith("not comparable")
                       else "without an interval (fewer than 3 rounds with raw samples on a side)" for r in rows})
        print(f"nothing could be judged: every one of the {len(rows)} cells in common was not comparable or without "
              f"an interval: {'; '.join(whys)}", file=sys.stderr)
        return NOTHING_JUDGED
    if args.fail_above is None:
        return 0
    if unclear:
        print(f"{len(unclear)} of {len(rows)} cells have no interval and were not judged", file=sys.stderr)
    regressed = [r for r in rows if "REGRESSION" in r["verdict"]]
    if regressed:
        print(f"{len(regressed)} of {len(rows)} cells regressed (--fail-above {args.fail_above:g})", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None, prog: str = "inferbench.compare") -> int:
    return guarded(prog, lambda a: _main(a, prog), argv, "nothing compared")


if __name__ == "__main__":
    sys.exit(main())
