"""Keras builders for registered models that ``keras.applications`` (Keras 3) does not ship, with its
builders' signature: ``builder(weights=None, classifier_activation=None, input_shape=(h, w, 3))``.

* RegNetX and RegNetY (Radosavovic et al., "Designing Network Design Spaces", 2020): the 24 ImageNet
  configurations that Keras 2 shipped as ``tf.keras.applications.regnet`` and Keras 3 dropped. Built
  here in Keras 3 with the same structure and configuration table (stage depths and widths, group
  width): stem 3x3/2 conv with 32 filters, four stages of X blocks (1x1, grouped 3x3, 1x1, residual;
  Y blocks add squeeze-and-excitation at a quarter of the block's input width), global average pooling,
  a dense head. The input is rescaled by 1/255 inside the model, as in Keras 2.
* VGG16 with batch norm (torchvision's ``vgg16_bn``), for the training scenario's batch-norm variants.
* ViT-B/16 (Dosovitskiy et al., 2021) through keras-hub's ``ViTBackbone`` and ``ViTImageClassifier``,
  built from its configuration offline (no preset is downloaded): 12 layers, 12 heads, width 768, MLP
  3072, patch 16, class token, an image of any size that is a multiple of 16 px.

There are no ImageNet weights for these builders here: ``weights="imagenet"`` is refused with one line.
Nothing here is imported before a child process builds a model.
"""

from __future__ import annotations

import functools
from typing import Any

from ..base.errors import UsageError

#: name -> (block type, stage depths, stage widths, group width); from Keras 2's RegNet table.
REGNETS: dict[str, tuple[str, tuple[int, ...], tuple[int, ...], int]] = {
    "x002": ("X", (1, 1, 4, 7), (24, 56, 152, 368), 8),
    "x004": ("X", (1, 2, 7, 12), (32, 64, 160, 384), 16),
    "x006": ("X", (1, 3, 5, 7), (48, 96, 240, 528), 24),
    "x008": ("X", (1, 3, 7, 5), (64, 128, 288, 672), 16),
    "x016": ("X", (2, 4, 10, 2), (72, 168, 408, 912), 24),
    "x032": ("X", (2, 6, 15, 2), (96, 192, 432, 1008), 48),
    "x040": ("X", (2, 5, 14, 2), (80, 240, 560, 1360), 40),
    "x064": ("X", (2, 4, 10, 1), (168, 392, 784, 1624), 56),
    "x080": ("X", (2, 5, 15, 1), (80, 240, 720, 1920), 120),
    "x120": ("X", (2, 5, 11, 1), (224, 448, 896, 2240), 112),
    "x160": ("X", (2, 6, 13, 1), (256, 512, 896, 2048), 128),
    "x320": ("X", (2, 7, 13, 1), (336, 672, 1344, 2520), 168),
    "y002": ("Y", (1, 1, 4, 7), (24, 56, 152, 368), 8),
    "y004": ("Y", (1, 3, 6, 6), (48, 104, 208, 440), 8),
    "y006": ("Y", (1, 3, 7, 4), (48, 112, 256, 608), 16),
    "y008": ("Y", (1, 3, 8, 2), (64, 128, 320, 768), 16),
    "y016": ("Y", (2, 6, 17, 2), (48, 120, 336, 888), 24),
    "y032": ("Y", (2, 5, 13, 1), (72, 216, 576, 1512), 24),
    "y040": ("Y", (2, 6, 12, 2), (128, 192, 512, 1088), 64),
    "y064": ("Y", (2, 7, 14, 2), (144, 288, 576, 1296), 72),
    "y080": ("Y", (2, 4, 10, 1), (168, 448, 896, 2016), 56),
    "y120": ("Y", (2, 5, 11, 1), (224, 448, 896, 2240), 112),
    "y160": ("Y", (2, 4, 11, 1), (224, 448, 1232, 3024), 112),
    "y320": ("Y", (2, 5, 12, 1), (232, 696, 1392, 3712), 232),
}


def group_count(width: int, group_width: int) -> int:
    """Groups of a block's 3x3 convolution. The group width is capped at the block's width, as in the
    RegNet paper's code (pycls): Keras 2's table gives RegNetX-8.0GF's first stage 80 filters in groups of 120,
    which its ``filters // group_width`` made zero groups (the model could not be built)."""
    return width // min(group_width, width)


def refuse_imagenet(names: list[str]) -> None:
    """``--weights imagenet`` for models inferbench builds itself: there are none (checked before any export, and
    again by each builder)."""
    if names:
        raise UsageError(f"--weights imagenet: inferbench builds {', '.join(names)} itself and has no ImageNet "
                         "weights for it; use --weights random or a .keras / .weights.h5 file of this architecture")


