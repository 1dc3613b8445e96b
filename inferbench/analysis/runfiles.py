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
from ..records.table import SUMMARY_COLUMNS, append_csv, field, record_name, summary_row, write_csv
from .ranking import (
    COMPARISON_COLUMNS,
    OBJECTIVES,
    _group_key,
    _sortable,
    comparison_rows,
    not_ranked,
    recommendations,
    reduced_cell,
)


def summary_rows(records: Iterable[Mapping[str, Any]], objective: str = "p50") -> list[dict[str, Any]]:
    """``summary.csv``'s rows: each record's own (:func:`inferbench.records.table.summary_row`), with why a cell is
    not ranked and, for a reduced precision, its gain over its own runtime's FP32 and what it costs, judged within
    its group as the answer judges it (:func:`inferbench.analysis.ranking.reduced_cell`)."""
    records = list(records)
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(_group_key(r), []).append(r)
    path, lower, stat, _, _ = OBJECTIVES[objective]
    unranked = {key: not_ranked(cells, objective) for key, cells in groups.items()}  # once a group
    rows = []
    for r in records:
        cells = groups[_group_key(r)]
        why = unranked[_group_key(r)].get(record_name(r))
        row = summary_row(r) | {"not_ranked_because": why}
        if r["status"] == "ok" and field(r, "precision") not in (None, "fp32"):
            c = reduced_cell(r, cells, path, lower, stat, why)
            ci = c["gain_ci95"] or [None, None]
            row |= {"fp32_cell": c["fp32"], "gain_over_fp32": c["gain"], "gain_over_fp32_ci95_low": ci[0],
                    "gain_over_fp32_ci95_high": ci[1], "top1_agreement_with_fp32": c.get("top1_agreement"),
                    "top1_accuracy_points_vs_fp32": c.get("accuracy_points"),
                    "accuracy_kept_vs_fp32": c.get("accuracy_kept")}
        rows.append(row)
    return rows


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
        self.records: list[Mapping[str, Any]] = []
        self.comparisons: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self.recs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self.dirty: set[tuple[Any, ...]] = set()
        records = list(records)
        if records:  # a resumed folder: its records as they are (a new one gets its files with its first record)
            write_csv(self.folder / "summary.csv", SUMMARY_COLUMNS, summary_rows(records, objective))
            for record in records:
                self._keep(record)
            self.flush()

    def _keep(self, record: Mapping[str, Any]) -> None:
        self.records.append(record)
        key = _group_key(record)
        self.groups.setdefault(key, []).append(record)
        self.dirty.add(key)

    def add(self, record: Mapping[str, Any]) -> None:
        """A cell's record has been written: its summary row now (the file rewritten where the group holds a reduced
        precision, whose row reads its FP32's), its group at the next :meth:`flush`."""
        self._keep(record)
        cells = self.groups[_group_key(record)]
        if len(cells) > 1 and any(field(r, "precision") not in (None, "fp32") for r in cells):
            write_csv(self.folder / "summary.csv", SUMMARY_COLUMNS, summary_rows(self.records, self.objective))
        else:
            append_csv(self.folder / "summary.csv", SUMMARY_COLUMNS, summary_rows([record], self.objective)[0])

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
