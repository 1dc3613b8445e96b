"""PyTorch runners: ``torch`` (the ONNX-converted module, identical weights) and ``torch-native``
(torchvision's implementation of the same architecture, its own seeded weights).

Options (recorded in ``runner``): ``precision`` fp32|fp16|bf16, ``channels_last`` (torch-native's
NCHW input), ``compile`` (``torch.compile``; its compile time lands in the first call), ``cuda_graphs``
(capture one call per input shape and replay it; GPU only).
"""

from __future__ import annotations

import copy
import dataclasses
import operator
import os
from typing import Any

import numpy as np

from ..base.machine import native_instructions
from ..exporters import quantize_torch
from ..exporters.torch import convert
from ..exporters.torch_program import load_program
from ..exporters.torch_source import condition
from ..registry import artifacts, ports
from ..registry.ports import ported_models
from .base import LoadContext, Runner
from .torch_stages import program_stage_errors, stage_errors


def cuda_uuid(torch: Any) -> str:
    """torch's view of CUDA device 0 as NVML writes UUIDs ("GPU-xxxxxxxx-...")."""
    return "GPU-" + str(torch.cuda.get_device_properties(0).uuid).removeprefix("GPU-")


def strict_fp32(torch: Any, ctx: LoadContext) -> bool | None:
    """FP32 on a GPU means FP32: cuDNN's convolutions (and matrix products) would otherwise run on TF32 tensor
    cores by default, rounding their inputs to a 10-bit mantissa (about 1e-3 relative, ten times coarser than the
    FP32 gate's 1e-4). Returns whether TF32 is allowed (None on the CPU, where it does not exist)."""
    if ctx.device != "gpu":
        return None
    allowed = ctx.precision != "fp32"  # tf32 asks for it; fp16/bf16 compute below TF32 anyway
    torch.backends.cudnn.allow_tf32 = allowed
    torch.backends.cuda.matmul.allow_tf32 = allowed
    return allowed


