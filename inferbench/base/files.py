"""Files written whole or not at all, with the user's umask, and the folders results go to (a base module: it imports
only the errors beside it)."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

from .errors import UsageError


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def with_umask(tree: Path) -> Path:
    """Give a folder made through ``tempfile`` (mode 0700, its files 0600) and everything in it the modes the user's
    umask gives anything else a run writes: one rule for records and the folders beside them."""
    mask = _umask()
    for root, dirs, files in os.walk(tree):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o777 & ~mask)
        for f in files:
            os.chmod(os.path.join(root, f), 0o666 & ~mask)
    os.chmod(tree, 0o777 & ~mask)
    return tree


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed over it), with the mode a plain
    ``open(path, "w")`` would give (0666 less the umask)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes (a figure): a full disk leaves the old file or none, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would lock colleagues out of shared results
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_writable(folder: Path, what: str = "output dir") -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to {what} {folder}: {exc.strerror or exc}") from None


def new_folder(root: Path, name: str, numbered: bool = True) -> Path:
    """A results folder no other run or sweep shares: created exclusively; ``-2``, ``-3``... if the name is
    taken (two runs started in the same second), or FileExistsError when ``numbered`` is False."""
    for i in itertools.count(1):
        candidate = root / (name if i == 1 else f"{name}-{i}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            if not numbered:
                raise
            continue
    raise AssertionError("unreachable")
