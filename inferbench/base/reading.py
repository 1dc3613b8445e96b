"""The one bounded reader for every file inferbench reads for itself (a record, a manifest, the set-up times and
rankings kept beside the cache, a calibration between invocations, a labels file): a regular file only — opened
without blocking, so a FIFO, a device or a socket in its place is named, never waited on —, no more than its size
cap read, its text decoded strictly, its JSON without NaN or infinities. A file that fails is :class:`Unreadable`
(a ``ValueError``) naming it and why; the caller ignores it with a warning or refuses it in one line."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MiB = 2**20


class Unreadable(ValueError):
    """A file inferbench will not read: not a regular file, over its size cap, not the text or JSON it should be."""


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, in a word: a FIFO, a device, a socket, a folder."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK,
                       "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path: Path | str, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. Opened without blocking (a FIFO's open
    returns at once) and checked on the open file itself (what is read is what was checked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Unreadable(f"{what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{what} {path} is {kind_of(st.st_mode)}, not a regular file: not read")
        if st.st_size > limit:
            raise Unreadable(f"{what} {path} holds {st.st_size:,} bytes, over the {limit:,} it may take")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:  # a size the file system does not tell (/proc's 0) is bounded here
            chunk = os.read(fd, min(MiB, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise Unreadable(f"{what} {path} holds more than the {limit:,} bytes it may take")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path | str, limit: int, what: str = "file") -> str:
    """:func:`read_bounded` decoded as UTF-8 (a leading byte-order mark dropped)."""
    try:
        return read_bounded(path, limit, what).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r})"
                         ) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a file of inferbench's holds")


def loads(text: str | bytes, what: str = "JSON") -> Any:
    """JSON without NaN, Infinity or -Infinity (Python's reader takes them: a planted ``Infinity`` once went on into
    the arithmetic) and not nested past the interpreter's limit."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise Unreadable(f"{what}: not JSON inferbench reads ({str(exc)[:120]})") from None


def read_json(path: Path | str, limit: int, what: str = "file") -> Any:
    """The JSON in the regular file ``path`` (:func:`read_bounded`, :func:`loads`)."""
    return loads(read_bounded(path, limit, what), f"{what} {path}")


def finite(value: Any, low: float, high: float) -> float | None:
    """``value`` as a float where it is a number (not a bool) within [low, high], else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if low <= number <= high else None
