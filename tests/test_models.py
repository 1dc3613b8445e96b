import numpy as np
import pytest

from inferbench.base.errors import UsageError
from inferbench.registry.frameworks import FRAMEWORKS, choose, unavailable_reason
from inferbench.registry.inputs import make_images, make_inputs
from inferbench.registry.modelfiles import describe_weights
from inferbench.registry.models import MODELS, get_model, list_models


def test_registry_has_the_promised_models():
    for name in ["mobilenet_v3_large", "mobilenet_v3_small", "mobilenet_v2", "resnet50", "efficientnet_v2_b0"]:
        spec = get_model(name)
        assert spec.default_resolution == 224
    assert list_models("mobilenet*") == ["mobilenet", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small"]
    # the names: torchvision-style snake_case of the Keras class names
    for name in ["convnext_tiny", "densenet121", "efficientnet_b3", "efficientnet_v2_s", "inception_resnet_v2",
                 "inception_v3", "mobilenet", "nasnet_mobile", "regnetx_002", "regnety_032", "resnet101_v2", "vgg16",
                 "xception", "vit_b_16"]:
        assert get_model(name).keras_builder, name
    assert len(list_models("regnet*")) == 24 and len(list_models("efficientnet_b*")) == 8
    assert get_model("efficientnet_b7").default_resolution == 600 and get_model("xception").min_resolution == 71
    assert get_model("regnety_032").torchvision_builder == "regnet_y_3_2gf"
    assert get_model("regnetx_002").torchvision_builder is None  # torchvision has no 200MF RegNet
    with pytest.raises(UsageError, match="valid models: .*mobilenet_v3_large"):
        get_model("vgg99")


def test_resolution_limits_per_model():
    vit = get_model("vit_b_16")
    assert vit.resolution(96) == 96
    with pytest.raises(UsageError, match="multiples of 16"):
        vit.resolution(100)
    with pytest.raises(UsageError, match="too small for inception_v3 \\(minimum 75 a side\\)"):
        get_model("inception_v3").resolution(64)
    with pytest.raises(UsageError, match="too small for inception_v3 \\(minimum 75 a side\\)"):
        get_model("inception_v3").resolution("299x64")
    assert get_model("inception_v3").resolution("75x299") == "75x299"
    with pytest.raises(UsageError, match="vit_b_16 takes square inputs only"):
        vit.resolution("96x112")


def test_model_patterns_on_the_command_line():
    from inferbench.execution.plan import expand_patterns

    assert expand_patterns(["efficientnet_b[01]", "vgg16", "efficientnet_b0"]) == [
        "efficientnet_b0", "efficientnet_b1", "vgg16"]
    assert len(expand_patterns(["*"])) == len(MODELS)
    with pytest.raises(UsageError, match="matches no registered model"):
        expand_patterns(["resnext*"])


def test_resolution_rules():
    spec = get_model("mobilenet_v3_large")
    assert spec.resolution(None) == 224
    assert spec.resolution(160) == 160
    with pytest.raises(UsageError, match="too small"):
        spec.resolution(8)


def test_images_are_seeded_image_like_and_never_zero():
    a = make_images(4, 64, seed=5)
    assert a.shape == (4, 64, 64, 3) and a.dtype == np.float32
    np.testing.assert_array_equal(a, make_images(4, 64, seed=5))
    assert not np.array_equal(a, make_images(4, 64, seed=6))
    assert a.min() == pytest.approx(0.0, abs=1e-3) and a.max() == pytest.approx(255.0, abs=1e-3)
    # smooth fields: neighbouring pixels are close, unlike i.i.d. noise
    assert np.abs(np.diff(a, axis=1)).mean() < 10.0
    assert not np.array_equal(a[0], a[1])


def test_preprocessing_per_model():
    raw = make_images(2, 32, seed=0)
    np.testing.assert_allclose(make_inputs(get_model("mobilenet_v3_large"), 2, 32, 0), raw)
    v2 = make_inputs(get_model("mobilenet_v2"), 2, 32, 0)
    assert v2.min() >= -1.0 - 1e-6 and v2.max() <= 1.0 + 1e-6
    caffe = make_inputs(get_model("resnet50"), 2, 32, 0)
    np.testing.assert_allclose(caffe[..., 0], raw[..., 2] - 103.939, rtol=1e-6, atol=1e-4)
    torch_style = make_inputs(get_model("densenet121"), 2, 32, 0)  # [0, 1], then ImageNet mean and std
    np.testing.assert_allclose(torch_style[..., 1], (raw[..., 1] / 255.0 - 0.456) / 0.224, rtol=1e-5, atol=1e-5)


def test_weights_argument(tmp_path):
    assert describe_weights("random") == "random"
    assert describe_weights("imagenet") == "imagenet"
    with pytest.raises(UsageError, match="cannot read"):
        describe_weights(str(tmp_path / "missing.keras"))
    with pytest.raises(UsageError, match="must be"):
        describe_weights(str(tmp_path / "weights.bin"))
    f = tmp_path / "w.weights.h5"
    f.write_bytes(b"x")
    with pytest.raises(UsageError, match="is not an HDF5 file"):
        describe_weights(str(f))
    f.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(8))  # the HDF5 signature
    assert describe_weights(str(f)) == str(f.resolve())


