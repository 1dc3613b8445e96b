"""The GPU kit (benchmarks/gpu_run.sh, benchmarks/gpu_bring.py, benchmarks/gpu/*.toml) held working between the rare
GPU loans: the script's own control flow run for real (its steps in order, each once, resumed by the next call, none
started without the time for it, the results packed) with ``python3`` a stand-in that records each call, then every
recorded call parsed by the parser of the command or script it names, and every sweep configuration planned. A flag
renamed, a script that no longer imports, a configuration key or framework that went away fails here, not on the
GPU machine's clock."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_run.sh"
SWEEPS = ("batch", "cuda_graphs", "inductor", "variants", "keras_torch")
RUNS = ("quick", "offline", "server", "precision")  # first: what a call cut short must not lose

#: A ``python3`` that records its arguments (one JSON list a line) and leaves what the kit's next steps look for:
#: unpacking makes the cache folder, a run or a sweep its results folder; everything succeeds at once.
FAKE_PYTHON = """#!/bin/sh
exec {python} {recorder} "$@"
"""
RECORDER = """import json, os, sys
from pathlib import Path
args = sys.argv[1:]
open(os.environ["KIT_LOG"], "a").write(json.dumps(args) + "\\n")
if args[:2] == ["benchmarks/gpu_bring.py", "unpack"]:
    Path(args[3]).mkdir(parents=True, exist_ok=True)
if "--output-dir" in args and args[:3] in (["-m", "inferbench", "run"], ["-m", "inferbench", "sweep"]):
    out = Path(args[args.index("--output-dir") + 1])
    (out / (args[args.index("--name") + 1] if "--name" in args else "20261203-000000_stand-in")).mkdir(parents=True)
if args == ["--version"]:
    print("Python 3.12.3 (stand-in)")
