"""The record's JSON Schema (draft 2020-12), generated from :class:`~inferbench.records.record.Record` and its block
shapes (:mod:`inferbench.records.blocks`): the types are the one declaration, the schema file shipped for other
tools is made from them, and a test holds the file to what this module makes.

    python -m inferbench.records.schema    # writes inferbench/records/schema/record.schema.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from .. import SCHEMA_VERSION
from .blocks import Doc, Enum, Max, Min, NonEmpty, Pair, Pattern
from .record import Record

URL = "https://github.com/inferbench/inferbench/blob/main/inferbench/records/schema/record.schema.json"


def _enum(marker: Enum) -> list[Any]:
    return list(marker.values)


def type_schema(tp: Any, open_objects: bool = True) -> dict[str, Any]:
    """The JSON Schema of one type hint (``open_objects``: a block shape accepts keys it does not list)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        out = type_schema(args[0], open_objects)
        for marker in args[1:]:
            if isinstance(marker, Enum):
                out.pop("type", None)
                out["enum"] = _enum(marker)
            elif isinstance(marker, Min):
                out["exclusiveMinimum" if marker.exclusive else "minimum"] = marker.value
            elif isinstance(marker, Max):
                out["maximum"] = marker.value
            elif isinstance(marker, Pair):
                out.update(minItems=2, maxItems=2)
            elif isinstance(marker, NonEmpty):
                out["minLength"] = 1
            elif isinstance(marker, Pattern):
                out["pattern"] = marker.regex
            elif isinstance(marker, type) and dataclasses.is_dataclass(marker):  # a block's shape
                nullable = "null" in out.get("type", ())
                out = object_schema(marker, open_objects)
                if nullable:
                    out["type"] = ["object", "null"]
            elif isinstance(marker, Doc):
                out["description"] = marker.text
        return out
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner: dict[str, Any] = type_schema(options[0], open_objects) if len(options) == 1 else {
            "anyOf": [type_schema(o) for o in options]}
        if type(None) in args:
            if "enum" in inner:
                inner["enum"] = [*inner["enum"], None]
            elif "type" in inner:
                inner["type"] = [inner["type"], "null"] if isinstance(inner["type"], str) else [*inner["type"], "null"]
            elif "anyOf" in inner and len(inner) == 1:
                inner = {"anyOf": [*inner["anyOf"], {"type": "null"}]}
            else:
                inner = {"anyOf": [inner, {"type": "null"}]}
        return inner
    if dataclasses.is_dataclass(tp):
        return object_schema(typing.cast(type, tp), open_objects)
    if origin in (list, tuple):
        return {"type": "array", **({"items": type_schema(args[0], open_objects)} if args else {})}
    if origin is dict or tp is dict:
        return {"type": "object"}
    simple = {int: "integer", float: "number", str: "string", bool: "boolean"}
    if tp in simple:
        return {"type": simple[tp]}
    if tp is Any:
        return {}
    raise TypeError(f"no JSON Schema for {tp!r}")


def object_schema(cls: type, open_objects: bool = True) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = dataclasses.fields(cls)
    out: dict[str, Any] = {"type": "object"}
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        out["description"] = " ".join(cls.__doc__.split())
    out["properties"] = {f.name: type_schema(hints[f.name], open_objects) for f in fields}
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if required:
        out["required"] = required
    out["additionalProperties"] = open_objects
    return out


def record_schema() -> dict[str, Any]:
    """The published schema of a record at the current ``schema_version``."""
    body = object_schema(Record, open_objects=True)
    body["additionalProperties"] = False  # a record holds exactly the Record's fields; its blocks stay open
    body.pop("description", None)
    body["properties"]["schema_version"] = {"const": SCHEMA_VERSION}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": URL,
        "title": f"inferbench result record (schema_version {SCHEMA_VERSION})",
        "description": "One cell's result: one model, resolution, batch size, framework, precision, scenario and "
                       "variant measured on one device. Written by inferbench run and sweep; older schema versions "
                       "are upgraded by inferbench.records.load before use. Generated from inferbench.records.Record "
                       "(python -m inferbench.records.schema); docs/results-schema.md says what each field means.",
        **body,
        "allOf": [{"if": {"properties": {"status": {"const": "ok"}}},
                   "then": {"properties": {"latency_ms": {"type": "object"}}}}],
    }


def render() -> str:
    return json.dumps(record_schema(), indent=1) + "\n"


if __name__ == "__main__":
    from .record import SCHEMA_FILE

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_FILE
    target.write_text(render())
    print(f"wrote {target}")
