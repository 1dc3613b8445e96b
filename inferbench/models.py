"""Model registry: name -> Keras Applications builder, torchvision builder, input spec.

Nothing here imports TensorFlow or torch at module level; the builders are looked up by name
inside the child process that needs them.
"""

from __future__ import annotations

import fnmatch
import re
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


#: What a model file can be (``--model PATH``), with how inferbench recognises it.
FILE_FORMATS = {"keras": "a .keras file", "savedmodel": "a TF SavedModel folder", "onnx": "an .onnx file"}


@dataclass(frozen=True)
class ModelFile:
    """A model the user brings as a file (``--model PATH``): where it is, its format, the input it takes."""

    name: str  # the file's stem: the model's name in records and file names
    path: str  # absolute
    format: str  # key of FILE_FORMATS
    resolution: int  # square images of this many pixels a side
    layout: str = "NHWC"  # "NCHW" for channels-first models (ONNX files exported from PyTorch)
    batch_size: int | None = None  # a batch dimension fixed in the file (None: any batch size)

    def __post_init__(self) -> None:
        if self.format not in FILE_FORMATS or self.layout not in ("NHWC", "NCHW"):
            raise ValueError(f"model file format {self.format!r} / layout {self.layout!r} is not one inferbench reads")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    keras_builder: str | None  # attribute of keras.applications (None: a model file)
    torchvision_builder: str | None  # function in torchvision.models, None if torchvision lacks it
    default_resolution: int
    min_resolution: int
    preprocessing: str  # key of PREPROCESSING
    source: ModelFile | None = None  # the user's model file, if the model is one

    @property
    def layout(self) -> str:
        return self.source.layout if self.source else "NHWC"

    def input_shape(self, batch: int, resolution: int) -> tuple[int, int, int, int]:
        return (batch, 3, resolution, resolution) if self.layout == "NCHW" else (batch, resolution, resolution, 3)

    def resolution(self, requested: int | None) -> int:
        res = self.default_resolution if requested is None else requested
        if self.source is not None and res != self.default_resolution:
            raise UsageError(f"{self.name} takes {self.default_resolution} px inputs (read from "
                             f"{self.source.path}); --resolution {res} does not apply")
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


