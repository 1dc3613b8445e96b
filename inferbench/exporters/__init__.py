"""Exporters: one module per artifact format, run in child processes, cached with a manifest.

Each exporter module has ``export(ctx: ExportContext) -> dict`` writing under ``ctx.folder``
and returning ``{"paths": [top-level entries it wrote], "notes": [...], "input_signature": {...}}``.
:func:`run` is what a child process calls for an :class:`~inferbench.spec.ExportJob`.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models import FILE_FORMATS, register

if TYPE_CHECKING:  # pragma: no cover
    from ..spec import ExportJob


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
        Exporter("reference", "inferbench.exporters.reference", ("keras",), ("tensorflow", "keras"), "tf",
                 "reference", per_batch_size=True),
        # the Keras weights read on whichever Keras backend is installed (pipeline.default_keras_backend)
        Exporter("ported", "inferbench.exporters.ported", ("keras",), ("keras",), "tf", "ported/keras_weights.npz"),
        Exporter("savedmodel", "inferbench.exporters.savedmodel", ("keras",), ("tensorflow",), "tf", "savedmodel"),
        Exporter("onnx", "inferbench.exporters.onnx", ("keras",), ("tensorflow", "tf2onnx", "onnx"), "onnxruntime",
                 "onnx/model.onnx"),
        Exporter("torch", "inferbench.exporters.torch", ("onnx",), ("torch", "onnx2torch", "onnx", "safetensors"),
                 "torch", "torch/model.safetensors"),
        # Engines depend on the GPU model, TensorRT version and batch range, so the TensorRT runner
        # builds them on the target GPU (cold start includes the build) and caches them by all three.
        Exporter("tensorrt", "inferbench.exporters.tensorrt", ("onnx",), ("tensorrt",), "tensorrt",
                 "tensorrt/", built_by_runner=True),
    ]
}


def key_inputs(model: str, resolution: int, weights: str, seed: int) -> dict[str, Any]:
    """Everything that changes a model's artifacts: the cache folder's name hashes it (:func:`cache.artifact_dir`).
    A weights file or a model file counts by its content's hash; every exporter's library version counts."""
    from ..digest import sha256_file, sha256_tree
    from .cache import EXPORT_FORMAT, package_versions

    weights_id = weights
    if weights not in ("random", "imagenet"):
        path = Path(weights)  # a weights file, or a model file (a SavedModel is a folder)
        weights_id = f"file:{sha256_file(path) if path.is_file() else sha256_tree(path)}"
    return {
        "model": model,
        "resolution": resolution,
        "weights": weights_id,
        "seed": seed if weights == "random" else None,
        "versions": package_versions(packages()),
        "export_format": EXPORT_FORMAT,
    }


def packages() -> tuple[str, ...]:
    """Every package some exporter uses: their versions are part of the artifact cache key."""
    return tuple(dict.fromkeys(p for e in EXPORTERS.values() for p in e.packages))


#: What a model file's reference outputs are computed with (exporters ``reference`` and ``imported``):
#: the file's own framework at full precision, with no graph optimisation that could change the numbers. (A Keras
#: source, registered or a .keras file, uses the ``reference`` exporter's own packages.)
SOURCE_PACKAGES = {"savedmodel": ("tensorflow",), "onnx": ("onnxruntime", "onnx")}
_KIND_NAMES = {"keras": "the Keras model", "savedmodel": "a TF SavedModel", "onnx": "an ONNX export",
               "ported": "the Keras weights"}


def source_kind(model: Any) -> str:
    """The artifact kind every other one derives from: the model file's own format, else the Keras model."""
    return model.source.format if model is not None and model.source is not None else "keras"


def requires(kind: str, model: Any = None) -> tuple[str, ...]:
    """The kinds ``kind`` is made from, for ``model`` (a ModelSpec; a model file is imported, not made)."""
    src = source_kind(model)
    if kind == "reference":
        return (src,)
    return () if kind == src else EXPORTERS[kind].requires


def _from_source(kind: str, model: Any) -> bool:
    """Is ``kind`` made by the source's own framework (the reference outputs, an imported model file)?"""
    return kind == "reference" or kind == source_kind(model) != "keras"


def exporter_packages(kind: str, model: Any = None) -> tuple[str, ...]:
    src = source_kind(model)
    return SOURCE_PACKAGES[src] if _from_source(kind, model) and src in SOURCE_PACKAGES else EXPORTERS[kind].packages


def exporter_extra(kind: str, model: Any = None) -> str:
    """The pip extra that installs what making ``kind`` needs."""
    return EXPORTERS[source_kind(model) if _from_source(kind, model) else kind].extra


