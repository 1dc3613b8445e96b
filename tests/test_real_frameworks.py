"""End to end on the CPU, with the real frameworks: export a small registered model, verify every
export, run every CPU framework that is installed briefly, write records. Marked slow (it needs the full
install); not skipped: this is the product, and CI runs it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferbench import records
from inferbench.base.device import Device
from inferbench.execution.childenv import thread_env
from inferbench.execution.rounds import measure_group
from inferbench.exporters import cache
from inferbench.registry.artifacts import EXPORTERS
from inferbench.registry.frameworks import FRAMEWORKS, unavailable_reason
from inferbench.run import main
from inferbench.spec import CellJob, CellKey, RunConfig, RunnerOptions, TimingConfig

pytestmark = pytest.mark.slow
MODEL = ["--model", "mobilenet_v3_small", "--resolution", "96"]
QUICK = ["--duration", "0.3", "--min-iterations", "5", "--warmup", "1", "--warmup-seconds", "0", "--threads", "2",
         "--processes", "1"]  # one worker a cell: nothing here measures the between-process term (test_measure does)
#: every framework of the registry that can run on this machine's CPU (counts follow the registry)
CPU_FRAMEWORKS = [k for k, fw in FRAMEWORKS.items() if unavailable_reason(fw, "cpu") is None]
VERIFIED = [k for k in CPU_FRAMEWORKS if FRAMEWORKS[k].verified("mobilenet_v3_small")]


def cell_job(folder: Path, framework: str = "onnxrt", batch_size: int = 2, duration: float = 0.0,
             idle_seconds: float = 2.0, rounds: int = 3) -> CellJob:
    """A typed job for one cell of the small model, as the pipeline would send it (at the batch size default_run
    exported: a job computes no reference)."""
    fw = FRAMEWORKS[framework]
    config = RunConfig(weights="random", seed=0, device=Device("cpu"), threads=2,
                       timing=TimingConfig(0, 0.0, duration, 3, rounds), options=RunnerOptions(),
                       cache_dir=str(folder.parent))
    return CellJob(CellKey("mobilenet_v3_small", 96, batch_size, framework), fw, config, str(folder),
                   str(folder / EXPORTERS[fw.artifact].path), (batch_size,), idle_seconds=idle_seconds)


def model_folder(cache_dir: Path) -> Path:
    """The cache folder of this module's model: the cache is shared with other test modules' models."""
    (manifest,) = cache_dir.glob("mobilenet_v3_small_96_*/manifest.json")
    return manifest.parent


def _replace(target: Path, source: Path) -> None:
    """``target`` (a file or a folder) replaced by a copy of ``source``."""
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    (shutil.copytree if source.is_dir() else shutil.copy2)(source, target)


@contextlib.contextmanager
def planted(cache_dir: Path, kind: str, plant: Callable[[Path], Any]) -> Iterator[None]:
    """This module's model's ``kind`` artifact in the shared cache replaced by what ``plant(path)`` puts there, its
    manifest hashes rewritten to match (as an attacker with write access to a shared cache could); the cache as it
    was afterwards, for the other tests."""
    folder = model_folder(cache_dir)
    target = folder / EXPORTERS[kind].path
    kept = Path(tempfile.mkdtemp(prefix="kept-")) / target.name
    (shutil.copytree if target.is_dir() else shutil.copy2)(target, kept)
    manifest = cache.read_manifest(folder)

    def rehash() -> None:
        manifest["artifacts"][kind]["files"] = cache.hash_tree(target, folder)
        cache.record(folder, kind, manifest["artifacts"][kind], manifest["key_inputs"])

    try:
        plant(target)
        rehash()
        yield
    finally:
        _replace(target, kept)
        rehash()
        shutil.rmtree(kept.parent)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, shared_cache):
    root = tmp_path_factory.mktemp("e2e")
    out, cache_dir = root / "out", shared_cache
    # 3 rounds: what these tests check (every framework runs, passes parity at a batch of several images, writes a
    # record that follows the schema) needs no more; batch 2 alone: every other test of a runner times batch 1, and
    # a second batch size here was a second process a framework (4 min of CI's time); one framework loaded at a
    # time: eleven side by side (~1 GB each by the memory check's estimate) did not fit beside the other xdist
    # worker's training tests
    code = main([*MODEL, *QUICK, "--framework", "all", "--batch-size", "2", "--rounds", "3", "--sequential",
                 "--output-dir", str(out), "--cache-dir", str(cache_dir)])
    return code, out, cache_dir


def test_every_cpu_framework_runs_and_passes_parity(default_run):
    code, out, _ = default_run
    assert code == 0
    # the cpu extra installs every CPU runtime, JAX included
    assert {"jax", "onnxrt", "openvino", "torch", "torch-native", "tf", "kerasxla"} <= set(CPU_FRAMEWORKS)
    df = records.load(out)
    jitted = df[df.framework == "jax"].iloc[0]  # JAX as its docs time it: jitted, on the device, block_until_ready
    assert jitted["runner.sync"] == "jax.block_until_ready" and jitted["runner.jit"] == "jax.jit(stateless_call)"
    assert jitted["timing.timed_region"] == "call+sync" and jitted["runner.keras_backend"] == "jax"
    # XLA's own count of its compiled call, per image: every weight read at least once, the image in and the outputs
    # out, so never below the perfect-fusion bound; its FLOPs a second count of the same convolutions as Keras'
    assert jitted["runner.runtime_cost.by"] == "XLA cost analysis" == jitted["bytes_runtime_by"]
    assert jitted["bytes_per_image_low"] <= jitted["bytes_per_image_runtime"], jitted.filter(like="bytes")
    assert 0.9 < jitted["runner.runtime_cost.flops_per_image"] / jitted["model_stats.flops_per_image"] < 1.1
    # inductor's own count, taken as it compiled the timed batch: its kernels' bytes plus the weights it froze into
    # the graph (constants it does not count), once a call; no fewer than the perfect-fusion bound, no more than
    # every intermediate written and read
    compiled = df[df.framework == "torch-inductor"].iloc[0]
    assert compiled["bytes_runtime_by"] == "inductor kernel count + frozen weights once", compiled.filter(like="cost")
    assert compiled["runner.runtime_cost.kernel_bytes_per_image"] > 0
    assert compiled["bytes_per_image_low"] <= compiled["bytes_per_image_runtime"] <= compiled["bytes_per_image_high"]
    assert len(df) == len(CPU_FRAMEWORKS)
    assert sorted(set(df["framework"])) == sorted(CPU_FRAMEWORKS)
    assert (df["status"] == "ok").all(), df[["framework", "error"]]
    # every framework is verified on this model: torch-native and torch-inductor run the Keras weights ported
    assert VERIFIED == CPU_FRAMEWORKS
    converted = df[df.framework.isin(VERIFIED)]
    assert set(converted["parity.status"]) == {"passed"}
    assert {tuple(c) for c in converted["parity.checked_batch_sizes"]} == {(16, 2)}
    assert (converted["parity.max_rel_err"] < 1e-4).all()
    assert (converted["parity.top1_agreement"] == 1.0).all()
    # the model's own FP32 spread (eager against graph) is measured and recorded; this shallow model's is far
    # below the fixed gate, which it therefore keeps
    spread = converted["parity.thresholds.fp32_spread.max_rel_err"]
    assert spread.notna().all() and (spread < 1e-4).all() and not converted["parity.thresholds.widened"].any()
    assert (converted["parity.thresholds.max_rel_err"] == 1e-3).all()


#: every framework of the registry that runs on a CPU, installed or not: the tests collected are the same in every
#: install (README counts them), a runner not installed says so when its contract is checked
ON_A_CPU = [k for k, fw in FRAMEWORKS.items() if "cpu" in fw.devices]


@pytest.mark.parametrize("framework", ON_A_CPU)
def test_runner_contract(default_run, framework):
    """What every runner owes the pipeline, checked on each installed runner's own records: it ran,
    names its sync mechanism with a code, uses the run's thread count, and its outputs passed the gate."""
    missing = unavailable_reason(FRAMEWORKS[framework], "cpu")
    if missing:  # the full install (README's) has every one: nothing is skipped there
        pytest.skip(missing)
    _, out, _ = default_run
    paths = sorted(out.rglob(f"*_{framework}.json"))
    assert len(paths) == 1  # batch size 2
    for path in paths:
        rec = json.loads(path.read_text())
        assert rec["status"] == "ok", rec["error"]
        runner = rec["runner"]
        assert runner["sync"] and " " not in runner["sync"], runner["sync"]  # a code, not a sentence
        assert runner["intra_op_threads"] == 2
        assert rec["parity"]["status"] == "passed"
        assert rec["latency_ms"]["n"] >= 5 and rec["cold_start"]["load_s"] > 0


