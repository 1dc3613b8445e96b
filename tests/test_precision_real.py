"""FP16 and BF16 judged by a gate that passes correct exports and fails wrong ones (real Keras exports, real torch):
the seeded weights are conditioned so that rounding does not compound through depth, and each precision's gate is
relative to the model's own error in it, measured at export (inferbench.measure.parity.relative_gate)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inferbench.base.device import Device
from inferbench.execution.childenv import thread_env
from inferbench.execution.exports import ensure_exports
from inferbench.execution.progress import Progress
from inferbench.execution.rounds import measure_group
from inferbench.measure import parity
from inferbench.registry.artifacts import EXPORTERS, agreement_own, agreement_reference
from inferbench.registry.frameworks import FRAMEWORKS
from inferbench.run import main
from inferbench.scenarios.gates import own_rounding
from inferbench.spec import CellJob, CellKey, RunConfig, RunnerOptions, TimingConfig

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parent
QUICK = ["--duration", "0.3", "--min-iterations", "5", "--warmup", "1", "--warmup-seconds", "0", "--threads", "2",
         "--processes", "1", "--rounds", "2"]
#: the default model and the zoo sample the gate is shown on, at the default resolution (ResNet-50 and EfficientNet-B0
#: in the opt-in zoo layer: 3 min of CI's time on a CPU that emulates BF16; benchmarks/reduced_precision.py counts them)
SAMPLE = ["mobilenet_v3_large", "mobilenet_v3_small", pytest.param("resnet50", marks=pytest.mark.zoo),
          pytest.param("efficientnet_b0", marks=pytest.mark.zoo)]
#: fewer than a run's 1,000 (the suite's time): enough for intervals that tell a correct export from a gross defect
AGREEMENT_INPUTS = 128


def exported(model: str, cache_dir: Path, out: Path) -> Path:
    """``model``'s artifacts at 224 px in the shared cache (made by a real run of its FP32 torch twin, which must
    pass parity on the conditioned weights), and their folder."""
    code = main(["--model", model, "--resolution", "224", *QUICK, "--framework", "torch-native",
                 "--output-dir", str(out), "--cache-dir", str(cache_dir)])
    assert code == 0
    (manifest,) = cache_dir.glob(f"{model}_224_*/manifest.json")
    return manifest.parent


def with_agreement(model: str, cache_dir: Path, count: int) -> RunConfig:
    """The run configuration of the cells below, counting agreement over ``count`` inputs, whose FP32 outputs (and the
    model's own agreement in FP16 and BF16) are exported into the cache here, as a run with reduced-precision cells
    exports them."""
    config = RunConfig(weights="random", seed=0, device=Device("cpu"), threads=2,
                       timing=TimingConfig(0, 0.0, 0.0, 3, 2), options=RunnerOptions(), cache_dir=str(cache_dir),
                       agreement_inputs=count)
    quiet = Progress(1, io.StringIO(), heartbeat=False)
    if count:
        _, failed = ensure_exports(config, model, 224, [FRAMEWORKS["torch-native"]], (1,), quiet,
                                   agreement_inputs=count)
        assert not failed, failed
    return config


def job(folder: Path, model: str, precision: str, config: RunConfig) -> CellJob:
    fw = FRAMEWORKS["torch-native"]
    return CellJob(CellKey(model, 224, 1, "torch-native", precision), fw, config, str(folder),
                   str(folder / EXPORTERS[fw.artifact].path), (1,), idle_seconds=2.0)


@pytest.mark.parametrize("model", SAMPLE)
def test_torch_fp16_and_bf16_pass_the_gate_on_the_default_model_and_the_zoo_sample(model, shared_cache, tmp_path):
    """torch-native in FP16 and in BF16 (run on this CPU whatever its flags: the gate is judged, not the speed)
    passes; its gate is relative to the model's own error in that precision, which the export measured."""
    folder = exported(model, shared_cache, tmp_path)
    sensitivity = json.loads((folder / "reference" / "precision_sensitivity.json").read_text())
    assert {"fp16", "bf16"} <= set(sensitivity) and all("error" not in sensitivity[p] for p in ("fp16", "bf16"))
    assert 0 < sensitivity["fp16"]["max_rel_err"] < sensitivity["bf16"]["max_rel_err"] < 0.5, sensitivity
    # agreement over many inputs is counted on the default model (the suite's time; the benchmark counts the rest)
    config = with_agreement(model, shared_cache, AGREEMENT_INPUTS if model == SAMPLE[0] else 0)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **thread_env(2)}
    said: list[tuple[str, str]] = []
    results = measure_group([job(folder, model, p, config) for p in ("fp16", "bf16")], [env], 0,
                            lambda label, text: said.append((label, text)))
    for precision, res in zip(("fp16", "bf16"), results):
        assert res.ok, res
        check = res.cell.blocks["parity"]
        assert check["status"] == "passed", (model, precision, check["reason"])
        th = check["thresholds"]
        assert th["relative"] and th["precision_sensitivity"] == sensitivity[precision]
        assert res.cell.blocks["runner"]["dtype"] == {"fp16": "float16", "bf16": "bfloat16"}[precision]
        if model != SAMPLE[0]:
            assert "agreement" not in check  # --agreement-inputs 0: not counted
            continue
        # counted once a cell, in its first process; its second takes it (the same export, runtime and inputs)
        label = job(folder, model, precision, config).cell.label
        counting = [lb for lb, text in said if text == f"parity check: agreement over {AGREEMENT_INPUTS} inputs"]
        taken = [lb for lb, text in said if text == "parity check: agreement as the cell's first process counted it"]
        assert counting.count(label) == 1 and f"{label} (process 2)" not in counting, said
        assert taken.count(f"{label} (process 2)") == 1 and res.cell.blocks["timing"]["processes"] == 2, said
        agreement = check["agreement"]  # counted over the agreement inputs, against the model's own in the precision
        assert agreement["status"] == "passed" and agreement["inputs"] == AGREEMENT_INPUTS, agreement
        assert agreement["own"]["method"] == parity.AGREEMENT_METHOD and agreement["own"]["inputs"] == AGREEMENT_INPUTS
        lo, hi = agreement["top1"]["ci95"]
        assert 0.5 < lo <= agreement["top1"]["agreement"] <= hi <= 1.0