#: Model files of this process (``register``): the parent's from the command line, a child's from its job.
_FILES: dict[str, ModelSpec] = {}


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern, e.g. ``list_models("mobilenet*")``."""
    return sorted(name for name in MODELS if fnmatch.fnmatch(name, pattern))


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS.get(name) or _FILES[name]
    except KeyError:
        raise UsageError(f"unknown model {name!r}; valid models: {', '.join(sorted(MODELS))}, or the path of "
                         f"{', '.join(FILE_FORMATS.values())}") from None


def register(*files: ModelFile) -> None:
    """Make model files known to :func:`get_model` by their names (the same file may come again)."""
    for f in files:
        if f.name in MODELS:
            raise UsageError(f"model file {f.path} has the name of the registered model {f.name}: rename the file")
        known = _FILES.get(f.name)
        if known is not None and known.source != f:
            raise UsageError(f"two model files are named {f.name} ({known.source.path if known.source else ''} "
                             f"and {f.path}): rename one")
        _FILES[f.name] = ModelSpec(f.name, None, None, f.resolution, f.resolution, "included", source=f)


def is_model_file(text: str) -> bool:
    """Does a ``--model`` value name a file (or SavedModel folder) rather than a registered model?"""
    return text not in MODELS and (text.endswith((".keras", ".onnx")) or "/" in text or Path(text).is_dir())


def open_model_file(text: str, input_shape: str | None = None, resolution: int | None = None) -> ModelFile:
    """Recognise and check a model file without importing a framework (an ONNX file needs the ``onnx``
    package); its input shape comes from the file, else from ``--input-shape`` (or ``--resolution``)."""
    path = Path(text).expanduser()
    if not path.exists():
        raise UsageError(f"model file {text} does not exist")
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise UsageError(f"{text} is a folder without saved_model.pb: not a TF SavedModel")
        fmt, shape = "savedmodel", None  # reading its signature would need TensorFlow in this process
    elif path.suffix == ".keras":
        fmt, shape = "keras", _keras_input_shape(path)
    elif path.suffix == ".onnx":
        fmt, shape = "onnx", _onnx_input_shape(path)
    else:
        raise UsageError(f"--model {text}: inferbench reads {', '.join(FILE_FORMATS.values())}")
    given = _parse_shape(input_shape) if input_shape else None
    if given is not None:
        if shape is not None and any(a is not None and a != b for a, b in zip(shape, given)):
            raise UsageError(f"--input-shape {input_shape} does not match the input {_show(shape)} of {text}")
        shape = given
    if shape is None:
        if resolution is None:
            raise UsageError(f"inferbench cannot read the input shape of {FILE_FORMATS[fmt]}: pass --input-shape, "
                             "e.g. 224x224x3 (NHWC) or 3x224x224 (NCHW)")
        shape = (None, resolution, resolution, 3)
    batch, dims = shape[0], list(shape[1:])
    if len(dims) != 3 or 3 not in (dims[0], dims[2]):
        raise UsageError(f"{text} takes input {_show(shape)}: inferbench times RGB images, HxWx3 or 3xHxW")
    layout = "NHWC" if dims[2] == 3 else "NCHW"
    h, w = (dims[0], dims[1]) if layout == "NHWC" else (dims[1], dims[2])
    h = h if h is not None else (w if w is not None else resolution)
    w = w if w is not None else h
    if h is None:
        raise UsageError(f"{text} takes images of any size: pass --resolution or --input-shape")
    if h != w:
        raise UsageError(f"{text} takes {h}x{w} images; inferbench times square images only")
    name = path.name.removesuffix(path.suffix) if path.suffix else path.name
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "model"
    return ModelFile(name, str(path.resolve()), fmt, int(h), layout, batch)


def _show(shape: tuple[int | None, ...]) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def _parse_shape(text: str) -> tuple[int | None, ...]:
    parts = re.split(r"[x,]", text.strip().lower())
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) not in (3, 4) or min(dims) < 1:
        raise UsageError(f"--input-shape {text!r} is not HxWxC, CxHxW or NxHxWxC (positive integers, e.g. 224x224x3)")
    return tuple(dims) if len(dims) == 4 else (None, *dims)


def _keras_input_shape(path: Path) -> tuple[int | None, ...] | None:
    """The input shape a .keras archive declares in its config.json (read without Keras)."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path} is not a readable .keras archive: {exc}") from None
    build = (config.get("build_config") or {}).get("input_shape")
    if build is None:
        layers = (config.get("config") or {}).get("layers") or []
        build = next((lay.get("config", {}).get("batch_shape") for lay in layers
                      if lay.get("class_name") == "InputLayer"), None)
    if isinstance(build, dict) or (build and isinstance(build[0], list)):
        raise UsageError(f"{path} has several inputs; inferbench times models with one image input")
    return tuple(build) if build else None


def _onnx_input_shape(path: Path) -> tuple[int | None, ...]:
    try:
        import onnx
    except ImportError:
        raise UsageError("reading an .onnx model needs the onnx package: pip install -e \".[onnxruntime]\"") from None
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # onnx raises DecodeError and others for a file that is not a model
        raise UsageError(f"{path} is not a readable ONNX model: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from None
    inits = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise UsageError(f"{path} has {len(inputs)} inputs; inferbench times models with one image input")
    return tuple(d.dim_value or None for d in inputs[0].type.tensor_type.shape.dim)


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
    """A model-ready batch of seeded image-like inputs (float32, in the model's layout: NHWC, or NCHW)."""
    out = preprocess(spec, make_images(batch, resolution, seed))
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)) if spec.layout == "NCHW" else out


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

    shape = (resolution, resolution, 3)
    if spec.source is not None:  # a model file brings its own weights
        return _load_keras_file(spec.source.path, shape)
    builder = getattr(keras.applications, spec.keras_builder)
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
    if weights.endswith(".keras"):
        model = _load_keras_file(weights, shape)
        _check_fits(spec, model, builder(weights=None, classifier_activation=None, input_shape=shape), weights)
        return model
    try:
        model = builder(weights=None, classifier_activation=None, input_shape=shape)
        model.load_weights(weights)
        return model
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"cannot load weights {weights} into {spec.name}: {first}") from None


def _load_keras_file(path: str, shape: tuple[int, ...]) -> Any:
    import keras

    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"cannot load {path}: {first}") from None
    got = tuple(model.inputs[0].shape[1:])
    if got != shape and any(g is not None and g != w for g, w in zip(got, shape)):
        raise UsageError(f"{path} takes inputs of shape {got}, not {shape}; pass --resolution {got[0]}")
    return model


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
