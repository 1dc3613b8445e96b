"""JSON round trip for the frozen dataclasses that cross a process boundary or a file.

``encode`` turns a dataclass (and what it holds) into plain JSON values; ``decode`` builds the
dataclass back from them, checking every field against its type hint: a missing, unknown or
mistyped key is a ``ValueError`` that names where it is (``plan.cells[3].batch_size``), so a
hand-edited plan or a foreign job file is refused in one line instead of failing later.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


#: The attributes an open block (:func:`is_open`) keeps beside its fields when decoded: the keys it was read with, in
#: their order, and the values of those it does not declare.
KEYS, EXTRA = "_json_keys", "_json_extra"


def is_open(tp: Any) -> bool:
    """Is ``tp`` an open block: a dataclass (``__open__ = True``) whose JSON object may hold keys beyond its fields
    (blocks stay open to what a newer inferbench measures), kept as read and written back as they were?"""
    return dataclasses.is_dataclass(tp) and bool(getattr(tp, "__open__", False))


def encode(value: Any) -> Any:
    """A dataclass, tuple, list, dict or Path as plain JSON values (an open block as it was read: the same keys in
    the same order; one built in code: its fields that are not None)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if is_open(value):
            extra: dict[str, Any] = getattr(value, EXTRA, {})
            keys = getattr(value, KEYS, None)
            if keys is not None:
                return {k: encode(extra[k] if k in extra else getattr(value, k)) for k in keys}
            return {**{f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)
                       if getattr(value, f.name) is not None}, **{k: encode(v) for k, v in extra.items()}}
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def plain(value: Any) -> Any:
    """JSON's own values, for every file and document inferbench writes: NaN and infinities as null, paths as text,
    NumPy scalars as plain numbers, tuples as lists, keys as text; anything else as it is."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a NumPy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def decode(cls: type[T], data: Any, where: str = "value") -> T:
    """``cls`` built from JSON values, every field checked against its type hint."""
    return _decode(cls, data, where)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _decode(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin is typing.Annotated:  # a type with markers: the value, then what each marker asks of it
        inner, *markers = typing.get_args(tp)
        value = _decode(inner, data, where)
        if value is not None:
            for marker in markers:
                if dataclasses.is_dataclass(marker) and isinstance(marker, type):  # a block's shape
                    _open(marker, value, where)
                elif hasattr(marker, "check"):
                    marker.check(value, where)
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, data, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"{where}: unexpected {data!r}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        tp = typing.cast(type, tp)
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        unknown = sorted(set(data) - names)
        if unknown and not is_open(tp):
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ValueError(f"{where}: missing key {f.name!r}")
                continue
            kwargs[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        try:
            built = tp(**kwargs)
        except (TypeError, ValueError) as exc:
            raise _same_kind(exc, f"{where}: {exc}") from None
        if is_open(tp):  # what it was read with, to be written back as it was
            object.__setattr__(built, KEYS, tuple(data))
            object.__setattr__(built, EXTRA, {k: data[k] for k in unknown})
        return built
    if origin in (tuple, list):
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
        args = typing.get_args(tp)
        item = args[0] if args else Any
        items = [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        args = typing.get_args(tp)
        value_type = args[1] if args else Any
        return {str(k): _decode(value_type, v, f"{where}.{k}") for k, v in data.items()}
    if tp is Path:
        if not isinstance(data, str):
            raise ValueError(f"{where}: expected a path, got {data!r}")
        return Path(data)
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise ValueError(f"{where}: expected a number, got {data!r}")
        return float(data)
    if tp in (int, str, bool):
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise ValueError(f"{where}: expected {tp.__name__}, got {data!r}")
        return data
    raise TypeError(f"{where}: no decoder for {tp!r}")  # a programming error, not bad input


def check_shape(tp: Any, data: Any, where: str = "value") -> None:
    """``data`` (plain JSON) checked against the block shape ``tp`` (a dataclass, its markers honoured): the keys it
    lists typed, a required one there, others allowed; a ``ValueError`` naming where, else nothing."""
    _open(tp, data, where)


def _open(tp: Any, data: Any, where: str) -> None:
    """``data`` checked against ``tp``, where a dataclass is the shape of a plain JSON block: the keys it lists are
    checked (with their markers), a required one must be there, others may follow (blocks stay open to new keys)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        inner = typing.get_args(tp)[0]
        if _shaped(inner):
            _open(inner, data, where)
        else:
            _decode(tp, data, where)
        return
    if origin in (typing.Union, types.UnionType):
        options = [o for o in typing.get_args(tp) if o is not type(None)]
        if data is None and len(options) < len(typing.get_args(tp)):
            return
        errors = []
        for option in options:
            try:
                return _open(option, data, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0])
    if origin in (list, dict) and _shaped(typing.get_args(tp)[-1]):  # a list (or map) of blocks
        if not isinstance(data, origin):
            raise ValueError(f"{where}: expected {'a list' if origin is list else 'an object'}, got "
                             f"{type(data).__name__}")
        for key, item in enumerate(data) if origin is list else data.items():
            _open(typing.get_args(tp)[-1], item, f"{where}[{key}]")
        return
    if not (dataclasses.is_dataclass(tp) and isinstance(tp, type)):
        _decode(tp, data, where)
        return
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _hints(tp)
    for f in dataclasses.fields(tp):
        if f.name in data:
            _open(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: missing key {f.name!r}")


def _shaped(tp: Any) -> bool:
    """Does ``tp`` hold a block's shape (a dataclass, maybe optional)?"""
    return any(dataclasses.is_dataclass(t) and isinstance(t, type) for t in (tp, *typing.get_args(tp)))


def _same_kind(exc: Exception, message: str) -> ValueError:
    """``message`` as an error of ``exc``'s own kind where that kind is a ValueError taking one message (a
    record's ImpossibleRecord stays one), else a plain ValueError."""
    if isinstance(exc, ValueError):
        try:
            return type(exc)(message)
        except TypeError:  # a ValueError of another signature (UnicodeDecodeError)
            pass
    return ValueError(message)
