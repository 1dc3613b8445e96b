"""Models written in PyTorch as sources: ``--model torchvision:NAME``, ``--model timm:NAME`` and ``.pt2`` files.

The fast tests hold the routes each runtime takes from a PyTorch program (which artifact, made by what, refused why)
and read ``.pt2`` archives written here by hand, without torch; the slow ones build real torchvision and timm models,
export them with torch.export and torch's ONNX exporter, and run them through every runtime that takes them (the
model built in a child process: torch never shares a test worker with TensorFlow).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from detectors import coco_from_detections, torch_heads

from inferbench import records
from inferbench.base.errors import UsageError
from inferbench.registry import artifacts, models
from inferbench.registry.frameworks import FRAMEWORKS
from inferbench.registry.modelfiles import open_model_file
from inferbench.registry.models import get_model, register, torch_source
from inferbench.run import main

QUICK = ["--duration", "0.3", "--rounds", "3", "--processes", "1", "--warmup", "2", "--warmup-seconds", "0",
         "--min-iterations", "3", "-q"]


@pytest.fixture(autouse=True)
def no_files_known(monkeypatch):
    monkeypatch.setattr(models, "_FILES", {})


def test_a_pytorch_name_is_a_model_of_its_library_with_its_task_and_layout():
    assert torch_source("torchvision:lraspp_mobilenet_v3_large") == ("torchvision", "lraspp_mobilenet_v3_large")
    assert torch_source("timm-resnet18") == ("timm", "resnet18") and torch_source("resnet50") is None
    assert torch_source("torchvision:") is None
    seg = get_model("torchvision:lraspp_mobilenet_v3_large")
    assert seg == get_model("torchvision-lraspp_mobilenet_v3_large")  # typed, or as records carry it
    assert (seg.name, seg.task, seg.layout, seg.default_resolution, seg.preprocessing) == \
        ("torchvision-lraspp_mobilenet_v3_large", "segmentation", "NCHW", 520, "torch")
    assert seg.input_shape(2, 64) == (2, 3, 64, 64) and seg.resolution(96) == 96  # any size: built for it
    cls = get_model("timm:resnet18")
    assert (cls.task, cls.default_resolution, cls.packages, cls.extra) == ("classification", 224, ("timm",), "timm")
    assert artifacts.source_kind(seg) == "pt2" and artifacts.source_kind(get_model("mobilenet_v3_large")) == "keras"


def test_each_runtime_takes_its_route_from_a_pytorch_program_and_the_others_say_why_not():
    spec = get_model("torchvision:deeplabv3_mobilenet_v3_large")
    route = {k: fw.artifact_for(spec) for k, fw in FRAMEWORKS.items() if not fw.unsupported(spec)}
    assert route == {"onnxrt": "onnx", "onnxrt-trt": "onnx", "openvino": "pt2", "openvino-onnx": "onnx", "torch": "pt2",
                     "torch-inductor": "pt2", "tensorrt-fp32": "tensorrt", "tensorrt-fp16": "onnx-fp16",
                     "tensorrt-int8": "tensorrt"}
    assert all(FRAMEWORKS[k].verified(spec.name) for k in route)  # the program itself: same weights everywhere
    why = {k: fw.unsupported(spec) for k, fw in FRAMEWORKS.items() if fw.unsupported(spec)}
    said = "is a PyTorch model (torchvision:deeplabv3_mobilenet_v3_large)"
    assert said in why["keras"] and said in why["jax"] and said in why["tf"], why
    assert why["torch-native"] == f"{spec.name} is a PyTorch program: torch and torch-inductor run it"
    # the program first, then the reference from it, then torch's own ONNX export
    assert artifacts.export_order(["onnx", "onnx-int8"], spec) == ["pt2", "reference", "onnx", "onnx-int8"]
    # INT8 from the program itself: NNCF's of what OpenVINO converts, PT2E's of the program (no Keras twin)
    assert {fw: FRAMEWORKS[fw].artifact_for(spec, "closed", "int8") for fw in ("openvino", "torch-inductor")} == \
        {"openvino": "openvino-int8", "torch-inductor": "torch-int8"}
    for kind, module in (("openvino-int8", "quantize_openvino"), ("torch-int8", "quantize_torch")):
        assert artifacts.unreachable(kind, spec) is None and artifacts.requires(kind, spec) == ("pt2",)
        assert artifacts.exporter_module(kind, spec) == f"inferbench.exporters.{module}"
        assert artifacts.route(kind, spec).endswith("from the PyTorch program (torch.export)")
    assert "nncf" in artifacts.exporter_packages("openvino-int8", spec)
    assert artifacts.exporter_module("pt2", spec) == "inferbench.exporters.torch_source"
    assert artifacts.exporter_module("onnx", spec) == "inferbench.exporters.torch_onnx"
    assert "onnxscript" in artifacts.exporter_packages("onnx", spec)
    assert artifacts.exporter_packages("pt2", spec) == ("torch", "torchvision")
    assert artifacts.exporter_packages("reference", spec) == ("torch",)
    # a registered Keras model keeps its routes: tf2onnx for ONNX, the SavedModel for OpenVINO
    keras = get_model("mobilenet_v3_large")
    assert artifacts.exporter_module("onnx", keras) == "inferbench.exporters.onnx"
    assert FRAMEWORKS["openvino"].artifact_for(keras) == "savedmodel"
    assert FRAMEWORKS["openvino-onnx"].artifact_for(keras) == "onnx"  # OpenVINO's other route: tf2onnx's graph


def pt2_archive(path, inputs=(("x", [{"as_expr": {"expr_str": "s0"}}, {"as_int": 3}, {"as_int": 48},
                                      {"as_int": 48}]),), outputs=(("out", [5, 48, 48]),), keys=("out",),
                target="torch.ops.aten.mul.Tensor", pickled=False):
    """A .pt2-shaped archive written by hand: the JSON of one program (its signature, tensor sizes, one node) as
    torch.export 2.x lays it out, without torch."""
    values = {name: {"dtype": rest[0] if rest else 7, "sizes": sizes} for name, sizes, *rest in inputs}  # 7: float
    values.update({f"t_{name}": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "s0"}}, *({"as_int": d} for d in dims)]}
                   for name, dims in outputs})
    spec = {"type": "builtins.dict", "context": json.dumps(list(keys)),
            "children_spec": [{"type": None, "context": None, "children_spec": []}] * len(outputs)} if keys \
        else {"type": None, "context": None, "children_spec": []}
    program = {"graph_module": {
        "graph": {"inputs": [], "outputs": [], "tensor_values": values, "custom_obj_values": {},
                  "nodes": [{"target": target, "inputs": [], "outputs": [], "name": "n0"}]},
        "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": n}}}} for n, *_ in inputs],
                      "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": f"t_{n}"}}}}
                                       for n, _ in outputs]},
        "module_call_graph": [{"fqn": "", "signature": {"out_spec": json.dumps([1, spec])}}]},
        "guards_code": [], "schema_version": {"major": 8}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model/models/model.json", json.dumps(program))
        z.writestr("model/data/weights/model_weights_config.json",
                   json.dumps({"config": {"w": {"path_name": "weight_0", "use_pickle": pickled}}}))
    return path


def test_a_pt2_file_is_read_without_torch(tmp_path):
    seg = open_model_file(str(pt2_archive(tmp_path / "seg.pt2")), asked="segmentation")
    assert (seg.format, seg.layout, seg.resolution, seg.batch_size, seg.task) == ("pt2", "NCHW", 48, None,
                                                                                  "segmentation")
    register(seg)
    spec = get_model(seg.name)
    assert artifacts.exporter_module("pt2", spec) == "inferbench.exporters.imported"  # the file, copied as it is
    assert artifacts.exporter_module("onnx", spec) == "inferbench.exporters.torch_onnx"
    # one output of one dimension: a classifier's, named output (a tensor, not a mapping)
    one = open_model_file(str(pt2_archive(tmp_path / "cls.pt2", outputs=(("logits", [10]),), keys=())))
    assert one.task == "classification"
    # a side input that says what it holds (RT-DETR's image sizes, int64: torch's type 5), filled as ONNX files' are
    image = (("x", [{"as_expr": {"expr_str": "s0"}}, {"as_int": 3}, {"as_int": 48}, {"as_int": 48}]),)
    sized = open_model_file(str(pt2_archive(tmp_path / "sized.pt2", inputs=(
        *image, ("orig_target_sizes", [{"as_expr": {"expr_str": "s0"}}, {"as_int": 2}], 5)))), asked="segmentation")
    assert sized.side_inputs == ("orig_target_sizes [batch, 2] int64: the image's height and width, bound into the "
                                 "graph",) and sized.resolution == 48


def test_a_pt2_program_with_torchvisions_suppression_is_read_its_suppression_said_and_timed_as_it_is(tmp_path):
    """A detector's program calling torchvision::nms (its outputs the detections, padded: a Faster R-CNN exported as
    inferbench exports it) is a program that computes: read, its suppression said, OpenVINO's direct route refused
    saying why, its outputs the in-graph detector's layout."""
    path = pt2_archive(tmp_path / "frcnn.pt2", outputs=(("boxes", [100, 4]), ("scores", [100]), ("labels", [100])),
                       keys=("boxes", "scores", "labels"), target="torch.ops.torchvision.nms.default")
    found = open_model_file(str(path))
    assert found.task == "detection" and found.graph_nms.startswith("its own torchvision::nms (1 such operator;"), found
    register(found)
    spec = get_model(found.name)
    assert spec.graph_nms == found.graph_nms
    assert "converts no torchvision::nms" in FRAMEWORKS["openvino"].unsupported(spec)
    assert FRAMEWORKS["onnxrt"].unsupported(spec) is None


