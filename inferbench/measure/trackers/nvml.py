"""An NVIDIA GPU through NVML, found by its UUID (NVML ignores CUDA_VISIBLE_DEVICES): a tracker of the GPU's energy
(the total-energy counter around each block, power sampled on another thread, an idle baseline once the GPU has
settled), its state at the start and the end of a cell (clocks, temperature, power limit, the reasons its clocks
are held down, other processes using it) and the device memory it attributes to the worker (see
:mod:`inferbench.measure.trackers`). Another tenant on the GPU or clocks held down make the cell not valid."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .energy import EnergyTracker

if TYPE_CHECKING:  # pragma: no cover
    from ...spec import CellJob
    from . import Contribution, Finished


class NvmlSensor:
    """An NVIDIA GPU through NVML, found by UUID (NVML ignores CUDA_VISIBLE_DEVICES)."""

    name = "NVML"
    # NVML documents nvmlDeviceGetPowerUsage as a ~1 s moving average on Ampere (except GA100) and
    # newer, so the sampler's peak is a peak of 1 s averages there; the energy counter is exact.
    power_reading = "nvml-power-usage"  # driver-averaged over ~1 s on Ampere and newer

    def __init__(self, uuid: str) -> None:
        import pynvml  # from nvidia-ml-py

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.has_counter = True
        except pynvml.NVMLError:
            self.has_counter = False  # pre-Volta: sampler only

    def energy_j(self) -> float | None:
        if not self.has_counter:
            return None
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1e3  # mJ

    def power_w(self) -> float | None:
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3  # mW

    @property
    def wrap_j(self) -> float | None:
        return None  # 64-bit mJ counter

    def process_memory_mb(self, pid: int) -> float | None:
        """Device memory NVML attributes to ``pid`` now (None where it cannot tell, e.g. in containers)."""
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self.nvml.NVMLError:
            return None
        used = [p.usedGpuMemory for p in procs if p.pid == pid and p.usedGpuMemory is not None]
        return used[0] / 2**20 if used else None

    def tenants(self) -> dict[str, Any]:
        """The device's other compute processes now (another tenant's kernels share the SMs and the power): how
        many, and the device memory they hold. Inside a container NVML may list none, or PIDs of another
        namespace: ``tenants_visible`` says whether this process itself was seen (our own pid is not counted)."""
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self.nvml.NVMLError:
            return {"other_processes": None, "other_processes_memory_mb": None, "tenants_visible": False}
        mine = {os.getpid(), os.getppid()}
        group = [p for p in procs if p.pid not in mine and _parent(p.pid) == os.getppid()]  # our group's idle workers
        others = [p for p in procs if p.pid not in mine and p not in group]
        return {"other_processes": len(others),
                "other_processes_memory_mb": sum((p.usedGpuMemory or 0) for p in others) / 2**20,
                "group_workers": len(group), "tenants_visible": any(p.pid in mine for p in procs)}

    def throttle_reasons(self) -> list[str] | None:
        """Why the clocks are below their maximum now (power cap, thermal, ...), by NVML's names; None if unknown."""
        n = self.nvml
        get = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        try:
            mask = int(get(self.handle))
        except n.NVMLError:
            return None
        names: dict[str, Any] = {}
        for attr in dir(n):
            for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
                if attr.startswith(prefix) and attr[len(prefix):] not in ("All", "None", "Unknown"):
                    key = re.sub(r"(?<!^)(?=[A-Z])", "_", attr[len(prefix):]).lower()
                    names.setdefault(key, int(getattr(n, attr)))
        return throttle_names(mask, names)

    def state(self) -> dict[str, Any]:
        """Identity and state for the record: name, UUID, driver, memory, power limit, clocks, temperature."""
        n, h = self.nvml, self.handle

        def safe(fn: Callable[[], Any]) -> Any:
            try:
                value = fn()
                return value.decode() if isinstance(value, bytes) else value
            except n.NVMLError:
                return None

        return {
            **self.tenants(), "throttle_reasons": self.throttle_reasons(),
            "utilization_pct": safe(lambda: n.nvmlDeviceGetUtilizationRates(h).gpu),
            "pstate": safe(lambda: n.nvmlDeviceGetPerformanceState(h)),
            "name": safe(lambda: n.nvmlDeviceGetName(h)), "uuid": safe(lambda: n.nvmlDeviceGetUUID(h)),
            "driver": safe(n.nvmlSystemGetDriverVersion),
            "cuda_driver_version": safe(n.nvmlSystemGetCudaDriverVersion),
            "memory_total_mb": safe(lambda: n.nvmlDeviceGetMemoryInfo(h).total / 2**20),
            "memory_used_mb": safe(lambda: n.nvmlDeviceGetMemoryInfo(h).used / 2**20),
            "power_limit_w": safe(lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3),
            "sm_clock_mhz": safe(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            "memory_clock_mhz": safe(lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            "temperature_c": safe(lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            "energy_counter": self.has_counter,
        }


def throttle_names(mask: int, names: dict[str, int]) -> list[str]:
    """The names of the bits set in an NVML clocks-event (throttle) ``mask``; ``names``: name -> bit (NVML's
    constants without their prefix: ``sw_power_cap``, ``hw_slowdown``, ...; one name per bit, the first in
    alphabetical order). GPU idle is left out: it is the state between blocks, not a slowdown of the timed work."""
    by_bit: dict[int, str] = {}
    for name, bit in sorted(names.items()):
        by_bit.setdefault(bit, name)
    known = 0
    for bit in by_bit:
        known |= bit
    out = [name for bit, name in sorted(by_bit.items()) if bit and mask & bit and name != "gpu_idle"]
    return out + ([f"unknown_0x{mask & ~known:x}"] if mask & ~known else [])


def _parent(pid: int) -> int | None:
    """The parent of process ``pid`` (None where /proc cannot tell: another PID namespace, gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class NvmlTracker(EnergyTracker):
    """The GPU on a GPU cell: energy, state at the start and the end, device memory where the framework's allocator
    cannot tell, and a verdict: not valid when another process used the GPU or its clocks were held down."""

    provides = ("energy", "gpu_state")
    sensor: NvmlSensor

    @classmethod
    def open(cls, job: CellJob) -> NvmlTracker | str | None:
        gpu = job.config.device.gpu
        if gpu is None:
            return None
        try:
            return cls(NvmlSensor(gpu.uuid), job.idle_seconds)
        except ImportError:
            return 'nvidia-ml-py not installed: pip install -e ".[gpu]"'
        except Exception as exc:  # noqa: BLE001 - NVMLError and friends
            return f"NVML unavailable: {exc}"

    def setup(self, emit: Callable[[str], None]) -> None:
        self.state = {"start": self.sensor.state()}
        super().setup(emit)

    def finish(self, done: Finished) -> Contribution:
        out = super().finish(done)
        self.state["end"] = self.sensor.state()
        out.fields["gpu_state"] = self.state
        if done.memory.get("peak_device_mb") is None:  # the framework's allocator could not tell
            used = self.sensor.process_memory_mb(os.getpid())
            if used is not None:
                out.fields["memory"] = {**done.memory, "device_used_mb_at_end": used,
                                        "device_memory_method": "nvml-process-at-end"}
        out.validity = gpu_validity(self.state)
        return out


def gpu_validity(state: dict[str, Any]) -> dict[str, Any]:
    """Not valid when, at the start or the end of the cell, another process used the GPU or its clocks were held
    down (power cap, thermal); valid otherwise."""
    for when in ("start", "end"):
        gpu = state.get(when) or {}
        if gpu.get("other_processes"):
            return {"valid": False, "reason": f"{gpu['other_processes']} other process(es) used the GPU at the "
                                              f"{when} of the cell"}
        if gpu.get("throttle_reasons"):
            return {"valid": False, "reason": f"the GPU's clocks were held down at the {when} of the cell "
                                              f"({', '.join(gpu['throttle_reasons'])})"}
    return {"valid": True, "reason": "no other process used the GPU and its clocks were not held down"}
