"""INT8 for real: ONNX Runtime's quantize_static and OpenVINO's NNCF quantise a .keras model that classifies the
colour set the tests make (tests/labelled.py), calibrated on its images: MLPerf's accuracy gate passes it; calibrated
on dim images it crushes the activations' ranges and the gate fails it. Without labelled images an INT8
cell of the seeded MobileNetV3-Small is measured, reported and shown apart as speed only."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from labelled import colour_classes, colour_model
from test_pipeline import QUICK as SMALL

from inferbench import records
from inferbench.base.machine import native_instructions
from inferbench.run import main
from inferbench.runners.onnxrt import INT8_AGAINST

pytestmark = pytest.mark.slow
#: the colour model's cells (its own model and resolution), timed briefly
QUICK = ["--duration", "0.3", "--rounds", "3", "--processes", "1", "--warmup", "2", "--warmup-seconds", "0",
         "--threads", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def colours(tmp_path_factory):
    return colour_classes(tmp_path_factory.mktemp("colours"), per_class=6)


def _records(folder, precision="int8"):
    return {r["framework"]: r for r in records.iter_records(folder)[0] if r["precision"] == precision}


def test_int8_on_the_users_images_is_judged_by_mlperfs_accuracy_gate_and_a_crushed_calibration_fails_it(
        colours, tmp_path, shared_cache, capsys):
    from PIL import Image

    model = colour_model(tmp_path / "colours.keras")
    base = ["--model", str(model), "--framework", "onnxrt,openvino", "--precision", "int8", "--eval-dir",
            str(colours), *QUICK, "--cache-dir", str(shared_cache)]
    assert main([*base, "--calib-dir", str(colours), "--output-dir", str(tmp_path / "good")]) == 0
    captured = capsys.readouterr()
    assert "int8: calibrated on 18 images in " in captured.err and "speed only" not in captured.out
    good = _records(tmp_path / "good")
    assert set(good) == {"onnxrt", "openvino"}
    for fw, rec in good.items():
        assert rec["precision"] == "int8" and rec["parity"]["status"] == "passed", (fw, rec["parity"])
        assert rec["parity"]["accuracy"]["status"] == "passed" and rec["parity"]["accuracy"]["decides"]
        calibration = rec["config"]["calibration"]
        assert calibration["images"] == 18 and calibration["set"]["layout"] == "images"
    ort, ov = good["onnxrt"]["runner"], good["openvino"]["runner"]
    assert ort["int8"]["quantize_linear"] > 0 and ort["int8"]["method"]["format"] == "QDQ"
    assert ort["int8"]["instructions"] == native_instructions("int8")  # the VNNI / AMX flags this CPU used
    assert {"i8", "u8"} & set(ov["executed_precisions"]) and ov["model_source"].startswith("nncf-int8-ir")
    fp32 = _records(tmp_path / "good", "fp32")  # each runtime's own FP32 beside its INT8, in the same rounds
    assert {fw: r["parity"]["status"] for fw, r in fp32.items()} == {"onnxrt": "passed", "openvino": "passed"}
    reduced = json.loads(next((tmp_path / "good").rglob("recommendation.json")).read_text())[
        "recommendations"][0]["reduced"]
    assert {c["cell"]: c["fp32"] for c in reduced} == {"onnxrt:int8": "onnxrt", "openvino:int8": "openvino"}
    for c in reduced:  # what it gains over its own FP32, and what it costs on the user's labelled images
        assert c["gain"] > 0 and c["accuracy_images"] == 18 and c["accuracy_gate"] == "passed", c
        assert c["accuracy_points"] == pytest.approx(100 * good[c["fp32"]]["parity"]["accuracy"]["top1"][
            "difference"]), c
    digest = good["onnxrt"]["config"]["calibration"]["digest"]
    assert list(shared_cache.rglob(f"onnx-int8/{digest}.onnx"))  # an export, cached per calibration set
    assert list(shared_cache.rglob(f"openvino-int8/{digest}.xml"))
    # dim images (pixels 0-140 of 255): every activation's range too short, the brightest channels clipped, the
    # classes with them; all but black ones (0-2) collapse the outputs altogether: the accuracy says both. (All-zero
    # ones leave ONNX Runtime a degenerate range, which it takes as a scale of 1: for 0-255 inputs, wide enough.)
    rng = np.random.default_rng(0)
    for name, top in (("dim", 141), ("black", 3)):
        (tmp_path / name).mkdir()
        for i in range(8):
            Image.fromarray(rng.integers(0, top, (40, 40, 3), dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
        assert main([*base, "--reduced-only", "--calib-dir", str(tmp_path / name), "--output-dir",
                     str(tmp_path / name / "out")]) == 1
        capsys.readouterr()
        crushed = _records(tmp_path / name / "out")
        assert {fw: r["parity"]["status"] for fw, r in crushed.items()} == {"onnxrt": "failed", "openvino": "failed"}
        for rec in crushed.values():
            assert rec["parity"]["accuracy"]["status"] == "failed", rec["parity"]
            assert "below MLPerf's 99%" in rec["parity"]["reason"], rec["parity"]["reason"]
            assert rec["config"]["calibration"]["digest"] != digest
        # where it lost its signal: ONNX Runtime's quantised graph read block by block against the FP32 model it was
        # quantised from, by tensor name (OpenVINO's blocks are not read)
        blocks = crushed["onnxrt"]["parity"]["blocks"]
        assert blocks["against"] == INT8_AGAINST and blocks["threshold"] == 0.3, blocks
        assert blocks["first"] is not None and max(blocks["errors"]) > 0.3, blocks
        assert f"diverges first at {blocks['first']}" in crushed["onnxrt"]["parity"]["reason"]
        assert "blocks" not in crushed["openvino"]["parity"]


def refused(code, out, capsys, line):
    """A CPU without INT8 instructions: the run refused in one line, exit 2, nothing written."""
    assert code == 2 and capsys.readouterr().err.strip().endswith(line) and not out.exists()


def test_int8_without_labels_is_measured_and_shown_apart_as_speed_only(tmp_path, shared_cache, capsys, int8_here):
    code = main([*SMALL, "--framework", "onnxrt,openvino,torch-inductor", "--precision", "int8,fp32",
                 "--processes", "1",  # one worker a cell: torch-inductor's compile (30 s a worker) not twice
                 "--calib-images", "16", "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    if int8_here:
        return refused(code, tmp_path / "out", capsys, int8_here)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "int8: calibrated on 16 seeded image-like inputs (no --calib-dir): a timing configuration" in captured.err
    assert "reduced precision against its own FP32 (gain > 1: better; none ranked: speed only: INT8's accuracy not " \
        "judged (no labelled images, --eval-dir)):" in captured.out
    recs = {(r["framework"], r["precision"]): r for r in records.iter_records(tmp_path / "out")[0]}
    for fw in ("onnxrt", "openvino", "torch-inductor"):
        assert recs[(fw, "fp32")]["parity"]["status"] == "passed"
        int8 = recs[(fw, "int8")]["parity"]
        assert int8["status"] == "unjudged" and int8["reason"].startswith("speed only: INT8's accuracy not judged")
        assert int8["agreement"]["status"] == "measured" and int8["agreement"]["inputs"] == 1000
        # not the FP32 model under another name: quantisation moved some of its outputs
        assert int8["max_abs_err"] > recs[(fw, "fp32")]["parity"]["max_abs_err"]
    torch_int8 = recs[("torch-inductor", "int8")]["runner"]
    assert torch_int8["int8"]["quantize"] > 0 and torch_int8["int8"]["method"]["tool"].startswith("torchao")
    assert torch_int8["torch_compile"] and torch_int8["freezing"] and \
        torch_int8["int8"]["instructions"] == native_instructions("int8")
    digest = recs[("torch-inductor", "int8")]["config"]["calibration"]["digest"]
    assert list(shared_cache.rglob(f"torch-int8/{digest}.pt2"))  # an export, cached per calibration set
    answer = json.loads(next((tmp_path / "out").rglob("recommendation.json")).read_text())["recommendations"][0]
    assert ":int8" not in answer["recommended"] and {c["cell"] for c in answer["reduced"]} == {
        "onnxrt:int8", "openvino:int8", "torch-inductor:int8"}
    assert all(c["gain"] is not None and c["fp32"] == c["cell"].split(":")[0] for c in answer["reduced"])


#: torch's INT8 export and load, in a process of its own (torch beside TensorFlow, which other tests of a worker load
#: in-process, crashed it): a seeded torchvision ResNet-18 quantised, its outputs against the same and another
#: ResNet, what loading registers, and a planted pickle in its archive.
RESNET_SCRIPT = r"""
import json, os, pickle, sys, zipfile
from pathlib import Path
import numpy as np, torch, torchvision
from inferbench.exporters import quantize_torch
from inferbench.registry import ports

