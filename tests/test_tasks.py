"""Tasks and named outputs (fast layer, NumPy only): outputs travel in one flat form by the declared order, a
detection head is judged box by box in pixels and score by score, the one suppression every runtime shares keeps
what a plain greedy suppression keeps, two runtimes' detections are matched after it, and a broken export fails
parity naming the output (or the part of it) that broke."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from inferbench.base.errors import UsageError
from inferbench.measure.parity import compare, compare_parts
from inferbench.registry.outputs import Output, named, packed, unpacked
from inferbench.registry.tasks import TASKS, TaskModule, guess, task_module
from inferbench.tasks import detection, nms, segmentation

PACKAGE = Path(__file__).resolve().parents[1] / "inferbench"


def test_outputs_are_packed_by_the_declared_order_never_the_runtimes():
    a, b = np.arange(12.0).reshape(2, 2, 3), np.arange(4.0).reshape(2, 2)
    declared = [Output("boxes", (2, 3)), Output("scores", (2,))]
    flat = packed({"scores": b, "boxes": a}, ["boxes", "scores"])  # the runtime's order is not the model's
    assert flat.shape == (2, 8) and np.array_equal(flat, packed([a, b], ["boxes", "scores"]))
    back = unpacked(flat, declared)
    assert np.array_equal(back["boxes"], a) and np.array_equal(back["scores"], b)
    assert packed(b).shape == (2, 2) and list(named(b, ["logits"])) == ["logits"]  # one output: the array itself
    with pytest.raises(ValueError, match="lack scores"):
        named({"boxes": a, "features": b}, ["boxes", "scores"])
    with pytest.raises(ValueError, match="do not hold boxes, scores"):
        unpacked(flat[:, :7], declared)


def test_a_model_files_task_is_guessed_from_its_outputs_and_every_task_keeps_the_contract():
    square, wide = (640, 640), (384, 640)
    assert guess([Output("logits", (1000,))], square) == "classification"
    # YOLOv8's head: as many anchors as strides 8, 16 and 32 give the image (8400 at 640x640, 5040 at 384x640)
    assert guess([Output("output0", (84, 8400))], square) == guess([Output("output0", (84, 5040))], wide) \
        == "detection"
    assert guess([Output("output0", (84, 8400))], wide) == guess([Output("output0", (84, 8000))], square) == "raw"
    ssd = [Output(n, s) for n, s in (("bbox_regression", (3234, 4)), ("cls_logits", (3234, 91)),
                                     ("anchors", (3234, 4)), ("image_size", (2,)))]
    assert guess(ssd, (320, 320)) == "detection"
    masks = [Output("out", (21, 520, 520)), Output("aux", (21, 520, 520))]
    assert guess(masks, (520, 520)) == "segmentation" and guess(masks, (480, 480)) == "raw"
    assert guess([Output("a", (5,)), Output("b", (5,))], square) == "raw"
    for name in TASKS:
        assert isinstance(task_module(name), TaskModule), name


def test_a_yolo_or_segmenter_file_is_read_as_its_task_without_being_told(tmp_path, monkeypatch):
    from detectors import segmenter_onnx, yolo_layout_onnx

    from inferbench.registry import models
    from inferbench.registry.modelfiles import open_model_file

    monkeypatch.setattr(models, "_FILES", {})
    assert open_model_file(str(yolo_layout_onnx(tmp_path / "yolo.onnx"))).task == "detection"
    assert open_model_file(str(yolo_layout_onnx(tmp_path / "wide.onnx", size=(64, 96)))).task == "detection"
    assert open_model_file(str(segmenter_onnx(tmp_path / "seg.onnx"))).task == "segmentation"
    assert open_model_file(str(yolo_layout_onnx(tmp_path / "raw.onnx")), asked="raw").task == "raw"


def test_code_outside_the_tasks_asks_the_task_entry_never_the_name():
    """As for scenarios: a task declares what the rest of the code asks of it (registry/tasks.py's Task and its
    module); no branch on a task's name elsewhere."""
    pattern = re.compile(r'task(\])? ?(==|!=|in|not in) |== "(detection|classification|raw|segmentation)"'
                         r'|!= "(detection|classification|raw|segmentation)"')
    found = [f"{p.relative_to(PACKAGE)}:{i}" for p in PACKAGE.rglob("*.py")
             if p.relative_to(PACKAGE).parts[0] != "tasks" and p.name != "tasks.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == [], found


def _greedy(boxes, scores, classes, threshold, iou_at):
    """A plain greedy suppression, written out pair by pair: the reference the shared one is held to."""
    kept = []
    for i in sorted(range(len(scores)), key=lambda k: -scores[k]):
        if scores[i] < threshold:
            continue
        if all(classes[j] != classes[i] or _iou(boxes[i], boxes[j]) <= iou_at for j in kept):
            kept.append(i)
    return kept


def _iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def test_the_shared_suppression_keeps_what_a_plain_greedy_one_keeps():
    rng = np.random.default_rng(3)
    for trial in range(20):
        n = 60
        centre = rng.uniform(0, 100, (n, 2)).round(0) if trial % 2 else rng.uniform(40, 60, (n, 2))
        size = rng.uniform(5, 40, (n, 2))
        boxes = nms.xyxy(np.concatenate([centre, size], axis=1))
        scores, classes = rng.uniform(0, 1, n), rng.integers(0, 3, n)
        settings = nms.Settings(score=0.25, iou=0.5)
        got = nms.suppress(boxes, scores, classes, settings).tolist()
        assert got == _greedy(boxes, scores, classes, 0.25, 0.5)
    # the cases by hand: one class's overlapping pair loses its weaker box, two classes keep both, the cap holds
    two = nms.xyxy(np.array([[50, 50, 20, 20], [51, 50, 20, 20]], dtype=float))
    assert nms.suppress(two, np.array([0.9, 0.8]), np.array([1, 1])).tolist() == [0]
    assert nms.suppress(two, np.array([0.9, 0.8]), np.array([1, 2])).tolist() == [0, 1]
    assert nms.suppress(two, np.array([0.9, 0.1]), np.array([1, 2])).tolist() == [0]
    assert len(nms.suppress(boxes, scores, np.arange(n), nms.Settings(score=0.0, max_boxes=7))) == 7


def _head(n=4, classes=3, anchors=50, seed=0):
    """Raw heads [n, 4 + classes, anchors] as a YOLOv8 export gives them: centres and sizes in pixels of a 64 px
    image, class probabilities."""
    rng = np.random.default_rng(seed)
    centre, size = rng.uniform(0, 64, (n, 2, anchors)), rng.uniform(4, 30, (n, 2, anchors))
    scores = 1 / (1 + np.exp(-rng.normal(0, 2, (n, classes, anchors))))
    return np.concatenate([centre, size, scores], axis=1).astype(np.float32)


def _judge(reference, candidate, precision="fp32"):
    outputs = [Output("output0", reference.shape[1:])]
    ref = detection.parts({"output0": reference}, outputs)
    cand = {k: v.reshape(len(v), -1) for k, (v, _) in detection.parts({"output0": candidate}, outputs).items()}
    return compare_parts(ref, cand, precision)


def test_a_broken_detection_export_fails_parity_naming_the_part_that_broke():
    head = _head()
    rng = np.random.default_rng(1)
    rounding = head * (1 + rng.normal(0, 1e-7, head.shape)).astype(np.float32)  # FP32 rounding of a correct export
    ok = _judge(head, rounding)
    assert ok["status"] == "passed" and set(ok["outputs"]) == {"output0.boxes", "output0.scores"}
    shifted = head.copy()
    shifted[:, 1, :] += 1.0  # every box's centre one pixel row down: a wrong decode
    bad = _judge(head, shifted)
    assert bad["status"] == "failed" and bad["reason"].startswith("output0.boxes: ") and "px > 0.5 px" in \
        bad["reason"] and bad["outputs"]["output0.scores"]["status"] == "passed"
    swapped = np.concatenate([head[:, 4:], head[:, :4]], axis=1)  # box rows after the scores
    assert swapped.shape == head.shape
    assert "output0.boxes: " in _judge(head, swapped)["reason"]
    lost = head.copy()
    lost[:, 4:, ::5] = 0.0  # a fifth of the anchors' scores gone
    said = _judge(head, lost)
    assert said["status"] == "failed" and said["reason"].startswith("output0.scores: ")


def test_a_classifiers_one_output_is_judged_as_logits_always_were():
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 1, (16, 10)).astype(np.float32)
    cand = ref.copy()
    cand[3] = cand[3][::-1]
    assert compare_parts({"logits": (ref, "scores")}, {"logits": cand}, "fp32") == compare(ref, cand, "fp32")


