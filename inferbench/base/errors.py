"""Exceptions that the command lines turn into one clear line and an exit status."""

from __future__ import annotations

import difflib
import importlib
import unicodedata
from collections.abc import Iterable
from typing import Any


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2, nothing written."""


def check_printable(text: str, what: str) -> str:
    """``text`` unless it holds a control or format character (newline, tab, U+202E's right-to-left override,
    U+200B's zero-width space, ...): a name that reaches folders, records and reports must read as it is."""
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")), None)
    if bad is not None:
        kind = unicodedata.name(bad, "a control character").lower()
        raise UsageError(f"{what} holds the character U+{ord(bad):04X} ({kind}): names are printable text")
    return text


class MissingDependency(Exception):
    """An optional package is not installed; the message names the extra that installs it."""

    def __init__(self, package: str, extra: str, what: str = "") -> None:
        self.package = package
        self.extra = extra
        needed_for = f" (needed for {what})" if what else ""
        super().__init__(
            f"{package} is not installed{needed_for}: install it with pip install -e \".[{extra}]\""
        )


def optional(module: str, extra: str, what: str) -> Any:
    """``module`` imported, or :class:`MissingDependency` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(module, extra, what) from None


class TooBig(Exception):
    """Work that would not fit this machine's memory, refused before it starts; the message begins "not run:"."""


#: The longest stretch of a user's text an error line repeats (a 100,000-character --model stays one line).
LONGEST_WORD = 120


def shorten(message: str) -> str:
    """An error message as one readable line: any word longer than LONGEST_WORD cut in the middle."""
    def cut(word: str) -> str:
        half = LONGEST_WORD // 2
        return word if len(word) <= LONGEST_WORD else f"{word[:half]}...({len(word):,} characters)...{word[-20:]}"

    return " ".join(cut(w) for w in " ".join(message.splitlines()).split(" "))


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the nearest of ``choices`` to a mistyped ``word`` (difflib's ratio), '' for none."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""
