"""Serving scenarios, with MLPerf LoadGen as the traffic generator and the judge: ``single-stream``, ``multi-stream``,
``server`` and ``offline`` (LoadGen's four), for every runtime.

In the cell's worker (after the phases every scenario shares, :class:`~inferbench.scenarios.base.Loaded`):

0. **samples placed**: the query samples are made resident where the runtime computes, once, in the layout and
   dtype it reads (a device tensor for torch on a GPU, a device array for JAX, a TensorFlow tensor on its device, the
   host array ONNX Runtime and OpenVINO read; the runner's ``resident``), and each batch is an index select there
   (``gather``): the tests measure the runtime, not host copies. ``--include-transfer`` keeps them on the host, each
   batch gathered and prepared (copied to the device) inside the test. The record says which (``serving.samples``).
1. **single query**: a short loop of one-sample calls gives the runtime's own latency, the start of every search;
   for ``server`` a bound (``--slo-p99``) below its p99 is one line: no load can meet it.
2. **served parity**: LoadGen's accuracy mode sends every query sample once; what the system under test (SUT)
   returned is compared with the Keras reference (as LoadGen's accuracy mode and TEST01 do), before anything is
   ranked.
3. **one LoadGen test per round** (the parent interleaves the cells' rounds, in a fresh random order each): the SUT
   wraps the runner — ``concurrency`` threads calling it (OpenVINO: an infer request each), and with a cell batch
   size above 1, dynamic batching (queries gathered up to the batch size, waiting at most ``max_delay_ms``, the
   batch padded to its static shape). LoadGen's latencies — from the scheduled send to the completion, queueing
   included — are the ones reported; its summary and detail logs are kept beside the record.

   - ``server``: a bracketing search per serving configuration (concurrency x batching delay) for the largest
     target QPS whose run is VALID (p99 within ``--slo-p99``, early stopping satisfied): double until INVALID,
     then bisect (geometric) until the bracket is within 10%; the best configuration's answer is then run again
     (confirmation rounds). The answer: at p99 <= X ms the runtime serves Q QPS [the bracket].
   - ``offline``: each round one Offline test, rounds cycling over the serving configurations; the answer is the
     best configuration's median samples per second with its interval between rounds.
   - ``single-stream`` (p90 of single queries) and ``multi-stream`` (p99 of 8-sample queries): each round one test.

``--quick`` shortens LoadGen's minimum duration (never the queries its early stopping needs for a VALID verdict);
the record says the result is not MLPerf-valid either way (MLPerf asks 10 minutes a test).
"""

from __future__ import annotations

import json
import math
import queue
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..base.files import with_umask
from ..spec import CellJob, CellOutcome
from .base import Emit, Loaded, at_batch_size, device_memory, finish_tracked, own_rounding

#: Serving test settings (LoadGen's own defaults are MLPerf's: 10 minutes and more per test).
MIN_DURATION_MS = 2000
QUICK_DURATION_MS = 500
#: The queries LoadGen's early stopping needs before it can say VALID at 99% confidence: for a p99, 459 with no query
#: over the bound, 662 with one (a server test takes 662: one hiccup of a shared machine is not the runtime's limit;
#: multi-stream's p99 the same), 64 for single-stream's p90 (--quick shortens the duration, never these).
MIN_QUERIES = {"server": 662, "multi-stream": 662, "single-stream": 64, "offline": 64}
MULTI_STREAM_SAMPLES = 8
SEARCH_PRECISION = 1.10  # the server search stops when its bracket is this narrow
SEARCH_STEPS = 7  # per serving configuration
#: The server search halves at most down to this share of its start (itself 60% of the runtime's capacity at that
#: concurrency): at a few percent of capacity a query hardly ever waits, so a p99 over the bound there is the runtime's
#: own tail, not its load, and lower loads only make every test longer (662 queries at 1 QPS: 11 minutes).
SEARCH_FLOOR = 1 / 8
CONFIRM_ROUNDS = 3  # the answer: this many VALID tests in a row at one load
CONFIRM_MAX = 9  # confirmation tests at most; each failure steps the load down by SEARCH_PRECISION and starts again
LOADGEN_EXTRA = "serve"
#: A server test is VALID only if the runtime completed at least this share of the samples per second LoadGen
#: scheduled: with a bound longer than the test (--slo-p99 86400000), every query met it while the queue grew, and a
#: runtime completing 59-297 samples/s "served" 48,401 QPS. The realised arrivals are compared, not the target, so
#: Poisson's chance alone never falls this short; the tail of the last queries costs a few percent of a short test.
KEEP_UP = 0.9


