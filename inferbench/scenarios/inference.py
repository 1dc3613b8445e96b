"""The inference scenario: what one cell does in its child process, phase by phase.

1. **load**: the runner imports its framework and loads the artifact (``cold_start.load_s``).
2. **first call** on the benchmark batch (``cold_start.first_call_s``: compilation lands here).
3. **parity** on the 16 reference inputs, against the Keras reference logits (not applicable to a
   framework with its own weights).
4. **prepare** the benchmark batch afresh: a runner's state belongs to the timed batch again, and the
   host-to-device copy stays outside the window.
5. **device check**: on a GPU, the framework runs on the GPU that NVML measures.
6. **energy set-up**: sensor, GPU state, idle baseline; a window too short for the energy counter is
   extended (the record's ``config.timing`` is the timing that ran, ``timing.extended_for_energy_from_s``
   says from what).
7. **timed window**: warm-up and measurement by :func:`inferbench.measure.timing.run_timed`, the one loop.
8. **collect**: statistics, energy per inference, memory, runner details.

``run`` returns a :class:`~inferbench.config.CellOutcome`: the record's measurement blocks and the
timing configuration that ran.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..codec import encode
from ..config import CellJob, CellOutcome
from ..measure.timing import TimingConfig

Emit = Callable[[str], None]


def run(job: CellJob, emit: Emit) -> CellOutcome:
    from ..frameworks import load_runner
    from ..measure.memory import current_rss_mb, peak_rss_mb
    from ..models import get_model, make_inputs

    cell, fw = job.cell, job.framework
    spec = get_model(cell.model)
    rss_before = current_rss_mb()
    runner, load_s = _load(job, load_runner(fw)(), spec, emit)
    batch = make_inputs(spec, cell.batch_size, cell.resolution, job.config.seed + 3)
    emit("first call")
    start = time.perf_counter()
    runner.synchronize(runner.call(runner.prepare(batch)))
    first_call_s = time.perf_counter() - start
    parity_block = _parity(job, runner, emit)
    prepared = runner.prepare(batch)
    device_check = check_device(encode(job.config.device), runner)
    timing, energy_setup = _energy_setup(job, emit)
    runner.reset_peak_device_memory()  # the figure is the timed run's, not the 16-input parity batch's
    measurement, region = _timed(runner, batch, prepared, timing.config, energy_setup.monitors, cell, emit)
    latencies_ms = [t * 1e3 for t in measurement.latencies_s]
    throughput = measurement.throughput(cell.batch_size)
    from ..measure.stats import summarize

    return CellOutcome(
        timing=timing.config,
        blocks={
            "parity": parity_block,
            "latency_ms": summarize(latencies_ms),
            "throughput_per_s": throughput,
            "energy": energy_setup.finish(measurement, cell.batch_size, throughput),
            "raw_latencies_ms": latencies_ms,
            "timing": {"window_s": measurement.window_s, "warmup_iterations": measurement.warmup_iterations,
                       "warmup_s": measurement.warmup_s, "clock": "perf_counter", "timed_region": region,
                       "throughput_rule": "samples/window", **timing.notes},
            "cold_start": {"load_s": load_s, "first_call_s": first_call_s, "load_includes": "import+load"},
            "memory": device_memory(runner, energy_setup.sensor,
                                    {"peak_host_mb": peak_rss_mb(), "host_before_load_mb": rss_before}),
            "gpu_state": energy_setup.gpu_state or None,
            "device_check": device_check,
            "runner": runner.details(),
        },
    )


def _load(job: CellJob, runner: Any, spec: Any, emit: Emit) -> tuple[Any, float]:
    from ..runners.base import LoadContext

    ctx = LoadContext(
        folder=Path(job.artifact_dir), artifact=None if job.artifact is None else Path(job.artifact),
        model=spec, resolution=job.cell.resolution, device=job.config.device.kind, threads=job.config.threads,
        seed=job.config.seed, precision=job.cell.precision, options=job.cell.options,
        batch_size=job.cell.batch_size, batch_sizes=job.group_batch_sizes)
    emit("loading")
    start = time.perf_counter()
    runner.load(ctx)
    return runner, time.perf_counter() - start


def _parity(job: CellJob, runner: Any, emit: Emit) -> dict[str, Any]:
    from .. import parity
    from ..exporters import REFERENCE_INPUTS, REFERENCE_LOGITS

    if not job.framework.same_weights:
        return parity.not_applicable("own-weights")
    emit("parity check")
    folder = Path(job.artifact_dir)
    out = runner.call(runner.prepare(np.load(folder / REFERENCE_INPUTS)))
    runner.synchronize(out)
    return parity.compare(np.load(folder / REFERENCE_LOGITS), runner.to_numpy(out), job.cell.precision)


@dataclasses.dataclass
class _Timing:
    config: TimingConfig
    notes: dict[str, Any]


@dataclasses.dataclass
class _Energy:
    sensor: Any
    reason: str
    monitors: list[tuple[str, Any]]
    gpu_state: dict[str, Any]
    idle: dict[str, Any] | None = None

    def finish(self, measurement: Any, batch_size: int, throughput: float) -> dict[str, Any]:
        from ..measure import power

        if self.sensor is None:
            return {"available": False, "reason": self.reason}
        energy = power.per_inference(measurement.monitors["energy"], measurement.iterations * batch_size,
                                     throughput)
        energy["idle_baseline"] = self.idle
        if hasattr(self.sensor, "state"):
            self.gpu_state["end"] = self.sensor.state()
        return energy


def _energy_setup(job: CellJob, emit: Emit) -> tuple[_Timing, _Energy]:
    from ..measure import power

    timing = _Timing(job.config.timing, {})
    sensor, reason = power.sensor_for(encode(job.config.device))
    energy = _Energy(sensor, reason, [], {})
    if sensor is None:
        return timing, energy
    if hasattr(sensor, "state"):
        energy.gpu_state["start"] = sensor.state()
    emit("idle power baseline")
    energy.idle = power.idle_baseline(sensor, seconds=job.idle_seconds)
    energy.monitors.append(("energy", power.EnergyMonitor(sensor, energy.idle["idle_w"])))
    if timing.config.min_duration_s < power.MIN_WINDOW_S * 2:
        # never report energy over a window the ~100 ms counter cannot resolve
        timing.notes["extended_for_energy_from_s"] = timing.config.min_duration_s
        timing.config = dataclasses.replace(timing.config, min_duration_s=power.MIN_WINDOW_S * 2)
    return timing, energy


def _timed(runner: Any, batch: np.ndarray, prepared: Any, timing: TimingConfig, monitors: list[Any], cell: Any,
           emit: Emit) -> tuple[Any, str]:
    from ..measure.timing import run_timed

    if cell.options.include_transfer:
        # host array in, host array out, as the seed projects timed it: the copies are inside the window
        return run_timed(lambda: runner.to_numpy(runner.call(runner.prepare(batch))), lambda _: None, timing,
                         monitors=monitors, on_phase=emit), "h2d+call+d2h"
    return run_timed(lambda: runner.call(prepared), runner.synchronize, timing, monitors=monitors,
                     on_phase=emit), "call+sync"


def device_memory(runner: Any, sensor: Any, memory: dict[str, Any]) -> dict[str, Any]:
    """Peak device memory from the framework's allocator; where it has none, what NVML attributes to
    this process at the end of the run (a current figure, not a peak: the record says which)."""
    peak = runner.peak_device_memory_mb()
    memory.update(peak_device_mb=peak, device_memory_method="allocator-peak" if peak is not None else None)
    if peak is None and hasattr(sensor, "process_memory_mb"):
        used = sensor.process_memory_mb(os.getpid())
        if used is not None:
            memory.update(device_used_mb_at_end=used, device_memory_method="nvml-process-at-end")
    return memory


def check_device(device: dict[str, Any], runner: Any) -> dict[str, Any] | None:
    """On a GPU: the framework must run on the GPU whose NVML handle measures power and memory."""
    if device.get("kind") != "gpu" or not device.get("gpu"):
        return None
    want = device["gpu"]["uuid"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = runner.device_uuid()
    check = {"nvml_uuid": want, "cuda_visible_devices": visible, "framework_uuid": seen,
             "method": "cuda_visible_devices" + ("+framework_uuid" if seen else "")}
    if visible != want:
        raise RuntimeError(f"the child sees CUDA_VISIBLE_DEVICES={visible!r}, not the measured GPU {want}")
    if seen is not None and seen.lower() != want.lower():
        raise RuntimeError(f"the framework runs on GPU {seen}, but power and memory are read from {want}")
    return check
