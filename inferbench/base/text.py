"""The one sanitiser for text that came from a file (a name, a path, a label, a version, an error a library raised)
on its way to a reader: a terminal, a log, a CSV, a report. A control character (an escape sequence that recolours
or clears the terminal, a backspace), a bidirectional override (U+202E makes ``txt.exe`` read as ``exe.txt``) or an
invisible format character is shown as its code (``\\u202e``), never passed on raw; newlines, tabs and carriage
returns stay (inferbench's own lines use them), and so does inferbench's own "clear to the end of the line"
(``ESC [K``, its progress line's). :func:`excerpt` is the short, one-line form an error quotes a file with."""

from __future__ import annotations

import re
from typing import Any, TextIO

#: Control characters but tab, newline and carriage return; DEL and the C1 controls; the format characters that
#: reorder or hide text (bidirectional embeddings, overrides and isolates, zero-width marks, the word joiner's block,
#: the byte-order mark, interlinear annotations, Unicode's tag characters); line and paragraph separators; lone
#: surrogates.
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                    "\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f]")
#: inferbench's own progress line clears what follows it with this (ESC [ K), and nothing else.
CLEAR_LINE = "\x1b[K"


def _code(match: re.Match[str]) -> str:
    c = match.group(0)
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"


def visible(text: str) -> str:
    """``text`` with every hidden character (:data:`HIDDEN`) shown as its code; inferbench's own clear-line kept."""
    if HIDDEN.search(text) is None:
        return text
    return CLEAR_LINE.join(HIDDEN.sub(_code, part) for part in text.split(CLEAR_LINE))


def excerpt(text: Any, limit: int = 80) -> str:
    """A short, one-line, visible quote of ``text`` (of a file's content): never more than ``limit`` characters of
    it, said as cut where it was."""
    flat = " ".join(str(text).split())
    cut = flat if len(flat) <= limit else flat[:limit] + f"... ({len(flat):,} characters)"
    return visible(cut)


class Visible:
    """A text stream (standard output or error) that passes everything written to it through :func:`visible`;
    every other attribute is the stream's own (``isatty``, ``fileno``, ``buffer``...)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
