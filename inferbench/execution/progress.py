"""Progress on stderr for a run, a sweep or the zoo: lasting lines, a status line on a terminal, an ETA."""

from __future__ import annotations

import shutil
import sys
import time
from typing import Any


class Progress:
    """Progress on stderr. Lasting lines (a cell's result, an export done or failed, anything FAILED) are
    printed as they come; the passing phases (loading, warm-up, round 3/8) update one status line in
    place on a terminal, and are left out when stderr is piped or a file (``verbosity`` 1, ``-v``, prints
    them as lines, export notes too; -1, ``-q``, prints failures only). Every line starts with the bar,
    units done/total (exports and cells), elapsed time and an ETA from the units done so far."""

    def __init__(self, total: int, stream: Any = None, verbosity: int = 0) -> None:
        self.total, self.done, self.stream, self.verbosity = total, 0, stream or sys.stderr, verbosity
        self.started = time.monotonic()
        self.base = 0  # units already done when this invocation started (a resumed sweep)
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) and verbosity == 0
        self._status = False  # a status line is showing (terminal only)

    def eta(self) -> str:
        if self.done <= self.base:
            return "ETA ?"
        left = (self.total - self.done) * (time.monotonic() - self.started) / (self.done - self.base)
        return f"ETA {int(left // 60)}m{int(left % 60):02d}s"

    def add(self, units: int) -> None:
        """More work than first counted (exports are counted as they are met)."""
        self.total += units

    def _line(self, label: str, text: str) -> str:
        width = 20
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        elapsed = time.monotonic() - self.started
        return f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {self.eta():>10}  {label}  {text}"

    def say(self, label: str, text: str) -> None:
        """A passing phase: on the status line (terminal), as a line with -v, else nowhere."""
        if self.verbosity > 0:
            print(self._line(label, text), file=self.stream, flush=True)
        elif self.live:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            print("\r\x1b[K" + self._line(label, text)[:width], end="", file=self.stream, flush=True)
            self._status = True

    def result(self, label: str, text: str, failure: bool = False) -> None:
        """A lasting line: a result, an export done, a failure (-q keeps failures only)."""
        if self.verbosity < 0 and not failure:
            return
        if self._status:
            print("\r\x1b[K", end="", file=self.stream)
            self._status = False
        print(self._line(label, text), file=self.stream, flush=True)

    def close(self) -> None:
        if self._status:
            print("\r\x1b[K", end="", file=self.stream, flush=True)
            self._status = False
