"""Facts about this machine that need no registry: its CPU, its memory, what a job would need of it (a base
module: it imports nothing of inferbench's)."""

from __future__ import annotations

import platform
from pathlib import Path


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
