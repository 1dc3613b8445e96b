"""The artifact kinds: what each export makes, from what, with which packages, and where runners find it. A
registry (strings name the exporter modules, nothing is imported); the exporters themselves run in child processes
(:mod:`inferbench.exporters`)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.size import Size
from .images import Calibration, EvalSet
from .modelfiles import FILE_FORMATS

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass(frozen=True)
class Exporter:
    kind: str
    module: str
    requires: tuple[str, ...]  # artifacts that must exist first
    packages: tuple[str, ...]
    extra: str
    path: str  # artifact path inside the cache folder, as runners load it
    built_by_runner: bool = False  # GPU-specific: built (and cached) in the runner's own process
    per_batch_size: bool = False  # writes one file per timed batch size (re-run when one is missing)


EXPORTERS: dict[str, Exporter] = {
    e.kind: e
    for e in [
        Exporter("keras", "inferbench.exporters.keras", (), ("tensorflow", "keras"), "tf", "keras/model.keras"),
        # a model written in PyTorch (torchvision:NAME, timm:NAME): built, seeded and saved by torch.export
        Exporter("pt2", "inferbench.exporters.torch_source", (), ("torch", "torchvision"), "torch", "pt2/model.pt2"),
        Exporter("reference", "inferbench.exporters.reference", ("keras",), ("tensorflow", "keras"), "tf",
                 "reference", per_batch_size=True),
        # the Keras weights read on whichever Keras backend is installed (keras_backend_here)
        Exporter("ported", "inferbench.exporters.ported", ("keras",), ("keras",), "tf", "ported/keras_weights.npz"),
        # reduced-precision cells' agreement with FP32 over many seeded inputs, once per count (--agreement-inputs)
        Exporter("agreement", "inferbench.exporters.agreement", ("keras",), ("tensorflow", "keras"), "tf",
                 "agreement"),
        # every cell's accuracy on the user's labelled images (--eval-dir): the source's outputs on them, once per set
        Exporter("evaluation", "inferbench.exporters.evaluation", ("keras",), ("tensorflow", "keras"), "tf",
                 "evaluation"),
        # the training scenario's reference: k steps of the Keras model from the same weights on the same batches
        Exporter("train-reference", "inferbench.exporters.train_reference", ("keras",), ("tensorflow", "keras"), "tf",
                 "train-reference", per_batch_size=True),
        Exporter("savedmodel", "inferbench.exporters.savedmodel", ("keras",), ("tensorflow",), "tf", "savedmodel"),
        Exporter("onnx", "inferbench.exporters.onnx", ("keras",), ("tensorflow", "tf2onnx", "onnx"), "onnxruntime",
                 "onnx/model.onnx"),
        Exporter("torch", "inferbench.exporters.torch", ("onnx",), ("torch", "onnx2torch", "onnx", "safetensors"),
                 "torch", "torch/model.safetensors"),
        # INT8: the ONNX export quantised by ONNX Runtime (static, QDQ), the SavedModel by NNCF for OpenVINO (a model
        # file's or a PyTorch program's: CONVERTERS); once per calibration set (its digest: the variants)
        Exporter("onnx-int8", "inferbench.exporters.quantize_onnx", ("onnx",), ("onnxruntime", "onnx"),
                 "onnxruntime", "onnx-int8"),
        Exporter("openvino-int8", "inferbench.exporters.quantize_openvino", ("savedmodel",), ("openvino", "nncf"),
                 "openvino", "openvino-int8"),
        # torch-inductor's: the torchvision twin with the Keras weights (a PyTorch program itself: CONVERTERS),
        # quantised by PT2E for x86 / inductor
        Exporter("torch-int8", "inferbench.exporters.quantize_torch", ("ported",), ("torch", "torchvision", "torchao"),
                 "torch", "torch-int8"),
        # TensorRT's explicit quantisation takes symmetric pairs only (signed activations, zero points 0)
        Exporter("onnx-int8-sym", "inferbench.exporters.quantize_onnx_sym", ("onnx",), ("onnxruntime", "onnx"),
                 "onnxruntime", "onnx-int8-sym"),
        # TensorRT 11's FP16: strongly typed networks only, so an FP16 engine starts from an FP16 ONNX model
        Exporter("onnx-fp16", "inferbench.exporters.onnx_fp16", ("onnx",), ("onnx", "onnxconverter_common"),
                 "tensorrt", "onnx-fp16/model.onnx"),
        # Engines depend on the GPU model, TensorRT version and batch range, so the TensorRT runner
        # builds them on the target GPU (cold start includes the build) and caches them by all three.
        Exporter("tensorrt", "inferbench.exporters.tensorrt", ("onnx",), ("tensorrt",), "tensorrt",
                 "tensorrt/", built_by_runner=True),
    ]
}


#: The kinds computed by the source's own framework from the source (the Keras model or the model file): outputs to
#: compare with.
FROM_SOURCE = ("reference", "agreement", "evaluation")


def packages() -> tuple[str, ...]:
    """Every package some exporter uses: their versions are part of the artifact cache key."""
    return tuple(dict.fromkeys(p for e in EXPORTERS.values() for p in e.packages))


#: What a model file's reference outputs are computed with (exporters ``reference`` and ``imported``):
#: the file's own framework at full precision, with no graph optimisation that could change the numbers. (A Keras
#: source, registered or a .keras file, uses the ``reference`` exporter's own packages.)
SOURCE_PACKAGES = {"savedmodel": ("tensorflow",), "onnx": ("onnxruntime", "onnx"), "pt2": ("torch",)}


@dataclass(frozen=True)
class Converter:
    """How a kind is made from a source other than the Keras model: the module, and the packages it needs."""

    module: str
    packages: tuple[str, ...]
    extra: str


#: (source kind, kind) -> its converter: the ONNX export of a PyTorch program is torch's own (dynamo); OpenVINO's INT8
#: quantises what its FP32 runner converts (a model file as it is, a PyTorch program), torch's a PyTorch program itself.
CONVERTERS = {("pt2", "onnx"): Converter("inferbench.exporters.torch_onnx", ("torch", "onnx", "onnxscript"), "torch"),
              **{(src, "openvino-int8"): Converter("inferbench.exporters.quantize_openvino",
                                                   ("openvino", "nncf", *more), "openvino")
                 for src, more in (("onnx", ()), ("savedmodel", ()), ("pt2", ("torch",)))},
              ("pt2", "torch-int8"): Converter("inferbench.exporters.quantize_torch", ("torch", "torchao"), "torch")}


_KIND_NAMES = {"keras": "the Keras model", "savedmodel": "a TF SavedModel", "onnx": "an ONNX export",
               "ported": "the Keras weights", "pt2": "a PyTorch program"}


#: How each kind is made from what it requires, in words: a record's ``runner.route`` chains them back to the source.
MADE_BY = {"savedmodel": "tf.saved_model.save", "onnx": "tf2onnx", "torch": "onnx2torch",
           "onnx-int8": "ONNX Runtime's static QDQ quantisation", "openvino-int8": "NNCF's post-training quantisation",
           "torch-int8": "PT2E's x86 inductor quantisation",
           "onnx-int8-sym": "ONNX Runtime's symmetric QDQ quantisation",
           "onnx-fp16": "onnxconverter-common's FP16 cast (inputs, outputs and range-sensitive nodes in FP32)",
           "tensorrt": "TensorRT's ONNX parser", "ported": "torchvision's twin with the weights ported",
           ("pt2", "onnx"): "torch.onnx.export (dynamo)"}


_FILE_SAID = {"keras": ".keras file", "savedmodel": "SavedModel", "onnx": "ONNX file", "pt2": ".pt2 program"}


def route(kind: str, model: Any) -> str:
    """How the artifact of ``kind`` a runner loads was made for ``model``, back to the source: "onnx2torch from tf2onnx
    from the Keras model"; the route into a runtime is part of the answer (OpenVINO reads a PyTorch program directly
    or through its ONNX export)."""
    src = source_kind(model)
    if kind == "none":
        return "its own weights, built by the runner"
    if kind == src:
        if model is not None and model.source is not None:
            sides = " (its side inputs bound into the graph)" if getattr(model.source, "side_inputs", ()) else ""
            return f"the user's {_FILE_SAID[src]} as it is{sides}"
        return "the PyTorch program (torch.export)" if src == "pt2" else "the Keras model"
    made = MADE_BY.get((src, kind)) or MADE_BY.get(kind, kind)  # type: ignore[call-overload]
    return f"{made} from {route(requires(kind, model)[0], model)}" if requires(kind, model) else made


def source_kind(model: Any) -> str:
    """The artifact kind every other one derives from: the model file's own format, a PyTorch model's program, else
    the Keras model."""
    if model is not None and model.source is not None:
        return str(model.source.format)
    return "pt2" if model is not None and getattr(model, "torch_builder", None) else "keras"


def requires(kind: str, model: Any = None) -> tuple[str, ...]:
    """The kinds ``kind`` is made from, for ``model`` (a ModelSpec; a model file is imported, not made)."""
    src = source_kind(model)
    if kind in FROM_SOURCE or (src, kind) in CONVERTERS:
        return (src,)
    return () if kind == src else EXPORTERS[kind].requires


def _from_source(kind: str, model: Any) -> bool:
    """Is ``kind`` made by the source's own framework (the reference outputs, an imported model file)?"""
    return kind in FROM_SOURCE or kind == source_kind(model) != "keras"


