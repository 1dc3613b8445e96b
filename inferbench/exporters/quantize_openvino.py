"""INT8 for OpenVINO: the model OpenVINO's FP32 runner converts (the SavedModel of a Keras model; a model file as it
is; a PyTorch model's ``torch.export`` program), converted the same way and quantised after
training by NNCF, OpenVINO's own compression framework (``nncf.quantize``: its default post-training quantisation,
the ``PERFORMANCE`` preset — symmetric weights and activations —, fast bias correction, each activation's range from
the calibration inputs), saved as OpenVINO IR (``openvino-int8/<digest>.xml`` and ``.bin``), one per calibration set
(the variants are the sets' digests). The CPU plugin runs the quantised layers in INT8 whatever the inference
precision hint (the runner reads back what ran).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..registry.artifacts import ExportContext, int8_export, source_kind
from ..registry.images import calibration_inputs, rebatched
from ..registry.models import get_model
from ..registry.tasks import task
from .torch_program import load_exported

#: How the INT8 model is made, as records and the manifest name it.
METHOD = {"tool": "nncf.quantize", "preset": "PERFORMANCE", "activations": "int8/uint8 per tensor",
          "weights": "int8 per channel", "calibration": "NNCF's default statistics (min-max of activations)",
          "bias_correction": "fast", "outputs": "the operators that write them left in FP32 where the task asks"}


def export(ctx: ExportContext) -> dict[str, Any]:
    return int8_export(ctx, "openvino-int8", lambda out, cal: quantize(ctx, out, cal), METHOD,
                       lambda xml: [str(Path(xml).with_suffix(s)) for s in (".xml", ".bin")])  # its graph, weights


def quantize(ctx: ExportContext, out: Any, cal: Any) -> None:
    import nncf
    import openvino as ov

    spec = get_model(ctx.model)
    src = source_kind(spec)  # the openvino runner's own route: the SavedModel made from a Keras model, else the source
    path = ctx.path("savedmodel" if src == "keras" else src)
    model = ov.convert_model(load_exported(path) if src == "pt2" else str(path))
    # one image an item (NNCF counts its subset in items), or the batch a fixed model takes
    items = list(rebatched(calibration_inputs(spec, cal, ctx.resolution, ctx.seed), spec.fixed_batch or 1))
    kept = _output_operators(model) if task(spec.task).float_outputs else []
    quantized = nncf.quantize(model, nncf.Dataset(items), preset=nncf.QuantizationPreset.PERFORMANCE,
                              subset_size=len(items), ignored_scope=nncf.IgnoredScope(names=kept, validate=False))
    part = out.with_name(out.stem + ".part.xml")
    ov.save_model(quantized, str(part), compress_to_fp16=False)
    part.with_suffix(".bin").replace(out.with_suffix(".bin"))
    part.replace(out)  # the .xml last: the model is whole when its .xml is there


def _output_operators(model: Any) -> list[str]:
    """The operators that write the model's outputs, by name: left in FP32, as ONNX Runtime's INT8 leaves them for a
    task whose outputs mix ranges (a YOLO head's boxes in pixels beside scores in [0, 1])."""
    return [result.input_value(0).get_node().get_friendly_name() for result in model.get_results()]
