"""Exporters: one module per artifact format, run in child processes, cached with a manifest.

Each exporter module has ``export(ctx: ExportContext) -> dict`` writing under ``ctx.folder``
and returning ``{"paths": [top-level entries it wrote], "notes": [...], "input_signature": {...}}``.
:func:`run` is what a child process calls for an :class:`~inferbench.spec.ExportJob`.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.digest import sha256_file, sha256_tree
from ..base.size import Size
from ..registry import models  # (its torch_source by the module: the package's own torch_source is a submodule)
from ..registry.models import register
from ..registry.tasks import task as registry_task
from . import cache
from .cache import EXPORT_FORMAT, package_versions

if TYPE_CHECKING:  # pragma: no cover
    from ..spec import ExportJob
from ..registry import artifacts
from ..registry.artifacts import ExportContext, exporter_packages, packages

#: What makes a PyTorch model's artifacts besides every exporter's packages: its library's version (timm's models and
#: tags change with it) and torch's ONNX exporter's.
PYTORCH_SOURCE = ("timm", "onnxscript")


def key_inputs(model: str, resolution: Size, weights: str, seed: int, task: str = "classification") -> dict[str, Any]:
    """Everything that changes a model's artifacts: the cache folder's name hashes it (:func:`cache.artifact_dir`).
    A weights file or a model file counts by its content's hash; every exporter's library version counts; a model
    file's task counts where it is not a classifier's (its outputs' declaration and INT8 model depend on it; a
    classifier's key is what it was before tasks, so its caches stand)."""
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
        **({} if registry_task(task).classifier else {"task": task}),
        **({"pytorch": package_versions(PYTORCH_SOURCE)} if models.torch_source(model) else {}),
    }


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
    if "keras" in sys.modules:
        sys.modules["keras"].backend.clear_session(free_memory=True)
    gc.collect()


def _run_one(job: ExportJob, emit: Any) -> dict[str, Any]:
    if job.model_file is not None:
        register(job.model_file)
    ctx = ExportContext(folder=Path(job.folder), model=job.model, resolution=job.resolution,
                        weights=job.weights, seed=job.seed, batch_sizes=job.batch_sizes,
                        variants=job.variants, eval_set=job.eval_set, calibration=job.calibration)
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
    kinds = {k for k in artifacts.EXPORTERS
             if any(importlib.util.find_spec(p) is None for p in exporter_packages(k, model))}
    for key in keys if kinds else []:
        kinds &= cache.available(cache_dir, key, kinds)
    return kinds