folder = Path(sys.argv[1])

def resnet(seed):
    torch.manual_seed(seed)
    net = torchvision.models.resnet18(weights=None)
    with torch.no_grad():  # batch statistics from image-like inputs: outputs that differ across inputs
        for bn in (m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)):
            bn.weight.uniform_(0.5, 1.5)
            bn.reset_running_stats()
            bn.momentum = None
        net.train()(torch.rand(16, 3, 48, 48))
    return net.eval()

nets = {"same": resnet(0), "other": resnet(1)}
# as the real one does: the torchvision network in the Keras twin's wrapper (its module paths start "net.")
ports.build_torchvision = lambda name, weights: ports._modules().KerasTwin(resnet(0), None).eval()
rng = np.random.default_rng(0)
chunks = [rng.uniform(0, 1, (8, 48, 48, 3)).astype("float32") for _ in range(3)]
quantize_torch.quantize("resnet18", {}, folder / "q.pt2", iter(chunks))
program = quantize_torch.load(folder / "q.pt2")
program.eval()
import torch._inductor.config as inductor
out = {"passes": type(inductor.pre_grad_custom_pass).__name__}
x = torch.from_numpy(rng.uniform(0, 1, (4, 3, 48, 48)).astype("float32"))
with torch.no_grad():
    got = program(x)
    out["one_image"] = list(program(x[:1]).shape)
    out["error"] = {k: float((got - net(x)).norm() / net(x).norm()) for k, net in nets.items()}
