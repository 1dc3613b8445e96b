"""The training scenario on fake trainers (tests/fakes_train.py): training parity's verdicts against an
independent optimizer, a wrong learning rate, a dropped gradient, divergence, the memory estimate, bad input; and the
parity rule and the reference optimizer on their own."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_pipeline import QUICK

from inferbench import records
from inferbench.base.machine import memory_total_gb
from inferbench.measure import training
from inferbench.run import main as run_main


def _train(tmp_path, *argv):
    return run_main([*QUICK, "--scenario", "train", "--batch-size", "4", *argv, "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(tmp_path / "cache")])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_training_parity_passes_and_catches_a_wrong_rate_a_dropped_gradient_and_divergence(fakes, tmp_path, capsys,
                                                                                          optimizer):
    """The fake trainers' optimizer is torch's form of SGD and Adam, the reference's Keras' (in NumPy): the right
    trainer passes, one with its learning rate 10% off or its bias's gradient dropped fails, one whose loss turns
    NaN fails its cell at that step; only the right one is recommended."""
    assert _train(tmp_path, "--framework", "fake,fake-lr,fake-dropgrad,fake-diverge", "--optimizer", optimizer) == 1
    df = records.load(tmp_path / "out")
    df = df.set_index(df["framework"].str.split("+").str[0])  # adam's cells are "+adam"
    assert df.loc["fake", "parity.status"] == "passed"
    assert df.loc["fake", "parity.training.update_rel_err"] < 1e-4  # two implementations of one rule
    assert df.loc["fake-lr", "parity.status"] == "failed"
    assert "the weights' change at step 1 off by 0.1 (relative)" in df.loc["fake-lr", "parity.reason"]
    assert df.loc["fake-dropgrad", "parity.status"] == "failed"
    assert "change of dense/bias at step 1 at cosine 0.0000" in df.loc["fake-dropgrad", "parity.reason"]
    assert df.loc["fake-diverge", "status"] == "failed"
    assert df.loc["fake-diverge", "error"] == "Diverged: training diverged: the loss is nan at step 12"
    (folder,) = (tmp_path / "out").iterdir()
    rec = json.loads(next(folder.glob("*_bs4_fake_*train.json")).read_text())
    assert rec["scenario"] == "train" and rec["timing"]["timed_region"] == "step+loss"
    assert rec["training"]["optimizer"] == optimizer and rec["training"]["parity_steps"] == training.PARITY_STEPS
    rate = float(np.load(next((tmp_path / "cache").rglob(f"bs4-{optimizer}-bntrain.npz")))["learning_rate"])
    assert rec["training"]["learning_rate"] == rate <= training.LEARNING_RATES[optimizer]  # the reference's
    assert rec["training"]["steps_timed"] == len(rec["raw_latencies_ms"]) and set(rec["raw_rounds"]) == {0, 1, 2, 3}
    assert rec["throughput_per_s"] > 0 and rec["parity"]["training"]["losses"][0] == pytest.approx(
        rec["parity"]["training"]["reference_loss_step1"])
    out = capsys.readouterr().out
    assert "recommendation (throughput, higher is better; verified cells only):" in out
    assert (": fake, " if optimizer == "sgd" else ": fake+adam, ") in out and "samples/s" in out


def test_the_rule_fails_each_kind_of_wrong_training():
    rng = np.random.default_rng(0)
    grads = {"a": rng.normal(size=(8, 4)), "b": rng.normal(size=4), "bias_before_bn": rng.normal(size=4) * 1e-9}
    update = {k: -1e-3 * g for k, g in grads.items()}
    ref = {"loss": 2.5, "grads": grads, "update": update}

    def verdict(**change):
        ours = {"loss": 2.5, "grads": dict(grads), "update": dict(update), "losses": [2.5, 2.4, 2.3], **change}
        return training.compare(ours, ref)

    assert verdict()["status"] == "passed"
    # Adam turns a no-signal variable's rounding noise into full steps: its change is not compared
    assert verdict(update={**update, "bias_before_bn": rng.normal(size=4) * 1e-3})["status"] == "passed"
    assert verdict(update={k: 1.1 * u for k, u in update.items()})["reason"].startswith("the weights' change ")
    assert "change of b at step 1 at cosine -1.0000" in verdict(update={**update, "b": -update["b"]})["reason"]
    assert "gradient of b" in verdict(grads={**grads, "b": grads["b"] + rng.normal(size=4)})["reason"]
    assert "gradient of a" in verdict(grads={**grads, "a": np.zeros((8, 4))})["reason"]
    assert "loss at step 1" in verdict(loss=2.6)["reason"]
    assert "loss at step 1" in verdict(losses=[2.6, 2.4, 2.3])["reason"]  # the timed step's own first loss
    assert verdict(update={**update, "a": update["a"] * float("nan")})["status"] == "failed"


def test_the_reference_optimizer_is_the_published_update_rule():
    """SGD with momentum and Adam, two steps by hand (Keras' forms: v = m v - lr g; Adam's step size with both
    bias corrections and epsilon added to sqrt(v))."""
    g1, g2 = np.array([0.5, -2.0]), np.array([1.0, 1.0])
    w = {"w": np.array([1.0, 1.0], np.float32)}
    sgd = training.Optimizer("sgd", training.LEARNING_RATES["sgd"])
    sgd.apply(w, {"w": g1})
    sgd.apply(w, {"w": g2})
    lr, m = training.LEARNING_RATES["sgd"], training.MOMENTUM
    v1 = -lr * g1
    assert np.allclose(w["w"], 1.0 + v1 + (m * v1 - lr * g2), rtol=1e-6)
    w = {"w": np.array([1.0, 1.0], np.float32)}
    adam = training.Optimizer("adam", training.LEARNING_RATES["adam"])
    adam.apply(w, {"w": g1})
    b2, eps, lr = training.ADAM["beta_2"], training.ADAM["epsilon"], training.LEARNING_RATES["adam"]
    # step 1: m = (1 - b1) g, v = (1 - b2) g^2, step size lr sqrt(1 - b2) / (1 - b1)
    expected = 1.0 - lr * math.sqrt(1 - b2) * g1 / (np.sqrt((1 - b2) * g1 * g1) + eps)
    assert np.allclose(w["w"], expected, rtol=1e-6)
    assert np.allclose(np.abs(w["w"] - 1.0), lr, rtol=1e-3)  # Adam's first step: lr per weight, whatever |g|


def test_the_learning_rate_is_lowered_for_the_kernel_a_step_would_throw_furthest():
    """A kernel whose gradient is 10^4 times its weights (VGG's first convolution under ±150 inputs, before the
    fix) would leave the default rate's step 1 at 10x its own norm: the rate comes down until that kernel moves by
    STEP_CAP of its norm, and biases (which may start at zero) never decide it."""
    rng = np.random.default_rng(1)
    w = {"k1": rng.normal(size=(3, 3, 3, 8)) * 1e-2, "k2": rng.normal(size=(8, 4)), "bias": np.zeros(4)}
    g = {"k1": w["k1"] * 1e4, "k2": w["k2"] * 1e-2, "bias": rng.normal(size=4)}
    lr = training.learning_rate("sgd", w, g)
    assert lr == pytest.approx(training.STEP_CAP * 1e-4)
    assert max(lr * np.linalg.norm(g[k]) / np.linalg.norm(w[k]) for k in ("k1", "k2")) == pytest.approx(
        training.STEP_CAP)
    tame = {"k1": w["k1"] * 1e-2, "k2": w["k2"] * 1e-2, "bias": g["bias"] * 1e6}
    assert training.learning_rate("sgd", w, tame) == training.LEARNING_RATES["sgd"]  # nothing to lower
    # Adam's first step moves each weight by about lr: a kernel of tiny weights lowers it
    lr = training.learning_rate("adam", {**w, "k1": w["k1"] * 1e-3}, g)
    assert lr == pytest.approx(training.STEP_CAP * np.linalg.norm(w["k1"] * 1e-3) / np.sqrt(w["k1"].size))


def _memory(monkeypatch, params=0, activations=0):
    stats = {"params": int(params), "flops_per_image": None, "flops_method": "fake",
             "activations_per_image": int(activations)}
    monkeypatch.setenv("FAKE_MODEL_STATS", json.dumps(stats))


def test_a_batch_the_memory_cannot_hold_is_refused_with_the_batch_size_that_fits(fakes, tmp_path, capsys, monkeypatch):
    available = memory_total_gb("MemAvailable")
    # activations that make batch 64 need twice what is available, batch 4 a tenth of it
    per_image = available / 32 / 3 * 2**30 / 4
    _memory(monkeypatch, params=1e6, activations=per_image)
    assert _train(tmp_path, "--framework", "fake", "--batch-size", "64", "--processes", "1") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the exports' progress: the sizes come from them
    assert err.startswith("inferbench.run: error: training 64 images a step would hold about ")
    said = float(err.split("would hold about ", 1)[1].split()[0])
    assert 1.5 * available < said < 2.5 * available  # twice what was available (other work moves it a little)
    advice = int(err.rsplit("--batch-size ", 1)[1].split()[0])
    assert 1 <= advice < 64 and not any((tmp_path / "out").glob("*/*.json"))
    assert _train(tmp_path, "--framework", "fake", "--batch-size", str(advice), "--processes", "1") == 0


def test_a_group_too_big_to_hold_side_by_side_runs_one_cell_at_a_time(fakes, tmp_path, capsys, monkeypatch):
    available = memory_total_gb("MemAvailable")
    copies = 3 + 1 + 1  # an inference worker's weights, the gradients, SGD's momentum
    weights_gb = (0.35 * available - 1.0) / copies  # two workers: 70% of what is available; four: 140%
    _memory(monkeypatch, params=weights_gb * 2**30 / 4)
    assert _train(tmp_path, "--framework", "fake,fake-lr") == 1  # fake-lr: parity
    assert "one cell at a time" in capsys.readouterr().err
    recs = records.iter_records(tmp_path / "out")[0]
    assert {r["timing"]["alone"] for r in recs} == {"memory"} and {r["timing"]["group_cells"] for r in recs} == {1}


@pytest.mark.parametrize("argv, message", [
    (["--optimizer", "adam"], "--optimizer applies to --scenario train, not inference"),
    (["--scenario", "server", "--bn-mode", "frozen"], "--bn-mode applies to --scenario train, not server"),
    (["--scenario", "train", "--framework", "onnxrt"], "onnxrt: onnxrt is run here as an inference runtime; the "
                                                       "frameworks that train: keras-eager, keras, kerasxla, tf"),
    (["--scenario", "train", "--precision", "bf16"], "--scenario train runs in fp32 here"),
    (["--scenario", "train", "--fused-batch-norm", "--keras-backend", "torch"], "--fused-batch-norm is TensorFlow's"),
    (["--scenario", "train", "--framework", "tf", "--channels-first", "--device", "cpu"],
     "tf: TensorFlow has no NCHW (channels-first) convolutions on a CPU"),
    (["--scenario", "train", "--tune", "on"], "--tune applies to the inference scenario: training has no tuning"),
    (["--scenario", "train", "--include-transfer"], "--include-transfer applies to inference, not to --scenario train"),
    (["--scenario", "train", "--framework", "keras", "--optimizer", "rmsprop"], "argument --optimizer: invalid choice"),
])
def test_bad_training_options_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    assert run_main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and len(err) == 1 and not (tmp_path / "out").exists()


def test_the_reference_steps_refuse_a_batch_the_memory_cannot_hold_before_a_step(tmp_path):
    """--scenario train --batch-size 65536 passed the input-size check and the reference export grew past 9.3 GB
    before the cells' own memory check could run: the train-reference export checks first, from the Keras export's
    model size, and refuses in one line with the batch size to try (bad input: UsageError, exit 2 in a run)."""
    from inferbench.base.errors import UsageError
    from inferbench.exporters import cache
    from inferbench.exporters.train_reference import export, refuse_what_memory_cannot_hold
    from inferbench.registry.artifacts import ExportContext

    available = memory_total_gb("MemAvailable")
    per_image = available / 32 / 3 * 2**30 / 4  # batch 64 needs twice what is available, batch 4 a tenth of it
    stats = {"params": 1_000_000, "flops_per_image": None, "flops_method": "fake",
             "activations_per_image": int(per_image)}
    cache.record(tmp_path, "keras", {"model_stats": stats, "files": {}}, {"model": "vgg16_bn"})

    def ctx(batch_sizes):
        return ExportContext(folder=tmp_path, model="vgg16_bn", resolution=32, weights="random", seed=0,
                             batch_sizes=batch_sizes, variants=("sgd-bntrain",))

    with pytest.raises(UsageError) as refused:
        export(ctx((4, 65536)))
    message = str(refused.value)
    assert message.startswith("the reference training steps: training 65536 images a step would hold about")
    advice = int(message.rsplit("--batch-size ", 1)[1].split()[0])
    assert 1 <= advice <= 32 and "\n" not in message
    assert not (tmp_path / "train-reference").exists()  # refused before anything was made
    refuse_what_memory_cannot_hold(ctx((advice,)))  # the batch size it names fits
