"""The inference scenario: what one cell does in its child process, phase by phase.

Set-up, once per run (:class:`Session`):

1. **load**: the runner imports its framework and loads the artifact (``cold_start.load_s``).
2. **first call** on the timed batch (``cold_start.first_call_s``: compilation lands here).
3. **parity** on the 16 reference inputs and on the timed batch itself, against the Keras reference
   logits (``parity.checked_batch_sizes``), every call at the timed batch size (:func:`at_batch_size`);
   a framework with its own weights is checked for finite, input-dependent outputs instead and ranked
   nowhere.
4. **prepare** the timed batch afresh: a runner's state belongs to the timed batch again, and the
   host-to-device copy stays outside the window.
5. **device check**: on a GPU, the framework runs on the GPU that NVML measures.
6. **energy set-up**: sensor, GPU state, idle baseline; blocks too short for the energy counter are
   extended (the record's ``config.timing`` is the timing that ran, ``timing.extended_for_energy_from_s``
   says from what).
7. **warm-up** by count and time; then the host memory high-water mark is reset, so that
   ``memory.timed_peak_host_mb`` is the timed phase's alone.

Then, on the parent's command, once per round (:meth:`Session.block`):

8. **timed block** by :func:`inferbench.measure.timing.run_block`, the one loop; the parent runs the
   blocks of all the cells of a group in a fresh random order each round.

And at the end (:meth:`Session.finish`):

9. **collect**: statistics from the rounds, energy per inference, memory, runner details.

``finish`` returns a :class:`~inferbench.spec.CellOutcome`: the record's measurement blocks and the
timing configuration that ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..base.codec import encode
from ..measure.timing import BLOCK_WARMUP_CALLS, GC_DURING_BLOCKS
from ..spec import CellJob, CellOutcome, TimingConfig

Emit = Callable[[str], None]


class Session:
    """One cell, loaded and warmed up, measuring a block per round on command."""

    def __init__(self, job: CellJob, emit: Emit) -> None:
        from ..measure.memory import current_rss_mb, peak_rss_mb
        from ..registry.frameworks import load_runner
        from ..registry.models import get_model, make_inputs

        self.job, self.emit = job, emit
        cell = job.cell
        spec = get_model(cell.model)
        rss_before = current_rss_mb()
        self.runner, load_s = _load(job, load_runner(job.framework)(), spec, emit)
        self.batch = make_inputs(spec, cell.batch_size, cell.resolution, job.config.seed + 3)
        emit("first call")
        start = time.perf_counter()
        first_out = self.runner.call(self.runner.prepare(self.batch))
        self.runner.synchronize(first_out)
        first_call_s = time.perf_counter() - start
        self.parity = _parity(job, self.runner, self.runner.to_numpy(first_out), emit)
        self.prepared = self.runner.prepare(self.batch)
        self.device_check = check_device(encode(job.config.device), self.runner)
        self.trackers, self.untracked = _open_trackers(job, emit)
        self.timing = _timing_for(job.config.timing, self.trackers)
        self.call, self.sync, self.region = _timed_call(self.runner, self.batch, self.prepared, cell)
        emit("warm-up")
        from ..measure.timing import warm_up

        self.warmup = warm_up(self.call, self.sync, self.timing.config)
        self.cold_start = {"load_s": load_s, "first_call_s": first_call_s, "load_includes": "import+load"}
        self.memory = {"peak_host_mb": peak_rss_mb(), "host_before_load_mb": rss_before}
        self.timed_memory = _reset_peak_rss()
        self.runner.reset_peak_device_memory()  # the figure is the timed phase's, not the parity batch's
        self.blocks: list[Any] = []
        self.tuning: dict[str, Any] | None = None  # set by apply() when the cell was tuned

    def block(self, round_index: int) -> dict[str, Any]:
        """Measure this round's block; the reply tells the parent it is done."""
        from ..measure.timing import run_block

        if not self.blocks:
            self.emit(f"measuring: {self.timing.config.rounds} blocks of {self.timing.config.block_s:.2g} s, "
                      "interleaved with the group's other cells")
        monitors = [(t.name, m) for t in self.trackers if (m := t.monitor()) is not None]  # around the block, not in
        self.blocks.append(run_block(self.call, self.sync, self.timing.config, round_index, monitors=monitors))
        return {"round": round_index}

    def tune(self, setting: dict[str, Any], round_index: int, block_s: float) -> dict[str, Any]:
        """One tuning block with a live ``setting`` (:meth:`Runner.apply`): its median latency, for the parent's
        choice (:mod:`inferbench.measure.tuning`)."""
        from ..measure.timing import run_block

        self.runner.apply(setting)
        config = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=block_s, min_iterations=3,
                              rounds=1)
        block = run_block(self.call, self.sync, config, round_index)
        return {"p50_ms": float(np.median(block.latencies_s)) * 1e3, "n": len(block.latencies_s)}

    def apply(self, setting: dict[str, Any], tuning: dict[str, Any]) -> dict[str, Any]:
        """Measure from now on with the chosen live ``setting``; what is timed is checked again (parity, when the
        setting is not the one checked at set-up) and warmed up afresh. ``tuning``: the record's tuning block."""
        from ..measure.timing import warm_up

        self.runner.apply(setting)
        self.tuning = tuning
        if setting and setting != tuning.get("default"):
            out = self.runner.call(self.prepared)
            self.runner.synchronize(out)
            self.parity = _parity(self.job, self.runner, self.runner.to_numpy(out), self.emit)
        self.warmup = warm_up(self.call, self.sync, self.timing.config)
        return {"applied": setting}

    def finish(self) -> CellOutcome:
        from ..measure.memory import peak_rss_mb
        from ..measure.stats import summarize
        from ..measure.timing import Measurement

        if not self.blocks:
            raise RuntimeError("no block was measured")
        m = Measurement(self.blocks, *self.warmup)
        cell = self.job.cell
        latencies_ms = [t * 1e3 for t in m.latencies_s]
        throughput = m.throughput(cell.batch_size)
        memory = {**self.memory, "timed_peak_host_mb": peak_rss_mb() if self.timed_memory else None,
                  "timed_peak_method": "vmhwm-reset" if self.timed_memory else None}
        from ..measure.trackers import Finished

        tracked = _finish_trackers(self.trackers, self.untracked,
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
                "runner": self.runner.details(),
                "tuning": self.tuning,
                **tracked,
            },
        )


