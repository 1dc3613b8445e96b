"""What every Keras-based trainer (``keras-eager``, ``keras``, ``kerasxla``, ``tf``, ``tfxla``) and the training
reference share: the model made ready to train as the run asks (dropout off, batch norm in its mode and kernel,
the layout), its loss, its optimizer, its trainable variables by name and their gradients on TensorFlow. Nothing is
imported before a child process calls these."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..measure.training import ADAM, LEARNING_RATES, MOMENTUM
from ..registry.keras_models import walk_layers
from .base import Trainer

#: Layers that take their layout as ``data_format`` or do not care: what --channels-first can move to NCHW.
_LAYOUT_FREE = ("InputLayer", "ReLU", "Activation", "Add", "Multiply", "Dropout", "Flatten", "Dense")


def for_training(model: Any, options: Any) -> Any:
    """``model`` ready for the training scenario: dropout and stochastic depth off (random masks cannot match across
    frameworks; the step computes everything else), batch norm frozen (its moving statistics, its scale and offset
    not trained) for ``bn_mode`` frozen, and for ``fused_bn`` / ``channels_first`` a copy with TensorFlow's fused
    batch-norm kernel / in NCHW, with the same weights."""
    import keras

    if options.fused_bn or options.channels_first:
        model = _rebuilt(model, options.fused_bn, options.channels_first)
    for layer in walk_layers(model):
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
        if hasattr(layer, "drop_path_rate"):  # ConvNeXt's stochastic depth
            layer.drop_path_rate = 0.0
        if isinstance(layer, keras.layers.BatchNormalization) and options.bn_mode == "frozen":
            layer.trainable = False  # Keras 3: a frozen batch norm normalises with its moving statistics
    return model


def _rebuilt(model: Any, fused: bool, channels_first: bool) -> Any:
    import keras

    if channels_first:
        odd = sorted({type(layer).__name__ for layer in model.layers if "data_format" not in layer.get_config()
                      and type(layer).__name__ not in _LAYOUT_FREE + ("BatchNormalization",)})
        if odd:
            raise UsageError(f"--channels-first: {model.name} has layers inferbench cannot move to NCHW "
                             f"({', '.join(odd[:4])})")
    fused_class = fused_batch_norm() if fused else None

    def clone(layer: Any) -> Any:
        config = layer.get_config()
        cls = type(layer)
        if channels_first and "data_format" in config:
            config["data_format"] = "channels_first"
        if isinstance(layer, keras.layers.BatchNormalization):
            if channels_first:
                config["axis"] = 1
            cls = fused_class or cls
        if channels_first and isinstance(layer, keras.layers.Dense) and len(layer.input.shape) != 2:
            raise UsageError(f"--channels-first: {layer.name} is a Dense layer on feature maps; its layout "
                             "would change")
        return cls.from_config(config)

    shape = tuple(model.inputs[0].shape[1:])
    inputs = keras.Input((shape[2], shape[0], shape[1]) if channels_first else shape)
    rebuilt = keras.models.clone_model(model, input_tensors=inputs, clone_function=clone)
    rebuilt.set_weights(model.get_weights())  # a kernel's shape is the same in either layout
    return rebuilt


def fused_batch_norm() -> type:
    """Keras' BatchNormalization computed by TensorFlow's fused kernel (``FusedBatchNormV3``, the seed's
    ``fused=True``: Keras 3 dropped the option and composes moments and normalisation on every backend)."""
    import keras
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        raise UsageError("--fused-batch-norm is TensorFlow's kernel: it needs Keras on TensorFlow")

    class FusedBatchNormalization(keras.layers.BatchNormalization):
        def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
            fmt = "NCHW" if self.axis in (1, [1]) else "NHWC"
            channels = inputs.shape[1 if fmt == "NCHW" else -1]
            scale = self.gamma if self.scale else tf.ones([channels])
            offset = self.beta if self.center else tf.zeros([channels])
            if training and self.trainable:
                y, mean, var = tf.compat.v1.nn.fused_batch_norm(inputs, scale, offset, epsilon=self.epsilon,
                                                                data_format=fmt, is_training=True)
                self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1 - self.momentum))
                self.moving_variance.assign(self.moving_variance * self.momentum + var * (1 - self.momentum))
                return y
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(inputs, scale, offset, mean=self.moving_mean,
                                                       variance=self.moving_variance, epsilon=self.epsilon,
                                                       data_format=fmt, is_training=False)
            return y

    return FusedBatchNormalization


class KerasTraining(Trainer):
    """What the Keras-based trainers share: the batch in the run's layout, the weights by name, the record's facts.
    (``self.model``, ``self.options`` and ``prepare`` are the trainer's.)"""

    model: Any
    options: Any

    def ready(self, model: Any, options: Any) -> Any:
        """``model`` made ready to train (:func:`for_training`) and kept; returns it."""
        self.options = options
        self.model = for_training(model, options)
        self.classes = classes(self.model)
        return self.model

    def prepare_batch(self, inputs: np.ndarray, labels: np.ndarray) -> Any:
        if self.options.channels_first:
            inputs = np.ascontiguousarray(inputs.transpose(0, 3, 1, 2))
        return self.prepare(inputs), self.prepare(labels)

    def weights(self) -> dict[str, np.ndarray]:
        return weights(self.model)

    def set_learning_rate(self, rate: float) -> None:
        (getattr(self, "optimizer", None) or self.model.optimizer).learning_rate.assign(rate)

    def training_details(self) -> dict[str, Any]:
        return {"layout": "NCHW" if self.options.channels_first else "NHWC",
                "batch_norm_kernel": "tf.fused_batch_norm" if self.options.fused_bn else "keras"}


def loss_function() -> Any:
    """Softmax cross-entropy of the logits against integer labels, averaged over the batch."""
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def optimizer(name: str) -> Any:
    """The run's optimizer with inferbench's hyper-parameters (:mod:`inferbench.measure.training`)."""
    import keras

    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=LEARNING_RATES["sgd"], momentum=MOMENTUM, nesterov=False)
    return keras.optimizers.Adam(learning_rate=LEARNING_RATES["adam"], **ADAM)


def trainable(model: Any) -> list[tuple[str, Any]]:
    """The trainable variables by name (``<layer>/<variable>``, as the weight port names them)."""
    named = [(v.path, v) for v in model.trainable_variables]
    if len({n for n, _ in named}) != len(named):
        raise ValueError(f"{model.name}: two trainable variables share a name")
    return named


def weights(model: Any) -> dict[str, np.ndarray]:
    import keras

    return {name: np.array(keras.ops.convert_to_numpy(v), dtype=np.float32) for name, v in trainable(model)}


def tf_gradients(model: Any, x: Any, y: Any) -> tuple[float, dict[str, np.ndarray]]:
    """The loss and every trainable variable's gradient at the current weights, by TensorFlow's tape (no update)."""
    import tensorflow as tf

    named = trainable(model)
    with tf.GradientTape() as tape:
        loss = loss_function()(y, model(x, training=True))
    grads = tape.gradient(loss, [v for _, v in named])
    return float(loss), {name: np.asarray(g, dtype=np.float32) for (name, _), g in zip(named, grads)}


def classes(model: Any) -> int:
    return int(model.outputs[0].shape[-1])
