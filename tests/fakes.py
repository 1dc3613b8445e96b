"""A fake model, exporter and runners for the fast test layer: the pipeline's own logic (isolation,
records, resume, timeouts, failures, identity) without any ML framework.

Registered only in tests (:func:`register`); the child processes import this module from the
``tests`` folder, which the tests put on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.registry.artifacts import REFERENCE_INPUTS, REFERENCE_LOGITS, Exporter
from inferbench.registry.frameworks import Framework
from inferbench.registry.inputs import make_inputs
from inferbench.registry.models import get_model
from inferbench.runners.base import LoadContext, Runner

HERE = Path(__file__).resolve().parent
WEIGHTS = "keras/fake.npz"  # the fake stands where the .keras artifact would be


def _logits(weights: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """A tiny 'model': mean colour of each cell of a 4x4 grid, times a fixed matrix."""
    n, r = batch.shape[0], batch.shape[1]
    cells = batch[:, : r - r % 4, : r - r % 4, :].reshape(n, 4, r // 4, 4, r // 4, 3).mean(axis=(2, 4))
    return (cells.reshape(n, -1) / 255.0) @ weights


def export(ctx: Any) -> dict[str, Any]:
    """Stands in for the Keras exporter: writes the 'model' and the reference inputs and logits."""
    from inferbench.registry.artifacts import PARITY_INPUTS

    if os.environ.get("FAKE_EXPORT_LOG"):  # the process each export ran in, for the tests
        with open(os.environ["FAKE_EXPORT_LOG"], "a") as log:
            log.write(f"keras {os.getpid()}\n")
    time.sleep(float(os.environ.get("FAKE_EXPORT_SLEEP", "0")))  # a slow export, for the tests of the cache's lock
    weights = np.random.default_rng(ctx.seed).normal(0, 1, (48, 10)).astype(np.float32)
    (ctx.folder / "keras").mkdir(parents=True, exist_ok=True)
    np.savez(ctx.folder / WEIGHTS, weights=weights)
    inputs = make_inputs(get_model(ctx.model), PARITY_INPUTS, ctx.resolution, ctx.seed + 2)
    (ctx.folder / "reference").mkdir(exist_ok=True)
    np.save(ctx.folder / REFERENCE_INPUTS, inputs)
    np.save(ctx.folder / REFERENCE_LOGITS, _logits(weights, inputs).astype(np.float32))
    stats = json.loads(os.environ["FAKE_MODEL_STATS"]) if os.environ.get("FAKE_MODEL_STATS") else None  # a size
    return {"paths": ["keras", "reference"], "input_signature": {}, "notes": [], "model_stats": stats}


class Stub:
    """A runtime that computes ``fn`` of its inputs on the host: the harness's side of a parity check, in-process."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def prepare(self, x: Any) -> Any:
        return x

    def call(self, x: Any) -> Any:
        return self.fn(x)

    def synchronize(self, out: Any) -> None:
        pass

    def to_numpy(self, out: Any) -> Any:
        return out


class FakeRunner(Runner):
    name = "fake"
    delay_s = 0.002

    def load(self, ctx: LoadContext) -> None:
        assert ctx.artifact is not None
        if os.environ.get("FAKE_FAIL_LOAD"):  # an install whose runtime cannot load (an A/B's B, for the tests)
            raise RuntimeError("fake: this install cannot load the model")
        if os.environ.get("FAKE_LOAD_LOG"):  # one line per load, for the tests to count
            with open(os.environ["FAKE_LOAD_LOG"], "a") as log:
                log.write(f"{os.getpid()}\n")
        self.weights = np.load(ctx.folder / WEIGHTS)["weights"]
        self.threads = ctx.threads
        marker = os.environ.get("FAKE_KILL_PARENT_ONCE")  # a Ray task's worker lost once (its node, say)
        if marker and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getppid(), int(os.environ.get("FAKE_KILL_SIGNAL", "9")))  # 15: as scancel does
        self.env_backend = os.environ.get("KERAS_BACKEND")

    def call(self, prepared: Any) -> Any:
        time.sleep(self.delay_s)
        return _logits(self.weights, prepared)

    def details(self) -> dict[str, Any]:
        seen = {k: os.environ.get(k) for k in ("TF_XLA_FLAGS", "OMP_NUM_THREADS", "ORT_FAKE", "KERAS_BACKEND")}
        return {"sync": "none-cpu", "intra_op_threads": self.threads, "keras_backend": self.env_backend,
                "environment_seen": seen}


