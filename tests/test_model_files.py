"""Bring your own model: ``--model PATH`` for a .keras file, a TF SavedModel folder or an .onnx file.

The fast tests read real ONNX files (built with onnx.helper) and check what each format can run and the
one-line refusals; the slow ones run every framework that can take each format end to end.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferbench import models, results
from inferbench.errors import UsageError
from inferbench.frameworks import choose
from inferbench.models import get_model, make_inputs, open_model_file, register
from inferbench.run import main

QUICK = ["--duration", "0.3", "--rounds", "3", "--warmup", "2", "--warmup-seconds", "0", "--min-iterations", "3",
         "-q"]


@pytest.fixture(autouse=True)
def no_files_known(monkeypatch):
    """Each test registers its own model files (a name is taken once per process)."""
    monkeypatch.setattr(models, "_FILES", {})


def onnx_file(path, layout="NCHW", size=32, batch="batch", channels=3):
    """A small real convolutional classifier as an ONNX file: Conv-Relu-GlobalAveragePool-Gemm, 5 outputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    dims = [batch, channels, size, size] if layout == "NCHW" else [batch, size, size, channels]
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
    assert (f.name, f.format, f.resolution, f.layout, f.batch_size) == ("my_net", "onnx", 32, "NCHW", None)
    register(f)
    spec = get_model("my_net")
    nchw, nhwc = make_inputs(spec, 2, 32, 0), make_inputs(get_model("mobilenet_v3_large"), 2, 32, 0)
    assert nchw.shape == (2, 3, 32, 32) and np.array_equal(nchw, nhwc.transpose(0, 3, 1, 2))
    g = open_model_file(str(onnx_file(tmp_path / "fixed.onnx", layout="NHWC", batch=1, size=40)))
    assert (g.layout, g.resolution, g.batch_size) == ("NHWC", 40, 1)


def test_what_each_format_runs_and_why_not(tmp_path):
    sm = tmp_path / "sm"
    sm.mkdir()
    (sm / "saved_model.pb").write_bytes(b"")  # recognised by its layout; read only by TensorFlow, in a child
    register(open_model_file(str(onnx_file(tmp_path / "net.onnx"))), open_model_file(str(sm), "48x48x3"))
    chosen, skipped = choose(["all"], "cpu", get_model("net"))
    assert {fw.key for fw in chosen} <= {"onnxrt", "openvino", "torch"}
    assert "is an .onnx file" in skipped["tf"] and "is an .onnx file" in skipped["keras"]
    assert "is a model file" in skipped["torch-native"]
    chosen, skipped = choose(["all"], "cpu", get_model("sm"))
    assert {fw.key for fw in chosen} <= {"tf", "tfxla", "openvino"}
    assert "tf2onnx.convert --saved-model" in skipped["onnxrt"] and "ONNX export" in skipped["torch"]
    assert get_model("sm").source.resolution == 48
    with pytest.raises(UsageError, match="needs the Keras model, and net is an .onnx file"):
        choose(["keras"], "cpu", get_model("net"))


def run_main(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err


BAD = [
    (["--model", "{tmp}/none.onnx"], "model file {tmp}/none.onnx does not exist"),
    (["--model", "{tmp}"], "is a folder without saved_model.pb: not a TF SavedModel"),
    (["--model", "{tmp}/net.onnx", "--weights", "imagenet"], "a model file brings its own weights"),
    (["--model", "{tmp}/net.onnx", "--resolution", "64"], "net takes 32 px inputs"),
    (["--model", "{tmp}/net.onnx", "--input-shape", "3x7"], "is not HxWxC, CxHxW or NxHxWxC"),
    (["--model", "{tmp}/net.onnx", "--input-shape", "3x48x48"], "does not match the input ?x3x32x32"),
    (["--model", "{tmp}/gray.onnx"], "inferbench times RGB images"),
    (["--model", "{tmp}/fixed.onnx"], "has its batch size fixed to 1: pass --batch-size 1"),
    (["--model", "{tmp}/mobilenet_v2.onnx"], "has the name of the registered model mobilenet_v2: rename the file"),
    (["--model", "{tmp}/net.txt"], "inferbench reads a .keras file, a TF SavedModel folder, an .onnx file"),
    (["--input-shape", "32x32x3"], "--input-shape applies to a model file (--model PATH) only"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_model_files_are_one_line(capsys, tmp_path, argv, message):
    onnx_file(tmp_path / "net.onnx")
    onnx_file(tmp_path / "gray.onnx", channels=1)
    onnx_file(tmp_path / "fixed.onnx", batch=1)
    onnx_file(tmp_path / "mobilenet_v2.onnx")
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
    assert out.startswith(f"Your model: net (an .onnx file, input 3x32x32 NCHW, batch any): {tmp_path}/net.onnx")
    assert "needs the Keras model, and net is an .onnx file" in out


# --------------------------------------------------------------------------- end to end, real frameworks
def _records(out):
    df = results.load(out)
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
    record = json.loads(next((tmp_path / "out").rglob("tinynet_32_bs4_openvino.json")).read_text())
    assert record["config"]["model_files"][0]["path"] == str(path) and record["runner"]["model_source"].startswith(
        "onnx")
    # the reference is ONNX Runtime's, at full precision, on the file as given
    manifest = json.loads(next(shared_cache.glob("tinynet_32_*/manifest.json")).read_text())
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
def test_a_keras_file_and_a_savedmodel_run_where_their_format_allows(tmp_path, shared_cache, capsys):
    model = _keras_model()
    model.save(tmp_path / "kfile.keras")
    model.export(tmp_path / "smodel", format="tf_saved_model", verbose=False)
    out = tmp_path / "out"
    code = main(["--model", str(tmp_path / "kfile.keras"), "--framework", "keras,tf,onnxrt,openvino,torch", *QUICK,
                 "--output-dir", str(out), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    df = _records(out)
    assert set(df["framework"]) == {"keras", "tf", "onnxrt", "openvino", "torch"} and set(df["model"]) == {"kfile"}
    assert set(df["parity.status"]) == {"passed"} and (df["resolution"] == 40).all()
    code = main(["--model", str(tmp_path / "smodel"), "--input-shape", "40x40x3", "--framework", "all", *QUICK,
                 "--output-dir", str(out), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    df = _records(out)
    assert set(df[df.model == "smodel"]["framework"]) == {"tf", "tfxla", "openvino"}
    assert set(df["parity.status"]) == {"passed"}
