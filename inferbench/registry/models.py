"""Model registry: name -> Keras Applications builder, torchvision builder, input spec.

Nothing here imports TensorFlow or torch at module level; the builders are looked up by name
inside the child process that needs them.
"""

from __future__ import annotations

import fnmatch
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base.errors import UsageError, did_you_mean

if TYPE_CHECKING:  # pragma: no cover
    import keras

#: ImageNet channel means in BGR order, as Keras' "caffe" preprocessing subtracts them.
_CAFFE_MEAN_BGR = np.array([103.939, 116.779, 123.68], dtype=np.float32)

#: ImageNet channel means and standard deviations (RGB, on [0, 1]), as Keras' "torch" preprocessing uses them.
_TORCH_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_TORCH_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)

PREPROCESSING = {
    "included": "RGB in [0, 255]; the model rescales internally",
    "tf": "RGB scaled to [-1, 1] (x / 127.5 - 1) before the model",
    "caffe": "RGB -> BGR, ImageNet mean subtracted, no scaling, before the model",
    "torch": "RGB scaled to [0, 1], then ImageNet mean and std normalised, before the model",
}


#: What a model file can be (``--model PATH``), with how inferbench recognises it.
FILE_FORMATS = {"keras": "a .keras file", "savedmodel": "a TF SavedModel folder", "onnx": "an .onnx file"}


