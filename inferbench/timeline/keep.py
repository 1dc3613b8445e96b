"""Every run's records added to the history store as the run ends (``--history``; off with ``--history off``), and
``inferbench history add``'s reading of result folders: each record once, by content. A store that cannot be written
never fails the run whose records are already on disk: it is said in one line, with the command that adds them
later."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..options import was_given
from .rows import row
from .store import DEFAULT, opened, shown

OFF = "off"
ENV = "INFERBENCH_HISTORY"  # the default store (a path, a URL, or off), as INFERBENCH_CACHE is the cache's


def location(values: dict[str, Any]) -> str:
    """Where a run's records go: ``--history`` as given (``off``: ""), else ``$INFERBENCH_HISTORY``, else
    ``history.duckdb`` in the results' root (``--output-dir`` when given, else ``inferbench-results``)."""
    given = values.get("history") or os.environ.get(ENV)
    if given:
        return "" if given == OFF else str(given)
    out = values.get("output_dir")
    return str(Path(out) / DEFAULT.name) if out and was_given(values, "output_dir") else str(DEFAULT)


def add(where: str, records: Iterable[dict[str, Any]], source: str | None = None) -> tuple[int, int]:
    """Add ``records`` (dicts at the current schema) to the store at ``where``: (new, already stored)."""
    rows = [row({**r, "_source": r.get("_source") or source}) for r in records]
    with opened(where) as store:
        new = store.add(rows)
    return new, len(rows) - new


def keep(where: str, records: list[dict[str, Any]], run_dir: Path) -> None:
    """A run's ``records`` added to the store at ``where`` ("" : none kept), said in one line on standard error."""
    if not where or not records:
        return
    try:
        new, old = add(where, records, str(run_dir))
    except (UsageError, OSError) as exc:
        print(f"inferbench: history not updated ({exc}); the records are in {run_dir}: "
              f"inferbench history add {run_dir} --history {shown(where)} adds them later", file=sys.stderr)
        return
    again = f" ({old} already there)" if old else ""
    print(f"history: {new} record(s) added to {shown(where)}{again}: inferbench history show --history "
          f"{shown(where)}", file=sys.stderr)