def exporter_packages(kind: str, model: Any = None) -> tuple[str, ...]:
    src = source_kind(model)
    if kind in FROM_SOURCE and src == "keras" and (backend := keras_backend_here()) != "tensorflow":
        # without TensorFlow, Keras on the backend installed computes it, once its outputs reproduce TensorFlow's
        # 16-input reference (inferbench.exporters.reference.export)
        return ("keras", backend)
    if (src, kind) in CONVERTERS:
        return CONVERTERS[src, kind].packages
    if kind == src == "pt2" and model is not None and model.source is None:  # built here: by its library
        return ("torch", *model.packages)
    return SOURCE_PACKAGES[src] if _from_source(kind, model) and src in SOURCE_PACKAGES else EXPORTERS[kind].packages


def keras_backend_here() -> str:
    """The backend Keras runs on where no runner option says otherwise (exports, the reference): TensorFlow,
    or where it is not installed (a GPU machine with artifacts brought from elsewhere) JAX, then torch."""
    return next((b for b in ("tensorflow", "jax", "torch") if importlib.util.find_spec(b) is not None), "tensorflow")


def exporter_extra(kind: str, model: Any = None) -> str:
    """The pip extra that installs what making ``kind`` needs."""
    if (source_kind(model), kind) in CONVERTERS:
        return CONVERTERS[source_kind(model), kind].extra
    return EXPORTERS[source_kind(model) if _from_source(kind, model) else kind].extra


