"""Accuracy on the user's labelled images (--eval-dir): the bounded loader of the two layouts, the paired interval of
an accuracy difference (simulated with a known truth), MLPerf's gate, and a cell's accuracy through the harness (a
stub runner: a fixed function of its inputs)."""

from __future__ import annotations

import numpy as np
import pytest
from labelled import colour_classes, colour_image

from inferbench.base.errors import UsageError


@pytest.fixture(scope="module")
def colours(tmp_path_factory):
    return colour_classes(tmp_path_factory.mktemp("colours"), per_class=6)


def test_a_folder_per_class_is_numbered_as_imagefolder_numbers_it_and_a_class_names_file_beside_is_not_read(
        colours, tmp_path):
    from PIL import Image

    from inferbench.registry import images

    es = images.open_eval_set(str(colours), 1000, 0)
    assert (es.layout, es.images, es.found, es.classes) == ("folders", 18, 18, 3)
    listed = images.items(es)
    assert {p.parent.name: label for p, label in listed} == {"blue": 0, "green": 1, "red": 2}
    assert "18 labelled images" in es.describe() and "ImageFolder numbers them: blue=0 ... red=2" in es.describe()
    for number in ("7", "10", "2"):  # numbered folders are sorted as text, as torchvision's ImageFolder sorts them
        (tmp_path / number / "nested").mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / number / "nested" / "a.png")
    (tmp_path / "7" / ".hidden.png").write_bytes(b"not read")
    (tmp_path / "7" / "notes.txt").write_text("not an image")
    (tmp_path / "labels.txt").write_text("ten\ntwo\nseven\n")  # class names (Keras, TFLite): not a list of images
    (tmp_path / "2" / "nested" / "loop").symlink_to(tmp_path / "2")  # a link back up: walked once
    numbered = images.open_eval_set(str(tmp_path), 1000, 0)
    assert {p.parts[-3]: label for p, label in images.items(numbered)} == {"10": 0, "2": 1, "7": 2}
    assert numbered.layout == "folders" and numbered.images == 3 and "10=0 ... 7=2" in numbered.describe()


def test_a_labels_file_in_the_folder_or_named_itself_is_read_with_a_header_comments_and_any_separator(tmp_path):
    from PIL import Image

    from inferbench.registry import images

    (tmp_path / "img").mkdir()
    for name in ("a.jpg", "b c.png", "d.png"):
        Image.new("RGB", (10, 12), (10, 20, 30)).save(tmp_path / "img" / name)
    (tmp_path / "labels.csv").write_text("# a comment\r\npath,label\r\nimg/a.jpg, 3\r\n\r\nimg/b c.png\t1\r\n"
                                         f"{tmp_path / 'img' / 'd.png'} 0\r\n")  # an absolute path too
    for given in (tmp_path, tmp_path / "labels.csv"):
        es = images.open_eval_set(str(given), 1000, 0)
        assert es.layout == "labels" and es.path == str(tmp_path / "labels.csv")
        assert [(p.name, label) for p, label in images.items(es)] == [("a.jpg", 3), ("b c.png", 1), ("d.png", 0)]
        assert [label for _, label in images.items(es)] == [3, 1, 0] and es.classes == 4
    for text, said in (("img/a.jpg 1\nimg/missing.png 2\n", "1 of its 2 images are missing, e.g."),
                       ("img/a.jpg 1\nimg/a.jpg 2\n", "line 2: img/a.jpg is listed twice"),
                       ("img/a.jpg 1\nimg/d.png cat\n", "line 2: 'img/d.png cat' is not 'path label'"),
                       ("# nothing\n", "no images")):
        (tmp_path / "labels.csv").write_text(text)
        with pytest.raises(UsageError, match=said):
            images.open_eval_set(str(tmp_path / "labels.csv"), 1000, 0)
        assert images.open_eval_set(str(tmp_path), 1000, 0).layout == "folders"  # no list of images: img/ a class


def test_what_is_no_labelled_set_is_refused_in_one_line(tmp_path):
    from PIL import Image

    from inferbench.registry import images

    with pytest.raises(UsageError, match="no such folder or labels file"):
        images.open_eval_set(str(tmp_path / "nowhere"), 10, 0)
    with pytest.raises(UsageError, match="no class folders and no labels file"):
        images.open_eval_set(str(tmp_path), 10, 0)
    Image.new("RGB", (8, 8)).save(tmp_path / "loose.png")
    with pytest.raises(UsageError, match="1 images but no class folders"):
        images.open_eval_set(str(tmp_path), 10, 0)
    (tmp_path / "cat").mkdir()
    with pytest.raises(UsageError, match="no images"):
        images.open_eval_set(str(tmp_path), 10, 0)