class TorchRunner(Runner):
    name = "torch"
    channels_first = False  # the converted module takes NHWC, as the ONNX graph does

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """On the CPU: OpenMP's wait policy (libgomp's default spins; PASSIVE sleeps at once: read when torch is
        imported, so a worker of its own) x intra-op threads (the run's count, and 1). On a GPU: CUDA graphs (one
        call captured and replayed: a batch-1 call of MobileNetV3-Large took 1.24 ms against 4.1 ms eager on an
        H100), with channels-last for a channels-first module, each a worker of its own."""
        if device != "cpu":
            layouts = [{}, {"channels_last": True}] if cls.channels_first else [{}]
            return [*layouts, *({**layout, "cuda_graphs": True} for layout in layouts)], [{}]
        return [{}, {"omp_wait_policy": "PASSIVE"}], [{"intra_op_threads": t} for t in dict.fromkeys((threads, 1))]

    def apply(self, setting: dict[str, Any]) -> None:
        self.torch.set_num_threads(int(setting.get("intra_op_threads", self.threads)))

    def setup(self, ctx: LoadContext) -> Any:
        """torch imported with the run's threads, device, precision and layout; returns the module."""
        if ctx.setting.get("omp_wait_policy"):  # before torch (and its libgomp) is imported
            os.environ["OMP_WAIT_POLICY"] = str(ctx.setting["omp_wait_policy"])
        import torch

        self.torch, self.threads = torch, ctx.threads
        torch.set_num_threads(ctx.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set in this process
            pass
        self.dev = torch.device("cuda:0" if ctx.device == "gpu" else "cpu")
        self.int8_cell = ctx.precision == "int8"
        if ctx.device == "gpu" and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device (is a CUDA build of torch installed?)")
        opts = ctx.options
        self.dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
                      "bf16": torch.bfloat16, "int8": torch.float32}[ctx.precision]  # int8: FP32 in and out
        self.tf32 = strict_fp32(torch, ctx)
        setting = ctx.setting  # a load-time setting being tuned (tuning_grid) overrides the option
        # a PyTorch source's program (a torchvision/timm model's, a .pt2 file) takes its inputs in its own layout:
        # nothing permuted, and channels-last only for a channels-first one (an INT8 twin's program is NCHW: permuted)
        program = self.program = artifacts.source_kind(ctx.model) == "pt2"
        self.channels_last = bool(setting.get("channels_last", opts.channels_last)) and self.channels_first and \
            not (program and ctx.model.layout == "NHWC")
        self.permute = self.channels_first and ctx.model.layout == "NHWC" and not program
        self.compiled = opts.torch_compile
        self.compile_mode = setting.get("mode")  # torch.compile's mode (None: its default)
        self.cuda_graphs = bool(setting.get("cuda_graphs", opts.cuda_graphs))
        self.graphs: dict[Any, Any] = {}
        if self.cuda_graphs and self.dev.type != "cuda":
            raise RuntimeError("CUDA graphs need a GPU")
        return torch

    def int8_block_errors(self, inputs: np.ndarray) -> dict[str, Any] | None:
        """An INT8 cell's stages against the FP32 model it was quantised from: None where there is none here."""
        return None

    def load(self, ctx: LoadContext) -> None:
        self.ctx = ctx
        torch = self.setup(ctx)
        module = self.build(ctx).to(self.dev, self.dtype)
        module.eval()  # an exported program's (INT8's) eval() returns nothing
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.plain = module  # before compilation: its blocks can be read (block_errors)
        self.module = torch.compile(module, **self.compile_options()) if self.compiled else module

    def compile_options(self) -> dict[str, Any]:
        """``torch.compile``'s arguments: its mode where one is being tuned (``reduce-overhead`` captures CUDA
        graphs, ``max-autotune-no-cudagraphs`` searches kernels without them)."""
        return {"mode": self.compile_mode} if self.compile_mode else {}

    def build(self, ctx: LoadContext) -> Any:
        """The module rebuilt from the ONNX export by onnx2torch, with the exported weights (safetensors, no
        pickle) loaded into it strictly: a file that is not those weights fails the cell, it never runs; a PyTorch
        model's program (or the user's .pt2 file) as it is."""
        from safetensors.torch import load_file

        if str(ctx.artifact).endswith(".pt2"):
            return load_program(ctx.artifact)

        module, _ = convert(ctx.folder / artifacts.EXPORTERS["onnx"].path)
        module.load_state_dict(load_file(str(ctx.artifact)), strict=True)
        return module

    def _placed(self, x: Any) -> Any:
        """An NHWC tensor (host or device) in the module's layout, dtype, memory format and device."""
        torch = self.torch
        if self.permute:
            x = x.permute(0, 3, 1, 2)
        return x.to(self.dev, self.dtype).contiguous(
            memory_format=torch.channels_last if self.channels_last else torch.contiguous_format)

    def prepare(self, batch: np.ndarray) -> Any:
        return self._graphed(self._placed(self.torch.from_numpy(batch)))

    def resident(self, samples: np.ndarray) -> Any:
        return self._placed(self.torch.from_numpy(samples))

    def gather(self, resident: Any, indices: np.ndarray) -> Any:
        torch = self.torch
        x = resident.index_select(0, torch.as_tensor(indices, device=self.dev))
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self._graphed(x)

    def placement(self) -> dict[str, Any]:
        layout = ("NCHW" if self.channels_first else "NHWC") + (", channels-last" if self.channels_last else "")
        return {"resident": True, "placement": f"torch tensor on {self.dev} ({layout}, "
                f"{str(self.dtype).replace('torch.', '')}); each batch an index_select there"}

    def serving_concurrency(self) -> int:
        return 1 if self.cuda_graphs else 2  # a captured graph's input and output buffers are shared

    def _graphed(self, x: Any) -> Any:
        """``x`` as ``call`` takes it: itself, or with CUDA graphs copied into the graph captured for its shape."""
        torch = self.torch
        if not self.cuda_graphs:
            return x
        key = (tuple(x.shape), x.dtype)
        if key in self.graphs:  # captured once per shape; later inputs are copied into its input buffer
            static_in, graph, static_out = self.graphs[key]
            static_in.copy_(x)
            return (graph, static_out)
        static_in = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):  # warm up outside the capture, as the CUDA graphs docs require
                self.module(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.inference_mode():
            static_out = self.module(static_in)
        self.graphs[key] = (static_in, graph, static_out)
        return (graph, static_out)

    def call(self, prepared: Any) -> Any:
        if self.cuda_graphs:
            graph, static_out = prepared
            graph.replay()
            return static_out
        with self.torch.inference_mode():
            return self.module(prepared)

    def synchronize(self, outputs: Any) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def to_numpy(self, outputs: Any) -> Any:
        """One tensor, or a model's several (a tuple in the graph's order; a mapping by name) as host arrays."""
        if isinstance(outputs, dict):
            return {k: v.float().cpu().numpy() for k, v in outputs.items()}
        if isinstance(outputs, (tuple, list)):
            return [o.float().cpu().numpy() for o in outputs]
        return outputs.float().cpu().numpy()

    def peak_device_memory_mb(self) -> float | None:
        if self.dev.type != "cuda":
            return None
        return float(self.torch.cuda.max_memory_allocated(self.dev)) / 2**20

    def reset_peak_device_memory(self) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.dev)

    def device_uuid(self) -> str | None:
        return cuda_uuid(self.torch) if self.dev.type == "cuda" else None

    def details(self) -> dict[str, Any]:
        return {
            "sync": "torch.cuda.synchronize" if self.dev.type == "cuda" else "none-cpu",
            "inference_mode": True,
            "intra_op_threads": self.torch.get_num_threads(),
            "inter_op_threads": self.torch.get_num_interop_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "input_layout": "NCHW" if self.permute or self.ctx.model.layout == "NCHW" else "NHWC",
            "dtype": str(self.dtype).replace("torch.", ""),
            "channels_last": self.channels_last,
            "torch_compile": self.compiled,
            "compile_mode": self.compile_mode,
            "cuda_graphs": self.cuda_graphs,
            "tf32": self.tf32,
        }