def unreachable(kind: str, model: Any) -> str | None:
    """Why ``kind`` cannot be made for ``model`` (a ModelSpec), or None: from a model file, inferbench makes
    only what its converters make from that format (everything starts from a Keras model)."""
    src = source_kind(model)
    if kind in (src, *FROM_SOURCE, "none") or src == "keras" or (src, kind) in CONVERTERS:
        return None
    if not EXPORTERS[kind].requires:  # the Keras model: only from a registered model or a .keras file
        return f"needs {_KIND_NAMES[kind]}, and {model.name} is {_source_said(model)}"
    for dep in requires(kind, model):
        why = unreachable(dep, model)
        if why and EXPORTERS[dep].requires:
            return why  # the dependency is the one a converter cannot make: name it
        if why:
            hint = " (convert it yourself: python -m tf2onnx.convert --saved-model DIR --output model.onnx, " \
                "then pass the .onnx)" if (src, kind) == ("savedmodel", "onnx") else ""
            return f"needs {_KIND_NAMES[kind]}, which inferbench makes from a Keras model only; {model.name} is " \
                f"{_source_said(model)}{hint}"
    return None


def _source_said(model: Any) -> str:
    """What the model's source is, for a reason: a model file's format, or a model written in PyTorch."""
    return FILE_FORMATS[model.source.format] if model.source is not None else f"a PyTorch model ({model.torch_builder})"


def exporter_module(kind: str, model: Any = None) -> str:
    """The module that makes ``kind`` for ``model`` (a ModelSpec): its exporter's, or for a model file's own format
    the importer's."""
    if (source_kind(model), kind) in CONVERTERS:
        return CONVERTERS[source_kind(model), kind].module
    imported = kind not in FROM_SOURCE and _from_source(kind, model) and model.source is not None
    return "inferbench.exporters.imported" if imported else EXPORTERS[kind].module


def shares_process(kind: str, model: Any = None) -> bool:
    """May ``kind`` be exported in one process with the model's other TensorFlow-side exports? (The torch and
    TensorRT conversions, and a model file's ONNX Runtime reference, get a process of their own.)"""
    return not set(exporter_packages(kind, model)) & {"torch", "onnx2torch", "tensorrt", "onnxruntime", "openvino"}


def export_order(kinds: list[str], model: Any = None) -> list[str]:
    """The requested artifact kinds and everything they need, dependencies first (for ``model``, a ModelSpec:
    a model file's kinds start from the file)."""
    order: list[str] = []

    def visit(kind: str) -> None:
        if kind in order or kind == "none":
            return
        for dep in requires(kind, model):
            visit(dep)
        if not EXPORTERS[kind].built_by_runner:
            order.append(kind)

    visit("reference")  # the reference outputs come from the source: the Keras model or the model file
    for kind in kinds:
        visit(kind)
    return order


