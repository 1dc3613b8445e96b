"""The zoo: every registered model through every framework, and its support matrix.

The fast test runs the command on the fake frameworks (the matrix's logic: passed, failed parity, failed,
unsupported, resumable). The slow test runs one model of each family at a small resolution through every
framework whose outcome depends on the model (ZOO_FRAMEWORKS), each pair passing parity or unsupported with a
reason: CI's two families (CI_HALVES) by default, the other ten (ZOO_HALVES) in the opt-in `zoo` layer.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from inferbench import records
from inferbench.registry.frameworks import FRAMEWORKS, unavailable_reason
from inferbench.registry.models import MODELS, get_model
from inferbench.zoo import main as zoo_main

QUICK = ["--duration", "0.05", "--min-iterations", "2", "--warmup", "1", "--threads", "1", "--device", "cpu"]


def _matrix(folder: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (folder / "matrix.csv").open() as fh:
        return {(r["model"], r["framework"]): r for r in csv.DictReader(fh)}


def test_the_zoo_writes_a_matrix_of_every_outcome_and_resumes(fakes, tmp_path, capsys):
    out = tmp_path / "zoo"
    argv = [*QUICK, "--model", "mobilenet_v3_small,resnet5*", "--resolution", "32", "--framework",
            "fake,fake-wrong,fake-crash", "--output-dir", str(out), "--cache-dir", str(tmp_path / "cache"),
            "--name", "z"]
    assert zoo_main(argv) == 1  # a pair failed
    folder = out / "z"
    matrix = _matrix(folder)
    assert {m for m, _ in matrix} == {"mobilenet_v3_small", "resnet50", "resnet50_v2"}  # the pattern, expanded
    assert {f for _, f in matrix} == {"fake", "fake-wrong", "fake-crash"}  # the plan's frameworks
    for model in ("mobilenet_v3_small", "resnet50", "resnet50_v2"):
        assert matrix[(model, "fake")]["status"] == "passed"
        assert float(matrix[(model, "fake")]["max_rel_err"]) < 1e-4
        assert matrix[(model, "fake-wrong")]["status"] == "failed parity"
        assert float(matrix[(model, "fake-wrong")]["max_rel_err"]) > 1e-4
        assert matrix[(model, "fake-crash")]["status"] == "failed"
        assert "crashed while loading" in matrix[(model, "fake-crash")]["reason"]
    text = (folder / "matrix.md").read_text()
    assert "**3 of 9 (model, framework) pairs that ran pass parity**; 3 fail parity, 3 fail to run" in text
    assert "| resnet50_v2 | 32 |" in text and "fake-crash: failed: RuntimeError: the fake framework crashed" in text
    # one framework loaded at a time: every cell is its own group
    recs = records.iter_records(folder)[0]
    assert len({r["timing"]["group"] for r in recs if r["status"] == "ok"}) == 6
    # resumable like a sweep: nothing runs again, the matrix is written again, with the export times it had
    # even when the artifact cache is gone (a full matrix's cache held 51 GB here)
    assert matrix[("resnet50", "fake")]["export_s"] != ""  # measured (the fakes take no time: 0.0)
    shutil.rmtree(tmp_path / "cache")
    (folder / "matrix.md").unlink()
    capsys.readouterr()
    assert zoo_main(["--resume", str(folder)]) == 1
    assert (folder / "matrix.md").read_text() == text and "support matrix" in capsys.readouterr().out
    assert len(records.iter_records(folder)[0]) == 9
    # a report of the zoo ranks nothing from its one round a cell (the zoo itself says it is for orientation), and
    # takes its exports.json for what it is, never "not an inferbench record"
    from inferbench.report import main as report_main

    assert (folder / "exports.json").exists() and report_main([str(folder), "--out", str(tmp_path / "r")]) == 0
    answer = json.loads((tmp_path / "r" / "recommendation.json").read_text())["recommendations"]
    assert answer and all(r["recommended"] is None for r in answer), answer
    assert all("timed in 1 round(s)" in str(r["not_ranked"]) for r in answer)
    assert "not an inferbench record" not in capsys.readouterr().err


def test_the_zoo_takes_one_resolution_and_one_batch_size(tmp_path, capsys):
    for flags in (["--resolution", "96,128"], ["--batch-size", "1,8"]):
        assert zoo_main([*flags, "--output-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "the zoo takes one" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_unsupported_pairs_say_why():
    """The matrix's reasons come from the registry: no torchvision twin, no weight port."""
    from inferbench.base.device import Device
    from inferbench.execution.plan import Plan
    from inferbench.spec import CellKey, RunConfig, RunnerOptions, TimingConfig
    from inferbench.zoo import matrix_rows

    config = RunConfig("random", 0, Device("cpu"), 1, TimingConfig(), RunnerOptions(), "")
    plan = Plan(config, (CellKey("xception", 71, 1, "tf"), CellKey("vgg16", 32, 1, "tf"),
                         CellKey("densenet121", 32, 1, "tf")), {"frameworks": ["all"]})
    rows = {(r["model"], r["framework"]): r for r in matrix_rows(plan, [])}
    assert rows[("xception", "torch-native")]["status"] == "unsupported"
    assert rows[("xception", "torch-native")]["reason"] == "torchvision has no implementation of xception"
    assert "no Keras->torchvision weight port for densenet121" in rows[("densenet121", "torch-inductor")]["reason"]
    reason = rows[("vgg16", "torch-inductor")]["reason"]  # VGG's weights are ported now: nothing but a missing torch
    assert not reason or reason.startswith("torch, torchvision") and "not installed" in reason
    assert rows[("vgg16", "tf")]["status"] in ("not run yet", "not run here")  # planned, no record yet
    assert ("vgg16", "tensorrt-fp32") not in rows  # a GPU framework is no column of a CPU matrix


