"""``python -m inferbench.selftest --gpu``: a short check anyone can run on a machine with an NVIDIA GPU.

Runs every GPU framework installed there briefly (batch 1 and 8, a few seconds each, energy from
NVML) and prints what worked, with watts, joules per inference and peak memory. ``--cpu`` does the
same on the CPU. Results go to ``benchmark_results/selftest-<device>-<time>/``.
"""

from __future__ import annotations

import sys
import time

from .cli import Parser
from .config import add_options, given, with_defaults
from .device import list_gpus
from .errors import UsageError
from .frameworks import FRAMEWORKS, unavailable_reason
from .run import main as run_main


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m inferbench.selftest", description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=False)
    where.add_argument("--gpu", action="store_true", help="check the GPU path (default)")
    where.add_argument("--cpu", action="store_true", help="check the CPU path")
    add_options(p, "selftest")
    try:
        args = p.parse_args(argv)
        values = with_defaults(given(args), "selftest")
        kind = "cpu" if values.get("cpu") else "gpu"
        if kind == "gpu" and not list_gpus():
            raise UsageError("no NVIDIA GPU found on this machine (nvidia-smi lists none); the GPU check needs one "
                             "(python -m inferbench.selftest --cpu checks the CPU path)")
    except UsageError as exc:
        print(f"inferbench.selftest: error: {exc}", file=sys.stderr)
        return 2
    runnable, missing = [], []
    for fw in FRAMEWORKS.values():
        reason = unavailable_reason(fw, kind)
        (missing.append(f"{fw.key}: {reason}") if reason else runnable.append(fw.key))
    print(f"selftest on the {kind}: running {', '.join(runnable) or 'nothing'}", file=sys.stderr)
    for line in missing:
        print(f"  not installed / not possible here: {line}", file=sys.stderr)
    if not runnable:
        return 1
    device = ["--device", "gpu", "--gpu-id", str(values["gpu_id"])] if kind == "gpu" else ["--device", "cpu"]
    out = f"{values['output_dir']}/selftest-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    return run_main(["--framework", ",".join(runnable), *device, "--batch-size", "1,8",
                     "--duration", str(values["duration"]),
                     "--min-iterations", "50", "--warmup", "10", "--warmup-seconds", "1", "--output-dir", out],
                    prog="inferbench.selftest")


if __name__ == "__main__":
    sys.exit(main())
