"""MLPerf LoadGen's side of serving: the test settings, the system under test that wraps a runner (:class:`Sut`), and
the reading of LoadGen's logs (:func:`parse_detail`, :func:`verdict`, :func:`trace_latencies_ms`)."""

from __future__ import annotations

import json
import math
import queue
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...base.errors import MissingDependency

#: Serving test settings (LoadGen's own defaults are MLPerf's: 10 minutes and more per test).
MIN_DURATION_MS = 2000
QUICK_DURATION_MS = 500
#: The queries LoadGen's early stopping needs before it can say VALID at 99% confidence: for a p99, 459 with no query
#: over the bound, 662 with one (a server test takes 662: one hiccup of a shared machine is not the runtime's limit;
#: multi-stream's p99 the same), 64 for single-stream's p90 (--quick shortens the duration, never these).
MIN_QUERIES = {"server": 662, "multi-stream": 662, "single-stream": 64, "offline": 64}
MULTI_STREAM_SAMPLES = 8
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


def load_loadgen() -> Any:
    try:
        import mlperf_loadgen as lg
    except ImportError:
        raise MissingDependency("mlcommons-loadgen", LOADGEN_EXTRA, "the serving scenarios") from None
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
    out: list[float] = []
    if not path.exists():
        return out
    with path.open(errors="replace") as fh:
        for line in fh:
            if line.startswith('{"name":"Sample"') and '"ph":"b"' in line:
                match = re.search(r'"complete_ns"\s*:\s*(\d+)', line)
                if match:
                    out.append(int(match.group(1)) / 1e6)
    return out

