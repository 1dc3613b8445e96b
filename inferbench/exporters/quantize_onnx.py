"""INT8 for ONNX Runtime: the ONNX export quantised after training by ONNX Runtime's own tool
(``onnxruntime.quantization.quantize_static``), as its CPU guide recommends: the model prepared first
(``quant_pre_process``: shape inference and graph optimisation), then QuantizeLinear / DequantizeLinear pairs (QDQ
format) around every operator that has an INT8 kernel — activations unsigned 8-bit, weights signed 8-bit per output
channel (U8S8: the VNNI path) —, each activation's range from its minimum and maximum over the calibration inputs
(``CalibrationMethod.MinMax``, ONNX Runtime's default). ONNX Runtime fuses each pair into its INT8 kernels when it
loads the file. One file per calibration set (``onnx-int8/<digest>.onnx``): the variants are the sets' digests.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..registry.artifacts import ExportContext, int8_export
from ..registry.images import calibration_inputs
from ..registry.models import get_model
from ..registry.tasks import task

#: How the INT8 model is made, as records and the manifest name it.
METHOD = {"tool": "onnxruntime.quantization.quantize_static", "format": "QDQ", "activations": "uint8",
          "weights": "int8 per channel", "calibration": "MinMax", "prepared_by": "quant_pre_process"}
#: The same for TensorRT's explicit quantisation, which takes symmetric pairs only (``onnx-int8-sym``), its biases
#: left in FP32 (TensorRT quantises them itself).
SYMMETRIC = {**METHOD, "activations": "int8 symmetric", "weights": "int8 per channel, symmetric", "biases": "fp32"}
#: Calibration batches whose intermediate outputs ONNX Runtime holds before it folds them into the ranges (it holds
#: every batch's otherwise: gigabytes for a ResNet-50 at 300 images).
CALIB_CHUNKS_HELD = 4


def export(ctx: ExportContext, kind: str = "onnx-int8") -> dict[str, Any]:
    symmetric = kind == "onnx-int8-sym"

    spec = get_model(ctx.model)

    def make(out: Path, cal: Any) -> None:
        quantize(ctx.path("onnx"), out, calibration_inputs(spec, cal, ctx.resolution, ctx.seed), symmetric,
                 task(spec.task).float_outputs)

    return int8_export(ctx, kind, make, SYMMETRIC if symmetric else METHOD)


def quantize(source: Path, out: Path, chunks: Iterable[Any], symmetric: bool = False,
             float_outputs: bool = False) -> None:
    """``source`` (an FP32 ONNX file) quantised into ``out`` (:data:`METHOD`, or :data:`SYMMETRIC`), calibrated on
    ``chunks`` (batches of model inputs, read as they are needed); ``float_outputs``: the operators that write the
    model's outputs left in FP32 (a YOLO head concatenates boxes in pixels and scores in [0, 1]: one INT8 scale for
    both rounds every score to 0)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    name = onnx.load(str(source), load_external_data=False).graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = iter(chunks)

        def get_next(self) -> dict[str, Any] | None:
            batch = next(self.left, None)
            return None if batch is None else {name: batch}

    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        prepared = prepare(source, Path(tmp))
        exclude = output_nodes(prepared) if float_outputs else []
        quantize_static(str(prepared), str(out) + ".part", Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        nodes_to_exclude=exclude,
                        activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                        weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"CalibMaxIntermediateOutputs": CALIB_CHUNKS_HELD, **(
                            {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}
                            if symmetric else {})})
    Path(str(out) + ".part").replace(out)  # whole or not at all


def output_nodes(prepared: Path) -> list[str]:
    """The names of the operators that write the graph's outputs (every operator named first, where it had no name:
    the quantiser excludes operators by name), the file saved again."""
    import onnx

    model = onnx.load(str(prepared))
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{i}"
    onnx.save(model, str(prepared))
    outputs = {o.name for o in model.graph.output}
    return [n.name for n in model.graph.node if set(n.output) & outputs]


def prepare(source: Path, folder: Path) -> Path:
    """``source`` (an FP32 ONNX file) as :func:`quantize` hands it to the quantiser (``quant_pre_process``: shapes
    inferred, the graph optimised, its tensors renamed), written in ``folder``: the FP32 model an INT8 one's tensors
    are named after, hence what its blocks are read against."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = folder / "prepared.onnx"
    try:
        quant_pre_process(str(source), str(prepared))
    except TypeError:  # its symbolic shape inference reads no shape of a size the data decides (an in-graph NMS's)
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    return prepared
