"""``inferbench selftest``: a short check of what this machine has, ending with PASS or FAIL.

Runs every framework installed here briefly (batch 1 and 8, a few seconds each; energy from NVML on a
GPU), on the GPU when the machine has an NVIDIA GPU and on the CPU otherwise (``--gpu`` / ``--cpu`` to
choose), within ``--time-budget`` (10 minutes unless given: on a busy machine it once gave no verdict after 25),
and prints what worked, then one verdict line. Results go to
``OUTPUT_DIR/selftest-<device>-<time>/``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .base.device import list_gpus
from .base.errors import UsageError
from .cli.common import Parser, guarded, typed
from .cli.options import add_options, given
from .exporters import already_made, key_inputs
from .exporters import cache as artifact_cache
from .options import with_defaults
from .records import iter_records
from .registry.frameworks import FRAMEWORKS, unavailable_reason
from .registry.models import get_model
from .run import main as run_main
from .spec import RunnerOptions

MODEL = "mobilenet_v3_large"  # the default model, at its own resolution, seeded random weights


def build_parser(prog: str = "python -m inferbench.selftest") -> Parser:
    p = Parser(prog=prog, description="A short check of every framework installed here (batch 1 and 8, a few "
               "seconds each), on the GPU if this machine has one, else on the CPU; ends with PASS or FAIL.",
               examples=[f"{prog}            # the GPU if there is one, else the CPU",
                         f"{prog} --cpu      # the CPU path on a GPU machine"])
    where = p.add_mutually_exclusive_group(required=False)
    where.add_argument("--gpu", action="store_true", help="check the GPU path (default where there is an NVIDIA GPU)")
    where.add_argument("--cpu", action="store_true", help="check the CPU path (default on a machine without one)")
    add_options(p, "selftest")
    return p


def main(argv: list[str] | None = None, prog: str = "inferbench.selftest") -> int:
    return guarded(prog, lambda a: _main(a, prog), argv, "no verdict")


def _main(argv: list[str] | None, prog: str) -> int:
    values = with_defaults(given(build_parser(typed(prog)).parse_args(argv)), "selftest")
    gpus = list_gpus()
    kind = "cpu" if values.get("cpu") else "gpu" if values.get("gpu") else ("gpu" if gpus else "cpu")
    if kind == "gpu" and not gpus:
        raise UsageError("no NVIDIA GPU found on this machine (nvidia-smi lists none); the GPU check needs one "
                         "(--cpu checks the CPU path)")
    options = RunnerOptions(keras_backend=values["keras_backend"])
    spec = get_model(MODEL)
    cache_dir = Path(values["cache_dir"] or artifact_cache.default_cache_dir())
    # artifacts exported elsewhere (a GPU machine without TensorFlow) need no exporter here
    have = already_made(cache_dir, spec, [key_inputs(MODEL, spec.resolution(None), "random", 0)])
    runnable, missing = [], []
    for fw in FRAMEWORKS.values():
        reason = unavailable_reason(fw, kind, spec, options, have)
        (missing.append(f"{fw.key}: {reason}") if reason else runnable.append(fw.key))
    print(f"selftest on the {kind}: running {', '.join(runnable) or 'nothing'}", file=sys.stderr)
    for line in missing:
        print(f"  not installed / not possible here: {line}", file=sys.stderr)
    if not runnable:
        print(f"selftest FAIL: no framework can run on the {kind} here")
        return 1
    device = ["--device", "gpu", "--gpu-id", str(values["gpu_id"])] if kind == "gpu" else ["--device", "cpu"]
    out = f"{values['output_dir']}/selftest-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    code = run_main(["--framework", ",".join(runnable), *device, "--batch-size", "1,8", "--model", MODEL,
                     "--keras-backend", values["keras_backend"],
                     "--duration", str(values["duration"]), "--rounds", "2", "--processes", "1",
                     "--min-iterations", "50", "--warmup", "10", "--warmup-seconds", "1", "--output-dir", out,
                     "--time-budget", f"{values['time_budget']:g}s",  # a check, never an afternoon: it ends
                     *(["--cache-dir", values["cache_dir"]] if values["cache_dir"] else []),
                     *(["--trust-cache"] if values.get("trust_cache") else []),
                     *(["-q"] if values["quiet"] else []), *(["-v"] if values["verbose"] else [])],
                    prog=prog, advise=False)
    found = checked(out) if code == 0 else None
    unchecked = sorted(set(runnable) - found) if found is not None else []
    if unchecked:  # --time-budget left them out before they loaded: nothing said they work
        print(f"selftest FAIL: {', '.join(unchecked)} not checked on the {kind}: --time-budget "
              f"{values['time_budget']:g}s passed before {'it' if len(unchecked) == 1 else 'they'} loaded "
              "(give a longer --time-budget)")
        return 1
    if code == 0:
        print(f"selftest PASS: {len(runnable)} framework(s) ran on the {kind} and none failed parity")
    elif code in (1, 2):
        print(f"selftest FAIL: {'a cell failed or failed parity' if code == 1 else 'the check could not start'} "
              f"on the {kind} (see above)")
    else:
        print("selftest interrupted: no verdict", file=sys.stderr)
    return code


def checked(out: str) -> set[str] | None:
    """The frameworks with a record under ``out`` (the selftest's run folder; None where it wrote none)."""
    folder = Path(out)
    return {r["framework"] for r in iter_records(folder)[0]} if folder.exists() else None


if __name__ == "__main__":
    sys.exit(main())
