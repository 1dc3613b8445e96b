import numpy as np
import pytest

from inferbench.errors import UsageError
from inferbench.frameworks import FRAMEWORKS, parse_frameworks, unavailable_reason
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
    cpu = [fw.key for fw in parse_frameworks("all", "cpu")]
    assert cpu == ["keras-eager", "keras", "kerasxla", "tf", "tfxla", "onnxrt", "torch", "torch-native"]
    assert "tensorrt-fp16" in [fw.key for fw in parse_frameworks("all", "gpu")]
    assert [fw.key for fw in parse_frameworks("tf, onnxrt,tf", "cpu")] == ["tf", "onnxrt"]
    with pytest.raises(UsageError, match="valid frameworks"):
        parse_frameworks("tensorflow-lite", "cpu")
    with pytest.raises(UsageError, match="needs an NVIDIA GPU"):
        parse_frameworks("tensorrt-fp16", "cpu")
    assert unavailable_reason(FRAMEWORKS["tensorrt-fp32"], "cpu") == "needs an NVIDIA GPU"


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
    from inferbench.run import precision_of

    assert precision_of(FRAMEWORKS["tf"], "bf16", explicit=False) == "fp32"  # with 'all', others keep theirs
    assert precision_of(FRAMEWORKS["torch"], "bf16", explicit=False) == "bf16"