def unreachable(kind: str, model: Any) -> str | None:
    """Why ``kind`` cannot be made for ``model`` (a ModelSpec), or None: from a model file, inferbench makes
    only what its converters make from that format (everything starts from a Keras model)."""
    src = source_kind(model)
    if kind in (src, "reference", "none") or src == "keras":
        return None
    if not EXPORTERS[kind].requires:  # the Keras model: only from a registered model or a .keras file
        return f"needs {_KIND_NAMES[kind]}, and {model.name} is {FILE_FORMATS[src]}"
    for dep in EXPORTERS[kind].requires:
        why = unreachable(dep, model)
        if why and EXPORTERS[dep].requires:
            return why  # the dependency is the one a converter cannot make: name it
        if why:
            hint = " (convert it yourself: python -m tf2onnx.convert --saved-model DIR --output model.onnx, " \
                "then pass the .onnx)" if (src, kind) == ("savedmodel", "onnx") else ""
            return f"needs {_KIND_NAMES[kind]}, which inferbench makes from a Keras model only; {model.name} is " \
                f"{FILE_FORMATS[src]}{hint}"
    return None


def exporter_module(kind: str, model: Any = None) -> str:
    """The module that makes ``kind`` for ``model`` (a ModelSpec): its exporter's, or for a model file's own format
    the importer's."""
    return "inferbench.exporters.imported" if kind != "reference" and _from_source(kind, model) \
        else EXPORTERS[kind].module


def run(job: ExportJob, emit: Any = lambda phase: None) -> dict[str, Any]:
    """Export ``job``'s artifact, then those of ``job.then`` in order, into the cache folder, each recorded in the
    manifest as soon as it is made (in a child process: TensorFlow is imported once for them all). Returns the
    last entry; a failure raises, and the parent finds what was made in the manifest."""
    entry: dict[str, Any] = {}
    for i, one in enumerate((job, *job.then)):
        if i:
            _release()
        entry = _run_one(one, emit)
    return entry


def _release() -> None:
    """Between two exports of one process: the previous one's Keras models and graphs let go of, so that a big
    model's exports do not pile up copies of its weights."""
    import gc
    import sys

    if "keras" in sys.modules:
        sys.modules["keras"].backend.clear_session(free_memory=True)
    gc.collect()


def _run_one(job: ExportJob, emit: Any) -> dict[str, Any]:
    from . import cache

    if job.model_file is not None:
        register(job.model_file)
    ctx = ExportContext(folder=Path(job.folder), model=job.model, resolution=job.resolution,
                        weights=job.weights, seed=job.seed, batch_sizes=job.batch_sizes)
    ctx.folder.mkdir(parents=True, exist_ok=True)
    emit(f"exporting {job.kind}")
    start = time.perf_counter()
    entry = importlib.import_module(job.module).export(ctx)
    entry["export_s"] = time.perf_counter() - start
    entry["exported_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    entry["versions"] = cache.package_versions(job.packages)
    files: dict[str, str] = {}
    for rel in entry.pop("paths"):
        files.update(cache.hash_tree(ctx.folder / rel, ctx.folder))
    entry["files"] = {str(Path(k)): v for k, v in files.items()}
    cache.record(ctx.folder, job.kind, entry, job.key_inputs)
    return entry


def already_made(cache_dir: Path, model: Any, keys: list[dict[str, Any]]) -> set[str]:
    """The artifact kinds of ``model`` (a ModelSpec) whose exporter's packages are not installed here, but which
    are intact in ``cache_dir`` under every cache key of ``keys`` (exported here before, or brought from another
    machine: :func:`cache.brought`). Only those kinds are hashed: with every exporter installed this reads nothing."""
    import importlib.util

    from . import cache

    kinds = {k for k in EXPORTERS if any(importlib.util.find_spec(p) is None for p in exporter_packages(k, model))}
    for key in keys if kinds else []:
        kinds &= cache.available(cache_dir, key, kinds)
    return kinds


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
    resolution: int
    weights: str
    seed: int
    batch_sizes: tuple[int, ...] = (1,)

    def path(self, kind: str) -> Path:
        return self.folder / EXPORTERS[kind].path


PARITY_INPUTS = 16  # seeded image-like inputs the parity gate compares on
REFERENCE_INPUTS = "reference/inputs.npy"
REFERENCE_LOGITS = "reference/logits.npy"
REFERENCE_SPREAD = "reference/fp32_spread.json"  # the model's own FP32 rounding spread (a Keras source only)


def timed_reference(batch_size: int) -> str:
    """The Keras logits of the timed batch of ``batch_size`` (exporter ``reference``)."""
    return f"reference/timed-bs{batch_size}.npy"