def test_wrong_fp16_and_bf16_exports_fail_the_gate(shared_cache, tmp_path):
    """On the default model: correct FP16 and BF16 twins pass; in FP16 the same with one middle layer's weights 1%
    off, with its logits layer computed from inputs scaled by 1e4 (it overflows) or computing another model
    (MobileNetV3-Small) fails; in BF16, whose own rounding is 8x FP16's, that layer 5% off or another model fails (1%
    is within BF16's own rounding of this model: docs/method.md). Each judged exactly as a cell's parity check judges
    it (the folder's own FP32 spread and reduced-precision error). Over the agreement inputs every defect fails the
    agreement gate too and the correct twins pass it; block by block, the overflow is found in the logits layer."""
    large = exported("mobilenet_v3_large", shared_cache, tmp_path / "large")
    small = exported("mobilenet_v3_small", shared_cache, tmp_path / "small")
    with_agreement("mobilenet_v3_large", shared_cache, AGREEMENT_INPUTS)
    reference = np.load(large / "reference" / "logits.npy")
    many = np.load(large / agreement_reference(AGREEMENT_INPUTS))
    own_many = json.loads((large / agreement_own(AGREEMENT_INPUTS)).read_text())
    checks, agreements = {}, {}
    made = [(precision, defect, inputs, tmp_path / f"{precision}-{defect}-{inputs}.npy")
            for precision, defects in (("fp16", ("none", "perturbed:0.01", "wrong-cast", "other-model")),
                                       ("bf16", ("none", "perturbed:0.05", "other-model")))
            for defect in defects for inputs in ("reference", f"agreement:{AGREEMENT_INPUTS}")]
    subprocess.run([sys.executable, str(TESTS / "precision_defects.py"), str(large), str(small),
                    *(f"{defect},{precision},{out},{inputs}" for precision, defect, inputs, out in made)], check=True,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **thread_env(2)})
    for precision, defect, inputs, out in made:
        if inputs == "reference":
            checks[precision, defect] = parity.compare(reference, np.load(out), precision, *own_rounding(large))
        else:
            agreements[precision, defect] = parity.agreement(many, np.load(out), precision, own_many)
    for (_, defect), check in agreements.items():  # over many inputs: every defect fails, a correct export passes
        assert check["status"] == ("passed" if defect == "none" else "failed"), (defect, check)
    # where it went wrong, block by block against the same module in FP64, judged by the cell's own gate: the
    # overflowing logits layer is named; wrong weights or another model are the program itself, no block of its own
    for (precision, defect), check in checks.items():
        blocks = json.loads((tmp_path / f"{precision}-{defect}-reference.npy.blocks.json").read_text())
        assert blocks["names"][0] == "features.0" and blocks["names"][-1] == "classifier"
        found = parity.divergence(blocks, check["thresholds"]["per_image_max_rel_err"])
        assert found["first"] == ("classifier" if defect == "wrong-cast" else None), (precision, defect, found)
    for precision, perturbed in (("fp16", "perturbed:0.01"), ("bf16", "perturbed:0.05")):
        correct, wrong = checks[precision, "none"], checks[precision, perturbed]
        assert correct["status"] == "passed" and correct["thresholds"]["relative"], correct["reason"]
        assert wrong["status"] == "failed" and "per image" in wrong["reason"], wrong["reason"]
        assert wrong["max_rel_err_per_image"] > correct["thresholds"]["per_image_max_rel_err"]
        other = checks[precision, "other-model"]
        assert other["status"] == "failed" and other["cosine"] < 0.9
    assert checks["fp16", "wrong-cast"]["status"] == "failed" and "non-finite" in checks["fp16", "wrong-cast"]["reason"]


