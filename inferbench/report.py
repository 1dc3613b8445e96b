"""``inferbench report RESULTS... --out DIR``: a report (report.html and report.md) with PNG figures.

RESULTS are result folders (or files), from one machine or several: every record carries its
hardware, so folders merge into one cross-device report. It opens with the recommendation per
model, resolution, batch size and scenario (every precision that passed competing). Published figures from other
projects are added only when asked for (``--reference``), in their own labelled section.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .analysis.report import write_report
from .base.errors import UsageError
from .cli.common import Parser, guarded, typed
from .cli.jsonout import Emit, json_mode
from .cli.options import add_options
from .options import path_value


def build_parser(prog: str = "python -m inferbench.report") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Write a report (report.html and report.md) with PNG figures from result "
               "folders (one machine or several: every record carries its hardware).",
               examples=[f"{prog} benchmark_results/20261123-191553_mobilenet_v3_large_224_cpu --out report",
                         f"{prog} results-h100/ results-h200/ --out cross-gpu --normalise-to onnxrt"])
    p.add_argument("results", nargs="+", metavar="RESULTS", help="result folders (searched recursively) or files")
    p.add_argument("--out", required=True, metavar="DIR", type=path_value,
                   help="folder for report.html, report.md, recommendation.json and the figures (required)")
    p.add_argument("--reference", action="store_true",
                   help="add published figures of other projects, in their own labelled section (default: only "
                   "these records)")
    p.add_argument("--reference-dir", default=None, metavar="DIR",
                   help="folder of published figures (implies --reference; default: the copy bundled with inferbench)")
    add_options(p, "report")
    p.add_argument("--normalise-to", metavar="FRAMEWORK",
                   help="add throughput relative to this framework per device (default: none)")
    return p


def _main(argv: list[str] | None, prog: str) -> int:
    args = build_parser(typed(prog)).parse_args(argv)
    objective = getattr(args, "objective", None)  # not given: each scenario's own (server: the QPS it holds)

    def body(emit: Emit) -> int:
        path = write_report(args.results, Path(args.out), args.reference_dir,
                            args.reference or bool(args.reference_dir), args.normalise_to, objective,
                            history_of(getattr(args, "history", None)))
        print(f"report: {path.with_name('report.html')} (one page, figures inlined: to open or send) and {path} "
              "(Markdown, figures beside it)")
        emit({"report": str(path), "out": str(args.out), "results": list(args.results),
              "files": sorted(str(f) for f in Path(args.out).rglob("*") if f.is_file())})
        return 0

    return json_mode(getattr(args, "json", False), "report", body)


def history_of(given: str | None) -> str | None:
    """The history store a report shows its cells' series from: ``--history`` (``off``: none), else the default
    store where it exists."""
    from .timeline.keep import location
    from .timeline.store import is_server

    where = location({"history": given})
    there = bool(where) and (is_server(where) or Path(where).is_file())
    if given and given != "off" and not there:
        raise UsageError(f"--history {given}: no history store there (runs make it as they end)")
    return where if there else None


def main(argv: list[str] | None = None, prog: str = "inferbench.report") -> int:
    return guarded(prog, lambda a: _main(a, prog), argv, "no report written")


if __name__ == "__main__":
    sys.exit(main())
