"""The reference Keras model of a registered model: built by its builder (or loaded from the user's file), ending in
logits, its seeded random weights made non-degenerate and conditioned (docs/method.md: why a stock random init lets
any broken export pass). Keras is imported inside these functions only: they run in a child process."""

from __future__ import annotations

import importlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base.errors import UsageError
from ..base.size import Size, hw, pixels
from .filecheck import keras_config, keras_inputs
from .inputs import make_inputs
from .models import ModelSpec
from .outputs import LOGITS
from .sideinputs import bind_keras

if TYPE_CHECKING:  # pragma: no cover
    import keras


def build_keras_model(spec: ModelSpec, resolution: Size, weights: str, seed: int) -> keras.Model:
    """Build the reference Keras model, ending in logits (no softmax).

    ``random`` weights are seeded and made non-degenerate: the stock random init of MobileNetV3
    emits an exactly uniform softmax (and ~1e-11 logits), which would let any broken export pass
    parity. Batch-norm scales and offsets are randomised and the moving statistics calibrated on
    image-like inputs (one training-mode pass with momentum 0 sets them to the batch statistics).
    """
    import keras

    shape = (*hw(resolution), 3)
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
    import keras

    assert spec.keras_builder is not None, "a model file has no builder"
    module, _, name = spec.keras_builder.rpartition(":")
    return getattr(importlib.import_module(module) if module else keras.applications, name)


def load_keras(path: str | Path) -> Any:
    """A saved ``.keras`` model (uncompiled). A model built with keras-hub needs its classes registered first
    (imported only then: it takes seconds)."""
    import keras


    if '"keras_hub' in json.dumps(keras_config(Path(path))):  # bounded: a zip bomb is refused before Keras reads it
        import keras_hub  # noqa: F401
    with warnings.catch_warnings():  # keras-hub's classifier says its compile() was not called: none is wanted
        warnings.filterwarnings("ignore", message=".*compile\\(\\)` was not called.*")
        return keras.saving.load_model(path, compile=False, safe_mode=True)  # a Lambda's bytecode is refused


def output_names(model: Any) -> tuple[str, ...]:
    """The names a Keras model's outputs are declared by, in the order every export of it keeps (tf.nest's): one
    output is ``logits``; a list of them, each its layer's name, in the list's order; a mapping, its keys sorted."""
    structure = getattr(model, "output", None)
    if isinstance(structure, dict) and len(structure) > 1:
        return tuple(sorted(structure))
    if isinstance(structure, (list, tuple)) and len(structure) > 1:
        names = tuple(model.output_names)
        if len(set(names)) != len(names):
            raise UsageError(f"the model's outputs share names ({', '.join(names)}): inferbench compares each "
                             "output by its name")
        return names
    return (LOGITS,)


def _load_keras_file(path: str, shape: tuple[int, ...]) -> Any:
    try:
        model = load_keras(path)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"cannot load {path}: {first}") from None
    sides = keras_inputs(keras_config(Path(path)), Path(path))[1]
    if sides:  # bound into the model as constants: every runtime is fed the image alone
        model = bind_keras(model, sides, *shape[:2])
    got = tuple(model.inputs[0].shape[1:])
    if got != shape and any(g is not None and g != w for g, w in zip(got, shape)):
        raise UsageError(f"{path} takes inputs of shape {got}, not {shape}; pass --resolution "
                         f"{got[0] or shape[0]}x{got[1] or shape[1]}")
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


def _randomise_and_calibrate(spec: ModelSpec, model: Any, resolution: Size, seed: int) -> None:
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


def images_per_call(resolution: Size, at_224: int) -> int:
    """How many images one Keras call on a batch may take at ``resolution``: ``at_224`` at 224 x 224 px and below,
    fewer in proportion to the pixels above it (at least 4)."""
    return max(4, min(at_224, int(at_224 * 224 ** 2 / pixels(resolution))))


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


def _calibrate_without_norms(spec: ModelSpec, model: Any, layers: list[Any], resolution: Size, seed: int,
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
