"""The phases every scenario shares, in its worker process: load the runner and its artifact, check its outputs
against the reference at the timed batch size (parity), open the trackers (energy, the machine's state) and lengthen
blocks they cannot resolve, the timed call, and what memory and the device say at the end."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..spec import CellJob, CellOutcome, TimingConfig

Emit = Callable[[str], None]


def open_tracked(job: CellJob, emit: Emit) -> tuple[list[Any], dict[str, str]]:
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


def reset_peak_rss() -> bool:
    """Reset this process's resident-set high-water mark (Linux: ``clear_refs`` 5), so that the peak
    read after the timed phase is the timed phase's; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def load(job: CellJob, runner: Any, spec: Any, emit: Emit) -> tuple[Any, float]:
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


def check_parity(job: CellJob, runner: Any, timed_out: np.ndarray, emit: Emit) -> dict[str, Any]:
    """The 16 reference inputs and the timed batch (whose compiled program may differ) against the Keras
    reference; own weights: finite, input-dependent outputs on the reference inputs only."""
    from ..measure import parity
    from ..registry.artifacts import REFERENCE_INPUTS, REFERENCE_LOGITS, timed_reference, timed_sensitivity

    emit("parity check")
    folder = Path(job.artifact_dir)
    precision, bs = job.cell.precision, job.cell.batch_size
    inputs = np.load(folder / REFERENCE_INPUTS)
    got = at_batch_size(runner, inputs, bs)
    if not job.framework.verified(job.cell.model):
        return parity.sanity(got)
    spread, sensitivity = own_rounding(folder)
    reference = parity.compare(np.load(folder / REFERENCE_LOGITS), got, precision, spread, sensitivity)
    path = folder / timed_reference(bs)
    if not path.exists():  # never skipped quietly: what is timed is what is checked
        raise RuntimeError(f"the reference outputs of the timed batch (batch size {bs}) are missing from {folder}")
    # the model's own error on the timed images, or the 16's if larger
    timed_own = parity.larger_own_error(sensitivity, _json_if_there(folder / timed_sensitivity(bs)))
    out = parity.combine(reference, parity.compare(np.load(path), timed_out, precision, spread, timed_own), bs)
    if out["status"] == "passed":  # failed: no more to count
        # with labelled images their accuracy decides a reduced precision, where it could be judged; else the agreement
        accuracy = check_accuracy(job, runner, emit) if job.config.eval_set is not None else None
        decided = accuracy_decides(precision, accuracy)
        if precision != "fp32" and job.config.agreement_inputs:
            out = judged(out, "agreement", {**check_agreement(job, runner, emit), "decides": not decided})
        if accuracy is not None:
            out = judged(out, "accuracy", {**accuracy, "decides": decided})
        if precision == "int8":  # judged by its accuracy, never by its logits: without labels, speed only
            out = parity.int8_verdict(out, accuracy)
    return where_it_diverged(out, runner, inputs, emit)


def accuracy_decides(precision: str, accuracy: dict[str, Any] | None) -> bool:
    """Does a cell's accuracy on labelled images decide its parity? For a reduced precision, where it was judged
    (passed or failed); not where it could not be (its export failed, FP32 gets none right): the agreement does then."""
    return precision != "fp32" and accuracy is not None and accuracy["status"] in ("passed", "failed")


def judged(check: dict[str, Any], key: str, block: dict[str, Any]) -> dict[str, Any]:
    """``check`` with ``block`` (an agreement or accuracy block) under ``key``; failed with its reason where the block
    failed and ``decides`` (with labelled images, their accuracy decides a reduced precision, not the agreement)."""
    failed = block["status"] == "failed" and block["decides"]
    return {**check, key: block, "status": "failed" if failed else check["status"],
            "reason": "; ".join(r for r in (check.get("reason"), failed and f"{key}: {block['reason']}") if r) or None}


