"""A model file whose graph holds its own non-maximum suppression (ONNX's ``NonMaxSuppression``: RetinaNet-style
exports, a YOLO exported with its NMS): found before anything runs, its box cap and thresholds read, so that the run
says what its timed call holds. Such a model is timed as it is: the suppression is inside every call, inferbench's
shared one does not run after it. Its outputs must keep one row an image (a suppression padded to its cap); ONNX's
own ``selected_indices [boxes, 3]``, whose size depends on what each image holds, cannot be compared image by image
across runtimes and is refused in one line. TensorRT's suppression plugins (``EfficientNMS_TRT`` and its kin), which
only TensorRT runs, are read too, to be said in the line that refuses them (:func:`plugin`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.errors import UsageError

OP = "NonMaxSuppression"
#: TensorRT's suppression plugins, which a file exported for TensorRT holds in place of ONNX's operator, each with its
#: attributes for the box cap an image, the IoU threshold and the score threshold: only TensorRT runs them.
PLUGINS = {"EfficientNMS_TRT": ("max_output_boxes", "iou_threshold", "score_threshold"),
           "BatchedNMS_TRT": ("keepTopK", "iouThreshold", "scoreThreshold"),
           "BatchedNMSDynamic_TRT": ("keepTopK", "iouThreshold", "scoreThreshold")}
#: The operator's inputs after boxes and scores, in order (ONNX's names; an absent one takes ONNX's default).
ARGUMENTS = ("max_output_boxes_per_class", "iou_threshold", "score_threshold")


def _constants(graph: Any, names: set[str]) -> dict[str, Any]:
    """The graph's constant tensors of ``names`` (initializers and Constant nodes' outputs) as NumPy arrays: only
    those (a model's weights are never converted) and only where they are held in the file (external data is not
    loaded at the file check)."""
    from onnx import TensorProto, numpy_helper

    tensors = {i.name: i for i in graph.initializer if i.name in names}
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] in names:
            for attr in node.attribute:
                if attr.name == "value":
                    tensors[node.output[0]] = attr.t
    return {name: numpy_helper.to_array(t) for name, t in tensors.items() if t.data_location != TensorProto.EXTERNAL}


def read(model: Any, nodes: list[Any]) -> dict[str, Any] | None:
    """The graph's suppression (``nodes``: every node of the model, its subgraphs' too): the operator, how many
    there are, and the first one's box cap a class and thresholds (None where the graph computes one: not read);
    None where the graph holds none."""
    found = [n for n in nodes if n.op_type == OP]
    if not found:
        return None
    constants = _constants(model.graph, set(found[0].input[2:]))
    defaults: dict[str, Any] = {"max_output_boxes_per_class": 0, "iou_threshold": 0.0,
                                "score_threshold": None}  # ONNX's: no cap given keeps no box, no score floor
    values: dict[str, Any] = {}
    for i, name in enumerate(ARGUMENTS, start=2):
        given = found[0].input[i] if len(found[0].input) > i else ""
        if not given:
            values[name] = defaults[name]
        elif given in constants and constants[given].size == 1:
            value = constants[given].reshape(-1)[0]
            values[name] = int(value) if i == 2 else round(float(value), 6)
        else:
            values[name] = None
    return {"op": OP, "nodes": len(found), **values}


def said(nms: dict[str, Any]) -> str:
    """The suppression in a phrase: ``its own NonMaxSuppression (at most 100 boxes a class, IoU > 0.5, ...)``."""
    cap, iou, score = (nms[k] for k in ARGUMENTS)
    parts = [f"at most {cap} boxes a class" if cap is not None else "its box cap computed in the graph (not read)",
             f"IoU > {iou:g}" if iou is not None else "its IoU threshold computed in the graph",
             f"score > {score:g}" if score is not None else "no score threshold"]
    many = f", {nms['nodes']} such operators" if nms["nodes"] > 1 else ""
    return f"its own {nms['op']} ({', '.join(parts)}{many})"


def check_outputs(nms: dict[str, Any], graph: Any, image: Any, path: Path) -> None:
    """Refuse, in one line, a graph with its own suppression whose outputs do not keep one row an image: an output's
    first dimension that is not the image input's batch (ONNX's ``selected_indices [boxes, 3]``, torchvision's
    ``boxes [N, 4]``)."""
    batch = image.type.tensor_type.shape.dim[0] if image.type.tensor_type.shape.dim else None
    for out in graph.output:
        dims = out.type.tensor_type.shape.dim if out.type.tensor_type.HasField("shape") else []
        first = dims[0] if dims else None
        same = first is not None and batch is not None and (
            (first.dim_param and first.dim_param == batch.dim_param) or
            (first.dim_value and first.dim_value == batch.dim_value))
        if not same:
            shape = ", ".join(d.dim_param[:20] or str(d.dim_value or "?") for d in dims) or "unknown"
            raise UsageError(f"{path}: its graph holds {said(nms)}, and output {out.name[:60]} [{shape}] is not one "
                             "row an image (its size depends on what each image holds): inferbench compares outputs "
                             "image by image; export the suppression padded to its cap, [batch, boxes, ...], or the "
                             "raw heads before it (--task detection runs one suppression after every runtime)")


def plugin(nodes: list[Any]) -> str | None:
    """A TensorRT plugin among ``nodes`` (an operator named ``..._TRT``, in any domain), in a phrase: a suppression's
    box cap and thresholds read from its attributes (``TensorRT's EfficientNMS_TRT plugin (at most 100 boxes an
    image, IoU > 0.45, score > 0.25)``); None where the graph holds none."""
    from onnx import helper

    found = next((n for n in nodes if n.op_type.endswith("_TRT")), None)
    if found is None:
        return None
    if found.op_type not in PLUGINS:
        return f"TensorRT's {found.op_type[:60]} plugin"
    attrs = {a.name: helper.get_attribute_value(a) for a in found.attribute}
    cap, iou, score = (attrs.get(k) for k in PLUGINS[found.op_type])
    parts = [f"at most {cap} boxes an image" if isinstance(cap, int) else "its box cap not given",
             f"IoU > {iou:g}" if isinstance(iou, float) else "its IoU threshold not given",
             f"score > {score:g}" if isinstance(score, float) else "no score threshold"]
    return f"TensorRT's {found.op_type} plugin ({', '.join(parts)})"
