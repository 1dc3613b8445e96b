"""PyTorch runners: ``torch`` (the ONNX-converted module, identical weights) and ``torch-native``
(torchvision's implementation of the same architecture, its own seeded weights).

Options (recorded in ``runner``): ``precision`` fp32|fp16|bf16, ``channels_last`` (torch-native's
NCHW input), ``compile`` (``torch.compile``; its compile time lands in the first call), ``cuda_graphs``
(capture one call per input shape and replay it; GPU only).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..base.errors import UsageError
from .base import LoadContext, Runner, Trainer


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
        self.channels_last = bool(setting.get("channels_last", opts.channels_last)) and self.channels_first
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
        pickle) loaded into it strictly: a file that is not those weights fails the cell, it never runs."""
        from safetensors.torch import load_file

        from ..exporters.torch import convert
        from ..registry.artifacts import EXPORTERS

        module, _ = convert(ctx.folder / EXPORTERS["onnx"].path)
        module.load_state_dict(load_file(str(ctx.artifact)), strict=True)
        return module

    def _placed(self, x: Any) -> Any:
        """An NHWC tensor (host or device) in the module's layout, dtype, memory format and device."""
        torch = self.torch
        if self.channels_first:
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

    def to_numpy(self, outputs: Any) -> np.ndarray:
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
            "input_layout": "NCHW" if self.channels_first else "NHWC",
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

        from ..registry.ports import build_torchvision, ported_models

        if ctx.precision == "int8":  # the twin quantised by PT2E (exporter torch-int8)
            from ..exporters.quantize_torch import load

            self.weights_source = "keras-ported, pt2e-int8"
            return load(ctx.artifact)
        if ctx.model.torchvision_builder is None:
            raise RuntimeError(f"torchvision has no implementation of {ctx.model.name}")
        if ctx.model.name in ported_models() and ctx.artifact is not None:
            self.weights_source = "keras-ported"
            with np.load(ctx.artifact) as weights:
                return build_torchvision(ctx.model.name, weights)
        self.weights_source = "own-seeded-calibrated"
        self.torch.manual_seed(ctx.seed)
        size = {"image_size": ctx.resolution} if ctx.model.family == "vit" else {}  # a ViT is built for one size
        module = getattr(torchvision.models, ctx.model.torchvision_builder)(weights=None, **size)
        _calibrate(self.torch, module, ctx)
        return module

    def int8_block_errors(self, inputs: np.ndarray) -> dict[str, Any] | None:
        """The PT2E program's stages against the torchvision twin with the Keras weights, in FP32: what it was
        quantised from (:func:`program_stage_errors`)."""
        from ..registry.artifacts import EXPORTERS
        from ..registry.ports import build_torchvision

        with np.load(self.ctx.folder / EXPORTERS["ported"].path) as weights:
            twin = build_torchvision(self.ctx.model.name, weights).eval()
        x = self.torch.from_numpy(np.ascontiguousarray(inputs.transpose(0, 3, 1, 2)))
        return program_stage_errors(self.torch, self.plain, twin, x)

    def details(self) -> dict[str, Any]:
        return {**super().details(), "weights": self.weights_source,
                **({"int8": self.int8()} if self.int8_cell else {})}

    def int8(self) -> dict[str, Any]:
        """What an INT8 cell ran: the program's quantise / dequantise pairs (inductor lowers them into oneDNN's INT8
        kernels), how it was made, the CPU's INT8 instructions."""
        from ..base.machine import native_instructions
        from ..exporters.quantize_torch import METHOD

        ops = [str(n.target) for n in self.plain.graph.nodes if n.op == "call_function"]
        return {"quantize": sum("quantize_per" in o and "dequantize" not in o for o in ops),
                "dequantize": sum("dequantize_per" in o for o in ops), "method": METHOD,
                "instructions": native_instructions("int8")}

    def block_errors(self, inputs: np.ndarray) -> dict[str, Any] | None:
        """The torchvision twin's stages (:func:`stage_errors`) in its precision against a copy in FP64; an INT8
        cell's quantised program against the FP32 twin it was quantised from (:meth:`int8_block_errors`)."""
        if self.int8_cell:
            return self.int8_block_errors(inputs)
        import copy

        x = self.torch.from_numpy(np.ascontiguousarray(inputs.transpose(0, 3, 1, 2)))
        exact = copy.deepcopy(self.plain).to("cpu", self.torch.float64)
        return stage_errors(self.torch, self.plain, exact, x.to(self.dev, self.dtype), x.double())