def where_it_diverged(check: dict[str, Any], runner: Any, inputs: np.ndarray, emit: Emit) -> dict[str, Any]:
    """A failed parity check with where it went wrong, where the runtime's blocks can be read
    (:meth:`~inferbench.runners.base.Runner.block_errors`): the first block past the gate on the outputs
    (:func:`inferbench.measure.parity.divergence`), said in the reason, and the error block by block (``blocks``)."""
    from ..measure import parity

    if check["status"] != "failed":
        return check
    emit("parity failed: reading its blocks")
    try:
        blocks = runner.block_errors(inputs)
    except Exception as exc:  # noqa: BLE001 - the failure stands as it is; only where it went wrong is not known
        return {**check, "blocks": {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}}
    if blocks is None:
        return check
    found = parity.divergence(blocks, parity.blocks_threshold(check))
    return {**check, "blocks": found, "reason": f"{check.get('reason')}; {found['said']}"}


def check_agreement(job: CellJob, runner: Any, emit: Emit) -> dict[str, Any]:
    """A reduced-precision cell's top-1 and top-5 agreement with FP32 over ``--agreement-inputs`` seeded inputs
    (:func:`inferbench.measure.parity.agreement`), computed at the timed batch size; ``not_measured`` with the reason
    where the FP32 outputs on them were not exported (or not whole), or are no class scores, or the count could not be
    finished (the 16-input check stands)."""
    from ..exporters.cache import cached
    from ..measure import parity
    from ..registry.artifacts import agreement_own, agreement_reference
    from ..registry.models import agreement_inputs, get_model

    folder, count = Path(job.artifact_dir), job.config.agreement_inputs

    def not_measured(why: str) -> dict[str, Any]:
        return {"status": "not_measured", "inputs": count, "reason": f"{why}: judged by the 16 reference inputs only"}

    if str(count) not in ((cached(folder, "agreement") or {}).get("variants") or ()):
        return not_measured(f"no FP32 outputs on {count} agreement inputs in the cache (their export failed)")
    reference = np.load(folder / agreement_reference(count))
    if reference.ndim != 2 or reference.shape[1] < 2:
        return not_measured(f"the model's outputs are no class scores (shape {reference.shape[1:]} an input)")
    emit(f"parity check: agreement over {count} inputs")
    got = outputs_on(runner, lambda: agreement_inputs(get_model(job.cell.model), job.cell.resolution, job.config.seed,
                                                      count), job.cell.batch_size, reference.size, not_measured,
                     "the agreement inputs")
    if isinstance(got, dict):
        return got
    return parity.agreement(reference, got, job.cell.precision, _json_if_there(folder / agreement_own(count)))


def check_accuracy(job: CellJob, runner: Any, emit: Emit) -> dict[str, Any]:
    """A cell's top-1 and top-5 accuracy on the user's labelled images (``--eval-dir``) beside the source's FP32 on the
    same images (:func:`inferbench.measure.parity.accuracy`), computed at the timed batch size; ``not_measured`` with
    the reason where the FP32 outputs on them were not exported, are no class scores, or the cell's cannot be computed;
    failed where they have another size."""
    from ..exporters.cache import cached
    from ..measure import parity
    from ..registry import images
    from ..registry.artifacts import evaluation_reference
    from ..registry.models import get_model

    es, folder, spec = job.config.eval_set, Path(job.artifact_dir), get_model(job.cell.model)
    assert es is not None
    note = "seeded random weights: accuracy on real images is chance (--weights imagenet, or your trained model)" \
        if job.config.weights == "random" and spec.source is None else None

    def not_measured(why: str) -> dict[str, Any]:
        return {"status": "not_measured", "images": es.images, "reason": why, "eval_set": es.digest, "note": note}

    if es.digest not in ((cached(folder, "evaluation") or {}).get("variants") or ()):
        return not_measured("no FP32 outputs on the labelled images in the cache (their export failed)")
    reference = np.load(folder / evaluation_reference(es.digest))
    if reference.ndim != 2 or reference.shape[1] < 2:
        return not_measured(f"the model's outputs are no class scores (shape {reference.shape[1:]} an image)")
    emit(f"parity check: accuracy on {es.images} labelled images")
    try:
        listed = images.items(es)  # listed once: the images read and their labels
    except UsageError as exc:  # the set changed since the run began
        return not_measured(str(exc))
    got = outputs_on(runner, lambda: images.inputs(spec, listed, job.cell.resolution), job.cell.batch_size,
                     reference.size, not_measured, "the labelled images")
    if isinstance(got, dict):
        return got
    labels = np.array([label for _, label in listed], dtype=np.int64)
    return {**parity.accuracy(labels, got, reference, job.cell.precision), "eval_set": es.digest, "note": note}


