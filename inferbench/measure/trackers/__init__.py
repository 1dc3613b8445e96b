"""Trackers: what is watched while a cell is measured, besides the latencies the loop times — the machine's other
work (``machine``), the CPU's clock and thermal throttling (``cpu_clock``), the CPU package energy (``rapl``), the
GPU's energy, state and tenants (``nvml``). (The machine's own speed is read round by round by a probe process of
its own: :mod:`.speed`.)
Adding one = one module with a class that follows :class:`Tracker` + one
entry in :data:`TRACKERS`.

A scenario opens every tracker that applies to its device (:func:`open_trackers`), calls ``setup`` once before the
warm-up (an idle baseline, the device's state at the start), reads each tracker's window monitor just before and
just after every timed block (never inside it: see :func:`inferbench.measure.timing.run_block`), and at the end
merges what each ``finish`` returns into the record: its blocks (``energy``, ``gpu_state``, ``machine_state``, ...;
a block two trackers write is merged key by key) and its say on the cell's validity (:func:`judge`). A tracker that
does not apply to the device (RAPL on a GPU cell) is left out; one that applies but cannot be read says why, and the
record keeps the reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from ...spec import CellJob
    from ..timing import Block, WindowMonitor

#: Every tracker, by name: the class that opens it (nothing is imported until a cell runs).
TRACKERS: dict[str, str] = {
    "machine": "inferbench.measure.trackers.machine:MachineTracker",
    "cpu_clock": "inferbench.measure.trackers.cpufreq:ClockTracker",
    "rapl": "inferbench.measure.trackers.rapl:RaplTracker",
    "nvml": "inferbench.measure.trackers.nvml:NvmlTracker",
}


@dataclass(frozen=True)
class Finished:
    """What a tracker sees when its cell ends."""

    blocks: list[Block]  # every timed block, with each tracker's readings under its name in ``monitors``
    inferences: int  # samples over all blocks (iterations x batch size)
    throughput: float  # samples per second over the blocks' windows
    memory: dict[str, Any]  # the record's memory block so far (a tracker may add what only it can see)


@dataclass
class Contribution:
    """What a tracker adds to the record: blocks by name, and its verdict on the cell's validity (None: no say)."""

    fields: dict[str, Any] = field(default_factory=dict)
    validity: dict[str, Any] | None = None


class Tracker(Protocol):
    name: str  # the key of its readings in each block's ``monitors``
    provides: tuple[str, ...]  # the record blocks it writes
    min_block_s: float  # the shortest block it can resolve (an energy counter that updates every ~100 ms)

    @classmethod
    def open(cls, job: CellJob) -> Tracker | str | None:
        """The tracker for this cell, or why it cannot be read here (a line), or None where it does not apply."""

    def setup(self, emit: Callable[[str], None]) -> None:
        """Once, before the warm-up."""

    def monitor(self) -> WindowMonitor | None:
        """A fresh monitor read around one timed block, or None."""

    def finish(self, done: Finished) -> Contribution:
        """The record's blocks from every block's readings."""


def load_tracker(name: str) -> Any:
    module, _, cls = TRACKERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def open_trackers(job: CellJob) -> tuple[list[Tracker], dict[str, str]]:
    """Every registered tracker that applies to ``job``'s device, opened; and for each record block that none of
    them could provide, why (a sensor that cannot be read, a package that is not installed)."""
    opened: list[Tracker] = []
    missing: dict[str, str] = {}
    for name in TRACKERS:
        cls = load_tracker(name)
        try:
            tracker = cls.open(job)
        except Exception as exc:  # noqa: BLE001 - a sensor's failure costs its figures, never the cell
            tracker = f"{name} could not be opened: {type(exc).__name__}: {str(exc)[:160]}"
        if isinstance(tracker, str):
            for block in cls.provides:
                missing.setdefault(block, tracker)
        elif tracker is not None:
            opened.append(tracker)
    for tracker in opened:
        for block in tracker.provides:
            missing.pop(block, None)
    return opened, missing


def judge(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell's validity from its trackers' verdicts (or its worker processes'): not valid if one says so, unknown
    if one cannot tell, else valid; with no verdict at all, unknown (nothing watched the machine). Of the verdicts
    that measured other work's share of the cores, the worst alone is said (with its figure, ``other_cores``): three
    processes' verdicts once read as the same sentence three times."""
    if not verdicts:
        return {"valid": None, "reason": "machine state unknown: no tracker watched the machine"}
    bad = [v for v in verdicts if v["valid"] is False]
    if bad:
        measured = [v for v in bad if isinstance(v.get("other_cores"), (int, float))]
        worst = [max(measured, key=lambda v: v["other_cores"])] if measured else []
        said = worst + [v for v in bad if v not in measured]
        return {"valid": False, "reason": "; ".join(dict.fromkeys(v["reason"] for v in said)),
                **({"other_cores": worst[0]["other_cores"]} if worst else {})}
    unknown = [v for v in verdicts if v["valid"] is None]
    return unknown[0] if unknown else {"valid": True, "reason": "; ".join(v["reason"] for v in verdicts)}