def test_detections_after_the_shared_suppression_are_matched_box_by_box():
    head = _head(n=3, seed=2)
    outputs = [Output("output0", head.shape[1:])]
    ref = detection.postprocess({"output0": head}, outputs)
    same = detection.agreement(ref, detection.postprocess({"output0": head.copy()}, outputs))
    assert same["matched_share"] == 1.0 and same["boxes_reference"] == same["matched"] > 0
    moved = head.copy()
    moved[:, 0, :] += 40.0  # every box 40 px to the right: none overlaps its own by half
    far = detection.agreement(ref, detection.postprocess({"output0": moved}, outputs))
    assert far["matched_share"] < 0.2
    relabelled = head.copy()
    relabelled[:, 4:, :] = relabelled[:, [5, 6, 4], :]  # every class renamed: boxes in place, classes wrong
    wrong = detection.agreement(ref, detection.postprocess({"output0": relabelled}, outputs))
    assert wrong["matched_share"] < 0.5 and wrong["boxes_candidate"] == wrong["boxes_reference"]


def test_a_schema_8_record_is_upgraded_to_a_classifiers():
    from inferbench.records.record import upgrade

    out = upgrade({"schema_version": 8, "latency_ms": None})
    assert out["schema_version"] == 9 and out["task"] == "classification" and out["outputs"] is None


def test_the_table_shows_the_post_processing_beside_the_models_latency():
    from inferbench.cli.summary import format_summary

    record = {"model": "det", "resolution": 64, "batch_size": 1, "framework": "onnxrt", "precision": "fp32",
              "variant": "", "status": "ok", "parity": {"status": "passed"}, "latency_ms": {"p50": 0.05},
              "postprocess": {"what": "boxes decoded, class-aware non-maximum suppression", "ms_p50": 2.25,
                              "where": "outside the timed call"}}
    text = format_summary([record], benchmark=False)
    header = text.splitlines()[2]
    assert "+ post ms" in header and "2.250" in text and "not in the latency beside it" in text
    assert "+ post ms" not in format_summary([{**record, "postprocess": None}], benchmark=False)


def test_a_mask_a_pixel_row_off_fails_parity_naming_its_output_and_counting_the_pixels():
    rng = np.random.default_rng(4)
    low = rng.normal(0, 1, (2, 4, 8, 8))
    scores = np.repeat(np.repeat(low, 8, axis=2), 8, axis=3).astype(np.float32)  # class regions, as a resize makes
    outputs = segmentation.kinds([Output("out", (4, 64, 64)), Output("aux", (4, 64, 64))], "seg.onnx")
    assert [o.kind for o in outputs] == ["masks", "values"]
    shifted = np.concatenate([scores[:, :, :1], scores[:, :, :-1]], axis=2)  # one pixel row down

    def judge(cand):
        ref = segmentation.parts({"out": scores, "aux": scores}, outputs)
        return compare_parts(ref, {"out": cand.reshape(2, -1), "aux": scores.reshape(2, -1)}, "fp32")

    ok = judge(scores * np.float32(1 + 1e-7))
    assert ok["status"] == "passed" and ok["outputs"]["out"]["pixel_agreement"] == 1.0
    bad = judge(shifted)
    assert bad["status"] == "failed" and bad["reason"].startswith("out: ") and "pixel(s) of 8192 changed class" in \
        bad["reason"] and bad["outputs"]["aux"]["status"] == "passed"
    masks = segmentation.postprocess({"out": scores}, outputs)
    same = segmentation.agreement(masks, masks)
    moved = segmentation.agreement(masks, segmentation.postprocess({"out": shifted}, outputs))
    assert same["pixel_agreement"] == same["mean_iou"] == 1.0 and 0.8 < moved["pixel_agreement"] < 1.0
    assert moved["mean_iou"] < moved["pixel_agreement"]
    with pytest.raises(UsageError, match=r"--task segmentation reads class scores a pixel.*logits \[10\]"):
        segmentation.kinds([Output("logits", (10,))], "net.onnx")


