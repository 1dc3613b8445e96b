"""``python -m inferbench.sweep``: a grid of cells (models x resolutions x batch sizes x frameworks),
each isolated as in ``run``, resumable.

    python -m inferbench.sweep --models mobilenet_v3_large,resnet50 --resolutions 160,224 \\
        --batch-sizes 1,8,32 --frameworks all --output-dir benchmark_results/sweeps
    python -m inferbench.sweep --config sweep.toml
    python -m inferbench.sweep --resume benchmark_results/sweeps/<sweep id>

The plan is written to ``<sweep dir>/sweep.json`` before the first cell; every record is written
atomically under a deterministic name, so ``--resume`` after Ctrl-C or a kill runs exactly the cells
that have no record yet. Precision is part of the framework key (``tensorrt-fp16``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

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
from .device import default_threads, resolve
from .errors import UsageError
from .frameworks import FRAMEWORKS, for_model, parse_frameworks
from .models import describe_weights, get_model
from .results import atomic_write_text
from .run import DEFAULTS
from .summary import format_summary

PLAN = "sweep.json"
GRID_KEYS = ("models", "resolutions", "batch_sizes", "frameworks", "precisions")
SETTING_KEYS = ("weights", "seed", "device", "gpu_id", "threads", "duration", "min_iterations", "warmup",
                "warmup_seconds", "timeout", "include_transfer", "channels_last", "torch_compile", "cuda_graphs",
                "keras_backend")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m inferbench.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="TOML, JSON or YAML file with the keys below (command-line values win)")
    p.add_argument("--models", help="comma list of registered models (default: mobilenet_v3_large)")
    p.add_argument("--resolutions", help="comma list of resolutions, or 'default' (default: each model's)")
    p.add_argument("--batch-sizes", type=positive_ints, help="comma list (default: 1)")
    p.add_argument("--frameworks", help="'all' or a comma list of framework keys (default: all)")
    p.add_argument("--precisions", help="comma list (default: fp32): every framework runs at its own precision, "
                   "plus a cell per extra precision it takes (torch, torch-native: fp16, bf16)")
    p.add_argument("--weights", help="random (default), imagenet or a file")
    p.add_argument("--seed", type=non_negative_int)
    p.add_argument("--device", choices=["cpu", "gpu", "auto"])
    p.add_argument("--gpu-id", type=non_negative_int)
    p.add_argument("--threads", type=positive_int)
    p.add_argument("--duration", type=non_negative_float, help=f"seconds per cell (default {DEFAULTS['duration']})")
    p.add_argument("--min-iterations", type=positive_int)
    p.add_argument("--warmup", type=non_negative_int)
    p.add_argument("--warmup-seconds", type=non_negative_float)
    p.add_argument("--timeout", type=positive_float, help="give up on a cell after this many seconds")
    p.add_argument("--keras-backend", choices=["tensorflow", "jax", "torch"])
    for flag in ("include-transfer", "channels-last", "torch-compile", "cuda-graphs"):
        p.add_argument(f"--{flag}", action="store_true", default=None, help="as in inferbench.run")
    p.add_argument("--output-dir", default="benchmark_results/sweeps", help="default: %(default)s")
    p.add_argument("--name", help="sweep folder name (default: a timestamp)")
    p.add_argument("--cache-dir", help="artifact cache (default: as inferbench.run)")
    p.add_argument("--resume", metavar="SWEEP_DIR", help="finish an interrupted sweep: run only cells without a record")
    return p


def _read_config(path: str) -> dict[str, Any]:
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror or exc}") from None
    try:
        if file.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif file.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise UsageError("YAML configs need PyYAML (pip install pyyaml); or use TOML") from None
            data = yaml.safe_load(text)
        elif file.suffix == ".json":
            data = json.loads(text)
        else:
            raise UsageError(f"config must be .toml, .json or .yaml, got {path}")
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"cannot parse config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config {path} must be a table of keys")
    unknown = set(data) - set(GRID_KEYS) - set(SETTING_KEYS)
    if unknown:
        raise UsageError(f"unknown key(s) in {path}: {', '.join(sorted(unknown))}; "
                         f"valid: {', '.join(GRID_KEYS + SETTING_KEYS)}")
    flags = {opt: action for action in build_parser()._actions for opt in action.option_strings}
    return {key: _checked(path, key, value, flags["--" + key.replace("_", "-")]) for key, value in data.items()}


def _checked(path: str, key: str, value: Any, action: argparse.Action) -> Any:
    """A config value through the same type and choices as its command-line flag: one set of rules."""
    if action.const is True:  # a store_true flag
        if not isinstance(value, bool):
            raise UsageError(f"{path}: {key} must be true or false, got {value!r}")
        return value
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    if isinstance(value, (dict, bool)) or value is None:
        raise UsageError(f"{path}: {key} must be a value or a list, got {value!r}")
    text = str(value)
    if action.choices is not None and text not in action.choices:
        raise UsageError(f"{path}: {key} must be one of {', '.join(action.choices)}, got {text!r}")
    if action.type is not None:
        try:
            return action.type(text)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{path}: {key}: {exc}") from None
    return text


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def make_plan(args: argparse.Namespace) -> dict[str, Any]:
    """Merge config file and command line into a validated plan (grid + settings + cell list)."""
    conf = _read_config(args.config) if args.config else {}
    for key in GRID_KEYS + SETTING_KEYS:
        value = getattr(args, key, None)
        if value is not None:
            conf[key] = value
    models = [get_model(m).name for m in _as_list(conf.get("models", "mobilenet_v3_large"))]
    res_list = _as_list(conf.get("resolutions", "default"))
    batch_sizes = [int(b) for b in _as_list(conf.get("batch_sizes", [1]))]
    for key, values in (("models", models), ("resolutions", res_list), ("batch_sizes", batch_sizes)):
        if not values:
            raise UsageError(f"{key} is empty: a sweep needs at least one")
    device = resolve(conf.get("device", "auto"), conf.get("gpu_id"))
    fw_text = ",".join(str(f) for f in _as_list(conf.get("frameworks", "all")))
    frameworks = parse_frameworks(fw_text, device.kind)
    precisions = [str(p) for p in _as_list(conf.get("precisions", ["fp32"]))]
    bad = [p for p in precisions if p not in ("fp32", "fp16", "bf16")]
    if bad:
        raise UsageError(f"unknown precision(s) {', '.join(bad)}; valid: fp32, fp16, bf16")
    if conf.get("cuda_graphs") and device.kind != "gpu":
        raise UsageError("cuda_graphs needs an NVIDIA GPU")
    weights = describe_weights(str(conf.get("weights", "random")))
    cells = []
    for model in models:
        spec = get_model(model)
        resolutions = []
        for r in res_list:
            if str(r) == "default":
                resolutions.append(spec.resolution(None))
            else:
                try:
                    resolutions.append(spec.resolution(int(r)))
                except ValueError:
                    raise UsageError(f"resolution must be an integer or 'default', got {r!r}") from None
        for res in dict.fromkeys(resolutions):
            for bs in batch_sizes:
                for fw in for_model(frameworks, spec, fw_text):
                    for prec in dict.fromkeys([fw.precision] + [p for p in precisions if p in fw.precisions]):
                        cells.append({"model": model, "resolution": res, "batch_size": bs, "framework": fw.key,
                                      "precision": prec})
    settings = {
        "weights": weights, "seed": int(conf.get("seed", 0)), "device": conf.get("device", "auto"),
        "gpu_id": conf.get("gpu_id"), "threads": int(conf.get("threads") or default_threads()),
        "timing": {
            "warmup_iterations": int(conf.get("warmup", DEFAULTS["warmup"])),
            "warmup_seconds": float(conf.get("warmup_seconds", DEFAULTS["warmup_seconds"])),
            "min_duration_s": float(conf.get("duration", DEFAULTS["duration"])),
            "min_iterations": int(conf.get("min_iterations", DEFAULTS["min_iterations"])),
        },
        "timeout": conf.get("timeout"),
        "options": {"include_transfer": bool(conf.get("include_transfer")),
                    "channels_last": bool(conf.get("channels_last")), "compile": bool(conf.get("torch_compile")),
                    "cuda_graphs": bool(conf.get("cuda_graphs")),
                    "keras_backend": str(conf.get("keras_backend") or "tensorflow")},
    }
    grid = {"models": models, "resolutions": res_list, "batch_sizes": batch_sizes,
            "frameworks": [fw.key for fw in frameworks], "precisions": precisions}
    return {"plan_version": 1, "grid": grid, "settings": settings, "cells": cells}


def main(argv: list[str] | None = None) -> int:
    return guarded("inferbench.sweep", _main, argv, "finish it with --resume (completed cells are kept)")


def _main(argv: list[str] | None) -> int:
    from .exporters import cache as artifact_cache
    from .pipeline import Cell, Settings, execute
    from .run import exit_status

    args = build_parser().parse_args(argv)
    cache_dir = Path(args.cache_dir) if args.cache_dir else artifact_cache.default_cache_dir()
    check_writable(cache_dir, "cache dir")  # every check before the plan is written
    if args.resume:
        sweep_dir = Path(args.resume)
        try:
            plan = json.loads((sweep_dir / PLAN).read_text())
        except (OSError, ValueError):
            raise UsageError(f"{sweep_dir} is not a sweep folder (no readable {PLAN})") from None
        given = [k for k in GRID_KEYS + SETTING_KEYS + ("config",) if getattr(args, k, None) is not None]
        if given:
            flags = ", ".join("--" + g.replace("_", "-") for g in given)
            raise UsageError(f"--resume runs the saved plan; drop {flags}")
    else:
        plan = make_plan(args)
        out_root = Path(args.output_dir)
        check_writable(out_root)
        sweep_dir = out_root / (args.name or time.strftime("sweep-%Y%m%d-%H%M%S"))
        if (sweep_dir / PLAN).exists():
            raise UsageError(f"{sweep_dir} already holds a sweep; use --resume {sweep_dir} or another --name")
        atomic_write_text(sweep_dir / PLAN, json.dumps(plan, indent=1))
    s = plan["settings"]
    device = resolve(s["device"], s["gpu_id"])
    settings = Settings(weights=s["weights"], seed=s["seed"], device=device, threads=s["threads"],
                        timing=s["timing"], cache_dir=cache_dir, timeout_s=s["timeout"],
                        options=s.get("options", {}))
    cells = [Cell(**c) for c in plan["cells"]]
    unknown = {c.framework for c in cells} - set(FRAMEWORKS)
    if unknown:
        raise UsageError(f"plan names unknown frameworks: {', '.join(sorted(unknown))}")
    print(f"sweep {sweep_dir}: {len(cells)} cells", file=sys.stderr)
    # a model whose export cannot start (e.g. weights that do not fit it) fails its own cells only
    records = execute(settings, cells, sweep_dir, sweep_dir.name, strict=False)
    print(format_summary(records))
    print(f"\nresults: {sweep_dir}/ ; report: python -m inferbench.report {sweep_dir} --out REPORT_DIR")
    return exit_status(records)


if __name__ == "__main__":
    sys.exit(main())
