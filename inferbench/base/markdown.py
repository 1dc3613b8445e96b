"""Text from records, as Markdown shows it: literally, never as markup.

Record fields (model names, framework keys, error messages, paths) come from files anyone can write; in a
report they must not become a heading, a link, a remote image, an HTML tag or a broken table row.
"""

from __future__ import annotations

import html
import re
from typing import Any

from .text import visible

_MARKUP = re.compile(r"([\\`*\[\]|#])")


def text(value: Any) -> str:
    """``value`` as one line of literal Markdown text: HTML escaped, the characters that start Markdown
    structure (``[ ] | * # ` \\``) backslash-escaped, line breaks made spaces."""
    one_line = visible(" ".join(str(value).splitlines()))
    return _MARKUP.sub(r"\\\1", html.escape(one_line, quote=False))


def code(value: Any) -> str:
    """``value`` for a fenced code block: shown as it is, but it cannot close the fence."""
    return visible(str(value)).replace("```", "'''")


def table(df: Any, floatfmt: str = ".3g") -> str:
    """A DataFrame as a Markdown table, every text cell literal (:func:`text`)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(text(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    def number(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 1000 else format(v, floatfmt)

    for _, row in df.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            if isinstance(v, float):
                cells.append(number(v))
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, float) for x in v):  # an interval
                cells.append("[" + ", ".join(number(x) for x in v) + "]")  # rounded, not 16 digits a bound
            else:
                cells.append(text(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
