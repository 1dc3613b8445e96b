"""ONNX Runtime runner: full graph optimisation, provider chosen by device.

On a GPU, inputs and outputs live on the device through IOBinding and ``synchronize_outputs``
waits for the device; a provider that silently fell back to the CPU is an error, not a result.
``--precision int8`` loads the file ONNX Runtime's own tool quantised (:mod:`inferbench.exporters.quantize_onnx`);
the record counts its quantisation pairs and names the CPU's INT8 instructions.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..base.machine import native_instructions
from ..exporters.quantize_onnx import METHOD, prepare
from ..measure.parity import pick_blocks, relative_l2
from ..registry import artifacts
from .base import LoadContext, Runner

PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "gpu": ["CUDAExecutionProvider", "CPUExecutionProvider"],
}


class OnnxRuntimeRunner(Runner):
    name = "onnxrt"

    def providers(self, ctx: LoadContext) -> list[Any]:
        return list(PROVIDERS[ctx.device])

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """On the CPU: intra-op threads (the run's count, and 1) x spinning (on: ONNX Runtime's default, threads
        spin between ops; off: they sleep, which a busy machine rewards)."""
        if device != "cpu":
            return [{}], [{}]
        return [{}], [{"intra_op_threads": t, "allow_spinning": s} for t in dict.fromkeys((threads, 1)) for s in (1, 0)]

    def load(self, ctx: LoadContext) -> None:
        import onnxruntime as ort

        self.ort, self.ctx = ort, ctx
        wanted = self.providers(ctx)
        first = wanted[0] if isinstance(wanted[0], str) else wanted[0][0]
        available = ort.get_available_providers()
        if first not in available:
            raise RuntimeError(
                f"ONNX Runtime lacks {first} (available: {', '.join(available)}); "
                "on a GPU install onnxruntime-gpu (pip install -e \".[gpu]\")"
            )
        self.sessions: dict[tuple[int, int], Any] = {}
        self.apply({})
        active = self.session.get_providers()
        if active[0] != first:
            raise RuntimeError(f"ONNX Runtime fell back to {active[0]} instead of {first}")
        self.gpu = ctx.device == "gpu"
        self.input_name = self.session.get_inputs()[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]

    def apply(self, setting: dict[str, Any]) -> None:
        """A session per setting, made once: full graph optimisation, the thread count and spinning asked for."""
        key = (int(setting.get("intra_op_threads", self.ctx.threads)), int(setting.get("allow_spinning", 1)))
        if key not in self.sessions:
            ort = self.ort
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.intra_op_num_threads = key[0]
            so.inter_op_num_threads = 1
            so.add_session_config_entry("session.intra_op.allow_spinning", str(key[1]))
            so.log_severity_level = 3
            self.sessions[key] = ort.InferenceSession(str(self.ctx.artifact), so, providers=self.providers(self.ctx))
        self.session = self.sessions[key]
        self.threads, self.spinning = key

    def prepare(self, batch: np.ndarray) -> Any:
        if not self.gpu:
            return {self.input_name: batch}
        binding = self.session.io_binding()
        value = self.ort.OrtValue.ortvalue_from_numpy(batch, "cuda", 0)
        binding.bind_ortvalue_input(self.input_name, value)
        for name in self.output_names:
            binding.bind_output(name, "cuda", 0)
        return (binding, value)

    def call(self, prepared: Any) -> Any:
        if not self.gpu:
            return self.session.run(self.output_names, prepared)
        binding = prepared[0]
        self.session.run_with_iobinding(binding)
        return binding

    def synchronize(self, outputs: Any) -> None:
        if self.gpu:
            outputs.synchronize_outputs()

    def to_numpy(self, outputs: Any) -> Any:
        arrays = [np.asarray(o) for o in (outputs.copy_outputs_to_cpu() if self.gpu else outputs)]
        return arrays[0] if len(arrays) == 1 else dict(zip(self.output_names, arrays))

    def placement(self) -> dict[str, Any]:
        if not self.gpu:
            return super().placement()
        return {"resident": False, "placement": "host array; each batch gathered on the host and copied to the GPU "
                "(an OrtValue bound per batch: ONNX Runtime has no device-side gather here)"}

    def int8(self) -> dict[str, Any]:
        """What an INT8 cell ran: the quantised file's QuantizeLinear / DequantizeLinear pairs (ONNX Runtime fuses
        them into its INT8 kernels at load), how it was made, the CPU's INT8 instructions."""
        import onnx

        ops = [n.op_type for n in onnx.load(str(self.ctx.artifact), load_external_data=False).graph.node]
        return {"quantize_linear": ops.count("QuantizeLinear"), "dequantize_linear": ops.count("DequantizeLinear"),
                "method": METHOD, "instructions": native_instructions("int8")}

    def block_errors(self, inputs: np.ndarray) -> dict[str, Any] | None:
        """Where the program ONNX Runtime runs departs from the ONNX file's (:func:`block_errors`): its blocks with the
        runtime's graph optimisations and providers, against the same file with none, on the CPU; an INT8 cell's
        against the FP32 model it was quantised from (:data:`INT8_AGAINST`)."""
        import onnx

        data = onnx.load(str(self.ctx.artifact)).SerializeToString()
        if self.ctx.precision != "int8":
            return block_errors(self.ort, data, data, self.input_name, inputs, self.providers(self.ctx), self.threads)
        with tempfile.TemporaryDirectory() as tmp:
            fp32 = prepare(self.ctx.folder / artifacts.EXPORTERS["onnx"].path, Path(tmp)).read_bytes()
        return block_errors(self.ort, data, fp32, self.input_name, inputs, self.providers(self.ctx), self.threads,
                            INT8_AGAINST)

    def details(self) -> dict[str, Any]:
        return {
            **({"int8": self.int8()} if self.ctx.precision == "int8" else {}),
            "sync": "ort.iobinding.synchronize_outputs" if self.gpu else "ort.run-host",
            "providers": self.session.get_providers(),
            "graph_optimization_level": "ORT_ENABLE_ALL",
            "intra_op_threads": self.threads,
            "inter_op_threads": 1,
            "allow_spinning": bool(self.spinning),
        }