def test_records_follow_the_schema(default_run):
    _, out, _ = default_run
    files = sorted(out.rglob("*_bs*.json"))
    assert len(files) == len(CPU_FRAMEWORKS) and len(list(out.rglob("recommendation.json"))) == 1
    rec = json.loads(files[0].read_text())
    assert set(rec) == set(records.Record.__dataclass_fields__)
    assert records.parse(rec, files[0].name).status == "ok"
    lat = rec["latency_ms"]
    assert lat["n"] >= 5 and lat["n"] == len(rec["raw_latencies_ms"])
    assert lat["min"] <= lat["p50_pooled"] <= lat["p90_pooled"] <= lat["p99_pooled"] <= lat["max"]  # all pooled
    assert lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]  # the rounds' centres: each round's in that order
    assert lat["min"] <= lat["p50"] <= lat["max"]  # the rounds' centre (a slow round weighs as a fast one)
    assert lat["p50_ci95"][0] <= lat["p50"] <= lat["p50_ci95"][1]
    assert rec["throughput_per_s"] == pytest.approx(
        rec["batch_size"] * lat["n"] / rec["timing"]["window_s"], rel=1e-9)
    assert rec["cold_start"]["load_s"] > 0 and rec["cold_start"]["first_call_s"] > 0
    assert rec["memory"]["peak_host_mb"] > 50
    env = rec["environment"]
    assert env["cpu"]["model"] and env["packages"]["tensorflow"] and env["inferbench"]["version"]
    assert rec["config"]["threads"] == 2
    summary = next(out.rglob("summary.csv")).read_text().splitlines()
    assert len(summary) == 1 + len(CPU_FRAMEWORKS)


