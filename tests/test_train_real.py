"""The training scenario end to end with the real frameworks, on VGG16 at 32 px: every framework that
trains here passes training parity against the Keras reference (TensorFlow's tape, the NumPy update rules), and a
real trainer made wrong on purpose (tests/train_perturbed.py: TensorFlow's learning rate 10% off, torch's first
layer's gradient dropped) fails it. Then batch norm: VGG16-BN frozen, with Adam and TensorFlow's fused kernel; and
Keras on its torch backend. Marked slow (minutes); CI runs it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from inferbench import records
from inferbench.registry import frameworks
from inferbench.registry.frameworks import FRAMEWORKS, unavailable_reason
from inferbench.run import main

pytestmark = pytest.mark.slow
# --quick (one worker process a cell) with a second of timing over three rounds, not its 3 s over six: what these
# tests check is parity and that each trainer runs and is timed, not its speed
QUICK = ["--resolution", "32", "--batch-size", "2", "--quick", "--threads", "2", "--device", "cpu",
         "--min-iterations", "4", "--duration", "1", "--rounds", "3"]
TRAINERS = [k for k, fw in FRAMEWORKS.items() if fw.trainer and unavailable_reason(fw, "cpu") is None]


@pytest.fixture
def perturbed(monkeypatch):
    """tests/train_perturbed.py's trainers as frameworks of their own, for this test and its child processes."""
    from pathlib import Path

    from train_perturbed import PERTURBED

    registry = dict(FRAMEWORKS)
    for key, (base, cls) in PERTURBED.items():
        registry[key] = dataclasses.replace(FRAMEWORKS[base], key=key, trainer=f"train_perturbed:{cls}", best_on=())
    monkeypatch.setattr(frameworks, "FRAMEWORKS", registry)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    return list(PERTURBED)


def _records(out):
    df = records.load(out)
    return df.set_index(df["framework"].str.split("+").str[0])


def test_every_framework_that_trains_here_passes_training_parity_and_wrong_training_fails(
        perturbed, tmp_path, shared_cache, capsys):
    assert {"keras-eager", "keras", "kerasxla", "tf", "tfxla", "torch-native", "torch-inductor"} <= set(TRAINERS)
    code = main(["--scenario", "train", "--model", "vgg16", *QUICK, "--framework", ",".join(TRAINERS + perturbed),
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    df = _records(tmp_path / "out")
    assert code == 1 and set(df.index) == set(TRAINERS + perturbed)  # 1: the perturbed ones fail parity
    for key in TRAINERS:
        row = df.loc[key]
        assert row["status"] == "ok", (key, row["error"])
        assert row["parity.status"] == "passed", (key, row["parity.reason"])
        assert row["throughput"] > 0 and row["training.steps_timed"] >= 4
    assert "the weights' change at step 1 off by 0.1 (relative)" in df.loc["tf-lr", "parity.reason"]
    assert df.loc["torch-native-dropgrad", "parity.status"] == "failed"
    assert "change of net.features.0.weight at step 1 at cosine 0.0000" in \
        df.loc["torch-native-dropgrad", "parity.reason"]
    # margins: the gates are several times the worst real framework's error here
    assert df.loc[TRAINERS, "parity.training.update_rel_err"].max() < 0.02 / 4
    assert df.loc[TRAINERS, "parity.training.update_min_cosine"].min() > 1 - 0.01 / 4
    out = capsys.readouterr().out
    assert "recommendation (throughput, higher is better; verified cells only):" in out


def test_batch_norm_frozen_with_adam_and_the_fused_kernel_and_keras_on_torch(tmp_path, shared_cache):
    code = main(["--scenario", "train", "--model", "vgg16_bn", *QUICK, "--framework", "keras,tf,torch-native",
                 "--bn-mode", "frozen", "--optimizer", "adam", "--fused-batch-norm",
                 "--output-dir", str(tmp_path / "bn"), "--cache-dir", str(shared_cache)])
    df = _records(tmp_path / "bn")
    assert code == 0, df[["status", "error", "parity.reason"]].to_dict()
    assert set(df["parity.status"]) == {"passed"} and set(df["training.bn_mode"]) == {"frozen"}
    assert df.loc["tf", "training.batch_norm_kernel"] == "tf.fused_batch_norm"
    (folder,) = (tmp_path / "bn").iterdir()
    rec = json.loads(next(folder.glob("*_torch-native_*.json")).read_text())
    assert rec["variant"] == "adam+bn-frozen" and rec["training"]["optimizer"] == "adam"
    code = main(["--scenario", "train", "--model", "vgg16", *QUICK, "--framework", "keras", "--keras-backend",
                 "torch", "--output-dir", str(tmp_path / "torch"), "--cache-dir", str(shared_cache)])
    df = _records(tmp_path / "torch")
    assert code == 0 and df.loc["keras", "parity.status"] == "passed" and df.loc["keras", "runner.keras_backend"] == \
        "torch"
