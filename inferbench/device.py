"""Which device a run uses, decided in the parent without importing any ML framework.

GPUs are listed in PCI bus order (as nvidia-smi lists them). The child process that runs a
framework sees only the chosen GPU (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, ``CUDA_VISIBLE_DEVICES=<uuid>``)
so that "--gpu-id 1" and the NVML handle used for power always mean the same physical device.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass

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


def default_threads() -> int:
    """Cores available to this process (respects taskset/cgroup affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