def test_same_thread_count_everywhere(default_run):
    _, out, _ = default_run
    df = records.load(out)
    intra = df["runner.intra_op_threads"].dropna().astype(int)
    assert len(intra) == len(df)  # every runner records its intra-op thread count
    assert set(intra) == {2}


def test_xla_is_only_on_for_xla_frameworks(default_run):
    _, out, _ = default_run
    df = records.load(out)
    jit = dict(zip(df["framework"], df["runner.jit_compile"]))
    assert jit["tfxla"] is True and jit["kerasxla"] is True
    assert jit["tf"] is False and jit["keras"] is False and jit["keras-eager"] is False


def test_artifacts_are_cached_with_a_manifest(default_run, tmp_path, capsys):
    _, _, cache_dir = default_run
    folder = model_folder(cache_dir)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["artifacts"]) == {"keras", "reference", "ported", "savedmodel", "onnx", "torch"}
    onnx_entry = manifest["artifacts"]["onnx"]
    assert onnx_entry["versions"]["tf2onnx"] and onnx_entry["files"] and onnx_entry["input_signature"]
    before = {k: v["exported_at"] for k, v in manifest["artifacts"].items()}
    code = main([*MODEL, *QUICK, "--framework", "onnxrt", "--batch-size", "2", "--output-dir", str(tmp_path),
                 "--cache-dir", str(cache_dir), "-v"])  # -v: the phases, "cached" among them
    assert code == 0
    err = capsys.readouterr().err
    assert "export onnx  cached" in err and "exported in" not in err
    after = json.loads((folder / "manifest.json").read_text())["artifacts"]
    assert {k: v["exported_at"] for k, v in after.items()} == before


def _perturbed_copy(cache_dir: Path, tmp_path: Path) -> Path:
    import onnx
    from onnx import numpy_helper

    folder = model_folder(cache_dir)
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    model = onnx.load(copy / "onnx" / "model.onnx")
    init = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    w = numpy_helper.to_array(init).copy()
    w.flat[0] += 0.5 * float(np.abs(w).max()) + 0.5  # one weight of one layer
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    onnx.save(model, copy / "onnx" / "model.onnx")
    return copy


def test_parity_gate_catches_one_perturbed_weight(default_run, tmp_path):
    _, _, cache_dir = default_run
    folder = _perturbed_copy(cache_dir, tmp_path)
    (res,) = measure_group([cell_job(folder)], [{**os.environ, "CUDA_VISIBLE_DEVICES": "", **thread_env(2)}], 0,
                           lambda label, text: None)
    assert res.ok, res
    parity = res.cell.blocks["parity"]
    assert parity["status"] == "failed" and parity["max_rel_err"] > 1e-3


class WallSensor:
    """A 100 W device on the wall clock: stands in for NVML, which this machine has not got.
    It logs which thread calls it, so the test sees what the timed thread did."""

    name, power_reading, wrap_j = "fake", "fake-100w", None

    def __init__(self):
        self.t0, self.log = time.monotonic(), []

    def _note(self, what):
        self.log.append((what, threading.current_thread().name))

    def energy_j(self):
        self._note("energy")
        return 100.0 * (time.monotonic() - self.t0)

    def power_w(self):
        self._note("power")
        return 100.0

    def state(self):
        self._note("state")
        return {"name": "fake GPU"}

    def process_memory_mb(self, pid):
        return None


def test_a_cell_measures_energy_with_an_injected_sensor(default_run, monkeypatch):
    """The worker's whole energy path (baseline, extended window, counter, sampler, per inference),
    in-process on the CPU with a sensor that stands in for NVML."""
    from inferbench.measure import trackers
    from inferbench.measure.trackers import energy as power
    from inferbench.measure.trackers.machine import MachineTracker
    from inferbench.measure.trackers.nvml import NvmlTracker
    from inferbench.scenarios import inference

    _, _, cache_dir = default_run
    folder = model_folder(cache_dir)
    sensor = WallSensor()
    monkeypatch.setattr(trackers, "open_trackers",
                        lambda job: ([NvmlTracker(sensor, job.idle_seconds), MachineTracker.open(job)], {}))
    real_baseline = power.idle_baseline

    def baseline_then_mark(*args, **kwargs):
        sensor.log.append(("baseline", "-"))
        out = real_baseline(*args, **kwargs)
        sensor.log.append(("baseline done", "-"))
        return out

    monkeypatch.setattr(power, "idle_baseline", baseline_then_mark)
    result = inference.run(cell_job(folder, duration=0.1, idle_seconds=0.3, rounds=2),
                           lambda phase: None)
    out = result.blocks
    e, timing = out["energy"], out["timing"]
    # every block is long enough for the counter: 2 rounds of 2 s
    assert timing["extended_for_energy_from_s"] == 0.1 and timing["window_s"] >= 4 * power.MIN_WINDOW_S
    assert result.timing.min_duration_s == 4 * power.MIN_WINDOW_S  # the record's config.timing
    assert e["available"] and e["method"] == "fake-counter" and not e["too_short"] and e["blocks"] == 2
    assert e["gross_j"] == pytest.approx(100.0 * timing["window_s"], rel=0.05)
    assert e["idle_w"] == pytest.approx(100.0, rel=0.05) and abs(e["net_j"]) < 0.05 * e["gross_j"]
    inferences = len(out["raw_latencies_ms"]) * 2
    assert e["joules_per_inference"] == pytest.approx(e["gross_j"] / inferences)
    assert e["mean_power_w"] == pytest.approx(100.0, rel=0.05) and e["peak_power_w"] == 100.0
    assert e["sampler"]["n"] >= 10 and e["sampler"]["reading"] == "fake-100w"
    assert out["gpu_state"] == {"start": {"name": "fake GPU"}, "end": {"name": "fake GPU"}}
    # between the baseline before the rounds and the one after them, the timed thread touched the sensor only around
    # the window; after the second, only for the device's state
    marks = [i for i, (what, _) in enumerate(sensor.log) if what in ("baseline", "baseline done")]
    assert len(marks) == 4, marks  # read before the rounds and again after them
    between = sensor.log[marks[1] + 1:marks[2]]
    main = [what for what, thread in between if thread == "MainThread"]
    assert main == ["power", "energy", "energy"] * 2, main  # around each block only
    assert [what for what, thread in sensor.log[marks[3] + 1:] if thread == "MainThread"] == ["state"]
    assert any(thread == "inferbench-power" for _, thread in between)
    assert e["idle_used"]["method"] == "interpolated" and abs(e["idle_used"]["drift_w"]) < 5.0