class WrongRunner(FakeRunner):
    """An export that computes something else: one weight changed."""

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        self.weights = self.weights.copy()
        self.weights[0, 0] += 5.0


class BatchBugRunner(FakeRunner):
    """Right for a batch of 16, wrong at other batch sizes (as a program compiled for the timed batch
    shape can be): caught because parity runs at the timed batch size."""

    def call(self, prepared: Any) -> Any:
        out = super().call(prepared)
        return out if len(prepared) == 16 else out * 1.01


class DiesRunner(FakeRunner):
    """Loads and warms up fine, then its process dies in the middle of the timed rounds."""

    calls = 0

    def call(self, prepared: Any) -> Any:
        self.calls += 1
        if self.calls > 40:
            os._exit(9)
        return super().call(prepared)


class CrashRunner(FakeRunner):
    def load(self, ctx: LoadContext) -> None:
        raise RuntimeError("the fake framework crashed while loading")


class HangRunner(FakeRunner):
    def load(self, ctx: LoadContext) -> None:
        print("@@inferbench loading", flush=True)
        time.sleep(3600)


class SlowRunner(FakeRunner):
    delay_s = 0.02


class ServerRunner(FakeRunner):
    """5 ms a call: a server whose loads LoadGen's tests run in seconds, with a bound (150 ms) above the stalls a
    loaded 2-core machine's scheduler adds to a call."""

    delay_s = 0.005


class InstantRunner(FakeRunner):
    """No delay: LoadGen's tests that need hundreds of queries (multi-stream's 662 of 8 samples) end in a second."""

    delay_s = 0.0


class GlacialRunner(FakeRunner):
    delay_s = 0.2


class DeviceRunner(FakeRunner):
    """A runner with a "device": its samples made resident there (a copy of its own), a batch gathered there; every
    ``prepare`` (a host batch copied over) is counted from the moment the samples are resident on, as serving must
    make none inside its tests."""

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        self.prepares_after_resident: int | None = None

    def prepare(self, batch: np.ndarray) -> Any:
        if self.prepares_after_resident is not None:
            self.prepares_after_resident += 1
        return np.array(batch, copy=True)

    def resident(self, samples: np.ndarray) -> Any:
        self.prepares_after_resident = 0
        return ("device", np.array(samples, copy=True))

    def gather(self, resident: Any, indices: np.ndarray) -> Any:
        where, samples = resident
        assert where == "device"
        return samples[indices]

    def placement(self) -> dict[str, Any]:
        return {"resident": True, "placement": "the fake device"}

    def details(self) -> dict[str, Any]:
        return {**super().details(), "prepares_after_resident": self.prepares_after_resident}


def _machine(other_cores: float) -> None:
    """This worker's view of the machine from now on: the machine's busy time is its own plus ``other_cores`` of
    other work (and nothing else), whatever the real machine is doing."""
    from inferbench.measure.trackers import machine

    tps, start = machine._ticks(), time.monotonic()

    def stat() -> str:
        own = machine.read_own_stat().rsplit(")", 1)[1].split()
        ticks = float(own[11]) + float(own[12]) + other_cores * (time.monotonic() - start) * tps
        return f"cpu  {ticks:.0f} 0 0 1000000 0 0 0 0 0 0\n"

    machine.read_proc_stat = stat


class QuietRunner(FakeRunner):
    """The machine is quiet: no other work during the blocks."""

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        _machine(0.0)