class TorchNativeRunner(TorchRunner):
    name = "torch-native"
    channels_first = True

    def build(self, ctx: LoadContext) -> Any:
        import torchvision

        if ctx.precision == "int8":  # the twin, or a PyTorch model's program, quantised by PT2E (exporter torch-int8)
            self.weights_source = ("the program's own" if self.program else "keras-ported") + ", pt2e-int8"
            return quantize_torch.load(ctx.path)
        if str(ctx.artifact).endswith(".pt2"):  # a PyTorch model's program, or the user's .pt2 file
            self.weights_source = "the program's own"
            return load_program(ctx.artifact)
        if ctx.model.torchvision_builder is None:
            raise RuntimeError(f"torchvision has no implementation of {ctx.model.name}")
        if ctx.model.name in ported_models() and ctx.artifact is not None:
            self.weights_source = "keras-ported"
            with np.load(ctx.artifact) as weights:
                return ports.build_torchvision(ctx.model.name, weights)
        self.weights_source = "own-seeded-calibrated"
        self.torch.manual_seed(ctx.seed)
        size = {"image_size": ctx.resolution} if ctx.model.family == "vit" else {}  # a ViT is built for one size
        module = getattr(torchvision.models, ctx.model.torchvision_builder)(weights=None, **size)
        condition(self.torch, module, ctx.model, ctx.resolution, ctx.seed)
        return module

    def int8_block_errors(self, inputs: np.ndarray) -> dict[str, Any] | None:
        """The PT2E program's stages against the torchvision twin with the Keras weights, in FP32: what it was
        quantised from (:func:`program_stage_errors`). None for a PyTorch model's program: it was quantised from a
        flat graph, with no modules whose stages could be read."""
        if self.program:
            return None
        with np.load(self.ctx.folder / artifacts.EXPORTERS["ported"].path) as weights:
            twin = ports.build_torchvision(self.ctx.model.name, weights).eval()
        x = self.torch.from_numpy(np.ascontiguousarray(inputs.transpose(0, 3, 1, 2)))
        return program_stage_errors(self.torch, self.plain, twin, x)

    def details(self) -> dict[str, Any]:
        return {**super().details(), "weights": self.weights_source,
                **({"int8": self.int8()} if self.int8_cell else {})}

    def int8(self) -> dict[str, Any]:
        """What an INT8 cell ran: the program's quantise / dequantise pairs (inductor lowers them into oneDNN's INT8
        kernels), how it was made, the CPU's INT8 instructions."""
        quantize, dequantize = quantize_torch.pairs(self.plain)
        return {"quantize": quantize, "dequantize": dequantize, "method": quantize_torch.METHOD,
                "instructions": native_instructions("int8")}

    def block_errors(self, inputs: np.ndarray) -> dict[str, Any] | None:
        """The torchvision twin's stages (:func:`stage_errors`) in its precision against a copy in FP64; an INT8
        cell's quantised program against the FP32 twin it was quantised from (:meth:`int8_block_errors`)."""
        if self.int8_cell:
            return self.int8_block_errors(inputs)

        x = self.torch.from_numpy(np.ascontiguousarray(inputs.transpose(0, 3, 1, 2) if self.permute else inputs))
        exact = copy.deepcopy(self.plain).to("cpu", self.torch.float64)
        return stage_errors(self.torch, self.plain, exact, x.to(self.dev, self.dtype), x.double())