@dataclass(frozen=True)
class ModelFile:
    """A model the user brings as a file (``--model PATH``): where it is, its format, the input it takes."""

    name: str  # the file's stem and 8 hex digits of its content's hash: the model's name in records and file names
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
    keras_builder: str | None  # attribute of keras.applications, or "module:function" (None: a model file)
    torchvision_builder: str | None  # function in torchvision.models, None if torchvision lacks it
    default_resolution: int
    min_resolution: int
    preprocessing: str  # key of PREPROCESSING
    source: ModelFile | None = None  # the user's model file, if the model is one
    family: str = ""  # the architecture family (one per family runs in the tests)
    resolution_multiple: int = 1  # the resolution must be a multiple of this (a ViT's patch size)
    packages: tuple[str, ...] = ()  # import names its builder needs besides TensorFlow and Keras
    extra: str = "tf"  # the pip extra that installs them

    @property
    def layout(self) -> str:
        return self.source.layout if self.source else "NHWC"

    @property
    def builder_path(self) -> str:
        """Where the Keras builder lives, for people: ``keras.applications.X`` or ``module.function``."""
        if self.keras_builder is None:
            return "(model file)"
        return self.keras_builder.replace(":", ".") if ":" in self.keras_builder \
            else f"keras.applications.{self.keras_builder}"

    @property
    def smallest(self) -> int:
        """The smallest resolution the model takes (``--resolution min``)."""
        if self.source is not None:
            return self.default_resolution
        step = self.resolution_multiple
        return -(-self.min_resolution // step) * step

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
        if res % self.resolution_multiple:
            raise UsageError(f"resolution {res} does not suit {self.name}: it takes multiples of "
                             f"{self.resolution_multiple} px (its patch size)")
        return res


#: keras.applications, each as (name, builder, torchvision twin, default px, minimum px, preprocessing, family).
#: The names are the torchvision-style snake_case of the class names; the minimum is what the builder accepts
#: without ImageNet weights (75 for the Inceptions, 71 for Xception, 32 elsewhere).
_APPLICATIONS = [
    ("convnext_tiny", "ConvNeXtTiny", "convnext_tiny", 224, 32, "included", "convnext"),
    ("convnext_small", "ConvNeXtSmall", "convnext_small", 224, 32, "included", "convnext"),
    ("convnext_base", "ConvNeXtBase", "convnext_base", 224, 32, "included", "convnext"),
    ("convnext_large", "ConvNeXtLarge", "convnext_large", 224, 32, "included", "convnext"),
    ("convnext_xlarge", "ConvNeXtXLarge", None, 224, 32, "included", "convnext"),
    ("densenet121", "DenseNet121", "densenet121", 224, 32, "torch", "densenet"),
    ("densenet169", "DenseNet169", "densenet169", 224, 32, "torch", "densenet"),
    ("densenet201", "DenseNet201", "densenet201", 224, 32, "torch", "densenet"),
    *[(f"efficientnet_b{i}", f"EfficientNetB{i}", f"efficientnet_b{i}", px, 32, "included", "efficientnet")
      for i, px in enumerate((224, 240, 260, 300, 380, 456, 528, 600))],
    *[(f"efficientnet_v2_{v.lower()}", f"EfficientNetV2{v}", f"efficientnet_v2_{v.lower()}" if v in "SML" else None,
       px, 32, "included", "efficientnet_v2")
      for v, px in (("B0", 224), ("B1", 240), ("B2", 260), ("B3", 300), ("S", 384), ("M", 480), ("L", 480))],
    ("inception_resnet_v2", "InceptionResNetV2", None, 299, 75, "tf", "inception"),
    ("inception_v3", "InceptionV3", "inception_v3", 299, 75, "tf", "inception"),
    ("mobilenet", "MobileNet", None, 224, 32, "tf", "mobilenet"),
    ("mobilenet_v2", "MobileNetV2", "mobilenet_v2", 224, 32, "tf", "mobilenet"),
    ("mobilenet_v3_large", "MobileNetV3Large", "mobilenet_v3_large", 224, 32, "included", "mobilenet"),
    ("mobilenet_v3_small", "MobileNetV3Small", "mobilenet_v3_small", 224, 32, "included", "mobilenet"),
    ("nasnet_large", "NASNetLarge", None, 331, 32, "tf", "nasnet"),
    ("nasnet_mobile", "NASNetMobile", None, 224, 32, "tf", "nasnet"),
    ("resnet50", "ResNet50", "resnet50", 224, 32, "caffe", "resnet"),
    ("resnet101", "ResNet101", "resnet101", 224, 32, "caffe", "resnet"),
    ("resnet152", "ResNet152", "resnet152", 224, 32, "caffe", "resnet"),
    ("resnet50_v2", "ResNet50V2", None, 224, 32, "tf", "resnet_v2"),
    ("resnet101_v2", "ResNet101V2", None, 224, 32, "tf", "resnet_v2"),
    ("resnet152_v2", "ResNet152V2", None, 224, 32, "tf", "resnet_v2"),
    ("vgg16", "VGG16", "vgg16", 224, 32, "caffe", "vgg"),
    ("vgg19", "VGG19", "vgg19", 224, 32, "caffe", "vgg"),
    ("xception", "Xception", None, 299, 71, "tf", "xception"),
]

#: torchvision's names for the RegNets it implements (the same configurations, named by FLOPs).
_TORCHVISION_REGNETS = {"004": "400mf", "008": "800mf", "016": "1_6gf", "032": "3_2gf", "080": "8gf", "160": "16gf",
                        "320": "32gf"}

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        *[ModelSpec(name, builder, twin, px, minimum, prep, family=family)
          for name, builder, twin, px, minimum, prep, family in _APPLICATIONS],
        # Keras 2's RegNets, which Keras 3 dropped, built by inferbench.registry.builders
        *[ModelSpec(f"regnet{b}_{f}", f"inferbench.registry.builders:regnet{b}{f}",
                    f"regnet_{b}_{_TORCHVISION_REGNETS[f]}" if f in _TORCHVISION_REGNETS else None, 224, 32,
                    "included", family="regnet")
          for b in "xy" for f in ("002", "004", "006", "008", "016", "032", "040", "064", "080", "120", "160", "320")],
        ModelSpec("vgg16_bn", "inferbench.registry.builders:vgg16_bn", "vgg16_bn", 224, 32, "caffe", family="vgg"),
        ModelSpec("vit_b_16", "inferbench.registry.builders:vit_b16", "vit_b_16", 224, 32, "tf", family="vit",
                  resolution_multiple=16, packages=("keras_hub",), extra="vit"),
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
        raise UsageError(f"unknown model {name!r}{did_you_mean(name, MODELS)}; valid models: "
                         f"{', '.join(sorted(MODELS))}, or the path of "
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
    if text in MODELS:
        return False
    if text.endswith((".keras", ".onnx")) or "/" in text:
        return True
    try:
        return Path(text).is_dir()
    except OSError:  # a name longer than the file system takes is no folder
        return False


def open_model_file(text: str, input_shape: str | None = None, resolution: int | None = None) -> ModelFile:
    """Recognise and check a model file without importing a framework (an ONNX file needs the ``onnx``
    package); its input shape comes from the file, else from ``--input-shape`` (or ``--resolution``)."""
    path = Path(text).expanduser()
    try:
        exists = path.exists()
    except OSError as exc:  # ENAMETOOLONG
        raise UsageError(f"--model {text}: {exc.strerror or exc}") from None
    if not exists:
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
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "model"
    # the content's hash is part of the name, so of every cell's identity: two different networks saved under one
    # name never pool in a report or pair in compare, and the same file copied elsewhere still does
    return ModelFile(f"{name}-{content_digest(path)}", str(path.resolve()), fmt, int(h), layout, batch)


def content_digest(path: Path) -> str:
    """8 hex digits of the sha256 of a model file (of every file of a SavedModel folder, with their paths)."""
    from ..base.digest import sha256_file, sha256_tree

    return (sha256_file(path) if path.is_file() else sha256_tree(path))[:8]


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
    from .filecheck import keras_config, keras_endpoints, keras_input_shape

    config = keras_config(path)
    keras_endpoints(config, path)
    return keras_input_shape(config, path)


def _onnx_input_shape(path: Path) -> tuple[int | None, ...]:
    try:
        import onnx
    except ImportError:
        raise UsageError("reading an .onnx model needs the onnx package: pip install -e \".[onnxruntime]\"") from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and others for a file that is not a model
        raise UsageError(f"{path} is not a readable ONNX model: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from None
    from .filecheck import check_onnx

    check_onnx(model, path)
    inits = {i.name for i in model.graph.initializer}
    (first,) = [i for i in model.graph.input if i.name not in inits]
    return tuple(d.dim_value or None for d in first.type.tensor_type.shape.dim)


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
    elif spec.preprocessing == "torch":
        out = (images / 255.0 - _TORCH_MEAN) / _TORCH_STD
    else:  # pragma: no cover - registry is static
        raise ValueError(spec.preprocessing)
    return np.ascontiguousarray(out, dtype=np.float32)


def make_inputs(spec: ModelSpec, batch: int, resolution: int, seed: int) -> np.ndarray:
    """A model-ready batch of seeded image-like inputs (float32, in the model's layout: NHWC, or NCHW)."""
    out = preprocess(spec, make_images(batch, resolution, seed))
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)) if spec.layout == "NCHW" else out


#: The agreement inputs (:func:`agreement_inputs`) come in chunks of this many, each from its own seed: the first N of
#: a larger count are the same N.
AGREEMENT_CHUNK = 32
AGREEMENT_SEED = 1_000_000  # added to the run's seed: a stream apart from the reference (+2) and timed (+3) inputs


def agreement_inputs(spec: ModelSpec, resolution: int, seed: int, count: int) -> Iterator[np.ndarray]:
    """``count`` seeded image-like inputs, made as the 16 reference inputs are, for the agreement of a reduced
    precision with FP32 over many images (:func:`inferbench.measure.parity.agreement`), in chunks (1,000 at 224 px
    take 600 MB)."""
    for start in range(0, count, AGREEMENT_CHUNK):
        yield make_inputs(spec, min(AGREEMENT_CHUNK, count - start), resolution,
                          seed + AGREEMENT_SEED + start // AGREEMENT_CHUNK)


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
        from .filecheck import keras_config, keras_endpoints

        keras_endpoints(keras_config(path, "weights file"), path)
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
    builder = keras_builder(spec)
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


def keras_builder(spec: ModelSpec) -> Any:
    """The function that builds ``spec``'s Keras model: ``keras.applications.X(weights=..., input_shape=...,
    classifier_activation=...)`` or a builder of inferbench's with the same arguments."""
    import importlib

    import keras

    assert spec.keras_builder is not None, "a model file has no builder"
    module, _, name = spec.keras_builder.rpartition(":")
    return getattr(importlib.import_module(module) if module else keras.applications, name)


def load_keras(path: str | Path) -> Any:
    """A saved ``.keras`` model (uncompiled). A model built with keras-hub needs its classes registered first
    (imported only then: it takes seconds)."""
    import keras

    from .filecheck import keras_config

    if '"keras_hub' in json.dumps(keras_config(Path(path))):  # bounded: a zip bomb is refused before Keras reads it
        import keras_hub  # noqa: F401
    with warnings.catch_warnings():  # keras-hub's classifier says its compile() was not called: none is wanted
        warnings.filterwarnings("ignore", message=".*compile\\(\\)` was not called.*")
        return keras.saving.load_model(path, compile=False)


def _load_keras_file(path: str, shape: tuple[int, ...]) -> Any:
    try:
        model = load_keras(path)
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


def walk_layers(model: Any) -> Iterator[Any]:
    """Every layer inside ``model``, depth first, into nested models and layers that hold layers (keras-hub)."""
    for layer in getattr(model, "layers", None) or getattr(model, "_layers", None) or []:
        yield layer
        yield from walk_layers(layer)


def _randomise_and_calibrate(spec: ModelSpec, model: Any, resolution: int, seed: int) -> None:
    """Seeded weights whose outputs tell a correct export from a broken one: the scales and offsets of every
    batch and layer normalisation randomised, ConvNeXt's layer scales (1e-6 at init: the residual branches
    would contribute nothing, so a wrong branch would still pass) set near 1, and the batch-norm moving
    statistics calibrated on image-like inputs.

    Conditioned so that rounding does not compound through depth, as it does not in a trained network (see
    :data:`CONDITIONING`): each depthwise or grouped kernel gets a smooth part (its mean |weight| added to every
    tap), and batch-norm offsets are centred on ``BN_OFFSET`` rather than 0."""
    import keras

    rng = np.random.default_rng(seed)
    layers = list(walk_layers(model))
    smooth_kernels(layers)
    bns = [layer for layer in layers if isinstance(layer, keras.layers.BatchNormalization)]
    norms = bns + [layer for layer in layers if isinstance(layer, keras.layers.LayerNormalization)]
    for norm in norms:
        if norm.gamma is not None:
            norm.gamma.assign(rng.uniform(0.5, 1.5, norm.gamma.shape).astype("float32"))
        if norm.beta is not None:
            centre = BN_OFFSET if isinstance(norm, keras.layers.BatchNormalization) else 0.0
            norm.beta.assign(rng.normal(centre, 0.1, norm.beta.shape).astype("float32"))
    for layer in layers:
        if type(layer).__name__ == "LayerScale":
            layer.gamma.assign(rng.uniform(0.5, 1.0, layer.gamma.shape).astype("float32"))
    calib, chunk = make_inputs(spec, 32, resolution, seed + 1), images_per_call(resolution, 32)
    if not norms:
        _calibrate_without_norms(spec, model, layers, resolution, seed, rng)
    if bns:  # one batch (momentum 0: its statistics), of as many images as fit at this resolution
        momenta = [bn.momentum for bn in bns]
        for bn in bns:
            bn.momentum = 0.0
        graph_call(model, training=True)(calib[:chunk])
        for bn, mom in zip(bns, momenta):
            bn.momentum = mom
    _standardise_head(model, layers, calib, chunk)


#: Where the seeded batch-norm offsets are centred (see :data:`CONDITIONING`).
BN_OFFSET = 0.5
#: Why the seeded weights are conditioned, measured (benchmarks/reduced_precision.py, committed in
#: benchmark_results/reduced-precision-cpu-20261127: torch twins at 224 px on the 16 reference inputs against FP64;
#: docs/method.md has the table). With plain random kernels the error of a reduced-precision computation grew block
#: by block like a chaotic network's: MobileNetV3-Large's FP16 relative error 1e-3 after its stem, 0.12 after its last
#: block, 0.21 of an image's largest logit at the end (12 of 16 top-1 agreeing; BF16 1.16, 4 of 16), where a trained
#: network loses hardly any accuracy in FP16. A random, zero-mean depthwise kernel is a high-pass filter: its gain on
#: rounding noise (white) far exceeds its gain on image-like activations (smooth), and the next batch norm scales the
#: activations back up, noise and all. With a smooth part in each such kernel and the offsets at +0.5 (fewer units at
#: the activations' kink) the same model's FP16 error is 0.015 (BF16 0.165, cosine 0.991, 16 of 16); MobileNetV3-Small
#: 0.068 -> 0.017, ResNet-50 (no depthwise kernels) 0.208 -> 0.027, EfficientNet-B0 0.143 -> 0.027.
CONDITIONING = "depthwise/grouped kernels + mean|w|; batch-norm offsets ~ N(0.5, 0.1)"


def smooth_kernels(layers: list[Any]) -> None:
    """Each depthwise or grouped kernel given a smooth part: its mean |weight| added to every tap (see
    :data:`CONDITIONING`); a separable convolution's (Xception, NASNet) depthwise half too."""
    import keras

    for layer in layers:
        if isinstance(layer, keras.layers.SeparableConv2D):
            kernel = layer.depthwise_kernel
        elif isinstance(layer, keras.layers.DepthwiseConv2D) or getattr(layer, "groups", 1) > 1:
            kernel = layer.kernel
        else:
            continue
        w = np.asarray(kernel)
        kernel.assign((w + np.abs(w).mean()).astype("float32"))


def images_per_call(resolution: int, at_224: int) -> int:
    """How many images one Keras call on a batch may take at ``resolution``: ``at_224`` at 224 px and below,
    fewer in proportion to the pixels above it (at least 4)."""
    return max(4, min(at_224, int(at_224 * (224 / resolution) ** 2)))


def graph_call(model: Any, training: bool = False) -> Any:
    """``model`` as a TensorFlow graph function (a batch in, its outputs out). Called eagerly, a functional
    Keras model keeps every activation until the call ends: 8 images at 380 px took EfficientNet-B4 to 6.3 GB,
    the graph function to 1.3 GB (32 images went past 24 GB)."""
    import tensorflow as tf

    return tf.function(lambda x: model(x, training=training))


def _standardise_head(model: Any, layers: list[Any], calib: np.ndarray, chunk: int) -> None:
    """Each class's logit standardised over the calibration inputs (the classifier's kernel and bias divided by
    its standard deviation, its mean taken out of the bias). Pooled features after a ReLU share a large common
    part, so with random weights one or two classes won nearly every input (RegNetX-200MF and NASNet-Mobile at
    224 px: 2 distinct top-1 classes over 16 inputs): a reference that could not tell a wrong export."""
    call = graph_call(model)
    outputs = np.concatenate([np.asarray(call(calib[i:i + chunk]), dtype=np.float64)
                              for i in range(0, len(calib), chunk)])
    classes = outputs.shape[-1]
    head = next((layer for layer in reversed(layers) if getattr(layer, "bias", None) is not None
                 and getattr(layer, "kernel", None) is not None and layer.kernel.shape[-1] == classes), None)
    if head is None or outputs.ndim != 2:
        return
    _standardise(head, outputs)


def _calibrate_without_norms(spec: ModelSpec, model: Any, layers: list[Any], resolution: int, seed: int,
                             rng: np.random.Generator) -> None:
    """A network without normalisation layers (VGG) gets what batch-norm calibration gives the others: layer by
    layer, each convolution's and dense layer's pre-activations standardised per channel on image-like inputs
    (kernel and bias divided by the channel's standard deviation, its mean taken out of the bias), plus a small
    random offset. With its stock init, VGG16's logits hardly depend on the input (the same top-1 class for
    nearly every image): no export could be told from a broken one.

    The hidden layers are standardised to the inputs' own scale, not to 1 (the head is standardised after): a
    weight's gradient grows with its layer's input, so unit activations after ±150 caffe inputs made the first
    convolution's gradient 10^4 times larger against its weights than any other layer's, and no single learning
    rate could train the model (the training scenario: 1e-3 diverged in three steps)."""
    import keras

    calib = make_inputs(spec, images_per_call(resolution, 16), resolution, seed + 1)
    scale = float(calib.std())
    for layer in layers:
        if not isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)) or layer.bias is None:
            continue
        activation, layer.activation = layer.activation, keras.activations.linear
        try:
            y = np.asarray(keras.Model(model.input, layer.output)(calib, training=False), dtype=np.float64)
        finally:
            layer.activation = activation
        _standardise(layer, y, rng.normal(0.0, 0.1, y.shape[-1]), scale)


def _standardise(layer: Any, outputs: np.ndarray, offset: Any = 0.0, scale: float = 1.0) -> None:
    """Scale a linear layer (its kernel's last axis: the output channels) so that ``outputs``, what it gave on
    the calibration inputs, would have zero mean and standard deviation ``scale`` per channel (plus ``offset``,
    in units of ``scale``)."""
    axes = tuple(range(outputs.ndim - 1))
    mean, std = outputs.mean(axis=axes), np.maximum(outputs.std(axis=axes), 1e-6) / scale
    layer.kernel.assign((np.asarray(layer.kernel) / std).astype("float32"))
    layer.bias.assign(((np.asarray(layer.bias) - mean) / std + scale * offset).astype("float32"))
