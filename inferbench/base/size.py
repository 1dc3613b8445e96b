"""An input image's size, as records and the command line say it: ``224`` (square: height = width, the default
everywhere) or ``"384x640"`` (height x width, for a model that takes other than square images). A square size is
always the integer, so records of square models read as they always have."""

from __future__ import annotations

import re
from typing import Any

#: A size: pixels a side (square), or "HxW".
Size = int | str

_HW = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def size_of(height: int, width: int) -> Size:
    """The size of an input ``height`` x ``width`` pixels: the integer where it is square."""
    return int(height) if height == width else f"{int(height)}x{int(width)}"


def parse_size(text: str | int) -> Size:
    """``"224"`` or ``224`` -> 224, ``"384x640"`` -> "384x640", ``"224x224"`` -> 224; ValueError for anything else
    (a side that is not a positive integer)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 1:
            raise ValueError(f"a size must be positive, got {text}")
        return text
    s = str(text).strip()
    found = _HW.match(s)
    if found:
        h, w = int(found[1]), int(found[2])
    elif s.isdigit():
        h = w = int(s)
    else:
        raise ValueError(f"not a size (pixels a side, or HxW): {text!r}")
    if h < 1 or w < 1:
        raise ValueError(f"a size must be positive, got {text!r}")
    return size_of(h, w)


def hw(size: Size) -> tuple[int, int]:
    """(height, width) of a size."""
    if isinstance(size, str):
        found = _HW.match(size)
        if not found:
            return hw(parse_size(size))
        return int(found[1]), int(found[2])
    return int(size), int(size)


def pixels(size: Size) -> int:
    """Pixels an image of this size holds (a side's square for a square size)."""
    h, w = hw(size)
    return h * w


def is_size(value: object) -> bool:
    """Whether ``value`` is a size as a record holds it: a positive integer, or "HxW" of two different sides."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 1
    if isinstance(value, str):
        try:
            return parse_size(value) == value
        except ValueError:
            return False
    return False


def rank(size: Size) -> int:
    """A number that orders sizes by height, then width (a sort key where sizes of both kinds meet)."""
    h, w = hw(size)
    return h * 1_000_000 + w


def column_key(column: Any) -> Any:
    """A pandas ``sort_values`` key: a ``resolution`` column ordered by :func:`rank`, any other as it is."""
    return column.map(rank) if column.name == "resolution" else column