#: LoadGen's Offline query holds expected QPS x minimum duration x this many samples, truncated, and at least the
#: minimum query count (measured: 60 QPS over 1 s gave 66 samples with a minimum of 64, 100 with LoadGen's default
#: minimum; 87.5 over 2 s, 192).
OFFLINE_SLACK = 1.1


def whole_batches(qps: float, batch: int, duration_s: float, min_samples: int) -> float:
    """The Offline expected QPS nearest above ``qps`` whose query LoadGen fills with whole batches: a last batch of a
    few samples padded to the static shape costs a batch's time for them (batch 32 at 60 samples/s over 1 s: 66
    samples in 3 batches, 69% of the runtime's rate)."""
    batches = max(1, math.ceil(max(qps * duration_s * OFFLINE_SLACK, min_samples) / batch))
    return (batches * batch + 0.25) / (duration_s * OFFLINE_SLACK)  # LoadGen truncates the sample count


def _loadgen() -> Any:
    try:
        import mlperf_loadgen as lg
    except ImportError:
        from ..base.errors import MissingDependency

        raise MissingDependency(f'mlcommons-loadgen not installed: pip install -e ".[{LOADGEN_EXTRA}]"') from None
    return lg


# --------------------------------------------------------------------------- the system under test
@dataclass
class Knobs:
    """A serving configuration: threads calling the runner, and how long a batch may wait to fill."""

    concurrency: int = 1
    max_delay_ms: float = 0.0

    def label(self) -> str:
        return f"concurrency {self.concurrency}" + (f", batching delay {self.max_delay_ms:g} ms"
                                                    if self.max_delay_ms else "")


class Sut:
    """The runner under LoadGen: ``issue`` only enqueues (it runs on LoadGen's thread), worker threads gather up
    to ``batch`` samples (waiting at most ``max_delay_ms`` for more), pad the batch to its static shape, take those
    samples where they lie (``gather``: the sample indices -> what the runner's ``call`` takes), call the runner, and
    complete each sample with its row of the outputs.

    The first worker is the thread that runs the test (:meth:`serve`), the one that loaded the runtime and timed its
    single queries, as the closed loop's calls run on it; LoadGen's test runs on a helper thread meanwhile. A torch
    runtime called from a second thread starts a second OpenMP team beside the first: on a 2-core VM its batch-8
    calls took 20-26 ms from a new thread against 13-15 ms from the loading thread, measured alternately in one
    process, and the same from a thread alone (benchmarks/serving_vs_closed.py measures the whole effect)."""

    def __init__(self, lg: Any, calls: list[Any], gather: Any, batch: int, knobs: Knobs,
                 keep_outputs: bool = False) -> None:
        self.lg, self.gather, self.batch, self.knobs = lg, gather, batch, knobs
        self.queue: queue.Queue[Any] = queue.Queue()
        self.outputs: dict[int, np.ndarray] = {}
        self.keep_outputs = keep_outputs
        self.errors: list[str] = []
        self.first = calls[0]
        self.threads = [threading.Thread(target=self._work, args=(call,), daemon=True)
                        for call in calls[1:knobs.concurrency]]
        for thread in self.threads:
            thread.start()
        self.handle = lg.ConstructSUT(self._issue, self._flush)

    def _issue(self, query_samples: Any) -> None:
        for s in query_samples:
            self.queue.put((s.id, s.index))

    def _flush(self) -> None:
        pass

    def serve(self, test: Any) -> Any:
        """Run LoadGen's ``test`` (a call that returns when every sample is completed) on a helper thread while this
        thread serves as the first worker; returns what ``test`` returned."""
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["out"] = test()
            except BaseException as exc:  # noqa: BLE001 - raised again on the serving thread
                done["error"] = exc
            finally:
                self.queue.put(None)  # every worker stops (each passes it on)

        helper = threading.Thread(target=run, daemon=True)
        helper.start()
        try:
            self._work(self.first)
        finally:
            helper.join()  # never destroyed while LoadGen's test runs (it ends once every sample is completed)
        if "error" in done:
            raise done["error"]
        return done.get("out")

    def _work(self, call: Any) -> None:
        lg, delay = self.lg, self.knobs.max_delay_ms / 1e3
        while True:
            first = self.queue.get()
            if first is None:
                self.queue.put(None)  # for the other workers
                return
            taken = [first]
            until = time.perf_counter() + delay
            while len(taken) < self.batch:
                left = until - time.perf_counter()
                try:
                    item = self.queue.get(timeout=left) if left > 0 else self.queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self.queue.put(None)
                    break
                taken.append(item)
            indices = [index for _, index in taken]
            indices += [indices[-1]] * (self.batch - len(indices))  # padded to the static shape the runtime compiled
            try:
                out = call(self.gather(np.asarray(indices, dtype=np.int64)))
                rows = [np.ascontiguousarray(out[i], dtype=np.float32) for i in range(len(taken))]
            except Exception as exc:  # noqa: BLE001 - every sample must be completed, or LoadGen waits forever
                self.errors.append(f"{type(exc).__name__}: {exc}")
                rows = [np.zeros(1, dtype=np.float32) for _ in taken]
            responses = []
            for row, (sample_id, index) in zip(rows, taken):  # rows stay alive until QuerySamplesComplete returns
                if self.keep_outputs:
                    self.outputs[index] = row
                responses.append(lg.QuerySampleResponse(sample_id, row.ctypes.data, row.nbytes))
            lg.QuerySamplesComplete(responses)

    def close(self) -> None:
        self.queue.put(None)
        for thread in self.threads:
            thread.join(timeout=30)
        self.lg.DestroySUT(self.handle)


