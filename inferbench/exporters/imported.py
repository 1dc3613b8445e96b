"""A model file in a format other than Keras (``--model model.onnx``, a SavedModel folder, a ``.pt2`` program),
imported as the artifact of its kind: copied into the cache folder as it is (its side inputs bound), plus the
reference outputs of the 16 parity inputs from its own framework. Every other artifact is made from it where a
converter can."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..base.size import Size, hw
from ..registry.artifacts import ExportContext
from ..registry.models import get_model
from ..registry.programs import program_shapes
from ..registry.sideinputs import ONNX_NAME, SideInput, bind, looks_like_image, no_one_image, side_input, split
from ..runners.tf import load_saved_model
from .keras import savedmodel_stats
from .onnx_stats import counted
from .reference import predictor, write_parity_reference
from .torch_program import load_exported, save


def export(ctx: ExportContext) -> dict[str, Any]:
    spec = get_model(ctx.model)
    assert spec.source is not None, "only a model file is imported"
    source, target = Path(spec.source.path), ctx.path(spec.source.format)
    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copyfile(source, target)
    sides = bound_sides(target, spec, ctx.resolution)
    facts = write_parity_reference(ctx, spec, predictor(spec, ctx))
    return {
        "paths": [target.relative_to(ctx.folder).parts[0], "reference"],
        "input_signature": {"shape": [spec.fixed_batch, *spec.input_shape(1, ctx.resolution)[1:]],
                            "dtype": "float32", "layout": spec.layout},
        "imported_from": spec.source.path,
        **({"model_stats": counted(target, ctx.resolution)} if target.suffix == ".onnx" else
           {"model_stats": savedmodel_stats(target, spec.input_shape(1, ctx.resolution), ctx.resolution)}
           if spec.source.format == "savedmodel" else {}),
        "reference": facts,
        "side_inputs": [s.phrase() for s in sides],  # as bound (a SavedModel's are read here, not when the file is)
        "notes": [f"side input {s.phrase()}: {s.value(*hw(ctx.resolution))}" for s in sides],
    }


def bound_sides(target: Path, spec: Any, resolution: Size) -> list[SideInput]:
    """A model file's side inputs bound into the copy's graph (registry/sideinputs.py): an ONNX file's as constants in
    its graph, a .pt2 program's by exporting it again around them, a SavedModel's by saving it again inside a function
    of its image alone; the side inputs so bound."""
    if spec.source.format == "savedmodel":  # its signature is read here, with TensorFlow
        sides = bind_savedmodel(target, *hw(resolution))
    elif not spec.source.side_inputs:
        return []
    elif target.suffix == ".pt2":
        _, _, sides = program_shapes(target, str(target))
        bind_program(target, sides, spec, resolution)
    else:
        import onnx

        model = onnx.load(str(target), load_external_data=False)
        inits = {i.name for i in model.graph.initializer}
        _, sides = split([i for i in model.graph.input if i.name not in inits], target)
        bind(target, tuple(sides), *hw(resolution))
    return list(sides)


def bind_savedmodel(path: Path, height: int, width: int) -> list[SideInput]:
    """Rewrite the SavedModel folder at ``path`` as one of its image alone where its ``serving_default`` signature
    takes side inputs: a ``serve`` function (and signature) that calls it with each side input's constant (broadcast
    to the image's batch), saved over the folder; its side inputs, or none."""
    import tensorflow as tf

    loaded = load_saved_model(path)
    signature = loaded.signatures.get("serving_default")
    specs = dict(signature.structured_input_signature[1]) if signature is not None else {}
    if len(specs) < 2:
        return []
    images = [n for n, s in specs.items() if s.shape.rank is not None and looks_like_image(s.shape.as_list(),
                                                                                          s.dtype.name)]
    if len(images) != 1:
        raise no_one_image(path, list(specs), len(images))
    sides = [side_input(n, s.shape.as_list(), ONNX_NAME.get(s.dtype.name, s.dtype.name.upper()), path)
             for n, s in specs.items() if n != images[0]]
    image = specs[images[0]]

    class Bound(tf.__internal__.tracking.AutoTrackable):  # as Keras' export: its variables a list of its own
        def __init__(self) -> None:
            super().__init__()
            self.loaded = loaded  # saved with it
            self.variables = list(getattr(loaded, "variables", ()))  # what the model's size is counted from

        @tf.function(input_signature=[tf.TensorSpec(image.shape, image.dtype, name=images[0])])
        def serve(self, x: Any) -> Any:
            fed = {s.name: tf.constant(np.array(s.value(height, width), dtype=s.dtype)) for s in sides}
            fed = {s.name: tf.broadcast_to(fed[s.name], tf.stack([tf.shape(x)[0], 2])) if s.batched else fed[s.name]
                   for s in sides}
            return signature(**{images[0]: x}, **fed)

    bound, staged = Bound(), path.with_name(path.name + ".bound")
    shutil.rmtree(staged, ignore_errors=True)
    tf.saved_model.save(bound, str(staged), signatures={"serving_default": bound.serve})
    shutil.rmtree(path)
    staged.replace(path)
    return sides


#: Beside a ``.pt2`` program whose side inputs were bound: the program as the file gave it. PT2E's quantizer finds
#: its patterns by where each node came from (``source_fn_stack``), which a program exported again around its side
#: inputs has lost (it quantised none of them): INT8 is made from this one, then bound as the FP32 program is.
UNBOUND = "unbound.pt2"


def bind_program(path: Path, sides: list[SideInput], spec: Any, resolution: Size) -> None:
    """Rewrite the .pt2 program at ``path`` as one of its image alone (:func:`bound_module`), exported again
    (torch.export) with the batch as dynamic as the program's own (or the one a fixed program takes), read weights
    only; the program as given kept beside it (:data:`UNBOUND`)."""
    import torch

    shutil.copyfile(path, path.with_name(UNBOUND))
    program = load_exported(path)
    bound = bound_module(torch, program.module(), user_inputs(program), sides, resolution)
    example = torch.zeros(spec.input_shape(spec.fixed_batch or 2, resolution))
    shapes = None if spec.fixed_batch else ({0: torch.export.Dim.AUTO},)
    with torch.no_grad():
        save(torch, torch.export.export(bound, (example,), dynamic_shapes=shapes), path)


def user_inputs(program: Any) -> list[str]:
    """The names of an exported program's own inputs, in its order."""
    return [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]


def bound_module(torch: Any, inner: Any, order: list[str], sides: list[SideInput], resolution: Size) -> Any:
    """``inner`` (a program's module, taking the inputs ``order`` names) as a module of its image alone: each side
    input its constant (expanded to the image's batch where it is batched), a buffer of the module."""
    values = {s.name: torch.tensor([s.value(*hw(resolution))], dtype=getattr(torch, s.dtype)) for s in sides}
    batched = {s.name: s.batched for s in sides}

    class Bound(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            for i, value in enumerate(values.values()):
                self.register_buffer(f"side_{i}", value)  # a constant of the module: exported with it

        def forward(self, x: Any) -> Any:
            given = {name: getattr(self, f"side_{i}") for i, name in enumerate(values)}
            return self.inner(*[x if n not in given else given[n].expand(x.shape[0], -1) if batched[n]
                                else given[n][0] for n in order])

    bound = Bound()
    bound.training = False  # its own flag only: an exported program's module takes no train() or eval()
    return bound
