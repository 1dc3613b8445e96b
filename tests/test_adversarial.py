"""The fifth adversarial round: nothing a loaded file can do but compute, no file read without bounds, no hang, no
control character reaching a reader raw. Each test plants what an attacker or a careless user would, and asserts
the one clear outcome (docs/reliability.md lists them)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from inferbench.base.errors import UsageError
from inferbench.base.reading import Unreadable, read_bounded, read_json
from inferbench.base.text import excerpt, visible
from inferbench.registry import programs

# --------------------------------------------------------------------------- programs: what a file can do


def _pt2(path: Path, targets: list[str], guards: list[str] | None = None, pickled: bool = False) -> Path:
    """A torch.export archive in the layout torch 2.14 writes (models/model.json, weights config), its graph calling
    ``targets``."""
    model = {"graph_module": {"graph": {"nodes": [{"target": t, "inputs": [], "outputs": [], "metadata": {}}
                                                  for t in targets], "custom_obj_values": {}}},
             "guards_code": guards or [], "opset_version": {"aten": 10}}
    weights = {"config": {"w": {"path_name": "weight_0", "is_param": True, "use_pickle": pickled}}}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/models/model.json", json.dumps(model))
        z.writestr("m/data/weights/model_weights_config.json", json.dumps(weights))
        z.writestr("m/data/weights/weight_0", b"\0" * 16)
    return path


def test_a_torch_program_may_compute_and_nothing_else(tmp_path):
    clean = ["torch.ops.aten.conv2d.default", "torch.ops.quantized_decomposed.quantize_per_tensor.default",
             "torch.ops.aten.relu.default", "_operator.getitem"]
    programs.check_program(_pt2(tmp_path / "ok.pt2", clean, ["L['x'].size()[0] <= 65536"]))
    cases = {  # torch.from_file(name, shared=True, size=n) creates the file: a run once did, before any timing
        "from_file": (_pt2(tmp_path / "a.pt2", [*clean, "torch.ops.aten.from_file.default"]),
                      "the operator torch.ops.aten.from_file.default reads, writes or runs outside"),
        "custom": (_pt2(tmp_path / "b.pt2", ["torch.ops.mylib.evil.default"]), "torch.ops.mylib.evil.default"),
        "python": (_pt2(tmp_path / "c.pt2", ["builtins.exec"]), "builtins.exec"),
        "guard": (_pt2(tmp_path / "d.pt2", clean, ["__import__('os').system('touch /tmp/x')"]),
                  "is more than a comparison of shapes"),
        "pickle": (_pt2(tmp_path / "e.pt2", clean, pickled=True), "is stored as a pickle"),
    }
    for name, (path, said) in cases.items():
        with pytest.raises(UsageError, match="refused") as caught:
            programs.check_program(path)
        assert said in str(caught.value) and str(path) in str(caught.value), name


def _onnx(path: Path, domain: str = "", location: str | None = None) -> Path:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu" if not domain else "Evil", ["x"], ["y"], domain=domain)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    if location is not None:
        w = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
        w.data_location = TensorProto.EXTERNAL
        w.ClearField("float_data")
        w.external_data.add(key="location", value=location)
        graph.initializer.append(w)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]
                                + ([helper.make_opsetid(domain, 1)] if domain else [])), str(path))
    return path


def test_an_onnx_model_with_a_custom_op_or_outside_data_is_refused_in_the_cache_and_as_a_users_file(tmp_path,
                                                                                                  capsys):
    from inferbench.run import main as run_main

    programs.check_program(_onnx(tmp_path / "ok.onnx"))
    with pytest.raises(UsageError, match=r"evil\.ops:Evil.*refused"):
        programs.check_program(_onnx(tmp_path / "custom.onnx", domain="evil.ops"))
    with pytest.raises(UsageError, match="outside the model's folder; refused"):
        programs.check_program(_onnx(tmp_path / "outside.onnx", location="../../../etc/passwd"))
    # as the user's file: one line, exit 2, nothing written
    out = tmp_path / "out"
    assert run_main(["--model", str(tmp_path / "custom.onnx"), "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "evil.ops:Evil" in err and "Traceback" not in err and not out.exists()


def test_an_openvino_ir_with_a_custom_layer_is_refused(tmp_path):
    def ir(version: str) -> Path:
        path = tmp_path / f"{version or 'none'}.xml"
        path.write_text(f'<net name="m" version="11"><layers><layer id="0" name="x" type="Parameter" '
                        f'version="opset1"/><layer id="1" name="y" type="Evil" version="{version}"/></layers></net>')
        return path

    programs.check_program(ir("opset8"))
    for version in ("extension", "custom_opset", ""):
        with pytest.raises(UsageError, match="the layer Evil .* is not from one of OpenVINO's own operation sets"):
            programs.check_program(ir(version))
    bomb = tmp_path / "bomb.xml"  # an entity expansion: expat refuses it, in one line
    bomb.write_text('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa">' + "".join(
        f'<!ENTITY {chr(98 + i)} "' + f"&{chr(97 + i)};" * 10 + '">' for i in range(8)) + ']><net>&i;</net>')
    with pytest.raises(UsageError, match="is not an IR inferbench reads"):
        programs.check_program(bomb)


def test_a_tensorrt_engine_with_a_plugin_of_its_own_is_refused():
    """Written against TensorRT's engine inspector (its JSON per layer); the engine here is a stand-in: building one
    needs a GPU."""
    class Engine:
        num_layers = 3

    layers = [{"Name": "conv", "LayerType": "Convolution"}, {"Name": "nms", "LayerType": "PluginV2",
                                                             "PluginType": "EfficientNMS_TRT"},
              {"Name": "x", "LayerType": "PluginV3", "PluginType": "Backdoor_TRT"}]
    with pytest.raises(UsageError, match="the plugin layer Backdoor_TRT needs a plugin library of its own"):
        programs.check_engine(Engine(), Path("model.engine"), lambda i: json.dumps(layers[i]))
    layers[2] = {"Name": "fc", "LayerType": "MatrixMultiply"}
    programs.check_engine(Engine(), Path("model.engine"), lambda i: json.dumps(layers[i]))


def test_a_cached_program_is_checked_where_it_is_loaded_and_a_shared_cache_loads_a_checked_copy(tmp_path):
    """The worker's one way to its artifact (LoadContext.path) checks the program; from a cache shared on purpose
    (--trust-cache) it loads a private copy whose bytes were hashed against the manifest: a file changed after the
    check is refused, and one planted with its manifest hash rewritten is refused for what it holds."""
    from inferbench.exporters import cache
    from inferbench.registry.models import get_model
    from inferbench.runners.base import LoadContext

    folder = tmp_path / "cache" / "m_224_x"
    (folder / "torch-int8").mkdir(parents=True)
    program = _pt2(folder / "torch-int8" / "q.pt2", ["torch.ops.aten.relu.default"])

    def manifest() -> None:
        digest = hashlib.sha256(program.read_bytes()).hexdigest()
        cache.record(folder, "torch-int8", {"files": {"torch-int8/q.pt2": digest}}, {"model": "m"})

    manifest()
    ctx = LoadContext(folder, program, get_model("mobilenet_v3_small"), 32, "cpu", 1, 0,
                      private=str(tmp_path / "private"))
    assert ctx.path.read_bytes() == program.read_bytes() and ctx.path != program  # a private copy, checked
    _pt2(program, ["torch.ops.aten.relu.default", "torch.ops.aten.from_file.default"])  # changed after the export
    with pytest.raises(UsageError, match="not what the cache's manifest recorded"):
        _ = ctx.path
    manifest()  # and its hash rewritten in the manifest: still refused, for what it holds
    with pytest.raises(UsageError, match="from_file"):
        _ = ctx.path
    with pytest.raises(UsageError, match="from_file"):  # the cache of one's own: checked as it is
        _ = LoadContext(folder, program, get_model("mobilenet_v3_small"), 32, "cpu", 1, 0).path


def test_the_cache_check_follows_links_and_looks_all_the_way_down(tmp_path):
    from inferbench.exporters.cache import untrusted

    deep = tmp_path / "cache" / "m_224_x" / "savedmodel" / "variables"
    deep.mkdir(parents=True)
    (deep / "variables.index").write_bytes(b"x")
    for p in (tmp_path / "cache", *tmp_path.joinpath("cache").rglob("*")):
        p.chmod(0o700 if p.is_dir() else 0o600)
    assert untrusted(tmp_path / "cache") is None
    (deep / "variables.index").chmod(0o666)  # four levels down: the old check looked two
    assert "variables.index is writable by every user" in untrusted(tmp_path / "cache")
    (deep / "variables.index").chmod(0o600)
    elsewhere = tmp_path / "shared.onnx"
    elsewhere.write_bytes(b"x")
    elsewhere.chmod(0o666)
    (tmp_path / "cache" / "m_224_x" / "model.onnx").symlink_to(elsewhere)  # a link's target, as if in place
    assert f"a link to {elsewhere}" in untrusted(tmp_path / "cache") and "writable by every user" in \
        untrusted(tmp_path / "cache")


# --------------------------------------------------------------------------- data folders, read as data


def _image(path: Path, seed: int = 0) -> None:
    from PIL import Image

    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(path)


def test_a_fifo_among_the_images_is_named_and_skipped_never_waited_on(tmp_path):
    from inferbench.registry import images

    (tmp_path / "cal").mkdir()
    for i in range(3):
        _image(tmp_path / "cal" / f"{i}.png", i)
    os.mkfifo(tmp_path / "cal" / "stuck.png")
    started = time.monotonic()
    cal = images.calibration(str(tmp_path / "cal"), 10, 0)
    assert time.monotonic() - started < 60 and cal.set is not None and cal.images == 3
    assert cal.set.skipped == (f"{tmp_path / 'cal' / 'stuck.png'} (a FIFO)",)
    with pytest.raises(Unreadable, match="is a FIFO, not a regular file"):
        read_bounded(tmp_path / "cal" / "stuck.png", 100)


def test_a_labels_file_that_leaves_its_folder_is_refused_and_quoted_short(tmp_path, monkeypatch):
    from inferbench.registry import images

    (tmp_path / "set").mkdir()
    _image(tmp_path / "set" / "a.png")
    secret = tmp_path / "environ"
    secret.write_text("TOKEN=s3cr3t-" + "x" * 500 + "\n")
    (tmp_path / "set" / "labels.txt").symlink_to(secret)
    with pytest.raises(UsageError) as caught:
        images.open_eval_set(str(tmp_path / "set"), 10, 0)
    assert "leads out of" in str(caught.value) and "--follow-links" in str(caught.value)
    assert "s3cr3t" not in str(caught.value)
    with pytest.raises(UsageError) as caught:  # asked to follow it: read, and its bad line quoted short
        images.open_eval_set(str(tmp_path / "set"), 10, 0, follow_links=True)
    assert "is not 'path label'" in str(caught.value) and len(str(caught.value)) < 400
    (tmp_path / "set" / "labels.txt").unlink()
    (tmp_path / "set" / "labels.txt").write_text("../environ 0\n")  # a listed path that leaves the folder
    with pytest.raises(UsageError, match="leads out of"):
        images.open_eval_set(str(tmp_path / "set"), 10, 0)
    (tmp_path / "set" / "labels.txt").unlink()
    os.mkfifo(tmp_path / "set" / "labels.txt")  # a FIFO in the labels file's place: named, never waited on
    with pytest.raises(UsageError, match="is a FIFO, not a regular file"):
        images._from_labels(tmp_path / "set" / "labels.txt")


def test_one_image_reached_twice_counts_once(tmp_path):
    from inferbench.registry import images

    (tmp_path / "set" / "cat").mkdir(parents=True)
    _image(tmp_path / "set" / "cat" / "a.png")
    _image(tmp_path / "set" / "cat" / "b.png", 1)
    (tmp_path / "set" / "cat" / "c.png").symlink_to(tmp_path / "set" / "cat" / "a.png")
    es = images.open_eval_set(str(tmp_path / "set"), 10, 0)
    assert es.found == 2


# --------------------------------------------------------------------------- the files inferbench reads itself


def test_a_kept_file_with_infinity_or_a_fifo_is_ignored_with_a_warning(fakes, tmp_path, capsys):
    from test_budget import _plan

    from inferbench.execution import remembered
    from inferbench.execution.environment import setup_path

    config, _ = _plan(fakes, tmp_path, "--framework", "fake")
    path = setup_path(config.cache_dir, config.threads, "cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"fake inference": {"seconds": Infinity}, "fake-slow inference": {"seconds": 3.0}}')
    assert remembered.measured_setups(config) == {}
    assert "WARNING: ignored" in capsys.readouterr().err
    path.write_text('{"fake inference": {"seconds": 1e300}, "fake-slow inference": {"seconds": 3.0}}')
    assert remembered.measured_setups(config) == {"fake-slow inference": 3.0}  # a second past a day: left out
    path.unlink()
    os.mkfifo(path)
    started = time.monotonic()
    assert remembered.measured_setups(config) == {} and time.monotonic() - started < 60
    assert "is a FIFO, not a regular file" in capsys.readouterr().err
    with pytest.raises(Unreadable, match="not JSON inferbench reads"):
        read_json(_write(tmp_path / "nan.json", '{"x": NaN}'), 100)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_huge_record_is_skipped_and_a_long_one_read_capped(tmp_path, capsys):
    from test_results import make_record

    from inferbench import records
    from inferbench.base.codec import encode
    from inferbench.records.load import RECORD_BYTES, read_records
    from inferbench.records.record import RAW_KEPT_MAX

    data = encode(make_record())
    data["raw_latencies_ms"] = [5.0] * (RAW_KEPT_MAX + 5000)
    data["raw_rounds"] = [0] * len(data["raw_latencies_ms"])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "long.json").write_text(json.dumps(data))
    ((rec, _),), _ = read_records(tmp_path / "run")
    assert len(rec.raw_latencies_ms) == RAW_KEPT_MAX and rec.latency_ms.raw_kept["of"] == RAW_KEPT_MAX + 5000
    (tmp_path / "run" / "huge.json").write_bytes(b'{"schema_version": 8, "framework": "x", "pad": "'
                                                 + b"x" * (RECORD_BYTES + 10) + b'"}')
    found, skipped = records.iter_records(tmp_path / "run")
    assert len(found) == 1 and any("huge.json" in s and "over the" in s for s in skipped)
    os.mkfifo(tmp_path / "run" / "fifo.json")
    found, skipped = records.iter_records(tmp_path / "run")
    assert len(found) == 1 and any("fifo.json" in s and "FIFO" in s for s in skipped)


# --------------------------------------------------------------------------- --ab-python


def _interpreter(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_an_ab_interpreter_that_answers_oddly_or_hangs_is_one_line(tmp_path, monkeypatch):
    from inferbench.execution import ab

    odd = _interpreter(tmp_path, "odd", "echo '{\"python\": 3, \"packages\": {}}'")
    with pytest.raises(UsageError, match="did not answer as inferbench's probe asks"):
        ab.install_of(str(odd))
    loud = _interpreter(tmp_path, "loud", r"printf '\033[2J\342\200\256gotcha' >&2; exit 1")
    with pytest.raises(UsageError) as caught:
        ab.install_of(str(loud))
    assert "\x1b" not in str(caught.value) and "\u202e" not in str(caught.value) and "\\x1b" in str(caught.value)
    marker = tmp_path / "child-alive"
    hang = _interpreter(tmp_path, "hang", f"(sleep 300; touch {marker}) & sleep 300")
    monkeypatch.setattr(ab, "PROBE_TIMEOUT_S", 2.0)
    started = time.monotonic()
    with pytest.raises(UsageError, match="no answer within 2 s: it was ended, with every process it had started"):
        ab.install_of(str(hang))
    assert time.monotonic() - started < 60
    left = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True, text=True).stdout.strip()
    assert left == "", "the probe's child outlived it"


# --------------------------------------------------------------------------- text on its way to a reader


def test_control_and_bidi_characters_never_reach_a_reader_raw(tmp_path, capsys):
    from inferbench.report import main as report_main

    assert visible("a\x1b[31mb\u202ec\nd\te") == "a\\x1b[31mb\\u202ec\nd\te"
    assert visible("\r\x1b[K progress") == "\r\x1b[K progress"  # inferbench's own clear-line stays
    assert excerpt("x" * 500, 20).endswith("... (500 characters)")
    name = tmp_path / "evil\x1b[2J\u202etxt.exe"
    assert report_main([str(name), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\\x1b[2J\\u202e" in err


# --------------------------------------------------------------------------- verdicts


def test_an_int8_program_far_from_fp32_fails_instead_of_speed_only():
    from inferbench.measure import parity

    passed = {"status": "passed", "reason": None}
    near = {**passed, "agreement": {"inputs": 1000, "top1": {"agreement": 0.32, "ci95": [0.29, 0.35]}}}
    assert parity.int8_verdict(near, None)["status"] == "unjudged"  # the lowest a correct one measured: speed only
    anti = {**passed, "agreement": {"inputs": 1000, "top1": {"agreement": 0.002, "ci95": [0.0006, 0.007]}}}
    failed = parity.int8_verdict(anti, None)
    assert failed["status"] == "failed" and "below 0.10" in failed["reason"]
    few = {**passed, "agreement": {"inputs": 10, "top1": {"agreement": 0.0, "ci95": [0.0, 0.28]}}}
    assert parity.int8_verdict(few, None)["status"] == "unjudged"  # ten inputs cannot tell


def test_compare_counts_copies_of_one_run_once(tmp_path):
    from test_commands import ROUNDS
    from test_results import make_record

    from inferbench.analysis.comparison import distinct
    from inferbench.base.codec import encode

    one = encode(make_record(raw_rounds=ROUNDS))
    copy = {**one, "run_id": "edited", "created_at": "2026-11-29T00:00:00+0000"}
    other = encode(make_record(p50=5.5, raw_rounds=ROUNDS))
    assert distinct([one, copy]) == 1 and distinct([one, copy, other]) == 2


#: The real programs, made in a process of their own: torch.export and OpenVINO beside the TensorFlow that other
#: tests of a pytest worker load in-process crashed the worker (CI, 2026-11-29: "node down").
REAL_PROGRAMS = r"""
import sys
from pathlib import Path
import openvino as ov, torch