def test_images_past_the_bounds_or_not_images_are_refused_naming_the_file(tmp_path, monkeypatch):
    from PIL import Image

    from inferbench.registry import images

    (tmp_path / "a").mkdir()
    bomb = tmp_path / "a" / "bomb.png"
    Image.new("1", (10_000, 9_000)).save(bomb)  # 90 million pixels in a small file: refused from its header
    assert bomb.stat().st_size < 2**20
    with pytest.raises(UsageError, match=r"bomb.png: 10000x9000 pixels, over the 89.5 million .*decompression bomb"):
        images.open_eval_set(str(tmp_path), 10, 0)
    bomb.unlink()
    fake = tmp_path / "a" / "fake.jpg"
    fake.write_text("no JPEG at all")
    with pytest.raises(UsageError, match="fake.jpg: not an image Pillow can read"):
        images.open_eval_set(str(tmp_path), 10, 0)
    fake.unlink()
    good = tmp_path / "a" / "good.jpg"
    Image.fromarray(colour_image(np.random.default_rng(0), 0, (200, 300))).save(good, quality=90)
    images.open_eval_set(str(tmp_path), 10, 0)
    monkeypatch.setattr(images, "MAX_FILE_BYTES", 100)
    with pytest.raises(UsageError, match=r"good.jpg holds [\d,]+ bytes, over the"):
        images.open_eval_set(str(tmp_path), 10, 0)
    monkeypatch.undo()
    data = good.read_bytes()
    good.write_bytes(data[:len(data) // 3])  # truncated: its header reads, its pixels do not
    truncated = images.open_eval_set(str(tmp_path), 10, 0)
    with pytest.raises(UsageError, match="good.jpg: not an image Pillow can read"):
        list(images.inputs(_spec(), images.items(truncated), 32))


def _spec():
    from inferbench.registry.models import get_model

    return get_model("mobilenet_v3_large")  # its preparation is in the model: the inputs are the pixels


def test_images_are_resized_by_the_shorter_side_centre_cropped_and_made_rgb(tmp_path):
    from PIL import Image

    from inferbench.registry import images

    wide = np.zeros((40, 120, 3), dtype=np.uint8)
    wide[:, :40] = (255, 0, 0)
    wide[:, 40:80] = (0, 255, 0)
    wide[:, 80:] = (0, 0, 255)
    Image.fromarray(wide).save(tmp_path / "wide.png")
    out = images.read(tmp_path / "wide.png", 32)
    assert out.shape == (32, 32, 3) and out.dtype == np.float32
    assert np.allclose(out[:, 8:24], [0, 255, 0], atol=1)  # the centre third: green, the sides cropped away
    Image.new("LA", (50, 70), (128, 255)).save(tmp_path / "grey.png")
    assert np.allclose(images.read(tmp_path / "grey.png", 16), 128, atol=1)
    Image.new("P", (33, 33)).save(tmp_path / "palette.bmp")
    assert images.read(tmp_path / "palette.bmp", 64).shape == (64, 64, 3)  # smaller than the resolution: enlarged
    Image.new("RGB", (40_000, 1)).save(tmp_path / "line.png")  # its centre square, never a 7 GB enlargement
    assert images.read(tmp_path / "line.png", 224).shape == (224, 224, 3)
    Image.fromarray(np.full((20, 20), 32768, dtype=np.uint16)).save(tmp_path / "deep.png")  # 16 bits: scaled
    assert np.allclose(images.read(tmp_path / "deep.png", 16), 128, atol=1)
    Image.fromarray(np.full((20, 20), 0.5, dtype=np.float32)).save(tmp_path / "float.tiff")
    with pytest.raises(UsageError, match="float.tiff: floating-point pixels .* whose scale inferbench cannot know"):
        images.read(tmp_path / "float.tiff", 16)
    upright = np.zeros((30, 60, 3), dtype=np.uint8)
    upright[:, :30] = 255  # white on the left
    exif = Image.Exif()
    exif[0x0112] = 3  # stored upside down: turned by 180 degrees when read
    Image.fromarray(upright).save(tmp_path / "turned.jpg", exif=exif, quality=95)
    turned = images.read(tmp_path / "turned.jpg", 16)
    assert turned[:, :4].mean() < 30 and turned[:, -4:].mean() > 220


def test_a_larger_set_is_sampled_by_seed_and_a_set_changed_under_a_run_is_refused(colours, tmp_path):
    import shutil

    from inferbench.registry import images

    a, b, c = (images.open_eval_set(str(colours), 7, s) for s in (0, 0, 1))
    assert a == b and a.images == 7 and a.found == 18 and "a seeded sample of the 18" in a.describe()
    assert [p for p, _ in images.items(a)] != [p for p, _ in images.items(c)] and a.digest != c.digest
    copy = shutil.copytree(colours, tmp_path / "copy", copy_function=shutil.copy2)
    moved = images.open_eval_set(str(copy), 7, 0)
    assert moved.digest == a.digest  # moved whole: the same set
    (copy / "red" / "000.jpg").unlink()
    with pytest.raises(UsageError, match="changed while inferbench was using them"):
        images.items(moved)


def _paired(rng, n, p1, p2, rho):
    """Paired outcomes from a latent bivariate normal (not the interval's own model): right where below a threshold."""
    from statistics import NormalDist

    z = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n)
    x, y = z[:, 0] < NormalDist().inv_cdf(p1), z[:, 1] < NormalDist().inv_cdf(p2)
    return int(np.sum(x & y)), int(np.sum(x & ~y)), int(np.sum(~x & y)), int(np.sum(~x & ~y))


def _flipped(rng, n, p, flip):
    """A reduced precision's outcomes beside FP32's: FP32 right with probability ``p``, the other's outcome that one
    flipped with probability ``flip`` (few disagreements, as a close computation gives)."""
    x = rng.random(n) < p
    y = np.where(rng.random(n) < flip, ~x, x)
    return int(np.sum(x & y)), int(np.sum(x & ~y)), int(np.sum(~x & y)), int(np.sum(~x & ~y))


@pytest.mark.parametrize("n,p1,p2,rho", [(300, 0.80, 0.76, 0.7), (1000, 0.95, 0.94, 0.5), (120, 0.6, 0.6, 0.9),
                                         (100, 0.8, None, 0.03), (1000, 0.7, None, 0.01)])
def test_the_paired_difference_interval_covers_the_true_difference_95_percent_of_the_time(n, p1, p2, rho):
    from inferbench.measure.stats import paired_difference

    rng = np.random.default_rng(7)
    covered, widths = 0, []
    truth = p1 - p2 if p2 is not None else p1 - (p1 * (1 - rho) + (1 - p1) * rho)  # flips: the second's accuracy
    for _ in range(1500):
        counts = _paired(rng, n, p1, p2, rho) if p2 is not None else _flipped(rng, n, p1, rho)
        lo, hi = paired_difference(*counts)
        covered += lo <= truth <= hi
        widths.append(hi - lo)
    assert 0.93 <= covered / 1500 <= (0.975 if p2 is not None else 1.0)  # few disagreements: conservative, as said
    # correlated outcomes (the same images) give a narrower interval than two independent samples would
    p2 = p1 - truth
    independent = 2 * 1.96 * np.sqrt(p1 * (1 - p1) / n + p2 * (1 - p2) / n)
    assert np.median(widths) < (0.8 if rho >= 0.7 or p2 is None else 1.0) * independent
    assert paired_difference(0, 0, 0, 0) is None


def _outcomes(n, fp32_right, flipped_wrong, seed=0, classes=10):
    """Labels, FP32 scores right on ``fp32_right`` of ``n`` images, and a candidate's: FP32's, wrong on
    ``flipped_wrong`` of the images FP32 has right."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    reference = rng.normal(size=(n, classes))
    right = rng.permutation(n) < fp32_right
    reference[np.arange(n), labels] = np.where(right, 10.0, -10.0)
    candidate = reference.copy()
    flip = np.flatnonzero(right)[:flipped_wrong]
    candidate[flip, labels[flip]] = -10.0
    return labels, candidate, reference


def test_mlperfs_gate_fails_a_clear_loss_passes_a_small_one_and_says_a_loss_too_few_images_decide():
    from inferbench.measure.parity import accuracy

    labels, cand, ref = _outcomes(2000, 1500, 75)  # 5% of FP32's right images lost: 95% of FP32
    lost = accuracy(labels, cand, ref, "bf16")
    assert lost["status"] == "failed" and lost["reason"].endswith("95.0% of FP32 (difference -3.8 points [-4.6 to "
                                                                  "-2.9]), below MLPerf's 99%")
    assert lost["top1"]["accuracy"] == pytest.approx(0.7125) and lost["top1"]["fp32"] == 0.75
    assert lost["top1"]["difference"] == pytest.approx(-0.0375)
    assert lost["top1"]["difference_ci95"][0] < -0.0375 < lost["top1"]["difference_ci95"][1] < -0.0075
    labels, cand, ref = _outcomes(2000, 1500, 3)  # 0.2% lost
    small = accuracy(labels, cand, ref, "fp16")
    assert small["status"] == "passed" and small["reason"] is None
    labels, cand, ref = _outcomes(100, 75, 2)  # 97% of FP32 on 100 images: below 99%, which they cannot tell
    unsure = accuracy(labels, cand, ref, "bf16")
    assert unsure["status"] == "failed" and "though the images cannot tell" in unsure["reason"]
    labels, cand, ref = _outcomes(200, 100, 1)  # 99.0% of FP32, exactly: MLPerf's "at least"
    assert accuracy(labels, cand, ref, "bf16")["status"] == "passed"
    assert accuracy(labels, cand, ref, "fp32")["status"] == "measured"  # FP32: no gate here (its logits' gate)
    labels, cand, ref = _outcomes(100, 0, 0)
    assert accuracy(labels, cand, ref, "bf16")["status"] == "not_measured"
    assert set(accuracy(*_outcomes(50, 30, 0, classes=5), "bf16")) >= {"top1"}
    assert "top5" not in accuracy(*_outcomes(50, 30, 0, classes=5), "bf16")  # five classes: top-5 is every one
    assert accuracy(*_outcomes(50, 30, 0, classes=6), "bf16")["top5"]["accuracy"] == 0.6  # -10: last of six


def test_a_cells_accuracy_through_the_harness_is_judged_on_reduced_precision_only_and_never_takes_it_down(
        colours, tmp_path):
    from fakes import Stub

    from inferbench.base.device import Device
    from inferbench.exporters import cache
    from inferbench.registry import images
    from inferbench.registry.artifacts import evaluation_reference
    from inferbench.registry.frameworks import FRAMEWORKS
    from inferbench.scenarios.gates import accuracy_decides, check_accuracy, judged
    from inferbench.spec import CellJob, CellKey, RunConfig, RunnerOptions, TimingConfig

    def by_colour(x):  # the classes in sorted folder order: blue, green, red
        return x.mean(axis=(1, 2))[:, ::-1]

    es = images.open_eval_set(str(colours), 1000, 0)

    def job(precision, weights="random"):
        config = RunConfig(weights=weights, seed=0, device=Device("cpu"), threads=1,
                           timing=TimingConfig(0, 0.0, 0.0, 3, 1), options=RunnerOptions(),
                           cache_dir=str(tmp_path), eval_set=es)
        return CellJob(CellKey("mobilenet_v3_large", 32, 4, "openvino", precision), FRAMEWORKS["openvino"], config,
                       str(tmp_path), None, (4,))

    said = []
    missing = check_accuracy(job("bf16"), Stub(by_colour), said.append)
    assert missing["status"] == "not_measured" and "export failed" in missing["reason"]
    (tmp_path / "evaluation").mkdir()
    np.save(tmp_path / evaluation_reference(es.digest), np.concatenate(list(
        map(by_colour, images.inputs(_spec(), images.items(es), 32)))))
    cache.record(tmp_path, "evaluation", {"variants": [es.digest], "files": {}}, {})
    right = check_accuracy(job("bf16"), Stub(by_colour), said.append)
    assert right["status"] == "passed" and right["top1"]["accuracy"] == 1.0 and right["images"] == 18
    assert said[-1] == "parity check: accuracy on 18 labelled images" and "chance" in right["note"]
    assert check_accuracy(job("bf16", "imagenet"), Stub(by_colour), said.append)["note"] is None
    wrong = check_accuracy(job("bf16"), Stub(lambda x: by_colour(x)[:, [1, 2, 0]]), said.append)
    assert wrong["status"] == "failed" and wrong["top1"]["accuracy"] == 0.0
    passed = {"status": "passed", "reason": None}
    assert accuracy_decides("bf16", wrong) and accuracy_decides("fp16", right) and not accuracy_decides("fp32", right)
    assert not accuracy_decides("bf16", missing) and not accuracy_decides("bf16", None)  # the agreement decides then
    assert judged(passed, "accuracy", {**wrong, "decides": True})["status"] == "failed"
    assert judged(passed, "accuracy", {**wrong, "decides": False})["status"] == "passed"  # reported, not deciding
    assert check_accuracy(job("fp32"), Stub(lambda x: by_colour(x)[:, [1, 2, 0]]), said.append)["status"] == \
        "measured"
    broken = check_accuracy(job("bf16"), Stub(lambda x: 1 / 0), said.append)
    assert broken["status"] == "not_measured" and "ZeroDivisionError" in broken["reason"]
    assert check_accuracy(job("bf16"), Stub(lambda x: by_colour(x)[:, :2]), said.append)["status"] == "failed"


def test_the_answer_says_the_accuracy_beside_fp32s_with_intervals_and_mlperfs_verdict():
    from inferbench.analysis.ranking import accuracy_said
    from inferbench.measure.parity import accuracy

    labels, cand, ref = _outcomes(400, 300, 1)
    block = {**accuracy(labels, cand, ref, "bf16"), "decides": True, "note": None}
    text = accuracy_said({"parity": {"accuracy": block}})
    assert text.startswith("top-1 accuracy 74.8% [95% CI ") and "on 400 labelled images, FP32's 75.0%: -0.2 points [" \
        in text and text.endswith("MLPerf's gate (99% of FP32) passed")
    assert accuracy_said({"parity": {"status": "passed"}}) is None
    assert "not measured: why" in accuracy_said({"parity": {"accuracy": {"status": "not_measured", "reason": "why"}}})


QUICK = ["--duration", "0.3", "--rounds", "3", "--processes", "1", "--warmup", "2", "--warmup-seconds", "0",
         "--min-iterations", "3", "-q"]


def test_a_labelled_set_that_cannot_be_used_is_one_line_and_exit_2(colours, tmp_path, capsys):
    from inferbench.run import main

    for argv, said in ((["--eval-dir", str(tmp_path / "nowhere")], "no such folder or labels file"),
                       (["--eval-dir", str(colours), "--scenario", "train"], "accuracy in inference, not in train"),
                       (["--eval-dir", str(colours), "--eval-images", "0"], "must be a positive integer")):
        code = main([*argv, "--output-dir", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code == 2 and said in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) <= 2 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_model_files_accuracy_on_labelled_images_is_in_every_record_and_its_answer(colours, tmp_path, shared_cache,
                                                                                      capsys):
    """Real: a .keras model that classifies the colour set, run on ONNX Runtime and OpenVINO; a labels file whose
    classes the model does not have is refused in one line."""
    import json

    from labelled import colour_model

    from inferbench import records
    from inferbench.run import main

    model = colour_model(tmp_path / "colours.keras")
    code = main(["--model", str(model), "--framework", "onnxrt,openvino", "--eval-dir", str(colours), *QUICK,
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "accuracy: every cell on 18 labelled images" in captured.err and "by chance" not in captured.err
    assert "top-1 accuracy 100.0% [95% CI 82.4%-100.0%] on 18 labelled images, FP32's 100.0%" in captured.out
    df = records.load(tmp_path / "out")
    assert set(df["framework"]) == {"onnxrt", "openvino"} and set(df["parity.status"]) == {"passed"}
    assert (df["parity.accuracy.top1.accuracy"] == 1.0).all() and (df["parity.accuracy.top1.fp32"] == 1.0).all()
    assert set(df["parity.accuracy.status"]) == {"measured"}
    assert "top-1 (vs FP32)" in captured.out and "100.0% (+0.0)" in captured.out  # a column of the table
    summary = next((tmp_path / "out").rglob("summary.csv")).read_text().splitlines()
    assert "top1_accuracy,top1_accuracy_fp32" in summary[0] and all(",1.0,1.0," in row for row in summary[1:])
    record = json.loads(next((tmp_path / "out").rglob("*_onnxrt.json")).read_text())
    assert record["config"]["eval_set"]["images"] == 18 and record["config"]["eval_set"]["layout"] == "folders"
    # a labels file naming class 7 of a three-class model
    lines = [f"{p.relative_to(colours)} {7 if p.parent.name == 'red' else 0}" for p in sorted(colours.rglob("*.png"))]
    (tmp_path / "labels.txt").write_text("\n".join(lines))
    for p in sorted(colours.rglob("*.png")):
        (tmp_path / p.relative_to(colours)).parent.mkdir(exist_ok=True)
        (tmp_path / p.relative_to(colours)).write_bytes(p.read_bytes())
    code = main(["--model", str(model), "--framework", "onnxrt", "--eval-dir", str(tmp_path / "labels.txt"), *QUICK,
                 "--output-dir", str(tmp_path / "out2"), "--cache-dir", str(shared_cache)])
    err = capsys.readouterr().err
    assert code == 2 and "go up to 7, but colours-" in err and "has 3 classes (0-2)" in err, err
    assert "Traceback" not in err and not list((tmp_path / "out2").rglob("*.json"))


def test_the_table_gets_a_top1_column_beside_fp32s_only_with_labelled_images():
    from test_results import make_record

    from inferbench.base.codec import encode
    from inferbench.cli.summary import format_summary

    block = {"status": "passed", "images": 400, "gate": 0.99, "decides": True,
             "top1": {"accuracy": 0.7475, "ci95": [0.70, 0.79], "fp32": 0.75, "fp32_ci95": [0.70, 0.79],
                      "difference": -0.0025, "difference_ci95": [-0.01, 0.005]}}
    parity = {"status": "passed", "max_abs_err": 1e-5, "max_rel_err": 1e-6, "cosine": 1.0, "top1_agreement": 1.0}
    plain = encode(make_record("onnxrt", parity=parity))
    labelled = encode(make_record("openvino", precision="bf16", parity={**parity, "accuracy": block}))
    assert "top-1" not in format_summary([plain])
    text = format_summary([plain, labelled])
    header = next(line for line in text.splitlines() if line.startswith("framework"))
    assert header.index("parity") < header.index("top-1 (vs FP32)") < header.index("p50 ms")
    assert "74.8% (-0.2)" in text and any(line.startswith("onnxrt ") and "  -  " in line
                                          for line in text.splitlines())


def test_a_biased_bootstrap_never_gives_an_interval_that_excludes_its_own_value():
    """mAP over images resampled runs high (a category absent from a resample drops out of its mean): measured on the
    640 detector, 0.285 [95% CI 0.293-0.379] by the plain percentile. Known truths: a metric whose resamples lie all
    on one side of the whole set's value (the share of distinct images: 1 on the set, about 0.63 on a resample) gets
    its interval widened to reach the value, and says which; one whose resamples run high by a known bias (a mean
    plus 0.1 x the share of repeated images, about +0.037) gets the bias-corrected interval, which holds the value
    and lies below the plain percentile's; an unbiased mean keeps the percentile interval."""
    import numpy as np

    from inferbench.tasks import paired

    values = np.linspace(0.2, 0.8, 40)

    def picked(draw):
        return np.arange(len(values)) if draw is None else draw

    def biased(results, draw):
        return [len(set(picked(draw).tolist())) / len(values) * results]

    def high(results, draw):
        return [float(np.mean(values[picked(draw)])) + 0.1 * (1 - len(set(picked(draw).tolist())) / len(values))]

    def mean(results, draw):
        return [float(np.mean(values[picked(draw)])) * results]

    out = paired.scored(biased, 1.0, 0.9, len(values), (("share", 0, "share"),))
    block = out["share"]
    assert block["ci95"][0] <= block["value"] <= block["ci95"][1] and block["ci95"][1] == block["value"] == 1.0
    assert block["fp32_ci95"][1] == block["fp32"] == 0.9
    assert "100% of the 200 resamples lie below" in block["ci_widened"]["value"]
    assert set(block["ci_widened"]) == {"value", "fp32", "difference"}  # 0.1 x the share: biased alike
    told = {**out, "other": block}
    paired.say(told, "share", "share", "s", "other", "other")
    assert "share 1.000 [95% CI " in told["said"] and "-1.000, widened: biased resamples]" in told["said"]
    corrected = paired.scored(high, 1.0, 1.0, len(values), (("m", 0, "mean"),))["m"]
    naive = paired._pct(np.array([high(1.0, d)[0] for d in paired.draws(len(values))]))
    assert "ci_widened" not in corrected and corrected["ci95"][0] < corrected["value"] < corrected["ci95"][1]
    assert corrected["ci95"][0] < naive[0] and corrected["ci95"][1] < naive[1], (corrected["ci95"], naive)
    plain = paired.scored(mean, 1.0, 1.0, len(values), (("m", 0, "mean"),))["m"]
    assert "ci_widened" not in plain and plain["ci95"][0] < plain["value"] < plain["ci95"][1]
    assert plain["ci95"][1] - plain["ci95"][0] < 0.15
