"""INT8 for torch: the torchvision twin with the Keras weights (the ``ported`` export, as ``torch-inductor`` builds
it), or a PyTorch model's own ``torch.export`` program (``torchvision:``, ``timm:``, a ``.pt2`` file), quantised after
training by PyTorch 2's export quantisation for x86 and inductor (``prepare_pt2e`` / ``convert_pt2e`` from torchao,
PyTorch's quantisation library, with its ``X86InductorQuantizer`` at its default configuration: static, activations
unsigned 8-bit per tensor from a histogram observer, weights signed 8-bit per output channel). The converted program
is exported again (``torch.export``, the batch dimension dynamic) and saved (``torch-int8/<digest>.pt2``, one per
calibration set: the variants are the sets' digests); ``torch-inductor`` loads it and compiles it with weights frozen,
where inductor lowers the quantise / dequantise pairs into oneDNN's INT8 kernels (the PT2E x86 inductor tutorial's
flow).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..base.size import Size
from ..registry import ports
from ..registry.artifacts import ExportContext, int8_export, source_kind
from ..registry.images import calibration_inputs, rebatched
from ..registry.models import get_model
from ..registry.programs import program_shapes
from .imported import UNBOUND, bound_module, user_inputs
from .torch_program import export_dynamic, load_exported, load_program, save

#: How the INT8 model is made, as records and the manifest name it.
METHOD = {"tool": "torchao.quantization.pt2e (prepare_pt2e, convert_pt2e)",
          "quantizer": "X86InductorQuantizer, default configuration (static)",
          "activations": "uint8 per tensor", "weights": "int8 per channel, symmetric",
          "calibration": "HistogramObserver (activations), PerChannelMinMaxObserver (weights)",
          "runs_as": "torch.compile (inductor, weights frozen): oneDNN INT8 kernels"}


def export(ctx: ExportContext) -> dict[str, Any]:
    spec = get_model(ctx.model)

    def make(out: Path, cal: Any) -> None:
        chunks = calibration_inputs(spec, cal, ctx.resolution, ctx.seed)
        if source_kind(spec) == "pt2":  # a PyTorch model: its own program, its inputs as it takes them
            quantize_program(ctx.path("pt2"), out, chunks, spec.fixed_batch, ctx.resolution)
            return
        with np.load(ctx.path("ported")) as weights:
            quantize(spec.name, dict(weights), out, chunks)

    return int8_export(ctx, "torch-int8", make, METHOD)


def quantize(model: str, weights: dict[str, np.ndarray], out: Path, chunks: Any) -> None:
    """The twin of ``model`` with ``weights`` quantised (:data:`METHOD`) on ``chunks`` (NHWC batches of model
    inputs, read as they are needed), saved whole or not at all into ``out``."""
    import torch

    twin = _unshared_relus(torch, ports.build_torchvision(model, weights).eval())
    batches = (torch.from_numpy(np.ascontiguousarray(c.transpose(0, 3, 1, 2))) for c in chunks)
    first = next(batches)
    example = first.repeat(2, 1, 1, 1)[:2]  # two images: torch.export takes a batch of 1 for a constant 1
    with torch.no_grad():
        _quantized(torch, export_dynamic(torch, twin, example).module(), first, batches,
                   lambda converted: save(torch, export_dynamic(torch, converted, example), out))


def quantize_program(program: Path, out: Path, chunks: Any, fixed_batch: int | None, resolution: Size) -> None:
    """A PyTorch model's ``torch.export`` program quantised (:data:`METHOD`) on ``chunks`` (batches as the program
    takes them), exported again with its batch as dynamic as the program's own (a user's file may bound it), or the
    one batch a fixed program takes. A program whose side inputs were bound is quantised as the file gave it
    (:data:`~inferbench.exporters.imported.UNBOUND`: the patterns' origins intact), called with them bound, and its
    INT8 bound as its FP32 is."""
    import torch

    if fixed_batch:  # a program of one batch takes no other
        chunks = rebatched(chunks, fixed_batch)
    batches = (torch.from_numpy(np.ascontiguousarray(c)) for c in chunks)
    first = next(batches)
    example = first if fixed_batch else first.repeat(2, *[1] * (first.dim() - 1))[:2]
    shapes = None if fixed_batch else ({0: torch.export.Dim.AUTO},)  # the batch as dynamic as the program's own
    unbound = program.with_name(UNBOUND)
    sides = program_shapes(unbound, str(unbound))[2] if unbound.exists() else []
    exported = load_exported(unbound if sides else program)
    order = user_inputs(exported)

    def wrap(module: Any) -> Any:
        return bound_module(torch, module, order, sides, resolution) if sides else module

    with torch.no_grad():
        _quantized(torch, _unshared_relu_calls(torch, exported.module()), first, batches,
                   lambda converted: save(torch, torch.export.export(wrap(converted), (example,),
                                                                     dynamic_shapes=shapes), out), wrap)


def _quantized(torch: Any, graph: Any, first: Any, batches: Any, saved: Any, wrap: Any = lambda module: module,
               ) -> None:
    """``graph`` (an exported module) prepared by the x86 inductor quantizer, calibrated on ``first`` and every batch
    after it (the observers see each; ``wrap``: how the graph is called, its side inputs bound), converted, and handed
    to ``saved``."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(graph, quantizer)
    calibrate = wrap(prepared)
    calibrate(first)
    for batch in batches:
        calibrate(batch)
    converted = convert_pt2e(prepared)
    if not pairs(converted)[0]:
        # an "INT8" model that is its FP32 one would be timed and said as INT8
        raise RuntimeError("PT2E's x86 inductor quantizer quantised none of the program's operators: no INT8 model "
                           "to time")
    saved(converted)


def pairs(graph: Any) -> tuple[int, int]:
    """The quantise and the dequantise operators a converted program calls."""
    ops = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    return sum("quantize_per" in o and "dequantize" not in o for o in ops), sum("dequantize_per" in o for o in ops)


def _unshared_relu_calls(torch: Any, graph: Any) -> Any:
    """An exported graph whose calls of one ``nn.ReLU`` module (a ResNet block's, two or three) are patterns of their
    own: the quantizer groups nodes by the module they came from (``source_fn_stack``) and refuses one pattern with
    several outputs, as :func:`_unshared_relus` says of the module; each call named apart. The same numbers."""
    relus = (torch.nn.ReLU, torch.nn.ReLU6)
    names = {f"{t.__module__}.{t.__qualname__}": t for t in relus}
    for i, node in enumerate(graph.graph.nodes):
        stack = node.meta.get("source_fn_stack")
        innermost = list((node.meta.get("nn_module_stack") or {}).values())[-1:]
        kind = stack[-1][1] if stack else names.get(innermost[0][1], innermost[0][1]) if innermost else None
        if node.op == "call_function" and kind in relus:  # by its call, not by the module it shares
            node.meta["source_fn_stack"] = [*(stack or [])[:-1], (f"relu_call{i}", kind)]
    return graph


def _unshared_relus(torch: Any, module: Any) -> Any:
    """``module`` with each ``nn.ReLU`` computed by ``F.relu``: a ResNet block calls one ReLU module two or three
    times, which the quantizer sees as one pattern with several outputs and refuses ("Input partition has more than
    one output node"); a function's calls are patterns of their own. The same numbers."""

    class Relu(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.nn.functional.relu(x)

    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.ReLU:
                setattr(parent, name, Relu())
    return module


def load(path: Path) -> Any:
    """The saved INT8 program as a module that takes ``eval()`` (torchao imported first: it registers the
    quantise / dequantise ops the program calls, and inductor's passes that fuse them into INT8 kernels), loaded
    weights only (:func:`~inferbench.exporters.torch_program.load_program`)."""
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer  # noqa: F401
    # (importing the quantizer registers inductor's INT8 fusion passes: without them inductor computes every
    # quantised convolution in FP32 between quantise / dequantise pairs, 4-5x slower: 60-75 ms against 13-15 ms for
    # ResNet-50 at 224 px here)

    module = load_program(path)
    allow_exported_model_train_eval(module)
    return module
