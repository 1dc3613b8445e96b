"""Hardware and software capture for result records (no ML framework is imported)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..base import machine
from ..base.codec import check_shape
from ..base.device import Device, cpu_quota, default_threads
from ..base.machine import _cpu_flags, cpu_model
from ..base.reading import MiB, read_json
from ..base.text import excerpt
from ..records.blocks import InvocationSpread
from ..registry.artifacts import packages as export_packages
from ..registry.frameworks import distributions

#: Recorded besides every framework's and exporter's packages (from their registries): the analysis
#: stack, the GPU energy sensor, and Keras' JAX backend.
BASE_PACKAGES = ("numpy", "pandas", "nvidia-ml-py", "jax", "jaxlib")


def git_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]  # the folder that holds the inferbench package
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(dirty) if commit else None}


def packages() -> tuple[str, ...]:
    return tuple(dict.fromkeys((*BASE_PACKAGES, *distributions(), *export_packages())))


def package_versions() -> dict[str, str]:
    out = {}
    for name in packages():
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def capture(device: Device) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": {
            "model": cpu_model(),
            "machine": platform.machine(),
            "logical_cores": os.cpu_count(),
            "available_cores": default_threads(),
            "cpu_quota": cpu_quota(),
            "flags": _cpu_flags(),
        },
        "memory_gb": machine.memory_total_gb(),
        "niceness": os.nice(0) if hasattr(os, "nice") else None,  # a Ray worker's is 15 unless its node says 0
        "gpu": device.as_dict()["gpu"],
        "packages": package_versions(),
        "inferbench": {"version": __version__, **git_commit()},
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("TF_XLA", "XLA_", "OMP_", "MKL_", "CUDA_VISIBLE", "KERAS_BACKEND"))},
    }


def machine_shape(threads: int) -> str:
    """What makes two machines alike for a measurement kept between runs — CPU model, thread count, logical cores,
    memory (GiB) —, not the host's name (a CI runner is rebuilt under a new one): a short digest."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # as it sees them
    key = json.dumps({"cpu": cpu_model(), "threads": threads, "cores": cores,
                      "memory_gib": round(machine.memory_total_gb() or 0)}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def calibration_path(cache_dir: str | Path, threads: int) -> Path:
    """Where this machine's measured spread between invocations is kept, beside the artifact cache, per machine
    shape (:func:`machine_shape`): ``benchmarks/aa_calibration.py --across`` writes it."""
    return Path(cache_dir) / "calibration" / f"{machine_shape(threads)}.json"


def setup_path(cache_dir: str | Path, threads: int, device: str = "cpu") -> Path:
    """Where this machine's measured set-up times are kept (a worker's start, load, parity and warm-up, per
    framework), beside the artifact cache, per machine shape and device (``cpu`` or the GPU's name: a GPU's compile
    times are not a CPU's): what ``--time-budget``'s plan estimates from."""
    return Path(cache_dir) / "setup" / f"{machine_shape(threads)}-{re.sub(r'[^A-Za-z0-9]+', '-', device)}.json"


def invocation_calibration(cache_dir: str | Path, threads: int) -> dict[str, Any] | None:
    """This machine's measured spread between invocations (``sd``: of a cell's log centre beyond each run's own
    error, with how and when it was measured), or None where it was never measured; every record carries it
    (``environment.invocation_spread``) and ``compare`` adds it to each side's own error."""
    path = calibration_path(cache_dir, threads)
    if not os.path.lexists(path):
        return None
    try:
        data = read_json(path, MiB, "calibration")
        check_shape(InvocationSpread, data, path.name)
    except ValueError as exc:  # a broken or planted file (a FIFO, Infinity, 1 GB): said, and no run uses it
        why = excerpt(str(exc).splitlines()[0], 200)
        return {"sd": None, "file": str(path), "ignored": f"not a calibration this inferbench can use ({why})"}
    return {**data, "file": str(path)}