class BusyRunner(FakeRunner):
    """Other work takes 1.8 cores throughout, as a neighbour's job on a shared 2-core runner would."""

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        _machine(1.8)


class JumpyRunner(FakeRunner):
    """A runtime whose level moves at random between 1 and 5 ms every 0.3 s: against a steady one, its ratio moves
    from round to round, so no number of rounds pins it down to a few percent. (A level that only alternated between
    2 and 4 ms every 0.15 s read 2 ms in every 0.2 s block on a busy CI runner: a block's median is the level with
    the most calls, the fast one.)"""

    def call(self, prepared: Any) -> Any:
        self.delay_s = random.Random(int(time.monotonic() / 0.3)).uniform(0.001, 0.005)
        return super().call(prepared)


class KnobRunner(FakeRunner):
    """A runtime whose speed depends on its settings, as ONNX Runtime's on spinning: the default (the grid's first)
    is the slowest; a load-time setting (its own worker) and a live one each make it faster."""

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return [{}, {"warm": True}], [{"delay_ms": 6.0}, {"delay_ms": 2.0}]

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        self.load_s = 0.0 if ctx.setting.get("warm") else 0.002
        self.delay_s = 0.006 + self.load_s

    def apply(self, setting: dict[str, Any]) -> None:
        self.delay_s = float(setting.get("delay_ms", 6.0)) / 1e3 + self.load_s


class FlatRunner(KnobRunner):
    """Settings that change nothing: tuning must keep the default."""

    def load(self, ctx: LoadContext) -> None:
        super().load(ctx)
        self.delay_s = 0.003

    def apply(self, setting: dict[str, Any]) -> None:
        self.delay_s = 0.003


FAKES = {
    "fake-lr": "FakeRunner", "fake-dropgrad": "FakeRunner", "fake-diverge": "FakeRunner",  # trainers differ
    "fake": "FakeRunner", "fake-wrong": "WrongRunner", "fake-crash": "CrashRunner", "fake-hang": "HangRunner",
    "fake-slow": "SlowRunner", "fake-5ms": "ServerRunner", "fake-200ms": "GlacialRunner", "fake-0ms": "InstantRunner",
    "fake-batchbug": "BatchBugRunner", "fake-dies": "DiesRunner",
    "fake-quiet": "QuietRunner", "fake-busy": "BusyRunner", "fake-knob": "KnobRunner", "fake-flat": "FlatRunner",
    "fake-jumpy": "JumpyRunner",
    "fake-device": "DeviceRunner",
}


def frameworks() -> dict[str, Framework]:
    from fakes_train import TRAINERS

    return {key: Framework(key, f"fakes:{cls}", "keras", ("numpy",), ("numpy",), "test", f"test double ({cls})",
                           devices=("cpu",), options=("torch_compile", "keras_backend", "tune", "optimizer",
                                                      "bn_mode"),
                           env=(("KERAS_BACKEND", "keras_backend"),),
                           trainer=f"fakes_train:{TRAINERS[key]}" if key in TRAINERS else None)
            for key, cls in FAKES.items()}


def register(registry: dict[str, Framework] | None = None, exporters: dict[str, Exporter] | None = None) -> None:
    """Add the fake frameworks and put the fake exporters in the Keras and reference exporters' place."""
    from inferbench.registry import artifacts as ex
    from inferbench.registry import frameworks as fw

    (fw.FRAMEWORKS if registry is None else registry).update(frameworks())
    registry = ex.EXPORTERS if exporters is None else exporters
    registry["keras"] = Exporter("keras", "fakes", (), ("numpy",), "test", WEIGHTS)
    registry["reference"] = Exporter("reference", "fakes_reference", ("keras",), ("numpy",), "test", "reference",
                                     per_batch_size=True)
    registry["train-reference"] = Exporter("train-reference", "fakes_train", ("keras",), ("numpy",), "test",
                                           "train-reference", per_batch_size=True)
