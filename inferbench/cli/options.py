"""The command lines' glue over the declared options (:mod:`inferbench.options`): argparse flags from the
declarations, the namespace as values, -q/-v, and sweep config files read through the same rules."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..base.reading import read_text
from ..base.text import excerpt
from ..options import BY_NAME, GROUPS, OPTIONS


def add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Every option of ``command``, in its --help group (:data:`~inferbench.options.GROUPS`); values not given stay
    out of the namespace (see :func:`given`)."""
    mine = [o for o in OPTIONS if command in o.commands]
    grouped = len(mine) > 8  # a short list reads best as one
    groups: dict[str, Any] = {}
    for title, names in GROUPS:
        group = parser.add_argument_group(title) if grouped and any(o.name in names for o in mine) else parser
        groups.update(dict.fromkeys(names, group))
    for o in mine:
        default = o.default_for(command)
        shown = "" if default in (None, False, []) else \
            f" (default: {','.join(map(str, default)) if isinstance(default, list) else default})"
        if o.maximum is not None:
            shown += f" (at most {o.maximum:.10g})"
        kwargs: dict[str, Any] = {"dest": o.name, "default": argparse.SUPPRESS, "help": o.help + shown}
        if o.switch:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(metavar=o.metavar, choices=o.choices, type=o.parser())
        groups.get(o.name, parser).add_argument(*o.flags, **kwargs)


def given(ns: argparse.Namespace) -> dict[str, Any]:
    return dict(vars(ns))


def verbosity(values: dict[str, Any]) -> int:
    """-q: -1, default: 0, -v: 1 (both given: an error)."""
    if values.get("quiet") and values.get("verbose"):
        raise UsageError("--quiet and --verbose contradict each other: give one")
    return 1 if values.get("verbose") else -1 if values.get("quiet") else 0


#: The most a sweep config file may hold (the committed ones: under 2 kB).
CONFIG_BYTES = 2**20


def read_config_file(path: str) -> dict[str, Any]:
    """A sweep config file's values, each checked like its command-line flag."""
    file = Path(path)
    try:  # a regular file, bounded (a FIFO is named, never waited on)
        text = read_text(file, CONFIG_BYTES, "config")
    except ValueError as exc:
        raise UsageError(f"cannot read {excerpt(exc, 200)}") from None
    try:
        if file.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif file.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif file.suffix == ".json":
            data = json.loads(text)
        else:
            raise UsageError(f"config must be .toml, .json or .yaml, got {path}")
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - every parser's own error (RecursionError included) is bad input
        raise UsageError(f"cannot parse config {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config {path} must be a table of keys")
    valid = [o.name for o in OPTIONS if o.in_file]
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise UsageError(f"unknown key(s) in {path}: {', '.join(unknown)}; valid: {', '.join(valid)}")
    return {key: BY_NAME[key].check(value, path) for key, value in data.items()}


