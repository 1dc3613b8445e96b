"""OpenVINO Runtime runner (``openvino``): the TF SavedModel, converted by OpenVINO's own TensorFlow
frontend at load (of a model file: the file; of a PyTorch program: the program), compiled for the CPU plugin with a
static input shape; ``openvino-onnx`` is the same runner on the ONNX export, the other route in.

Why this configuration (measured on this project's 2-core AMD EPYC, MobileNetV3-Large; docs/frameworks.md has the
numbers): OpenVINO reading the tf2onnx ONNX graph ran about 3x slower than ONNX Runtime on the same
file, because tf2onnx wraps every convolution in layout transposes that ONNX Runtime's optimiser
removes and OpenVINO's ONNX frontend keeps; the same weights converted from the SavedModel compile
to a fused graph that ran faster than ONNX Runtime: the model source, not the CPU, made the gap.
``openvino.convert_model`` reads a SavedModel without importing TensorFlow (its time is part of
``cold_start.load_s``; inferbench's own read of its ops, which imports TensorFlow's protobuf classes, runs before
that time in a child process, :meth:`OpenVinoRunner.check`, out of its time and memory). Then, from OpenVINO's CPU
performance guide:

- a static input shape for the timed batch size (``model.reshape``), 13-19% faster than the
  dynamic batch dimension here (the parity gate, like every runner's, calls it at the timed batch size
  only: ``scenarios.inference.at_batch_size``);
- ``PERFORMANCE_HINT=LATENCY``: one stream, one request at a time, as every framework here is timed;
- ``INFERENCE_NUM_THREADS`` = the run's thread count (read back and recorded);
- ``INFERENCE_PRECISION_HINT=f32``: on CPUs with bf16/AMX the plugin would otherwise run bf16 by
  default, a different contender from the FP32 runtimes it is ranked against. ``--precision bf16`` / ``fp16`` set
  it to ``bf16`` / ``f16`` (refused in one line on a CPU without those instructions); the precision the compiled
  model's convolutions and matrix products really run at is read back from its runtime model and recorded
  (``runner.executed_precisions``): a hint the plugin quietly ignored fails the cell.
- ``--precision int8``: the model NNCF quantised (:mod:`inferbench.exporters.quantize_openvino`), read as IR; its
  quantised layers must run at i8/u8 (read back likewise), the CPU's INT8 instructions are recorded.

One infer request is created at load; ``infer`` is synchronous (it returns when the work is done)
and shares the input and output buffers (about 5% faster than copying them).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np

from ..base.machine import native_instructions
from ..exporters.torch_program import load_exported
from ..registry import artifacts
from ..registry.artifacts import REFERENCE_OUTPUTS
from ..registry.filecheck import check_savedmodel_apart
from ..registry.outputs import packed, read_layout
from .base import LoadContext, Runner

#: --precision -> OpenVINO's INFERENCE_PRECISION_HINT (int8: the quantised layers run in INT8 whatever the hint; the
#: rest in f32)
HINTS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
#: The layers whose precision says what the model computes at (activations and pooling may stay f32)
COMPUTE_LAYERS = ("Convolution", "GroupConvolution", "FullyConnected", "MatMul")


def executed_precisions(compiled: Any) -> dict[str, int]:
    """How many compute layers of the compiled model run at each precision (its runtime model's
    ``runtimePrecision``)."""
    seen: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "runtimePrecision" in info and info["layerType"].astype(str) in COMPUTE_LAYERS:
            seen[info["runtimePrecision"].astype(str)] += 1
    return dict(seen)


def output_names(model: Any, declared: list[str], by_order: bool) -> list[str]:
    """Each of a converted model's outputs by the name the source declared: the one among the names OpenVINO keeps for
    it (an ONNX file's own, a SavedModel signature's mapping keys), else by its place where no declared name is
    found (a SavedModel of a Keras model's list: ``output_0``, ``output_1``..., in the list's order), or where
    ``by_order`` (a program's outputs, and those of NNCF's INT8 of it, keep its order, not its names)."""
    found = [next((n for n in declared if n in o.get_names()), None) for o in model.outputs]
    if len(declared) != len(model.outputs) or (any(found) and not by_order):
        return [n or min(o.get_names(), default=f"output{i}") for i, (n, o) in enumerate(zip(found, model.outputs))]
    places = [re.fullmatch(r"output_(\d+)", min(o.get_names(), default="")) for o in model.outputs]
    if not by_order and all(places) and sorted(int(p.group(1)) for p in places if p) == list(range(len(declared))):
        return [declared[int(p.group(1))] for p in places if p]  # a signature's output_i: the i-th, wherever it lies
    return list(declared)


class OpenVinoRunner(Runner):
    name = "openvino"

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The performance hint (LATENCY: one stream with every thread; THROUGHPUT: the plugin's streams, fewer
        threads each, as benchmark_app's throughput mode) x CPU pinning (threads bound to cores, the plugin's
        default on Linux, or free to move)."""
        return [{}], [{"hint": h, "pinning": p} for h in ("LATENCY", "THROUGHPUT") for p in (True, False)]

    def check(self, ctx: LoadContext) -> None:
        if ctx.path.is_dir():  # a SavedModel: its ops read first, as for TensorFlow (nothing but inference)
            check_savedmodel_apart(ctx.path)  # in a child: TensorFlow is no part of this runtime's process

    def load(self, ctx: LoadContext) -> None:
        import openvino as ov

        if ctx.device != "cpu":
            raise RuntimeError("inferbench runs OpenVINO on the CPU only (its GPU plugin is for Intel GPUs)")
        # an INT8 model (NNCF's, OpenVINO IR) is read as it was saved; the SavedModel or ONNX file is converted
        self.core = ov.Core()  # one for the run: it reads an IR and compiles every setting's model
        program = str(ctx.artifact).endswith(".pt2")  # a PyTorch program: converted from torch's own graph
        model = self.core.read_model(str(ctx.artifact)) if str(ctx.artifact).endswith(".xml") \
            else ov.convert_model(load_exported(ctx.artifact) if program else str(ctx.artifact))
        self.batch, self.precision = ctx.batch_size, ctx.precision
        self.hint = HINTS[ctx.precision]
        model.reshape(list(ctx.model.input_shape(self.batch, ctx.resolution)))
        self.source = "onnx" if str(ctx.artifact).endswith(".onnx") else "nncf-int8-ir" \
            if str(ctx.artifact).endswith(".xml") else "torch.export program" if program else "savedmodel"
        self.ov, self.model, self.threads = ov, model, ctx.threads
        self.output_names = output_names(model, [o.name for o in read_layout(ctx.folder / REFERENCE_OUTPUTS)],
                                         artifacts.source_kind(ctx.model) == "pt2" and
                                         not str(ctx.artifact).endswith(".onnx"))
        self.compiled_for: dict[tuple[str, bool], Any] = {}
        self.apply({})
        self.version = ov.get_version()

    def apply(self, setting: dict[str, Any]) -> None:
        """A compiled model and infer request per setting, made once."""
        key = (str(setting.get("hint", "LATENCY")), bool(setting.get("pinning", True)))
        if key not in self.compiled_for:
            compiled = self.core.compile_model(self.model, "CPU", {
                "PERFORMANCE_HINT": key[0],
                "INFERENCE_NUM_THREADS": self.threads,
                "INFERENCE_PRECISION_HINT": self.hint,
                "ENABLE_CPU_PINNING": key[1],
            })
            self.compiled_for[key] = (compiled, compiled.create_infer_request())
        self.compiled, self.request = self.compiled_for[key]
        self.executed = executed_precisions(self.compiled)
        wanted = ("i8", "u8") if self.precision == "int8" else (self.hint,)
        if self.executed and not set(wanted) & set(self.executed):  # a few sensitive layers may stay in f32
            raise RuntimeError(f"OpenVINO was asked for {self.precision if self.precision == 'int8' else self.hint} "
                               f"and runs no compute layer at it: {dict(self.executed)}")

    def serving_calls(self, n: int, batch: int) -> list[Any]:
        """An infer request of the compiled model per serving thread (one request is not to be shared)."""
        def serve(request: Any) -> Any:
            def call(x: np.ndarray) -> np.ndarray:
                request.infer({0: x}, share_inputs=True, share_outputs=True)
                return packed([request.get_output_tensor(i).data for i in range(len(self.output_names))],
                              self.output_names)
            return call

        return [serve(self.compiled.create_infer_request()) for _ in range(n)]

    def _infer(self, batch: np.ndarray) -> Any:
        self.request.infer({0: batch}, share_inputs=True, share_outputs=True)
        if len(self.output_names) == 1:
            return self.request.get_output_tensor(0)
        return tuple(self.request.get_output_tensor(i) for i in range(len(self.output_names)))

    def call(self, prepared: Any) -> Any:
        return self._infer(prepared)  # the static program: every call has the timed batch size

    def to_numpy(self, outputs: Any) -> Any:
        """The output, or a model's several by their names (the request's buffers are overwritten by the next call:
        copied)."""
        if isinstance(outputs, tuple):
            return {name: np.array(t.data, copy=True) for name, t in zip(self.output_names, outputs)}
        data = outputs if isinstance(outputs, np.ndarray) else outputs.data
        return np.array(data, copy=True)

    def details(self) -> dict[str, Any]:
        prop = self.compiled.get_property
        return {
            "sync": "ov.infer-sync",
            "intra_op_threads": int(prop("INFERENCE_NUM_THREADS")),
            "performance_hint": str(prop("PERFORMANCE_HINT")),
            "inference_precision": prop("INFERENCE_PRECISION_HINT").to_string(),
            "executed_precisions": self.executed,
            "streams": int(prop("NUM_STREAMS")),
            "cpu_pinning": bool(prop("ENABLE_CPU_PINNING")),
            "model_source": f"{self.source} (" + ("NNCF post-training quantisation, read as IR" if self.source ==
                                                  "nncf-int8-ir" else "openvino.convert_model") + ")",
            **({"int8_instructions": native_instructions("int8")} if self.precision == "int8" else {}),
            "static_batch": self.batch,
            "openvino": self.version,
        }
