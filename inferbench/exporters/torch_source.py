"""A model written in PyTorch as the source (``--model torchvision:NAME``, ``--model timm:NAME``): the library's
module built (seeded weights, conditioned as the Keras reference's are; ``--weights imagenet``: the library's
published weights, downloaded by the library), its outputs named, and saved as a ``torch.export`` program with a
dynamic batch dimension — the artifact every other one is made from, and whose FP32 outputs are the reference. A
program (this one, or the user's ``.pt2`` file) is loaded with torch's weights-only guard: nothing in it is unpickled
as code (:mod:`.torch_program`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..base.size import Size, hw
from ..options import MAX_BATCH  # the largest batch a program takes (its batch dimension is dynamic up to it)
from ..registry.artifacts import ExportContext
from ..registry.inputs import make_inputs
from ..registry.models import ModelSpec, get_model
from ..registry.outputs import LOGITS
from ..registry.tasks import task
from . import torch_rcnn
from .reference import predictor, write_parity_reference
from .torch_program import export_dynamic, save


def export(ctx: ExportContext) -> dict[str, Any]:
    import torch

    spec = get_model(ctx.model)
    module = source_module(torch, spec, ctx.weights, ctx.resolution, ctx.seed)
    example = torch.from_numpy(make_inputs(spec, 2, ctx.resolution, ctx.seed + 1))  # two: a 1 would be a constant
    with torch.no_grad():
        save(torch, export_dynamic(torch, module, example), ctx.path("pt2"))
    facts = write_parity_reference(ctx, spec, predictor(spec, ctx))
    return {"paths": ["pt2", "reference"], "reference": facts, "built_by": spec.torch_builder,
            "weights": "seeded, conditioned" if ctx.weights == "random" else ctx.weights,
            "input_signature": {"shape": [None, *spec.input_shape(1, ctx.resolution)[1:]], "dtype": "float32",
                                "layout": spec.layout},
            "notes": [f"{spec.torch_builder} saved by torch.export {torch.__version__}, batch dynamic 1..{MAX_BATCH}"]}


def source_module(torch: Any, spec: ModelSpec, weights: str, resolution: Size, seed: int) -> Any:
    """The module that is exported: the library's, its outputs named (an SSD cut to its heads: :func:`heads`), seeded
    weights conditioned (:func:`condition`) on what it is given (the prepared inputs, not what a detector's own
    transform would make of them)."""
    library = build(torch, spec, weights, seed)
    if torch_rcnn.is_rcnn(library):  # its suppression stays in the graph: fixed-size outputs (torch_rcnn)
        module = torch_rcnn.fixed(torch, library, resolution)
    else:
        module = heads(torch, library, resolution) if hasattr(library, "anchor_generator") else Named(library)
    if weights != "imagenet":
        condition(torch, module, spec, resolution, seed)
        if torch_rcnn.is_rcnn(library):
            torch_rcnn.condition_heads(torch, module, torch.from_numpy(make_inputs(spec, 4, resolution, seed + 1)))
    return module.eval()


def build(torch: Any, spec: ModelSpec, weights: str, seed: int) -> Any:
    """The library's module of ``spec`` in eval mode: the published weights (``imagenet``) or seeded ones (torch's
    own initialisation under ``seed``, not yet conditioned)."""
    library, _, name = str(spec.torch_builder).partition(":")
    published = weights == "imagenet"
    torch.manual_seed(seed)
    if library == "timm":
        import timm

        module = timm.create_model(name, pretrained=published)
    else:
        import torchvision

        # a segmenter's backbone has weights of its own to download: seeded too
        extra = {"weights_backbone": None} if not task(spec.task).classifier and not published else {}
        module = torchvision.models.get_model(name, weights="DEFAULT" if published else None, **extra)
    return module.eval()


def heads(torch: Any, ssd: Any, resolution: Size) -> Any:
    """torchvision's SSD cut before its decoding and suppression (:mod:`inferbench.tasks.ssd` does both after every
    runtime): the backbone and the head on the prepared input, with the anchors (in input pixels, fixed by the size)
    and the input's size as outputs, so that the shared post-processing needs nothing but the outputs."""
    from torchvision.models.detection.image_list import ImageList

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.head = ssd.backbone, ssd.head
            h, w = hw(resolution)
            x = torch.zeros(1, 3, h, w)
            with torch.no_grad():
                features = list(self.backbone(x).values())
                anchors = ssd.anchor_generator(ImageList(x, [(h, w)]), features)[0]
            # (buffers named apart from the outputs: an ONNX graph's initializer and output may not share a name)
            self.register_buffer("default_boxes", anchors.float())
            self.register_buffer("input_hw", torch.tensor([h, w], dtype=torch.float32))

        def forward(self, x: Any) -> Any:
            out = self.head(list(self.backbone(x).values()))
            n = x.shape[0]
            return {"bbox_regression": out["bbox_regression"], "cls_logits": out["cls_logits"],
                    "anchors": self.default_boxes.expand(n, -1, -1), "image_size": self.input_hw.expand(n, -1)}

    return Heads().eval()


class Named:
    """A module whose outputs have names: a mapping's keys (torchvision's segmenters give ``out``), else the one
    array as ``logits``. Made a ``torch.nn.Module`` when called (torch is imported by then)."""

    def __new__(cls, module: Any) -> Any:
        import torch

        class _Named(torch.nn.Module):
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, x: Any) -> Any:
                y = self.inner(x)
                return dict(y) if isinstance(y, Mapping) else {LOGITS: y}

        return _Named(module).eval()


def condition(torch: Any, module: Any, spec: ModelSpec, resolution: Size, seed: int) -> None:
    """Own weights without a port: like the Keras reference (models.build_keras_model), randomise the scales
    and offsets of every batch and layer normalisation, set ConvNeXt's layer scales (1e-6 at init) near 1,
    give a head initialised to zeros (ViT's) random weights, and set the batch-norm running statistics from
    image-like inputs, so that the outputs vary across classes and inputs (torchvision's stock init gives
    near-constant logits)."""
    rng = np.random.default_rng(seed)

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
            calib = make_inputs(spec, 32, resolution, seed + 1)
            if spec.layout == "NHWC":
                calib = np.ascontiguousarray(calib.transpose(0, 3, 1, 2))
            module.eval()
            for bn in bns:
                bn.train()
            through = getattr(module, "normed", module)  # the part that holds the batch norms, where it says
            for i in range(0, len(calib), 8):  # a segmenter at 520 px: 8 images a pass keep memory bounded
                through(torch.from_numpy(calib[i:i + 8]))
    module.eval()
