"""A model's size and work read from its ONNX graph, for a model with no Keras graph to count them (a PyTorch
program's export, the user's ONNX file): its parameters (every initializer's values), its floating-point operations
per image (two per multiply-add of every Conv, ConvTranspose, Gemm and MatMul, from the shapes ONNX's shape
inference gives with the batch fixed at 1), and the values every node outputs for one image (the intermediates a
runtime that fuses nothing writes and reads: :mod:`inferbench.records.roofline`). Nodes inside a subgraph (If,
Loop) are not counted, nor operations other than those four (their share of a vision model's FLOPs is small)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..base.size import Size

FLOPS_METHOD = "onnx-shape-inference-conv-gemm-matmul"


def _shapes(model: Any) -> dict[str, list[int | None]]:
    """Every value's shape after shape inference, a dimension it cannot give as None."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    graph = inferred.graph
    out = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        dims = info.type.tensor_type.shape.dim
        out[info.name] = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
    out.update({t.name: list(t.dims) for t in graph.initializer})
    return out


def _ints(shape: list[int | None] | None) -> list[int] | None:
    """``shape`` where every dimension is known, else None."""
    return None if shape is None or any(d is None for d in shape) else [int(d) for d in shape if d is not None]


def _node_flops(node: Any, shapes: dict[str, list[int | None]]) -> int | None:
    """Two per multiply-add of one Conv, ConvTranspose, Gemm or MatMul (None: its shapes are not known)."""
    out = _ints(shapes.get(node.output[0])) if node.output else None
    x, w = (_ints(shapes.get(name)) for name in (list(node.input) + ["", ""])[:2])
    if out is None or x is None or w is None:
        return None
    if node.op_type == "Conv":  # weight [C_out, C_in/groups, k...]: each output value sums over C_in/groups x k...
        return 2 * math.prod(out) * math.prod(w[1:])
    if node.op_type == "ConvTranspose":  # weight [C_in, C_out/groups, k...]: each input value spreads over them
        return 2 * math.prod(x) * math.prod(w[1:])
    if node.op_type == "Gemm":
        trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
        return 2 * math.prod(out) * (x[0] if trans_a else x[-1])
    return 2 * math.prod(out) * x[-1]  # MatMul: each output value sums over A's last dimension


def _grouped(node: Any, shapes: dict[str, list[int | None]]) -> bool:
    """A grouped convolution that is not depthwise (as Keras counts them: groups > 1, several inputs a group)."""
    groups = next((a.i for a in node.attribute if a.name == "group"), 1)
    weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
    return groups > 1 and weight is not None and len(weight) > 1 and (weight[1] or 0) > 1


def model_stats(path: Path, resolution: Size) -> dict[str, Any]:
    """The stats :func:`inferbench.exporters.keras.model_stats` gives a Keras model, read from the ONNX file
    ``path`` at batch 1 (``why`` where they could not all be read)."""
    import onnx

    model = onnx.load(str(path))
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:  # batch 1: a symbolic or fixed first dimension alike
        dims = value.type.tensor_type.shape.dim
        if value.name not in initializers and len(dims):
            dims[0].Clear()
            dims[0].dim_value = 1
    shapes = _shapes(model)
    params = sum(math.prod(t.dims) for t in model.graph.initializer)
    flops, activations, unknown, uncounted = 0, 0, [], []
    counted = ("Conv", "ConvTranspose", "Gemm", "MatMul")
    for node in model.graph.node:
        for name in (o for o in node.output if o):
            shape = _ints(shapes.get(name))
            activations += math.prod(shape) if shape is not None else 0
            if shape is None:
                unknown.append(name)
        if node.op_type in counted:
            work = _node_flops(node, shapes)
            flops += work or 0
            if work is None:
                uncounted.append(node.name or node.op_type)
    grouped = sum(1 for n in model.graph.node if n.op_type == "Conv" and _grouped(n, shapes))
    stats: dict[str, Any] = {"params": int(params), "flops_per_image": None if uncounted else int(flops),
                             "flops_method": FLOPS_METHOD,
                             "flops_resolution": resolution, "grouped_convolutions": grouped,
                             "activations_per_image": int(activations) if not unknown else None}
    why = [f"{len(uncounted)} operation(s) of unknown shapes (first: {uncounted[0]}): no FLOPs"] if uncounted else []
    why += [f"{len(unknown)} value(s) of unknown shape (first: {unknown[0]}): no intermediates"] if unknown else []
    if why:
        stats["why"] = "; ".join(why)
    return stats


def counted(path: Path, resolution: Size) -> dict[str, Any] | None:
    """:func:`model_stats`, or None where ONNX cannot read the graph's shapes (an export never fails on them)."""
    try:
        return model_stats(path, resolution)
    except Exception:  # noqa: BLE001 - shape inference that gives up: the record has no stats, as before
        return None
