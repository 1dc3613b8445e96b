"""Port Keras Applications weights onto their torchvision twins.

The two halves run in different processes (TensorFlow and torch never share one):

* :func:`keras_weights` (TensorFlow process) flattens a Keras model into a ``{name: ndarray}``
  dict, ready for ``np.savez``: every variable as ``"<layer>/<variable>"`` (e.g. ``conv/kernel``,
  ``conv_bn/moving_mean``) plus the layer settings the torch side needs (batch-norm epsilon,
  Rescaling/Normalization constants, layer order).
* :func:`build_torchvision` (torch process) builds ``torchvision.models.<name>(weights=None)``, loads
  those arrays into it, applies the structural fixes needed for identical results and returns an
  ``eval()`` module that takes NCHW float32 input in the same value range as the Keras model's
  input (Keras-side preprocessing layers, e.g. MobileNetV3's ``Rescaling``, are included).

Ported: mobilenet_v3_large, mobilenet_v3_small, mobilenet_v2, resnet50, efficientnet_b0, vgg16, vgg19, vgg16_bn.
Structural differences handled (each checked numerically against Keras at 160, 200 and 224 px:
max_rel_err <= 2.1e-5, top-1 16/16; removing a fix breaks parity; the slow tests check the ported
models end to end):

* Layouts: Conv2D kernel HWIO -> OIHW, DepthwiseConv2D kernel HWC1 -> C1HW, Dense (in, out) and
  1x1-conv heads on pooled features -> Linear (out, in).
* Stride-2 convolutions in the MobileNets and EfficientNet: Keras uses TF "same" padding or an explicit
  ``ZeroPadding2D(correct_pad(...))`` + "valid" conv (depthwise); both put the extra row/column at
  the bottom/right for even inputs, e.g. (0, 1) for k=3 and (1, 2) for k=5, while torchvision pads
  k//2 on every side. Such convs get padding=0 behind a :class:`TFSamePad` that computes TF's
  padding from the runtime input size (equal to ``correct_pad`` for odd and even sizes alike).
* Batch-norm epsilon is copied from Keras (1e-3 in the MobileNets and EfficientNet, 1.001e-5 in
  ResNet50); torchvision uses 1e-3 only in MobileNetV3 and 1e-5 elsewhere.
* Keras preprocessing layers at the model input (MobileNetV3: Rescaling(1/127.5, offset=-1);
  EfficientNet: Rescaling(1/255), Normalization and, with ImageNet weights, a per-channel
  Rescaling) are replayed in order by Rescale/Normalize modules in front of the network.
* ResNet50: Keras' ResNet50 is v1 (stride 2 on the first 1x1 conv of a block), torchvision's is
  v1.5 (stride 2 on the 3x3 conv): the stride is moved back to conv1. Keras convs have biases and
  torchvision's do not; each bias is folded into the following batch-norm's running mean
  (BN(y + b) with mean m == BN(y) with mean m - b).

The activations need no change: Keras hard_sigmoid/hard_swish are relu6(x + 3) / 6 based like
torch's Hardsigmoid/Hardswish, swish is SiLU, and the heads apply the same ops in the same order
(Keras' 1x1 convs on pooled features are Linear layers). Dropout and stochastic depth are no-ops
at inference. Nothing here imports a framework at module level.

Why one file: the two halves of a port must agree name for name (a Keras variable and the torch parameter it
becomes); each family's fixes sit beside the layout rules they amend.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import keras
    import torch


# --------------------------------------------------------------------------- Keras side
#: The key of the model input's (height, width) among the exported weights (not a weight: no port must use it).
INPUT_HW = "__input_hw__"


def keras_weights(model: keras.Model) -> dict[str, np.ndarray]:
    """Every weight of a (flat, Keras Applications) model as ``{"<layer>/<variable>": array}``.

    Besides the variables: ``<bn>/epsilon`` for each BatchNormalization layer,
    ``<layer>/scale`` and ``/offset`` for each Rescaling layer, ``<layer>/mean``, ``/variance``
    and ``/epsilon`` (the values the layer computes with) for each Normalization layer, and
    ``__layers__``: all layer names in model order (the order preprocessing layers apply in); ``__input_hw__``
    (:data:`INPUT_HW`): the input's height and width.
    Raises ValueError for what the port does not understand (nested models, inverted or
    non-channel Normalization).
    """
    import keras

    out: dict[str, np.ndarray] = {}

    def put(key: str, value: Any) -> None:
        if key in out:
            raise ValueError(f"duplicate Keras weight name {key!r}")
        out[key] = np.asarray(value, dtype=np.float32)

    n_vars = 0
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            raise ValueError(f"nested model {layer.name!r} is not supported")
        if isinstance(layer, keras.layers.Normalization):
            # its variables (adapt mean/variance, count) may not be what it computes with (when
            # built with mean=/variance=): export the finalized values, one per channel
            mean, var = (np.squeeze(keras.ops.convert_to_numpy(v)) for v in (layer.mean, layer.variance))
            if layer.invert or mean.ndim > 1 or var.ndim > 1:
                raise ValueError(f"Normalization {layer.name!r}: only per-channel, non-inverted is supported")
            put(f"{layer.name}/mean", mean)
            put(f"{layer.name}/variance", var)
            put(f"{layer.name}/epsilon", keras.backend.epsilon())
            n_vars += len(layer.weights)
            continue
        for var in layer.weights:
            put(f"{layer.name}/{var.name}", keras.ops.convert_to_numpy(var))
            n_vars += 1
        if isinstance(layer, keras.layers.BatchNormalization):
            put(f"{layer.name}/epsilon", layer.epsilon)
        elif isinstance(layer, keras.layers.Rescaling):  # scalars or per-channel lists
            put(f"{layer.name}/scale", layer.scale)
            put(f"{layer.name}/offset", layer.offset)
    out["__layers__"] = np.array([layer.name for layer in model.layers])
    out[INPUT_HW] = np.array([int(d) for d in model.input_shape[1:3]])  # what a flatten's map size follows from
    if n_vars != len(model.weights):  # a weight owned by no top-level layer would be lost
        raise ValueError(f"exported {n_vars} of {len(model.weights)} weights of {model.name}")
    return out


# --------------------------------------------------------------------------- torch side
def ported_models() -> list[str]:
    """Model names (inferbench registry names == torchvision builder names) with a port."""
    return sorted(_PORTS)


def build_torchvision(model_name: str, weights: Mapping[str, np.ndarray]) -> torch.nn.Module:
    """The torchvision twin of a Keras model, with its weights, in eval mode.

    ``model_name`` is the inferbench model name (for every ported model also the name of the
    torchvision builder); ``weights`` the :func:`keras_weights` dict (or the ``np.load`` of it).
    The module takes NCHW float32 input in the Keras model's input range (channels in the same
    order) and returns logits. Raises ValueError (one line) when the model has no port or the
    weights do not fit it.
    """
    port = _PORTS.get(model_name)
    if port is None:
        raise ValueError(
            f"no Keras->torchvision weight port for {model_name!r} (ported: {', '.join(ported_models())})"
        )
    import torch
    import torchvision

    mods = _modules()
    reader = _Reader(weights)
    net = getattr(torchvision.models, model_name)(weights=None)
    with torch.no_grad():
        port(net, reader, mods)
    preprocess = reader.preprocessing(mods)
    reader.check_complete(net)
    reader.check_all_used()
    return mods.KerasTwin(net, preprocess).eval()


# --------------------------------------------------------------------------- helpers
class _Reader:
    """Hands out Keras arrays by name, converting layouts, and checks that nothing is left over.

    Also remembers which torch tensors were written, so that a torch parameter with no Keras
    counterpart (left at its random init) is an error too.
    """

    def __init__(self, weights: Mapping[str, np.ndarray]):
        self._w = {key: np.asarray(weights[key]) for key in weights.keys()}
        self._used: set[str] = set()
        self._written: set[int] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._w

    def __call__(self, key: str) -> np.ndarray:
        try:
            value = self._w[key]
        except KeyError:
            raise ValueError(f"Keras weights lack {key!r} (weights of a different model?)") from None
        self._used.add(key)
        return value

    def copy(self, dst: torch.Tensor, src: np.ndarray, what: str) -> None:
        import torch

        if tuple(dst.shape) != src.shape:
            raise ValueError(f"{what}: Keras shape {src.shape} does not fit torch shape {tuple(dst.shape)}")
        dst.copy_(torch.from_numpy(np.ascontiguousarray(src, dtype=np.float32)))
        self._written.add(id(dst))

    # -- layer loaders (Keras layer name -> torch module) --
    def conv(self, conv: torch.nn.Conv2d, name: str, *, depthwise: bool = False) -> None:
        """Load a Conv2D/DepthwiseConv2D kernel (and bias)."""
        if self._conv(conv, name, depthwise=depthwise) is not None:
            raise ValueError(f"{name}: Keras conv has a bias, torch conv has none")

    def _conv(self, conv: torch.nn.Conv2d, name: str, *, depthwise: bool = False) -> np.ndarray | None:
        """Load a conv kernel; returns the Keras bias when the torch conv has none (to fold)."""
        kernel = self(f"{name}/kernel")
        # Conv2D: (kh, kw, in, out) -> (out, in, kh, kw); depthwise: (kh, kw, C, 1) -> (C, 1, kh, kw)
        self.copy(conv.weight, kernel.transpose((2, 3, 0, 1) if depthwise else (3, 2, 0, 1)), name)
        bias = self(f"{name}/bias") if f"{name}/bias" in self else None
        if conv.bias is not None:
            if bias is None:
                raise ValueError(f"{name}: torch conv has a bias, Keras conv has none")
            self.copy(conv.bias, bias, f"{name}/bias")
            return None
        return bias

    def bn(self, bn: torch.nn.BatchNorm2d, name: str, fold_bias: np.ndarray | None = None) -> None:
        """Load a BatchNormalization layer; ``fold_bias`` (of the conv before it) shifts the mean."""
        mean = self(f"{name}/moving_mean")
        if fold_bias is not None:
            mean = mean - fold_bias
        for dst, key in ((bn.weight, "gamma"), (bn.bias, "beta")):  # (each set: affine batch norms)
            if f"{name}/{key}" in self:
                self.copy(dst, self(f"{name}/{key}"), f"{name}/{key}")
            else:  # Keras scale=False / center=False
                self.copy(dst, np.full(dst.shape, 1.0 if key == "gamma" else 0.0, np.float32), name)
        self.copy(cast("torch.Tensor", bn.running_mean), mean, f"{name}/moving_mean")
        self.copy(cast("torch.Tensor", bn.running_var), self(f"{name}/moving_variance"), f"{name}/moving_variance")
        bn.eps = float(self(f"{name}/epsilon"))

    def conv_bn(self, conv: Any, bn: Any, conv_name: str, bn_name: str, *, depthwise: bool = False) -> None:
        self.bn(bn, bn_name, fold_bias=self._conv(conv, conv_name, depthwise=depthwise))

    def linear(self, linear: torch.nn.Linear, name: str) -> None:
        """Load a Dense layer, or a 1x1 Conv2D applied to pooled (1x1) features, into a Linear."""
        kernel = self(f"{name}/kernel")
        if kernel.ndim == 4:
            if kernel.shape[:2] != (1, 1):
                raise ValueError(f"{name}: only a 1x1 conv can become a Linear, got {kernel.shape}")
            kernel = kernel[0, 0]
        self.copy(linear.weight, kernel.T, f"{name}/kernel")
        self.copy(linear.bias, self(f"{name}/bias"), f"{name}/bias")

    def preprocessing(self, mods: Any) -> Any:
        """The Keras model's Rescaling/Normalization layers, in order, as a torch module (or None).

        They must all come before the first layer with a kernel, i.e. act on the raw input.
        """
        from torch import nn

        order = [str(name) for name in self("__layers__")]
        steps = [i for i, name in enumerate(order) if f"{name}/scale" in self or f"{name}/variance" in self]
        first_kernel = min(i for i, name in enumerate(order) if f"{name}/kernel" in self)
        if steps and steps[-1] > first_kernel:
            raise ValueError(f"preprocessing layer {order[steps[-1]]!r} is not at the model input")
        modules = []
        for name in (order[i] for i in steps):
            if f"{name}/scale" in self:
                modules.append(mods.Rescale(self(f"{name}/scale"), self(f"{name}/offset")))
            else:
                modules.append(mods.Normalize(self(f"{name}/mean"), self(f"{name}/variance"),
                                              self(f"{name}/epsilon")))
        return nn.Sequential(*modules) if modules else None

    # -- completeness checks --
    def check_complete(self, net: torch.nn.Module) -> None:
        missed = [name for name, t in [*net.named_parameters(), *net.named_buffers()]
                  if id(t) not in self._written and not name.endswith("num_batches_tracked")]
        if missed:
            raise ValueError(f"torch tensors without a Keras weight: {', '.join(missed[:5])}")

    def check_all_used(self) -> None:
        unused = sorted(set(self._w) - self._used - {INPUT_HW})
        if unused:
            raise ValueError(f"Keras weights not used by the port: {', '.join(unused[:5])}")


@functools.cache
def _modules() -> Any:
    """The torch module classes, defined on first use so that this file imports without torch."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class TFSamePad(nn.Module):
        """Zero padding as TensorFlow's padding="same" computes it, from the runtime input size.

        Per spatial dim of size n: total = max(k - s, 0) if n % s == 0 else max(k - n % s, 0),
        with total // 2 before and the rest after. For stride 2 this equals Keras'
        ``imagenet_utils.correct_pad`` (plus "valid" conv) for both odd and even n.
        """

        def __init__(self, kernel_size: tuple[int, int], stride: tuple[int, int]):
            super().__init__()
            self.kernel_size = tuple(kernel_size)
            self.stride = tuple(stride)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pads = []
            for n, k, s in zip(x.shape[-2:], self.kernel_size, self.stride):
                total = max(k - s, 0) if n % s == 0 else max(k - n % s, 0)
                pads.append((total // 2, total - total // 2))
            (top, bottom), (left, right) = pads
            return F.pad(x, (left, right, top, bottom))

        def extra_repr(self) -> str:
            return f"kernel_size={self.kernel_size}, stride={self.stride}"

    def per_channel(value: np.ndarray) -> torch.Tensor:
        """A scalar, or a per-channel vector shaped (C, 1, 1) to broadcast over NCHW."""
        value = np.asarray(value, dtype=np.float32)
        return torch.from_numpy(value.reshape(-1, 1, 1) if value.ndim else value)

    class Rescale(nn.Module):
        """Keras ``Rescaling``: x * scale + offset, in float32 as Keras computes it."""

        def __init__(self, scale: np.ndarray, offset: np.ndarray):
            super().__init__()
            self.register_buffer("scale", per_channel(scale))
            self.register_buffer("offset", per_channel(offset))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale, offset = cast(torch.Tensor, self.scale), cast(torch.Tensor, self.offset)
            return x * scale + offset

    class Normalize(nn.Module):
        """Keras ``Normalization``: (x - mean) / max(sqrt(variance), epsilon), per channel."""

        def __init__(self, mean: np.ndarray, variance: np.ndarray, epsilon: np.ndarray):
            super().__init__()
            denom = np.maximum(np.sqrt(np.asarray(variance, np.float32)), np.float32(epsilon))
            self.register_buffer("mean", per_channel(mean))
            self.register_buffer("denom", per_channel(denom))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mean, denom = cast(torch.Tensor, self.mean), cast(torch.Tensor, self.denom)
            return (x - mean) / denom

    class KerasTwin(nn.Module):
        """The torchvision network preceded by the Keras model's own preprocessing, if any."""

        def __init__(self, net: nn.Module, preprocess: nn.Module | None):
            super().__init__()
            self.preprocess = preprocess if preprocess is not None else nn.Identity()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(self.preprocess(x))

    def tf_same(conv: nn.Conv2d) -> nn.Module:
        """``conv`` with torchvision's symmetric padding replaced by TF "same" padding."""
        if conv.dilation != (1, 1):
            raise ValueError("TF same padding is only implemented for dilation 1")
        conv.padding = (0, 0)
        k, s = conv.kernel_size, conv.stride
        return nn.Sequential(TFSamePad((k[0], k[-1]), (s[0], s[-1])), conv)

    return types.SimpleNamespace(TFSamePad=TFSamePad, Rescale=Rescale, Normalize=Normalize,
                                 KerasTwin=KerasTwin, tf_same=tf_same)


# --------------------------------------------------------------------------- per-model ports
def _port_mobilenet_v3(net: Any, r: _Reader, mods: Any) -> None:
    """keras.applications.MobileNetV3Large/Small -> torchvision mobilenet_v3_large/small.

    Same layer sequence on both sides (stem conv/bn/hard-swish; inverted residual blocks
    [expand] -> depthwise -> [squeeze-excite: pool, 1x1 conv, ReLU, 1x1 conv, hard-sigmoid] ->
    project; last 1x1 conv/bn/hard-swish; pool -> 1x1 conv (Linear) -> hard-swish -> dropout ->
    1x1 conv (Linear)). BN eps 1e-3 on both sides; hard-sigmoid relu6(x+3)/6 on both sides.
    """
    from torchvision.ops import SqueezeExcitation

    feats = net.features
    r.conv_bn(feats[0][0], feats[0][1], "conv", "conv_bn")
    feats[0][0] = mods.tf_same(feats[0][0])  # stride-2 stem conv, Keras padding="same"
    for i, block in enumerate(feats[1:-1]):
        prefix = "expanded_conv_" if i == 0 else f"expanded_conv_{i}_"
        layers = list(block.block)
        if i > 0:  # Keras expands in every block but the first (so does torchvision here)
            expand = layers.pop(0)
            r.conv_bn(expand[0], expand[1], f"{prefix}expand", f"{prefix}expand_bn")
        dw = layers.pop(0)
        r.conv_bn(dw[0], dw[1], f"{prefix}depthwise", f"{prefix}depthwise_bn", depthwise=True)
        if dw[0].stride != (1, 1):  # Keras: ZeroPadding2D(correct_pad) + "valid" depthwise conv
            dw[0] = mods.tf_same(dw[0])
        if isinstance(layers[0], SqueezeExcitation):
            se = layers.pop(0)
            r.conv(se.fc1, f"{prefix}squeeze_excite_conv")
            r.conv(se.fc2, f"{prefix}squeeze_excite_conv_1")
        project, = layers
        r.conv_bn(project[0], project[1], f"{prefix}project", f"{prefix}project_bn")
    r.conv_bn(feats[-1][0], feats[-1][1], "conv_1", "conv_1_bn")
    r.linear(net.classifier[0], "conv_2")
    r.linear(net.classifier[3], "logits")


def _port_mobilenet_v2(net: Any, r: _Reader, mods: Any) -> None:
    """keras.applications.MobileNetV2 -> torchvision mobilenet_v2 (ReLU6 everywhere).

    Keras' final Dense has no dropout before it; torchvision's Dropout is a no-op in eval().
    """
    feats = net.features
    r.conv_bn(feats[0][0], feats[0][1], "Conv1", "bn_Conv1")
    feats[0][0] = mods.tf_same(feats[0][0])
    for i, block in enumerate(feats[1:-1]):
        prefix = "expanded_conv_" if i == 0 else f"block_{i}_"
        layers = list(block.conv)
        if i > 0:
            expand = layers.pop(0)
            r.conv_bn(expand[0], expand[1], f"{prefix}expand", f"{prefix}expand_BN")
        dw = layers.pop(0)
        r.conv_bn(dw[0], dw[1], f"{prefix}depthwise", f"{prefix}depthwise_BN", depthwise=True)
        if dw[0].stride != (1, 1):
            dw[0] = mods.tf_same(dw[0])
        project, project_bn = layers
        r.conv_bn(project, project_bn, f"{prefix}project", f"{prefix}project_BN")
    r.conv_bn(feats[-1][0], feats[-1][1], "Conv_1", "Conv_1_bn")
    r.linear(net.classifier[1], "predictions")


def _port_resnet50(net: Any, r: _Reader, mods: Any) -> None:
    """keras.applications.ResNet50 (v1) -> torchvision resnet50 (v1.5).

    Keras pads explicitly and symmetrically (stem 3, max-pool 1 with zeros after a ReLU, where
    torchvision's -inf padding gives the same maximum), so only the stride placement and the
    conv biases differ.
    """
    r.conv_bn(net.conv1, net.bn1, "conv1_conv", "conv1_bn")
    for stage, layer in enumerate([net.layer1, net.layer2, net.layer3, net.layer4], start=2):
        for j, block in enumerate(layer, start=1):
            name = f"conv{stage}_block{j}"
            r.conv_bn(block.conv1, block.bn1, f"{name}_1_conv", f"{name}_1_bn")
            r.conv_bn(block.conv2, block.bn2, f"{name}_2_conv", f"{name}_2_bn")
            r.conv_bn(block.conv3, block.bn3, f"{name}_3_conv", f"{name}_3_bn")
            if block.downsample is not None:
                r.conv_bn(block.downsample[0], block.downsample[1], f"{name}_0_conv", f"{name}_0_bn")
            if block.conv2.stride != (1, 1):  # v1.5 -> v1: stride on the first 1x1 conv
                block.conv1.stride, block.conv2.stride = block.conv2.stride, (1, 1)
    r.linear(net.fc, "predictions")


def _port_vgg(net: Any, r: _Reader, mods: Any) -> None:
    """keras.applications.VGG16/VGG19 (and inferbench's VGG16 with batch norm) -> torchvision vgg16/vgg19/vgg16_bn.

    The same 3x3 "same" convolutions (padding 1 either side) and 2x2 max-pools. Keras flattens the last feature
    map as it is, (h, w, c) per image, into ``fc1``; torchvision average-pools it to 7x7 and flattens (c, h, w):
    the pool goes (an identity at 224 px, not at other sizes) and ``fc1``'s rows are permuted. torchvision's
    dropouts in the head become identities: Keras' VGG has none.
    """
    from torch import nn

    convs = [m for m in net.features if isinstance(m, nn.Conv2d)]
    bns = [m for m in net.features if isinstance(m, nn.BatchNorm2d)]
    names = [str(n) for n in r("__layers__") if f"{n}/kernel" in r and "_conv" in str(n)]
    if len(names) != len(convs):
        raise ValueError(f"{len(names)} Keras convolutions for {len(convs)} torchvision ones")
    for i, (conv, name) in enumerate(zip(convs, names)):
        if bns:
            r.conv_bn(conv, bns[i], name, f"{name}_bn")
        else:
            r.conv(conv, name)
    net.avgpool = nn.Identity()
    kernel = r("fc1/kernel")
    channels = convs[-1].out_channels
    if INPUT_HW in r:  # five 2x2 poolings: the map is the input's 32nd, each side floored
        h, w = (int(d) // 32 for d in r(INPUT_HW))
    else:  # weights exported before inputs had two sides: a square map
        h = w = int(round((kernel.shape[0] // channels) ** 0.5))
    if h * w * channels != kernel.shape[0]:
        raise ValueError(f"fc1 takes {kernel.shape[0]} features: not a {h}x{w} map of {channels} channels")
    fc1 = nn.Linear(kernel.shape[0], kernel.shape[1])
    rows = kernel.reshape(h, w, channels, -1).transpose(2, 0, 1, 3).reshape(kernel.shape[0], -1)
    r.copy(fc1.weight, rows.T, "fc1/kernel")
    r.copy(fc1.bias, r("fc1/bias"), "fc1/bias")
    net.classifier[0] = fc1
    for i, m in enumerate(net.classifier):
        if isinstance(m, nn.Dropout):
            net.classifier[i] = nn.Identity()
    r.linear(net.classifier[3], "fc2")
    r.linear(net.classifier[6], "predictions")


def _port_efficientnet(net: Any, r: _Reader, mods: Any) -> None:
    """keras.applications.EfficientNetB0 -> torchvision efficientnet_b0 (SiLU == Keras swish).

    Same MBConv layout ([expand] -> depthwise -> squeeze-excite (squeeze = block input // 4,
    SiLU, sigmoid) -> project); Keras BN eps is 1e-3 (torchvision's B0 uses 1e-5). Keras pads
    the stride-2 stem and depthwise convs with correct_pad (bottom/right heavy). Stochastic depth
    (torchvision) and drop-connect (Keras) are identities at inference.
    """
    from torchvision.ops import SqueezeExcitation

    feats = net.features
    r.conv_bn(feats[0][0], feats[0][1], "stem_conv", "stem_bn")
    feats[0][0] = mods.tf_same(feats[0][0])
    for i, stage in enumerate(feats[1:-1], start=1):
        for j, block in enumerate(stage):
            prefix = f"block{i}{chr(ord('a') + j)}_"
            layers = list(block.block)
            if len(layers) == 4:  # expand_ratio != 1
                expand = layers.pop(0)
                r.conv_bn(expand[0], expand[1], f"{prefix}expand_conv", f"{prefix}expand_bn")
            dw, se, project = layers
            if not isinstance(se, SqueezeExcitation):
                raise ValueError(f"unexpected torchvision MBConv layout: {type(se).__name__}")
            r.conv_bn(dw[0], dw[1], f"{prefix}dwconv", f"{prefix}bn", depthwise=True)
            if dw[0].stride != (1, 1):
                dw[0] = mods.tf_same(dw[0])
            r.conv(se.fc1, f"{prefix}se_reduce")
            r.conv(se.fc2, f"{prefix}se_expand")
            r.conv_bn(project[0], project[1], f"{prefix}project_conv", f"{prefix}project_bn")
    r.conv_bn(feats[-1][0], feats[-1][1], "top_conv", "top_bn")
    r.linear(net.classifier[1], "predictions")


#: model name -> port(net, reader, modules): loads the weights in place and fixes the structure
#: (the Keras preprocessing layers are added generically by build_torchvision).
#: Ports that fold a Keras convolution's bias into the batch norm after it (torchvision's convolution has none):
#: the same function for inference, but with frozen batch norm Keras trains those biases and torch cannot.
FOLDS_CONV_BIASES = frozenset({"resnet50"})

_PORTS: dict[str, Callable[[Any, _Reader, Any], None]] = {
    "mobilenet_v3_large": _port_mobilenet_v3,
    "mobilenet_v3_small": _port_mobilenet_v3,
    "mobilenet_v2": _port_mobilenet_v2,
    "resnet50": _port_resnet50,
    "efficientnet_b0": _port_efficientnet,
    "vgg16": _port_vgg,
    "vgg19": _port_vgg,
    "vgg16_bn": _port_vgg,
}