def _residual_onnx(scale_block: int | None = None) -> bytes:
    """A small residual network as ONNX (real ONNX Runtime runs it): a stem, five blocks each adding its input to
    a convolution of it, pooling and a classifier; ``scale_block``: that block's convolution 5% off."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    init, nodes = [], [helper.make_node("Conv", ["x", "stem_w"], ["stem"], pads=[1, 1, 1, 1], name="stem/Conv"),
                       helper.make_node("Relu", ["stem"], ["h0"], name="stem/Relu")]
    init.append(numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "stem_w"))
    for b in range(5):
        w = rng.normal(0, 0.1, (8, 8, 3, 3)).astype(np.float32) * (1.05 if b == scale_block else 1.0)
        init.append(numpy_helper.from_array(w, f"w{b}"))
        nodes += [helper.make_node("Conv", [f"h{b}", f"w{b}"], [f"c{b}"], pads=[1, 1, 1, 1], name=f"block_{b}/Conv"),
                  helper.make_node("Relu", [f"c{b}"], [f"r{b}"], name=f"block_{b}/Relu"),
                  helper.make_node("Add", [f"h{b}", f"r{b}"], [f"h{b + 1}"], name=f"block_{b}_add/Add")]
    init += [numpy_helper.from_array(rng.normal(0, 0.3, (10, 8)).astype(np.float32), "fc_w"),
             numpy_helper.from_array(np.zeros(10, np.float32), "fc_b")]
    nodes += [helper.make_node("GlobalAveragePool", ["h5"], ["p"], name="head/Pool"),
              helper.make_node("Flatten", ["p"], ["f"], name="head/Flatten"),
              helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1, name="head/Gemm")]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              ["n", 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 10])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_onnx_runtime_names_the_first_block_where_its_program_departs_from_the_onnx_file():
    """ONNX Runtime's blocks (its residual additions) with its graph optimisations, against the same file with none:
    the same program departs nowhere (the program itself is then at fault); a program whose third block is 5% off
    departs first there, and the reason says so."""
    import onnxruntime as ort

    from inferbench.runners.onnxrt import block_errors

    x = np.random.default_rng(1).normal(size=(4, 3, 16, 16)).astype(np.float32)
    same = block_errors(ort, _residual_onnx(), _residual_onnx(), "x", x, ["CPUExecutionProvider"], 1)
    assert same["names"] == ["block_0_add", "block_1_add", "block_2_add", "block_3_add", "block_4_add", "outputs"]
    assert max(same["errors"]) < 1e-5
    assert "no block diverges from the same ONNX program without graph optimisations" in \
        parity.divergence(same, 1e-3)["said"]
    off = block_errors(ort, _residual_onnx(scale_block=2), _residual_onnx(), "x", x, ["CPUExecutionProvider"], 1)
    assert max(off["errors"][:2]) < 1e-5 and min(off["errors"][2:]) > 1e-3
    found = parity.divergence(off, 1e-3)
    assert found["first"] == "block_2_add"
    assert found["said"].startswith("diverges first at block_2_add (relative error ")
    assert found["said"].endswith("against the same ONNX program without graph optimisations, on the CPU in FP32)")


def test_keras_names_the_first_block_that_departs_from_the_same_model_in_fp64():
    """Keras' blocks (its Add layers) as the runner computes them, against the same model rebuilt in FP64: a model
    whose third block's branch overflows FP32 (scaled by 1e20 twice, then back) departs first there; run eagerly and
    compiled, as keras-eager and keras run it."""
    import keras

    from inferbench.runners.keras import KerasEagerRunner, KerasRunner

    def model(overflow: bool):
        inputs = keras.Input((16, 16, 3))
        x = keras.layers.Conv2D(8, 3, padding="same", name="stem")(inputs)
        for b in range(5):
            y = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name=f"block_{b}_conv")(x)
            if overflow and b == 2:
                y = keras.layers.Rescaling(1e20, name="up_1")(y)
                y = keras.layers.Rescaling(1e20, name="up_2")(y)
                y = keras.layers.Rescaling(1e-40, name="down")(y)
            x = keras.layers.Add(name=f"block_{b}_add")([x, y])
        x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
        return keras.Model(inputs, keras.layers.Dense(10, name="logits")(x))

    x = np.random.default_rng(0).uniform(0, 1, (4, 16, 16, 3)).astype(np.float32)
    for cls in (KerasEagerRunner, KerasRunner):
        runner = cls()
        runner.keras = keras
        runner.model = model(False)
        fine = runner.block_errors(x)
        assert fine["names"] == [f"block_{b}_add" for b in range(5)] + ["logits"] and max(fine["errors"]) < 1e-5
        runner.model = model(True)
        found = parity.divergence(runner.block_errors(x), 1e-3)
        assert found["first"] == "block_2_add" and found["said"].endswith("against the same program in FP64)")
