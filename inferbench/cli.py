"""What every inferbench command line shares: one-line errors, writable-folder checks, the exit-status
wrapper. The options themselves are declared once, in :mod:`inferbench.config`."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from .errors import UsageError


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        raise UsageError(f"{message} (see --help)")


def check_writable(folder: Path, what: str = "output dir") -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to {what} {folder}: {exc.strerror or exc}") from None


def say_skipped(skipped: dict[str, str], stream: Any = None) -> None:
    """One line for what 'all' left out here, and why (not installed: the command that installs it)."""
    if skipped:
        print("not run here: " + "; ".join(f"{k} ({why})" for k, why in skipped.items()),
              file=stream or sys.stderr)


def exit_status(records: list[dict[str, Any]]) -> int:
    """0 when every cell ran and none failed parity, else 1."""
    bad = [r for r in records if r["status"] != "ok" or r["parity"]["status"] == "failed"]
    return 1 if bad else 0


def guarded(prog: str, body: Callable[[list[str] | None], int], argv: list[str] | None,
            interrupted: str = "records already written are complete") -> int:
    """Run a command body: bad input is one line on stderr and exit 2; Ctrl-C is one line and 130."""
    try:
        return body(argv)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; {interrupted}", file=sys.stderr)
        return 130