def test_a_crashing_framework_is_a_failed_row_and_the_rest_still_run(default_run, tmp_path, capsys):
    _, _, cache_dir = default_run
    folder = model_folder(cache_dir)
    broken_cache = tmp_path / "cache"
    shutil.copytree(folder, broken_cache / folder.name)
    pt = broken_cache / folder.name / "torch" / "model.safetensors"
    # keep the manifest's hash valid for the broken file so the cache reuses it
    pt.write_bytes(b"not a torch file")
    manifest_path = broken_cache / folder.name / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["artifacts"]["torch"]["files"] = {"torch/model.safetensors": cache.sha256_file(pt)}
    manifest_path.write_text(json.dumps(manifest))
    out = tmp_path / "out"
    code = main([*MODEL, *QUICK, "--framework", "torch,onnxrt", "--output-dir", str(out),
                 "--cache-dir", str(broken_cache)])
    assert code == 1
    df = records.load(out).set_index("framework")
    assert df.loc["torch", "status"] == "failed" and "SafetensorError" in df.loc["torch", "error"]
    assert "Traceback" in df.loc["torch", "traceback"]
    assert df.loc["onnxrt", "status"] == "ok"
    assert "torch bs1 failed" in capsys.readouterr().out


def test_missing_package_is_a_failed_row_naming_the_extra(monkeypatch, tmp_path, default_run):
    from inferbench.registry import frameworks

    _, _, cache_dir = default_run
    real = frameworks.missing_packages
    monkeypatch.setattr(frameworks, "missing_packages",
                        lambda fw, *a, **k: ["onnx2torch"] if fw.key == "torch" else real(fw, *a, **k))
    out = tmp_path / "out"
    code = main([*MODEL, *QUICK, "--framework", "torch,onnxrt", "--output-dir", str(out),
                 "--cache-dir", str(cache_dir)])
    assert code == 1
    df = records.load(out).set_index("framework")
    assert df.loc["torch", "error"] == 'onnx2torch not installed: pip install -e ".[torch]"'
    assert df.loc["onnxrt", "status"] == "ok"


def test_options_reach_the_runner_and_the_record(default_run, tmp_path, monkeypatch):
    """--include-transfer times host-to-host and says so; --precision bf16 runs torch in bf16 with bf16
    parity thresholds; channels-last reaches torch-native. (The CPU is said to have BF16 instructions: what is tested
    here is the options' way to the record; a CPU without them is refused, the next test.)"""
    from inferbench.base import machine

    flags = machine.cpu_flag_set() | {"avx512_bf16"}
    monkeypatch.setattr(machine, "cpu_flag_set", lambda: flags)
    _, _, cache_dir = default_run
    out = tmp_path / "out"
    code = main([*MODEL, *QUICK, "--framework", "torch,torch-native", "--precision", "bf16", "--reduced-only",
                 "--include-transfer", "--channels-last", "--agreement-inputs", "0", "--output-dir", str(out),
                 "--cache-dir", str(cache_dir)])  # agreement over many inputs: not these options' way
    df = records.load(out).set_index("framework_key")
    assert set(df["framework"]) == {"torch:bf16+e2e", "torch-native:bf16+channels-last+e2e"}  # display names
    assert (df["status"] == "ok").all(), df["error"]
    assert df.loc["torch", "precision"] == "bf16" and df.loc["torch", "runner.dtype"] == "bfloat16"
    # judged against the bf16 gate relative to the model's own BF16 error (measured at export), whatever the
    # verdict: the exit status follows it
    assert df.loc["torch", "parity.precision"] == "bf16" and df.loc["torch", "parity.thresholds.relative"]
    own = df.loc["torch", "parity.thresholds.precision_sensitivity.max_rel_err"]
    assert df.loc["torch", "parity.thresholds.max_rel_err"] == pytest.approx(min(0.4, max(1e-3, 2 * own)))
    assert df.loc["torch", "parity.max_rel_err"] > 1e-3  # really ran in bf16, not fp32
    assert code == (1 if df.loc["torch", "parity.status"] == "failed" else 0)
    assert df.loc["torch-native", "runner.channels_last"]
    assert df["options.include_transfer"].all() and df["config.options.include_transfer"].all()
    assert set(df["timing.timed_region"]) == {"h2d+call+d2h"}
    names = {p.name for p in next(out.iterdir()).glob("*.json")}
    # precision and the options that change what is measured are part of the cell's name
    assert names >= {"mobilenet_v3_small_96_bs1_torch_bf16_e2e.json",
                     "mobilenet_v3_small_96_bs1_torch-native_bf16_channels-last+e2e.json"}