def test_framework_keys_and_all():
    spec = get_model("mobilenet_v3_large")
    cpu, skipped = choose(["all"], "cpu", spec)
    runnable_here = [k for k, fw in FRAMEWORKS.items() if unavailable_reason(fw, "cpu") is None]
    assert [fw.key for fw in cpu] == runnable_here  # registry order, everything that can run here
    assert set(skipped) == set(FRAMEWORKS) - set(runnable_here)
    assert skipped["tensorrt-fp32"] == "needs an NVIDIA GPU"
    assert [fw.key for fw in choose(["tf", "onnxrt", "tf"], "cpu", spec)[0]] == ["tf", "onnxrt"]
    with pytest.raises(UsageError, match="valid frameworks"):
        choose(["tensorflow-lite"], "cpu", spec)
    with pytest.raises(UsageError, match="needs an NVIDIA GPU"):
        choose(["tensorrt-fp16"], "cpu", spec)
    with pytest.raises(UsageError, match="torchvision has no implementation of efficientnet_v2_b0"):
        choose(["torch-native"], "cpu", get_model("efficientnet_v2_b0"))
    assert "torch-native" not in [fw.key for fw in choose(["all"], "cpu", get_model("efficientnet_v2_b0"))[0]]


def test_every_runner_path_resolves_to_a_module_file():
    import importlib.util

    for fw in FRAMEWORKS.values():
        module, _, cls = fw.runner.partition(":")
        assert importlib.util.find_spec(module) is not None, fw.key
        assert cls


def test_every_model_has_a_keras_builder_name():
    for spec in MODELS.values():
        module, _, name = spec.keras_builder.rpartition(":")
        builder = module == "inferbench.registry.builders" and name[0].islower()
        assert builder or (not module and name[0].isupper()), spec


def _names_in(module: str, expression: str) -> set[str]:
    """Names a framework module holds, read in a process of its own (TensorFlow and torch in one process
    crash: they never share one, in the tests either)."""
    import json
    import subprocess
    import sys

    code = f"import json, {module} as m; print(json.dumps(sorted({expression})))"
    return set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                         check=True).stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_every_keras_application_is_registered_and_every_twin_exists():
    """Every builder keras.applications ships is registered (none forgotten, none misspelt), and every
    torchvision twin named in the registry exists in the installed torchvision."""
    from inferbench.registry import builders

    shipped = _names_in("keras.applications", "n for n in dir(m) if n[0].isupper()")
    registered = {s.keras_builder for s in MODELS.values() if ":" not in s.keras_builder}
    assert registered == shipped and len(shipped) == 40
    for spec in MODELS.values():
        if ":" in spec.keras_builder:
            assert callable(getattr(builders, spec.keras_builder.split(":")[1])), spec.name
    twins = {s.torchvision_builder for s in MODELS.values() if s.torchvision_builder}
    assert twins <= _names_in("torchvision.models", "dir(m)")


