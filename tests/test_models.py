import numpy as np
import pytest

from inferbench.errors import UsageError
from inferbench.frameworks import FRAMEWORKS, choose, unavailable_reason
from inferbench.models import MODELS, describe_weights, get_model, list_models, make_images, make_inputs


def test_registry_has_the_promised_models():
    for name in ["mobilenet_v3_large", "mobilenet_v3_small", "mobilenet_v2", "resnet50", "efficientnet_v2_b0"]:
        spec = get_model(name)
        assert spec.default_resolution == 224
    assert list_models("mobilenet*") == ["mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small"]
    with pytest.raises(UsageError, match="valid models: .*mobilenet_v3_large"):
        get_model("vgg99")


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
        assert spec.keras_builder[0].isupper()


def test_precision_options():
    assert FRAMEWORKS["torch"].precision_for("bf16") == "bf16"
    assert FRAMEWORKS["torch-native"].precision_for(None) == "fp32"
    assert FRAMEWORKS["tensorrt-fp16"].precision_for("fp16") == "fp16"
    with pytest.raises(UsageError, match="tf runs in fp32 only"):
        FRAMEWORKS["tf"].precision_for("fp16")
    from inferbench.config import precisions_of

    assert precisions_of(FRAMEWORKS["tf"], ["bf16"], explicit=False) == ["fp32"]  # with 'all', others keep theirs
    assert precisions_of(FRAMEWORKS["torch"], ["bf16"], explicit=False) == ["bf16"]
    assert precisions_of(FRAMEWORKS["torch"], ["fp32", "bf16"], explicit=True) == ["fp32", "bf16"]
    assert precisions_of(FRAMEWORKS["tensorrt-fp16"], [], explicit=True) == ["fp16"]
    with pytest.raises(UsageError, match="tf runs in fp32 only"):
        precisions_of(FRAMEWORKS["tf"], ["bf16"], explicit=True)