#: What an INT8 cell's stages are read against (torch-inductor's PT2E program).
INT8_AGAINST = "the FP32 torchvision twin it was quantised from (the Keras weights), stage by stage"


def program_stage_errors(torch: Any, program: Any, twin: Any, x: Any) -> dict[str, Any] | None:
    """Each stage of ``twin`` (:func:`stages`) against the same stage of ``program`` (a graph module exported from it,
    quantised by PT2E): a stage's output in the program is that of its last computing node (a floating-point tensor)
    whose module stack names the stage by its path in the twin (``net.layer1`` in the Keras twin's wrapper;
    ``nn_module_stack``, which torch.export keeps), read by running the program in an interpreter; relative L2 in
    network order (inf where not finite). A stage the program has no node of is left out; None when none is found."""
    from ..measure.parity import relative_l2

    found = stages(twin)
    prefix = "net." if hasattr(twin, "net") else ""  # stages() reads the wrapped network; the program keeps its path
    last: dict[str, Any] = {}
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if node.op != "call_function" or not (hasattr(value, "dtype") and value.dtype.is_floating_point):
            continue  # a quantised (integer) tensor, a shape, a constant: never a stage's output
        paths = {path for path, _ in (node.meta.get("nn_module_stack") or {}).values()}
        for name, _ in found:
            if prefix + name in paths:
                last[name] = node
    if not last:
        return None
    wanted, outputs = set(last.values()), {}

    class Reader(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            if n in wanted:
                outputs[n] = out
            return out

    seen: dict[str, Any] = {}

    def keep(name: str, out: Any) -> None:  # a forward hook that returns something replaces the module's output
        seen.setdefault(name, out.detach().double().cpu())

    hooks = [m.register_forward_hook(lambda _m, _i, out, n=name: keep(n, out)) for name, m in found if name in last]
    try:
        with torch.no_grad():
            Reader(program).run(x)
            twin(x)
    finally:
        for hook in hooks:
            hook.remove()
    names = [name for name, _ in found if name in last]
    errors = [relative_l2(outputs[last[name]].detach().double().cpu().numpy(), seen[name].numpy())
              if tuple(outputs[last[name]].shape) == tuple(seen[name].shape) else float("inf") for name in names]
    return {"names": names, "errors": errors, "against": INT8_AGAINST,
            "method": f"each stage's output vs {INT8_AGAINST}, relative L2, on the 16 reference inputs"}


def stages(module: Any) -> list[tuple[str, Any]]:
    """A torchvision twin's stages in network order: a MobileNet's or EfficientNet's ``features`` blocks, a ResNet's
    layers, then its classifier (empty for a module of another shape)."""
    net = getattr(module, "net", module)
    if hasattr(net, "features"):
        body = [(f"features.{n}", m) for n, m in net.features.named_children()]
    else:
        body = [(n, m) for n, m in net.named_children() if n.startswith("layer")]
    head = [(n, getattr(net, n)) for n in ("classifier", "fc") if hasattr(net, n)]
    return body + head if body else []


def stage_errors(torch: Any, module: Any, exact: Any, x: Any, x_exact: Any) -> dict[str, list[Any]] | None:
    """Each stage's output of ``module`` on ``x`` against the same stage of ``exact`` (the module in FP64) on
    ``x_exact``: relative L2 (||out - exact|| / ||exact||, inf where not finite), in network order; None for a
    module without stages."""
    pairs = list(zip(stages(module), stages(exact)))
    if not pairs:
        return None
    seen: dict[str, list[Any]] = {"low": [], "exact": []}
    hooks = [m.register_forward_hook(lambda _m, _i, out, side=side: seen[side].append(out.detach().double().cpu()))
             for (_, low), (_, ref) in pairs for m, side in ((low, "low"), (ref, "exact"))]
    try:
        with torch.inference_mode():
            module(x)
            exact(x_exact)
    finally:
        for hook in hooks:
            hook.remove()
    from ..measure.parity import relative_l2

    errors = [relative_l2(a.numpy(), b.numpy()) for a, b in zip(seen["low"], seen["exact"])]
    return {"names": [name for (name, _), _ in pairs], "errors": errors}


def _calibrate(torch: Any, module: Any, ctx: LoadContext) -> None:
    """Own weights without a port: like the Keras reference (models.build_keras_model), randomise the scales
    and offsets of every batch and layer normalisation, set ConvNeXt's layer scales (1e-6 at init) near 1,
    give a head initialised to zeros (ViT's) random weights, and set the batch-norm running statistics from
    image-like inputs, so that the outputs vary across classes and inputs (torchvision's stock init gives
    near-constant logits)."""
    from ..registry.models import make_inputs

    rng = np.random.default_rng(ctx.seed)

    def uniform(shape: Any, low: float, high: float) -> Any:
        return torch.from_numpy(rng.uniform(low, high, tuple(shape)).astype("float32"))

    bns = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    norms = bns + [m for m in module.modules() if isinstance(m, torch.nn.LayerNorm) and m.weight is not None]
    with torch.no_grad():
        for norm in norms:
            norm.weight.copy_(uniform(norm.weight.shape, 0.5, 1.5))
            norm.bias.copy_(torch.from_numpy(rng.normal(0.0, 0.1, tuple(norm.bias.shape)).astype("float32")))
        for name, param in module.named_parameters():
            if name.endswith("layer_scale"):
                param.copy_(uniform(param.shape, 0.5, 1.0))
        for linear in (m for m in module.modules() if isinstance(m, torch.nn.Linear)):
            if not linear.weight.any():  # a head initialised to zeros (ViT's) makes every output 0
                bound = 1.0 / np.sqrt(linear.in_features)
                linear.weight.copy_(uniform(linear.weight.shape, -bound, bound))
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average: one pass sets the batch statistics
        if bns:  # batch norms alone in training mode: no auxiliary head (Inception's) or dropout runs
            calib = make_inputs(ctx.model, 32, ctx.resolution, ctx.seed + 1)
            module.eval()
            for bn in bns:
                bn.train()
            module(torch.from_numpy(np.ascontiguousarray(calib.transpose(0, 3, 1, 2))))
    module.eval()


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
        import dataclasses

        import torch._inductor.config as inductor

        if ctx.device == "cpu":
            inductor.freezing = True
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # first_call_s is far shorter with a warm cache
        self.cache_warm = bool(cache) and os.path.isdir(cache) and any(os.scandir(cache))
        super().load(dataclasses.replace(ctx, options=dataclasses.replace(
            ctx.options, channels_last=True, torch_compile=True)))

    def details(self) -> dict[str, Any]:
        import torch._inductor.config as inductor

        return {**super().details(), "compile_backend": "inductor", "freezing": bool(inductor.freezing),
                "inductor_cache_warm": self.cache_warm}


class TorchTrainer(TorchNativeRunner, Trainer):
    """torch-native training: the torchvision twin with the Keras weights ported in, ``train()`` mode (dropout and
    stochastic depth off, batch norm frozen for --bn-mode frozen), cross-entropy, ``backward``, the optimizer's
    step; channels-last and ``torch.compile`` as the options say (the compiled module's backward is compiled too)."""

    name = "torch-native"

    def load(self, ctx: LoadContext) -> None:
        from ..measure.training import ADAM, LEARNING_RATES, MOMENTUM

        torch = self.setup(ctx)
        if self.cuda_graphs:
            raise UsageError("--cuda-graphs is for inference: a training step is not captured here")
        from ..registry.ports import FOLDS_CONV_BIASES

        if ctx.options.bn_mode == "frozen" and ctx.model.name in FOLDS_CONV_BIASES and ctx.artifact:
            raise UsageError(f"--bn-mode frozen: {ctx.model.name}'s Keras convolutions have biases that torchvision's "
                             "have not (the weight port folds them into the batch norm), and frozen, Keras trains "
                             "them: torch would train another model; use --bn-mode train")
        self.model_name, self.bn_mode, self.optimizer_name = ctx.model.name, ctx.options.bn_mode, ctx.options.optimizer
        self.ported = ctx.artifact  # the Keras weights (None: own weights, nothing to port)
        module = self.build(ctx).to(self.dev, self.dtype)
        module.train()
        for m in module.modules():
            if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
                m.p = 0.0  # random masks cannot match across frameworks (as in every trainer)
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and self.bn_mode == "frozen":
                m.eval()
                for p in m.parameters():
                    p.requires_grad_(False)
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.module = module
        self.step_module = torch.compile(module) if self.compiled else module
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        if self.optimizer_name == "sgd":
            self.opt = torch.optim.SGD(self.params.values(), lr=LEARNING_RATES["sgd"], momentum=MOMENTUM)
        else:
            self.opt = torch.optim.Adam(self.params.values(), lr=LEARNING_RATES["adam"],
                                        betas=(ADAM["beta_1"], ADAM["beta_2"]), eps=ADAM["epsilon"])
        self.steps = 0
        self.classes = 1000  # torchvision's heads, and the ported Keras models'

    def prepare_batch(self, inputs: np.ndarray, labels: np.ndarray) -> Any:
        return self.prepare(inputs), self.torch.from_numpy(labels.astype(np.int64)).to(self.dev)

    def _loss(self, prepared: Any, module: Any) -> Any:
        x, y = prepared
        return self.torch.nn.functional.cross_entropy(module(x).float(), y)

    def step(self, prepared: Any) -> Any:
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(prepared, self.step_module)
        loss.backward()
        self.steps += 1
        if self.optimizer_name == "adam":  # epsilon where Keras adds it (inferbench.measure.training.ADAM)
            from ..measure.training import ADAM

            for group in self.opt.param_groups:
                group["eps"] = ADAM["epsilon"] / np.sqrt(1 - ADAM["beta_2"] ** self.steps)
        self.opt.step()
        return loss.detach()

    def loss_value(self, loss: Any) -> float:
        return float(loss.item())

    def set_learning_rate(self, rate: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = rate

    def gradients(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(prepared, self.module)
        loss.backward()
        grads = {n: p.grad.detach().float().cpu().numpy().copy() for n, p in self.params.items()}
        self.opt.zero_grad(set_to_none=True)
        return float(loss.item()), grads

    def weights(self) -> dict[str, np.ndarray]:
        return {n: p.detach().float().cpu().numpy().copy() for n, p in self.params.items()}

    def own(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The Keras-named arrays ported as the weights were (:func:`inferbench.registry.ports.build_torchvision`,
        whose layout changes are linear: they carry gradients and changes as they carry weights), the other Keras
        weights (moving statistics, epsilons) from the ported artifact."""
        from ..registry.ports import build_torchvision

        with np.load(self.ported) as full:
            twin = build_torchvision(self.model_name, {**{k: full[k] for k in full.files}, **arrays})
        return {n: p.detach().numpy().copy() for n, p in twin.named_parameters() if n in self.params}

    def details(self) -> dict[str, Any]:
        return {**super().details(), "inference_mode": False}

    def training_details(self) -> dict[str, Any]:
        return {"layout": "NHWC" if self.channels_last else "NCHW", "batch_norm_kernel": "torch",
                "step": "zero_grad+forward+cross_entropy+backward+optimizer.step", "compiled": self.compiled}


class TorchInductorTrainer(TorchTrainer):
    """torch-inductor's training: the twin channels-last and ``torch.compile``d (inductor; no weight freezing,
    which is for inference)."""

    name = "torch-inductor"

    def load(self, ctx: LoadContext) -> None:
        import dataclasses

        super().load(dataclasses.replace(ctx, options=dataclasses.replace(
            ctx.options, channels_last=True, torch_compile=True)))

    def details(self) -> dict[str, Any]:
        return {**super().details(), "compile_backend": "inductor"}