"""


def _h200():
    from inferbench.base.device import Gpu

    return Gpu(0, "GPU-00000000-stand-in", "NVIDIA H200", "00000000:17:00.0", 143771.0)


H200 = _h200()


def _kit(tmp_path: Path, budget_s: int = 540, quick: bool = False) -> tuple[subprocess.CompletedProcess,
                                                                             list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake, recorder = bin_dir / "python3", bin_dir / "recorder.py"
    recorder.write_text(RECORDER)
    fake.write_text(FAKE_PYTHON.format(python=shlex.quote(sys.executable), recorder=shlex.quote(str(recorder))))
    fake.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KIT_LOG": str(log), "OUT": str(tmp_path / "out"),
           "GPU_RUN_RESULTS": str(tmp_path / "results"), "GPU_RUN_CACHE": str(tmp_path / "cache"),
           "GPU_RUN_DEVICE": "cpu", "GPU_RUN_WHEELS": "none", "GPU_RUN_BUDGET_S": str(budget_s),
           **({"GPU_RUN_QUICK": "1"} if quick else {})}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parse(call: list[str]) -> None:
    """A recorded ``python3`` call, parsed by what it calls (an inferbench command's parser, a script's own); a run
    planned as well, as recorded (the CPU) and as on the GPU machine."""
    if call[:2] == ["-m", "inferbench"]:
        command, args = call[2], call[3:]
        module = importlib.import_module(f"inferbench.{command}")
        ns = module.build_parser().parse_args(args)
        if command == "run":
            from inferbench.cli.options import given
            from inferbench.execution.plan import build
            from inferbench.options import with_defaults

            for device in ("cpu", "gpu"):
                assert build(with_defaults({**given(ns), "device": device}, "run")).cells, call
    elif call[0].startswith("benchmarks/"):
        _script(Path(call[0]).stem).parser().parse_args(call[1:])
    else:
        assert call[:2] == ["-m", "pip"] or call == ["--version"], call


@pytest.mark.slow  # each recorded run is planned for real: 'best' needs runtimes installed (a lean install has none)
@pytest.mark.parametrize("quick", [False, True])  # True: the CPU dry run's shorter settings (GPU_RUN_QUICK)
def test_the_gpu_kit_runs_its_steps_in_order_once_each_and_every_call_parses(tmp_path, monkeypatch, quick):
    from inferbench.base import device
    from inferbench.execution import plan

    monkeypatch.setattr(device, "list_gpus", lambda: [H200])  # the lent machine's, as nvidia-smi would list it
    # the FP16/BF16 step planned on this CPU too: whether this CPU has FP16 instructions (an AMD EPYC without
    # avx512_fp16 refuses it, tested apart) is not what the kit's calls are checked for
    monkeypatch.setattr(plan, "cpu_precision_refusal", lambda precision: None)
    done, calls = _kit(tmp_path, quick=quick)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    named = [c[2] if c[:2] == ["-m", "inferbench"] else Path(c[0]).stem for c in calls if c[:2] != ["-m", "pip"]
             and c != ["--version"]]
    assert named == ["gpu_bring", "gpu_referee", "gpu_referee", "run", "run", "run", "run", "selftest", "sweep",
                     "harness_overhead", "sweep", "sweep", "sweep", "sweep", "gpu_referee", "report"], named
    referee = [c for c in calls if c[0] == "benchmarks/gpu_referee.py"]
    assert [c[c.index("--idle") + 1] if "--idle" in c else "rows" for c in referee] == ["before", "rows", "after"]
    runs = [c for c in calls if c[:3] == ["-m", "inferbench", "run"]]
    assert [r[r.index("--output-dir") + 1].rsplit("/", 1)[1] for r in runs] == list(RUNS)
    sweeps = [c[c.index("--config") + 1] for c in calls if "--config" in c]
    assert sweeps == [f"benchmarks/gpu/{s}.toml" for s in SWEEPS]
    assert all(c[c.index("--device") + 1] == "cpu" for c in calls if "--device" in c)  # GPU_RUN_DEVICE reaches all
    for call in calls:
        _parse(call)
    steps = ("idle-before", "referee", "selftest", "sampler", "idle-after", "report", *RUNS,
             *(f"sweep-{w}" for w in SWEEPS))
    with tarfile.open(tmp_path / "out" / "results.tar.xz") as tar:  # the results packed for the way back
        assert {f"results/.done-{s}" for s in steps} <= set(tar.getnames())

    report = next(c for c in calls if c[2:3] == ["report"])
    assert sorted(Path(p).name for p in report[3:report.index("--out")]) == sorted(
        ["20261203-000000_stand-in"] * len(RUNS) + [*SWEEPS])  # every run's and sweep's folder, nothing else
    # the next call: every step done in the last one; the idle power read again at its end, the report made again
    again, calls = _kit(tmp_path, quick=quick)
    assert again.returncode == 0 and again.stdout.count("done in an earlier call") == len(steps) - 2, again.stdout
    assert [c[2] if c[:2] == ["-m", "inferbench"] else c[c.index("--idle") + 1] for c in calls
            if c[:2] == ["-m", "inferbench"] or "--idle" in c] == ["after", "report"]


def test_the_gpu_kit_starts_no_step_without_the_time_for_it(tmp_path):
    done, calls = _kit(tmp_path, budget_s=20)
    assert done.returncode == 0 and done.stdout.count("not started, ") == 5 + len(RUNS) + len(SWEEPS), done.stdout
    assert "== report: nothing measured yet" in done.stdout  # no report of folders that do not exist
    assert [c for c in calls if c[:2] == ["-m", "inferbench"]] == []


@pytest.mark.parametrize("name", SWEEPS)
def test_each_gpu_sweep_configuration_plans_on_the_gpu_it_is_for(name, monkeypatch):
    """Each configuration's keys, models, frameworks and rules are inferbench's: planned as on the lent machine (its
    GPU a stand-in for nvidia-smi's answer; what cannot run here is skipped with why, not refused)."""
    from inferbench.base import device
    from inferbench.sweep import make_plan

    monkeypatch.setattr(device, "list_gpus", lambda: [H200])
    plan, skipped, _ = make_plan({"config": str(ROOT / "benchmarks" / "gpu" / f"{name}.toml")})
    assert plan.config.device.kind == "gpu" and (plan.cells or skipped), (name, skipped)


def test_every_name_the_benchmark_scripts_import_from_inferbench_exists():
    """The scripts import inferbench's modules inside their functions (a GPU machine lacks TensorFlow); a name moved
    out of a module (``gpu_bring.py`` once imported options that had left ``inferbench.cli.options``) fails here."""
    import ast

    missing = []
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("inferbench"):
                module = importlib.import_module(node.module)
                missing += [f"{script.name}: {node.module}.{a.name}" for a in node.names
                            if not hasattr(module, a.name) and not _submodule(f"{node.module}.{a.name}")]
    assert not missing, missing


def _submodule(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent is a module, not a package
        return False


@pytest.mark.slow  # torch and JAX for real: the referee's rehearsal on the CPU, as gpu_run.sh runs it there
def test_the_referee_times_inferbench_beside_bare_torch_and_jax_loops_and_names_what_needs_a_gpu(tmp_path,
                                                                                                  shared_cache):
    out = tmp_path / "referee"
    done = subprocess.run([sys.executable, "benchmarks/gpu_referee.py", "--device", "cpu", "--batch-sizes", "1",
                           "--variants", "eager,graph,jax", "--blocks", "2", "--block-seconds", "0.2", "--model",
                           "mobilenet_v3_small", "--resolution", "96", "--cache-dir", str(shared_cache),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {(r["variant"], r["precision"]): r for r in json.loads((out / "referee.json").read_text())["rows"]}
    assert set(rows) == {(v, p) for v in ("eager", "graph", "jax") for p in ("fp32", "fp16")}
    for key in (("eager", "fp32"), ("jax", "fp32")):  # measured: both loops, in adjacent pairs
        r = rows[key]
        assert r["bare_p50_ms"] > 0 and r["inferbench_p50_ms"] > 0 and r["latency"]["pairs"] == 2, r
        assert r["latency"]["ratio"] > 0 and r["throughput"]["ratio"] > 0 and r["bare_j_per_image"] is None
    assert rows["jax", "fp32"]["runner"]["jit"] == "jax.jit(stateless_call)"  # inferbench's own jax runner
    assert rows["eager", "fp32"]["runner"]["channels_last"] is True
    assert {k for k, r in rows.items() if "skipped" in r} == {("eager", "fp16"), ("graph", "fp32"),
                                                              ("graph", "fp16"), ("jax", "fp16")}
    assert "not measured: CUDA graphs and FP16 need a GPU" in (out / "referee.md").read_text()


def test_the_idle_reading_says_what_it_read_or_why_it_could_not(tmp_path):
    """The kit's first and last step on this CPU, for real: RAPL where it is readable, else the reason, in the file."""
    done = subprocess.run([sys.executable, "benchmarks/gpu_referee.py", "--idle", "before", "--device", "cpu",
                           "--idle-seconds", "0.3", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads((tmp_path / "idle-before.json").read_text())
    assert found["label"] == "before" and found["where"] == "the CPU"
    if found["idle_w"] is None:  # a VM: no RAPL zone, or one that needs root
        assert found["not_read"] and f"not read ({found['not_read']})" in done.stdout
    else:
        assert found["idle_w"] > 0 and found["seconds"] >= 0.3 and "W over" in done.stdout


def test_the_referee_gives_the_energy_ratio_of_the_same_windows(monkeypatch):
    """With a counter that rises at a constant power, each loop's J/image is that power over its images/s, so the
    energy ratio is the throughput ratio's inverse in every block pair: a ratio from other windows would not be."""
    import time

    referee = _script("gpu_referee")
    watts = 150.0
    counter = lambda: watts * time.perf_counter()  # noqa: E731 - J
    work = lambda n: sum(range(n))  # noqa: E731

    class Runner:  # inferbench's side: a call about twice the bare one's work
        def call(self, prepared):
            return work(40_000)

        def synchronize(self, out):
            return None

    timed = referee.time_row(Runner(), None, lambda: work(20_000), lambda out: None, 4, 3, 0.05, None, counter)
    assert timed["energy"]["pairs"] == 3 and timed["inferbench_j_per_image"] > 0
    # J/image = W / (img/s) for both, so the two ratios multiply to 1 up to the loop's own overhead around its calls
    assert 0.8 < timed["energy"]["ratio"] * timed["throughput"]["ratio"] < 1.25, timed
    assert timed["bare_j_per_image"] == pytest.approx(watts / timed["bare_pipelined_ips"], rel=0.05)


def test_the_idle_reading_on_a_gpu_is_inferbench_s_own_baseline_through_nvml(tmp_path, monkeypatch):
    """The GPU path with NVML stood in for (none here): a counter rising at 61.5 W is read as 61.5 W, settled first."""
    import time
    import types

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    referee, overhead = _script("gpu_referee"), importlib.import_module("harness_overhead")
    monkeypatch.setattr(overhead, "gpu_and_env", lambda device, threads: (H200, {}))

    class NVMLError(Exception):
        pass

    start = time.monotonic()
    nvml = types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=lambda: None,
                                 nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
                                 nvmlDeviceGetTotalEnergyConsumption=lambda h: 61.5e3 * (time.monotonic() - start),
                                 nvmlDeviceGetPowerUsage=lambda h: 61.5e3)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    found = referee.idle("after", "gpu", 0.4, tmp_path)
    assert json.loads((tmp_path / "idle-after.json").read_text()) == found
    assert found["where"] == f"NVIDIA H200 ({H200.uuid})" and found["method"] == "counter"
    assert found["idle_w"] == pytest.approx(61.5, rel=0.02) and found["settle"]["settled"] is True
