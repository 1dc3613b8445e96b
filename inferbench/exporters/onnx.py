"""ONNX via tf2onnx (Keras' own ``export(format="onnx")``), with a dynamic batch dimension.

tf2onnx's transpose optimiser logs internal ``ValueError`` tracebacks on these models and then
skips that optimisation pass; the model it writes is valid (and the parity gate checks it). The
tracebacks go to ``onnx/converter.log`` instead of the user's terminal.

Constants that a layer keeps as eager tensors rather than variables are captured by the traced function,
and tf2onnx turns each captured tensor into one more graph input: Keras' ``Normalization`` (in
EfficientNet, EfficientNetV2, ConvNeXt) gave graphs with three inputs that no runtime could feed, and
keras-hub's ViT one more for its position ids. Every layer gets such constants as NumPy arrays before
the export (:func:`constants_as_arrays`), which the trace embeds as constants; an export that still has
more than one input is refused here, with the names, instead of failing later in every runtime.

Keras 3 on TensorFlow compiles every grouped convolution with XLA (TensorFlow's CPU kernels lack them):
ConvNeXt's depthwise and RegNet's grouped 3x3 convolutions become nested XLA functions, which tf2onnx
cannot convert ("No Op registered for StatefulPartitionedCall"); and TensorFlow's exact GELU uses
``erfc``, which tf2onnx lacks ("No Op registered for Erfc": ConvNeXt, ViT). The ONNX trace runs with
:func:`convertible_ops`: each grouped convolution as one TensorFlow ``Conv2D`` op (tf2onnx makes it an ONNX
``Conv`` with its ``group`` attribute; the graph is only traced here, never run by TensorFlow) and the
exact GELU through ``erf``. The parity gate checks the result like any other export.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import logging
import math
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..base.errors import TooBig
from ..base.machine import memory_shortfall
from ..base.size import hw
from ..measure.memory import current_rss_mb
from ..registry.artifacts import REFERENCE_INPUTS, REFERENCE_OUTPUTS, ExportContext
from ..registry.keras_models import load_keras, walk_layers
from ..registry.outputs import read_layout
from . import cache


def export(ctx: ExportContext) -> dict[str, Any]:
    import onnx


    out = ctx.path("onnx")
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.parent / "converter.log"
    handler = logging.FileHandler(log_path, mode="w")
    tf2onnx_logger = logging.getLogger("tf2onnx")
    tf2onnx_logger.addHandler(handler)
    tf2onnx_logger.propagate = False
    try:
        too_big = memory_refusal(ctx)
        if too_big:
            raise TooBig(too_big)
        model = load_keras(ctx.path("keras"))
        constants_as_arrays(model)
        model(np.load(ctx.folder / REFERENCE_INPUTS)[:1])  # export needs a model that has been called
        with contextlib.redirect_stdout(io.StringIO()), convertible_ops(), optimiser_garbage_collected():
            model.export(out, format="onnx")
    finally:
        tf2onnx_logger.removeHandler(handler)
        handler.close()

    proto = onnx.load(out)
    inits = {i.name for i in proto.graph.initializer}
    extra = [i.name for i in proto.graph.input if i.name not in inits][1:]
    if extra:
        raise RuntimeError(f"the ONNX export has {len(extra)} input(s) besides the image, which no runtime can "
                           f"feed (constants the trace captured): {', '.join(extra)}")
    renamed(proto, [o.name for o in read_layout(ctx.folder / REFERENCE_OUTPUTS)])
    for value in list(proto.graph.input) + list(proto.graph.output):  # name the dynamic dimension
        dim = value.type.tensor_type.shape.dim[0]
        if not dim.dim_value:
            dim.dim_param = "batch"
    onnx.checker.check_model(proto)
    onnx.save(proto, out)

    notes = []
    log_text = log_path.read_text() if log_path.exists() else ""
    if "Traceback" in log_text:
        notes.append(
            f"tf2onnx logged {log_text.count('Traceback')} internal traceback(s) (a skipped optimisation "
            f"pass, not a failed export); see {log_path}"
        )
    return {
        "paths": ["onnx"],
        "input_signature": {"name": proto.graph.input[0].name,
                            "shape": ["batch", *hw(ctx.resolution), 3],
                            "dtype": "float32", "layout": "NHWC", "opset": proto.opset_import[0].version},
        "notes": notes,
    }


def renamed(proto: Any, names: list[str]) -> None:
    """The export's outputs given the names the Keras model declares them by, in their order (tf2onnx names a list's
    ``Identity:0``, ``Identity_1:0``...; a mapping's keep its keys): an Identity node each, so that every runtime of
    the ONNX file gives them by the source's names. One output keeps tf2onnx's name."""
    from onnx import helper

    outputs = list(proto.graph.output)
    if len(names) < 2 or len(names) != len(outputs):
        return
    for output, name in zip(outputs, names):
        if output.name != name:
            proto.graph.node.append(helper.make_node("Identity", [output.name], [name], name=f"inferbench_{name}"))
            output.name = name


#: What the conversion holds at its peak, from the weights (measured on the 2-core, 24 GB machine, 128 px):
#: RegNetY-32GF's 0.54 GiB peaked at 13.2 GB in TensorFlow's graph optimiser, which tf2onnx runs on the frozen
#: graph; ConvNeXt-XLarge's 1.3 GiB went past 22 GB there, and past 22 GB in tf2onnx's own optimiser when its
#: large-model path skipped TensorFlow's. Rounded up: 3 GB plus 20 copies of the weights.
EXPORT_BASE_GB, EXPORT_WEIGHT_COPIES = 3.0, 20.0


def memory_refusal(ctx: ExportContext) -> str | None:
    """Why this model's ONNX conversion would not fit the memory this process can have now (None: it fits, or
    the model's size is unknown): said before it starts, instead of the kernel killing it halfway."""
    stats = (cache.read_manifest(ctx.folder)["artifacts"].get("keras") or {}).get("model_stats") or {}
    short = memory_shortfall(stats.get("params"), EXPORT_BASE_GB, EXPORT_WEIGHT_COPIES,
                             own_gb=current_rss_mb() / 1024)
    if short is None:
        return None
    need, weights_gb, available = short
    return (f"not run: the ONNX conversion (tf2onnx, through TensorFlow's graph optimiser) would need about "
            f"{need:.0f} GB for {weights_gb:.1f} GB of weights, more than 90% of the {available:.0f} GB available: "
            "this model's ONNX export needs a machine with more memory")


