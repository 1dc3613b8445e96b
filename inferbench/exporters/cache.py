"""Artifact cache: one folder per (model, resolution, weights, library versions), with a manifest.

The folder name is a hash of everything that changes the artifacts, so a change of source model,
weights or library version gives a new folder; within a folder, each artifact is reused while its
files still hash to what the manifest recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from ..results import atomic_write_text

#: Bump when an exporter changes what it writes, to invalidate every cached artifact.
EXPORT_FORMAT = 4  # 2: ONNX exports embed Keras Normalization constants; 3: the classifier head standardised;
#                   4: the Keras export measures the model's FP32 spread (reference/fp32_spread.json)
MANIFEST = "manifest.json"


def default_cache_dir() -> Path:
    env = os.environ.get("INFERBENCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inferbench" / "artifacts"


def package_versions(names: tuple[str, ...] | list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_tree(root: Path) -> str:
    """One sha256 of every file under ``root``, with their relative paths."""
    return hashlib.sha256(json.dumps(hash_tree(root, root), sort_keys=True).encode()).hexdigest()


def hash_tree(root: Path, base: Path | None = None) -> dict[str, str]:
    """sha256 of every file under ``root`` (or of ``root`` itself), keyed by path relative to ``base``
    (default: ``root``'s parent)."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(base or root.parent)): sha256_file(p) for p in files}


def key_inputs(model: str, resolution: int, weights: str, seed: int) -> dict[str, Any]:
    from . import packages

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


def artifact_dir(cache_dir: Path, inputs: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / f"{inputs['model']}_{inputs['resolution']}_{digest}"


def read_manifest(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return {"artifacts": {}}


def cached(folder: Path, kind: str) -> dict[str, Any] | None:
    """The manifest entry of ``kind`` if its files are all present and unchanged, else None."""
    entry = read_manifest(folder).get("artifacts", {}).get(kind)
    if not entry:
        return None
    for rel, digest in entry.get("files", {}).items():
        path = folder / rel
        if not path.is_file() or sha256_file(path) != digest:
            return None
    return entry


def record(folder: Path, kind: str, entry: dict[str, Any], inputs: dict[str, Any]) -> None:
    manifest = read_manifest(folder)
    manifest["key_inputs"] = inputs
    manifest.setdefault("artifacts", {})[kind] = entry
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