def parse_detail(path: Path) -> dict[str, Any]:
    """LoadGen's ``mlperf_log_detail.txt``: every ``:::MLLOG {json}`` line's key and value (the last wins), and its
    errors and warnings."""
    values: dict[str, Any] = {"errors": []}
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith(":::MLLOG"):
            continue
        try:
            entry = json.loads(line[len(":::MLLOG"):])
        except json.JSONDecodeError:
            continue
        values[entry["key"]] = entry["value"]
        if (entry.get("metadata") or {}).get("is_error"):
            values["errors"].append(f"{entry['key']}: {entry['value']}")
    return values


def verdict(scenario: str, detail: dict[str, Any]) -> tuple[bool, list[str], str | None]:
    """A LoadGen test's verdict from its detail log: VALID or not, the checks not met, LoadGen's reason; a server
    test whose runtime did not keep up with the load (completed under KEEP_UP of what was scheduled) is INVALID
    whatever its latencies."""
    valid = detail.get("result_validity") == "VALID"
    why = [k for k in ("result_perf_constraints_met", "result_min_duration_met", "result_min_queries_met",
                       "early_stopping_met") if detail.get(k) is False]
    reason = detail.get("result_invalid_reason") or None
    scheduled, completed = (detail.get("result_scheduled_samples_per_sec"),
                            detail.get("result_completed_samples_per_sec"))
    if scenario == "server" and scheduled and completed is not None and completed < KEEP_UP * scheduled:
        valid = False
        why.append("kept_up")
        reason = (f"the runtime completed {completed:.1f} samples/s of the {scheduled:.1f} scheduled: it did not keep "
                  "up (its queue grew), whatever the latencies")
    return valid, why, reason


def trace_latencies_ms(path: Path) -> list[float]:
    """Every sample's latency (scheduled send to completion) from LoadGen's trace, in milliseconds."""
    out = []
    if not path.exists():
        return out
    with path.open(errors="replace") as fh:
        for line in fh:
            if line.startswith('{"name":"Sample"') and '"ph":"b"' in line:
                match = re.search(r'"complete_ns"\s*:\s*(\d+)', line)
                if match:
                    out.append(int(match.group(1)) / 1e6)
    return out


# --------------------------------------------------------------------------- the server search
@dataclass
class Search:
    """A bracketing search for the largest VALID target QPS: double until a run is INVALID, halve until one is
    VALID (not below :data:`SEARCH_FLOOR` of the start), then bisect geometrically until the bracket is within
    :data:`SEARCH_PRECISION`."""

    knobs: Knobs
    next_qps: float
    valid: float | None = None  # the largest VALID target so far
    invalid: float | None = None  # the smallest INVALID one
    steps: int = 0
    floor: float = 0.0  # the lowest target the search tries
    at_floor: bool = False  # INVALID at the floor: no load held

    def __post_init__(self) -> None:
        self.floor = self.floor or self.next_qps * SEARCH_FLOOR

    @property
    def done(self) -> bool:
        return self.steps >= SEARCH_STEPS or self.at_floor or (
            self.valid is not None and self.invalid is not None and self.invalid / self.valid <= SEARCH_PRECISION)

    def record(self, qps: float, is_valid: bool) -> None:
        self.steps += 1
        if is_valid:
            self.valid = max(self.valid or 0.0, qps)
        else:
            self.invalid = qps if self.invalid is None else min(self.invalid, qps)
        if self.invalid is None:
            self.next_qps = qps * 2
        elif self.valid is None:
            self.at_floor = qps <= self.floor * 1.0001
            self.next_qps = max(qps / 2, self.floor)
        else:
            self.next_qps = math.sqrt(self.valid * self.invalid)