def test_energy_is_absent_with_a_reason_on_this_cpu(default_run):
    _, out, _ = default_run
    rec = json.loads(next(out.rglob("*_onnxrt.json")).read_text())
    if rec["energy"]["available"]:  # a machine that exposes RAPL
        assert rec["energy"]["joules_per_inference"] > 0 and rec["energy"]["method"].startswith("RAPL")
    else:
        assert "RAPL" in rec["energy"]["reason"]
    assert rec["memory"]["peak_device_mb"] is None


def test_keras_on_the_torch_backend(default_run, tmp_path):
    """The same .keras artifact on Keras' torch backend, through the same parity gate."""
    _, _, cache_dir = default_run
    out = tmp_path / "out"
    code = main([*MODEL, *QUICK, "--framework", "keras-eager,keras", "--keras-backend", "torch",
                 "--output-dir", str(out), "--cache-dir", str(cache_dir)])
    df = records.load(out).set_index("framework")
    assert (df["status"] == "ok").all(), df["error"]
    assert code == 0
    assert set(df["runner.keras_backend"]) == {"torch"}
    assert set(df["parity.status"]) == {"passed"}


def test_missing_keras_backend_is_a_failed_row(default_run, tmp_path):
    import importlib.util

    if importlib.util.find_spec("jax") is not None:
        pytest.skip("jax is installed here")
    _, _, cache_dir = default_run
    out = tmp_path / "out"
    assert main([*MODEL, *QUICK, "--framework", "keras", "--keras-backend", "jax", "--output-dir", str(out),
                 "--cache-dir", str(cache_dir)]) == 1
    rec = records.load(out).iloc[0]
    assert rec["status"] == "failed" and 'pip install -e ".[jax]"' in rec["error"]