def test_precision_options():
    assert FRAMEWORKS["torch"].precision_for("bf16") == "bf16"
    assert FRAMEWORKS["torch-native"].precision_for(None) == "fp32"
    assert FRAMEWORKS["tensorrt-fp16"].precision_for("fp16") == "fp16"
    with pytest.raises(UsageError, match="tf runs in fp32 only"):
        FRAMEWORKS["tf"].precision_for("fp16")
    from inferbench.execution.plan import precisions_of

    assert precisions_of(FRAMEWORKS["tf"], ["bf16"], explicit=False) == ["fp32"]  # with 'all', others keep theirs
    assert precisions_of(FRAMEWORKS["torch"], ["bf16"], explicit=False) == ["fp32", "bf16"]  # its FP32 beside
    assert precisions_of(FRAMEWORKS["torch"], ["bf16"], explicit=False, beside=False) == ["bf16"]  # --reduced-only
    assert precisions_of(FRAMEWORKS["torch"], ["fp32", "bf16"], explicit=True) == ["fp32", "bf16"]
    assert precisions_of(FRAMEWORKS["tensorrt-fp16"], [], explicit=True) == ["fp16"]
    with pytest.raises(UsageError, match="tf runs in fp32 only"):
        precisions_of(FRAMEWORKS["tf"], ["bf16"], explicit=True)


def test_every_regnet_stage_has_whole_groups_of_its_group_width():
    """Keras 2's table gives RegNetX-8.0GF's first stage 80 filters in groups of 120: zero groups, and the model
    could not be built (the zoo found it). The group width is capped at the stage's width, as in the paper's code."""
    from inferbench.registry.builders import REGNETS, group_count

    for name, (_, _, widths, group_width) in REGNETS.items():
        for width in widths:
            groups = group_count(width, group_width)
            assert groups >= 1 and width % groups == 0, (name, width)
            assert width // groups == min(group_width, width), (name, width)  # every group as wide as the table says
    assert group_count(80, 120) == 1 and group_count(720, 120) == 6


@pytest.mark.slow
def test_regnetx_080_builds():
    from inferbench.registry.builders import regnet

    model = regnet("x080", input_shape=(32, 32, 3))
    assert model.output_shape == (None, 1000) and model.get_layer("s1_b1_b_conv").groups == 1


@pytest.mark.slow
def test_grouped_convolutions_are_counted_in_the_model_stats():
    """RegNetY's grouped convolutions, which Keras 3 on TensorFlow compiles with XLA even outside jit_compile (the
    XLA report reads this count), are counted in the model's stats; a model without any counts none. (RegNetY's
    conversions of them run in the opt-in `zoo` layer, test_zoo.py.)"""
    from inferbench.exporters.keras import model_stats
    from inferbench.registry.keras_models import build_keras_model

    grouped = model_stats(build_keras_model(get_model("regnety_002"), 32, "random", 0), 32)
    plain = model_stats(build_keras_model(get_model("mobilenet_v3_small"), 32, "random", 0), 32)
    assert grouped["grouped_convolutions"] > 0 and plain["grouped_convolutions"] == 0
    assert grouped["flops_resolution"] == 32 and grouped["params"] > 2_000_000 and grouped["flops_per_image"] > 0


@pytest.mark.slow
def test_a_vgg_at_another_aspect_keeps_its_ported_weights_verified(tmp_path, shared_cache, capsys):
    """VGG flattens its last map into fc1: at 32 x 64 (height x width) that map is 1 x 2, and the port lays the Keras
    rows out by the input's height and width (a square guess cannot: 1,024 features are no square map of 512):
    torchvision's twin passes parity against the Keras reference."""
    import json

    from inferbench.run import main

    code = main(["--model", "vgg16", "--resolution", "32x64", "--framework", "torch-native", "--duration", "0.2",
                 "--rounds", "2", "--processes", "1", "--warmup", "1", "--warmup-seconds", "0", "--min-iterations",
                 "2", "-q", "--output-dir", str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    assert code == 0, capsys.readouterr().err
    r = json.loads(next((tmp_path / "out").rglob("vgg16_32x64_bs1_torch-native.json")).read_text())
    assert r["parity"]["status"] == "passed" and r["parity"]["reason"] != "own-weights", r["parity"]