def constants_as_arrays(model: Any) -> list[str]:
    """Give every layer the constants it keeps as eager tensors (not variables) as NumPy arrays of the same
    values, so that a trace embeds them instead of capturing them: Keras' ``Normalization`` mean and variance,
    keras-hub's position ids. Returns ``layer.attribute`` of each one changed."""
    import tensorflow as tf


    changed = []
    for layer in walk_layers(model):
        for name, value in list(vars(layer).items()):
            if isinstance(value, tf.Tensor) and not isinstance(value, tf.Variable) and hasattr(value, "numpy"):
                setattr(layer, name, value.numpy())
                changed.append(f"{layer.name}.{name}")
    return changed


@contextlib.contextmanager
def optimiser_garbage_collected() -> Iterator[None]:
    """While converting, Python's cycle collector runs before each of tf2onnx's optimiser passes.

    The optimiser deep-copies the whole graph, weights included, before each of its dozen passes (to roll a
    failed pass back), and a graph it replaces is freed only by the cycle collector (its nodes and the graph
    refer to each other), which runs by object count, not bytes: RegNetY-32GF's 0.58 GB of weights (128 px)
    piled up copies until the kernel killed the export at 24 GB. Collected before each copy, that export
    peaks at 13 GB (in TensorFlow's own graph optimiser, before tf2onnx's) and finishes in 70 s."""
    try:
        import tf2onnx.optimizer as optimizer
    except ImportError:  # the export fails on its own import, with the install hint
        yield
        return

    def deepcopy(value: Any, memo: Any = None) -> Any:
        gc.collect()
        return copy.deepcopy(value, memo)

    original = optimizer.copy
    optimizer.copy = types.SimpleNamespace(**{**vars(copy), "deepcopy": deepcopy})  # the rest of copy as it is
    try:
        yield
    finally:
        optimizer.copy = original


@contextlib.contextmanager
def convertible_ops() -> Iterator[None]:
    """While tracing, two of Keras' TensorFlow ops in forms tf2onnx converts (a no-op where this Keras lacks the
    functions replaced): grouped convolutions without their XLA wrapper, and the exact GELU as
    ``0.5 x (1 + erf(x / sqrt 2))`` instead of TensorFlow's ``erfc`` form (tf2onnx has no ``Erfc``: ConvNeXt's
    and ViT's exports failed). Both compute the same function; the parity gate checks the export."""
    import tensorflow as tf

    try:
        from keras.src import backend
        from keras.src.backend.tensorflow import nn as keras_tf_nn

        originals = {"conv": keras_tf_nn.conv, "gelu": keras_tf_nn.gelu}
        data_format_of = keras_tf_nn._convert_data_format
    except (ImportError, AttributeError):
        yield
        return

    def conv(inputs: Any, kernel: Any, strides: Any = 1, padding: str = "valid", data_format: Any = None,
             dilation_rate: Any = 1) -> Any:
        fmt = data_format_of(backend.standardize_data_format(data_format), len(inputs.shape))
        return tf.nn.convolution(inputs, kernel, strides, padding.upper(), data_format=fmt, dilations=dilation_rate)

    def gelu(x: Any, approximate: bool = True) -> Any:
        if approximate:
            return originals["gelu"](x, approximate=True)
        x = tf.convert_to_tensor(x)
        return 0.5 * x * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))

    keras_tf_nn.conv, keras_tf_nn.gelu = conv, gelu
    try:
        yield
    finally:
        keras_tf_nn.conv, keras_tf_nn.gelu = originals["conv"], originals["gelu"]
