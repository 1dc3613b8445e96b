"""Exporters: one module per artifact format, run in child processes, cached with a manifest.

Each exporter module has ``export(ctx: ExportContext) -> dict`` writing under ``ctx.folder``
and returning ``{"paths": [top-level entries it wrote], "notes": [...], "input_signature": {...}}``.
:func:`run` is what a child process calls for an :class:`~inferbench.config.ExportJob`.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..config import ExportJob


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
        Exporter("ported", "inferbench.exporters.ported", ("keras",), ("tensorflow", "keras"), "tf",
                 "ported/keras_weights.npz"),
        Exporter("savedmodel", "inferbench.exporters.savedmodel", ("keras",), ("tensorflow",), "tf", "savedmodel"),
        Exporter("onnx", "inferbench.exporters.onnx", ("keras",), ("tensorflow", "tf2onnx", "onnx"), "onnxruntime",
                 "onnx/model.onnx"),
        Exporter("torch", "inferbench.exporters.torch", ("onnx",), ("torch", "onnx2torch", "onnx"), "torch",
                 "torch/model.pt"),
        # Engines depend on the GPU model, TensorRT version and batch range, so the TensorRT runner
        # builds them on the target GPU (cold start includes the build) and caches them by all three.
        Exporter("tensorrt", "inferbench.exporters.tensorrt", ("onnx",), ("tensorrt",), "tensorrt",
                 "tensorrt/", built_by_runner=True),
    ]
}


def packages() -> tuple[str, ...]:
    """Every package some exporter uses: their versions are part of the artifact cache key."""
    return tuple(dict.fromkeys(p for e in EXPORTERS.values() for p in e.packages))


def job_for(kind: str, folder: Path, model: str, resolution: int, weights: str, seed: int,
            batch_sizes: tuple[int, ...], key_inputs: dict[str, Any]) -> ExportJob:
    from ..config import ExportJob

    e = EXPORTERS[kind]
    return ExportJob(kind=kind, module=e.module, packages=e.packages, folder=str(folder), model=model,
                     resolution=resolution, weights=weights, seed=seed, batch_sizes=batch_sizes,
                     key_inputs=key_inputs)


def run(job: ExportJob, emit: Any = lambda phase: None) -> dict[str, Any]:
    """Export one artifact into the cache folder and record it in the manifest (in a child process)."""
    from . import cache

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


def export_order(kinds: list[str]) -> list[str]:
    """The requested artifact kinds and everything they need, dependencies first."""
    order: list[str] = []

    def visit(kind: str) -> None:
        if kind in order or kind == "none":
            return
        for dep in EXPORTERS[kind].requires:
            visit(dep)
        if not EXPORTERS[kind].built_by_runner:
            order.append(kind)

    visit("keras")  # the reference outputs come from the Keras export
    visit("reference")
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


def timed_reference(batch_size: int) -> str:
    """The Keras logits of the timed batch of ``batch_size`` (exporter ``reference``)."""
    return f"reference/timed-bs{batch_size}.npy"