folder = Path(sys.argv[1])

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))

torch.export.save(torch.export.export(Net(), (torch.rand(2, 3, 8, 8),)), str(folder / "net.pt2"))
ov.save_model(ov.convert_model(str(folder / "ok.onnx")), str(folder / "ir" / "model.xml"))
"""


@pytest.mark.slow
def test_real_programs_pass_and_the_same_with_a_planted_operator_are_refused(tmp_path):
    """A real torch.export program and a real OpenVINO IR pass the check; the same files with one operator
    planted (their graph edited as an attacker with write access would) are refused, naming it."""
    import sys

    _onnx(tmp_path / "ok.onnx")
    (tmp_path / "ir").mkdir()
    subprocess.run([sys.executable, "-c", REAL_PROGRAMS, str(tmp_path)], check=True, timeout=600)
    program = tmp_path / "net.pt2"
    programs.check_program(program)
    planted = tmp_path / "planted.pt2"
    with zipfile.ZipFile(program) as src, zipfile.ZipFile(planted, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("models/model.json"):
                data = data.replace(b"torch.ops.aten.relu.default", b"torch.ops.aten.from_file.default")
            dst.writestr(info, data)
    with pytest.raises(UsageError, match="torch.ops.aten.from_file.default"):
        programs.check_program(planted)

    ir = tmp_path / "ir" / "model.xml"
    programs.check_program(ir)
    text = ir.read_text()
    ir.write_text(text.replace('type="ReLU" version="opset1"', 'type="ReLU" version="custom_ext"'))
    with pytest.raises(UsageError, match="the layer ReLU .*custom_ext"):
        programs.check_program(ir)
