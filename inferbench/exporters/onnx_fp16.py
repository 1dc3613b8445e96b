"""FP16 for TensorRT: the ONNX export with its weights and arithmetic cast to FP16 (``onnx-fp16/model.onnx``).

TensorRT 11 builds strongly typed networks only: its FP16 and INT8 builder flags are gone, and a network runs in
the types its ONNX model gives each tensor. An FP16 engine therefore starts from an FP16 ONNX model, made here on the
machine that exported the FP32 one (it travels to a GPU machine with the rest: benchmarks/gpu_bring.py). The cast is
onnxconverter-common's ``convert_float_to_float16`` (Microsoft's maintained converter, ONNX's own operators only):
the inputs and outputs stay FP32 (``keep_io_types``: the same buffers as every other cell), and the operators whose
range FP16 cannot hold — exponentials, powers and logarithms, sums and products over many values, normalisations —
compute in FP32 with casts around them (:data:`KEEP_FP32`, beside the converter's own list; a mean stays within its
inputs' range and is cast: a MobileNet's squeeze-excite blocks run in FP16). What such a node computes is FP32; its
result is cast back to FP16 where the next node is FP16, so an exponential past 11 still overflows there — whole
operators (a softmax, a layer norm) keep their range, a graph that spells them out in pieces does not. The record
lists the nodes kept (``config.artifacts.onnx-fp16.kept_fp32``), so a reader sees what of the engine is not FP16.
The parity gate judges the result as any FP16 cell's.
"""

from __future__ import annotations

import warnings
from importlib.metadata import version
from typing import Any

from ..base.errors import MissingDependency
from ..registry.artifacts import ExportContext

#: Operators kept in FP32 for their range (an FP16 value overflows past 65,504: an exponential past 11, a sum of
#: squares over a feature map), beyond the converter's own list (operators that take no FP16, NMS and TopK among them).
KEEP_FP32 = ("Exp", "Pow", "Log", "Softmax", "LogSoftmax", "ReduceSum", "ReduceProd", "ReduceLogSumExp",
             "ReduceSumSquare", "ReduceL2", "LayerNormalization", "InstanceNormalization", "GroupNormalization")


def export(ctx: ExportContext) -> dict[str, Any]:
    import onnx

    try:
        from onnxconverter_common import float16
    except ImportError:
        raise MissingDependency("onnxconverter_common", "tensorrt", "the FP16 ONNX model TensorRT 11 builds from") \
            from None
    model = onnx.load(str(ctx.path("onnx")))
    blocked = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(KEEP_FP32))
    kept = [f"{n.name or n.output[0]} ({n.op_type})" for n in model.graph.node if n.op_type in blocked]
    with warnings.catch_warnings(record=True) as said:  # the converter warns per weight tensor and side it clamps
        warnings.simplefilter("always")
        half = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=blocked)
    clamped = sum("will be truncated" in str(w.message) for w in said)
    floats = {o.name for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    outputs_in_fp32(half, floats)
    onnx.checker.check_model(half)
    out = ctx.path("onnx-fp16")
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(half, str(out) + ".part")
    (out.parent / (out.name + ".part")).replace(out)
    return {"paths": ["onnx-fp16"], "converter": f"onnxconverter-common {version('onnxconverter-common')} "
                                                 "convert_float_to_float16 (keep_io_types)",
            "kept_fp32": kept, "notes": [f"{len(kept)} of {len(model.graph.node)} nodes kept in FP32; {clamped} "
                                         "clamping warning(s): weights past ±1e4 set to it, magnitudes under 1e-7 "
                                         "raised to it"]}


def outputs_in_fp32(model: Any, names: set[str]) -> None:
    """The outputs of ``names`` given in FP32 again where the converter left them in FP16: ``keep_io_types`` is not
    kept for an output written by a node it keeps in FP32 (a classifier's final softmax: it casts the FP32 result to
    FP16). That cast now casts to FP32 where nothing else reads it; any other output gets a cast of its own, the FP16
    tensor still feeding the nodes that read it."""
    from onnx import TensorProto, helper

    for out in model.graph.output:
        if out.name not in names or out.type.tensor_type.elem_type == TensorProto.FLOAT:
            continue
        node = next((n for n in model.graph.node if out.name in n.output), None)
        if node is None:  # an input or a weight given out as it is: no cast of ours can make it anything else
            continue
        readers = [n for n in model.graph.node if out.name in n.input]
        if node.op_type == "Cast" and not readers:  # the converter's cast back to FP16, read by nothing else
            for attr in node.attribute:
                if attr.name == "to":
                    attr.i = TensorProto.FLOAT
        else:  # the FP16 tensor keeps feeding its readers under another name; the output is its FP32 cast
            inner = f"{out.name}_fp16"
            node.output[list(node.output).index(out.name)] = inner
            for reader in readers:
                reader.input[:] = [inner if i == out.name else i for i in reader.input]
            model.graph.node.append(helper.make_node("Cast", [inner], [out.name], to=TensorProto.FLOAT))
        out.type.tensor_type.elem_type = TensorProto.FLOAT
