"""Sweeps: grids from flags and config files, checked by the same rules as the flags.
(Kills, resume and hand-edited plans are tested on fake runners in test_pipeline.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferbench import records
from inferbench.cli.options import given
from inferbench.sweep import build_parser, main, make_plan


def _plan(*argv):
    return make_plan(given(build_parser().parse_args(list(argv))))[0]


def test_config_file_and_plan(tmp_path, capsys):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('models = ["mobilenet_v3_small", "resnet50"]\nresolutions = [64, "default"]\n'
                   'batch_sizes = [1, 4]\nframeworks = "onnxrt"\n')
    plan = _plan("--config", str(cfg), "--frameworks", "tf,onnxrt", "--device", "cpu")
    assert plan.grid["frameworks"] == ["tf", "onnxrt"]  # the command line wins
    assert len(plan.cells) == 2 * 2 * 2 * 2
    assert {(c.model, c.resolution) for c in plan.cells} == {
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
    ('duration = inf\n', "duration: must be a finite number"),
    ('min_iterations = 0\n', "min_iterations: must be a positive integer"),
    ('warmup = -1\n', "warmup: must be a non-negative integer"),
    ('device = "tpu"\n', "device must be one of cpu, gpu, auto"),
    ('include_transfer = "yes"\n', "include_transfer must be true or false"),
    ('models = []\n', "models is empty"),
    ('frameworks = []\n', "--framework is empty"),
    ('models = ["efficientnet_v2_b0"]\nframeworks = ["torch-native"]\n', "torchvision has no implementation"),
    ('duration = 1e308\n', "duration: must be at most 86400"),
    ('seed = 1180591620717411303424\n', "seed: must be at most 4294967295"),
    ('frameworks = ["onnxrt", "tf"]\nresolutions = [' + ",".join(str(r) for r in range(32, 1100, 8)) + ']\n'
     'batch_sizes = [1, 2, 3, 4, 5, 6, 7, 8, 9]\n', "this grid has 2,412 cells (more than 2000), about"),
    (b'models = ["mobilenet_v3_small"]\n# caf\xe9 in Latin-1\n', "is not UTF-8 text (byte 37: b'\\xe9')"),
    ('models = ["' + "n" * 100_000 + '"]\n', "unknown model 'nnnn"),
    ('models = ["' + "n" * 300 + '.onnx"]\n', "File name too long"),
])
def test_bad_configs(tmp_path, capsys, content, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["--config", str(cfg), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written, not even an empty folder


def test_yaml_and_toml_configs_mean_the_same(tmp_path):
    (tmp_path / "s.yaml").write_text("models: [mobilenet_v3_small]\nbatch_sizes: [1, 4]\nframeworks: onnxrt\n"
                                     "duration: 0.5\n")
    (tmp_path / "s.toml").write_text('models = ["mobilenet_v3_small"]\nbatch_sizes = [1, 4]\nframeworks = "onnxrt"\n'
                                     "duration = 0.5\n")
    plans = [_plan("--config", str(tmp_path / f), "--device", "cpu") for f in ("s.yaml", "s.toml")]
    assert plans[0] == plans[1] and len(plans[0].cells) == 2
    assert plans[0].config.timing.min_duration_s == 0.5


def test_all_leaves_out_what_a_model_lacks(tmp_path, monkeypatch):
    from inferbench.registry import frameworks

    monkeypatch.setattr(frameworks, "missing_packages", lambda fw, *a, **k: [])  # as if everything were installed
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('models = ["efficientnet_v2_b0", "mobilenet_v2"]\nframeworks = ["all"]\n')
    plan = _plan("--config", str(cfg), "--device", "cpu")
    native = {c.model for c in plan.cells if c.framework == "torch-native"}
    assert native == {"mobilenet_v2"}  # torchvision has no EfficientNetV2-B0


def test_an_unwritable_cache_leaves_no_plan_behind(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = ["--models", "mobilenet_v3_small", "--frameworks", "onnxrt", "--output-dir", str(tmp_path / "out"),
            "--name", "s"]
    assert main([*args, "--cache-dir", str(blocker / "cache")]) == 2
    assert "cannot write to cache dir" in capsys.readouterr().err
    assert not (tmp_path / "out" / "s" / "sweep.json").exists()


@pytest.mark.slow
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
    df = records.load(tmp_path / "out" / "s")
    assert len(df) == 2 and (df["status"] == "failed").all()
    assert df["error"].str.contains("cannot load weights").all()


def test_a_sweep_name_never_leaves_the_output_folder(tmp_path, capsys):
    for name in ("../../x", "a/b", "..", "-x"):
        assert main([f"--name={name}", "--frameworks", "onnxrt", "--output-dir", str(tmp_path / "out")]) == 2
        assert "--name must be a plain folder name" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "x").exists()


def test_plan_round_trip_and_the_committed_version_1_plan(monkeypatch):
    """The plan is the configuration plus its cells; a saved plan reads back equal, and the committed
    sweep's plan (version 1) is upgraded with the same cells and timing. (A test of the plan, not of this CPU: the
    refusal of a precision the CPU would emulate is tested on given flags in test_machine.py.)"""
    from inferbench.execution import plan as planning
    from inferbench.execution.plan import Plan

    monkeypatch.setattr(planning, "cpu_precision_refusal", lambda precision: None)

    plan = _plan("--models", "mobilenet_v3_small", "--batch-sizes", "1,4", "--frameworks", "onnxrt,torch",
                 "--precisions", "fp32,bf16", "--torch-compile", "--device", "cpu")
    assert Plan.from_json(plan.to_json(), "test") == plan
    assert [(c.framework, c.batch_size, c.precision, c.variant) for c in plan.cells] == [
        ("onnxrt", 1, "fp32", ""), ("torch", 1, "fp32", "compile"), ("torch", 1, "bf16", "compile"),
        ("onnxrt", 4, "fp32", ""), ("torch", 4, "fp32", "compile"), ("torch", 4, "bf16", "compile")]
    # the plan of the CPU sweep committed on 2026-11-24 (replaced by a re-run with rounds; its records were named
    # by these cells, so nothing would rerun)
    committed = Path(__file__).resolve().parent / "fixtures" / "plan_v1.json"
    old = Plan.from_json(committed.read_text(), str(committed))
    assert len(old.cells) == 144 and old.config.timing.min_duration_s == 2.0 and old.config.threads == 2
    names = {c.filename for c in old.cells}
    assert "mobilenet_v2_160_bs1_onnxrt.json" in names and "mobilenet_v3_small_224_bs16_torch-native.json" in names


def test_a_sweep_name_longer_than_the_file_system_takes_is_one_short_line(tmp_path, capsys):
    assert main(["--name", "x" * 300, "--model", "mobilenet_v3_small", "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "is longer than a file name may be (255 bytes)" in err and len(err) < 400
    assert not (tmp_path / "out").exists()
