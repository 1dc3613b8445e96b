"""File digests: what the artifact cache keys and checks artifacts by, and what tells model files apart (a base
module: it imports nothing of inferbench's)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


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