#: One model of each family, each at the smallest resolution it takes (32 px; Inception 75, Xception 71). The
#: MobileNets run in test_real_frameworks.py (MobileNetV3-Small, every CPU framework).
FAMILIES = ["convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_b0", "inception_v3", "nasnet_mobile",
            "regnety_002", "resnet50", "resnet50_v2", "vgg16", "xception", "vit_b_16"]
#: What CI runs (README's test command): the two families whose conversions broke before and that nothing else in
#: CI converts, one in each half (2-core Xeon, 2026-11-27). ViT: attention (einsum), LayerNorm and exact GELU, the
#: transformer family; EfficientNet: the Normalization constants as extra ONNX inputs, squeeze-excitation and swish,
#: its torchvision twin verified. ConvNeXt (SAME padding at 32 px for onnx2torch: test_same_padding_is_made_explicit_
#: for_onnx2torch) and RegNetY (grouped convolutions, counted in test_models.py's
#: test_grouped_convolutions_are_counted_in_the_model_stats) joined the other eight in the opt-in `zoo` layer
#: (`python -m pytest -m zoo`: before a release and with every change to an exporter or a weight port) when the suite
#: had to fit CI on a busy runner; every one of the 66 models is in the committed zoo
#: (benchmark_results/zoo/matrix-cpu-2core, test_report_on_the_committed_zoo_sweep): one model costs 100-230 s of
#: exports on one core, twelve were 23 of CI's 31 minutes.
CI_HALVES = {"a": ["vit_b_16"], "b": ["efficientnet_b0"]}
ZOO_HALVES = {"a": ["nasnet_mobile", "efficientnet_v2_b0", "resnet50", "inception_v3", "regnety_002"],
              "b": ["densenet121", "vgg16", "resnet50_v2", "xception", "convnext_tiny"]}
#: The frameworks whose outcome depends on the model: each reads an artifact of its own (the SavedModel through XLA,
#: the ONNX file, OpenVINO's conversion, onnx2torch's conversion, the weights ported to the torchvision twin). The
#: .keras file is loaded and run by every model's reference export, and its graph compiled by XLA in tfxla, so
#: kerasxla adds no model-dependent step; keras-eager, keras and tf call the same .keras file and SavedModel
#: otherwise, and torch-inductor compiles the same twin as torch-native: every framework runs on every path in
#: test_real_frameworks (MobileNetV3-Small) and in the committed zoo of all 66 models (benchmark_results/zoo-*,
#: test_report_on_the_committed_zoo_sweep).
ZOO_FRAMEWORKS = ["tfxla", "onnxrt", "openvino", "torch", "torch-native"]