# --------------------------------------------------------------------------- the session
def place(runner: Any, samples: np.ndarray, include_transfer: bool) -> tuple[Any, dict[str, Any]]:
    """The sample set made resident where the runtime computes, once, before any test (as MLPerf's harnesses load
    it with the QSL's load-samples call), and the gather of a batch there (indices in, the runtime's batch out),
    with what the record says of it. ``--include-transfer`` keeps the samples on the host: each batch gathered
    there and prepared (copied to the device) inside the test."""
    if include_transfer:
        return (lambda idx: runner.prepare(np.take(samples, idx, axis=0)),
                {"resident": False, "placement": "host array (--include-transfer): each batch gathered on the "
                 "host and prepared (copied to the device) inside the test", "input_dtype": str(samples.dtype)})
    resident = runner.resident(samples)
    return lambda idx: runner.gather(resident, idx), {**runner.placement(), "samples": len(samples)}


class Session:
    """One cell under LoadGen: loaded, its served outputs checked, one LoadGen test per round."""

    def __init__(self, job: CellJob, emit: Emit) -> None:
        from ..measure.memory import peak_rss_mb
        from ..registry.artifacts import REFERENCE_INPUTS, REFERENCE_LOGITS

        self.lg = _loadgen()
        self.job, self.emit = job, emit
        self.scenario = job.cell.scenario
        loaded = Loaded(job, emit)
        self.loaded, self.runner = loaded, loaded.runner
        folder = Path(job.artifact_dir)
        self.samples = np.load(folder / REFERENCE_INPUTS).astype(np.float32)  # the query samples
        self.reference = np.load(folder / REFERENCE_LOGITS)
        self.batch = job.cell.batch_size
        self.gather, self.placement = place(self.runner, self.samples, job.cell.options.include_transfer)
        self.calls = self.runner.serving_calls(self.runner.serving_concurrency(), self.batch)
        self.quick = job.config.quick
        self.stopped: str | None = None  # why the rounds ended before the scenario's own count (--time-budget)
        self.logs = Path(tempfile.mkdtemp(prefix="inferbench-loadgen-"))
        emit("single queries")
        self.single = self._single_queries()
        bound = job.config.slo_p99_ms
        if self.scenario == "server" and bound is not None and bound <= self.single["p50_ms"]:
            from ..base.errors import UsageError  # the median: certain (a p99 of a short loop is one hiccup)

            raise UsageError(f"--slo-p99 {bound:g} ms: no load can meet it on {job.cell.framework}, whose own "
                             f"single-query median is {self.single['p50_ms']:.2f} ms (p99 "
                             f"{self.single['p99_ms']:.2f} ms)")
        emit("served parity (LoadGen accuracy mode)")
        self.parity = self._served_parity(loaded.parity)
        self.knob_grid = [Knobs(c, d) for c in range(1, self.runner.serving_concurrency() + 1)
                          for d in ((0.0, 2.0) if self.batch > 1 else (0.0,))]
        self.searches = [Search(k, self._start_qps(k)) for k in self.knob_grid]
        self.steps: list[dict[str, Any]] = []
        self.blocks: list[Any] = []
        self.memory = {"peak_host_mb": peak_rss_mb(), "host_before_load_mb": loaded.rss_before}
        self.rounds = {"server": len(self.knob_grid) * SEARCH_STEPS + CONFIRM_MAX,
                       "offline": max(job.config.timing.rounds, len(self.knob_grid) * 3)}.get(
            self.scenario, job.config.timing.rounds)
        self.tuning = None
        self.confirmed: float | None = None  # the server's answer under confirmation
        self.in_a_row = 0  # VALID confirmation tests in a row at it
        self.failed_in_a_row = 0  # INVALID ones

    # ------------------------------------------------------------------ set-up
    def _call_once(self, indices: np.ndarray) -> np.ndarray:
        return self.calls[0](self.gather(indices))

    def _single_queries(self) -> dict[str, Any]:
        x = np.zeros(self.batch, dtype=np.int64)  # the first sample, the batch size times
        times = []
        end = time.perf_counter() + (0.5 if self.quick else 1.5)
        while time.perf_counter() < end or len(times) < 20:
            start = time.perf_counter()
            self._call_once(x)
            times.append((time.perf_counter() - start) * 1e3)
        return {"p50_ms": float(np.median(times)), "p99_ms": float(np.percentile(times, 99)), "n": len(times),
                "batch": self.batch}

    def _served_parity(self, loaded_parity: dict[str, Any]) -> dict[str, Any]:
        """Every query sample once through LoadGen (accuracy mode): what the SUT served against the reference."""
        from ..measure import parity

        lg = self.lg
        settings = lg.TestSettings()
        settings.scenario = lg.TestScenario.Offline
        settings.mode = lg.TestMode.AccuracyOnly
        sut = Sut(lg, self.calls, self.gather, self.batch, Knobs(), keep_outputs=True)
        qsl = lg.ConstructQSL(len(self.samples), len(self.samples), lambda idx: None, lambda idx: None)
        try:
            self._start(sut, qsl, settings, "accuracy")
        finally:
            sut.close()
            lg.DestroyQSL(qsl)
        if sut.errors:
            raise RuntimeError(f"the runtime failed under LoadGen: {sut.errors[0]}")
        served = np.stack([sut.outputs[i] for i in range(len(self.samples))])
        if not self.job.framework.verified(self.job.cell.model):
            return {**loaded_parity, "served": "own weights: not compared"}
        if self.job.cell.precision in parity.UNGATED:  # no gate against FP32 (INT8): what LoadGen served must be
            # what the runtime computes on the same samples called directly, in the same batches, to FP32's gate
            against = "the runtime's own outputs on the same samples, called directly"
            check = parity.compare(at_batch_size(self.runner, self.samples, self.batch), served, "fp32")
        else:
            against = "the reference"
            check = parity.compare(self.reference, served, self.job.cell.precision,
                                   *own_rounding(Path(self.job.artifact_dir)))
        out = dict(loaded_parity)
        if check["status"] == "failed" and out.get("status") in ("passed", "unjudged"):
            out.update(status="failed", reason=f"served outputs (against {against}): {check.get('reason')}")
        out["served"] = {k: check.get(k) for k in ("status", "max_rel_err", "cosine", "top1_agreement")} | {
            "samples": len(served), "method": "loadgen-accuracy-mode", "against": against}
        return out

    def _start_qps(self, knobs: Knobs) -> float:
        per_call_s = self.single["p50_ms"] / 1e3
        return max(1.0, 0.6 * knobs.concurrency * self.batch / per_call_s)

    def _start(self, sut: Sut, qsl: Any, settings: Any, name: str) -> Path:
        lg = self.lg
        out = self.logs / name
        out.mkdir(parents=True, exist_ok=True)  # LoadGen does not make it (and fails silently)
        log = lg.LogSettings()
        log.log_output.outdir = str(out)
        log.log_output.copy_summary_to_stdout = False
        log.enable_trace = settings.mode != lg.TestMode.AccuracyOnly
        # a missing audit file: an audit.config in the working folder would silently override the settings
        sut.serve(lambda: lg.StartTestWithLogSettings(sut.handle, qsl, settings, log,
                                                      str(self.logs / "no-audit.config")))
        return out

    # ------------------------------------------------------------------ rounds
    def block(self, round_index: int) -> dict[str, Any]:
        """One LoadGen test (the scenario's next step), the trackers read around it; none once a server's answer
        is settled (the rounds were counted for the longest confirmation)."""
        lg = self.lg
        if self.scenario == "server" and self._settled():
            return {"round": round_index, "skipped": "the answer is settled"}
        knobs, target = self._plan(round_index)
        settings = lg.TestSettings()
        settings.scenario = {"single-stream": lg.TestScenario.SingleStream, "multi-stream":
                             lg.TestScenario.MultiStream, "server": lg.TestScenario.Server,
                             "offline": lg.TestScenario.Offline}[self.scenario]
        settings.mode = lg.TestMode.PerformanceOnly
        settings.min_duration_ms = QUICK_DURATION_MS if self.quick else MIN_DURATION_MS
        settings.min_query_count = MIN_QUERIES[self.scenario]  # what LoadGen's early stopping needs for VALID
        settings.schedule_rng_seed = settings.sample_index_rng_seed = self.job.config.seed + round_index
        expected_ms = self.single["p50_ms"]
        if self.scenario == "server":
            settings.server_target_qps = target
            settings.server_target_latency_ns = int((self.job.config.slo_p99_ms or 50.0) * 1e6)
            settings.server_target_latency_percentile = 0.99
        elif self.scenario == "offline":
            settings.offline_expected_qps = whole_batches(target, self.batch, settings.min_duration_ms / 1e3,
                                                          settings.min_query_count)
        elif self.scenario == "single-stream":
            settings.single_stream_expected_latency_ns = int(expected_ms * 1e6)
        else:
            settings.multi_stream_samples_per_query = MULTI_STREAM_SAMPLES
            settings.multi_stream_expected_latency_ns = int(expected_ms * MULTI_STREAM_SAMPLES * 1e6)
        sut = Sut(lg, self.calls, self.gather, self.batch, knobs)
        qsl = lg.ConstructQSL(len(self.samples), len(self.samples), lambda idx: None, lambda idx: None)
        monitors = [(t.name, m) for t in self.loaded.trackers if (m := t.monitor()) is not None]
        for _, monitor in monitors:
            monitor.start()
        start = time.perf_counter()
        try:
            out = self._start(sut, qsl, settings, f"round-{round_index:02d}")
        finally:
            window = time.perf_counter() - start
            readings = {name: monitor.stop(window) for name, monitor in monitors}
            sut.close()
            lg.DestroyQSL(qsl)
        if sut.errors:
            raise RuntimeError(f"the runtime failed under LoadGen: {sut.errors[0]}")
        step = self._step(out, round_index, knobs, target, window)
        self.steps.append(step)
        self.blocks.append(_Block(round_index, [x / 1e3 for x in step.pop("latencies_ms")], window, readings,
                                  time.time() - window))
        if self.scenario == "server":
            self._learn(step["phase"], knobs, target, step["valid"])
        return {"round": round_index, "valid": step["valid"], "qps": step["qps"]}

    def _learn(self, phase: str, knobs: Knobs, target: float, valid: bool) -> None:
        """A server test's verdict: the search's next step, or the confirmation's count (INVALID: one search step
        lower, and the count again from zero)."""
        if phase == "search":
            next(s for s in self.searches if s.knobs == knobs).record(target, valid)
        elif valid:
            self.in_a_row, self.failed_in_a_row = self.in_a_row + 1, 0
        else:  # each failure in a row steps further (10%, 21%, 33%, ...): a load far below the search's still holds,
            # never below the search's own floor (one run stepped from a search's 673 QPS down to 21.8)
            self.failed_in_a_row += 1
            floor = self._best_search().floor or 0.0
            self.confirmed, self.in_a_row = max(target / SEARCH_PRECISION ** self.failed_in_a_row, floor), 0

    def _plan(self, round_index: int) -> tuple[Knobs, float]:
        """The serving configuration and the target (QPS, or the expected rate) of this round's test."""
        if self.scenario == "server":
            for search in self.searches:
                if not search.done:
                    return search.knobs, search.next_qps
            best = self._best_search()
            if self.confirmed is None:  # the confirmation rounds start at the search's answer
                self.confirmed = best.valid
            return best.knobs, self.confirmed
        if self.scenario == "offline":
            knobs = self.knob_grid[round_index % len(self.knob_grid)]
            return knobs, 1.2 * self._start_qps(knobs) / 0.6
        return Knobs(), 0.0

    def _best_search(self) -> Search:
        return max(self.searches, key=lambda s: s.valid or 0.0)

    def _settled(self) -> bool:
        """The searches are over and either nothing was VALID, the load held :data:`CONFIRM_ROUNDS` tests in a row,
        or :data:`CONFIRM_MAX` confirmation tests ran."""
        if any(not s.done for s in self.searches):
            return False
        confirms = sum(s["phase"] == "measure" for s in self.steps)
        return self._best_search().valid is None or self.in_a_row >= CONFIRM_ROUNDS or confirms >= CONFIRM_MAX

    def _tests(self, knobs: Knobs) -> list[dict[str, Any]]:
        return [s for s in self.steps if s["knobs"] == knobs.__dict__]

    def _held(self) -> tuple[float, dict[str, Any], list[dict[str, Any]]] | None:
        """The largest load that held, with its configuration and the tests it stands on (:func:`held`)."""
        best = None
        for knobs in self.knob_grid:
            found = held(self._tests(knobs))
            if found is not None and (best is None or found[0] > best[0]):
                best = (found[0], knobs.__dict__, found[1])
        return best

    def _step(self, out: Path, round_index: int, knobs: Knobs, target: float, window: float) -> dict[str, Any]:
        detail = parse_detail(out / "mlperf_log_detail.txt")
        latencies = trace_latencies_ms(out / "mlperf_log_trace.json")
        (out / "mlperf_log_trace.json").unlink(missing_ok=True)  # large; the latencies are in the record
        valid, why, reason = verdict(self.scenario, detail)
        qps = {"server": detail.get("result_scheduled_samples_per_sec"),
               "offline": detail.get("result_samples_per_second")}.get(
            self.scenario, detail.get("result_qps_with_loadgen_overhead") or detail.get("result_samples_per_second"))
        if qps is None and window > 0 and detail.get("result_query_count"):  # multi-stream's: LoadGen reports none
            # its samples over the test's whole window (LoadGen's start and logs included: a little under the rate)
            samples = detail.get("effective_samples_per_query") or (
                MULTI_STREAM_SAMPLES if self.scenario == "multi-stream" else 1)
            qps = detail["result_query_count"] * samples / window
        completed = detail.get("result_completed_samples_per_sec") or qps
        percentile = {"single-stream": "90.00", "multi-stream": "99.00"}.get(self.scenario, "99.00")
        key = ("result_" + percentile + "_percentile_per_query_latency_ns" if self.scenario == "multi-stream"
               else "result_" + percentile + "_percentile_latency_ns")
        phase = "search" if self.scenario == "server" and any(not s.done for s in self.searches) else "measure"
        return {"round": round_index, "phase": phase, "knobs": knobs.__dict__, "target": target, "valid": valid,
                "result": "VALID" if valid else "INVALID", "not_met": why, "invalid_reason": reason,
                "qps": float(qps) if qps is not None else None,
                "completed_qps": float(completed) if completed is not None else None,
                f"p{percentile[:2]}_ms": (detail.get(key) or 0) / 1e6 or None,
                "p99_ms": (detail.get("result_99.00_percentile_latency_ns") or 0) / 1e6 or None,
                "p50_ms": (detail.get("result_50.00_percentile_latency_ns") or 0) / 1e6 or None,
                "queries": detail.get("result_query_count"), "errors": detail.get("errors") or None,
                "window_s": window, "latencies_ms": latencies}

    # ------------------------------------------------------------------ the answer
    def idle(self) -> dict[str, Any]:
        """The tests are over: the trackers read the idle device (:func:`~inferbench.scenarios.base.idle_tracked`)."""
        from .base import idle_tracked

        return idle_tracked(self.loaded.trackers)

    def finish(self) -> CellOutcome:
        from ..measure import stats
        from ..measure.trackers import Finished

        if not self.steps:
            raise RuntimeError("no LoadGen test ran")
        if self.scenario == "server" and self._settled():  # its answer was whole before the others' rounds stopped
            self.stopped = None
        used = self._answer_steps()
        latencies = [x * 1e3 for b in self.blocks if b.round in {s["round"] for s in used} for x in b.latencies_s]
        rounds = [b.round for b in self.blocks if b.round in {s["round"] for s in used} for _ in b.latencies_s]
        if not latencies:
            raise RuntimeError("LoadGen reported no sample latencies")
        per_round = {s["round"]: s["qps"] for s in used if s["qps"]}
        qps = float(np.median(list(per_round.values()))) if per_round else float("nan")
        answer = self._answer(used, qps, per_round)
        qps = answer["qps"]
        blocks = [b for b in self.blocks if b.round in per_round]
        memory = device_memory(self.runner, {**self.memory, "timed_peak_host_mb": None})
        queries = sum(len(b.latencies_s) for b in blocks)
        tracked = finish_tracked(self.loaded.trackers, self.loaded.untracked,
                                 Finished(blocks, queries, qps, memory))
        logs = self._keep_logs()
        return CellOutcome(timing=self.job.config.timing, blocks={
            "parity": self.parity,
            "latency_ms": stats.summarize(latencies, rounds),
            "throughput_per_s": qps,
            "raw_latencies_ms": latencies,
            "raw_rounds": rounds,
            "timing": {"window_s": sum(b.window_s for b in blocks), "clock": "loadgen",
                       "timed_region": "loadgen-scheduled-to-completion", "throughput_rule": f"loadgen-{self.scenario}",
                       "blocks": [{"round": b.round, "n": len(b.latencies_s), "window_s": b.window_s,
                                   "started_at": b.started_at} for b in blocks],
                       **self.job.interleaving},
            "cold_start": self.loaded.cold_start,
            "device_check": self.loaded.device_check,
            "runner": self.runner.details(),
            "tuning": None,
            "serving": {"scenario": self.scenario, "answer": answer, "steps": self.steps,
                        "single_query": self.single, "samples": self.placement,
                        "knob_grid": [k.__dict__ for k in self.knob_grid],
                        "settings": {"min_duration_ms": QUICK_DURATION_MS if self.quick else MIN_DURATION_MS,
                                     "quick": self.quick, "slo_p99_ms": self.job.config.slo_p99_ms},
                        "mlperf_valid": False, "mlperf_note": "LoadGen's verdicts with shortened tests (MLPerf "
                        "asks at least 10 minutes per test): comparable between runtimes here, not a submission",
                        "loadgen_logs": logs},
            **tracked,
        })

    def _answer_steps(self) -> list[dict[str, Any]]:
        """The steps the answer stands on: the server's confirmation runs (else its best VALID search step), the
        best offline configuration's rounds, every round of the stream scenarios."""
        if self.scenario == "server":  # the tests the answer stands on (none held: the last one, for the record)
            found = self._held()
            return found[2] if found is not None else self.steps[-1:]
        if self.scenario == "offline":
            by = {}
            for s in self.steps:
                by.setdefault(json.dumps(s["knobs"], sort_keys=True), []).append(s)
            return max(by.values(), key=lambda steps: float(np.median([s["qps"] or 0 for s in steps])))
        return self.steps

    def _answer(self, used: list[dict[str, Any]], qps: float, per_round: dict[int, float]) -> dict[str, Any]:
        from ..measure import stats

        ci = stats.per_round_interval(qps, per_round, None) if len(per_round) >= stats.MIN_ROUNDS else None
        answer: dict[str, Any] = {"qps": qps, "qps_ci95": None if ci is None else list(ci),
                                  "knobs": used[0]["knobs"], "valid": all(s["valid"] for s in used),
                                  "steps": [s["round"] for s in used], "stopped": self.stopped}
        if self.scenario == "server":
            best, found = self._best_search(), self._held()
            target, knobs = (found[0], found[1]) if found is not None else (None, used[0]["knobs"])
            answer["valid"] = found is not None
            above = [s["target"] for s in self.steps if not s["valid"] and s["knobs"] == knobs
                     and (target is None or s["target"] > target)]
            answer.update(knobs=knobs, max_valid_qps=target, smallest_invalid_qps=min(above) if above else None,
                          bracket=[target, min(above) if above else None], bound_ms=self.job.config.slo_p99_ms,
                          found=target is not None, search_max_valid_qps=best.valid,
                          held_in_a_row=len(found[2]) if found is not None else 0,
                          search_floor_qps=min(s.floor for s in self.searches),
                          confirmations=[{"target": s["target"], "valid": s["valid"], "p99_ms": s["p99_ms"]}
                                         for s in self.steps if s["phase"] == "measure"],
                          others=[{"knobs": k.__dict__, "held_qps": (held(self._tests(k)) or [None])[0]}
                                  for k in self.knob_grid if k.__dict__ != knobs],
                          # a search cut short (--time-budget): the largest load one test passed, not an answer
                          largest_valid_qps=max((s["target"] for s in self.steps if s["valid"]), default=None))
            answer["qps"] = target if target is not None else 0.0  # an INVALID load is never the answer
            answer["qps_ci95"] = None  # a search gives a bracket, not an interval
        return answer

    def _keep_logs(self) -> str | None:
        """LoadGen's summary and detail logs, beside the record (``job.log_dir``), one folder per test."""
        if not self.job.log_dir:
            return None
        target = Path(self.job.log_dir)
        try:
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(self.logs, target, ignore=shutil.ignore_patterns("*.json", "no-audit.config"))
            with_umask(target)  # mkdtemp's 0700 copied: the records beside it are the umask's 0644
            return target.name
        except OSError:
            return None
        finally:
            shutil.rmtree(self.logs, ignore_errors=True)

