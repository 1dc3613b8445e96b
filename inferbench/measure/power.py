"""Power and energy around the timed window, never on the timed thread.

Two sources, combined when both exist:
- an *energy counter* read just before and just after the window (NVML's total-energy counter on
  Volta and newer GPUs, in mJ; RAPL's package counter on CPUs, in µJ, which wraps at a known range);
- a *power sampler* on a background thread (tens of ms) for the time series, mean and peak; it also
  gives the energy (trapezoid) where there is no counter.
An idle baseline measured just before the run gives net (above idle) figures next to gross ones.
Counters update about every 100 ms, so a window shorter than ``MIN_WINDOW_S`` is flagged.

Sensors are injected, so every piece of this logic is tested on machines without the hardware.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

Clock = Callable[[], float]

#: Energy counters update about every 100 ms; a window must be much longer for the delta to mean much.
MIN_WINDOW_S = 1.0
SAMPLE_INTERVAL_S = 0.02


class Sensor(Protocol):
    name: str

    def energy_j(self) -> float | None:
        """Monotonic energy counter in joules (may wrap, see ``wrap_j``), or None if there is none."""

    def power_w(self) -> float | None:
        """Instantaneous power in watts, or None if the sensor cannot tell."""

    @property
    def wrap_j(self) -> float | None:
        """The counter wraps to zero after this many joules (None: it does not wrap)."""


def counter_delta(start: float, end: float, wrap: float | None) -> float:
    """Energy between two counter readings, across at most one wrap-around."""
    if end >= start:
        return end - start
    if wrap is None:
        raise ValueError(f"energy counter went backwards ({start} -> {end}) and does not wrap")
    return wrap - start + end


class PowerSampler:
    """Samples ``read_w`` every ``interval_s`` on a daemon thread until stopped."""

    def __init__(self, read_w: Callable[[], float | None], interval_s: float = SAMPLE_INTERVAL_S,
                 clock: Clock = time.monotonic, sleep: Callable[[float], Any] | None = None) -> None:
        self.read_w, self.interval_s, self.clock = read_w, interval_s, clock
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._thread: threading.Thread | None = None
        self.errors = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                watts = self.read_w()
            except Exception:  # a sensor hiccup must not end the run
                watts = None
                self.errors += 1
            if watts is not None:
                self.samples.append((self.clock(), float(watts)))
            self._sleep(self.interval_s)

    def start(self) -> None:
        self._stop.clear()
        self.samples = []
        self._thread = threading.Thread(target=self._run, name="inferbench-power", daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return list(self.samples)


def trapezoid_j(samples: list[tuple[float, float]]) -> float | None:
    if len(samples) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


def _read(fn: Callable[[], float | None]) -> float | None:
    """One sensor reading; a sensor error (NVML's, a powercap file gone) is no reading, never a failed cell."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - NVMLError and friends
        return None


#: Settling: mean power over windows of SETTLE_WINDOW_S until two in a row agree within SETTLE_TOLERANCE (or
#: SETTLE_MAX_S has passed). NVML's power reading is itself a ~1 s moving average on Ampere and newer, and a GPU
#: keeps its clocks (and its power) up for a while after the last kernel: a baseline taken at once is too high.
SETTLE_WINDOW_S = 0.5
SETTLE_TOLERANCE = 0.03
SETTLE_MAX_S = 8.0


def settle(sensor: Sensor, clock: Clock = time.monotonic, sleep: Callable[[float], Any] = time.sleep,
           window_s: float = SETTLE_WINDOW_S, tolerance: float = SETTLE_TOLERANCE,
           max_s: float = SETTLE_MAX_S) -> dict[str, Any]:
    """Wait until the idle device's power stops falling: ``{"settled", "settle_s", "windows_w"}`` (the
    windows' mean powers, for the record). A sensor without a power reading cannot be watched: it is not waited
    for (``settled`` None)."""
    start = clock()
    means: list[float] = []
    if _read(sensor.power_w) is None:
        return {"settled": None, "settle_s": 0.0, "windows_w": means}
    while clock() - start < max_s:
        t0, watts = clock(), []
        while clock() - t0 < window_s:
            w = _read(sensor.power_w)
            if w is not None:
                watts.append(w)
            sleep(min(0.05, window_s))
        if not watts:
            return {"settled": None, "settle_s": clock() - start, "windows_w": means}
        means.append(sum(watts) / len(watts))
        if len(means) >= 2 and abs(means[-1] - means[-2]) <= tolerance * max(abs(means[-2]), 1e-9):
            return {"settled": True, "settle_s": clock() - start, "windows_w": [round(m, 2) for m in means]}
    return {"settled": False, "settle_s": clock() - start, "windows_w": [round(m, 2) for m in means]}


def idle_baseline(sensor: Sensor, seconds: float = 2.0, clock: Clock = time.monotonic,
                  sleep: Callable[[float], Any] = time.sleep, settle_first: bool = True) -> dict[str, Any]:
    """Mean power of the idle device over ``seconds``, from the counter if there is one, else from samples;
    first (``settle_first``) waits for the power to stop falling after the work before it (:func:`settle`)."""
    settled = settle(sensor, clock, sleep) if settle_first else None
    e0, t0 = _read(sensor.energy_j), clock()
    watts: list[float] = []
    while clock() - t0 < seconds:
        w = _read(sensor.power_w)
        if w is not None:
            watts.append(w)
        sleep(min(0.05, seconds))
    e1, t1 = _read(sensor.energy_j), clock()
    out: dict[str, Any] = {"seconds": t1 - t0, "settle": settled}
    if e0 is not None and e1 is not None and t1 > t0 and e1 >= e0:
        return {"idle_w": (e1 - e0) / (t1 - t0), **out, "method": "counter"}
    if watts:
        return {"idle_w": sum(watts) / len(watts), **out, "method": "samples"}
    return {"idle_w": None, **out, "method": "none"}


@dataclass
class EnergyMonitor:
    """A window monitor (see ``measure.timing``): counter and sampler around the timed window."""

    sensor: Sensor
    idle_w: float | None = None
    interval_s: float = SAMPLE_INTERVAL_S
    clock: Clock = time.monotonic
    sampler_factory: Callable[..., PowerSampler] = PowerSampler

    def start(self) -> None:
        # a sensor without a power reading (RAPL) gets no sampler thread waking for nothing
        self.sampler = (self.sampler_factory(self.sensor.power_w, self.interval_s, self.clock)
                        if _read(self.sensor.power_w) is not None else None)
        if self.sampler is not None:
            self.sampler.start()
        self.e0 = _read(self.sensor.energy_j)

    def stop(self, window_s: float) -> dict[str, Any]:
        e1 = _read(self.sensor.energy_j)
        samples = self.sampler.stop() if self.sampler is not None else []
        watts = [w for _, w in samples]
        gross_j: float | None = None
        counter_error = None
        if self.e0 is not None and e1 is not None:
            try:
                gross_j = counter_delta(self.e0, e1, self.sensor.wrap_j)
                method = f"{self.sensor.name.lower()}-counter"
            except ValueError as exc:  # a broken counter must not cost the latency measurement
                counter_error = str(exc)
        if gross_j is None:
            gross_j, method = trapezoid_j(samples), f"{self.sensor.name.lower()}-samples-trapezoid"
        out: dict[str, Any] = {
            "available": gross_j is not None, "method": method if gross_j is not None else None,
            "sensor": self.sensor.name, "window_s": window_s, "gross_j": gross_j,
            "idle_w": self.idle_w,
            "net_j": None if gross_j is None or self.idle_w is None else gross_j - self.idle_w * window_s,
            "mean_power_w": None if gross_j is None or window_s <= 0 else gross_j / window_s,
            "peak_power_w": max(watts) if watts else None,
            "sampler": None if self.sampler is None else {
                "interval_s": self.interval_s, "n": len(samples), "errors": self.sampler.errors,
                "thread": "background",  # the timed thread reads only the counter, before and after
                "reading": getattr(self.sensor, "power_reading", None)},
            "too_short": window_s < MIN_WINDOW_S,
        }
        if counter_error:
            out["counter_error"] = counter_error
        if gross_j is None:
            out["reason"] = counter_error or "no energy counter and fewer than two power samples"
        return out


def combine(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """One energy block from the blocks of every round: energies and windows add up, peaks take the
    maximum; the method and sampler are the first block's (every block reads the same sensor)."""
    if len(blocks) == 1:
        return blocks[0]
    out = dict(blocks[0])

    def total(key: str) -> float | None:
        values = [b.get(key) for b in blocks]
        return None if any(v is None for v in values) else float(sum(values))

    window = total("window_s") or 0.0
    gross = total("gross_j")
    peaks = [b["peak_power_w"] for b in blocks if b.get("peak_power_w") is not None]
    out.update(available=all(b.get("available") for b in blocks), window_s=window, gross_j=gross,
               net_j=total("net_j"), mean_power_w=None if gross is None or window <= 0 else gross / window,
               peak_power_w=max(peaks) if peaks else None, too_short=any(b.get("too_short") for b in blocks),
               blocks=len(blocks))
    if out.get("sampler"):
        out["sampler"] = {**out["sampler"], "n": sum((b.get("sampler") or {}).get("n", 0) for b in blocks),
                          "errors": sum((b.get("sampler") or {}).get("errors", 0) for b in blocks)}
    errors = [b["counter_error"] for b in blocks if b.get("counter_error")]
    if errors:
        out["counter_error"] = errors[0]
    return out


def per_inference(energy: dict[str, Any], inferences: int, throughput: float) -> dict[str, Any]:
    """Add joules per inference, inferences per joule and throughput per watt to an energy block."""
    out = dict(energy)
    gross, net = energy.get("gross_j"), energy.get("net_j")
    out["joules_per_inference"] = gross / inferences if gross is not None and inferences else None
    out["net_joules_per_inference"] = net / inferences if net is not None and inferences else None
    out["inferences_per_joule"] = inferences / gross if gross else None
    mean_w = energy.get("mean_power_w")
    out["throughput_per_watt"] = throughput / mean_w if mean_w else None
    return out


# --------------------------------------------------------------------------- real sensors
class RaplSensor:
    """CPU package energy from Linux powercap (intel-rapl); µJ counter that wraps at max_energy_range_uj."""

    name = "RAPL"

    def __init__(self, zone: Path) -> None:
        self.zone = zone
        self._wrap = int((zone / "max_energy_range_uj").read_text()) / 1e6
        self.energy_j()  # fail now if unreadable

    @classmethod
    def find(cls, root: Path = Path("/sys/class/powercap")) -> tuple[RaplSensor | None, str]:
        zones = sorted(root.glob("intel-rapl:[0-9]")) if root.is_dir() else []
        if not zones:
            return None, f"no RAPL package zone under {root} (virtual machine or non-Intel/AMD kernel driver)"
        try:
            return cls(zones[0]), ""
        except (OSError, ValueError) as exc:
            return None, f"RAPL counter not readable ({exc}); reading it may need root"

    def energy_j(self) -> float | None:
        return int((self.zone / "energy_uj").read_text()) / 1e6

    def power_w(self) -> float | None:
        return None  # RAPL has no instantaneous power: the counter is the measurement

    @property
    def wrap_j(self) -> float | None:
        return self._wrap


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
        import os

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
        names = {}
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


def sensor_for(device: dict[str, Any]) -> tuple[Any, str]:
    """The sensor for a cell's device, or (None, why not)."""
    gpu = device.get("gpu")
    if gpu:
        try:
            return NvmlSensor(gpu["uuid"]), ""
        except ImportError:
            return None, 'nvidia-ml-py not installed: pip install -e ".[gpu]"'
        except Exception as exc:  # NVMLError and friends
            return None, f"NVML unavailable: {exc}"
    return RaplSensor.find()