def outputs_on(runner: Any, chunks: Any, batch_size: int, size: int, not_measured: Callable[[str], dict[str, Any]],
               what: str) -> np.ndarray | dict[str, Any]:
    """The runner's outputs on the batches ``chunks()`` yields (the ``what``), regrouped into calls of the timed batch
    size; else the block that says why (``not_measured``'s): not measured where they could not be computed, failed
    where they have another size than ``size``."""
    try:
        got = np.concatenate([at_batch_size(runner, x, batch_size) for x in rebatched(chunks(), batch_size)])
    except Exception as exc:  # noqa: BLE001 - not counted; the cell and its 16-input check stand
        return not_measured(f"its outputs on {what} could not be computed: {type(exc).__name__}: {str(exc)[:160]}")
    return got if got.size == size else {**not_measured(f"output size {got.size} != {size}"), "status": "failed"}


def rebatched(chunks: Any, size: int) -> Any:
    """The arrays of ``chunks`` (an iterable of batches) regrouped into batches of ``size`` (the last may be smaller),
    never holding more than a batch and a chunk."""
    held: list[np.ndarray] = []
    have = 0
    for chunk in chunks:
        start = 0
        while have + len(chunk) - start >= size:  # a full batch: what is held and the head of this chunk
            take = size - have
            yield np.concatenate([*held, chunk[start:start + take]]) if held else chunk[start:start + take]
            held, have, start = [], 0, start + take
        if start < len(chunk):
            held.append(chunk[start:])
            have += len(chunk) - start
    if have:
        yield np.concatenate(held)


