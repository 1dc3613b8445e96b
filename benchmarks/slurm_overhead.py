"""What a Slurm job adds to a group's time: the same sweep (ONNX Runtime on MobileNetV3-Small at 96 px, batch sizes
1 and 2: two groups, so two jobs) run by the local executor and by ``--executor slurm``, alternately, as whole
commands, on an idle single-node cluster. Prints each pair's walls, the overhead per job (the difference over the
jobs) and each job's seconds from its submission to its start (``environment.slurm.queued_s``).

    SLURM_CONF=... python benchmarks/slurm_overhead.py [--pairs 3] [--partition debug]

A cluster on this machine: ``python tests/slurm_cluster.py`` (as root; docs/distributed.md). The overhead is a
difference of whole-command walls measured side by side in this one invocation; quote it with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = ["--models", "mobilenet_v3_small", "--resolutions", "96", "--batch-sizes", "1,2", "--frameworks", "onnxrt",
         "--quick", "--device", "cpu", "--threads", "2", "--history", "off", "-q"]


def sweep(out: Path, name: str, extra: list[str]) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "inferbench.sweep", *SWEEP, *extra, "--output-dir", str(out), "--name",
                    name], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--partition", default="debug")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF") and not Path("/etc/slurm/slurm.conf").exists():
        sys.exit("no Slurm to submit to: start one (python tests/slurm_cluster.py) and export its SLURM_CONF")
    out = Path(tempfile.mkdtemp(prefix="slurm-overhead-"))
    sweep(out, "warm", [])  # the exports made once, outside every pair
    per_job, queued = [], []
    for i in range(args.pairs):
        local = sweep(out, f"local-{i}", [])
        on_slurm = sweep(out, f"slurm-{i}", ["--executor", "slurm", "--partition", args.partition])
        records = [json.loads(p.read_text()) for p in (out / f"slurm-{i}").glob("mobilenet*.json")]
        queued += [r["environment"]["slurm"]["queued_s"] for r in records]
        per_job.append((on_slurm - local) / 2)
        print(f"pair {i}: local {local:.1f} s, slurm {on_slurm:.1f} s: {per_job[-1]:+.1f} s per job")
    print(f"overhead per job: median {statistics.median(per_job):+.1f} s (range {min(per_job):+.1f} to "
          f"{max(per_job):+.1f}); submission to start {min(queued):.1f}-{max(queued):.1f} s; "
          f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