class TorchInductorRunner(TorchNativeRunner):
    """PyTorch's best-known CPU/GPU inference setting for a torchvision model: channels-last memory
    format, ``torch.compile`` with the inductor backend and, on the CPU, weights frozen into the graph
    (constant folding and oneDNN weight prepacking); compilation lands in the first call."""

    name = "torch-inductor"

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """On the CPU threads only: a worker for OpenMP's other wait policy would compile the model again (12 s
        here). On a GPU inductor's modes — its default, ``reduce-overhead`` (CUDA graphs) and
        ``max-autotune-no-cudagraphs`` — and channels-first beside its channels-last, each a worker (and a compilation,
        in its cold start) of its own."""
        if device != "cpu":
            modes = [{}, {"mode": "reduce-overhead"}, {"mode": "max-autotune-no-cudagraphs"}]
            return [*modes, {"channels_last": False}], [{}]
        return [{}], super().tuning_grid(threads, device)[1]

    def load(self, ctx: LoadContext) -> None:
        import torch._dynamo.config as dynamo
        import torch._inductor.config as inductor

        if ctx.device == "cpu":
            inductor.freezing = True
        # an operator whose output's size depends on the data (a detector's torchvision::nms) is captured into the
        # graph, not broken around: broken, the frozen graph's runtime asserts lost their symbols (KeyError: u0)
        dynamo.capture_dynamic_output_shape_ops = True
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # first_call_s is far shorter with a warm cache
        self.cache_warm = cache is not None and os.path.isdir(cache) and any(os.scandir(cache))
        self.counted: int | None = None
        self.counted_before = count_inductor_bytes()
        self.batch_size = ctx.batch_size
        super().load(dataclasses.replace(ctx, options=dataclasses.replace(
            ctx.options, channels_last=True, torch_compile=True)))

    def to_numpy(self, outputs: Any) -> Any:
        """As torch's; the first outputs read are the timed batch's first call (scenarios.base.Loaded), whose
        compilation inductor has just counted: its bytes are taken then, before any other batch size compiles."""
        if self.counted is None and self.counted_before is not None:
            from torch._inductor import metrics

            self.counted = metrics.num_bytes_accessed - self.counted_before
        return super().to_numpy(outputs)

    def runtime_cost(self) -> dict[str, Any]:
        """Inductor's own count of the bytes its kernels read and write (``GraphLowering.count_bytes``, counted as it
        compiled the timed batch, or carried with the graph from its cache), per image; frozen weights are
        constants it does not count, so they are added once a call (:func:`used_weight_bytes`)."""
        import torch._inductor.config as inductor

        by = "inductor kernel count"
        if self.counted_before is None:
            return {"by": by, "why": "this torch's inductor has no metrics log to count with"}
        if not self.counted:
            return {"by": by, "why": "inductor counted no bytes: its cache held the graph from a compilation that "
                                     "did not count (clear TORCHINDUCTOR_CACHE_DIR to count it)"}
        weights = used_weight_bytes(self.torch, self.plain) if inductor.freezing else 0
        return {"by": by + (" + frozen weights once" if weights else ""),
                "bytes_per_image": (self.counted + weights) / self.batch_size,
                "kernel_bytes_per_image": self.counted / self.batch_size,
                "weights_bytes_per_image": weights / self.batch_size}

    def details(self) -> dict[str, Any]:
        import torch._inductor.config as inductor

        return {**super().details(), "compile_backend": "inductor", "freezing": bool(inductor.freezing),
                "inductor_cache_warm": self.cache_warm, "runtime_cost": self.runtime_cost()}


def used_weight_bytes(torch: Any, module: Any) -> int:
    """The bytes of the weights a call of ``module`` reads (at most: a batch norm freezing folds away is counted):
    a graph module's tensors that a node it runs uses (a quantised program keeps its FP32 originals, unused), else
    every parameter and buffer, each tensor once."""
    tensors: dict[int, Any] = {}
    if isinstance(module, torch.fx.GraphModule):
        for node in module.graph.nodes:
            if not node.users or node.op not in ("get_attr", "call_module"):
                continue
            found = operator.attrgetter(node.target)(module)  # a submodule it calls, or a tensor it reads
            held = [*found.parameters(), *found.buffers()] if isinstance(found, torch.nn.Module) else [found]
            tensors.update((id(t), t) for t in held if isinstance(t, torch.Tensor))
    else:
        tensors = {id(t): t for t in [*module.parameters(), *module.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def count_inductor_bytes() -> int | None:
    """Make inductor count the bytes each graph it compiles moves (its metrics log, on at INFO, writing nowhere: the
    count is kept with each graph in its cache as well), and return its count so far; None where it has no such
    log."""
    import logging

    from torch._inductor import compile_fx, metrics

    log = getattr(compile_fx, "inductor_metrics_log", None)  # a torch without it counts nothing: the row says so
    if log is None:
        return None
    if not log.isEnabledFor(logging.INFO):
        log.setLevel(logging.INFO)
        log.propagate = False
        log.addHandler(logging.NullHandler())
    return int(metrics.num_bytes_accessed)
