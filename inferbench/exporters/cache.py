"""Artifact cache: one folder per (model, resolution, weights, library versions), with a manifest.

The folder name is a hash of everything that changes the artifacts, so a change of source model,
weights or library version gives a new folder; within a folder, each artifact is reused while its
files still hash to what the manifest recorded.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from ..base.digest import hash_tree, sha256_file, sha256_tree  # noqa: F401 - the cache's names for them too
from ..base.errors import UsageError
from ..base.files import atomic_write_text, check_writable
from ..base.reading import read_json

#: Bump when an exporter changes what it writes, to invalidate every cached artifact.
EXPORT_FORMAT = 8  # 2: ONNX exports embed Keras Normalization constants; 3: the classifier head standardised;
#                   4: the Keras export measures the model's FP32 spread (reference/fp32_spread.json);
#                   5: the torch export is weights only (torch/model.safetensors), no pickle;
#                   6: a network without normalisation (VGG) standardised to its inputs' scale;
#                   7: seeded weights conditioned (models.CONDITIONING) and the model's own FP16/BF16 error measured;
#                   8: that error measured on each timed batch too; separable convolutions' kernels conditioned
MANIFEST = "manifest.json"
#: The most a manifest may hold (a model's dozen kinds and their files take a few kB).
MANIFEST_BYTES = 16 * 2**20


def default_cache_dir() -> Path:
    env = os.environ.get("INFERBENCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inferbench" / "artifacts"


def check_cache_dir(cache_dir: Path, trust: bool = False) -> None:
    """The artifact cache can be written, and (unless ``trust``: ``--trust-cache``) only by the user: an exported
    artifact is loaded and run as the user, so a cache another user owns or can write to could run their code
    (a planted model; the manifest's hashes are in the same folder). One line (UsageError) saying why."""
    check_writable(cache_dir, "cache dir")
    why = None if trust else untrusted(cache_dir)
    if why:
        raise UsageError(f"the artifact cache {cache_dir} is not only yours: {why}; what is exported there is loaded "
                         "and run as you, so use a cache folder of your own (--cache-dir), or pass --trust-cache "
                         "if the folder is shared on purpose")


#: The most entries the ownership check walks (a full zoo's cache: about 4,000 files).
MAX_CHECKED = 1_000_000


def untrusted(cache_dir: Path) -> str | None:
    """Why another user could have put something in ``cache_dir``, or None: the folder and everything in it, to any
    depth, each owned by the user and writable by no other user (a group is another user's unless it is the user's own
    private group). A link is followed and its target checked as if it were in place (what is loaded is the target),
    a folder it leads to walked too; each entry once (a link back up ends there)."""
    me, gid = os.geteuid(), os.getegid()
    try:  # a user private group: named as the user, no other member
        group = grp.getgrgid(gid)
        private = group.gr_name == pwd.getpwuid(me).pw_name and not group.gr_mem
    except KeyError:
        private = False
    seen: set[tuple[int, int]] = set()
    todo = [Path(cache_dir)]
    while todo and len(seen) < MAX_CHECKED:
        path = todo.pop()
        try:
            st = path.stat()  # a link's target: what the runtime reads
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        shown = f"{path} (a link to {path.resolve()})" if path.is_symlink() else str(path)
        if st.st_uid != me:
            return f"{shown} belongs to another user (uid {st.st_uid}; you are {me})"
        if st.st_mode & stat.S_IWOTH or st.st_mode & stat.S_IWGRP and not (st.st_gid == gid and private):
            who = "every user" if st.st_mode & stat.S_IWOTH else f"group {st.st_gid}"
            return f"{shown} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
        if stat.S_ISDIR(st.st_mode):
            try:
                todo += sorted(path.iterdir(), reverse=True)
            except OSError:
                continue
    return None


def package_versions(names: tuple[str, ...] | list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def artifact_dir(cache_dir: Path, inputs: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / f"{inputs['model']}_{inputs['resolution']}_{digest}"


def read_manifest(folder: Path) -> dict[str, Any]:
    """A folder's manifest, or an empty one where it is missing or is not a manifest (a damaged or planted file)."""
    try:
        data = read_json(folder / MANIFEST, MANIFEST_BYTES, "manifest")
    except ValueError:
        return {"artifacts": {}}
    if not isinstance(data, dict) or not isinstance(data.get("artifacts", {}), dict):
        return {"artifacts": {}}
    return data


def cached(folder: Path, kind: str) -> dict[str, Any] | None:
    """The manifest entry of ``kind`` if its files are all present and unchanged, else None."""
    entry = read_manifest(folder).get("artifacts", {}).get(kind)
    if not entry or not isinstance(entry, dict) or not isinstance(entry.get("files", {}), dict):
        return None
    for rel, digest in entry.get("files", {}).items():
        path = folder / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts or not path.is_file() or sha256_file(path) != digest:
            return None
    return entry


def record(folder: Path, kind: str, entry: dict[str, Any], inputs: dict[str, Any]) -> None:
    manifest = read_manifest(folder)
    manifest["key_inputs"] = inputs
    manifest.setdefault("artifacts", {})[kind] = entry
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))


def _identity(inputs: dict[str, Any]) -> dict[str, Any]:
    """What an artifact is of (model, resolution, weights, seed, export format), without the library versions
    that made it."""
    return {k: v for k, v in inputs.items() if k != "versions"}


def versions_changed(cache_dir: Path, inputs: dict[str, Any]) -> str | None:
    """Why ``inputs``' folder is new although the cache holds the same model, resolution, weights and seed: the
    library versions that differ from the latest such folder's ("openvino none -> 2025.3.0"), or None (the folder
    exists, or nothing like it does)."""
    if (artifact_dir(cache_dir, inputs) / MANIFEST).exists():
        return None
    found = [(m.stat().st_mtime, keys) for m in cache_dir.glob(f"{inputs['model']}_{inputs['resolution']}_*/{MANIFEST}")
             for keys in [read_manifest(m.parent).get("key_inputs") or {}] if _identity(keys) == _identity(inputs)]
    if not found:
        return None
    before = max(found, key=lambda f: f[0])[1].get("versions") or {}  # the latest such folder's
    now = inputs.get("versions") or {}
    return ", ".join(f"{k} {before.get(k) or 'none'} -> {now.get(k) or 'none'}" for k in sorted(set(before) | set(now))
                     if before.get(k) != now.get(k)) or "the export format"


def brought(cache_dir: Path, inputs: dict[str, Any], kind: str, covers: Any = lambda entry: True) -> Path | None:
    """Another folder of ``cache_dir`` holding ``kind`` for the same model, resolution, weights, seed and export
    format, intact (every file hashes to its manifest), made with other library versions: a cache exported on
    another machine and brought here (a GPU machine without TensorFlow). ``covers(entry)``: is that entry enough
    (a per-batch-size export holds every batch size needed)? None when there is none."""
    own = artifact_dir(cache_dir, inputs)
    for manifest in sorted(cache_dir.glob(f"{inputs['model']}_{inputs['resolution']}_*/{MANIFEST}")):
        folder = manifest.parent
        if folder == own or _identity(read_manifest(folder).get("key_inputs") or {}) != _identity(inputs):
            continue
        entry = cached(folder, kind)
        if entry and covers(entry):
            return folder
    return None


def bring(source: Path, folder: Path, kind: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """Copy ``kind``'s files and manifest entry from ``source`` (see :func:`brought`) into ``folder``; the entry
    keeps the versions it was exported with and says where it came from."""
    entry = cached(source, kind)
    if entry is None:
        raise ValueError(f"{kind} is not intact in {source}")
    for rel in entry.get("files", {}):
        target = folder / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:  # a manifest names files inside its folder only
            raise ValueError(f"{source / MANIFEST} names a file outside its folder: {rel!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(source / rel, tmp)
        os.replace(tmp, target)
    origin = read_manifest(source).get("key_inputs", {}).get("versions")
    entry = {**entry, "brought_from": {"folder": source.name, "key_versions": origin}}
    record(folder, kind, entry, inputs)
    return entry


def available(cache_dir: Path, inputs: dict[str, Any], kinds: Any) -> set[str]:
    """Those of ``kinds`` that need no export here: intact in this cache folder, or in one brought from elsewhere."""
    own = artifact_dir(cache_dir, inputs)
    return {k for k in kinds if cached(own, k) or brought(cache_dir, inputs, k)}


@contextlib.contextmanager
def export_lock(folder: Path, on_wait: Any = lambda: None, name: str = ".export.lock") -> Iterator[None]:
    """Hold ``folder``'s export lock: two processes exporting one model to one cache (two runs, a run and a
    sweep) take turns, and the second finds what the first made instead of writing the same files at once.
    ``on_wait()`` is called once when another process holds it. ``name``: another lock file in it (the set-up
    times' read, update and write)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