def _truth(boxes_per_image, width=200, height=100, categories=(1, 3, 7), input_hw=(100, 100)):
    """A COCO ground truth of images ``width`` x ``height``, each with its ``[x, y, w, h, category]`` boxes, read by a
    model whose input is ``input_hw`` (height, width)."""
    images = [{"id": 10 + i, "file_name": f"{i}.png", "width": width, "height": height}
              for i in range(len(boxes_per_image))]
    annotations = [{"id": n, "image_id": 10 + i, "category_id": c, "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0}
                   for i, boxes in enumerate(boxes_per_image) for n, (x, y, w, h, c) in enumerate(boxes, 1 + 100 * i)]
    return {"images": images, "annotations": annotations,
            "categories": [{"id": c, "name": f"c{c}"} for c in categories], "input_hw": input_hw}


def _head_of(boxes_per_image, width=200, height=100, anchors=12, categories=(1, 3, 7), keep=1.0, shift=0.0,
             input_hw=(100, 100)):
    """The raw heads a perfect detector gives for ``boxes_per_image`` (in the images' pixels; the input is
    ``input_hw``, 100 px a side unless told): one anchor a box, its category's score 0.9, the other anchors' scores 0;
    ``keep``: the share of boxes found, ``shift``: boxes moved right by that share of their width."""
    head = np.zeros((len(boxes_per_image), 4 + len(categories), anchors), dtype=np.float32)
    head[:, 2:4, :] = 1.0
    for i, boxes in enumerate(boxes_per_image):
        for a, (x, y, w, h, c) in enumerate(boxes[:round(keep * len(boxes))]):
            sx, sy = input_hw[1] / width, input_hw[0] / height
            head[i, :4, a] = [(x + w / 2 + shift * w) * sx, (y + h / 2) * sy, w * sx, h * sy]
            head[i, 4 + categories.index(c), a] = 0.9
    return head


def test_a_detectors_map_is_cocos_on_boxes_whose_map_is_known():
    """Detections from heads made to find every box, half of them, or every box shifted by 40% of its width (IoU
    0.43: matched at no threshold) or 20% (IoU 0.67: matched at 0.5-0.65, 4 of COCO's 10 thresholds): mAP 1, about
    0.5, 0 and 0.4; boxes in images 200 x 100 read from a 100 px input, scaled back; a reduced precision held to 99% of
    FP32's mAP."""
    boxes = [[(10, 10, 40, 30, 1), (120, 50, 50, 40, 3)], [(30, 20, 60, 50, 7)],
             [(5, 5, 20, 20, 3), (80, 60, 30, 30, 1)]]
    truth, outputs = _truth(boxes), [Output("output0", (7, 12))]

    def acc(precision="fp16", **how):
        return detection.accuracy(truth, {"output0": _head_of(boxes, **how)}, {"output0": _head_of(boxes)}, outputs,
                                  precision)

    same = acc()
    assert same["status"] == "passed" and same["map"]["value"] == same["map"]["fp32"] == 1.0
    assert same["map"]["difference_ci95"] == [0.0, 0.0] and same["map50"]["value"] == 1.0
    half = acc(keep=0.5)
    assert half["status"] == "failed" and 0.3 < half["map"]["value"] < 0.7 and "below MLPerf's 99%" in half["reason"]
    lo, hi = half["map"]["ci95"]
    assert lo <= half["map"]["value"] <= hi and half["map"]["difference_ci95"][1] < 0
    assert acc(shift=0.4)["map"]["value"] == 0.0
    near = acc(shift=0.2)
    assert near["map50"]["value"] == 1.0 and abs(near["map"]["value"] - 0.4) < 0.02, near["map"]
    assert acc("fp32", keep=0.5)["status"] == "measured"


def test_boxes_past_the_images_edges_are_clipped_to_it_before_they_are_scored():
    """Objects at the edges, each drawn past the image by 20 px of 50 (right) or 30 (left, top): clipped to the image
    after the suppression, as Ultralytics' validation clips them, they are the labelled boxes (mAP 1); scored as drawn
    they would overlap them by 0.71 or less, matched at half of COCO's thresholds at most."""
    truth = _truth([[(150, 20, 50, 40, 1), (0, 0, 30, 30, 3)]])
    drawn = {"output0": _head_of([[(150, 20, 70, 40, 1), (-20, -20, 50, 50, 3)]])}
    clipped = detection.accuracy(truth, drawn, drawn, [Output("output0", (7, 12))], "fp32")
    assert clipped["map"]["value"] == clipped["map50"]["value"] == 1.0, clipped["map"]


def test_the_tests_labelled_sets_rank_every_label_above_every_unlabelled_box_across_images():
    """mAP ranks all images' detections together: the tests' labelled sets label the boxes above one floor for the
    whole set (a floor per image, each image's 3 best, would rank image 0's 4th box above image 1's labels), never
    more than an image's evaluation keeps."""
    from detectors import EVALUATED, labelled_floor

    from inferbench.tasks.detection import EVALUATION

    rng = np.random.default_rng(0)
    scores = [np.sort(rng.uniform(lo, lo + 0.3, n))[::-1] for lo, n in ((0.6, 150), (0.3, 40), (0.1, 0), (0.2, 9))]
    floor = labelled_floor(scores, 3)
    labelled = np.concatenate([s[s >= floor] for s in scores])
    unlabelled = np.concatenate([s[s < floor] for s in scores])
    assert labelled.min() > unlabelled.max() and len(labelled) == 12  # 3 an image on average, ranked as one
    # no image holds more labels than its evaluation keeps
    assert EVALUATED == EVALUATION.max_boxes and labelled_floor(scores, 60) == scores[0][EVALUATED - 1]
    assert labelled_floor([np.zeros(0)], 3) == np.inf


def test_boxes_from_an_input_of_another_aspect_scale_back_by_its_height_and_width():
    """A 60 x 100 input (height x width) read from images 200 x 100: the boxes scale back by 2 across and 5/3 down,
    mAP 1; read as if the input were 100 px a side, the same boxes land elsewhere."""
    boxes = [[(10, 10, 40, 30, 1), (120, 50, 50, 40, 3)], [(30, 20, 60, 50, 7)]]
    outputs = [Output("output0", (7, 12))]
    head = {"output0": _head_of(boxes, input_hw=(60, 100))}
    right = detection.accuracy(_truth(boxes, input_hw=(60, 100)), head, head, outputs, "fp32")
    wrong = detection.accuracy(_truth(boxes, input_hw=(100, 100)), head, head, outputs, "fp32")
    assert right["map"]["value"] == 1.0 and wrong["map"]["value"] < 0.5, (right["map"], wrong["map"])


def test_labelled_images_must_suit_the_task_and_a_coco_file_is_checked_before_any_export(tmp_path, capsys,
                                                                                          monkeypatch):
    from detectors import yolo_layout_onnx
    from PIL import Image

    from inferbench.registry import models
    from inferbench.run import main

    monkeypatch.setattr(models, "_FILES", {})  # a name is taken once per process: this test's file alone
    model = yolo_layout_onnx(tmp_path / "yolo.onnx")
    folder = tmp_path / "coco"
    (folder / "images").mkdir(parents=True)
    for i in range(2):
        Image.new("RGB", (80, 60), (40 * i, 90, 200)).save(folder / "images" / f"{i}.png")
    good = {"images": [{"id": i, "file_name": f"{i}.png", "width": 80, "height": 60} for i in range(2)],
            "annotations": [{"id": 1, "image_id": 0, "category_id": 2, "bbox": [5, 5, 20, 10]}],
            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]}
    bad = {
        "a missing image": ({**good, "images": [*good["images"], {"id": 9, "file_name": "9.png", "width": 80,
                                                                   "height": 60}]}, "1 of its 3 images are missing"),
        "a malformed box": ({**good, "annotations": [{**good["annotations"][0], "bbox": [5, 5, -2, 10]}]},
                            "annotations[0]: its bbox [5, 5, -2, 10] does not lie inside its 80x60 image"),
        "a box of three numbers": ({**good, "annotations": [{**good["annotations"][0], "bbox": [5, 5, 2]}]},
                                   "annotations[0]: its bbox [5, 5, 2] is not [x, y, width, height]"),
        "an unknown category": ({**good, "annotations": [{**good["annotations"][0], "category_id": 8}]},
                                "annotations[0] has category 8, which is not among its categories"),
        "an unknown image": ({**good, "annotations": [{**good["annotations"][0], "image_id": 5}]},
                             "annotations[0] names no image of the file"),
        "no lists": ({"images": {}}, "not a COCO instances file"),
        "an image twice": ({**good, "images": [*good["images"], {**good["images"][0], "id": 7}]},
                           "images[2] (0.png, id 7) is listed twice"),
        "a text id": ({**good, "categories": [{"id": "b", "name": "b"}]}, "its categories need integer ids, each once"),
        "a text area": ({**good, "annotations": [{**good["annotations"][0], "area": "big"}]},
                        "annotations[0]: its area or iscrowd is not a number"),
    }
    import json

    for what, (data, said) in bad.items():
        (folder / "instances.json").write_text(json.dumps(data))
        code = main(["--model", str(model), "--task", "detection", "--eval-dir", str(folder),
                     "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and said in err[0], (what, err)
    (folder / "instances.json").write_text(json.dumps(good))
    for argv, said in (([str(model), "--task", "raw"], "measures no accuracy for yolo-"),
                       (["mobilenet_v3_small"], "--eval-dir: a COCO instances file labels its images with boxes, "
                                                "and mobilenet_v3_small (classification) is measured on classes")):
        code = main(["--model", *argv, "--eval-dir", str(folder), "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(tmp_path / "c")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and said in err[0], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "c").exists()


def test_an_int8_detector_whose_boxes_are_lost_after_the_suppression_fails_as_a_broken_export():
    """Without labelled images an INT8 cell is speed only, unless its results after the task's post-processing are
    so far from FP32's that no correct quantisation comes near (a YOLO head's scores quantised to 0 with its boxes'
    scale: no box left); then it fails, as a classifier below the gross floor does."""
    from inferbench.scenarios.gates import broken_after

    lost = {"boxes_reference": 4378, "boxes_candidate": 0, "matched": 0, "matched_share": 0.0, "images": 16}
    kept = {**lost, "boxes_candidate": 4300, "matched": 4250, "matched_share": 4250 / 4378}
    unjudged = {"status": "unjudged", "reason": "speed only: INT8's accuracy not judged"}
    failed = broken_after(detection, {**unjudged, "after_postprocess": lost})
    assert failed["status"] == "failed" and failed["reason"].startswith(
        "INT8: its detections after the shared suppression match FP32's on 0.0% of 4378 boxes") and \
        "a broken export" in failed["reason"]
    assert broken_after(detection, {**unjudged, "after_postprocess": kept})["status"] == "unjudged"
    assert broken_after(detection, {**unjudged, "after_postprocess": {**lost, "boxes_reference": 3}})["status"] == \
        "unjudged"  # too few boxes to say
    assert broken_after(segmentation, {**unjudged, "after_postprocess": {"mean_iou": 0.04, "pixel_agreement": 0.3,
                                                                          "pixels": 10, "images": 1}})["status"] == \
        "failed"


def test_a_classifier_exported_with_dimensions_of_1_is_still_a_classifier():
    from inferbench.tasks import classification

    for shape in ((1000,), (1000, 1, 1), (1, 1000)):
        assert guess([Output("logits", shape)], (224, 224)) == "classification", shape
    declared = classification.kinds([Output("prob", (10, 1, 1))], "squeezenet.onnx")
    scores = np.arange(20.0).reshape(2, 10, 1, 1)
    ((array, kind),) = classification.parts({"prob": scores}, declared).values()
    assert array.shape == (2, 10) and kind == "scores"
    assert guess([Output("masks", (21, 64, 64))], (32, 32)) == "raw"  # not the image's size: no segmenter's


def test_a_model_files_task_keys_its_cache_and_a_classifiers_key_is_what_it_was(tmp_path):
    from inferbench.exporters import key_inputs

    plain = key_inputs("net-1234abcd", 64, "random", 0)
    assert key_inputs("net-1234abcd", 64, "random", 0, "classification") == plain and "task" not in plain
    assert key_inputs("net-1234abcd", 64, "random", 0, "detection") != key_inputs("net-1234abcd", 64, "random", 0,
                                                                                   "raw")


def test_a_part_that_fails_only_on_the_timed_batch_shows_as_failed():
    from inferbench.measure.parity import combine

    head = _head()
    good = _judge(head, head.copy())
    shifted = head.copy()
    shifted[:, 1, :] += 1.0
    out = combine(good, _judge(head, shifted), 4)
    assert out["status"] == "failed" and out["outputs"]["output0.boxes"]["status"] == "failed"
    assert out["outputs"]["output0.scores"]["status"] == "passed"


def test_the_post_processing_is_not_timed_for_a_cell_that_failed_parity_or_gave_another_shape(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from detectors import yolo_layout_onnx

    from inferbench.registry import models
    from inferbench.registry.modelfiles import open_model_file
    from inferbench.registry.models import register
    from inferbench.registry.outputs import write_layout
    from inferbench.scenarios import postprocess

    monkeypatch.setattr(models, "_FILES", {})  # a name is taken once per process: this test's file alone
    found = open_model_file(str(yolo_layout_onnx(tmp_path / "yolo.onnx")), asked="detection")
    register(found)
    (tmp_path / "reference").mkdir()
    write_layout(tmp_path / "reference" / "outputs.json", [Output("output0", (7, 84))])
    from inferbench.spec import RunnerOptions

    job = SimpleNamespace(cell=SimpleNamespace(model=found.name, batch_size=1, options=RunnerOptions()),
                          artifact_dir=str(tmp_path))
    head = np.zeros((1, 7, 84), dtype=np.float32)
    failed = postprocess.timed(job, head, lambda _: None, {"status": "failed"})
    assert failed["error"] == "not timed: the cell failed parity" and "ms_p50" not in failed
    other = postprocess.timed(job, np.zeros((1, 7, 80), dtype=np.float32), lambda _: None, {"status": "passed"})
    assert other["error"].startswith("not timed: flat outputs of shape (1, 560)")
    ok = postprocess.timed(job, head, lambda _: None, {"status": "passed"})
    assert ok["ms_p50"] > 0 and ok["kept"] == [0] and ok["calls"] >= postprocess.CALLS


def test_the_labelled_images_outputs_are_held_within_a_bound_said_in_one_line():
    from inferbench.exporters.evaluation import MAX_BYTES, bounded

    small = [np.zeros((4, 10), dtype=np.float32)] * 3
    assert len(list(bounded(iter(small), 12, "net"))) == 3
    per_image = MAX_BYTES // 100  # a hundred images fit
    big = iter([np.zeros((1, per_image // 4), dtype=np.float32)])
    with pytest.raises(UsageError, match=r"--eval-dir: det's outputs take .* for 1000 images, held whole: give "
                                         r"--eval-images 100 or fewer"):
        list(bounded(big, 1000, "det"))


def _halves(n, shifted):
    """``n`` 10 x 10 masks, the left half class 0 and the right half class 1, the top row 255 (not counted); and each
    one's scores, class 0's column widened by one (column 5 called 0: 9 counted pixels wrong) in the ``shifted``
    images."""
    truth = np.zeros((n, 10, 10), np.int32)
    truth[:, :, 5:] = 1
    truth[:, 0, :] = 255
    scores = np.zeros((n, 3, 10, 10), np.float32)
    for i in range(n):
        called = np.where(np.arange(10) < (6 if i in shifted else 5), 0, 1)
        scores[i, called[None, :].repeat(10, 0), np.arange(10)[:, None], np.arange(10)[None, :]] = 1.0
    return truth, scores


def test_a_segmenters_mean_iou_is_known_on_masks_whose_iou_is_known():
    """Six masks of two halves, three of them called one column too wide: class 0's IoU is 270 / 297 (its 270 pixels,
    27 of class 1's called 0), class 1's 243 / 270, their mean 0.9045; 513 of 540 counted pixels right (0.95); the top
    row (255) and class 2 (in no mask, never called) count for nothing; held to 99% of FP32's, which calls none
    wrong."""
    truth, perfect = _halves(6, ())
    _, wide = _halves(6, (0, 2, 4))
    outputs = [Output("out", (3, 10, 10), "masks")]
    got = segmentation.accuracy(truth, {"out": wide}, {"out": perfect}, outputs, "int8")
    assert got["miou"]["value"] == pytest.approx((270 / 297 + 243 / 270) / 2) and got["miou"]["fp32"] == 1.0
    assert got["pixel_accuracy"]["value"] == pytest.approx(513 / 540)
    assert got["status"] == "failed" and "below MLPerf's 99%" in got["reason"] and got["short"].startswith("mIoU 0.905")
    lo, hi = got["miou"]["ci95"]
    assert lo < got["miou"]["value"] < hi and got["miou"]["difference_ci95"][1] < 0  # resamples: 0 to 3 wide ones
    same = segmentation.accuracy(truth, {"out": perfect}, {"out": perfect}, outputs, "fp16")
    assert same["status"] == "passed" and same["miou"]["difference_ci95"] == [0.0, 0.0]
    assert segmentation.accuracy(truth, {"out": wide}, {"out": perfect}, outputs, "fp32")["status"] == "measured"
    small = segmentation.accuracy(truth[:, :5, :5], {"out": wide}, {"out": perfect}, outputs, "fp32")
    assert small["status"] == "not_measured" and "10x10" in small["reason"]


def test_images_and_masks_are_checked_before_any_export_and_read_as_the_images_are(tmp_path, capsys, monkeypatch):
    from detectors import segmenter_onnx
    from PIL import Image

    from inferbench.registry import images, models
    from inferbench.run import main

    monkeypatch.setattr(models, "_FILES", {})
    model = segmenter_onnx(tmp_path / "seg.onnx", size=32, classes=4)
    folder = tmp_path / "voc"
    (folder / "images").mkdir(parents=True)
    (folder / "masks").mkdir()
    for i in range(3):
        Image.new("RGB", (40, 20), (60 * i, 90, 200)).save(folder / "images" / f"{i}.jpg")
        mask = np.zeros((20, 40), np.uint8)
        mask[:, 20:] = i + 1
        mask[:3] = 255
        Image.fromarray(mask, "L").save(folder / "masks" / f"{i}.png")
    es = images.open_eval_set(str(folder), 10, 0)
    assert (es.layout, es.images) == ("masks", 3) and "images/ and masks/" in es.describe()
    truth = images.labels(es, images.items(es), 8)
    assert truth.shape == (3, 8, 8) and truth[2, 4, 0] == 0 and truth[2, 4, 7] == 3 and truth[0, 0, 0] == 255
    Image.fromarray(np.full((20, 40), 2, np.uint8), "L").save(folder / "masks" / "1.png")
    with pytest.raises(UsageError, match="changed while inferbench was using them"):
        images.items(es)  # a mask changed is another set
    bad = {"no mask": (lambda: (folder / "masks" / "2.png").unlink(),
                       "1 of its 3 images have no mask in masks/, e.g. " + str(folder / "masks" / "2.png")),
           "another size": (lambda: Image.new("L", (20, 20)).save(folder / "masks" / "2.png"),
                            "2.png is 20x20 pixels, its image " + str(folder / "images" / "2.jpg") + " 40x20"),
           "a colour mask": (lambda: Image.new("RGB", (40, 20)).save(folder / "masks" / "2.png"),
                             "this one is RGB (a colour mask: save its class indices)")}
    for what, (spoil, said) in bad.items():
        spoil()
        code = main(["--model", str(model), "--task", "segmentation", "--eval-dir", str(folder),
                     "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and said in err[0], (what, err)
        Image.fromarray(np.zeros((20, 40), np.uint8), "L").save(folder / "masks" / "2.png")
    code = main(["--model", "mobilenet_v3_small", "--eval-dir", str(folder), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "a folder of images and masks labels its images with masks, and mobilenet_v3_small " \
        "(classification) is measured on classes" in err[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "c").exists()


def test_ssd_heads_are_decoded_as_torchvisions_box_coder_decodes_them():
    """Two anchors; the first's regression moves it one width right (dx 10 / weight 10), the second's doubles its width
    about its centre (dw 5 log 2 / weight 5), then clipped to the 32 x 48 input; class 2 near-certain for the first
    anchor, the second's logits all 0 (a third each: kept for both object classes, which never suppress each other)."""

    anchors = np.array([[[0, 0, 10, 10], [10, 20, 30, 40]]], np.float32)
    regression = np.array([[[10, 0, 0, 0], [0, 0, 5 * np.log(2), 0]]], np.float32)
    logits = np.array([[[0, 0, 10], [0, 0, 0]]], np.float32)
    arrays = {"bbox_regression": regression, "cls_logits": logits, "anchors": anchors,
              "image_size": np.array([[48, 32]], np.float32)}
    outputs = [Output(n, a.shape[1:]) for n, a in arrays.items()]
    assert detection.kinds(outputs, "here")[2].kind == "boxes" and set(detection.parts(arrays, outputs)) == set(arrays)
    (found,) = detection.postprocess(arrays, outputs)
    assert found["category_ids"] and found["classes"].tolist() == [2, 1, 2]
    assert found["scores"][0] == pytest.approx(np.exp(10) / (np.exp(10) + 2))
    assert found["scores"][1] == pytest.approx(1 / 3)
    assert np.allclose(found["boxes"], [[10, 0, 20, 10], [0, 20, 32, 40], [0, 20, 32, 40]])  # x clipped at 32
    with pytest.raises(UsageError, match=r"SSD's heads \(bbox_regression, cls_logits, anchors, image_size\) or the "
                       r"detections a graph kept"):
        detection.kinds(outputs[:2], "here")


def test_ssd_detections_are_matched_saying_the_suppression_that_kept_them():
    """The agreement after the suppression names the settings that kept the boxes: an SSD's (torchvision's 0.001,
    0.55, 300), a YOLO head's (Ultralytics' 0.25, 0.7, 300)."""
    from inferbench.tasks import ssd

    box = {"boxes": np.array([[0.0, 0, 10, 10]]), "scores": np.array([0.9]), "classes": np.array([1])}
    assert detection.agreement([{**box, "category_ids": True}], [box])["method"].endswith(ssd.DEFAULT.said())
    assert detection.agreement([box], [box])["method"].endswith(nms.DEFAULT.said()) and \
        ssd.DEFAULT.said() != nms.DEFAULT.said()


def kept_detections(n=12, cap=12, seed=0):
    """Detections a graph kept (torchvision's Faster R-CNN layout): ``n`` images of 8 to 10 boxes (108 in all at 12),
    best first, the rest of the cap rows of zeros; distinct classes within an image so that no two boxes compete in a
    match."""
    rng = np.random.default_rng(seed)
    boxes, scores, labels = np.zeros((n, cap, 4), np.float32), np.zeros((n, cap), np.float32), np.zeros((n, cap))
    for k in range(n):
        m = 8 + k % 3
        corner = rng.uniform(0, 200, (m, 2))
        boxes[k, :m] = np.concatenate([corner, corner + rng.uniform(20, 80, (m, 2))], 1)
        scores[k, :m] = np.sort(rng.uniform(0.3, 0.95, m))[::-1]
        scores[k, m - 1] = 0.06  # the last one kept, at the score floor
        labels[k, :m] = rng.permutation(np.arange(1, 91))[:m]
    return {"boxes": boxes, "scores": scores, "labels": labels.astype(np.float32)}


def dropped(found, image, row):
    """``found`` with the detection at ``row`` of ``image`` gone, the rows below it moved up."""
    out = {k: v.copy() for k, v in found.items()}
    for v in out.values():
        v[image, row:-1] = v[image, row + 1:]
        v[image, -1] = 0
    return out


def test_detections_a_graph_kept_are_judged_pair_by_pair_whatever_their_order():
    """Faster R-CNN's outputs (its suppression in the graph): the same detections in another order pass parity (two
    scores within rounding swap places); every box moved 2 px fails naming ``boxes``; what a suppression's rounding
    leaves (a detection one side lacks, two tied boxes kept the one by one runtime and the other by the other) passes
    at the boundary or while at most 1% of the detections, and fails beyond; wrong labels fail naming ``labels``."""
    from inferbench.scenarios.gates import judge_outputs
    from inferbench.tasks import ingraph

    ref = kept_detections()
    outputs = detection.kinds([Output(k, v.shape[1:]) for k, v in ref.items()], "here")
    assert detection.claims(outputs, (320, 320)) and [o.kind for o in outputs] == ["boxes", "kept_scores", "values"]
    assert guess(outputs, (320, 320)) == "detection"

    def judged(cand, against=ref):
        flat = [packed(x, list(ingraph.NAMES)) for x in (against, cand)]
        return judge_outputs(detection, outputs, flat[0], flat[1], "fp32", None, None)

    swapped = {k: v.copy() for k, v in ref.items()}
    for v in swapped.values():
        v[0, [1, 2]] = v[0, [2, 1]]  # two detections in another order
    assert judged(ref)["status"] == judged(swapped)["status"] == "passed"
    moved = {k: v.copy() for k, v in swapped.items()}
    moved["boxes"][:, :, 0] += 2.0 * (moved["scores"] > 0)  # every box 2 px to the right: a wrong decoding
    check = judged(moved)
    assert check["status"] == "failed" and check["outputs"]["boxes"]["status"] == "failed", check
    assert "boxes" in check["reason"] and check["outputs"]["labels"]["status"] == "passed"
    tie = {k: v.copy() for k, v in swapped.items()}
    tie["boxes"][1, 3] += 6.0  # one of 108: another box of near-equal score kept in its place (a tie broken otherwise)
    two = {k: v.copy() for k, v in tie.items()}
    two["boxes"][2, 4] += 6.0
    assert judged(tie)["status"] == "passed" and judged(two)["status"] == "failed"
    assert judged(dropped(ref, 0, 7))["status"] == "passed"  # the last one kept (0.06): at the score floor
    assert judged(dropped(ref, 0, 2))["status"] == "passed"  # one of 108 in the middle: within a suppression's rounding
    assert judged(dropped(dropped(ref, 0, 2), 3, 1))["status"] == "failed"  # two: no rounding
    few = {k: v[:3].copy() for k, v in ref.items()}  # 27 detections: none may be left out but at a boundary
    assert judged(dropped(few, 1, 7), few)["status"] == "failed" and judged(dropped(few, 1, 8), few)["status"] == \
        "passed"
    junk = {k: v.copy() for k, v in ref.items()}
    junk["boxes"][2, 11] = [1, 2, 3, 4]  # a padding row (score 0) that is not all zeros
    assert judged(junk)["status"] == "failed" and "boxes" in judged(junk)["reason"]
    relabelled = {k: v.copy() for k, v in ref.items()}
    relabelled["labels"][2] = np.roll(relabelled["labels"][2][:10], 1).tolist() + [0, 0]
    assert judged(relabelled)["status"] == "failed" and "labels" in judged(relabelled)["reason"]
    kept = detection.postprocess(ref, outputs)
    assert [len(d["scores"]) for d in kept[:3]] == [8, 9, 10] and all(d["category_ids"] for d in kept)
    said = detection.agreement(kept, detection.postprocess(swapped, outputs))
    assert said["matched_share"] == 1.0 and said["method"].endswith(ingraph.KEPT_BY)
    assert detection.kept_for_map(outputs) == f"{ingraph.KEPT_BY} (at most 12 an image)"


def test_postprocess_inside_runs_the_tasks_postprocessing_in_every_timed_call():
    """--postprocess inside: each timed call copies the outputs to the host and post-processes them (the cell named
    '+post-inside', its region said); outside, the call alone is timed and the post-processing is never called."""
    from inferbench.scenarios.base import timed_call
    from inferbench.spec import CellKey, RunnerOptions

    done = []

    class Runner:
        def prepare(self, x):
            done.append("h2d")
            return x

        def call(self, x):
            done.append("call")
            return {"out": x}

        def to_numpy(self, out):
            done.append("d2h")
            return out

        def synchronize(self, out):
            done.append("sync")

    def post(host):
        done.append("post")
        return host

    batch = np.zeros((1, 3))
    for options, region, each in [
            (RunnerOptions(postprocess="inside"), "call+d2h+postprocess", ["call", "d2h", "post"]),
            (RunnerOptions(postprocess="inside", include_transfer=True), "h2d+call+d2h+postprocess",
             ["h2d", "call", "d2h", "post"]),
            (RunnerOptions(), "call+sync", ["call", "sync"])]:
        cell = CellKey("mobilenet_v3_large", 224, 1, "onnxrt", options=options)
        call, sync, said = timed_call(Runner(), batch, batch, cell, post)
        done.clear()
        for _ in range(2):
            sync(call())
        assert said == region and done == each * 2, (said, done)
    assert CellKey("m", 224, 1, "onnxrt", options=RunnerOptions(postprocess="inside")).variant == "post-inside"
    with pytest.raises(ValueError, match="postprocess must be one of outside, inside"):
        RunnerOptions(postprocess="both")


def test_a_detectors_agreement_over_many_inputs_is_counted_after_the_shared_suppression(tmp_path, monkeypatch):
    """A detector's reduced precision is held to FP32 over the agreement inputs after the shared suppression, as a
    classifier's is by its top class: the reference's detections exported a chunk at a time (never the raw heads of
    every input held), a runtime's batches post-processed as they come. The same detector agrees on every box;
    one whose boxes moved 40 px is a broken export and fails, said over the seeded inputs; one that raises is not
    counted and the 16-input gate stands."""
    from detectors import yolo_layout_onnx
    from fakes import Stub

    from inferbench.base.device import Device
    from inferbench.exporters import agreement as agreement_export
    from inferbench.exporters import cache
    from inferbench.exporters.agreement import post_processed
    from inferbench.exporters.reference import Source
    from inferbench.registry import models
    from inferbench.registry.artifacts import REFERENCE_OUTPUTS, ExportContext
    from inferbench.registry.frameworks import FRAMEWORKS
    from inferbench.registry.modelfiles import open_model_file
    from inferbench.registry.outputs import write_layout
    from inferbench.scenarios.gates import check_agreement
    from inferbench.spec import CellJob, CellKey, RunConfig, RunnerOptions, TimingConfig

    monkeypatch.setattr(models, "_FILES", {})
    spec = open_model_file(str(yolo_layout_onnx(tmp_path / "yolo.onnx", size=64, classes=3)))
    models.register(spec)
    anchors = detection.anchors((64, 64))
    centres = np.random.default_rng(1).uniform(8, 56, (2, anchors))
    weights = np.random.default_rng(2).normal(0, 1, (3 * 64 * 64, 3 * anchors)) / 40

    def head(x, shift=0.0):  # boxes at fixed centres, 12 px, class scores that follow the image
        n = len(x)
        scores = 0.5 + 0.5 * np.tanh((x.reshape(n, -1) @ weights).reshape(n, 3, anchors) / 2)  # a sigmoid
        sizes = np.full((n, 2, anchors), 12.0)
        return np.concatenate([np.broadcast_to(centres + shift, (n, 2, anchors)), sizes, scores], axis=1)

    (tmp_path / "reference").mkdir()
    write_layout(tmp_path / REFERENCE_OUTPUTS, detection.kinds([Output("output0", (7, anchors))], "test"))
    ctx = ExportContext(tmp_path, spec.name, 64, "random", 0, variants=("40",))
    calls = []
    path = post_processed(ctx, Source(lambda x: calls.append(len(x)) or head(x), ("output0",), 32), 40)
    assert calls == [32, 8]  # a chunk at a time
    with monkeypatch.context() as m:  # held whole in each cell: bounded
        m.setattr(agreement_export, "MAX_RESULTS_BYTES", 1000)
        with pytest.raises(RuntimeError, match=r"GiB for 400 held whole in each cell: --agreement-inputs \d+ or fewer"):
            post_processed(ctx, Source(head, ("output0",), 32), 400)
    cache.record(tmp_path, "agreement", {"variants": ["40"], "files": cache.hash_tree(tmp_path / path, tmp_path)},
                 {})
    config = RunConfig(weights="random", seed=0, device=Device("cpu"), threads=1,
                       timing=TimingConfig(0, 0.0, 0.0, 3, 1), options=RunnerOptions(), cache_dir=str(tmp_path),
                       agreement_inputs=40)
    job = CellJob(CellKey(spec.name, 64, 8, "onnxrt", "int8"), FRAMEWORKS["onnxrt"], config, str(tmp_path), None,
                  (8,))
    said = []
    same = check_agreement(job, Stub(head), said.append)
    assert said[-1] == "parity check: agreement over 40 inputs after the post-processing"
    after = same["after_postprocess"]
    assert same["status"] == "measured" and same["inputs"] == 40 and after["images"] == 40
    assert after["matched_share"] == 1.0 and after["boxes_reference"] > 40 and same["reason"] is None
    assert same["said"].endswith("boxes over 40 seeded agreement inputs")
    moved = check_agreement(job, Stub(lambda x: head(x, shift=40.0)), said.append)
    assert moved["status"] == "failed" and moved["after_postprocess"]["matched_share"] < 0.2
    assert moved["reason"].endswith("seeded agreement inputs, below 10%: a broken export")
    fails = check_agreement(job, Stub(lambda x: 1 / 0), said.append)
    assert fails["status"] == "not_measured" and "ZeroDivisionError" in fails["reason"]


def test_post_processed_results_are_kept_as_they_were_in_plain_arrays(tmp_path):
    """Detections of varying counts (none in one image) and masks come back from their file as they went in, a
    mask's classes kept in a byte a pixel from when they are gathered; nothing in the file needs a pickle."""
    from inferbench.tasks import stored

    rng = np.random.default_rng(0)
    boxes = [{"boxes": rng.uniform(0, 64, (k, 4)).astype(np.float32), "scores": rng.uniform(0, 1, k),
              "classes": rng.integers(0, 300, k), "category_ids": True} for k in (3, 0, 5)]
    masks = [{"mask": rng.integers(0, 21, (6, 8)), "classes": 21} for _ in range(2)]
    for name, results in (("boxes", boxes), ("masks", masks)):
        stored.save(tmp_path / f"{name}.npz", results)
        back = stored.load(tmp_path / f"{name}.npz")
        assert len(back) == len(results) and [set(r) for r in back] == [set(r) for r in results]
        for got, want in zip(back, results):
            for key, value in want.items():
                assert np.array_equal(got[key], value) and (np.asarray(got[key]).dtype.kind in "iu") == (
                    np.asarray(value).dtype.kind in "iu"), (name, key)
    with np.load(tmp_path / "masks.npz", allow_pickle=False) as data:
        assert data["mask.values"].dtype == np.uint8
    assert stored.compact(masks)[0]["mask"].dtype == np.uint8 and stored.compact(boxes)[0]["scores"].dtype == float
    assert segmentation.agreement(masks, stored.load(tmp_path / "masks.npz"))["pixel_agreement"] == 1.0
