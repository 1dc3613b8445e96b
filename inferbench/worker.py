"""Child-process side: ``python -m inferbench.worker JOB.json RESULT.json``.

Each export and each measurement cell runs in a fresh interpreter, so TensorFlow, torch,
ONNX Runtime and TensorRT never share a process (thread pools, allocators and CUDA contexts fight).
The child reports progress as ``@@inferbench <phase>`` lines on stdout and writes its result (or
its error and traceback) atomically to RESULT.json.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from .errors import MissingDependency, UsageError

PROGRESS_PREFIX = "@@inferbench "


def emit(phase: str) -> None:
    print(PROGRESS_PREFIX + phase, flush=True)


def export_job(job: dict[str, Any]) -> dict[str, Any]:
    from .exporters import EXPORTERS, ExportContext, cache

    kind = job["kind"]
    ctx = ExportContext(
        folder=Path(job["folder"]), model=job["model"], resolution=job["resolution"],
        weights=job["weights"], seed=job["seed"], batch_sizes=tuple(job.get("batch_sizes", (1,))),
    )
    ctx.folder.mkdir(parents=True, exist_ok=True)
    emit(f"exporting {kind}")
    start = time.perf_counter()
    entry = importlib.import_module(EXPORTERS[kind].module).export(ctx)
    entry["export_s"] = time.perf_counter() - start
    entry["exported_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    entry["versions"] = cache.package_versions(EXPORTERS[kind].packages)
    entry["files"] = {}
    for rel in entry.pop("paths"):
        entry["files"].update(cache.hash_tree(ctx.folder / rel))
    entry["files"] = {str(Path(k)): v for k, v in entry["files"].items()}
    cache.record(ctx.folder, kind, entry, job["key_inputs"])
    return entry


def device_memory(runner: Any, sensor: Any, memory: dict[str, Any]) -> dict[str, Any]:
    """Peak device memory from the framework's allocator; where it has none, what NVML attributes to
    this process at the end of the run (a current figure, not a peak: the record says which)."""
    peak = runner.peak_device_memory_mb()
    memory.update(peak_device_mb=peak, device_memory_method="framework allocator peak (reset before the timed "
                  "window where the framework can: torch, TensorFlow; JAX counts from process start)"
                  if peak is not None else None)
    if peak is None and hasattr(sensor, "process_memory_mb"):
        used = sensor.process_memory_mb(os.getpid())
        if used is not None:
            memory.update(device_used_mb_at_end=used, device_memory_method="NVML process memory at end of run")
    return memory


def check_device(device: dict[str, Any], runner: Any) -> dict[str, Any] | None:
    """On a GPU: the framework must run on the GPU whose NVML handle measures power and memory."""
    if device.get("kind") != "gpu" or not device.get("gpu"):
        return None
    want = device["gpu"]["uuid"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = runner.device_uuid()
    check = {"nvml_uuid": want, "cuda_visible_devices": visible, "framework_uuid": seen,
             "method": "CUDA_VISIBLE_DEVICES" + (" + the framework's device UUID" if seen else "")}
    if visible != want:
        raise RuntimeError(f"the child sees CUDA_VISIBLE_DEVICES={visible!r}, not the measured GPU {want}")
    if seen is not None and seen.lower() != want.lower():
        raise RuntimeError(f"the framework runs on GPU {seen}, but power and memory are read from {want}")
    return check


def cell_job(job: dict[str, Any]) -> dict[str, Any]:
    from . import parity
    from .exporters import EXPORTERS, REFERENCE_INPUTS, REFERENCE_LOGITS
    from .frameworks import get_framework, load_runner
    from .measure import power
    from .measure.memory import current_rss_mb, peak_rss_mb
    from .measure.stats import summarize
    from .measure.timing import TimingConfig, run_timed
    from .models import get_model, make_inputs
    from .runners.base import LoadContext

    fw = get_framework(job["framework"])
    spec = get_model(job["model"])
    folder = Path(job["folder"])
    ctx = LoadContext(
        folder=folder,
        artifact=None if fw.artifact == "none" else folder / EXPORTERS[fw.artifact].path,
        model=spec, resolution=job["resolution"], device=job["device"]["kind"], threads=job["threads"],
        seed=job["seed"], options=job.get("options", {}),
    )
    rss_before = current_rss_mb()
    emit("loading")
    start = time.perf_counter()
    runner = load_runner(fw)()
    runner.load(ctx)
    load_s = time.perf_counter() - start

    options = job.get("options", {})
    precision = options.get("precision") or fw.precision
    batch = make_inputs(spec, job["batch_size"], job["resolution"], job["seed"] + 3)
    prepared = runner.prepare(batch)
    emit("first call")
    start = time.perf_counter()
    runner.synchronize(runner.call(prepared))
    first_call_s = time.perf_counter() - start

    if fw.parity:
        emit("parity check")
        ref_in = np.load(folder / REFERENCE_INPUTS)
        ref_out = np.load(folder / REFERENCE_LOGITS)
        out = runner.call(runner.prepare(ref_in))
        runner.synchronize(out)
        parity_block = parity.compare(ref_out, runner.to_numpy(out), precision)
    else:
        parity_block = parity.not_applicable("independent weights (torchvision implementation)")
    # prepared afresh after parity: a runner's state (e.g. a TensorRT context's input shape) now
    # belongs to the benchmark batch again; the copy stays outside the timed window
    prepared = runner.prepare(batch)
    device_check = check_device(job["device"], runner)

    timing_block: dict[str, Any] = {}
    sensor, no_energy = power.sensor_for(job["device"])
    monitors = []
    gpu_state: dict[str, Any] = {}
    if sensor is not None:
        if hasattr(sensor, "state"):
            gpu_state["start"] = sensor.state()
        emit("idle power baseline")
        idle = power.idle_baseline(sensor, seconds=job.get("idle_seconds", 2.0))
        monitors.append(("energy", power.EnergyMonitor(sensor, idle["idle_w"])))
        if job["timing"]["min_duration_s"] < power.MIN_WINDOW_S * 2:
            # never report energy over a window the ~100 ms counter cannot resolve
            timing_block["extended_for_energy_from_s"] = job["timing"]["min_duration_s"]
            job["timing"] = {**job["timing"], "min_duration_s": power.MIN_WINDOW_S * 2}
    timing = TimingConfig(**job["timing"])
    runner.reset_peak_device_memory()  # the figure is the timed run's, not the 16-input parity batch's
    if options.get("include_transfer"):
        # host array in, host array out, as the seed projects timed it: the copies are inside the window
        region = "prepare (host-to-device copy) + call + to_numpy (device-to-host copy), per iteration"
        measurement = run_timed(lambda: runner.to_numpy(runner.call(runner.prepare(batch))), lambda _: None,
                                timing, monitors=monitors, on_phase=emit)
    else:
        region = "call + synchronize on an input prepared before the window (host-to-device copy outside)"
        measurement = run_timed(lambda: runner.call(prepared), runner.synchronize, timing, monitors=monitors,
                                on_phase=emit)
    latencies_ms = [t * 1e3 for t in measurement.latencies_s]
    throughput = measurement.throughput(job["batch_size"])
    if sensor is not None:
        energy = power.per_inference(measurement.monitors["energy"], measurement.iterations * job["batch_size"],
                                     throughput)
        energy["idle_baseline"] = idle
        if hasattr(sensor, "state"):
            gpu_state["end"] = sensor.state()
    else:
        energy = {"available": False, "reason": no_energy}
    return {
        "parity": parity_block,
        "latency_ms": summarize(latencies_ms),
        "throughput_per_s": throughput,
        "energy": energy,
        "raw_latencies_ms": latencies_ms,
        "timing": {
            "window_s": measurement.window_s,
            "warmup_iterations": measurement.warmup_iterations,
            "warmup_s": measurement.warmup_s,
            "config": job["timing"],
            "clock": "time.perf_counter",
            "timed_region": region,
            "include_transfer": bool(options.get("include_transfer")),
            "throughput_rule": "samples / wall-clock of the whole timed window",
            **timing_block,
        },
        "cold_start": {"load_s": load_s, "first_call_s": first_call_s,
                       "load_includes": "importing the framework and loading the artifact, in a fresh process"},
        "memory": device_memory(runner, sensor, {"peak_host_mb": peak_rss_mb(), "host_before_load_mb": rss_before}),
        "gpu_state": gpu_state or None,
        "device_check": device_check,
        "runner": runner.details(),
    }


def die_with_parent() -> None:
    """A killed sweep or run must not leave its worker measuring on: ask Linux to SIGKILL this process
    when its parent dies, and leave at once if the parent is already gone."""
    parent = os.environ.get("INFERBENCH_PARENT_PID")
    if not parent:
        return
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(parent):
        os._exit(3)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    die_with_parent()
    job_path, result_path = Path(args[0]), Path(args[1])
    job = json.loads(job_path.read_text())
    from .results import atomic_write_text

    try:
        payload = export_job(job) if job["type"] == "export" else cell_job(job)
        result: dict[str, Any] = {"ok": True, "result": payload}
    except (UsageError, MissingDependency) as exc:
        result = {"ok": False, "usage_error": isinstance(exc, UsageError), "error": str(exc),
                  "traceback": None}
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as a failed row
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        result = {"ok": False, "usage_error": False,
                  "error": f"{type(exc).__name__}: {first}" if first else type(exc).__name__,
                  "traceback": traceback.format_exc()}
    atomic_write_text(result_path, json.dumps(result, allow_nan=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
