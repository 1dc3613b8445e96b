"""Reproducible answers: the same two-framework run, three times, one after another.

Each invocation is a plain ``python -m inferbench.run --framework A,B`` (default onnxrt,torch) in a
fresh output folder; the script reads each run's ``comparisons.csv`` and prints the ratio of the
slower framework's median latency to the faster one's, with its 95% interval. The answer is
reproducible when the three ratios lie within +-10% of their mean and their intervals overlap.

    python benchmarks/reproducibility.py [--frameworks onnxrt,torch] [--invocations 3] [-- run options]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", default="onnxrt,torch")
    p.add_argument("--invocations", type=int, default=3)
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bench-cache"))
    p.add_argument("run_args", nargs="*", help="more options for inferbench.run (after --)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.invocations):
            out = Path(tmp) / str(i)
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "inferbench.run", "--framework", args.frameworks,
                                   "--output-dir", str(out), "--cache-dir", args.cache_dir, *args.run_args],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"invocation {i + 1} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            (comparisons,) = out.rglob("comparisons.csv")
            row = max(csv.DictReader(comparisons.open()), key=lambda r: float(r["ratio"]))
            rows.append(row)
            lo, hi = float(row["ratio_ci_low"]), float(row["ratio_ci_high"])
            print(f"invocation {i + 1}: {row['framework']} / {row['baseline']} median latency ratio "
                  f"{float(row['ratio']):.3f} [95% CI {lo:.3f}-{hi:.3f}]  ({time.monotonic() - t0:.0f} s)", flush=True)
    ratios = [float(r["ratio"]) for r in rows]
    mean = sum(ratios) / len(ratios)
    spread = max(abs(r / mean - 1) for r in ratios)
    overlap = max(float(r["ratio_ci_low"]) for r in rows) <= min(float(r["ratio_ci_high"]) for r in rows)
    same_pair = len({(r["framework"], r["baseline"]) for r in rows}) == 1
    sd = statistics.stdev(math.log(r) for r in ratios) / math.sqrt(2) if len(ratios) > 1 else float("nan")
    print(f"per-cell spread between invocations (sd of log ratios / sqrt 2): {sd:.2%} (each run measures its own "
          "between its worker processes: latency_ms.spread in its records)")
    print(f"ratios within {spread:.1%} of their mean {mean:.3f} (target +-10%); intervals "
          f"{'overlap' if overlap else 'do NOT overlap'}; "
          f"{'the same framework was fastest every time' if same_pair else 'the fastest framework CHANGED'}")


if __name__ == "__main__":
    main()