# where it departs from FP32: its stages read from the program against the twin it was quantised from, and another
from inferbench.runners.torch_stages import INT8_AGAINST, program_stage_errors
out["stages"] = {k: program_stage_errors(torch, program, ports._modules().KerasTwin(net, None).eval(), x)
                 for k, net in nets.items()}
out["int8_against"] = INT8_AGAINST
marker = folder / "pwned"

class Payload:
    def __reduce__(self):
        return (exec, (f"open({str(marker)!r}, 'w').write('ran')",))

with zipfile.ZipFile(folder / "q.pt2") as z:
    files = {name: z.read(name) for name in z.namelist()}
config = next(n for n in files if n.endswith("weights_config.json"))
meta = json.loads(files[config])
first = next(iter(meta["config"].values()))
first["use_pickle"] = True
files[config] = json.dumps(meta).encode()
files[next(n for n in files if n.endswith("/weights/" + first["path_name"]))] = pickle.dumps(Payload())
with zipfile.ZipFile(folder / "planted.pt2", "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
try:
    quantize_torch.load(folder / "planted.pt2")
    out["planted"] = "loaded"
except Exception as exc:
    out["planted"] = f"{type(exc).__name__}: {exc}"
out["ran"] = marker.exists()
out["switch_left"] = "TORCH_FORCE_WEIGHTS_ONLY_LOAD" in os.environ
print(json.dumps(out))
"""


def test_torchs_int8_quantises_a_resnet_whose_blocks_call_one_relu_module_several_times(tmp_path):
    """torchvision's ResNet blocks call one ReLU module two or three times; the x86 inductor quantizer refuses such a
    pattern ("more than one output node") unless each call is a function of its own. The saved program computes the
    ResNet it was made from (its outputs nearer that model's than another seeded ResNet's), takes any batch, and
    loading it registers inductor's INT8 fusion passes (without them the compiled program computed each quantised
    convolution in FP32 between its pairs, 4-5x slower); its stages can be read from it, by their module names,
    against the FP32 twin (where a failed INT8 cell lost its signal). A weight its archive says is pickled, planted
    with a payload (as someone with write access to a shared cache could), is refused and runs nothing."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", RESNET_SCRIPT, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["error"]["same"] < 0.5 * out["error"]["other"], out
    # its stages, read from the quantised program by their module names, against the FP32 twin it was made from:
    # every stage found, the error small and growing where the other ResNet's is off from the first stage on
    same, other = out["stages"]["same"], out["stages"]["other"]
    assert same["names"] == ["layer1", "layer2", "layer3", "layer4", "fc"] and same["against"] == out["int8_against"]
    assert all(e < 0.3 for e in same["errors"]), same
    assert all(o > 3 * s for s, o in zip(same["errors"], other["errors"])), (same, other)
    assert out["one_image"] == [1, 1000] and out["passes"] == "QuantLiftUp", out
    assert re.search("(?i)weights.only|unpickl", out["planted"]), out
    assert not out["ran"] and not out["switch_left"], out


