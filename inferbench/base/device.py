"""Which device a run uses, decided in the parent without importing any ML framework.

GPUs are listed in PCI bus order (as nvidia-smi lists them). The child process that runs a
framework sees only the chosen GPU (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, ``CUDA_VISIBLE_DEVICES=<uuid>``)
so that "--gpu-id 1" and the NVML handle used for power always mean the same physical device.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import UsageError


@dataclass(frozen=True)
class Gpu:
    index: int  # position in PCI bus order
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_mb: float


@dataclass(frozen=True)
class Device:
    kind: str  # "cpu" | "gpu"
    gpu: Gpu | None = None

    def child_env(self) -> dict[str, str]:
        """Environment for the child process so that it sees only this device."""
        if self.gpu is None:
            return {"CUDA_VISIBLE_DEVICES": ""}  # the CPU run must not touch a GPU
        # JAX would otherwise take 75% of the GPU at start, and peak memory would mean nothing
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": self.gpu.uuid,
                "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "gpu": asdict(self.gpu) if self.gpu else None}

    @property
    def label(self) -> str:
        return f"gpu{self.gpu.index}" if self.gpu else "cpu"


def list_gpus() -> list[Gpu]:
    """NVIDIA GPUs in PCI bus order, via nvidia-smi (no CUDA context, no framework import)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=pci.bus_id,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    rows.sort(key=lambda r: r[0].lower())
    gpus = []
    for i, (bus, uuid, name, mem) in enumerate(rows):
        try:
            mem_mb = float(mem)
        except ValueError:
            mem_mb = float("nan")
        gpus.append(Gpu(i, uuid, name, bus, mem_mb))
    return gpus


def resolve(device: str, gpu_id: int | None, gpus: list[Gpu] | None = None) -> Device:
    """Turn ``--device`` and ``--gpu-id`` into a Device, or raise UsageError with one clear line."""
    if gpus is None:
        gpus = list_gpus() if (device != "cpu" or gpu_id is not None) else []
    if gpu_id is not None and device == "cpu":
        raise UsageError("--gpu-id cannot be combined with --device cpu")
    if device == "cpu":
        return Device("cpu")
    wants_gpu = device == "gpu" or gpu_id is not None
    if not gpus:
        if wants_gpu:
            raise UsageError(
                "no NVIDIA GPU found on this machine (nvidia-smi lists none); use --device cpu"
            )
        return Device("cpu")
    index = 0 if gpu_id is None else gpu_id
    if not 0 <= index < len(gpus):
        listing = "; ".join(f"{g.index}: {g.name} ({g.pci_bus_id})" for g in gpus)
        raise UsageError(f"--gpu-id {index} does not exist; GPUs in PCI bus order: {listing}")
    return Device("gpu", gpus[index])


def default_threads(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may really use: its CPU affinity (taskset, cpusets), capped by a CPU quota of its cgroup
    (a container given 1.5 CPUs of a 16-core machine gets 2 threads, not 16)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = cpu_quota(cgroup_root)
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in cores (cgroup v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``), or None where there is none or it cannot be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    own = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), "/")
    for folder in (root / own.lstrip("/"), root):  # v2: the process's own cgroup, else the root's
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        except (OSError, ValueError):
            continue
    try:  # v1
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None