def test_a_weights_file_of_another_model_is_refused(tmp_path, capsys):
    """A MobileNetV3-Small file passed as resnet50's (or MobileNetV3-Large's) weights ran and recorded
    "parity passed"; now one line and exit 2, and nothing written. The same file fits its own model."""
    import subprocess
    import sys

    path = tmp_path / "small.keras"
    script = ("import keras, sys\n"
              "from inferbench.registry.keras_models import build_keras_model\n"
              "from inferbench.registry.models import get_model\n"
              "keras.applications.MobileNetV3Small(weights=None, classifier_activation=None, "
              f"input_shape=(96, 96, 3)).save({str(path)!r})\n"
              f"build_keras_model(get_model('mobilenet_v3_small'), 96, {str(path)!r}, 0)\n"  # fits its own model
              "print('fits')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "fits", proc.stderr[-2000:]
    out = tmp_path / "out"
    code = main(["--model", "mobilenet_v3_large", "--resolution", "96", "--weights", str(path), *QUICK,
                 "--framework", "onnxrt", "--output-dir", str(out), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith(f"inferbench.run: error: {path} holds a model of ")
    assert "not mobilenet_v3_large (" in err[-1] and "Traceback" not in "\n".join(err)
    assert not out.exists() or not any(out.iterdir())


def test_a_pickle_planted_in_the_cache_never_runs(default_run, tmp_path, capsys):
    """The torch artifact is weights only: a pickle planted in its place (its manifest hash rewritten to match, as
    an attacker with write access to a shared cache could) fails the cell with one line, and runs nothing."""
    import pickle

    _, _, cache_dir = default_run
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('ran')",))

    with planted(cache_dir, "torch", lambda target: target.write_bytes(pickle.dumps(Payload()))):
        code = main([*MODEL, *QUICK, "--framework", "torch", "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(cache_dir)])
    assert not marker.exists()
    assert code == 1
    error = records.load(tmp_path / "out").iloc[0]["error"]
    assert "\n" not in error and ("safetensor" in error.lower() or "header" in error.lower()), error



def test_a_run_beside_busy_processes_says_it_is_not_valid(default_run, tmp_path, capsys):
    """Real work beside a real run (one busy loop per core): every cell is marked not valid, and the answer says so
    first, whatever the timings say."""
    import subprocess
    import sys

    _, _, cache_dir = default_run
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.5)
        code = main([*MODEL, *QUICK, "--duration", "2.1", "--rounds", "3", "--framework", "onnxrt",
                     "--output-dir", str(tmp_path / "out"), "--cache-dir", str(cache_dir), "--require-valid"])
    finally:
        for hog in hogs:
            hog.kill()
    out = capsys.readouterr()
    assert code == 1 and "--require-valid: the run is not valid" in out.err
    assert out.out.startswith("NOT VALID (1 of 1 cells): other work took ")
    rec = records.load(tmp_path / "out").iloc[0]
    assert rec["validity.valid"] == False and rec["machine_state.other_cores_max"] > 0.5  # noqa: E712


def test_real_runtimes_serve_under_loadgen(default_run, tmp_path):
    """ONNX Runtime and OpenVINO on MobileNetV3-Small under the real LoadGen: single-stream answers; the server
    search runs within a bound set from the single-query tail just measured and at least 150 ms (above the
    scheduler's stalls of a loaded 2-core machine: up to 119 ms measured), its served outputs matching the reference;
    offline answers. Whether a load holds depends on the machine: on a quiet one (the run's own validity says so) one
    of the two runtimes must hold it, confirmed; beside the suite's other worker the honest answer may be "no load"
    (CI met it once: both searches' confirmations failed as the other worker's load came and went), and then each
    record must show the INVALID test that refused it. That a load is found where queueing theory puts it is held
    by the serve tests' fakes, which no other work can slow. One thread a call: the two serving threads fill the two
    cores without oversubscribing them."""
    _, _, cache_dir = default_run
    bound = None
    for scenario in ("single-stream", "server", "offline"):
        out = tmp_path / scenario
        extra = ["--slo-p99", f"{bound:.1f}"] if scenario == "server" else []
        served = ["onnxrt", "openvino"] + (["jax"] if scenario == "offline" else [])  # jax: samples on its device
        code = main([*MODEL, "--threads", "1", "--quick", "--scenario", scenario, *extra, "--framework",
                     ",".join(served), "--output-dir", str(out), "--cache-dir", str(cache_dir)])
        assert code == 0, scenario
        df = records.load(out)
        assert set(df["framework"]) == set(served) and (df["parity.served.status"] == "passed").all()
        placed = dict(zip(df["framework"], df["serving.samples.placement"]))
        assert df["serving.samples.resident"].all(), placed  # placed once, each batch gathered there
        assert placed["onnxrt"].startswith("host array")
        assert "jax" not in placed or placed["jax"].startswith("JAX array on ")
        if scenario == "single-stream":
            bound = max(150.0, 8 * float(df["p99_ms"].fillna(df["latency_ms.max"]).max()))
        for _, r in df.iterrows():
            answer = r["serving.answer"]
            if scenario == "server" and answer["found"]:
                assert answer["max_valid_qps"] > 0 and r["throughput_per_s"] == answer["max_valid_qps"]
                assert answer["held_in_a_row"] == 3  # held: 3 VALID tests in a row at that load or above
            elif scenario == "server":  # a tail this machine's load pushed past the bound: said, never a number
                assert r["throughput_per_s"] == 0 and answer["max_valid_qps"] is None
            else:
                assert r["throughput_per_s"] > 0
        if scenario == "server" and df["validity.valid"].eq(True).all():  # quiet (said so): which runtime holds
            assert any(a["found"] for a in df["serving.answer"]), df["serving.answer"].tolist()  # depends on its tail
        elif scenario == "server":  # busy: an answer not found stands on the INVALID tests that refused it
            for answer, steps in zip(df["serving.answer"], df["serving.steps"]):
                refused = [s for s in steps if not s["valid"] and (s["invalid_reason"] or s["not_met"])]
                assert answer["found"] or refused, steps


def test_bf16_runs_where_the_cpu_computes_it_and_is_refused_in_one_line_where_it_would_be_emulated(
        default_run, tmp_path, capsys, monkeypatch):
    """OpenVINO takes --precision bf16 (its inference-precision hint) and torch runs bf16 where this CPU has BF16
    instructions (AVX512_BF16 or AMX), the record saying what each executed (OpenVINO's compute layers read back from
    its runtime model, torch's dtype); on a CPU without them one line, exit 2, nothing written (the machine's own
    flags decide which branch runs; the refusal is also checked with an AVX2-only CPU's flags)."""
    from inferbench.base import machine

    _, _, cache_dir = default_run
    argv = [*MODEL, *QUICK, "--framework", "openvino,torch-native", "--precision", "bf16", "--reduced-only",
            "--rounds", "3",
            "--cache-dir", str(cache_dir)]
    refusal = machine.cpu_precision_refusal("bf16")
    code = main([*argv, "--output-dir", str(tmp_path / "real")])
    if refusal is None:  # this CPU computes BF16
        assert code in (0, 1)  # parity decides
        df = records.load(tmp_path / "real").set_index("framework_key")
        assert (df["status"] == "ok").all(), df["error"]
        assert df.loc["openvino", "runner.inference_precision"] == "bf16"
        prefix = "runner.executed_precisions."  # the record's dict, one column per precision in the table
        executed = {c[len(prefix):]: n for c, n in df.loc["openvino"].items() if c.startswith(prefix) and n == n}
        assert set(executed) == {"bf16"} and executed["bf16"] > 10, executed
        assert df.loc["torch-native", "runner.dtype"] == "bfloat16" and set(df["precision"]) == {"bf16"}
    else:
        assert code == 2 and capsys.readouterr().err.strip().endswith(refusal)
        assert not (tmp_path / "real").exists() or not any((tmp_path / "real").iterdir())
    capsys.readouterr()  # the run's own progress lines
    avx2_only = {"fma", "avx", "avx2", "sse4_1", "sse4_2"}  # an AMD EPYC of these machines
    monkeypatch.setattr(machine, "cpu_flag_set", lambda: avx2_only)
    assert main([*argv, "--output-dir", str(tmp_path / "avx2")]) == 2
    err = capsys.readouterr().err
    assert "--precision bf16: this CPU has no BF16 instructions (avx512_bf16 or amx_bf16; its AVX-512/AMX flags: " \
        "none)" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "avx2").exists() or not any((tmp_path / "avx2").iterdir())


EVIL_SAVEDMODEL = """
import sys
import tensorflow as tf
size, classes, folder, marker = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]


class Model(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([3, classes], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32)])
    def serve(self, x):
        tf.io.write_file(marker, "ran")  # what a planted or hostile graph could do as the user
        return tf.reduce_mean(x, axis=[1, 2]) @ self.w


model = Model()
tf.saved_model.save(model, folder, signatures={"serving_default": model.serve})
"""


def test_a_savedmodel_that_writes_a_file_is_refused_before_it_runs(default_run, tmp_path, capsys):
    """A SavedModel's graph may hold any TensorFlow op. One whose serving function writes a file is refused in one
    line naming the op, exit 2, before TensorFlow loads it — brought by the user (--model FOLDER), or planted in the
    shared cache under a manifest whose hashes were rewritten to match: the file is never written."""
    import subprocess
    import sys

    _, _, cache_dir = default_run
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil"
    subprocess.run([sys.executable, "-c", EVIL_SAVEDMODEL, "96", "1000", str(evil), str(marker)], check=True,
                   capture_output=True, timeout=600)
    assert not marker.exists()
    code = main(["--model", str(evil), "--input-shape", "96x96x3", "--framework", "tf", *QUICK,
                 "--output-dir", str(tmp_path / "own"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "holds the op WriteFile" in err[-1] and "Traceback" not in "\n".join(err), err
    assert not marker.exists()

    for frameworks in ("tf,tfxla,openvino", "openvino"):  # OpenVINO converts the same SavedModel: read first too
        with planted(cache_dir, "savedmodel", lambda target: _replace(target, evil)):  # (in a child process)
            code = main([*MODEL, *QUICK, "--framework", frameworks, "--output-dir", str(tmp_path / frameworks),
                         "--cache-dir", str(cache_dir)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and "holds the op WriteFile" in err[-1] and "Traceback" not in "\n".join(err), err
        assert not marker.exists()


@pytest.mark.parametrize("channels_last, precision", [(False, "fp32"), (True, "fp32"), (False, "bf16")])
def test_torch_gathers_a_batch_from_its_resident_samples_as_prepare_places_a_host_batch(channels_last, precision):
    """Serving's resident samples (torch: a tensor in the module's layout, dtype and memory format, on its device) and
    a batch gathered there are what ``prepare`` makes of the same host rows: same values, shape, dtype and strides."""
    import numpy as np
    import torch

    from inferbench.registry.models import get_model
    from inferbench.runners.base import LoadContext
    from inferbench.runners.torch import TorchNativeRunner, TorchRunner
    from inferbench.spec import RunnerOptions

    spec = get_model("mobilenet_v3_small")
    for cls in (TorchNativeRunner, TorchRunner):
        runner = cls()
        runner.setup(LoadContext(Path("."), None, spec, 32, "cpu", 1, 0, precision,
                                 RunnerOptions(channels_last=channels_last)))
        samples = np.random.default_rng(0).standard_normal((6, 32, 32, 3)).astype(np.float32)
        idx = np.array([4, 1, 1, 5])
        got, want = runner.gather(runner.resident(samples), idx), runner.prepare(np.take(samples, idx, axis=0))
        assert torch.equal(got, want) and got.dtype == want.dtype == runner.dtype
        assert got.shape == want.shape == ((4, 3, 32, 32) if cls is TorchNativeRunner else (4, 32, 32, 3))
        assert got.stride() == want.stride()
        assert got.is_contiguous(memory_format=torch.channels_last if runner.channels_last else
                                 torch.contiguous_format)
        assert runner.channels_last == (channels_last and cls is TorchNativeRunner)
        assert "index_select" in runner.placement()["placement"] and runner.placement()["resident"]


def test_without_tensorflow_keras_on_jax_computes_a_new_timed_batchs_reference_once_it_reproduces_tensorflows(
        default_run, tmp_path):
    """A GPU machine with the artifacts brought and no TensorFlow failed to serve a batch size not exported ("export of
    reference failed: tensorflow not installed"). The reference exporter now runs on the Keras backend the worker has
    (JAX here, TensorFlow installed but not used): its outputs on the 16 reference inputs must reproduce the ones
    TensorFlow exported, else it fails saying so; the manifest and every record say which backend computed it."""
    import subprocess
    import sys

    from inferbench.exporters import key_inputs
    from inferbench.registry.artifacts import REFERENCE_LOGITS, timed_reference

    _, _, cache_dir = default_run
    made = cache.artifact_dir(cache_dir, key_inputs("mobilenet_v3_small", 96, "random", 0))
    folder = tmp_path / "brought"
    shutil.copytree(made, folder)
    script = ("import json, sys; from pathlib import Path; from inferbench.exporters.reference import export; "
              "from inferbench.registry.artifacts import ExportContext; "
              "print(json.dumps(export(ExportContext(Path(sys.argv[1]), 'mobilenet_v3_small', 96, 'random', 0, "
              "(1, 2)))))")
    (folder / timed_reference(2)).unlink()  # made again on JAX, against TensorFlow's
    kept = np.load(made / timed_reference(2))[:1]  # a batch-1 reference already there (its bytes are what is checked)
    np.save(folder / timed_reference(1), kept)

    def export_on_jax() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True,
                              env={**os.environ, "KERAS_BACKEND": "jax"}, check=False)

    done = export_on_jax()
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["keras_backend"] == "jax" and facts["backend_check"]["status"] == "passed"
    assert "computed with Keras on jax" in facts["notes"][0] and facts["computed_batch_sizes"] == [2]
    assert np.array_equal(np.load(folder / timed_reference(1)), kept)  # kept, not computed again
    tf_made, jax_made = np.load(made / timed_reference(2)), np.load(folder / timed_reference(2))
    assert jax_made.shape == tf_made.shape and np.abs(jax_made - tf_made).max() <= 1e-4 * np.abs(tf_made).max()
    logits = np.load(folder / REFERENCE_LOGITS)  # a TensorFlow reference Keras on JAX does not reproduce: refused
    np.save(folder / REFERENCE_LOGITS, logits + 0.05 * np.abs(logits).max() * np.sign(logits))
    done = export_on_jax()
    assert done.returncode != 0 and "Keras on jax does not reproduce the TensorFlow reference on the 16 reference " \
        "inputs" in done.stderr


def test_without_tensorflow_the_keras_reference_needs_keras_on_the_backend_installed(monkeypatch):
    """Which packages the Keras model's reference export needs: TensorFlow where it is installed, else Keras on JAX,
    then torch (the export's package check no longer fails a machine that has Keras and JAX)."""
    import importlib.util

    from inferbench.registry.artifacts import exporter_packages

    real = importlib.util.find_spec
    for hidden, want in (((), ("tensorflow", "keras")), (("tensorflow",), ("keras", "jax")),
                         (("tensorflow", "jax"), ("keras", "torch"))):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, h=hidden: None if name in h else real(name))
        assert exporter_packages("reference") == want, hidden


def test_a_gpu_tunes_cuda_graphs_inductor_modes_and_layouts_and_each_setting_reaches_the_runner(tmp_path, capsys):
    """On a GPU the best set holds torch-native, tuned over CUDA graphs and channels-last, and torch-inductor over
    its modes (default, reduce-overhead's CUDA graphs, max-autotune without them) and channels-first: the GPU's "best"
    had been 2-3x off (torch-inductor alone, no CUDA graphs). Each setting reaches the runner as it loads (read here
    on the CPU, where capturing a CUDA graph is refused, saying so). TF32 is a precision of its own, refused on a
    CPU in one line."""
    from inferbench.registry.frameworks import FRAMEWORKS, in_set
    from inferbench.registry.models import get_model
    from inferbench.runners.base import LoadContext
    from inferbench.runners.torch import TorchInductorRunner, TorchNativeRunner
    from inferbench.spec import RunnerOptions

    assert {k for k, fw in FRAMEWORKS.items() if in_set(fw, "best", "gpu")} >= {"torch-native", "torch-inductor",
                                                                                 "jax", "tensorrt-fp32"}
    native, live = TorchNativeRunner.tuning_grid(2, "gpu")
    assert native == [{}, {"channels_last": True}, {"cuda_graphs": True}, {"channels_last": True, "cuda_graphs": True}]
    assert live == [{}] and TorchNativeRunner.tuning_grid(2, "cpu")[0] == [{}, {"omp_wait_policy": "PASSIVE"}]
    inductor, _ = TorchInductorRunner.tuning_grid(2, "gpu")
    assert inductor == [{}, {"mode": "reduce-overhead"}, {"mode": "max-autotune-no-cudagraphs"},
                        {"channels_last": False}]
    spec = get_model("mobilenet_v3_small")

    def set_up(cls: Any, setting: dict, **options: Any) -> Any:
        runner = cls()
        runner.setup(LoadContext(tmp_path, None, spec, 32, "cpu", 1, 0, options=RunnerOptions(**options),
                                 setting=setting))
        return runner

    assert set_up(TorchNativeRunner, {"channels_last": True}).channels_last
    assert not set_up(TorchNativeRunner, {}).channels_last
    with pytest.raises(RuntimeError, match="CUDA graphs need a GPU"):
        set_up(TorchNativeRunner, {"cuda_graphs": True})
    compiled = {"torch_compile": True, "channels_last": True}  # as TorchInductorRunner.load sets them
    assert set_up(TorchInductorRunner, {"mode": "reduce-overhead"}, **compiled).compile_options() == {
        "mode": "reduce-overhead"}
    assert set_up(TorchInductorRunner, {}, **compiled).compile_options() == {}
    assert not set_up(TorchInductorRunner, {"channels_last": False}, **compiled).channels_last
    assert main([*MODEL, "--framework", "torch-native", "--precision", "tf32", "--output-dir",
                 str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().endswith("--precision tf32: TF32 is the tensor-core format of NVIDIA GPUs; "
                                                    "a CPU computes FP32 (--precision fp32)")
