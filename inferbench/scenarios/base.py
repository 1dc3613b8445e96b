"""The phases every scenario shares, in its worker process: load the runner and its artifact, check its outputs
against the reference at the timed batch size (parity), open the trackers (energy, the machine's state) and lengthen
blocks they cannot resolve, the timed call, and what memory and the device say at the end."""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..base.codec import encode
from ..measure import trackers
from ..measure.memory import current_rss_mb, peak_rss_mb
from ..measure.stats import summarize
from ..measure.timing import BLOCK_WARMUP_CALLS, GC_DURING_BLOCKS, Measurement, run_block, warm_up
from ..measure.trackers import Finished, judge
from ..registry.artifacts import route
from ..registry.frameworks import load_runner
from ..registry.inputs import make_inputs
from ..registry.models import get_model
from ..runners.base import LoadContext
from ..spec import CellJob, CellOutcome, TimingConfig
from . import postprocess
from .gates import Emit, check_parity, reusable
from .slowdown import slowed_call, test_slowdown


def open_tracked(job: CellJob, emit: Emit) -> tuple[list[Any], dict[str, str]]:
    """Every tracker for the cell's device (:mod:`inferbench.measure.trackers`), set up (idle baselines, the device's
    state at the start); one that cannot be set up is left out with the reason, never the cell."""
    opened, missing = trackers.open_trackers(job)  # (read through its module: a test puts its own in)
    ready = []
    for tracker in opened:
        try:
            tracker.setup(emit)
            ready.append(tracker)
        except Exception as exc:  # noqa: BLE001 - a sensor's failure costs its figures, never the cell
            for block in tracker.provides:
                missing.setdefault(block, f"{tracker.name} failed to start: {type(exc).__name__}: {str(exc)[:160]}")
    return ready, missing


def idle_tracked(trackers: list[Any]) -> dict[str, Any]:
    """What the trackers read once the rounds are over, every worker of the group idle until all have (the energy
    tracker: the idle power again); a tracker that fails here is said by its finish (its figures, never the cell)."""
    for tracker in trackers:
        after = getattr(tracker, "after_rounds", None)
        if after is not None:
            try:
                after()
            except Exception:  # noqa: BLE001, S110 - a sensor's failure costs its figures, never the cell
                pass
    return {}


def finish_tracked(trackers: list[Any], missing: dict[str, str], done: Any) -> dict[str, Any]:
    """The record's blocks from the trackers (energy, GPU state, machine state, device memory where only NVML can
    tell) and the cell's ``validity`` from their verdicts (:func:`inferbench.measure.trackers.judge`); a block no
    tracker could give says why (``energy``: available false and the reason)."""
    fields: dict[str, Any] = {"energy": {"available": False, "reason": missing.get("energy", "no energy sensor")},
                              "gpu_state": None, "machine_state": None, "memory": done.memory}
    verdicts = []
    given: set[str] = set()
    for tracker in trackers:
        try:
            contribution = tracker.finish(done)
        except Exception as exc:  # noqa: BLE001 - a sensor's failure costs its figures, never the cell
            why = f"{tracker.name} failed: {type(exc).__name__}: {str(exc)[:160]}"
            fields.update({b: {"available": False, "reason": why} for b in tracker.provides if b == "energy"})
            verdicts.append({"valid": None, "reason": f"machine state unknown: {why}"})
            continue
        for block, value in contribution.fields.items():  # a block two trackers write is merged key by key
            both = block in given and isinstance(fields.get(block), dict) and isinstance(value, dict)
            fields[block] = {**fields[block], **value} if both else value
            given.add(block)
        if contribution.validity is not None:
            verdicts.append(contribution.validity)
    return {**fields, "validity": judge(verdicts)}