def own_rounding(folder: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """A Keras source's own rounding, which may widen the parity gate (:func:`inferbench.measure.parity.compare`):
    its FP32 spread and its error in each reduced precision (None where its export did not measure them)."""
    from ..registry.artifacts import REFERENCE_SENSITIVITY, REFERENCE_SPREAD

    return _json_if_there(folder / REFERENCE_SPREAD), _json_if_there(folder / REFERENCE_SENSITIVITY)


def _json_if_there(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


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


#: Test-only (benchmarks/aa_calibration.py): ``FRAMEWORK:FACTOR`` makes every timed call of that framework's cells
#: FACTOR times as long as the runtime's own median call, by a sleep after each call in proportion to that call's
#: own time, the proportion calibrated once in the worker: the median of :data:`SLOWDOWN_CALLS` plain calls (after
#: :data:`SLOWDOWN_WARMUP`), then :data:`SLOWDOWN_STEPS` corrections of the proportion until a call with its sleep
#: takes FACTOR x that median (a pause slows the next call too: ONNX Runtime's threads stop spinning; a sleep of 0.3x
#: the call alone made 1.41-1.48x). The record says so (``timing.test_slowdown``), the cell's identity does not change,
#: so that ``compare`` can be shown a known slowdown of one configuration, which ``benchmarks/aa_calibration.py``
#: verifies by a paired A/B. A sleep in proportion follows the VM's switches of speed; the fixed sleep it replaces
#: (2026-11-27) was calibrated at the speed the machine had then, and three workers of one slowed cell read 1.27,
#: 1.33 and 1.63x. (Busy work in proportion to each call measured 1.58-2.56x for a nominal 1.3x on a loaded machine.)
TEST_SLOWDOWN = "INFERBENCH_TEST_SLOWDOWN"
SLOWDOWN_WARMUP, SLOWDOWN_CALLS, SLOWDOWN_STEPS = 5, 31, 3


def test_slowdown(framework: str) -> float | None:
    """The factor ``INFERBENCH_TEST_SLOWDOWN`` slows ``framework`` by (None: not this one); a UsageError for one that
    is no number above 1 (or over 100)."""
    key, _, factor = os.environ.get(TEST_SLOWDOWN, "").partition(":")
    if key != framework or not factor:
        return None
    try:
        value = float(factor)
    except ValueError:
        value = math.nan
    if not 1.0 < value <= 100.0:
        raise UsageError(f"{TEST_SLOWDOWN}={key}:{factor}: the factor must be a number above 1 (at most 100)")
    return value


def timed_call(runner: Any, batch: np.ndarray, prepared: Any, cell: Any) -> tuple[Any, Any, str]:
    """What one timed iteration is: (call, synchronize, timed-region code)."""
    if cell.options.include_transfer:
        # host array in, host array out, as the scripts inferbench replaces timed it: the copies are inside the window
        return lambda: runner.to_numpy(runner.call(runner.prepare(batch))), lambda _: None, "h2d+call+d2h"
    factor = test_slowdown(cell.framework)
    if factor is not None:
        def slowed(share: float) -> Any:
            start = time.perf_counter()
            out = runner.call(prepared)
            runner.synchronize(out)
            if share > 0:
                time.sleep(share * (time.perf_counter() - start))
            return out

        def median(share: float) -> float:
            took = []
            for _ in range(SLOWDOWN_CALLS):
                start = time.perf_counter()
                slowed(share)
                took.append(time.perf_counter() - start)
            return float(np.median(took))

        for _ in range(SLOWDOWN_WARMUP):
            slowed(0.0)
        plain = median(0.0)
        share = factor - 1.0
        for _ in range(SLOWDOWN_STEPS):  # a pause slows the next call too (a thread pool gone idle): aim at the whole
            share = max(0.0, share + (factor * plain - median(share)) / plain)
        return (lambda: slowed(share)), lambda _: None, "call+sync+test-slowdown"

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
        from ..base.codec import encode
        from ..measure.memory import current_rss_mb
        from ..registry.frameworks import load_runner
        from ..registry.models import get_model, make_inputs

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
        self.parity = check_parity(job, self.runner, self.runner.to_numpy(first_out), emit)
        self.parity_s = time.perf_counter() - start
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

    def start_timed(self, rss_before: float | None) -> None:
        """Warm up (by count and time), then reset the memory high-water marks: the peaks read at the end are the
        timed phase's."""
        from ..measure.memory import peak_rss_mb
        from ..measure.timing import warm_up

        self.emit("warm-up")
        self.warmup = warm_up(self.call, self.sync, self.timing.config)
        self.memory = {"peak_host_mb": peak_rss_mb(), "host_before_load_mb": rss_before}
        self.timed_memory = reset_peak_rss()
        self.runner.reset_peak_device_memory()  # the figure is the timed phase's, not the parity batch's
        self.blocks: list[Any] = []
        self.extra: dict[str, Any] = {"tuning": None}

    def block(self, round_index: int) -> dict[str, Any]:
        """Measure this round's block; the reply tells the parent it is done."""
        from ..measure.timing import run_block

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
        from ..measure.memory import peak_rss_mb
        from ..measure.stats import summarize
        from ..measure.timing import BLOCK_WARMUP_CALLS, GC_DURING_BLOCKS, Measurement
        from ..measure.trackers import Finished

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
                "runner": self.runner.details(),
                **self.extra,
                **tracked,
            },
        )