@pytest.mark.parametrize("make,message", [
    (dict(inputs=(("a", [{"as_int": 1}, {"as_int": 3}, {"as_int": 48}, {"as_int": 48}]),
                  ("b", [{"as_int": 1}, {"as_int": 2}]))), "input b [1, 2] float is not the image, and inferbench "
     "fills a side input only where its name and shape say what it holds"),
    (dict(inputs=(("a", [{"as_int": 1}, {"as_int": 3}, {"as_int": 48}, {"as_int": 48}]),) * 2),
     "takes 2 inputs (a, a) and 2 image inputs"),
    (dict(pickled=True), "a weight is stored as a pickle"),
    (dict(target="torch.ops.aten.from_file.default"), "the operator torch.ops.aten.from_file.default reads, writes"),
    (dict(target="builtins.exec"), "the operator builtins.exec reads, writes or runs outside the computation"),
    (dict(target="torch.ops.torchvision.deform_conv2d.default"), "the operator torch.ops.torchvision.deform_conv2d"),
    (dict(outputs=(("out", [5, 48, 48]),), keys=("out",)), "--task detection reads"),
])
def test_a_bad_pt2_file_is_one_line_and_writes_nothing(capsys, tmp_path, make, message):
    path = pt2_archive(tmp_path / "bad.pt2", **make)
    task = ["--task", "detection"] if "detection" in message else []
    code = main(["--model", str(path), *task, "--output-dir", str(tmp_path / "out"), "--cache-dir",
                 str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_pytorch_name_without_its_library_says_what_to_install(capsys, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else real(name, *a))
    code = main(["--model", "timm:resnet18", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == \
        'inferbench.run: error: --model timm:resnet18 needs timm: pip install -e ".[timm]"'
    with pytest.raises(UsageError, match="unknown model 'tochvision:x'"):
        get_model("tochvision:x")


# --------------------------------------------------------------------------- end to end, real frameworks
def _cli(*argv):
    """inferbench.run in a process of its own (it imports torchvision to check a name: never beside TensorFlow)."""
    return subprocess.run([sys.executable, "-m", "inferbench.run", *argv], capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_torchvision_names_that_cannot_be_a_source_are_one_line(tmp_path):
    for name, said in (("torchvision:lraspp_mobilenet_v3_lage", "torchvision has no model 'lraspp_mobilenet_v3_lage' "
                                                                "(did you mean lraspp_mobilenet_v3_large?)"),
                       ("torchvision:retinanet_resnet50_fpn",
                        "of torchvision's detectors inferbench reads ssdlite320_mobilenet_v3_large, "
                        "fasterrcnn_mobilenet_v3_large_320_fpn, fasterrcnn_mobilenet_v3_large_fpn; the others end "
                        "in their own NMS")):
        done = _cli("--model", name, "--output-dir", str(tmp_path / "out"))
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
            done.stderr
    assert not (tmp_path / "out").exists()
    listed = _cli("--model", "torchvision:lraspp_mobilenet_v3_large", "--list")  # what runs it here, and why not
    assert listed.returncode == 0, listed.stderr
    said = "Your model: torchvision-lraspp_mobilenet_v3_large (a PyTorch model, torchvision:lraspp_mobilenet_v3_large, "
    assert said + "segmentation, NCHW, 520 px by default)" in listed.stdout
    assert "is a PyTorch model (torchvision:lraspp_mobilenet_v3_large)" in listed.stdout


def labelled_masks(folder, n=4, classes=21):
    """``n`` images (80 x 60, smooth colours) and their masks: a band of a class an image, 255 on its border."""
    from PIL import Image

    (folder / "images").mkdir(parents=True)
    (folder / "masks").mkdir()
    for i in range(n):
        ramp = np.linspace(0, 255, 80, dtype=np.float32)[None, :, None]
        Image.fromarray(np.clip(ramp + [40 * i, 90, 200 - 30 * i], 0, 255).repeat(60, 0).astype(np.uint8)).save(
            folder / "images" / f"{i}.jpg")
        mask = np.zeros((60, 80), np.uint8)
        mask[20:40] = (3 * i + 1) % classes
        mask[19], mask[40] = 255, 255
        Image.fromarray(mask, "L").save(folder / "masks" / f"{i}.png")
    return folder


@pytest.mark.slow
def test_a_torchvision_segmenter_runs_on_every_runtime_that_takes_a_pytorch_program(tmp_path, shared_cache):
    voc = labelled_masks(tmp_path / "voc")
    done = _cli("--model", "torchvision:lraspp_mobilenet_v3_large", "--resolution", "64x96", "--framework", "all",
                "--batch-size", "3", "--eval-dir", str(voc), *QUICK, "--output-dir", str(tmp_path / "out"),
                "--cache-dir", str(shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    df = records.load(tmp_path / "out")
    assert (df["status"] == "ok").all(), df[["framework", "error"]]
    assert set(df["framework"]) == {"onnxrt", "openvino", "openvino-onnx", "torch", "torch-inductor"}
    assert set(df["parity.status"]) == {"passed"} and set(df["task"]) == {"segmentation"}
    # mean IoU on the labelled masks, every cell's beside the one FP32 reference's
    assert set(df["parity.accuracy.status"]) == {"measured"} and df["parity.accuracy.miou.fp32"].nunique() == 1
    assert ((df["parity.accuracy.miou.value"] - df["parity.accuracy.miou.fp32"]).abs() < 0.01).all()
    assert df["parity.accuracy.said"].str.startswith("mean IoU").all() and (df["parity.accuracy.images"] == 4).all()
    assert set(df["model"]) == {"torchvision-lraspp_mobilenet_v3_large"}
    one = json.loads(next((tmp_path / "out").rglob("*_bs3_openvino.json")).read_text())
    assert one["runner"]["model_source"].startswith("torch.export program")  # OpenVINO's own route from torch
    assert [o["name"] for o in one["outputs"]] == ["out"] and one["outputs"][0]["shape"] == [21, 64, 96]
    other = json.loads(next((tmp_path / "out").rglob("*_64x96_bs3_openvino-onnx.json")).read_text())
    assert other["runner"]["model_source"].startswith("onnx") and other["resolution"] == "64x96"  # the other route
    manifest = json.loads(next(shared_cache.glob("torchvision-lraspp_mobilenet_v3_large_64x96_*/manifest.json"))
                          .read_text())
    made = manifest["artifacts"]
    assert made["pt2"]["built_by"] == "torchvision:lraspp_mobilenet_v3_large" and made["reference"]["source"] == "pt2"
    assert made["onnx"]["converter"].startswith("torch.onnx.export (dynamo)")
    assert "not run here" in done.stderr and "is a PyTorch model (torchvision:lraspp_mobilenet_v3_large)" in done.stderr


PT2_MODEL = """
import sys, torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 5, 1)
    def forward(self, x, orig_target_sizes):  # RT-DETR's side input: each image's height and width
        scale = orig_target_sizes[:, :1, None, None].float() / 40.0
        return {"out": self.head(torch.relu(self.conv(x))) * scale}
torch.manual_seed(0)
net = Net().eval()
batch = torch.export.Dim("batch", min=1, max=1024)
program = torch.export.export(net, (torch.randn(2, 3, 40, 40), torch.full((2, 2), 40)),
                              dynamic_shapes=({0: batch}, {0: batch}))
torch.export.save(program, sys.argv[1])
"""


@pytest.mark.slow
def test_a_pt2_file_and_a_timm_model_run_where_torch_programs_run(tmp_path, shared_cache):
    path = tmp_path / "tiny_seg.pt2"
    subprocess.run([sys.executable, "-c", PT2_MODEL, str(path)], check=True, timeout=300)
    done = _cli("--model", str(path), "--task", "segmentation", "--framework", "torch,onnxrt,openvino", *QUICK,
                "--output-dir", str(tmp_path / "file"), "--cache-dir", str(shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    df = records.load(tmp_path / "file")
    assert set(df["framework"]) == {"torch", "onnxrt", "openvino"} and set(df["parity.status"]) == {"passed"}
    said = "orig_target_sizes [batch, 2] int64: the image's height and width, bound into the graph"
    assert {tuple(r["config"]["model_files"][0]["side_inputs"]) for r in records.iter_records(tmp_path / "file")[0]} \
        == {(said,)}
    # INT8 from the program itself: NNCF's of what OpenVINO converts, PT2E's of the program for inductor
    done = _cli("--model", str(path), "--task", "segmentation", "--framework", "openvino,torch-inductor",
                "--precision", "int8", "--reduced-only", "--calib-images", "8", *QUICK,
                "--output-dir", str(tmp_path / "int8"), "--cache-dir", str(shared_cache))
    int8 = {r["framework"]: r for r in records.iter_records(tmp_path / "int8")[0]}
    assert set(int8) == {"openvino", "torch-inductor"} and {r["precision"] for r in int8.values()} == {"int8"}
    assert int8["openvino"]["runner"]["route"].startswith("NNCF's post-training quantisation from the user's .pt2")
    assert int8["openvino"]["runner"]["model_source"].startswith("nncf-int8-ir")
    # masks against FP32's over the agreement inputs: a quantised model, not a broken one
    openvino = int8["openvino"]["parity"]
    assert openvino["status"] == "unjudged" and openvino["agreement"]["inputs"] == 1000, openvino
    assert openvino["agreement"]["after_postprocess"]["pixel_agreement"] > 0.9, openvino["agreement"]
    # PT2E quantises the program as the file gave it (exported again around its side input, it had lost where its
    # nodes came from and quantised none), then binds it as the FP32 program is
    assert done.returncode == 0, done.stderr[-3000:]
    torch_int8 = int8["torch-inductor"]
    assert torch_int8["status"] == "ok" and torch_int8["runner"]["int8"]["quantize"] >= 2, torch_int8["runner"]
    assert torch_int8["parity"]["agreement"]["after_postprocess"]["pixel_agreement"] > 0.9, torch_int8["parity"]
    done = _cli("--model", "timm:resnet10t", "--resolution", "64", "--framework", "onnxrt,torch", *QUICK,
                "--output-dir", str(tmp_path / "timm"), "--cache-dir", str(shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    df = records.load(tmp_path / "timm")
    assert set(df["parity.status"]) == {"passed"} and set(df["task"]) == {"classification"}
    assert set(df["model"]) == {"timm-resnet10t"}


SSD_AGAINST_TORCHVISION = """
import json, sys, numpy as np, torch
from inferbench.registry.models import get_model
from inferbench.exporters.torch_source import build, condition, heads
from inferbench.registry.inputs import make_inputs
from inferbench.tasks import ssd
spec = get_model("torchvision:ssdlite320_mobilenet_v3_large")
model = build(torch, spec, "random", 0)
cut = heads(torch, model, 320)
condition(torch, cut, spec, 320, 0)  # as the export does: the heads' weights are the model's
x = make_inputs(spec, 2, 320, 5)
with torch.no_grad():
    raw = {k: v.numpy() for k, v in cut(torch.from_numpy(x)).items()}
    own = model(list(torch.from_numpy((x + 1) / 2)))  # its own transform: [0, 1], then mean 0.5 and std 0.5
out = []
for a, b in zip(ssd.detections(raw), own):
    out.append({"n": [len(a["scores"]), len(b["scores"])],
                "box": float(np.abs(a["boxes"] - b["boxes"].numpy()).max()),
                "score": float(np.abs(a["scores"] - b["scores"].numpy()).max()),
                "same_class": float((a["classes"] == b["labels"].numpy()).mean())})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_ssdlites_heads_after_the_shared_postprocessing_are_torchvisions_own_detections():
    """The graph cut before SSDlite's decoding, then inferbench's NumPy decoding and suppression: the same 300
    detections an image as torchvision's own postprocess_detections, box for box (seeded, conditioned weights)."""
    done = subprocess.run([sys.executable, "-c", SSD_AGAINST_TORCHVISION], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for image in json.loads(done.stdout.strip().splitlines()[-1]):
        assert image["n"] == [300, 300] and image["same_class"] == 1.0, image
        assert image["box"] < 1e-3 and image["score"] < 1e-6, image


@pytest.mark.slow
def test_ssdlite_runs_through_onnx_runtime_and_openvino_its_detections_matched_after_the_shared_postprocessing(
        tmp_path, shared_cache):
    """At 192 x 320 (height x width): its anchors made for that size, its boxes clipped to it; its mAP on a COCO file
    of what the FP32 program itself finds (its classes COCO's category ids, as torchvision's are)."""
    spec = get_model("torchvision:ssdlite320_mobilenet_v3_large")
    assert coco_from_detections(None, tmp_path / "coco", size=(192, 320), spec=spec, width=160, height=96,
                                heads=torch_heads(tmp_path, (192, 320))) > 30
    done = _cli("--model", "torchvision:ssdlite320_mobilenet_v3_large", "--framework", "onnxrt,openvino",
                "--resolution", "192x320", "--batch-size", "2", "--eval-dir", str(tmp_path / "coco"), *QUICK,
                "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    df = records.load(tmp_path / "out")
    assert set(df["parity.status"]) == {"passed"} and set(df["task"]) == {"detection"}
    assert (df["parity.after_postprocess.matched_share"] > 0.99).all()  # every box matched, class and IoU >= 0.5
    assert set(df["parity.accuracy.status"]) == {"measured"}, df.filter(like="accuracy").T
    assert (df["parity.accuracy.map.fp32"] > 0.4).all() and df["parity.accuracy.map.fp32"].nunique() == 1
    assert ((df["parity.accuracy.map.value"] - df["parity.accuracy.map.fp32"]).abs() < 0.02).all()
    one = json.loads(next((tmp_path / "out").rglob("*_bs2_onnxrt.json")).read_text())
    assert [o["name"] for o in one["outputs"]] == ["bbox_regression", "cls_logits", "anchors", "image_size"]
    assert one["postprocess"]["ms_p50"] > 0 and one["outputs"][2]["kind"] == "boxes"
    assert one["resolution"] == "192x320" and one["outputs"][3]["shape"] == [2]  # image_size: (192, 320)


def test_faster_rcnn_is_a_detector_whose_graph_holds_its_suppression_and_openvinos_direct_route_says_why_not():
    spec = get_model("torchvision:fasterrcnn_mobilenet_v3_large_320_fpn")
    assert (spec.task, spec.preprocessing, spec.default_resolution, spec.layout) == ("detection", "unit", 320, "NCHW")
    assert spec.graph_nms and "in the graph" in spec.graph_nms and "100 an image" in spec.graph_nms
    assert get_model("torchvision:fasterrcnn_mobilenet_v3_large_fpn").default_resolution == 800
    assert get_model("torchvision:ssdlite320_mobilenet_v3_large").graph_nms is None  # its heads: suppressed after
    route = {k: fw.artifact_for(spec) for k, fw in FRAMEWORKS.items() if not fw.unsupported(spec)}
    assert {"onnxrt": "onnx", "openvino-onnx": "onnx", "torch": "pt2", "torch-inductor": "pt2"}.items() <= route.items()
    assert "openvino" not in route and "converts no torchvision::nms" in FRAMEWORKS["openvino"].unsupported(spec)
    assert FRAMEWORKS["openvino"].unsupported(get_model("torchvision:ssdlite320_mobilenet_v3_large")) is None


FASTER_RCNN_AGAINST_TORCHVISION = """
import json, numpy as np, torch
from inferbench.exporters.torch_program import export_dynamic
from inferbench.exporters.torch_source import source_module
from inferbench.registry.inputs import make_inputs
from inferbench.registry.models import get_model
spec = get_model("torchvision:fasterrcnn_mobilenet_v3_large_320_fpn")
fixed = source_module(torch, spec, "random", 256, 0)  # conditioned as the export does; resized inside to 320
x = torch.from_numpy(make_inputs(spec, 3, 256, 5))
out = []
with torch.no_grad():
    mine, own = fixed(x), fixed.rcnn(list(x))
    program = export_dynamic(torch, fixed, x[:2]).module()  # the batch dynamic: a batch of 3 and of 1 from it
    again = [program(x), program(x[2:])]
for k, b in enumerate(own):
    n = len(b["scores"])
    out.append({"n": [int((mine["scores"][k] > 0).sum()), n],
                "box": float((mine["boxes"][k, :n] - b["boxes"]).abs().max()),
                "score": float((mine["scores"][k, :n] - b["scores"]).abs().max()),
                "same_class": float((mine["labels"][k, :n] == b["labels"]).float().mean()),
                "program": float(max((again[0][key] - mine[key]).abs().max() for key in mine)),
                "one": float(max((again[1][key][0] - mine[key][2]).abs().max() for key in mine))})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_faster_rcnns_program_of_fixed_size_gives_torchvisions_own_detections():
    """torchvision's Faster R-CNN rewritten to outputs of fixed size (inferbench.exporters.torch_rcnn: its proposals
    and detections padded, every image at once): the same detections as torchvision's own forward, box for box, and
    the torch.export program of it (batch dynamic) the same at batch 3 and 1 (seeded, conditioned weights: tens of
    boxes an image, each score its own)."""
    done = subprocess.run([sys.executable, "-c", FASTER_RCNN_AGAINST_TORCHVISION], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for image in json.loads(done.stdout.strip().splitlines()[-1]):
        assert image["n"][0] == image["n"][1] >= 20 and image["same_class"] == 1.0, image
        assert image["box"] < 1e-2 and image["score"] < 1e-5, image
        assert image["program"] < 1e-3 and image["one"] < 1e-3, image


@pytest.mark.slow
def test_faster_rcnn_runs_with_its_suppression_in_every_call_judged_detection_by_detection(tmp_path, shared_cache):
    """Through ONNX Runtime and OpenVINO (from the ONNX export), torch and torch-inductor: every cell passes parity
    with the detections paired whatever their order, the suppression said to be inside every call (no post-processing
    phase), and the mAP on a COCO file of what the FP32 program finds close to FP32's."""
    name = "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn"
    assert coco_from_detections(None, tmp_path / "coco", size=256, spec=get_model(name), width=160, height=96,
                                heads=torch_heads(tmp_path, (256, 256), name)) > 30
    done = _cli("--model", name, "--framework", "onnxrt,openvino-onnx,torch,torch-inductor", "--resolution", "256",
                "--batch-size", "2", "--eval-dir", str(tmp_path / "coco"), *QUICK, "--output-dir",
                str(tmp_path / "out"), "--cache-dir", str(shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torchvision's own two suppressions, in the graph" in done.stdout, done.stdout
    df = records.load(tmp_path / "out")
    assert set(df["parity.status"]) == {"passed"} and set(df["task"]) == {"detection"}, df.filter(like="parity").T
    assert (df["parity.after_postprocess.matched_share"] > 0.99).all()
    assert set(df["parity.accuracy.status"]) == {"measured"}, df.filter(like="accuracy").T
    assert (df["parity.accuracy.map.fp32"] > 0.4).all() and df["parity.accuracy.map.fp32"].nunique() == 1
    assert ((df["parity.accuracy.map.value"] - df["parity.accuracy.map.fp32"]).abs() < 0.02).all()
    one = json.loads(next((tmp_path / "out").rglob("*_bs2_onnxrt.json")).read_text())
    assert [(o["name"], o["shape"]) for o in one["outputs"]] == [("boxes", [100, 4]), ("scores", [100]),
                                                                  ("labels", [100])]
    assert one["postprocess"]["in_graph"] and "ms_p50" not in one["postprocess"]
    assert "the graph's own suppression" in one["parity"]["accuracy"]["method"]


def test_a_weights_file_is_refused_for_a_pytorch_model_and_a_file_named_like_one_stays_a_file(capsys, tmp_path):
    from test_model_files import onnx_file

    weights = tmp_path / "w.weights.h5"
    weights.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    code = main(["--model", "torchvision:resnet18", "--weights", str(weights), "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--weights takes random or imagenet for a PyTorch model" in err[0], err
    path = onnx_file(tmp_path / "timm-resnet50.onnx")  # a model file whose name begins like a PyTorch model's
    code = main(["--model", str(path), "--list"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("Your model: timm-resnet50-") and "(an .onnx file" in out.splitlines()[0]
    name = out.split()[2]
    assert get_model(name).source is not None and models.task_of(name) == "classification"
    assert not (tmp_path / "o").exists()


def test_a_pytorch_models_cache_key_holds_its_librarys_version_and_a_keras_models_key_is_unchanged():
    import inferbench.exporters.torch_source  # noqa: F401 - the package's attribute of that name is then the module
    from inferbench.exporters import PYTORCH_SOURCE, key_inputs

    key = key_inputs("torchvision-lraspp_mobilenet_v3_large", 520, "random", 0, "segmentation")
    assert set(key["pytorch"]) == set(PYTORCH_SOURCE) == {"timm", "onnxscript"} and key["task"] == "segmentation"
    assert "pytorch" not in key_inputs("mobilenet_v3_large", 224, "random", 0)
