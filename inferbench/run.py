"""``python -m inferbench.run``: export one model, verify every export, measure each framework.

Exit status: 0 every cell ran and no parity check failed; 1 some cell failed or failed parity;
2 bad input (one line on stderr, nothing written); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from . import __version__
from .cli import (
    Parser,
    check_writable,
    guarded,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    positive_ints,
)
from .device import Device, default_threads, list_gpus, resolve
from .errors import UsageError
from .frameworks import FRAMEWORKS, for_model, parse_frameworks, unavailable_reason
from .models import DEFAULT_MODEL, MODELS, PREPROCESSING, describe_weights, get_model
from .summary import format_summary

DEFAULTS = {"duration": 10.0, "min_iterations": 100, "warmup": 10, "warmup_seconds": 2.0}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m inferbench.run",
        description="Export a Keras vision model to every runtime, check each export against the "
        "Keras reference, and measure latency and throughput with one common method.",
    )
    p.add_argument("--framework", default="all",
                   help=f"'all' or a comma list of: {', '.join(FRAMEWORKS)} (default: all that run here)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"one of: {', '.join(MODELS)} (default: %(default)s)")
    p.add_argument("--batch-size", type=positive_ints, default=[1], metavar="N[,N...]",
                   help="batch size, or a comma list (default: 1)")
    p.add_argument("--resolution", type=positive_int, default=None,
                   help="input height = width in pixels (default: the model's, 224)")
    p.add_argument("--weights", default="random",
                   help="'random' (seeded, offline, default), 'imagenet' (downloads) or a .keras/.weights.h5 file")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed for weights and inputs (default: 0)")
    p.add_argument("--device", choices=["cpu", "gpu", "auto"], default="auto",
                   help="where to run (default: auto = the GPU if there is one, else the CPU)")
    p.add_argument("--gpu-id", type=non_negative_int, default=None,
                   help="GPU index in PCI bus order, as nvidia-smi lists them (implies --device gpu)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="intra-op threads for every framework (default: cores available to this process)")
    p.add_argument("--duration", type=non_negative_float, default=DEFAULTS["duration"],
                   help="minimum seconds of timed inference per cell (default: %(default)s)")
    p.add_argument("--min-iterations", type=positive_int, default=DEFAULTS["min_iterations"],
                   help="minimum timed iterations per cell (default: %(default)s)")
    p.add_argument("--warmup", type=non_negative_int, default=DEFAULTS["warmup"],
                   help="minimum warm-up calls (default: %(default)s)")
    p.add_argument("--warmup-seconds", type=non_negative_float, default=DEFAULTS["warmup_seconds"],
                   help="minimum warm-up seconds (default: %(default)s)")
    p.add_argument("--output-dir", default="benchmark_results",
                   help="results go to OUTPUT_DIR/<run id>/ (default: %(default)s)")
    p.add_argument("--cache-dir", default=None,
                   help="artifact cache (default: $INFERBENCH_CACHE or ~/.cache/inferbench/artifacts)")
    p.add_argument("--timeout", type=positive_float, default=None,
                   help="give up on a cell after this many seconds (default: no limit)")
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default=None,
                   help="for frameworks that take one (torch, torch-native); the others run at their own")
    p.add_argument("--channels-last", action="store_true", help="torch-native: channels-last memory format")
    p.add_argument("--torch-compile", action="store_true", help="torch, torch-native: torch.compile the module")
    p.add_argument("--cuda-graphs", action="store_true", help="torch, torch-native on a GPU: replay a CUDA graph")
    p.add_argument("--keras-backend", choices=["tensorflow", "jax", "torch"], default="tensorflow",
                   help="backend for keras-eager, keras, kerasxla (default: %(default)s)")
    p.add_argument("--include-transfer", action="store_true",
                   help="time host array in -> host array out (copies inside the window), as the seed projects did")
    p.add_argument("--list", action="store_true", help="list models and frameworks, and whether each runs here")
    p.add_argument("--version", action="version", version=f"inferbench {__version__}")
    return p


def list_everything(out: Any = None) -> None:
    out = out or sys.stdout
    gpus = list_gpus()
    print("Models (inputs: seeded image-like fields; preprocessing as listed):", file=out)
    for spec in MODELS.values():
        tv = f"torchvision.models.{spec.torchvision_builder}" if spec.torchvision_builder \
            else "(no torchvision equivalent)"
        print(f"  {spec.name:<20} {spec.default_resolution}px  keras.applications.{spec.keras_builder:<18} "
              f"{tv:<40} [{PREPROCESSING[spec.preprocessing]}]", file=out)
    print(f"\nFrameworks (GPUs found: {len(gpus)}):", file=out)
    for fw in FRAMEWORKS.values():
        status = []
        for dev in ("cpu", "gpu"):
            reason = unavailable_reason(fw, dev)
            if dev == "gpu" and reason is None and not gpus:
                reason = "no NVIDIA GPU on this machine"
            status.append(f"{dev}: {'yes' if reason is None else 'no (' + reason + ')'}")
        print(f"  {fw.key:<14} {fw.description}\n  {'':<14} {'; '.join(status)}", file=out)


def main(argv: list[str] | None = None) -> int:
    return guarded("inferbench.run", _main, argv)


def _main(argv: list[str] | None) -> int:
    from .exporters import cache as artifact_cache
    from .pipeline import Cell, Settings, execute

    args = build_parser().parse_args(argv)
    if args.list:
        list_everything()
        return 0
    spec = get_model(args.model)
    resolution = spec.resolution(args.resolution)
    weights = describe_weights(args.weights)
    device: Device = resolve(args.device, args.gpu_id)
    frameworks = for_model(parse_frameworks(args.framework, device.kind), spec, args.framework)
    options = runner_options(args, device.kind)
    explicit = "all" not in args.framework.split(",")
    cells = [Cell(spec.name, resolution, bs, fw.key, precision_of(fw, args.precision, explicit))
             for bs in args.batch_size for fw in frameworks]
    out_root = Path(args.output_dir)
    check_writable(out_root)
    cache_dir = Path(args.cache_dir) if args.cache_dir else artifact_cache.default_cache_dir()
    check_writable(cache_dir, "cache dir")
    settings = Settings(
        weights=weights, seed=args.seed, device=device, threads=args.threads or default_threads(),
        timing={"warmup_iterations": args.warmup, "warmup_seconds": args.warmup_seconds,
                "min_duration_s": args.duration, "min_iterations": args.min_iterations},
        cache_dir=cache_dir, timeout_s=args.timeout, options=options,
    )
    if not explicit:
        not_here = [fw.key for fw in FRAMEWORKS.values() if device.kind not in fw.devices]
        if not_here:
            print(f"not run on the {device.kind}: {', '.join(not_here)} (need an NVIDIA GPU)", file=sys.stderr)
        if spec.torchvision_builder is None:
            print(f"not run: torch-native (torchvision has no {spec.name})", file=sys.stderr)
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}_{spec.name}_{resolution}_{device.label}"
    run_dir = out_root / run_id
    records = execute(settings, cells, run_dir, run_id)
    print(format_summary(records), file=sys.stdout)
    print(f"\nresults: {run_dir}/ (one JSON record per cell, summary.csv)", file=sys.stdout)
    return exit_status(records)


def runner_options(args: argparse.Namespace, device_kind: str) -> dict[str, Any]:
    if args.cuda_graphs and device_kind != "gpu":
        raise UsageError("--cuda-graphs needs an NVIDIA GPU (--device gpu)")
    return {"channels_last": args.channels_last, "compile": args.torch_compile, "cuda_graphs": args.cuda_graphs,
            "include_transfer": args.include_transfer, "keras_backend": args.keras_backend}


def precision_of(fw: Any, requested: str | None, explicit: bool) -> str:
    """The precision a cell runs at: ``--precision`` where the framework takes it; with ``all``, the
    frameworks that do not take it run at their own; a framework named explicitly must take it."""
    if requested is None or requested == fw.precision:
        return str(fw.precision)
    if requested in fw.precisions or explicit:
        return str(fw.precision_for(requested))
    return str(fw.precision)


def exit_status(records: list[dict[str, Any]]) -> int:
    """0 when every cell ran and none failed parity, else 1."""
    bad = [r for r in records if r["status"] != "ok" or r["parity"]["status"] == "failed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
