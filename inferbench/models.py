"""Model registry: name -> Keras Applications builder, torchvision builder, input spec.

Nothing here imports TensorFlow or torch at module level; the builders are looked up by name
inside the child process that needs them.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import keras

#: ImageNet channel means in BGR order, as Keras' "caffe" preprocessing subtracts them.
_CAFFE_MEAN_BGR = np.array([103.939, 116.779, 123.68], dtype=np.float32)

PREPROCESSING = {
    "included": "RGB in [0, 255]; the model rescales internally",
    "tf": "RGB scaled to [-1, 1] (x / 127.5 - 1) before the model",
    "caffe": "RGB -> BGR, ImageNet mean subtracted, no scaling, before the model",
}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    keras_builder: str  # attribute of keras.applications
    torchvision_builder: str | None  # function in torchvision.models, None if torchvision lacks it
    default_resolution: int
    min_resolution: int
    preprocessing: str  # key of PREPROCESSING

    def resolution(self, requested: int | None) -> int:
        res = self.default_resolution if requested is None else requested
        if res < self.min_resolution:
            raise UsageError(
                f"resolution {res} is too small for {self.name} (minimum {self.min_resolution})"
            )
        return res


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("mobilenet_v3_large", "MobileNetV3Large", "mobilenet_v3_large", 224, 32, "included"),
        ModelSpec("mobilenet_v3_small", "MobileNetV3Small", "mobilenet_v3_small", 224, 32, "included"),
        ModelSpec("mobilenet_v2", "MobileNetV2", "mobilenet_v2", 224, 32, "tf"),
        ModelSpec("resnet50", "ResNet50", "resnet50", 224, 32, "caffe"),
        ModelSpec("efficientnet_b0", "EfficientNetB0", "efficientnet_b0", 224, 32, "included"),
        # torchvision has EfficientNetV2-S/M/L but no B0: torch-native is not available for it.
        ModelSpec("efficientnet_v2_b0", "EfficientNetV2B0", None, 224, 32, "included"),
    ]
}
DEFAULT_MODEL = "mobilenet_v3_large"


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern, e.g. ``list_models("mobilenet*")``."""
    return sorted(name for name in MODELS if fnmatch.fnmatch(name, pattern))


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise UsageError(f"unknown model {name!r}; valid models: {', '.join(sorted(MODELS))}") from None


# --------------------------------------------------------------------------- inputs
def _cubic_resize_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Matrix M (n_out x n_in) so that M @ v resizes v with cubic convolution (a = -0.5)."""
    a = -0.5
    m = np.zeros((n_out, n_in), dtype=np.float64)
    for j in range(n_out):
        src = (j + 0.5) * n_in / n_out - 0.5
        base = int(np.floor(src))
        for k in range(base - 1, base + 3):
            d = abs(src - k)
            if d <= 1:
                w = (a + 2) * d**3 - (a + 3) * d**2 + 1
            elif d < 2:
                w = a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
            else:
                w = 0.0
            m[j, min(max(k, 0), n_in - 1)] += w
    return m


def make_images(n: int, resolution: int, seed: int, grid: int = 4) -> np.ndarray:
    """Seeded, image-like inputs: smooth random colour fields in [0, 255], shape (n, r, r, 3).

    Each image is a ``grid`` x ``grid`` random colour grid resized bicubically and stretched to the
    full 0-255 range. I.i.d. pixel noise is not used on purpose: every noise image pools to the same
    features (and the same top-1 class), which hides broken exports. Zeros are never used.
    """
    rng = np.random.default_rng(seed)
    small = rng.uniform(0.0, 1.0, size=(n, grid, grid, 3))
    m = _cubic_resize_matrix(grid, resolution)
    img = np.einsum("ij,njkc,lk->nilc", m, small, m)
    lo = img.min(axis=(1, 2, 3), keepdims=True)
    hi = img.max(axis=(1, 2, 3), keepdims=True)
    img = (img - lo) / np.maximum(hi - lo, 1e-12) * 255.0
    return img.astype(np.float32)


def preprocess(spec: ModelSpec, images: np.ndarray) -> np.ndarray:
    """Apply the model's input preparation (in NumPy, outside any timed region)."""
    if spec.preprocessing == "included":
        out = images
    elif spec.preprocessing == "tf":
        out = images / 127.5 - 1.0
    elif spec.preprocessing == "caffe":
        out = images[..., ::-1] - _CAFFE_MEAN_BGR
    else:  # pragma: no cover - registry is static
        raise ValueError(spec.preprocessing)
    return np.ascontiguousarray(out, dtype=np.float32)


def make_inputs(spec: ModelSpec, batch: int, resolution: int, seed: int) -> np.ndarray:
    """A model-ready batch of seeded image-like inputs (NHWC float32)."""
    return preprocess(spec, make_images(batch, resolution, seed))


