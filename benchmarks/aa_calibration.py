"""A/A calibration: how often does inferbench call two measurements of the *same* thing different?

One configuration (default: onnxrt, MobileNetV3-Large 224, batch 1) is measured as two cells of one
group — two workers loading the same artifact, interleaved in rounds exactly as a run measures its
cells — ``--repeats`` times. Each repeat asks the question a run answers for two frameworks: is the
paired ratio of their median latencies significantly different from 1 at 95%? For an honest method
the answer is "yes" about 5% of the time; the iid bootstrap the seed projects used is shown beside it.

    python benchmarks/aa_calibration.py [--repeats 40] [--framework onnxrt] [--rounds 8] [--duration 2]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=40, help="A/A comparisons (default: %(default)s)")
    p.add_argument("--framework", default="onnxrt", help="framework key (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=8, help="rounds per comparison (default: %(default)s)")
    p.add_argument("--duration", type=float, default=2.0, help="timed seconds per cell (default: %(default)s)")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bench-cache"))
    args = p.parse_args()

    import numpy as np

    from inferbench.cli.options import build, with_defaults
    from inferbench.execution.childenv import child_env
    from inferbench.execution.exports import ensure_exports
    from inferbench.execution.pipeline import cell_job
    from inferbench.execution.progress import Progress
    from inferbench.execution.rounds import measure_group
    from inferbench.measure.stats import INVOCATION_SD, compare, iid_compare
    from inferbench.registry.frameworks import get_framework

    values = with_defaults({"frameworks": [args.framework], "rounds": args.rounds, "duration": args.duration,
                            "cache_dir": args.cache_dir, "device": "cpu"}, "run")
    built = build(values)
    config, (cell,) = built.config, built.cells
    fw = get_framework(cell.framework)
    quiet = Progress(1, open("/dev/null", "w"))
    folder, failed = ensure_exports(config, cell.model, cell.resolution, [fw], (cell.batch_size,), quiet)
    if failed:
        sys.exit(f"export failed: {failed}")
    env = child_env(config, fw, cell)
    print(f"A/A: {cell.label} measured as two cells, {args.repeats} times; {args.rounds} rounds, "
          f"{args.duration:g} s per cell, {config.threads} threads")
    paired_sig = iid_sig = 0
    ratios = []
    start = time.monotonic()
    for i in range(args.repeats):
        jobs = [cell_job(config, cell, folder, (cell.batch_size,), {"group": f"aa/{i}", "group_cells": 2})] * 2
        a, b = measure_group(jobs, [env, env], config.seed + i, lambda label, text: None)
        if not (a.ok and b.ok):
            sys.exit(f"a measurement failed: {a.error or b.error}")
        la, lb = (r.cell.blocks for r in (a, b))
        cmp = compare(la["raw_latencies_ms"], la["raw_rounds"], lb["raw_latencies_ms"], lb["raw_rounds"], paired=True)
        iid = iid_compare(la["raw_latencies_ms"], lb["raw_latencies_ms"])
        paired_sig += bool(cmp["significant"])
        iid_sig += bool(iid["significant"])
        ratios.append(cmp["ratio"])
        print(f"  {i + 1:3d}: ratio {cmp['ratio']:.4f} [{cmp['ci95'][0]:.4f}, {cmp['ci95'][1]:.4f}]"
              f"{'  significant' if cmp['significant'] else ''}   iid: "
              f"{'significant' if iid['significant'] else 'not significant'}", flush=True)
    n = args.repeats

    def wilson(k: int) -> str:  # the rate with its Wilson score interval
        z, ph = 1.96, k / n
        centre = (ph + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return f"{k}/{n} = {ph:.1%} [95% CI {max(0, centre - half):.1%}-{min(1, centre + half):.1%}]"

    print(f"declared significant (nominal 5%): paired rounds {wilson(paired_sig)}; iid bootstrap {wilson(iid_sig)}")
    print(f"A/A ratios: median {np.median(ratios):.4f}, spread (5th-95th percentile) "
          f"{np.percentile(ratios, 5):.4f}-{np.percentile(ratios, 95):.4f}; {time.monotonic() - start:.0f} s")
    per_worker = np.std(np.log(ratios), ddof=1) / math.sqrt(2)
    print(f"per-worker spread (sd of log A/A ratios / sqrt 2, rounds' noise included): {per_worker:.2%} "
          f"(inferbench assumes INVOCATION_SD = {INVOCATION_SD:.1%})")


if __name__ == "__main__":
    main()
