"""One serving cell's session: the sample set placed, single queries, served parity, one LoadGen test per round, and
the answer (the scenario's protocol is in this package's docstring)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...base.errors import UsageError
from ...base.files import with_umask
from ...measure import parity, stats
from ...measure.memory import peak_rss_mb
from ...measure.trackers import Finished
from ...registry.artifacts import REFERENCE_INPUTS, REFERENCE_LOGITS
from ...registry.models import get_model
from ...registry.tasks import task
from ...spec import CellJob, CellOutcome
from ..base import Emit, Loaded, device_memory, finish_tracked, idle_tracked, runner_block
from ..gates import aligned, at_batch_size, own_rounding
from .loadgen import (
    MIN_DURATION_MS,
    MIN_QUERIES,
    MULTI_STREAM_SAMPLES,
    QUICK_DURATION_MS,
    Knobs,
    Sut,
    load_loadgen,
    parse_detail,
    trace_latencies_ms,
    verdict,
    whole_batches,
)
from .search import CONFIRM_ROUNDS, SEARCH_PRECISION, Search, held, limits


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
        self.lg = load_loadgen()
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
            raise UsageError(f"--slo-p99 {bound:g} ms: no load can meet it on {job.cell.framework}, whose own "
                             f"single-query median is {self.single['p50_ms']:.2f} ms (p99 "
                             f"{self.single['p99_ms']:.2f} ms)")
        emit("served parity (LoadGen accuracy mode)")
        self.parity = self._served_parity(loaded.parity)
        most = self.runner.serving_concurrency()
        self.knob_grid = [Knobs(most, 0.0)] if self.quick else [  # --quick: the runtime's own configuration only
            Knobs(c, d) for c in range(1, most + 1) for d in ((0.0, 2.0) if self.batch > 1 else (0.0,))]
        self.search_steps, self.confirm_max = limits(self.quick)
        self.searches = [Search(k, self._start_qps(k), max_steps=self.search_steps) for k in self.knob_grid]
        self.steps: list[dict[str, Any]] = []
        self.blocks: list[Any] = []
        self.memory = {"peak_host_mb": peak_rss_mb(), "host_before_load_mb": loaded.rss_before}
        self.rounds = {"server": len(self.knob_grid) * self.search_steps + self.confirm_max,
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
        times: list[float] = []
        end = time.perf_counter() + (0.5 if self.quick else 1.5)
        while time.perf_counter() < end or len(times) < 20:
            start = time.perf_counter()
            self._call_once(x)
            times.append((time.perf_counter() - start) * 1e3)
        return {"p50_ms": float(np.median(times)), "p99_ms": float(np.percentile(times, 99)), "n": len(times),
                "batch": self.batch}

    def _served_parity(self, loaded_parity: dict[str, Any]) -> dict[str, Any]:
        """Every query sample once through LoadGen (accuracy mode): what the SUT served against the reference."""
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
            check = parity.compare(*aligned(self.job, at_batch_size(self.runner, self.samples, self.batch), served),
                                   "fp32")
        else:
            against = "the reference"
            check = parity.compare(*aligned(self.job, self.reference, served), self.job.cell.precision,
                                   *own_rounding(Path(self.job.artifact_dir)),
                                   kind="scores" if task(get_model(self.job.cell.model).task).classifier else "values")
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
            return best.knobs, self.confirmed or 0.0  # (a settled search that held nothing runs no test)
        if self.scenario == "offline":
            knobs = self.knob_grid[round_index % len(self.knob_grid)]
            return knobs, 1.2 * self._start_qps(knobs) / 0.6
        return Knobs(), 0.0

    def _best_search(self) -> Search:
        return max(self.searches, key=lambda s: s.valid or 0.0)

    def _settled(self) -> bool:
        """The searches are over and either nothing was VALID, the load held :data:`CONFIRM_ROUNDS` tests in a row,
        or its most confirmation tests ran (:func:`~inferbench.scenarios.serve.search.limits`)."""
        if any(not s.done for s in self.searches):
            return False
        confirms = sum(s["phase"] == "measure" for s in self.steps)
        return self._best_search().valid is None or self.in_a_row >= CONFIRM_ROUNDS or confirms >= self.confirm_max

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
        return idle_tracked(self.loaded.trackers)

    def finish(self) -> CellOutcome:
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
            "runner": runner_block(self.job, self.runner),
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
            by: dict[str, list[dict[str, Any]]] = {}
            for s in self.steps:
                by.setdefault(json.dumps(s["knobs"], sort_keys=True), []).append(s)
            return max(by.values(), key=lambda steps: float(np.median([s["qps"] or 0 for s in steps])))
        return self.steps

    def _answer(self, used: list[dict[str, Any]], qps: float, per_round: dict[int, float]) -> dict[str, Any]:
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

