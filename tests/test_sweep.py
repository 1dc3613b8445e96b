"""Sweeps: a grid of isolated cells that survives a kill and resumes with nothing lost or repeated."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferbench import results
from inferbench.sweep import build_parser, main, make_plan

GRID = ["--models", "mobilenet_v3_small", "--resolutions", "96", "--batch-sizes", "1,2,3",
        "--frameworks", "onnxrt,torch", "--duration", "0.3", "--min-iterations", "5", "--warmup", "1",
        "--warmup-seconds", "0", "--threads", "2"]


def _records(folder):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.glob("*.json") if p.name != "sweep.json"}


def _workers_of(parent: int) -> list[int]:
    """Live processes started by inferbench for the parent process ``parent``."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if f"INFERBENCH_PARENT_PID={parent}\0".encode() in env.read_bytes() + b"\0":
                stat = (env.parent / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":  # zombies are dead already
                    found.append(int(env.parent.name))
    return found


def test_killed_sweep_resumes_without_loss_or_repeat(tmp_path, shared_cache):
    sweep_dir = tmp_path / "s1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "inferbench.sweep", *GRID, "--output-dir", str(tmp_path), "--name", "s1",
         "--cache-dir", str(shared_cache)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while len(_records(sweep_dir)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the cell it was running, mid-flight
    proc.wait()
    before = _records(sweep_dir)
    assert 2 <= len(before) < 6, "the kill should land mid-sweep"

    assert main(["--resume", str(sweep_dir), "--cache-dir", str(shared_cache)]) == 0
    after = _records(sweep_dir)
    assert len(after) == 6
    for name, stamp in before.items():
        assert after[name] == stamp, f"{name} was rerun"
    assert not [p for p in sweep_dir.iterdir() if p.name.endswith(".tmp")]
    df = results.load(sweep_dir)
    assert len(df) == 6
    assert not df.duplicated(["model", "resolution", "batch_size", "framework"]).any()
    assert (df["status"] == "ok").all() and set(df["parity.status"]) == {"passed"}
    assert len((sweep_dir / "summary.csv").read_text().splitlines()) == 7

    # resuming a finished sweep runs nothing
    assert main(["--resume", str(sweep_dir), "--cache-dir", str(shared_cache)]) == 0
    assert _records(sweep_dir) == after


def test_a_killed_sweep_takes_its_worker_with_it(tmp_path, shared_cache):
    """Killing only the sweep's process (not its group) must not leave a worker measuring on."""
    long_cell = [*GRID[:4], "--batch-sizes", "1", "--frameworks", "onnxrt", "--duration", "120",
                 "--threads", "1", "--warmup", "0", "--warmup-seconds", "0"]
    log = tmp_path / "progress.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "inferbench.sweep", *long_cell, "--output-dir", str(tmp_path), "--name", "k",
         "--cache-dir", str(shared_cache)],
        stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600  # the export, if the shared cache is still cold
        while "measuring" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "measuring" in log.read_text() and _workers_of(proc.pid), "no worker reached its timed window"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while _workers_of(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _workers_of(proc.pid), "the worker outlived the killed sweep"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_config_file_and_plan(tmp_path, capsys):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('models = ["mobilenet_v3_small", "resnet50"]\nresolutions = [64, "default"]\n'
                   'batch_sizes = [1, 4]\nframeworks = "onnxrt"\n')
    plan = make_plan(build_parser().parse_args(["--config", str(cfg), "--frameworks", "tf,onnxrt"]))
    assert plan["grid"]["frameworks"] == ["tf", "onnxrt"]  # the command line wins
    assert len(plan["cells"]) == 2 * 2 * 2 * 2
    assert {(c["model"], c["resolution"]) for c in plan["cells"]} == {
        ("mobilenet_v3_small", 64), ("mobilenet_v3_small", 224), ("resnet50", 64), ("resnet50", 224)}


@pytest.mark.parametrize("content,message", [
    ('models = ["nope"]\n', "valid models"),
    ('colour = "blue"\n', "unknown key"),
    ('batch_sizes = [0]\n', "positive"),
    ('models = [\n', "cannot parse"),
    ('batch_sizes = ["a"]\n', "batch_sizes: not a comma list of integers"),
    ('batch_sizes = [1.5]\n', "batch_sizes: not a comma list of integers"),
    ('seed = "x"\n', "seed: must be a non-negative integer"),
    ('timeout = "soon"\n', "timeout: not a number"),
    ('timeout = 0\n', "timeout: must be > 0"),
    ('threads = -2\n', "threads: must be a positive integer"),
    ('duration = -1\n', "duration: must be >= 0"),
    ('min_iterations = 0\n', "min_iterations: must be a positive integer"),
    ('warmup = -1\n', "warmup: must be a non-negative integer"),
    ('device = "tpu"\n', "device must be one of cpu, gpu, auto"),
    ('include_transfer = "yes"\n', "include_transfer must be true or false"),
    ('models = []\n', "models is empty"),
    ('frameworks = []\n', "--framework is empty"),
    ('models = ["efficientnet_v2_b0"]\nframeworks = ["torch-native"]\n', "torchvision has no implementation"),
])
def test_bad_configs(tmp_path, capsys, content, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(content)
    assert main(["--config", str(cfg), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.json"))


def test_yaml_and_toml_configs_mean_the_same(tmp_path):
    (tmp_path / "s.yaml").write_text("models: [mobilenet_v3_small]\nbatch_sizes: [1, 4]\nframeworks: onnxrt\n"
                                     "duration: 0.5\n")
    (tmp_path / "s.toml").write_text('models = ["mobilenet_v3_small"]\nbatch_sizes = [1, 4]\nframeworks = "onnxrt"\n'
                                     "duration = 0.5\n")
    plans = [make_plan(build_parser().parse_args(["--config", str(tmp_path / f), "--device", "cpu"]))
             for f in ("s.yaml", "s.toml")]
    assert plans[0] == plans[1] and len(plans[0]["cells"]) == 2
    assert plans[0]["settings"]["timing"]["min_duration_s"] == 0.5


def test_all_leaves_out_what_a_model_lacks(tmp_path):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('models = ["efficientnet_v2_b0", "mobilenet_v2"]\nframeworks = ["all"]\n')
    plan = make_plan(build_parser().parse_args(["--config", str(cfg), "--device", "cpu"]))
    native = {c["model"] for c in plan["cells"] if c["framework"] == "torch-native"}
    assert native == {"mobilenet_v2"}  # torchvision has no EfficientNetV2-B0


def test_an_unwritable_cache_leaves_no_plan_behind(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = ["--models", "mobilenet_v3_small", "--output-dir", str(tmp_path / "out"), "--name", "s"]
    assert main([*args, "--cache-dir", str(blocker / "cache")]) == 2
    assert "cannot write to cache dir" in capsys.readouterr().err
    assert not (tmp_path / "out" / "s" / "sweep.json").exists()


def test_weights_a_model_cannot_load_fail_its_cells_not_the_sweep(tmp_path, capsys):
    """In a single run such weights are bad input (exit 2, nothing written); in a sweep they fail the
    cells of that model, recorded with the reason, and the sweep goes on."""
    from inferbench.run import main as run_main

    bad = tmp_path / "broken.weights.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))  # an HDF5 signature and nothing behind it
    common = ["--weights", str(bad), "--cache-dir", str(tmp_path / "cache")]
    assert run_main(["--model", "mobilenet_v3_small", "--resolution", "96", "--framework", "onnxrt", *common,
                     "--output-dir", str(tmp_path / "run")]) == 2
    assert "cannot load weights" in capsys.readouterr().err
    assert not list((tmp_path / "run").rglob("*.json"))

    assert main(["--models", "mobilenet_v3_small", "--resolutions", "96", "--frameworks", "onnxrt,torch", *common,
                 "--output-dir", str(tmp_path / "out"), "--name", "s"]) == 1
    df = results.load(tmp_path / "out" / "s")
    assert len(df) == 2 and (df["status"] == "failed").all()
    assert df["error"].str.contains("cannot load weights").all()


def test_resume_needs_a_sweep_folder(tmp_path, capsys):
    assert main(["--resume", str(tmp_path)]) == 2
    assert "not a sweep folder" in capsys.readouterr().err
    (tmp_path / "sweep.json").write_text(json.dumps({"cells": []}))
    assert main(["--resume", str(tmp_path), "--models", "resnet50"]) == 2
    assert "drop --models" in capsys.readouterr().err
