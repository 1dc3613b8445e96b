"""The source artifact: the reference Keras model as a ``.keras`` file (built from the registry, or the
user's own file), plus the reference outputs of the 16 parity inputs and the model's size: parameters and
floating-point operations per image (:func:`model_stats`)."""

from __future__ import annotations

import math
from typing import Any

from ..base.size import Size, hw
from ..registry.artifacts import ExportContext
from ..registry.keras_models import build_keras_model, walk_layers
from ..registry.models import get_model
from .onnx import convertible_ops
from .reference import predictor, write_fp32_spread, write_parity_reference, write_precision_sensitivity


def export(ctx: ExportContext) -> dict[str, Any]:
    spec = get_model(ctx.model)
    model = build_keras_model(spec, ctx.resolution, ctx.weights, ctx.seed)
    ctx.path("keras").parent.mkdir(parents=True, exist_ok=True)
    model.save(ctx.path("keras"))
    facts = write_parity_reference(ctx, spec, predictor(spec, ctx, model))
    facts["fp32_spread"] = write_fp32_spread(ctx, model)
    facts["precision_sensitivity"] = write_precision_sensitivity(ctx, model)
    try:
        stats = model_stats(model, ctx.resolution)
    except Exception as exc:  # a graph the counter cannot read: the parameters, and why there are no FLOPs
        stats = {"params": int(model.count_params()), "flops_per_image": None, "flops_method": FLOPS_METHOD,
                 "flops_resolution": ctx.resolution, "why": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    return {
        "model_stats": stats,
        "paths": ["keras", "reference"],
        "input_signature": {"shape": [None, *hw(ctx.resolution), 3], "dtype": "float32",
                            "layout": "NHWC"},
        "reference": facts,
        "notes": [],
    }


#: How ``flops_per_image`` is counted, as records name it.
FLOPS_METHOD = "tf-profiler-float-ops+einsum"


def model_stats(model: Any, resolution: Size) -> dict[str, Any]:
    """Parameters and floating-point operations of one image (a multiply-add is 2), computed from the model.

    The FLOPs are TensorFlow's profiler count over the frozen inference graph at batch 1 (convolutions,
    matrix products, element-wise ops), plus the ``Einsum`` ops it does not count (a ViT's attention
    products), each ``2 x`` the product of its index sizes. ``grouped_convolutions`` counts the layers
    that Keras 3 on TensorFlow compiles with XLA even outside ``jit_compile`` (see docs/measured.md: the XLA report).
    """
    import tensorflow as tf

    fn = tf.function(lambda x: model(x, training=False))
    with convertible_ops():  # grouped convolutions as plain ops: inside Keras' XLA wrapper the profiler sees none
        _, flops = frozen_flops(fn.get_concrete_function(tf.TensorSpec([1, *hw(resolution), 3], tf.float32)))
    grouped = sum(1 for layer in walk_layers(model) if getattr(layer, "groups", 1) > 1)
    return {"params": int(model.count_params()), "flops_per_image": int(flops), "flops_method": FLOPS_METHOD,
            "flops_resolution": resolution, "grouped_convolutions": grouped,
            "activations_per_image": activations(model)}


def frozen_flops(concrete: Any) -> tuple[Any, int]:
    """A concrete function's graph with its variables frozen into constants, and its floating-point operations:
    TensorFlow's profiler count plus each ``Einsum``'s ``2 x`` the product of its index sizes."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    graph = convert_variables_to_constants_v2(concrete).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    verbosity = tf.compat.v1.logging.get_verbosity()
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)  # the v1 API's deprecation notes
    try:
        flops = tf.compat.v1.profiler.profile(graph=graph, run_meta=tf.compat.v1.RunMetadata(), cmd="op",
                                              options=options).total_float_ops
    finally:
        tf.compat.v1.logging.set_verbosity(verbosity)
    for op in graph.get_operations():
        if op.type == "Einsum":
            equation = op.get_attr("equation").decode()
            if "." in equation:  # an ellipsis: index sizes are not all named (none in the registered models)
                continue
            terms = equation.split("->")[0].split(",")
            sizes = {ch: dim for term, t in zip(terms, op.inputs) for ch, dim in zip(term, t.shape)}
            flops += 2 * math.prod(int(d) for d in sizes.values())
    return graph, int(flops)


#: Ops of a frozen graph whose outputs are no intermediate tensor a runtime computes.
NOT_COMPUTED = ("Const", "Placeholder", "Identity", "NoOp")


def savedmodel_stats(path: Any, shape: tuple[int, ...], resolution: Size) -> dict[str, Any] | None:
    """The stats :func:`model_stats` gives a Keras model, from a TF SavedModel's inference function at the input
    ``shape`` (batch 1): its variables' values as parameters, the profiler's FLOPs over the frozen graph, every
    computed op's outputs as the intermediates; None where TensorFlow cannot trace or freeze it."""
    import tensorflow as tf

    from ..runners.tf import load_saved_model, serving_function

    try:
        loaded = load_saved_model(path)
        graph, flops = frozen_flops(tf.function(serving_function(loaded)).get_concrete_function(
            tf.TensorSpec(shape, tf.float32)))
    except Exception:  # noqa: BLE001 - a graph the counter cannot read: the record has no stats, as before
        return None
    values = [op.outputs[0].shape for op in graph.get_operations() if op.type not in NOT_COMPUTED and op.outputs]
    known = [s for s in values if s.is_fully_defined()]
    return {"params": sum(math.prod(v.shape) for v in getattr(loaded, "variables", ())), "flops_per_image": flops,
            "flops_method": FLOPS_METHOD, "flops_resolution": resolution,
            "activations_per_image": sum(math.prod(s) for s in known) if len(known) == len(values) else None}


def activations(model: Any) -> int | None:
    """The values every layer of the model outputs for one image (what training keeps for its backward pass, the
    training scenario's memory estimate); None for a model whose layers do not say (nested, several outputs)."""
    try:
        return sum(math.prod(int(d) for d in layer.output.shape[1:]) for layer in model.layers
                   if type(layer).__name__ != "InputLayer")
    except (AttributeError, TypeError, ValueError):
        return None
