"""INT8 (``--precision int8``): calibrated on the user's images or seeded inputs, refused on a CPU without INT8
instructions, judged by accuracy and never by its logits — without labelled images measured and ranked apart, as
speed only. The real quantisations (ONNX Runtime's quantize_static, OpenVINO's NNCF) are in the slow tests."""

from __future__ import annotations

import json

import numpy as np
import pytest
from labelled import colour_classes
from test_results import make_record

from inferbench.base.codec import encode


@pytest.fixture(scope="module")
def colours(tmp_path_factory):
    return colour_classes(tmp_path_factory.mktemp("colours"), per_class=6)


def test_int8_is_refused_on_a_cpu_without_int8_instructions_and_says_which_it_used():
    from inferbench.base.machine import cpu_precision_refusal, native_instructions

    avx2 = {"avx", "avx2", "fma", "sse4_2"}
    said = cpu_precision_refusal("int8", avx2)
    assert said.startswith("--precision int8: this CPU has no INT8 instructions (avx512_vnni or avx_vnni or amx_int8")
    assert cpu_precision_refusal("int8", avx2 | {"avx512f", "avx512_vnni"}) is None
    assert cpu_precision_refusal("int8", avx2 | {"avx_vnni"}) is None  # VNNI on AVX2 (Alder Lake, Zen 5)
    assert native_instructions("int8", avx2 | {"avx512_vnni", "amx_int8", "amx_bf16"}) == ["amx_int8", "avx512_vnni"]