#: Ops that compute no activation (shapes, casts, constants): never a block.
_SHAPE_OPS = {"Constant", "Shape", "Gather", "Unsqueeze", "Squeeze", "Cast", "Concat", "Reshape", "Transpose",
              "Identity", "ConstantOfShape", "Slice", "Range", "Expand"}
BLOCKS_AGAINST = "the same ONNX program without graph optimisations, on the CPU in FP32"
#: An INT8 cell's blocks are read against the FP32 model it was quantised from, as the quantiser was handed it
#: (:func:`inferbench.exporters.quantize_onnx.prepare`): QDQ keeps each operator's output tensor and its name,
#: quantising it after.
INT8_AGAINST = "the FP32 ONNX model it was quantised from, on the CPU, tensor by tensor of the same name"


def blocks_of(model: Any, within: set[str] | None = None) -> list[tuple[str, str]]:
    """An ONNX graph's blocks in network order, as (short name, tensor): its residual additions (an ``Add`` of two
    computed tensors), else the outputs of its computing nodes (:func:`inferbench.measure.parity.pick_blocks`); the
    graph's first output last. ``within``: only tensors of these names (those another graph computes too)."""
    made = {o for node in model.graph.node if node.op_type == "Constant" for o in node.output}
    fixed = {i.name for i in model.graph.initializer} | made
    computing = [n for n in model.graph.node if n.op_type not in _SHAPE_OPS and n.output and n.output[0]
                 and (within is None or n.output[0] in within)]
    residual = [n for n in computing if n.op_type == "Add" and len(n.input) == 2 and not set(n.input) & fixed]
    chosen = pick_blocks(residual, computing[:-1])

    def short(node: Any) -> str:
        parts = [p for p in (node.name or node.output[0]).split("/") if p]
        return (parts[-2] if len(parts) > 1 else parts[0]).split(":")[0]

    final = model.graph.output[0].name
    return [(short(n), n.output[0]) for n in chosen if n.output[0] != final] + [("outputs", final)]


def block_errors(ort: Any, data: bytes, reference: bytes, input_name: str, inputs: np.ndarray,
                 providers: list[Any], threads: int, against: str = BLOCKS_AGAINST) -> dict[str, Any] | None:
    """Each block's output (:func:`blocks_of` of ``reference``, of the tensors ``data`` computes too) of the ONNX
    program ``data`` run with full graph optimisation on ``providers``, against ``reference`` (the same program, or
    what it should compute: ``against`` says which) run with none on the CPU: relative L2 (inf where not finite), in
    network order. None for a graph without blocks."""
    import onnx


    def exposed(model_bytes: bytes, tensors: list[str]) -> bytes:
        model = onnx.load_from_string(model_bytes)
        model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in tensors
                                  if t not in {o.name for o in model.graph.output})
        return model.SerializeToString()

    computed = None if data == reference else {o for n in onnx.load_from_string(data).graph.node for o in n.output}
    blocks = blocks_of(onnx.load_from_string(reference), computed)
    if len(blocks) < 2:
        return None
    tensors = [t for _, t in blocks]

    def run(model_bytes: bytes, level: Any, on: list[Any]) -> list[np.ndarray]:
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        session = ort.InferenceSession(exposed(model_bytes, tensors), so, providers=on)
        return session.run(tensors, {input_name: inputs})

    got = run(data, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, providers)
    exact = run(reference, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ["CPUExecutionProvider"])
    return {"names": [n for n, _ in blocks], "errors": [relative_l2(a, b) for a, b in zip(got, exact)],
            "against": against, "method": f"each block's output vs {against}, relative L2, on the 16 reference inputs"}


class OnnxRuntimeTrtRunner(OnnxRuntimeRunner):
    """ONNX Runtime's TensorRT execution provider (engines cached beside the ONNX artifact); GPU only."""

    name = "onnxrt-trt"

    def providers(self, ctx: LoadContext) -> list[Any]:
        if ctx.device != "gpu":
            raise RuntimeError("the TensorRT execution provider needs an NVIDIA GPU")
        cache = ctx.folder / "onnxrt-trt-cache"
        cache.mkdir(exist_ok=True)
        fp16 = ctx.precision == "fp16"
        return [("TensorrtExecutionProvider", {"trt_fp16_enable": fp16, "trt_engine_cache_enable": True,
                                               "trt_engine_cache_path": str(cache)}),
                "CUDAExecutionProvider", "CPUExecutionProvider"]
