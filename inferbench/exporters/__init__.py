"""Exporters: one module per artifact format, run in child processes, cached with a manifest.

Each exporter module has ``export(ctx: ExportContext) -> dict`` writing under ``ctx.out_dir``
and returning ``{"paths": [top-level entries it wrote], "notes": [...], "input_signature": {...}}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Exporter:
    kind: str
    module: str
    requires: tuple[str, ...]  # artifacts that must exist first
    packages: tuple[str, ...]
    extra: str
    path: str  # artifact path inside the cache folder, as runners load it
    built_by_runner: bool = False  # GPU-specific: built (and cached) in the runner's own process


EXPORTERS: dict[str, Exporter] = {
    e.kind: e
    for e in [
        Exporter("keras", "inferbench.exporters.keras", (), ("tensorflow", "keras"), "cpu", "keras/model.keras"),
        Exporter("savedmodel", "inferbench.exporters.savedmodel", ("keras",), ("tensorflow",), "cpu", "savedmodel"),
        Exporter("onnx", "inferbench.exporters.onnx", ("keras",), ("tensorflow", "tf2onnx", "onnx"), "cpu",
                 "onnx/model.onnx"),
        Exporter("torch", "inferbench.exporters.torch", ("onnx",), ("torch", "onnx2torch", "onnx"), "cpu",
                 "torch/model.pt"),
        # Engines depend on the GPU model, TensorRT version and batch range, so the TensorRT runner
        # builds them on the target GPU (cold start includes the build) and caches them by all three.
        Exporter("tensorrt", "inferbench.exporters.tensorrt", ("onnx",), ("tensorrt",), "tensorrt",
                 "tensorrt/", built_by_runner=True),
    ]
}


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