def test_every_family_has_a_representative():
    assert {MODELS[m].family for m in FAMILIES} | {"mobilenet"} == {s.family for s in MODELS.values()}
    assert sorted(sum([*CI_HALVES.values(), *ZOO_HALVES.values()], [])) == sorted(FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("halves", [CI_HALVES, pytest.param(ZOO_HALVES, marks=pytest.mark.zoo)], ids=["ci", "zoo"])
def test_one_model_of_each_family_passes_parity_on_every_cpu_framework(halves, tmp_path, shared_cache):
    """The zoo: every (model, framework) pair of ZOO_FRAMEWORKS passes parity or is unsupported for a named reason,
    CI's two families in the `ci` case, the other ten in the opt-in `zoo` case. The
    EfficientNet/EfficientNetV2 exports (Normalization constants as extra ONNX inputs), ConvNeXt's and
    RegNet's grouped convolutions, ConvNeXt's and ViT's exact GELU and ConvNeXt's SAME padding at 32 px
    (onnx2torch) failed on onnxrt and torch before; VGG16's reference was degenerate. Two halves run side by
    side (one thread each: the CI machine has two cores; nothing is compared across cells here)."""
    import subprocess
    import sys

    out = tmp_path / "zoo"
    cpu = [k for k in ZOO_FRAMEWORKS if unavailable_reason(FRAMEWORKS[k], "cpu") is None]
    argv = [*QUICK, "--resolution", "min", "--framework", ",".join(cpu), "--output-dir", str(out), "--cache-dir",
            str(shared_cache), "-q"]
    other = subprocess.Popen([sys.executable, "-m", "inferbench.zoo", *argv, "--model", ",".join(halves["a"]),
                              "--name", "a"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        code_b = zoo_main([*argv, "--model", ",".join(halves["b"]), "--name", "b"])
        _, err_a = other.communicate(timeout=3600)
    finally:
        other.kill()
    matrix = {**_matrix(out / "a"), **_matrix(out / "b")}
    assert {f for _, f in matrix} == set(cpu) >= {"tfxla", "onnxrt", "openvino"}  # only torch's may be missing
    for model in halves["a"] + halves["b"]:
        for framework in cpu:
            row = matrix[(model, framework)]
            expected = FRAMEWORKS[framework].unsupported(get_model(model))
            if expected:
                assert row["status"] == "unsupported" and row["reason"] == expected, row
            elif FRAMEWORKS[framework].verified(model):
                assert row["status"] == "passed", row
                assert float(row["max_rel_err"]) < 1e-3
            else:  # a torchvision twin on its own weights: ran, finite and non-degenerate
                assert row["status"] == "unverified", row
    assert (code_b, other.returncode) == (0, 0), err_a[-2000:]
    recs = {(r["model"], r["framework"]): r for half in "ab" for r in records.iter_records(out / half)[0]}
    if halves is CI_HALVES:
        stats = recs[("vit_b_16", "onnxrt")]["model_stats"]  # FLOPs and parameters, counted, with each record
        assert stats["flops_resolution"] == 32
        assert stats["params"] == 86_567_656 - (197 - 5) * 768  # ViT-B/16 (86.57M) with 2x2 + 1 positions
        assert stats["flops_per_image"] > 2 * (stats["params"] - 769_000) * 5 * 0.9  # ~2 FLOPs per weight per token
    env = recs[(halves["b"][0], "tfxla")]["environment"]
    assert env["peak_fp32"]["gflops"] > 1 and env["peak_fp32"]["threads"] == 1
    assert json.loads((out / "a" / "sweep.json").read_text())["config"]["sequential"] is True


@pytest.mark.slow
def test_same_padding_is_made_explicit_for_onnx2torch():
    """TensorFlow's SAME puts the extra pixel at the end (SAME_UPPER): a 3x3 stride-2 convolution of an 8x8 input
    pads 0 before and 1 after; ONNX Runtime agrees with the rewritten graph."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from inferbench.exporters.torch import explicit_same_padding

    w = np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2], kernel_shape=[3, 3])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 4, 4])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    before = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert explicit_same_padding(model) == 1
    attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
    assert "auto_pad" not in attrs and attrs["pads"] == [0, 0, 1, 1]
    onnx.checker.check_model(model)
    np.testing.assert_allclose(ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0], before,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # tf2onnx: a real framework, which the lean fast layer does not install
def test_the_onnx_converter_frees_each_replaced_graph_before_copying_the_next():
    """tf2onnx's optimiser deep-copies the graph before each pass; a graph it replaced (nodes and graph refer to
    each other) used to wait for the cycle collector while the copies piled up (RegNetY-32GF's export was killed
    at 24 GB). Within the export's context the replaced graph is gone before the next copy is made."""
    import gc
    import weakref

    import tf2onnx.optimizer as optimizer

    from inferbench.exporters.onnx import optimiser_garbage_collected

    class Graph:  # a cycle holding weights, as tf2onnx's Graph and its nodes are
        def __init__(self) -> None:
            self.weights = np.zeros(1000)
            self.me = self

    original = optimizer.copy
    gc.disable()  # as between two automatic collections
    try:
        with optimiser_garbage_collected():
            graph = Graph()
            replaced = weakref.ref(graph)
            graph = optimizer.copy.deepcopy(graph)  # the pass's result replaces the graph
            assert replaced() is not None  # not freed by reference counting: a cycle
            graph = optimizer.copy.deepcopy(graph)  # the next pass's copy collects it first
            assert replaced() is None and graph.weights.shape == (1000,) and graph.me is graph
        assert optimizer.copy is original
    finally:
        gc.enable()


def test_an_onnx_conversion_too_big_for_this_machine_is_refused_before_it_starts(tmp_path, monkeypatch):
    """ConvNeXt-XLarge's conversion went past 22 GB on this 24 GB machine and was killed; it is refused before
    it starts, in one line, and the matrix shows its pairs as too big here, not as failures."""
    from inferbench.base import machine
    from inferbench.base.errors import TooBig
    from inferbench.execution.worker import failure
    from inferbench.exporters import cache as artifact_cache
    from inferbench.exporters.onnx import memory_refusal
    from inferbench.registry.artifacts import ExportContext
    from inferbench.zoo import _outcome

    ctx = ExportContext(folder=tmp_path, model="convnext_xlarge", resolution=128, weights="random", seed=0)
    assert memory_refusal(ctx) is None  # no Keras export yet: the size is unknown, nothing is refused
    artifact_cache.record(tmp_path, "keras", {"model_stats": {"params": 350_196_968}}, {})
    monkeypatch.setattr(machine, "memory_total_gb", lambda field="MemTotal": 23.0)
    why = memory_refusal(ctx)
    assert why.startswith("not run: the ONNX conversion") and "about 29 GB for 1.3 GB of weights" in why
    monkeypatch.setattr(machine, "memory_total_gb", lambda field="MemTotal": 64.0)
    assert memory_refusal(ctx) is None  # a bigger machine runs it
    res = failure(TooBig(why))
    assert res.error == why and not res.died  # refused, not killed: never retried on its own
    record = {"status": "error", "error": f"export of onnx failed: {why}", "parity": {"status": "not_run"}}
    assert _outcome(record)["status"] == "too big here"
    assert _outcome({**record, "error": "RuntimeError: boom"})["status"] == "failed"


def test_the_committed_support_matrix_covers_every_registered_model():
    """The committed matrix (benchmark_results/zoo/matrix-cpu-2core) has a row for every registered model: a model
    added to the registry joins it (vgg16_bn had been left out)."""
    import csv
    from pathlib import Path

    from inferbench.registry.models import MODELS

    path = Path(__file__).resolve().parents[1] / "benchmark_results" / "zoo" / "matrix-cpu-2core" / "matrix.csv"
    with path.open() as fh:
        models = {row["model"] for row in csv.DictReader(fh)}
    assert set(MODELS) <= models, sorted(set(MODELS) - models)
