"""The files a run writes beside its records, kept current as its cells finish: ``summary.csv``, ``comparisons.csv``
and ``recommendation.json`` (:class:`RunFiles`), and the time budget noted once the run has ended."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..base.codec import plain
from ..base.files import atomic_write_text
from ..base.reading import read_json
from ..measure.trackers.machine import combine
from ..records.table import SUMMARY_COLUMNS, append_csv, summary_row, write_csv
from .ranking import COMPARISON_COLUMNS, _group_key, _sortable, comparison_rows, recommendations


class RunFiles:
    """The files a run writes beside its records, kept current as its cells finish: ``summary.csv`` (a row per
    cell, appended as each record is written), ``comparisons.csv`` (each cell against its group's fastest verified
    cell, :func:`comparison_rows`) and ``recommendation.json`` (the best verified cell per group for ``objective``,
    :func:`recommendations`). Only the groups a finished cell belongs to are recomputed (:meth:`flush`): nothing is
    ever read back, and a run's cost stays linear in its cells. ``records``: those already in the folder (a resumed
    run), written first."""

    def __init__(self, folder: Path, objective: str = "p50", records: Iterable[Mapping[str, Any]] = ()) -> None:
        self.folder, self.objective = Path(folder), objective
        self.groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        self.comparisons: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self.recs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self.dirty: set[tuple[Any, ...]] = set()
        records = list(records)
        if records:  # a resumed folder: its records as they are (a new one gets its files with its first record)
            write_csv(self.folder / "summary.csv", SUMMARY_COLUMNS, map(summary_row, records))
            for record in records:
                self._keep(record)
            self.flush()

    def _keep(self, record: Mapping[str, Any]) -> None:
        key = _group_key(record)
        self.groups.setdefault(key, []).append(record)
        self.dirty.add(key)

    def add(self, record: Mapping[str, Any]) -> None:
        """A cell's record has been written: its summary row now, its group at the next :meth:`flush`."""
        append_csv(self.folder / "summary.csv", SUMMARY_COLUMNS, summary_row(record))
        self._keep(record)

    def flush(self) -> None:
        """Recompute the groups that changed; rewrite ``comparisons.csv`` and ``recommendation.json``."""
        for key in self.dirty:
            self.comparisons[key] = comparison_rows(self.groups[key])
            self.recs[key] = recommendations(self.groups[key], self.objective)
        self.dirty.clear()
        order = sorted(self.groups, key=_sortable)
        write_csv(self.folder / "comparisons.csv", COMPARISON_COLUMNS, [r for k in order for r in self.comparisons[k]])
        write_recommendation(self.folder / "recommendation.json", [r for k in order for r in self.recs[k]],
                             self.objective)


def write_summary(folder: Path, records: list[dict[str, Any]], objective: str = "p50") -> None:
    """The files of :class:`RunFiles` from ``records`` at once (written even for none)."""
    files = RunFiles(folder, objective, records)
    if not records:
        write_csv(Path(folder) / "summary.csv", SUMMARY_COLUMNS, [])
        files.flush()


def note_time_budget(folder: Path, spent: dict[str, Any]) -> None:
    """The run's --time-budget and what it spent (``time_budget``: ``budget_s``, ``took_s``, ``overrun_s``) added to
    the ``recommendation.json`` files under ``folder`` (a run's, or a sweep's per machine), once the run has ended."""
    for path in folder.rglob("recommendation.json"):
        if path.parent.name == "report":  # a report's own copy, not the run's
            continue
        answer = read_json(path, 64 * 2**20, "answer")
        atomic_write_text(path, json.dumps({**answer, "time_budget": spent}, indent=1, default=str) + "\n")


def write_recommendation(path: Path, recs: list[dict[str, Any]], objective: str) -> None:
    """``recommendation.json``: the run's validity, the objective and, per group (each with its own validity),
    :func:`inferbench.analysis.ranking.recommendations`."""
    answer = {"validity": combine([r["validity"] for r in recs if r.get("validity")]), "objective": objective,
              "recommendations": recs}
    atomic_write_text(path, json.dumps(plain(answer), indent=1, default=str) + "\n")
