"""Bring your own model: ``--model PATH`` for a .keras file, a TF SavedModel folder or an .onnx file.

The fast tests read real ONNX files (built with onnx.helper) and check what each format can run and the
one-line refusals; the slow ones run every framework that can take each format end to end.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from detectors import coco_from_detections, nms_onnx, segmenter_onnx, sized_onnx, yolo_layout_onnx

from inferbench import records
from inferbench.base.errors import UsageError
from inferbench.registry import modelfiles, models
from inferbench.registry.frameworks import choose
from inferbench.registry.inputs import make_inputs
from inferbench.registry.modelfiles import open_model_file
from inferbench.registry.models import get_model, register
from inferbench.run import main

QUICK = ["--duration", "0.3", "--rounds", "3", "--processes", "1", "--warmup", "2", "--warmup-seconds", "0",
         "--min-iterations", "3", "-q"]


@pytest.fixture(autouse=True)
def no_files_known(monkeypatch):
    """Each test registers its own model files (a name is taken once per process)."""
    monkeypatch.setattr(models, "_FILES", {})


def onnx_file(path, layout="NCHW", size=32, batch="batch", channels=3):
    """A small real convolutional classifier as an ONNX file: Conv-Relu-GlobalAveragePool-Gemm, 5 outputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    h, w = (size, size) if not isinstance(size, tuple) else size
    dims = [batch, channels, h, w] if layout == "NCHW" else [batch, h, w, channels]
    nodes, first = [], "images"
    if layout == "NHWC":
        nodes.append(helper.make_node("Transpose", ["images"], ["nchw"], perm=[0, 3, 1, 2]))
        first = "nchw"
    nodes += [helper.make_node("Conv", [first, "w", "b"], ["c"], strides=[2, 2]),
              helper.make_node("Relu", ["c"], ["r"]),
              helper.make_node("GlobalAveragePool", ["r"], ["p"]),
              helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"])]
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w", rng.normal(0, 0.05, (8, channels, 3, 3))), ("b", rng.normal(0, 0.1, 8)),
        ("fw", rng.normal(0, 1.0, (8, 5))), ("fb", rng.normal(0, 0.1, 5))]]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("images", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_an_onnx_file_is_read_without_running_it(tmp_path):
    f = open_model_file(str(onnx_file(tmp_path / "my net.onnx")))
    assert (f.format, f.resolution, f.layout, f.batch_size) == ("onnx", 32, "NCHW", None)
    assert re.fullmatch(r"my_net-[0-9a-f]{8}", f.name)  # its stem, and its content's hash
    register(f)
    spec = get_model(f.name)
    nchw, nhwc = make_inputs(spec, 2, 32, 0), make_inputs(get_model("mobilenet_v3_large"), 2, 32, 0)
    assert nchw.shape == (2, 3, 32, 32) and np.array_equal(nchw, nhwc.transpose(0, 3, 1, 2))
    g = open_model_file(str(onnx_file(tmp_path / "fixed.onnx", layout="NHWC", batch=1, size=40)))
    assert (g.layout, g.resolution, g.batch_size) == ("NHWC", 40, 1)


def test_a_model_file_of_another_aspect_runs_at_its_height_and_width(tmp_path):
    """A file fixing 48 x 80 (height x width) runs at "48x80"; one whose sides are dynamic at the --resolution given,
    square or not; the size reaches the inputs (NCHW and NHWC) and every record's file name."""
    f = open_model_file(str(onnx_file(tmp_path / "wide.onnx", size=(48, 80))))
    assert (f.resolution, f.layout) == ("48x80", "NCHW")
    register(f)
    spec = get_model(f.name)
    assert spec.resolution(None) == "48x80" and make_inputs(spec, 2, "48x80", 0).shape == (2, 3, 48, 80)
    assert make_inputs(get_model("mobilenet_v3_large"), 1, "48x80", 0).shape == (1, 48, 80, 3)
    with pytest.raises(UsageError, match=r"takes 48x80 px inputs .*--resolution 80x48 does not apply"):
        spec.resolution("80x48")
    free = str(onnx_file(tmp_path / "free.onnx", size=("h", "w")))
    assert open_model_file(free, resolution="64x96").resolution == "64x96"
    assert open_model_file(free, resolution=64).resolution == 64
    assert open_model_file(free, input_shape="3x40x72").resolution == "40x72"
    half = str(onnx_file(tmp_path / "half.onnx", size=(48, "w")))
    assert open_model_file(half).resolution == 48 and open_model_file(half, resolution="48x96").resolution == "48x96"
    with pytest.raises(UsageError, match=r"takes 48x96 images .*--resolution 64x96 does not apply"):
        open_model_file(half, resolution="64x96")
    from inferbench.spec import CellKey

    assert CellKey(f.name, "48x80", 1, "onnxrt").filename == f"{f.name}_48x80_bs1_onnxrt.json"


def test_what_each_format_runs_and_why_not(tmp_path):
    sm = tmp_path / "sm"
    sm.mkdir()
    (sm / "saved_model.pb").write_bytes(b"")  # recognised by its layout; read only by TensorFlow, in a child
    net, smf = open_model_file(str(onnx_file(tmp_path / "net.onnx"))), open_model_file(str(sm), "48x48x3")
    register(net, smf)
    chosen, skipped = choose(["all"], "cpu", get_model(net.name))
    assert {fw.key for fw in chosen} <= {"onnxrt", "openvino", "torch"}
    assert "is an .onnx file" in skipped["tf"] and "is an .onnx file" in skipped["keras"]
    assert "is a model file" in skipped["torch-native"]
    # OpenVINO reads the file itself: its other route, from an ONNX export, is that same file
    assert skipped["openvino-onnx"] == f"openvino reads the same onnx for {net.name}: there is one route in"
    best, left = choose(["best"], "cpu", get_model(net.name))  # the default set names the runtime it leaves out
    if "torch" in {fw.key for fw in chosen}:  # torch installed (onnx2torch): it runs the file, outside 'best'
        assert "torch" not in {fw.key for fw in best}
        assert left["torch-inductor"].endswith("; this file runs on torch instead: --framework torch (or all)")
    chosen, skipped = choose(["all"], "cpu", get_model(smf.name))
    assert {fw.key for fw in chosen} <= {"tf", "tfxla", "openvino"}
    assert "tf2onnx.convert --saved-model" in skipped["onnxrt"] and "ONNX export" in skipped["torch"]
    assert "ONNX export" in skipped["openvino-onnx"]
    assert get_model(smf.name).source.resolution == 48
    with pytest.raises(UsageError, match=f"needs the Keras model, and {net.name} is an .onnx file"):
        choose(["keras"], "cpu", get_model(net.name))


def run_main(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err


BAD = [
    (["--model", "{tmp}/none.onnx"], "model file {tmp}/none.onnx does not exist"),
    (["--model", "{tmp}"], "is a folder without saved_model.pb: not a TF SavedModel"),
    (["--model", "{tmp}/net.onnx", "--weights", "imagenet"], "a model file brings its own weights"),
    (["--model", "{tmp}/net.onnx", "--resolution", "64"], "takes 32 px inputs (read from {tmp}/net.onnx)"),
    (["--model", "{tmp}/net.onnx", "--resolution", "32x48"], "takes 32 px inputs (read from {tmp}/net.onnx)"),
    (["--resolution", "384x640x3"], "resolution must be pixels a side (224), height x width (384x640)"),
    (["--resolution", "0x640"], "resolution must be pixels a side (224), height x width (384x640)"),
    (["--resolution", "64x9000"], "each side must be at most 4096, got '64x9000'"),
    (["--model", "vit_b_16", "--resolution", "224x320"], "vit_b_16 takes square inputs only"),
    (["--resolution", "16x640"], "resolution 16x640 is too small for mobilenet_v3_large (minimum 32 a side)"),
    (["--postprocess", "inside"], "--postprocess inside: mobilenet_v3_large (classification outputs) has no "
     "post-processing to time; it applies to detection and segmentation models"),
    (["--model", "{tmp}/yolo.onnx", "--task", "detection", "--postprocess", "inside", "--scenario", "train"],
     "--postprocess inside applies to the inference scenario, not --scenario train"),
    (["--model", "{tmp}/net.onnx", "--input-shape", "3x7"], "is not HxWxC, CxHxW or NxHxWxC"),
    (["--model", "{tmp}/net.onnx", "--input-shape", "3x48x48"], "does not match the input ?x3x32x32"),
    (["--model", "{tmp}/gray.onnx"], "inferbench times RGB images"),
    (["--model", "{tmp}/fixed.onnx"], "has its batch size fixed to 1: pass --batch-size 1"),
    (["--model", "{tmp}/net.txt"], "inferbench reads a .keras file, a TF SavedModel folder, an .onnx file"),
    (["--input-shape", "32x32x3"], "--input-shape applies to a model file (--model PATH) only"),
]


def keras_archive(path, config, members=None):
    """A .keras-shaped zip: ``config`` as its config.json (a dict, or raw bytes), plus ``members``."""
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", config if isinstance(config, bytes) else json.dumps(config))
        for name, data in (members or {}).items():
            z.writestr(name, data)
    return path


def odd_onnx(path, kind):
    """ONNX files inferbench must refuse up front (two outputs it now accepts): an int8 input, a custom operator,
    external data read from outside the model's folder."""
    import onnx
    from onnx import TensorProto, helper

    dtype = TensorProto.INT8 if kind == "int8" else TensorProto.FLOAT
    x = helper.make_tensor_value_info("images", dtype, ["batch", 3, 32, 32])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in
            (("logits", "features") if kind == "two-outputs" else ("logits",))]
    domain = {"custom-op": "com.example.custom", "trt-nms": "TRT"}.get(kind, "")
    op = "MagicPool" if kind == "custom-op" else "Identity"
    nms = {"max_output_boxes": 100, "iou_threshold": 0.45, "score_threshold": 0.25, "plugin_version": "1",
           "background_class": -1} if kind.startswith("trt-nms") else {}  # as YOLO's TensorRT exports write it
    nodes = [helper.make_node("EfficientNMS_TRT" if nms else op, ["images"], ["logits"], domain=domain, **nms)]
    if kind == "two-outputs":
        nodes.append(helper.make_node("Identity", ["images"], ["features"]))
    inits = []
    if kind == "external":
        w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
        w.ClearField("float_data")
        w.data_location = TensorProto.EXTERNAL
        w.external_data.add(key="location", value="../../../etc/passwd")
        inits.append(w)
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(helper.make_graph(nodes, kind, [x], outs, inits), opset_imports=opsets)
    onnx.save(model, path)
    return path


BAD += [
    (["--model", "{tmp}/net.onnx", "--task", "detection"], "--model {tmp}/net.onnx: --task detection reads one raw "
     "head of [4 + classes, anchors] an image (YOLOv8's layout), SSD's heads (bbox_regression, cls_logits, anchors, "
     "image_size) or the detections a graph kept (boxes, scores, labels: [cap, 4], [cap], [cap]); this model gives "
     "logits [5] (--task raw compares"),
    (["--model", "{tmp}/yolo.onnx", "--task", "classification"], "--model {tmp}/yolo.onnx: a classifier has one "
     "output of class scores an image; this one gives output0 [7, 84] (--task raw compares them as numbers)"),
    (["--model", "{tmp}/net.onnx", "--task", "segment"], "argument --task: invalid choice: 'segment'"),
    (["--task", "raw"], "--task applies to a model file (--model PATH) only"),
    (["--model", "{tmp}/int8.onnx"], "takes int8 input; inferbench feeds float32 images"),
    (["--model", "{tmp}/custom-op.onnx"], "uses operators outside ONNX's own domains (com.example.custom:MagicPool)"),
    # TensorRT's suppression plugin, in its own domain or in ONNX's: its cap and thresholds said, and why not run
    *((["--model", f"{{tmp}}/{kind}.onnx"], f"{{tmp}}/{kind}.onnx: its graph holds TensorRT's EfficientNMS_TRT plugin "
       "(at most 100 boxes an image, IoU > 0.45, score > 0.25), which only TensorRT runs") for kind in
      ("trt-nms", "trt-nms-plain")),
    (["--model", "{tmp}/external.onnx"], "reads external data from '../../../etc/passwd', outside the model's folder"),
    (["--model", "{tmp}/two-inputs.keras"], "two-inputs.keras has several inputs and no image inputs (float, four "
     "dimensions, 3 channels first or last): inferbench times models with one image input"),
    (["--model", "{tmp}/two-outputs.keras"], "two-outputs.keras: its outputs share names (a, a); inferbench "
     "compares each output by its name"),
    (["--model", "{tmp}/two-heads.keras", "--input-shape", "40x40x3", "--scenario", "train", "--framework", "keras"],
     "keras: training steps a classifier (cross-entropy on its class scores); two-heads-"),
    (["--model", "{tmp}/list.keras"], "its config.json is not a Keras model's configuration"),
    (["--model", "{tmp}/string-config.keras"], "its config.json is not a Keras model's configuration"),
    (["--model", "{tmp}/deep.keras"], "its config.json cannot be read (RecursionError"),
    (["--model", "{tmp}/no-config.keras"], "has no config.json: not a .keras archive"),
    # a graph ending in its own suppression whose output's size depends on each image: said what and why, not a
    # reshape's error at export
    (["--model", "{tmp}/nms-indices.onnx"], "{tmp}/nms-indices.onnx: its graph holds its own NonMaxSuppression (at "
     "most 20 boxes a class, IoU > 0.5, score > 0.2), and output selected [boxes, 3] is not one row an image"),
    # a side input whose name does not say what it holds is never guessed
    (["--model", "{tmp}/masked.onnx"], "{tmp}/masked.onnx: input valid_mask [?, 2] int64 is not the image, and "
     "inferbench fills a side input only where its name and shape say what it holds"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_model_files_are_one_line(capsys, tmp_path, argv, message):
    for kind in ("two-outputs", "int8", "custom-op", "trt-nms", "trt-nms-plain", "external"):
        odd_onnx(tmp_path / f"{kind}.onnx", kind)
    functional = {"class_name": "Functional", "config": {"layers": [], "input_layers": ["x", 0, 0],
                                                          "output_layers": ["y", 0, 0]}}
    two_in = {**functional, "config": {**functional["config"], "input_layers": [["a", 0, 0], ["b", 0, 0]]}}
    two_out = {**functional, "config": {**functional["config"], "output_layers": [["a", 0, 0], ["a", 0, 1]]}}
    two_heads = {**functional, "config": {**functional["config"], "output_layers": [["a", 0, 0], ["b", 0, 0]]}}
    for name, config in (("two-inputs", two_in), ("two-outputs", two_out), ("two-heads", two_heads), ("list", [1, 2]),
                         ("string-config", {"config": "a string"}), ("deep", b"[" * 100_000 + b"]" * 100_000)):
        keras_archive(tmp_path / f"{name}.keras", config)
    import zipfile

    with zipfile.ZipFile(tmp_path / "no-config.keras", "w") as z:
        z.writestr("model.weights.h5", b"x")
    onnx_file(tmp_path / "net.onnx")
    onnx_file(tmp_path / "gray.onnx", channels=1)
    onnx_file(tmp_path / "fixed.onnx", batch=1)
    onnx_file(tmp_path / "mobilenet_v2.onnx")
    yolo_layout_onnx(tmp_path / "yolo.onnx")
    nms_onnx(tmp_path / "nms-indices.onnx", padded=False)
    sized_onnx(tmp_path / "masked.onnx", side="valid_mask")
    (tmp_path / "net.txt").write_text("no model")
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, err = run_main(capsys, *argv, "--batch-size", "2", "--output-dir", str(out), "--cache-dir",
                         str(tmp_path / "c"))
    assert code == 2
    assert err.strip().splitlines() == [f"inferbench.run: error: {message.format(tmp=tmp_path)}"] or \
        message.format(tmp=tmp_path) in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_list_says_what_runs_a_model_file(capsys, tmp_path):
    code = main(["--model", str(onnx_file(tmp_path / "net.onnx")), "--list"])
    out = capsys.readouterr().out
    assert code == 0
    assert re.match(rf"Your model: net-[0-9a-f]{{8}} \(an .onnx file, input 3x32x32 NCHW, batch any\): "
                    rf"{tmp_path}/net.onnx", out)
    assert re.search(r"needs the Keras model, and net-[0-9a-f]{8} is an .onnx file", out)


# --------------------------------------------------------------------------- end to end, real frameworks
def _records(out):
    df = records.load(out)
    assert (df["status"] == "ok").all(), df[["framework", "error"]]
    return df


@pytest.mark.slow
def test_an_onnx_file_runs_on_onnxrt_openvino_and_torch(tmp_path, shared_cache, capsys):
    path = onnx_file(tmp_path / "tinynet.onnx")
    code = main(["--model", str(path), "--framework", "all", "--batch-size", "1,4", *QUICK,
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    err = capsys.readouterr().err
    assert code == 0, err
    df = _records(tmp_path / "out")
    assert set(df["framework"]) == {"onnxrt", "openvino", "torch"}
    assert set(df["parity.status"]) == {"passed"} and (df["parity.max_rel_err"] < 1e-4).all()
    record = json.loads(next((tmp_path / "out").rglob("tinynet-*_32_bs4_openvino.json")).read_text())
    assert record["config"]["model_files"][0]["path"] == str(path) and record["runner"]["model_source"].startswith(
        "onnx")
    # the reference is ONNX Runtime's, at full precision, on the file as given
    manifest = json.loads(next(shared_cache.glob("tinynet-*_32_*/manifest.json")).read_text())
    assert manifest["artifacts"]["reference"]["source"] == "onnx"
    assert manifest["artifacts"]["onnx"]["imported_from"] == str(path)


def _keras_model(size=40):
    import keras

    keras.utils.set_random_seed(3)
    inp = keras.Input((size, size, 3))
    x = keras.layers.Rescaling(1 / 255.0)(inp)
    x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(6)(x))


@pytest.mark.slow
def test_a_keras_file_carrying_python_code_is_refused_before_it_runs(tmp_path, capsys):
    """A .keras file's Lambda layer carries Python bytecode; Keras' safe mode (on in every load inferbench makes)
    refuses it: one line, exit 2, and the code never runs (it would write a file)."""
    import keras

    marker = tmp_path / "pwned"
    inp = keras.Input((40, 40, 3))
    writes = eval(f"lambda t: (open({str(marker)!r}, 'w').close(), t)[1]")  # no closure: Keras saves its bytecode
    x = keras.layers.Lambda(writes)(inp)
    keras.Model(inp, keras.layers.Dense(6)(keras.layers.GlobalAveragePooling2D()(x))).save(tmp_path / "evil.keras")
    marker.unlink(missing_ok=True)  # building the model called the lambda once, here, in the test
    code = main(["--model", str(tmp_path / "evil.keras"), "--framework", "onnxrt", *QUICK,
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Lambda" in err[-1] and "Traceback" not in "\n".join(err), err
    assert not marker.exists()


@pytest.mark.slow
def test_a_keras_file_and_a_savedmodel_run_where_their_format_allows(tmp_path, shared_cache, capsys):
    model = _keras_model()
    model.save(tmp_path / "kfile.keras")
    model.export(tmp_path / "smodel", format="tf_saved_model", verbose=False)
    out = tmp_path / "out"
    code = main(["--model", str(tmp_path / "kfile.keras"), "--framework", "keras,tf,onnxrt,openvino,torch", *QUICK,
                 "--output-dir", str(out), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    df = _records(out)
    assert set(df["framework"]) == {"keras", "tf", "onnxrt", "openvino", "torch"}
    assert {m.split("-")[0] for m in df["model"]} == {"kfile"}
    assert set(df["parity.status"]) == {"passed"} and (df["resolution"] == 40).all()
    code = main(["--model", str(tmp_path / "smodel"), "--input-shape", "40x40x3", "--framework", "all", *QUICK,
                 "--output-dir", str(out), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    df = _records(out)
    assert set(df[df.model.str.startswith("smodel-")]["framework"]) == {"tf", "tfxla", "openvino"}
    assert set(df["parity.status"]) == {"passed"}
    # the SavedModel's size, counted from its own graph, is the Keras file's (the same model): its parameters
    # exactly, its FLOPs within 1%; and with it the rows' GFLOP/s and their place under the roofs
    kfile, smodel = (df[df.model.str.startswith(f"{m}-")].iloc[0] for m in ("kfile", "smodel"))
    assert smodel["model_stats.params"] == kfile["model_stats.params"] > 0
    assert smodel["model_stats.flops_per_image"] == pytest.approx(kfile["model_stats.flops_per_image"], rel=0.01)
    assert smodel["model_stats.activations_per_image"] > 0 and smodel["gflop_per_s"] > 0
    assert smodel["bytes_per_image_low"] < smodel["bytes_per_image_high"]


def test_a_keras_files_outputs_are_named_in_the_order_every_export_keeps(tmp_path):
    """Read from config.json, without Keras: a list of outputs by its layers' names in its order, a mapping's keys
    sorted (tf.nest's order: the SavedModel's signature and tf2onnx's ONNX give them so), one output ``logits``; two
    outputs of a file are no classifier's, so its task is raw unless told."""
    base = {"class_name": "Functional", "build_config": {"input_shape": [None, 40, 48, 3]},
            "config": {"layers": [], "input_layers": [["image", 0, 0]]}}

    def opened(name, outputs):
        path = keras_archive(tmp_path / f"{name}.keras", {**base, "config": {**base["config"],
                                                                            "output_layers": outputs}})
        return modelfiles._keras_input_shape(path)[1], open_model_file(str(path)).task

    assert opened("list", [["zeta_head", 0, 0], ["alpha_head", 0, 0]]) == (("zeta_head", "alpha_head"), "raw")
    assert opened("dict", {"zeta": ["z", 0, 0], "alpha": ["a", 0, 0]}) == (("alpha", "zeta"), "raw")
    assert opened("one", [["head", 0, 0]]) == (("logits",), "classification")


def test_a_keras_files_side_inputs_are_read_from_its_input_layers(tmp_path):
    """A .keras file's inputs beside its image are read from their InputLayers (no Keras) by the rule an ONNX file's
    are: an image-size input of two floats is filled with the image's height and width; an integer one, or inputs
    with no image among them, are one line."""
    def archive(name, inputs):
        layers = [{"class_name": "InputLayer", "config": {"name": n, "batch_shape": s, "dtype": d}}
                  for n, s, d in inputs]
        return keras_archive(tmp_path / f"{name}.keras", {"class_name": "Functional", "config": {
            "layers": layers, "input_layers": [[n, 0, 0] for n, _, _ in inputs], "output_layers": [["y", 0, 0]]}})

    image = ("images", [None, 40, 48, 3], "float32")
    opened = open_model_file(str(archive("sized", [image, ("orig_target_sizes", [None, 2], "float32")])))
    assert opened.resolution == "40x48" and opened.side_inputs == (
        "orig_target_sizes [batch, 2] float32: the image's height and width, bound into the graph",)
    for name, inputs, says in (("int", [image, ("im_shape", [None, 2], "int32")], "is int32 [batch, 2]; inferbench"),
                               ("none", [("a", [None, 2], "float32"), ("b", [None, 2], "float32")],
                                "has 2 inputs (a, b) and no image inputs"),
                               ("odd", [image, ("mystery", [None, 5], "float32")], "input mystery [?, 5] float")):
        with pytest.raises(UsageError, match=re.escape(says)):
            open_model_file(str(archive(name, inputs)))


def test_an_onnx_export_gives_its_outputs_the_names_the_keras_model_declares():
    """tf2onnx names a Keras list's outputs Identity:0, Identity_1:0: each is renamed, in order, through an Identity
    node, so a runtime gives them by the source's names (ONNX's own reference evaluator here: no runtime needed); one
    output keeps its name."""
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from inferbench.exporters.onnx import renamed

    nodes = [helper.make_node("Relu", ["x"], ["Identity:0"]), helper.make_node("Neg", ["x"], ["Identity_1:0"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
                               for n in ("Identity:0", "Identity_1:0")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    renamed(proto, ["mask_head", "class_head"])
    onnx.checker.check_model(proto)
    x = np.array([[-1.0, 2.0, -3.0]] * 2, dtype=np.float32)
    got = dict(zip([o.name for o in proto.graph.output], ReferenceEvaluator(proto).run(None, {"x": x})))
    assert list(got) == ["mask_head", "class_head"]
    np.testing.assert_array_equal(got["mask_head"], np.maximum(x, 0))
    np.testing.assert_array_equal(got["class_head"], -x)
    one = helper.make_model(helper.make_graph(nodes[:1], "one", graph.input, graph.output[:1]))
    renamed(one, ["logits"])
    assert [o.name for o in one.graph.output] == ["Identity:0"]


def test_openvinos_outputs_take_the_declared_names_by_name_else_by_their_signature_place():
    """OpenVINO's outputs of a converted model get the source's names: where it keeps them (an ONNX file's, a
    signature's keys), by name; a SavedModel of a Keras list's ``output_i`` as the i-th declared, in whatever order
    they come (``output_10`` before ``output_2``); else by place, as a program's always are."""
    from inferbench.runners.openvino import output_names

    class Converted:
        def __init__(self, *names):
            self.outputs = [type("Output", (), {"get_names": lambda self, n=n: {n}})() for n in names]

    declared = [f"head{i}" for i in range(12)]
    order = sorted(range(12), key=str)  # 0, 1, 10, 11, 2, ...
    assert output_names(Converted(*[f"output_{i}" for i in order]), declared, False) == [declared[i] for i in order]
    assert output_names(Converted("b", "a"), ["a", "b"], False) == ["b", "a"]
    assert output_names(Converted("x", "y"), ["a", "b"], False) == ["a", "b"]
    assert output_names(Converted("b", "a"), ["a", "b"], True) == ["a", "b"]


def _two_headed(size=(40, 48), mapping=False):
    """A Keras model with two outputs of one shape (a wrong order or a swap can only show in the values): two
    heads of 6 numbers, a list of them, or a mapping whose keys sort against its order."""
    import keras

    keras.utils.set_random_seed(5)
    inp = keras.Input((*size, 3))
    x = keras.layers.Rescaling(1 / 255.0)(inp)
    x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.BatchNormalization()(x))
    first, second = keras.layers.Dense(6, name="zeta_head")(x), keras.layers.Dense(6, name="alpha_head")(x)
    return keras.Model(inp, {"zeta": first, "alpha": second} if mapping else [first, second])


@pytest.mark.slow
def test_a_keras_file_with_several_outputs_runs_everywhere_each_output_judged_by_its_name(tmp_path, shared_cache,
                                                                                          capsys):
    """Two outputs of one shape, a list of them and a mapping, through every runtime a .keras file reaches, and the
    SavedModel of the list through TensorFlow's and OpenVINO's: every cell passes parity output by output, and the
    records list the outputs by the source's names, in the order every export keeps."""
    _two_headed().save(tmp_path / "heads.keras")
    _two_headed(mapping=True).save(tmp_path / "keyed.keras")
    _two_headed().export(tmp_path / "heads_sm", format="tf_saved_model", verbose=False)
    out = tmp_path / "out"
    for argv, names in (
            (["--model", str(tmp_path / "heads.keras"),
              "--framework", "keras,keras-eager,jax,tf,tfxla,onnxrt,openvino,openvino-onnx,torch"],
             ["zeta_head", "alpha_head"]),
            (["--model", str(tmp_path / "keyed.keras"), "--framework", "jax,tf,onnxrt,openvino,torch"],
             ["alpha", "zeta"]),
            (["--model", str(tmp_path / "heads_sm"), "--task", "raw", "--input-shape", "40x48x3",
              "--framework", "all"], ["output_0", "output_1"])):
        code = main([*argv, *QUICK, "--output-dir", str(out), "--cache-dir", str(shared_cache)])
        assert code == 0, capsys.readouterr().err
        model = argv[1].rsplit("/", 1)[-1].removesuffix(".keras")
        for path in out.rglob(f"{model}-*_40x48_bs1_*.json"):
            record = json.loads(path.read_text())
            assert [o["name"] for o in record["outputs"]] == names, path.name
            assert record["parity"]["status"] == "passed", (path.name, record["parity"]["reason"])
            assert {n: p["status"] for n, p in record["parity"]["outputs"].items()} == dict.fromkeys(names, "passed")
    df = _records(out)
    assert len(df) == 9 + 5 + 3 and set(df[df.model.str.startswith("heads_sm-")]["framework"]) == \
        {"tf", "tfxla", "openvino"}


def _sized(size=(None, None)):
    """A Keras model of an image of any size and its size (``orig_target_sizes [batch, 2]``, as RT-DETR takes it),
    two heads of one shape, the size weighing on both: fed the width for the height, its outputs differ."""
    import keras

    keras.utils.set_random_seed(7)
    image, sizes = keras.Input((*size, 3), name="images"), keras.Input((2,), name="orig_target_sizes")
    x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(keras.layers.Rescaling(1 / 255.0)(image))
    s = keras.layers.Dense(8, activation="relu")(keras.layers.Rescaling(1 / 40.0)(sizes))
    both = keras.layers.Concatenate()([keras.layers.GlobalAveragePooling2D()(x), s])
    return keras.Model([image, sizes], [keras.layers.Dense(6, name=n)(both) for n in ("boxes_head", "class_head")])


def _int_sized(path):
    """A SavedModel from TensorFlow itself whose image-size input is int64 (RT-DETR's type), weighing on its output."""
    import tensorflow as tf

    class Sized(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.random.default_rng(0).normal(0, 1, (3, 6)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec((None, 40, 48, 3), tf.float32, name="images"),
                                      tf.TensorSpec((None, 2), tf.int64, name="orig_target_sizes")])
        def serve(self, images, orig_target_sizes):
            hw = tf.cast(orig_target_sizes, tf.float32)
            return {"scores": tf.reduce_mean(images, axis=[1, 2]) @ self.w * hw[:, :1] / 40.0 + hw[:, 1:] / 48.0}

    module = Sized()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return module


@pytest.mark.slow
def test_a_keras_files_and_a_savedmodels_side_inputs_are_bound_and_every_runtime_computes_from_them(
        tmp_path, shared_cache, capsys):
    """The image's size as a second input, of a .keras file (an image of any size, two outputs), of its SavedModel
    and of a SavedModel whose size is int64: bound into the model as the image's height and width, every runtime fed
    the image alone passes parity, and the reference is the model's own outputs fed the size (not the size the other
    way round: the test model tells them apart); the wrapped Keras model's own FP16 error is its layers' (all of them
    rebuilt in FP16, not only the bound constants)."""
    import tensorflow as tf

    from inferbench.registry.artifacts import REFERENCE_INPUTS, REFERENCE_LOGITS, REFERENCE_SENSITIVITY
    from inferbench.registry.outputs import packed

    model = _sized()
    model.save(tmp_path / "sized.keras")
    model.export(tmp_path / "sized_sm", format="tf_saved_model", verbose=False)
    module = _int_sized(tmp_path / "int_sm")
    out, said = tmp_path / "out", []
    for argv, frameworks in ((["--model", str(tmp_path / "sized.keras"), "--resolution", "40x48", "--framework",
                               "keras,jax,tf,tfxla,onnxrt,openvino,openvino-onnx,torch"], 8),
                             (["--model", str(tmp_path / "sized_sm"), "--input-shape", "40x48x3", "--task", "raw",
                               "--framework", "all"], 3),
                             (["--model", str(tmp_path / "int_sm"), "--input-shape", "40x48x3", "--task", "raw",
                               "--framework", "all"], 3)):
        code = main([*argv, *QUICK, "--output-dir", str(out), "--cache-dir", str(shared_cache)])
        said.append("".join(capsys.readouterr()))  # its lines on stdout, a failure on stderr
        assert code == 0, said[-1]
        name = argv[1].rsplit("/", 1)[-1].removesuffix(".keras")
        df = _records(out)
        cells = df[df.model.str.startswith(f"{name}-")]
        assert len(cells) == frameworks and set(cells["parity.status"]) == {"passed"}
        (folder,) = shared_cache.glob(f"{name}-*_40x48_*")
        inputs, reference = np.load(folder / REFERENCE_INPUTS), np.load(folder / REFERENCE_LOGITS)
        if name == "int_sm":
            fed = [packed(module.serve(tf.constant(inputs), tf.constant([hw] * len(inputs), tf.int64)), ["scores"])
                   for hw in ([40, 48], [48, 40])]
        else:
            fed = [packed(model.predict_on_batch([inputs, np.tile(hw, (len(inputs), 1)).astype(np.float32)]),
                          ["boxes_head", "class_head"]) for hw in ([40.0, 48.0], [48.0, 40.0])]
        np.testing.assert_allclose(reference, fed[0], rtol=1e-5, atol=1e-6)
        assert np.abs(fed[1] - fed[0]).max() > 100 * np.abs(reference - fed[0]).max() + 1e-3
    assert "side input of sized-" in said[0] and "orig_target_sizes [batch, 2] float32" in said[0]
    # a SavedModel's side inputs are read from its signature when it is imported, and said as a .keras file's are
    assert "side input of sized_sm-" in said[1] and "orig_target_sizes [batch, 2] float32" in said[1]
    assert "side input of int_sm-" in said[2] and "orig_target_sizes [batch, 2] int64" in said[2]
    assert said[2].count("side input of") == 1  # once, though every cell's record says it
    record = json.loads(next(out.rglob("sized-*_40x48_bs1_onnxrt.json")).read_text())
    assert [o["name"] for o in record["outputs"]] == ["boxes_head", "class_head"]
    (folder,) = shared_cache.glob("sized-*_40x48_*")
    assert json.loads((folder / REFERENCE_SENSITIVITY).read_text())["fp16"]["max_rel_err"] > 1e-5


def test_a_zip_bomb_is_refused_in_seconds_and_little_memory(tmp_path):
    """A 1.5 MB .keras whose config.json inflates to 1.5 GiB once drove a run past 3 GB for minutes: the declared
    sizes are checked before anything is inflated."""
    import subprocess
    import sys
    import zipfile

    bomb = tmp_path / "bomb.keras"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("config.json", "w", force_zip64=True) as member:
            for _ in range(1536):  # 1.5 GiB of spaces, written a MiB at a time
                member.write(b" " * 2**20)
    assert bomb.stat().st_size < 3 * 2**20
    # measured in a process of its own whose only child is the run: RUSAGE_CHILDREN there is the run's peak alone
    probe = ("import json, resource, subprocess, sys, time\n"
             "t = time.monotonic()\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=600)\n"
             "print(json.dumps([p.returncode, p.stderr, time.monotonic() - t,"
             " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024]))")
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "inferbench", "run", "--model", str(bomb),
                          "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=900, check=True).stdout
    returncode, stderr, took, peak_mb = json.loads(out)
    proc = subprocess.CompletedProcess([], returncode, "", stderr)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "refused as a zip bomb" in proc.stderr
    assert peak_mb < 1024, (took, peak_mb)  # nothing inflated: the declared sizes refused it (took: for the message)
    assert not (tmp_path / "out").exists()
    # the same archive as --weights, and a config.json just over the cap without compression
    with pytest.raises(UsageError, match="refused as a zip bomb"):
        modelfiles.describe_weights(str(bomb))
    from inferbench.registry import filecheck

    big = keras_archive(tmp_path / "big.keras", {"config": {}, "pad": " " * 2**20})
    with pytest.raises(UsageError, match=r"its config.json is 1 MiB \(at most 0 MiB\)"):
        import unittest.mock

        with unittest.mock.patch.object(filecheck, "CONFIG_CAP", 2**19):
            filecheck.keras_config(big)


def test_two_networks_saved_under_one_name_never_pool(tmp_path):
    """Model files are told apart by content: the same name, different weights -> different models in every
    record, file name, report group and compare pair; the same file copied elsewhere stays the same model."""
    import shutil

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    onnx_file(tmp_path / "a" / "tiny.onnx")
    onnx_file(tmp_path / "b" / "tiny.onnx", size=48)  # another network, the same file name
    first, second = (open_model_file(str(tmp_path / d / "tiny.onnx"), resolution=None) for d in ("a", "b"))
    assert first.name != second.name and first.name.startswith("tiny-") and second.name.startswith("tiny-")
    shutil.copy(tmp_path / "a" / "tiny.onnx", tmp_path / "copy.onnx")
    assert open_model_file(str(tmp_path / "copy.onnx")).name.split("-")[1] == first.name.split("-")[1]


def test_an_onnx_op_torch_cannot_convert_says_what_to_do(tmp_path):
    """A plain PyTorch export at opset 19 holds a Constant node onnx2torch has no converter for: the torch path's
    failure names the op and its opset and says how to re-export (or where the file runs as it is)."""
    import importlib.util

    if importlib.util.find_spec("onnx2torch") is None:  # found, not imported: torch beside TensorFlow can crash
        pytest.skip('the torch path needs the torch extra: pip install -e ".[cpu]"')
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    constant = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones((1, 3), np.float32)))
    graph = helper.make_graph([constant, helper.make_node("Add", ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), tmp_path / "c19.onnx")
    # torch in a process of its own, as inferbench runs it (torch beside TensorFlow in one process can crash)
    code = ("import sys\nfrom inferbench.exporters.torch import convert\ntry:\n    convert(sys.argv[1])\n"
            "except RuntimeError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c19.onnx")], capture_output=True, text=True,
                          timeout=300)
    message = done.stdout
    assert "operation_type='Constant', version=19" in message and "the file's opsets: ai.onnx 19" in message
    assert "opset_version=17" in message and "run the file on onnxrt or openvino" in message


@pytest.mark.slow
def test_a_side_input_is_filled_as_its_name_says_and_bound_into_every_runtimes_graph(tmp_path, shared_cache, capsys):
    """RT-DETR's export takes the size of its images as a second input (orig_target_sizes [batch, 2] int64) and
    scales its boxes by it: filled with the image's height and width, bound into the imported graph, every runtime
    computes the same points at every batch size, and the run says what it fed; a [2] named ...scale... is 1."""
    path = sized_onnx(tmp_path / "sized.onnx")
    code = main(["--model", str(path), "--framework", "onnxrt,openvino,torch", "--batch-size", "1,2", *QUICK,
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    said = "orig_target_sizes [batch, 2] int64: the image's height and width, bound into the graph"
    assert f": {said}" in captured.out
    records = [json.loads(f.read_text()) for f in (tmp_path / "out").rglob("sized-*_64_bs*.json")]
    assert len(records) == 6 and {r["parity"]["status"] for r in records} == {"passed"}
    assert {tuple(r["config"]["model_files"][0]["side_inputs"]) for r in records} == {(said,)}
    assert {r["runner"]["route"] for r in records if r["framework"] == "torch"} == {
        "onnx2torch from the user's ONNX file as it is (its side inputs bound into the graph)"}
    (reference_file,) = shared_cache.glob("sized-*_64_*/reference/logits.npy")  # not the .keras test's sized-
    reference = np.load(reference_file)
    assert 32 < reference.max() <= 64  # fractions of the image's 64 px: the size was fed, not zeros or ones
    scaled = sized_onnx(tmp_path / "scaled.onnx", side="scale_factor", dtype="float32", batched=False)
    code = main(["--model", str(scaled), "--framework", "onnxrt", *QUICK, "--output-dir", str(tmp_path / "o2"),
                 "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    assert np.load(next(shared_cache.rglob("scaled-*/reference/logits.npy"))).max() <= 1.0


@pytest.mark.slow
def test_a_detector_with_its_own_nms_is_timed_as_it_is_its_cap_read_and_said(tmp_path, shared_cache, capsys):
    """A RetinaNet-style file whose graph ends in ONNX's NonMaxSuppression, padded to its cap: timed as it is (the
    suppression inside every call, nothing of inferbench's after it), its cap and thresholds read from the file and
    said in the run's lines and each record; images the suppression left no box (zeros in every runtime alike) agree."""
    path = nms_onnx(tmp_path / "retina.onnx")
    code = main(["--model", str(path), "--framework", "onnxrt,openvino", *QUICK, "--output-dir", str(tmp_path / "out"),
                 "--cache-dir", str(shared_cache)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    said = "its own NonMaxSuppression (at most 20 boxes a class, IoU > 0.5, score > 0.2)"
    assert f"post-processing: {said}, in the model's own graph: inside every timed call" in captured.out
    assert "+ post ms" not in captured.out  # nothing of inferbench's runs after the call: no column for it
    for f in (tmp_path / "out").rglob("retina-*_64_bs1_*.json"):
        r = json.loads(f.read_text())
        assert r["task"] == "raw" and [o["name"] for o in r["outputs"]] == ["boxes", "scores"]
        assert r["parity"]["status"] == "passed" and r["postprocess"]["what"] == said
        assert r["postprocess"]["in_graph"] is True and "ms_p50" not in r["postprocess"]


@pytest.mark.slow
def test_a_yolo_layout_detector_runs_everywhere_its_file_runs_judged_box_by_box(tmp_path, shared_cache, capsys):
    """A detector whose one output is YOLOv8's raw head: every runtime's boxes and scores judged apart, the same
    suppression run after each and matched with the reference's, its time beside the model's; a model of two outputs
    compared by name."""
    path = yolo_layout_onnx(tmp_path / "yolo.onnx")
    code = main(["--model", str(path), "--task", "detection", "--framework", "all", "--batch-size", "1,2", *QUICK,
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "+ post ms" in captured.out and "class-aware non-maximum suppression" in captured.out
    df = _records(tmp_path / "out")
    assert set(df["framework"]) == {"onnxrt", "openvino", "torch"} and set(df["parity.status"]) == {"passed"}
    for f in (tmp_path / "out").rglob("yolo-*_64_bs*.json"):
        r = json.loads(f.read_text())
        assert r["task"] == "detection" and r["outputs"] == [{"name": "output0", "shape": [7, 84], "kind": "values"}]
        assert set(r["parity"]["outputs"]) == {"output0.boxes", "output0.scores"}
        assert r["parity"]["after_postprocess"]["matched_share"] == 1.0, r["parity"]["after_postprocess"]
        assert r["postprocess"]["ms_p50"] > 0 and r["postprocess"]["batch_size"] == r["batch_size"]
    two = yolo_layout_onnx(tmp_path / "two.onnx", extra_output=True)
    code = main(["--model", str(two), "--framework", "onnxrt,openvino", *QUICK, "--output-dir", str(tmp_path / "o2"),
                 "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    r = json.loads(next((tmp_path / "o2").rglob("two-*_64_bs1_openvino.json")).read_text())
    assert r["task"] == "raw" and [o["name"] for o in r["outputs"]] == ["output0", "features"]
    assert r["parity"]["status"] == "passed" and set(r["parity"]["outputs"]) == {"output0", "features"}
    seg = segmenter_onnx(tmp_path / "seg.onnx", aux=True)
    code = main(["--model", str(seg), "--task", "segmentation", "--framework", "onnxrt,torch", *QUICK,
                 "--output-dir", str(tmp_path / "o3"), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    for f in (tmp_path / "o3").rglob("seg-*_64_bs1_*.json"):
        r = json.loads(f.read_text())
        assert [o["kind"] for o in r["outputs"]] == ["masks", "values"] and r["parity"]["status"] == "passed"
        assert r["parity"]["outputs"]["out"]["pixel_agreement"] == 1.0
        assert r["parity"]["after_postprocess"]["mean_iou"] == 1.0 and r["postprocess"]["ms_p50"] > 0


@pytest.mark.slow
def test_a_detector_of_another_aspect_runs_at_its_height_and_width(tmp_path, shared_cache, capsys):
    """YOLOv8's layout at 64 x 96 (height x width, 96 anchors): every runtime fed 64 x 96 images, its boxes judged as
    the square detector's are, its records named and loaded at "64x96"."""
    path = yolo_layout_onnx(tmp_path / "wide.onnx", size=(64, 96))
    code = main(["--model", str(path), "--task", "detection", "--framework", "onnxrt,openvino", *QUICK,
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    df = _records(tmp_path / "out")
    assert set(df["resolution"]) == {"64x96"} and set(df["parity.status"]) == {"passed"}
    for f in (tmp_path / "out").rglob("wide-*_64x96_bs1_*.json"):
        r = json.loads(f.read_text())
        assert r["resolution"] == "64x96" and r["outputs"][0]["shape"] == [7, 96 + 24 + 6]
        assert r["parity"]["after_postprocess"]["matched_share"] == 1.0
    # the suppression inside every timed call: the cell named apart, its region and its footnote said
    code = main(["--model", str(path), "--task", "detection", "--framework", "onnxrt", "--postprocess", "inside",
                 *QUICK[:-1], "--output-dir", str(tmp_path / "in"), "--cache-dir", str(shared_cache)])
    out = capsys.readouterr().out
    assert code == 0 and "onnxrt+post-inside" in out and "but for onnxrt+post-inside, whose calls held it" in out
    r = json.loads(next((tmp_path / "in").rglob("wide-*_64x96_bs1_onnxrt_post-inside.json")).read_text())
    assert r["variant"] == "post-inside" and r["timing"]["timed_region"] == "call+d2h+postprocess"
    assert r["postprocess"]["inside"] is True and r["parity"]["status"] == "passed"


@pytest.mark.slow
@pytest.mark.parametrize("fault,broken,make", [("box-shift", "output0.boxes", yolo_layout_onnx),
                                               ("swapped", "output0.boxes", yolo_layout_onnx),
                                               ("row-shift", "out", segmenter_onnx)])
def test_a_broken_detector_export_computed_by_onnx_runtime_fails_naming_its_output(tmp_path, fault, broken, make):
    """The reference from the right graph, the candidate from the same weights with a planted fault (a box decode a
    pixel row off, the head's rows swapped, a mask a pixel row down), both computed by ONNX Runtime: parity fails,
    naming the output or its part."""
    import onnxruntime as ort

    from inferbench.registry.inputs import make_inputs
    from inferbench.registry.outputs import Output
    from inferbench.registry.tasks import task_module
    from inferbench.scenarios.gates import judge_outputs

    x = make_inputs(models.MODELS["mobilenet_v3_large"], 4, 64, 0).transpose(0, 3, 1, 2).copy()

    def head(path):
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]

    good = head(make(tmp_path / "good.onnx"))
    bad = head(make(tmp_path / "bad.onnx", fault=fault))
    module = task_module("detection" if make is yolo_layout_onnx else "segmentation")
    outputs = module.kinds([Output(broken.split(".")[0], good.shape[1:])], "test")
    same = judge_outputs(module, outputs, good.reshape(4, -1), good.reshape(4, -1).copy(), "fp32", None, None)
    check = judge_outputs(module, outputs, good.reshape(4, -1), bad.reshape(4, -1), "fp32", None, None)
    assert same["status"] == "passed" and check["status"] == "failed" and check["reason"].startswith(f"{broken}: ")


@pytest.mark.slow
def test_a_detectors_map_on_labelled_images_judges_its_int8_beside_fp32(tmp_path, shared_cache, capsys):
    """A COCO instances file whose boxes are what the FP32 detector itself finds on the images, cut to the image as
    its boxes are clipped before they are scored (a box cut to a sliver is no label: FP32's mAP is high, not quite
    1): every cell's mAP with its interval beside FP32's, ONNX Runtime's optimised FP32 the reference's own; INT8's
    decides its parity by MLPerf's 99%; its detections' agreement with FP32's over the seeded agreement inputs is
    counted beside it."""
    model = yolo_layout_onnx(tmp_path / "yolo.onnx")
    folder = tmp_path / "coco"
    assert coco_from_detections(model, folder) > 30
    code = main(["--model", str(model), "--task", "detection", "--eval-dir", str(folder), "--framework",
                 "onnxrt,openvino", "--precision", "int8", *QUICK, "--output-dir", str(tmp_path / "out"),
                 "--cache-dir", str(shared_cache)])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    assert "accuracy (vs FP32)" in out and "COCO mAP@[.5:.95]" in out
    cells = [json.loads(f.read_text()) for f in (tmp_path / "out").rglob("yolo-*_64_bs1_*.json")]
    by = {(r["framework"], r["precision"]): r for r in cells}
    assert set(by) == {(f, p) for f in ("onnxrt", "openvino") for p in ("fp32", "int8")}
    fp32 = by["onnxrt", "fp32"]["parity"]["accuracy"]
    assert fp32["status"] == "measured" and fp32["map"]["fp32"] > 0.4 and fp32["map50"]["fp32"] > 0.8, fp32["map"]
    assert abs(fp32["map"]["value"] - fp32["map"]["fp32"]) < 0.01
    # ONNX Runtime's INT8 of the file, and NNCF's of the file OpenVINO converts, each judged the same way
    assert by["openvino", "int8"]["runner"]["route"] == \
        "NNCF's post-training quantisation from the user's ONNX file as it is"
    for fw in ("onnxrt", "openvino"):
        int8 = by[fw, "int8"]["parity"]["accuracy"]
        assert int8["status"] in ("passed", "failed") and int8["decides"] is True
        # the head's outputs keep their own range in the INT8 model (one scale with the boxes' pixels rounded every
        # score to 0 and matched none of FP32's boxes)
        after = by[fw, "int8"]["parity"]["after_postprocess"]
        assert after["matched_share"] > 0.8, (fw, after)
        assert by[fw, "int8"]["parity"]["status"] == ("passed" if int8["status"] == "passed" else "failed")
        lo, hi = int8["map"]["ci95"]
        assert lo <= int8["map"]["value"] <= hi and int8["map"]["fp32"] == fp32["map"]["fp32"]
    # beside it, not deciding: its detections against FP32's over the 1,000 seeded agreement inputs
    agreement = by["onnxrt", "int8"]["parity"]["agreement"]
    assert agreement["status"] == "measured" and agreement["decides"] is False and agreement["inputs"] == 1000
    assert agreement["after_postprocess"]["images"] == 1000 and agreement["after_postprocess"]["matched_share"] > 0.5
    assert "agreement" not in by["onnxrt", "fp32"]["parity"]


@pytest.mark.slow
def test_a_model_file_with_a_fixed_batch_above_1_exports_its_reference_in_whole_batches(tmp_path, shared_cache,
                                                                                       capsys):
    """A file whose batch is fixed at 4 takes 4 images a call, its outputs' declaration too (it once called it with
    one image, and every export failed)."""
    path = onnx_file(tmp_path / "fixed4.onnx", batch=4)
    code = main(["--model", str(path), "--framework", "onnxrt", "--batch-size", "4", *QUICK, "--output-dir",
                 str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    record = json.loads(next((tmp_path / "out").rglob("fixed4-*_32_bs4_onnxrt.json")).read_text())
    assert record["parity"]["status"] == "passed" and record["outputs"] == [
        {"name": "logits", "shape": [5], "kind": "scores"}] and record["task"] == "classification"


def test_a_graphs_own_suppression_is_said_as_the_file_gives_it():
    from inferbench.registry.graphnms import said

    base = {"op": "NonMaxSuppression", "nodes": 1, "max_output_boxes_per_class": 100, "iou_threshold": 0.45,
            "score_threshold": None}
    assert said(base) == "its own NonMaxSuppression (at most 100 boxes a class, IoU > 0.45, no score threshold)"
    computed = {**base, "max_output_boxes_per_class": None, "iou_threshold": None, "nodes": 3}
    assert said(computed) == ("its own NonMaxSuppression (its box cap computed in the graph (not read), its IoU "
                              "threshold computed in the graph, no score threshold, 3 such operators)")
