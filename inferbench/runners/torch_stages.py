"""A torch module's error stage by stage, to say where a reduced-precision or INT8 module diverged: the torchvision
twin's stages (:func:`stages`) against a copy in FP64 (:func:`stage_errors`), and a PT2E program's stages against
the FP32 twin it was quantised from (:func:`program_stage_errors`)."""

from __future__ import annotations

from typing import Any

from ..measure.parity import relative_l2

#: What an INT8 cell's stages are read against (torch-inductor's PT2E program).
INT8_AGAINST = "the FP32 torchvision twin it was quantised from (the Keras weights), stage by stage"


def program_stage_errors(torch: Any, program: Any, twin: Any, x: Any) -> dict[str, Any] | None:
    """Each stage of ``twin`` (:func:`stages`) against the same stage of ``program`` (a graph module exported from it,
    quantised by PT2E): a stage's output in the program is that of its last computing node (a floating-point tensor)
    whose module stack names the stage by its path in the twin (``net.layer1`` in the Keras twin's wrapper;
    ``nn_module_stack``, which torch.export keeps), read by running the program in an interpreter; relative L2 in
    network order (inf where not finite). A stage the program has no node of is left out; None when none is found."""
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

    errors = [relative_l2(a.numpy(), b.numpy()) for a, b in zip(seen["low"], seen["exact"])]
    return {"names": [name for (name, _), _ in pairs], "errors": errors}
