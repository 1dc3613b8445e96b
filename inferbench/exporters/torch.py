"""The ONNX export as a PyTorch module (onnx2torch), stored as its weights alone (``torch/model.safetensors``).

No pickle is ever written or read: the runner rebuilds the module from the ONNX graph with onnx2torch (code,
not a file's instructions) and loads these weights into it with ``strict=True``, so a planted or damaged file
can fail the cell but never run anything. (Earlier versions saved the whole module with ``torch.save`` and
unpickled it on load: a pickle planted in a shared cache ran arbitrary code.)

onnx2torch does not implement ``auto_pad="SAME_UPPER"``, which tf2onnx writes for some convolutions and
poolings (ConvNeXt at 32 px); such nodes get the explicit padding TensorFlow's "same" means (the extra
row or column at the end) on a copy of the graph before the conversion, their input sizes read by ONNX's
shape inference. The parity gate checks the module like any other export.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..base.size import hw
from ..registry.artifacts import ExportContext


def convert(onnx_path: str | Path) -> tuple[Any, int]:
    """The ONNX file as a torch module in eval mode (onnx2torch), and how many SAME paddings were made explicit."""
    import onnx
    import onnx2torch

    graph = onnx.load(str(onnx_path))
    rewritten = explicit_same_padding(graph)
    try:
        return onnx2torch.convert(graph).eval(), rewritten
    except NotImplementedError as exc:  # an op (or an op's opset version) onnx2torch has no converter for
        opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in graph.opset_import)
        raise RuntimeError(
            f"onnx2torch cannot convert this ONNX graph to PyTorch: {exc} (the file's opsets: {opsets}). Re-export "
            "it at an opset onnx2torch covers (torch.onnx.export(..., opset_version=17), or onnx.version_converter."
            "convert_version(model, 17)), or run the file on onnxrt or openvino, which read it as it is") from exc


def export(ctx: ExportContext) -> dict[str, Any]:
    from safetensors.torch import save_file

    module, rewritten = convert(ctx.path("onnx"))
    out = ctx.path("torch")
    out.parent.mkdir(parents=True, exist_ok=True)
    # onnx2torch may share one tensor between modules: safetensors stores each storage once, contiguous
    state = {k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}
    save_file(state, str(out), metadata={"format": "onnx2torch-state-dict", "tensors": str(len(state))})
    return {
        "paths": ["torch"],
        "input_signature": {"shape": [None, *hw(ctx.resolution), 3], "dtype": "float32",
                            "layout": "NHWC (as the ONNX graph)"},
        "notes": ["weights only (safetensors); the module is rebuilt from the ONNX export by onnx2torch at load"]
        + ([f"{rewritten} node(s) with auto_pad SAME given explicit pads for onnx2torch"] if rewritten else []),
    }


def explicit_same_padding(model: Any) -> int:
    """Replace ``auto_pad`` SAME_UPPER / SAME_LOWER on Conv and pooling nodes by the explicit ``pads`` it means
    (in place); returns how many nodes changed. Needs the nodes' input sizes from shape inference."""
    import onnx
    from onnx import helper

    nodes = [n for n in model.graph.node if any(a.name == "auto_pad" and a.s in (b"SAME_UPPER", b"SAME_LOWER")
                                                for a in n.attribute)]
    if not nodes:
        return 0
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:  # the batch fixed to 1: shape inference then follows every reshape
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].dim_value:
            dims[0].dim_value = 1
    inferred = onnx.shape_inference.infer_shapes(fixed, data_prop=True)
    shapes = {v.name: [d.dim_value or None for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.input]}
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    for node in nodes:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        spatial = (shapes.get(node.input[0]) or [])[2:]
        weights = inits.get(node.input[1], []) if len(node.input) > 1 else []  # a Conv's kernel: (out, in, *k)
        kernel = attrs.get("kernel_shape") or weights[2:]
        if not spatial or None in spatial or not kernel:
            raise ValueError(f"cannot make the SAME padding of {node.name} explicit: input size unknown")
        strides = attrs.get("strides") or [1] * len(spatial)
        dilations = attrs.get("dilations") or [1] * len(spatial)
        begin, end = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begin.append(small if attrs["auto_pad"] == b"SAME_UPPER" else large)
            end.append(large if attrs["auto_pad"] == b"SAME_UPPER" else small)
        kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("pads", begin + end)])
    return len(nodes)