# --------------------------------------------------------------------------- weights
def describe_weights(weights: str) -> str:
    """Validate ``--weights`` without importing anything heavy: random, imagenet or a readable file."""
    if weights in ("random", "imagenet"):
        return weights
    path = Path(weights)
    if not (path.name.endswith(".keras") or path.name.endswith(".weights.h5") or path.suffix == ".h5"):
        raise UsageError(
            f"--weights must be 'random', 'imagenet' or a .keras / .weights.h5 file, got {weights!r}"
        )
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise UsageError(f"cannot read weights file {weights}: {exc.strerror or exc}") from None
    # a .keras file is a zip archive, a .h5 file HDF5: catch a wrong or empty file before any export
    kind, magic = ("a .keras (zip) archive", b"PK\x03\x04") if path.name.endswith(".keras") \
        else ("an HDF5 file", b"\x89HDF\r\n\x1a\n")
    if not head.startswith(magic):
        raise UsageError(f"weights file {weights} is not {kind}" + (" (it is empty)" if not head else ""))
    if path.name.endswith(".keras"):
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                archive.namelist()
        except zipfile.BadZipFile as exc:
            raise UsageError(f"weights file {weights} is not a complete .keras archive (truncated?): {exc}") from None
    return str(path.resolve())


def build_keras_model(spec: ModelSpec, resolution: int, weights: str, seed: int) -> keras.Model:
    """Build the reference Keras model, ending in logits (no softmax).

    ``random`` weights are seeded and made non-degenerate: the stock random init of MobileNetV3
    emits an exactly uniform softmax (and ~1e-11 logits), which would let any broken export pass
    parity. Batch-norm scales and offsets are randomised and the moving statistics calibrated on
    image-like inputs (one training-mode pass with momentum 0 sets them to the batch statistics).
    """
    import keras

    builder = getattr(keras.applications, spec.keras_builder)
    shape = (resolution, resolution, 3)
    if weights == "random":
        keras.utils.set_random_seed(seed)
        model = builder(weights=None, classifier_activation=None, input_shape=shape)
        _randomise_and_calibrate(spec, model, resolution, seed)
        return model
    if weights == "imagenet":
        try:
            return builder(weights="imagenet", classifier_activation=None, input_shape=shape)
        except Exception as exc:  # urllib / keras raise various types for a failed download
            raise UsageError(
                f"could not load ImageNet weights for {spec.name} (they are downloaded on first use; "
                f"no network here?): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                "use --weights random or a local .keras/.weights.h5 file"
            ) from None
    try:
        if weights.endswith(".keras"):
            model = keras.saving.load_model(weights, compile=False)
            got = tuple(model.inputs[0].shape[1:])
            if got != shape:
                raise UsageError(
                    f"{weights} takes inputs of shape {got}, not {shape}; pass --resolution {got[0]}"
                )
            _check_fits(spec, model, builder(weights=None, classifier_activation=None, input_shape=shape), weights)
            return model
        model = builder(weights=None, classifier_activation=None, input_shape=shape)
        model.load_weights(weights)
        return model
    except UsageError:
        raise
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"cannot load weights {weights} into {spec.name}: {first}") from None


def _check_fits(spec: ModelSpec, model: Any, expected: Any, path: str) -> None:
    """A whole-model file given as ``--weights`` must hold the named architecture: the same weights, of the
    same shapes, in the same order (a MobileNetV3-Small file is not resnet50, however it runs)."""
    got = [tuple(w.shape) for w in model.weights]
    want = [tuple(w.shape) for w in expected.weights]
    if got != want:
        n_got = sum(int(np.prod(s)) for s in got)
        n_want = sum(int(np.prod(s)) for s in want)
        raise UsageError(f"{path} holds a model of {len(got)} weight tensors ({n_got:,} parameters), not "
                         f"{spec.name} ({len(want)} tensors, {n_want:,} parameters): pass the --model it was "
                         "built as")


def _randomise_and_calibrate(spec: ModelSpec, model: Any, resolution: int, seed: int) -> None:
    import keras

    rng = np.random.default_rng(seed)
    bns = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    for bn in bns:
        if bn.gamma is not None:
            bn.gamma.assign(rng.uniform(0.5, 1.5, bn.gamma.shape).astype("float32"))
        if bn.beta is not None:
            bn.beta.assign(rng.normal(0.0, 0.1, bn.beta.shape).astype("float32"))
    calib = make_inputs(spec, 32, resolution, seed + 1)
    momenta = [bn.momentum for bn in bns]
    for bn in bns:
        bn.momentum = 0.0
    model(calib, training=True)
    for bn, mom in zip(bns, momenta):
        bn.momentum = mom