def merge(outcomes: list[CellOutcome], batch_size: int) -> CellOutcome:
    """One cell's outcome from its worker processes' (each measured some of the rounds): the raw latencies
    together, their statistics with the process of each round, throughput over every window, energy and the
    machine's state over every block; parity failed if any process's did; the rest from the first process."""
    from ..measure import stats
    from ..measure.trackers import judge
    from ..measure.trackers.machine import summarize as machine_summary

    if len(outcomes) == 1:
        return outcomes[0]
    first = outcomes[0].blocks
    blocks = sorted(({**b, "process": i} for i, o in enumerate(outcomes) for b in o.blocks["timing"]["blocks"]),
                    key=lambda b: b["round"])
    processes = {b["round"]: b["process"] for b in blocks}
    samples = sorted(((r, x) for o in outcomes for r, x in zip(o.blocks["raw_rounds"], o.blocks["raw_latencies_ms"])),
                     key=lambda rx: rx[0])  # sorted is stable: each round keeps its order
    rounds, latencies = [r for r, _ in samples], [x for _, x in samples]
    window = sum(o.blocks["timing"]["window_s"] for o in outcomes)
    parity = next((o.blocks["parity"] for o in outcomes if o.blocks["parity"].get("status") == "failed"),
                  first["parity"])
    memory = {k: max((o.blocks["memory"].get(k) for o in outcomes if isinstance(o.blocks["memory"].get(k),
                                                                                (int, float))), default=v)
              for k, v in first["memory"].items()}
    merged = {**first, "parity": parity, "memory": memory, "raw_latencies_ms": latencies, "raw_rounds": rounds,
              "latency_ms": stats.summarize(latencies, rounds, processes),
              "throughput_per_s": len(latencies) * batch_size / window if window > 0 else float("nan"),
              "timing": {**first["timing"], "blocks": blocks, "window_s": window, "processes": len(outcomes),
                         "process_of_round": "round mod processes"},
              "energy": _merge_energy([o.blocks["energy"] for o in outcomes], processes, len(latencies) * batch_size,
                                      window),
              "validity": judge([o.blocks["validity"] for o in outcomes if o.blocks.get("validity")])}
    states = [o.blocks["machine_state"] for o in outcomes if o.blocks.get("machine_state")]
    if len(states) == len(outcomes) and all("threads" in st for st in states):
        merged["machine_state"] = {**states[0], **{k: v for k, v in machine_summary(
            [b for st in states for b in st["blocks"]], states[0]["threads"], states[0]["max_other_load"]).items()
            if k != "validity"}}
    return CellOutcome(timing=outcomes[0].timing, blocks=merged)


