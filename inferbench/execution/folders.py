"""Result folders: one process holds a folder at a time (a lock), a new folder never overwrites another, and a
record that cannot be read is set aside (never deleted) so that its cell runs again."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..base.errors import UsageError
from ..records.record import parse


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder`` for this process: a second run or ``--resume`` of it is refused with one line. The ``.lock``
    goes when the folder is let go (finished, interrupted or failed)."""
    lock = folder / ".lock"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise UsageError(f"cannot use {folder}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise UsageError(f"{folder} is in use by another inferbench process" + (f" (pid {holder})" if holder else "")
                         + "; wait for it to finish or stop it") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        lock.unlink(missing_ok=True)  # still held: a process that opened it before finds it locked and says so
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def set_aside_if_unreadable(path: Path) -> str | None:
    """A record that cannot be read is moved aside (kept for inspection, never deleted), so that its cell
    runs again; returns the line that says so, or None when the record is fine or absent."""
    if not path.exists():
        return None
    try:
        parse(json.loads(path.read_text()), path.name)
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = next(a for i in range(1, 10_000) if not (a := path.with_name(
            f"{path.name}.unreadable-{stamp}" + (f"-{i}" if i > 1 else ""))).exists())  # never over an earlier one
        os.replace(path, aside)
        return f"{path.name} could not be read ({str(exc)[:120]}); moved to {aside.name}, its cell runs again"