def held(tests: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]] | None:
    """The largest load one configuration held, from its tests in the order they ran (search and confirmation
    alike): the largest L such that :data:`CONFIRM_ROUNDS` tests in a row were VALID at loads of L or more (a load
    that holds a higher rate holds a lower one) and none of its tests at L or below was INVALID; with the tests it
    stands on. None when no load held: one VALID test, or two, is luck on a shared machine, not an answer."""
    best = None
    for i in range(len(tests) - CONFIRM_ROUNDS + 1):
        window = tests[i:i + CONFIRM_ROUNDS]
        if not all(t["valid"] for t in window):
            continue
        load = min(t["target"] for t in window)
        if any(not t["valid"] and t["target"] <= load for t in tests):
            continue
        if best is None or load > best[0]:
            best = (load, window)
    return best


@dataclass
class _Block:
    """A LoadGen test as a block for the trackers and the record (its samples' latencies, its window)."""

    round: int
    latencies_s: list[float]
    window_s: float
    monitors: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0


def merge(outcomes: list[CellOutcome], batch_size: int) -> CellOutcome:
    """A serving cell runs in one process (LoadGen's tests already spread over time): its outcome as it is."""
    return outcomes[0]


def finalize_group(outcomes: list[CellOutcome | None]) -> list[CellOutcome | None]:
    """Serving cells share nothing across a group: each answer stands on its own tests."""
    return outcomes