def _merge_energy(blocks: list[dict[str, Any]], processes: dict[int, int], inferences: int,
                  window: float) -> dict[str, Any]:
    """The processes' energy blocks as one: energies and windows add up, peaks take the maximum; per inference
    with its interval from the per-round figures (rounds and processes)."""
    from ..measure import stats

    if not all(b.get("available") for b in blocks):
        return next(b for b in blocks if not b.get("available"))
    out = dict(blocks[0])
    for key in ("gross_j", "net_j"):
        values = [b.get(key) for b in blocks]
        out[key] = None if any(v is None for v in values) else float(sum(values))
    peaks = [b["peak_power_w"] for b in blocks if b.get("peak_power_w") is not None]
    per_round = {int(r): v for b in blocks for r, v in (b.get("per_round_j_per_inference") or {}).items()}
    out.update(window_s=window, peak_power_w=max(peaks) if peaks else None, per_round_j_per_inference=per_round,
               mean_power_w=out["gross_j"] / window if out["gross_j"] is not None and window > 0 else None,
               joules_per_inference=out["gross_j"] / inferences if out["gross_j"] is not None else None,
               net_joules_per_inference=out["net_j"] / inferences if out["net_j"] is not None else None)
    if out["joules_per_inference"]:
        ci = stats.per_round_interval(out["joules_per_inference"], per_round, processes)
        out["joules_per_inference_ci95"] = None if ci is None else list(ci)
    return out


def finalize_group(outcomes: list[CellOutcome | None]) -> list[CellOutcome | None]:
    """The cells of a group, each with the between-process part of its intervals pooled over the group's cells
    (:func:`inferbench.measure.stats.pool_between`: the component belongs to the machine and the run; one cell's
    two or three processes measure it poorly on their own)."""
    from ..measure import stats

    fits = []
    for o in outcomes:
        spread = (o.blocks.get("latency_ms") or {}).get("spread") if o is not None else None
        fits.append(None if not spread else stats.Spread(**{k: spread[k] for k in (
            "rounds", "processes", "within_var", "within_df", "between_var", "between_df", "between_raw")}))
    pooled = stats.pool_between(fits)
    if pooled[0] is None:
        return outcomes
    out: list[CellOutcome | None] = []
    for o in outcomes:
        if o is None or not (o.blocks.get("latency_ms") or {}).get("spread"):
            out.append(o)
            continue
        b = o.blocks
        processes = {blk["round"]: blk.get("process", 0) for blk in b["timing"]["blocks"]}
        latency = stats.summarize(b["raw_latencies_ms"], b["raw_rounds"], processes, pooled)
        out.append(CellOutcome(timing=o.timing, blocks={**b, "latency_ms": {
            **latency, "spread": {**latency["spread"], "pooled_cells": sum(f is not None for f in fits)}}}))
    return out


def _open_trackers(job: CellJob, emit: Emit) -> tuple[list[Any], dict[str, str]]:
    """Every tracker for the cell's device (:mod:`inferbench.measure.trackers`), set up (idle baselines, the device's
    state at the start); one that cannot be set up is left out with the reason, never the cell."""
    from ..measure.trackers import open_trackers

    opened, missing = open_trackers(job)
    ready = []
    for tracker in opened:
        try:
            tracker.setup(emit)
            ready.append(tracker)
        except Exception as exc:  # noqa: BLE001 - a sensor's failure costs its figures, never the cell
            for block in tracker.provides:
                missing.setdefault(block, f"{tracker.name} failed to start: {type(exc).__name__}: {str(exc)[:160]}")
    return ready, missing


def _finish_trackers(trackers: list[Any], missing: dict[str, str], done: Any) -> dict[str, Any]:
    """The record's blocks from the trackers (energy, GPU state, machine state, device memory where only NVML can
    tell) and the cell's ``validity`` from their verdicts (:func:`inferbench.measure.trackers.judge`); a block no
    tracker could give says why (``energy``: available false and the reason)."""
    from ..measure.trackers import judge

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


def run(job: CellJob, emit: Emit) -> CellOutcome:
    """One cell alone, in this process: set-up, every round's block back to back, collect (for tests
    and benchmarks; a run interleaves the blocks of its cells, see :mod:`inferbench.execution.rounds`)."""
    session = Session(job, emit)
    for r in range(session.timing.config.rounds):
        session.block(r)
    return session.finish()