def test_int8_is_served_under_loadgen_its_served_outputs_the_runtimes_own(tmp_path, shared_cache, capsys, int8_here):
    """An INT8 cell under LoadGen (offline): measured, speed only, and what LoadGen served is what the runtime
    computes on the same samples called directly (INT8 has no gate against FP32: the served path must change
    nothing)."""
    out = tmp_path / "offline"
    code = main([*SMALL, "--quick", "--scenario", "offline", "--framework", "onnxrt", "--precision", "int8",
                 "--reduced-only", "--calib-images", "16", "--output-dir", str(out), "--cache-dir", str(shared_cache)])
    if int8_here:
        return refused(code, out, capsys, int8_here)
    assert code == 0
    (rec,) = records.iter_records(out)[0]
    assert rec["status"] == "ok" and rec["precision"] == "int8" and rec["throughput_per_s"] > 0
    assert rec["parity"]["status"] == "unjudged"
    served = rec["parity"]["served"]
    assert served["status"] == "passed" and served["against"].startswith("the runtime's own outputs")
    assert served["samples"] == 16 and served["max_rel_err"] < 1e-3


def test_the_zoo_gives_int8_a_column_of_its_own_marked_speed_only(tmp_path, shared_cache, capsys, int8_here):
    from inferbench.zoo import main as zoo_main

    folder = tmp_path / "zoo" / "z"
    code = zoo_main([*SMALL, "--framework", "onnxrt", "--precision", "fp32,int8", "--calib-images", "16",
                     "--output-dir", str(tmp_path / "zoo"), "--name", "z", "--cache-dir", str(shared_cache)])
    if int8_here:
        return refused(code, tmp_path / "zoo", capsys, int8_here)
    assert code == 0
    import csv

    rows = {r["framework"]: r for r in csv.DictReader((folder / "matrix.csv").open())}
    assert set(rows) == {"onnxrt", "onnxrt:int8"}
    assert rows["onnxrt"]["status"] == "passed" and rows["onnxrt:int8"]["status"] == "speed only"
    assert "top-1 agreement with FP32" in rows["onnxrt:int8"]["reason"]
    text = (folder / "matrix.md").read_text()
    assert "| onnxrt | onnxrt:int8 |" in text and "1 run as speed only (INT8 without labelled images" in text
    assert "## Speed only: INT8 whose accuracy was not judged" in text
