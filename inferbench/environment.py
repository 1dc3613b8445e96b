"""Hardware and software capture for result records (no ML framework is imported)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from . import __version__
from .device import Device, default_threads

#: Recorded besides every framework's and exporter's packages (from their registries): the analysis
#: stack, the GPU energy sensor, and Keras' JAX backend.
BASE_PACKAGES = ("numpy", "pandas", "nvidia-ml-py", "jax", "jaxlib")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "sse4")))
    except OSError:
        pass
    return []


def memory_total_gb(field: str = "MemTotal") -> float | None:
    """The machine's memory in GB (``field="MemAvailable"``: what can be used now without swapping)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024**2, 2)
    except OSError:
        pass
    return None


def memory_shortfall(params: int | None, base_gb: float, weight_copies: float, count: int = 1,
                     own_gb: float = 0.0) -> tuple[float, float, float] | None:
    """``(need, weights, available)`` in GB when ``count`` processes, each holding ~``base_gb`` plus
    ``weight_copies`` copies of ``params`` float32 weights, would take more than 90% of the memory available
    now (plus ``own_gb``, what the asking process holds already); None when they fit or a size is unknown. The
    one estimate behind every memory refusal (a group's workers, an ONNX conversion)."""
    available = memory_total_gb("MemAvailable")
    if not params or not available or count < 1:
        return None
    available += own_gb
    weights = params * 4 / 2**30
    need = count * (base_gb + weight_copies * weights)
    return None if need <= 0.9 * available else (need, weights, available)


def git_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
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
    from .exporters import packages as export_packages
    from .frameworks import distributions

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
            "flags": _cpu_flags(),
        },
        "memory_gb": memory_total_gb(),
        "gpu": device.as_dict()["gpu"],
        "packages": package_versions(),
        "inferbench": {"version": __version__, **git_commit()},
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("TF_XLA", "XLA_", "OMP_", "MKL_", "CUDA_VISIBLE", "KERAS_BACKEND"))},
    }