@dataclass(frozen=True)
class ExportContext:
    folder: Path  # the artifact cache folder of this (model, resolution, weights, versions)
    model: str
    resolution: Size
    weights: str
    seed: int
    batch_sizes: tuple[int, ...] = (1,)
    variants: tuple[str, ...] = ()  # the training set-ups of a train-reference export (train_variant), counts, digests
    eval_set: EvalSet | None = None  # the user's labelled images (--eval-dir): the evaluation export's
    calibration: Calibration | None = None  # what an INT8 export is calibrated on

    def path(self, kind: str) -> Path:
        return self.folder / EXPORTERS[kind].path

    def sets(self, current: str, path_of: Any) -> list[str]:
        """The sets (variants) an export made once per set holds after this one: ``current`` and those made before
        whose file (``path_of(digest)``, relative) is still there, in sorted order."""
        return sorted({d for d in self.variants if (self.folder / path_of(d)).exists()} | {current})


PARITY_INPUTS = 16  # seeded image-like inputs the parity gate compares on


REFERENCE_INPUTS = "reference/inputs.npy"


REFERENCE_LOGITS = "reference/logits.npy"


REFERENCE_OUTPUTS = "reference/outputs.json"  # the outputs declared: names, shapes an image, kinds
REFERENCE_SPREAD = "reference/fp32_spread.json"  # the model's own FP32 rounding spread (a Keras source only)
REFERENCE_SENSITIVITY = "reference/precision_sensitivity.json"  # its own FP16/BF16 error (a Keras source only)


def timed_reference(batch_size: int) -> str:
    """The Keras logits of the timed batch of ``batch_size`` (exporter ``reference``)."""
    return f"reference/timed-bs{batch_size}.npy"


def timed_sensitivity(batch_size: int) -> str:
    """The model's own FP16/BF16 error on the timed batch of ``batch_size`` (exporter ``reference``, a Keras source):
    the largest of B images' errors grows with B, so the timed batch is judged by the larger of its own images' and
    the 16 reference images' (:func:`inferbench.measure.parity.larger_own_error`)."""
    return f"reference/timed-bs{batch_size}-own-error.json"


def agreement_reference(count: int) -> str:
    """The source's FP32 outputs on the ``count`` agreement inputs (exporter ``agreement``)."""
    return f"agreement/n{count}.npy"


def agreement_results(count: int) -> str:
    """The source's FP32 results after its task's post-processing (a detector's boxes, a segmenter's masks) on the
    ``count`` agreement inputs (exporter ``agreement``; :mod:`inferbench.tasks.stored`)."""
    return f"agreement/n{count}-results.npz"


def evaluation_reference(digest: str) -> str:
    """The source's FP32 outputs on the labelled images of ``digest`` (exporter ``evaluation``)."""
    return f"evaluation/{digest}.npy"


#: The file an INT8 export writes for a calibration set, per kind (the ``{digest}`` filled in): what the runner loads.
INT8_FILES = {"onnx-int8": "onnx-int8/{digest}.onnx", "openvino-int8": "openvino-int8/{digest}.xml",
              "onnx-int8-sym": "onnx-int8-sym/{digest}.onnx", "torch-int8": "torch-int8/{digest}.pt2"}


def int8_artifact(kind: str, digest: str) -> str:
    """The INT8 model of ``kind`` calibrated on the set ``digest`` (exporters ``onnx-int8``, ``openvino-int8``,
    ``torch-int8``, ``onnx-int8-sym``)."""
    return INT8_FILES[kind].format(digest=digest)


def int8_export(ctx: ExportContext, kind: str, make: Any, method: dict[str, Any],
                files: Any = lambda path: [path]) -> dict[str, Any]:
    """What every INT8 exporter does around its quantiser: the file of ``kind`` for the context's calibration set,
    made by ``make(out, calibration)`` unless it is there, and the manifest entry for every set still held
    (``files(path)``: the files one model is, e.g. an IR's graph and weights)."""
    cal = ctx.calibration
    if cal is None:
        raise RuntimeError("an INT8 export needs its calibration set")
    out = ctx.folder / int8_artifact(kind, cal.digest)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        make(out, cal)
    sets = ctx.sets(cal.digest, lambda d: int8_artifact(kind, d))
    return {"paths": [f for d in sets for f in files(int8_artifact(kind, d))], "variants": sets, "method": method,
            "calibration_images": cal.images}


def agreement_own(count: int) -> str:
    """The Keras model's own top-1 / top-5 agreement with FP32 on them, in each reduced precision."""
    return f"agreement/n{count}-own.json"


def train_variant(optimizer: str, bn_mode: str) -> str:
    """The name of a training set-up whose reference steps are exported (optimizer and batch-norm mode)."""
    return f"{optimizer}-bn{bn_mode}"


def train_reference(batch_size: int, variant: str) -> str:
    """The reference training steps of ``batch_size`` in set-up ``variant`` (exporter ``train-reference``)."""
    return f"train-reference/bs{batch_size}-{variant}.npz"