def reset_peak_rss() -> bool:
    """Reset this process's resident-set high-water mark (Linux: ``clear_refs`` 5), so that the peak
    read after the timed phase is the timed phase's; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def private_folder() -> str:
    """A folder of this worker's own (0700, removed when it exits) for the copies it loads from a shared cache."""
    folder = tempfile.mkdtemp(prefix="inferbench-private-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def load(job: CellJob, runner: Any, spec: Any, emit: Emit) -> tuple[Any, float]:
    ctx = LoadContext(
        folder=Path(job.artifact_dir), artifact=None if job.artifact is None else Path(job.artifact),
        model=spec, resolution=job.cell.resolution, device=job.config.device.kind, threads=job.config.threads,
        seed=job.config.seed, precision=job.cell.precision, options=job.cell.options,
        batch_size=job.cell.batch_size, batch_sizes=job.group_batch_sizes, setting=dict(job.setting),
        private=private_folder() if job.config.trust_cache else None)
    runner.check(ctx)
    emit("loading")
    start = time.perf_counter()
    runner.load(ctx)
    return runner, time.perf_counter() - start


def runner_block(job: CellJob, runner: Any) -> dict[str, Any]:
    """The record's ``runner`` block: what the runner says of itself, and the route its artifact took from the source
    (:func:`~inferbench.registry.artifacts.route`)."""
    spec = get_model(job.cell.model)
    kind = job.framework.artifact_for(spec, job.cell.scenario, job.cell.precision)
    return {**runner.details(), "route": route(kind, spec)}


@dataclasses.dataclass
class Timing:
    config: TimingConfig
    notes: dict[str, Any]


def timing_for(timing: TimingConfig, trackers: list[Any]) -> Timing:
    """The timing that runs: blocks lengthened where a tracker cannot resolve shorter ones (an energy counter that
    updates every ~100 ms); the record's ``timing.extended_for_energy_from_s`` says from what."""
    need = max((t.min_block_s for t in trackers), default=0.0)
    if timing.block_s >= need:
        return Timing(timing, {})
    return Timing(dataclasses.replace(timing, min_duration_s=need * timing.rounds),
                   {"extended_for_energy_from_s": timing.min_duration_s})


def timed_call(runner: Any, batch: np.ndarray, prepared: Any, cell: Any,
               post: Callable[[Any], Any] | None = None) -> tuple[Any, Any, str]:
    """What one timed iteration is: (call, synchronize, timed-region code); ``post``: the task's post-processing of
    the host outputs, timed inside each call with ``--postprocess inside``."""
    if post is not None and cell.options.postprocess == "inside":
        # the outputs copied to the host and post-processed inside the window: the latency a caller of the whole
        # pipeline meets (with --include-transfer, the input's copy too)
        feed = (lambda: runner.prepare(batch)) if cell.options.include_transfer else (lambda: prepared)
        region = ("h2d+" if cell.options.include_transfer else "") + "call+d2h+postprocess"
        return lambda: post(runner.to_numpy(runner.call(feed()))), lambda _: None, region
    if cell.options.include_transfer:
        # host array in, host array out, as the scripts inferbench replaces timed it: the copies are inside the window
        return lambda: runner.to_numpy(runner.call(runner.prepare(batch))), lambda _: None, "h2d+call+d2h"
    factor = test_slowdown(cell.framework)
    if factor is not None:
        return slowed_call(runner, prepared, factor), lambda _: None, "call+sync+test-slowdown"
    return lambda: runner.call(prepared), runner.synchronize, "call+sync"


def device_memory(runner: Any, memory: dict[str, Any]) -> dict[str, Any]:
    """Peak device memory from the framework's allocator (where it has none, a tracker may add what it sees: NVML's
    figure for this process at the end of the run)."""
    peak = runner.peak_device_memory_mb()
    return {**memory, "peak_device_mb": peak, "device_memory_method": "allocator-peak" if peak is not None else None}


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


class Loaded:
    """A cell's runner set up in its worker, as every scenario starts (phases 1-6 of
    :mod:`inferbench.scenarios.inference`): loaded, called once on the timed batch (``first_call_s``: compilation
    lands here), its outputs checked against the reference (``parity``), the timed batch placed anew, the device
    checked, the trackers open (energy, the machine)."""

    def __init__(self, job: CellJob, emit: Emit) -> None:
        self.job, self.emit = job, emit
        cell = job.cell
        self.spec = get_model(cell.model)
        self.rss_before = current_rss_mb()
        self.runner, self.load_s = load(job, load_runner(job.framework)(), self.spec, emit)
        self.batch = make_inputs(self.spec, cell.batch_size, cell.resolution, job.config.seed + 3)
        emit("first call")
        start = time.perf_counter()
        first_out = self.runner.call(self.runner.prepare(self.batch))
        self.runner.synchronize(first_out)
        self.first_call_s = time.perf_counter() - start
        start = time.perf_counter()
        host = self.runner.to_numpy(first_out)
        self.parity = check_parity(job, self.runner, host, emit)
        self.parity_s = time.perf_counter() - start
        self.task = {"outputs": postprocess.declared(job), "postprocess": postprocess.timed(job, host, emit,
                                                                                            self.parity)}
        # in the timed call with --postprocess inside; not for a cell that failed parity (its outputs may not even have
        # the reference's shape: the failure is the cell's answer, and its calls are timed bare)
        inside = job.cell.options.postprocess == "inside" and self.parity.get("status") != "failed"
        self.post = postprocess.function(job) if inside else None
        self.prepared = self.runner.prepare(self.batch)
        self.device_check = check_device(encode(job.config.device), self.runner)
        start = time.perf_counter()
        self.trackers, self.untracked = open_tracked(job, emit)
        self.trackers_s = time.perf_counter() - start

    @property
    def cold_start(self) -> dict[str, Any]:
        """Each set-up phase's wall time in the worker (where a run's minutes go besides its timed seconds)."""
        return {"load_s": self.load_s, "first_call_s": self.first_call_s, "load_includes": "import+load",
                "parity_s": self.parity_s, "trackers_s": self.trackers_s}


class Measured:
    """A scenario's session that measures a timed call in blocks, one per round, on the parent's command
    (inference, training): set by the scenario before :meth:`start_timed`: ``job``, ``emit``, ``runner``,
    ``parity``, ``device_check``, ``trackers``, ``untracked``, ``timing``, ``call``, ``sync``, ``region``,
    ``cold_start``; ``extra`` holds the scenario's own record blocks (``tuning``, ``training``)."""

    job: CellJob
    emit: Emit
    runner: Any
    parity: dict[str, Any]
    device_check: dict[str, Any] | None
    trackers: list[Any]
    untracked: dict[str, str]
    timing: Timing
    call: Callable[[], Any]
    sync: Callable[[Any], None]
    region: str
    cold_start: dict[str, Any]
    task: dict[str, Any] | None = None  # the model's outputs as declared, its post-processing phase (Loaded.task)

    @property
    def judged(self) -> dict[str, Any]:
        """What the cell's other processes take from this one rather than count again (:func:`.gates.reusable`)."""
        return reusable(self.parity)

    def start_timed(self, rss_before: float | None) -> None:
        """Warm up (by count and time), then reset the memory high-water marks: the peaks read at the end are the
        timed phase's."""
        self.emit("warm-up")
        self.warmup = warm_up(self.call, self.sync, self.timing.config)
        self.memory = {"peak_host_mb": peak_rss_mb(), "host_before_load_mb": rss_before}
        self.timed_memory = reset_peak_rss()
        self.runner.reset_peak_device_memory()  # the figure is the timed phase's, not the parity batch's
        self.blocks: list[Any] = []
        self.extra: dict[str, Any] = {"tuning": None}

    def block(self, round_index: int) -> dict[str, Any]:
        """Measure this round's block; the reply tells the parent it is done."""
        if not self.blocks:
            self.emit(f"measuring: {self.timing.config.rounds} blocks of {self.timing.config.block_s:.2g} s, "
                      "interleaved with the group's other cells")
        monitors = [(t.name, m) for t in self.trackers if (m := t.monitor()) is not None]  # around the block, not in
        self.blocks.append(run_block(self.call, self.sync, self.timing.config, round_index, monitors=monitors))
        return {"round": round_index, "p50_ms": float(np.median(self.blocks[-1].latencies_s)) * 1e3}

    def idle(self) -> dict[str, Any]:
        """The rounds are over: the trackers read the idle device (:func:`idle_tracked`)."""
        return idle_tracked(self.trackers)

    def finish(self) -> CellOutcome:
        if not self.blocks:
            raise RuntimeError("no block was measured")
        m = Measurement(self.blocks, *self.warmup)
        cell = self.job.cell
        latencies_ms = [t * 1e3 for t in m.latencies_s]
        throughput = m.throughput(cell.batch_size)
        memory = {**self.memory, "timed_peak_host_mb": peak_rss_mb() if self.timed_memory else None,
                  "timed_peak_method": "vmhwm-reset" if self.timed_memory else None}
        tracked = finish_tracked(self.trackers, self.untracked,
                                 Finished(self.blocks, m.iterations * cell.batch_size, throughput,
                                          device_memory(self.runner, memory)))
        return CellOutcome(
            timing=self.timing.config,
            blocks={
                "parity": self.parity,
                "latency_ms": summarize(latencies_ms, m.rounds),
                "throughput_per_s": throughput,
                "raw_latencies_ms": latencies_ms,
                "raw_rounds": m.rounds,
                "timing": {"window_s": m.window_s, "warmup_iterations": m.warmup_iterations,
                           "warmup_s": m.warmup_s, "clock": "perf_counter", "timed_region": self.region,
                           "throughput_rule": "samples/window", "block_warmup_calls": BLOCK_WARMUP_CALLS,
                           "gc": GC_DURING_BLOCKS, "test_slowdown": test_slowdown(cell.framework),
                           "blocks": [{"round": b.round, "n": len(b.latencies_s), "window_s": b.window_s,
                                       "started_at": b.started_at} for b in self.blocks],
                           **self.job.interleaving, **self.timing.notes},
                "cold_start": self.cold_start,
                "device_check": self.device_check,
                "runner": runner_block(self.job, self.runner),
                **(self.task or {}),
                **self.extra,
                **tracked,
            },
        )