@pytest.mark.slow  # a runtime that takes INT8 must be installed (ONNX Runtime: the full install); nothing runs
def test_a_run_asking_for_int8_on_such_a_cpu_is_refused_in_one_line_before_anything_is_written(
        int8_here, tmp_path, capsys, monkeypatch):
    """Through the command, as a user meets it: on an AVX2-only CPU's flags, --precision int8 is one line, exit 2,
    no export and no result folder (the plan refuses it before the exports)."""
    from inferbench.base import machine
    from inferbench.run import main

    monkeypatch.setattr(machine, "cpu_flag_set", lambda: {"avx", "avx2", "fma", "sse4_2"})
    code = main(["--framework", "onnxrt", "--precision", "int8", "--output-dir", str(tmp_path / "out"),
                 "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.endswith("a runtime would emulate INT8 and time the emulation") and len(
        err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_the_calibration_is_the_users_images_or_seeded_inputs_said_as_such_and_named_by_digest(colours, tmp_path):
    from inferbench.registry import images
    from inferbench.registry.inputs import agreement_inputs
    from inferbench.registry.models import get_model

    seeded = images.calibration(None, 300, 0)
    assert seeded.seeded and seeded.images == 300 and "not an accuracy claim" in seeded.describe()
    assert seeded.digest == images.calibration(None, 300, 0).digest  # the same set, the same artifacts
    assert len({seeded.digest, images.calibration(None, 100, 0).digest, images.calibration(None, 300, 1).digest}) == 3
    mine = images.calibration(str(colours), 10, 0)  # labels are not read: every image in the folder and below
    assert (mine.images, mine.set.found, mine.set.layout) == (10, 18, "images") and not mine.seeded
    assert "10 images (a seeded sample of the 18)" in mine.describe()
    again, whole = images.calibration(str(colours), 10, 0), images.calibration(str(colours), 18, 0)
    assert mine.digest == again.digest != whole.digest
    spec = get_model("mobilenet_v3_small")
    got = np.concatenate(list(images.calibration_inputs(spec, mine, 32, 0)))
    assert got.shape == (10, 32, 32, 3) and np.isfinite(got).all()
    made = np.concatenate(list(images.calibration_inputs(spec, images.calibration(None, 40, 0), 32, 0)))
    agreement = np.concatenate(list(agreement_inputs(spec, 32, 0, 40)))
    assert made.shape == (40, 32, 32, 3) and not np.allclose(made, agreement)  # a stream apart from the agreement's
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("no images")
    for folder, said in ((tmp_path / "empty", "no images (.jpg"), (tmp_path / "nowhere", "no such folder")):
        with pytest.raises(images.UsageError, match="--calib-dir") as exc:
            images.calibration(str(folder), 10, 0)
        assert said in str(exc.value)


@pytest.mark.parametrize("argv, said", [
    (["--framework", "fake", "--calib-dir", "."], "--calib-dir and --calib-images apply to INT8 cells"),
    (["--framework", "fake", "--calib-images", "50"], "--calib-dir and --calib-images apply to INT8 cells"),
    (["--precision", "int8", "--calib-images", "2001"], "argument --calib-images"),
    pytest.param(["--precision", "int8", "--framework", "onnxrt", "--agreement-inputs", "0"],
                 "--agreement-inputs 0 would leave it judged by nothing", marks=pytest.mark.slow),
    (["--precision", "int8", "--scenario", "train"], "--scenario train runs in fp32 here"),
    pytest.param(["--precision", "int8", "--framework", "tf"], "tf runs in fp32 only; --precision int8 applies to: "
                 "onnxrt, openvino", marks=pytest.mark.slow),  # TensorFlow installed: else "not installed"
    (["--precision", "int8", "--calib-images", "0"], "argument --calib-images"),
])
def test_int8_options_that_cannot_hold_are_one_line_and_exit_2(argv, said, fakes, tmp_path, capsys, monkeypatch):
    from inferbench.base import machine
    from inferbench.run import main

    monkeypatch.setattr(machine, "cpu_flag_set", lambda: {"avx512f", "avx512_vnni"})
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_int8_without_labels_is_speed_only_with_labels_its_accuracy_decides():
    from inferbench.measure import parity

    sane = {"status": "passed", "reason": None}
    assert parity.int8_verdict(sane, None) == {
        "status": "unjudged", "reason": "speed only: INT8's accuracy not judged (no labelled images, --eval-dir)"}
    unmeasured = {"status": "not_measured", "reason": "FP32 classifies none of the 18 labelled images right"}
    assert parity.int8_verdict(sane, unmeasured)["status"] == "unjudged"
    assert "FP32 classifies none" in parity.int8_verdict(sane, unmeasured)["reason"]
    assert parity.int8_verdict(sane, {"status": "passed"}) == sane
    broken = {"status": "failed", "reason": "non-finite outputs"}
    assert parity.int8_verdict(broken, None) == broken  # outputs that are no numbers fail: never "speed only"
    # its logits are reported, not gated: only outputs that are no numbers, or of another shape, fail
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(16, 1000))
    far = parity.compare(ref, rng.normal(size=ref.shape), "int8")
    assert far["status"] == "passed" and far["cosine"] < 0.5 and far["thresholds"] == {"gate": parity.UNGATED_SAID}
    nan = ref.copy()
    nan[3, 7] = np.nan
    assert parity.compare(ref, nan, "int8")["reason"] == "non-finite outputs"
    assert parity.compare(ref, ref[:, :10], "int8")["status"] == "failed"
    assert parity.compare(ref, rng.normal(size=ref.shape), "fp16")["status"] == "failed"  # gated precisions stay so
    # the agreement over many inputs is reported, never a gate
    counted = parity.agreement(ref, ref[::-1].copy(), "int8")
    assert counted["status"] == "measured" and counted["top1"]["agreement"] < 0.2 and counted["reason"] is None


def test_speed_only_cells_are_never_ranked_beside_verified_ones_and_are_shown_apart(tmp_path):
    from inferbench.analysis.answer import recommendation_lines
    from inferbench.analysis.ranking import recommendations

    why = "speed only: INT8's accuracy not judged (its accuracy: FP32 classified none of the labelled images right)"
    int8 = {"status": "unjudged", "reason": why, "max_abs_err": 0.1, "max_rel_err": 0.05, "cosine": 0.99,
            "top1_agreement": 1.0, "agreement": {"status": "measured", "inputs": 1000, "top1": {
                "agreement": 0.61, "ci95": [0.58, 0.64]}}}
    cells = [json.loads(json.dumps(encode(r))) for r in (
        make_record("onnxrt", p50=5.0),
        make_record("onnxrt", p50=2.0, precision="int8", parity=int8),
        make_record("openvino", p50=1.5, precision="int8", parity=int8))]
    (rec,) = recommendations(cells)
    # the reason each is unranked is its record's own (here: why the labelled images could not judge it)
    assert rec["recommended"] == "onnxrt" and rec["not_ranked"]["openvino:int8"] == why
    assert [c["cell"] for c in rec["reduced"]] == ["openvino:int8", "onnxrt:int8"]
    said = "\n".join(recommendation_lines([rec]))
    # the fastest first, the centre of each one's rounds; beside each, its gain over its runtime's FP32 where the run
    # has that cell (openvino has none here), and its agreement with FP32
    # the reason none is ranked once, in the heading: its record's own
    assert f"reduced precision against its own FP32 (gain > 1: better; none ranked: {why}):\n      openvino:int8 " \
        "1.530 ms, no verified FP32 cell of its runtime here to compare (without --reduced-only, each runs beside " \
        "it); top-1 agreement with FP32 0.610 [0.580-0.640] over 1000 seeded inputs\n      onnxrt:int8 2.040 ms, " \
        in said, said
    assert "no --eval-dir" not in said  # the true reason only
    gain = rec["reduced"][1]
    assert gain["fp32"] == "onnxrt" and gain["gain"] == pytest.approx(5.1 / 2.04, rel=0.05)
    assert f", gain {gain['gain']:.2f}x over onnxrt" in said
    # report reads the flat rows of records.load: the same figures
    from inferbench import records

    for r in cells:
        records.write_record(tmp_path / "run", records.parse(r, "test"))
    last = records.load(tmp_path / "run")
    (flat,) = recommendations([{**row.to_dict(), "framework": row["framework_key"]} for _, row in last.iterrows()])
    assert [(c["cell"], c.get("top1_agreement"), c.get("fp32")) for c in flat["reduced"]] == [
        ("openvino:int8", 0.61, None), ("onnxrt:int8", 0.61, "onnxrt")]
    (alone,) = recommendations(cells[1:])  # only INT8 cells: no answer, their figures still shown apart
    assert alone["recommended"] is None and len(alone["reduced"]) == 2
    assert "reduced precision against its own FP32" in "\n".join(recommendation_lines([alone]))
    from inferbench.cli.summary import format_summary

    printed = format_summary(cells)  # the terminal: the reason once, in the answer, not again under the table
    assert printed.count(why) == 1 and "UNVERIFIED" not in printed, printed


def test_a_reduced_precision_answer_says_its_gain_and_cost_in_every_output(tmp_path):
    """BF16 beside FP32, ranked (passed parity): its gain over its own FP32 with the paired interval and its
    agreement with FP32, in the answer, summary.csv, the --json cells and recommendation.json."""
    from inferbench.analysis.answer import recommendation_lines
    from inferbench.analysis.ranking import recommendations
    from inferbench.cli.jsonout import cell_summary

    bf16 = {"status": "passed", "max_abs_err": 0.1, "max_rel_err": 0.05, "cosine": 0.99, "top1_agreement": 1.0,
            "agreement": {"status": "measured", "inputs": 1000, "top1": {"agreement": 0.895, "ci95": [0.875, 0.912]}}}
    paired = {"raw_rounds": [i % 5 for i in range(50)], "timing": {"group": "r/g"}}  # measured in the same rounds
    cells = [json.loads(json.dumps(encode(r))) for r in (
        make_record("openvino", p50=4.0, **paired),
        make_record("openvino", p50=2.0, precision="bf16", parity=bf16, **paired),
        make_record("onnxrt", p50=3.0, **paired))]
    (rec,) = recommendations(cells)
    assert rec["recommended"] == "openvino:bf16"
    (c,) = rec["reduced"]
    assert c["ranked"] and c["fp32"] == "openvino" and c["gain"] == pytest.approx(2.0, rel=0.05)
    assert c["gain_ci95"][0] < c["gain"] < c["gain_ci95"][1] and c["top1_agreement"] == 0.895
    said = "\n".join(recommendation_lines([rec]))
    assert "openvino:bf16 2.040 ms, gain 2.0" in said and "top-1 agreement with FP32 0.895 [0.875-0.912]" in said
    from inferbench.analysis.runfiles import summary_rows

    rows = {(r["framework"], r["precision"]): r for r in summary_rows(cells)}
    assert rows["openvino", "bf16"]["gain_over_fp32"] == pytest.approx(c["gain"])
    assert rows["openvino", "bf16"]["gain_over_fp32_ci95_low"] == pytest.approx(c["gain_ci95"][0])
    assert rows["openvino", "bf16"]["fp32_cell"] == "openvino" and "gain_over_fp32" not in rows["openvino", "fp32"]
    doc = cell_summary(cells[1], [rec])
    assert doc["vs_fp32"]["gain"] == pytest.approx(c["gain"]) and doc["vs_fp32"]["top1_agreement"] == 0.895


@pytest.mark.slow  # ONNX Runtime installed (nothing is imported: a lean install has no onnxrt to plan)
def test_the_plan_says_what_int8_is_calibrated_on_and_that_without_labels_it_is_speed_only(tmp_path, monkeypatch):
    from inferbench.base import machine
    from inferbench.execution.plan import build
    from inferbench.options import with_defaults

    monkeypatch.setattr(machine, "cpu_flag_set", lambda: {"avx512f", "avx512_vnni"})
    built = build(with_defaults({"frameworks": ["onnxrt"], "precisions": ["int8"], "cache_dir": str(tmp_path),
                                 "models": ["mobilenet_v3_small"]}, "run"))
    # INT8 comes with its runtime's FP32 beside it (the gain and the cost need both); --reduced-only: alone
    assert [c.precision for c in built.cells] == ["fp32", "int8"] and built.config.calibration.images == 300
    alone = build(with_defaults({"frameworks": ["onnxrt"], "precisions": ["int8"], "cache_dir": str(tmp_path),
                                 "models": ["mobilenet_v3_small"], "reduced_only": True}, "run"))
    assert [c.precision for c in alone.cells] == ["int8"]
    notes = "\n".join(built.notes)
    assert "int8: calibrated on 300 seeded image-like inputs (no --calib-dir): a timing configuration" in notes
    assert "without --eval-dir its accuracy is not judged" in notes
    assert "the plan: 2 cell(s) in 1 group(s), about " in notes and built.expected_s > 0  # the ETA's first figure
    from inferbench.execution.group import cell_job

    job = cell_job(built.config, built.cells[1], tmp_path / "folder", (1,), {})
    assert job.artifact == str(tmp_path / "folder" / "onnx-int8" / f"{built.config.calibration.digest}.onnx")


def test_int8_where_its_runtime_runs_no_int8_kernels_is_refused_and_a_cell_never_loads_without_its_set(tmp_path):
    from inferbench.base.errors import UsageError
    from inferbench.execution.group import cell_job
    from inferbench.execution.rules import check_int8
    from inferbench.options import with_defaults
    from inferbench.spec import CellKey

    values = with_defaults({"precisions": ["int8"]}, "run")
    ort = CellKey("mobilenet_v3_small", 224, 1, "onnxrt", "int8")
    trt = CellKey("mobilenet_v3_small", 224, 1, "tensorrt-int8", "int8")  # INT8 is its own precision
    with pytest.raises(UsageError, match=r"onnxrt runs INT8 on the CPU only .*; on a GPU: tensorrt-int8"):
        check_int8(values, [ort], "gpu")
    with pytest.raises(UsageError, match="tensorrt-int8 runs INT8 on the GPU only"):
        check_int8(values, [trt], "cpu")
    assert check_int8(values, [trt], "gpu").images == 300  # calibrated though --precision never named int8
    assert check_int8(values, [CellKey("mobilenet_v3_small", 224, 1, "onnxrt")], "cpu") is None
    from inferbench.base.device import Device
    from inferbench.spec import RunConfig, RunnerOptions, TimingConfig

    config = RunConfig(weights="random", seed=0, device=Device("cpu"), threads=1, timing=TimingConfig(),
                       options=RunnerOptions(), cache_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="an INT8 cell without its calibration set"):
        cell_job(config, ort, tmp_path, (1,), {})