def regnet(config: str, weights: Any = None, classifier_activation: Any = None,
           input_shape: tuple[int, int, int] = (224, 224, 3)) -> Any:
    """RegNet ``config`` (a key of :data:`REGNETS`) as a functional Keras model ending in logits."""
    import keras
    from keras import layers

    name = f"regnet{config}"
    refuse_imagenet([name] if weights is not None else [])
    block, depths, widths, group_width = REGNETS[config]

    def conv_bn(x: Any, filters: int, kernel: int, prefix: str, stride: int = 1, groups: int = 1) -> Any:
        x = layers.Conv2D(filters, kernel, strides=stride, padding="same", groups=groups, use_bias=False,
                          kernel_initializer="he_normal", name=f"{prefix}_conv")(x)
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=f"{prefix}_bn")(x)

    def unit(x: Any, filters_in: int, filters_out: int, stride: int, prefix: str) -> Any:
        skip = conv_bn(x, filters_out, 1, f"{prefix}_skip", stride) if stride != 1 else x
        y = layers.ReLU(name=f"{prefix}_a_relu")(conv_bn(x, filters_out, 1, f"{prefix}_a"))
        y = layers.ReLU(name=f"{prefix}_b_relu")(
            conv_bn(y, filters_out, 3, f"{prefix}_b", stride, groups=group_count(filters_out, group_width)))
        if block == "Y":  # squeeze-and-excitation, squeezed to a quarter of the block's input width
            s = layers.GlobalAveragePooling2D(keepdims=True, name=f"{prefix}_se_pool")(y)
            s = layers.Conv2D(int(filters_in * 0.25), 1, activation="relu", name=f"{prefix}_se_squeeze")(s)
            s = layers.Conv2D(filters_out, 1, activation="sigmoid", name=f"{prefix}_se_excite")(s)
            y = layers.Multiply(name=f"{prefix}_se")([y, s])
        y = conv_bn(y, filters_out, 1, f"{prefix}_c")
        return layers.ReLU(name=f"{prefix}_out")(layers.Add(name=f"{prefix}_add")([y, skip]))

    inputs = keras.Input(shape=input_shape)
    x = layers.Rescaling(1.0 / 255.0, name="rescaling")(inputs)
    x = layers.ReLU(name="stem_relu")(conv_bn(x, 32, 3, "stem", stride=2))
    filters_in = 32
    for stage, (depth, width) in enumerate(zip(depths, widths)):
        for i in range(depth):
            x = unit(x, filters_in if i == 0 else width, width, 2 if i == 0 else 1, f"s{stage + 1}_b{i + 1}")
        filters_in = width
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = layers.Dense(1000, activation=classifier_activation, name="predictions")(x)
    return keras.Model(inputs, outputs, name=name)


def vgg16_bn(weights: Any = None, classifier_activation: Any = None,
             input_shape: tuple[int, int, int] = (224, 224, 3)) -> Any:
    """VGG16 with a batch norm after every convolution (before its ReLU), as torchvision's ``vgg16_bn`` (epsilon
    1e-5, momentum 0.9 in Keras' convention: 0.1 in torch's); Keras' layer names, each batch norm
    ``<conv>_bn``. The seed's "plain" batch-norm variant of its VGG16 training table."""
    import keras
    from keras import layers

    refuse_imagenet(["vgg16_bn"] if weights is not None else [])
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for block, (convs, filters) in enumerate(((2, 64), (2, 128), (3, 256), (3, 512), (3, 512)), start=1):
        for i in range(1, convs + 1):
            name = f"block{block}_conv{i}"
            x = layers.Conv2D(filters, 3, padding="same", name=name)(x)
            x = layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name=f"{name}_bn")(x)
            x = layers.ReLU(name=f"{name}_relu")(x)
        x = layers.MaxPooling2D(2, strides=2, name=f"block{block}_pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(4096, activation="relu", name="fc1")(x)
    x = layers.Dense(4096, activation="relu", name="fc2")(x)
    outputs = layers.Dense(1000, activation=classifier_activation, name="predictions")(x)
    return keras.Model(inputs, outputs, name="vgg16_bn")


def vit_b16(weights: Any = None, classifier_activation: Any = None,
            input_shape: tuple[int, int, int] = (224, 224, 3)) -> Any:
    """ViT-B/16 from keras-hub's classes and configuration, ending in logits (no preset is downloaded)."""
    import keras
    import keras_hub

    refuse_imagenet(["vit_b_16"] if weights is not None else [])
    backbone = keras_hub.models.ViTBackbone(image_shape=tuple(input_shape), patch_size=(16, 16), num_layers=12,
                                            num_heads=12, hidden_dim=768, mlp_dim=3072, use_class_token=True)
    head = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=1000, preprocessor=None,
                                               activation=classifier_activation)
    inputs = keras.Input(shape=input_shape)  # a plain functional model: the Keras runners and exporters see one
    return keras.Model(inputs, head(inputs), name="vit_b_16")


def __getattr__(name: str) -> Any:
    """``regnetx002`` ... ``regnety320``: the builder of that RegNet configuration (registry entries name them)."""
    if name.startswith("regnet") and name[len("regnet"):] in REGNETS:
        return functools.partial(regnet, name[len("regnet"):])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