def _reset_peak_rss() -> bool:
    """Reset this process's resident-set high-water mark (Linux: ``clear_refs`` 5), so that the peak
    read after the timed phase is the timed phase's; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _load(job: CellJob, runner: Any, spec: Any, emit: Emit) -> tuple[Any, float]:
    from ..runners.base import LoadContext

    ctx = LoadContext(
        folder=Path(job.artifact_dir), artifact=None if job.artifact is None else Path(job.artifact),
        model=spec, resolution=job.cell.resolution, device=job.config.device.kind, threads=job.config.threads,
        seed=job.config.seed, precision=job.cell.precision, options=job.cell.options,
        batch_size=job.cell.batch_size, batch_sizes=job.group_batch_sizes, setting=dict(job.setting))
    emit("loading")
    start = time.perf_counter()
    runner.load(ctx)
    return runner, time.perf_counter() - start


def _parity(job: CellJob, runner: Any, timed_out: np.ndarray, emit: Emit) -> dict[str, Any]:
    """The 16 reference inputs and the timed batch (whose compiled program may differ) against the Keras
    reference; own weights: finite, input-dependent outputs on the reference inputs only."""
    from ..measure import parity
    from ..registry.artifacts import REFERENCE_INPUTS, REFERENCE_LOGITS, REFERENCE_SPREAD, timed_reference

    emit("parity check")
    folder = Path(job.artifact_dir)
    precision, bs = job.cell.precision, job.cell.batch_size
    out = at_batch_size(runner, np.load(folder / REFERENCE_INPUTS), bs)
    if not job.framework.verified(job.cell.model):
        return parity.sanity(out)
    spread_file = folder / REFERENCE_SPREAD  # a Keras source's own rounding spread, which may widen the gate
    spread = json.loads(spread_file.read_text()) if spread_file.exists() else None
    reference = parity.compare(np.load(folder / REFERENCE_LOGITS), out, precision, spread)
    path = folder / timed_reference(bs)
    if not path.exists():  # never skipped quietly: what is timed is what is checked
        raise RuntimeError(f"the reference outputs of the timed batch (batch size {bs}) are missing from {folder}")
    return parity.combine(reference, parity.compare(np.load(path), timed_out, precision, spread), bs)


def at_batch_size(runner: Any, inputs: np.ndarray, batch_size: int) -> np.ndarray:
    """The runner's outputs for ``inputs``, computed in calls of exactly the timed batch size (the last
    one padded with copies of its last input): what is checked is the program that is timed, and a
    compiling runtime (XLA, inductor, OpenVINO's static shape, TensorRT) never compiles another."""
    outputs = []
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start:start + batch_size]
        padded = np.concatenate([chunk, np.repeat(chunk[-1:], batch_size - len(chunk), axis=0)])
        out = runner.call(runner.prepare(np.ascontiguousarray(padded)))
        runner.synchronize(out)
        outputs.append(np.array(runner.to_numpy(out)[:len(chunk)], copy=True))
    return np.concatenate(outputs)


@dataclasses.dataclass
class _Timing:
    config: TimingConfig
    notes: dict[str, Any]


def _timing_for(timing: TimingConfig, trackers: list[Any]) -> _Timing:
    """The timing that runs: blocks lengthened where a tracker cannot resolve shorter ones (an energy counter that
    updates every ~100 ms); the record's ``timing.extended_for_energy_from_s`` says from what."""
    need = max((t.min_block_s for t in trackers), default=0.0)
    if timing.block_s >= need:
        return _Timing(timing, {})
    return _Timing(dataclasses.replace(timing, min_duration_s=need * timing.rounds),
                   {"extended_for_energy_from_s": timing.min_duration_s})


#: Test-only (benchmarks/aa_calibration.py): ``FRAMEWORK:FACTOR`` makes every timed call of that framework's cells
#: FACTOR times as long, by busy work after it; the record says so (``timing.test_slowdown``), the cell's identity
#: does not change, so that ``compare`` can be shown a real slowdown of one configuration.
TEST_SLOWDOWN = "INFERBENCH_TEST_SLOWDOWN"


def test_slowdown(framework: str) -> float | None:
    key, _, factor = os.environ.get(TEST_SLOWDOWN, "").partition(":")
    return float(factor) if key == framework and factor else None


def _timed_call(runner: Any, batch: np.ndarray, prepared: Any, cell: Any) -> tuple[Any, Any, str]:
    """What one timed iteration is: (call, synchronize, timed-region code)."""
    if cell.options.include_transfer:
        # host array in, host array out, as the seed projects timed it: the copies are inside the window
        return lambda: runner.to_numpy(runner.call(runner.prepare(batch))), lambda _: None, "h2d+call+d2h"
    factor = test_slowdown(cell.framework)
    if factor is not None:
        def slowed() -> Any:
            start = time.perf_counter()
            out = runner.call(prepared)
            runner.synchronize(out)
            until = time.perf_counter() + (factor - 1.0) * (time.perf_counter() - start)
            while time.perf_counter() < until:
                pass
            return out

        return slowed, lambda _: None, "call+sync+test-slowdown"
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
