"""The machine during every timed block: how much of it other work took, and whether the answer is valid.

A window monitor (see :mod:`inferbench.measure.timing`) read just before and just after each block, never inside
it: the CPU time every process of the machine used (``/proc/stat``), minus this worker's own (``/proc/self/stat``:
the process that measures; the run's other processes are idle while it does), plus the time a hypervisor gave to
other virtual machines (steal), as *cores taken by other work*; and the load average. A cell is **valid** when
other work took at most ``max_other_load`` (a share of the cores the run uses, 25% unless ``--max-other-load``
says otherwise) in every block; a run is valid when all its cells are. Where ``/proc`` cannot be read (another
OS, some containers) the state is unknown, and the verdict says so, never "valid".

Readers are injected, so every piece of this is tested without a busy machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import Contribution

#: Other work may take this share of the cores the run uses before a cell is not valid (``--max-other-load``).
MAX_OTHER_LOAD = 0.25


def _ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 100.0


def read_proc_stat() -> str:
    with open("/proc/stat") as fh:
        return fh.readline()


def read_own_stat() -> str:
    with open("/proc/self/stat") as fh:
        return fh.read()


def read_loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return fh.read()


@dataclass(frozen=True)
class Readers:
    """Where the monitor reads the machine (replaced by fakes in tests; the module's readers are looked up when a
    monitor is made, so a test double can stand in for them in a worker process)."""

    stat: Callable[[], str] = field(default_factory=lambda: read_proc_stat)
    own: Callable[[], str] = field(default_factory=lambda: read_own_stat)
    loadavg: Callable[[], str] = field(default_factory=lambda: read_loadavg)
    clock: Callable[[], float] = time.monotonic
    ticks_per_s: float = field(default_factory=_ticks)


@dataclass(frozen=True)
class Sample:
    busy_s: float  # CPU seconds of every process of the machine, all cores together (steal not included)
    steal_s: float  # seconds a hypervisor ran other virtual machines on this one's cores
    own_s: float  # this process's CPU seconds (its threads included)
    at: float  # the monitor's clock


def sample(readers: Readers) -> Sample:
    """One reading of the machine; raises OSError or ValueError where it cannot be read."""
    fields = readers.stat().split()
    if not fields or fields[0] != "cpu":
        raise ValueError("/proc/stat does not start with the aggregate cpu line")
    values = [float(v) for v in fields[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = (values + [0.0] * 7)[:7]
    steal = values[7] if len(values) > 7 else 0.0
    own = readers.own().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    utime, stime = float(own[11]), float(own[12])  # fields 14 and 15 of proc(5), counted from the state
    tps = readers.ticks_per_s
    return Sample((user + nice + system + irq + softirq) / tps, steal / tps, (utime + stime) / tps, readers.clock())


@dataclass
class MachineMonitor:
    """A window monitor: the share of the machine other work took during a timed block."""

    readers: Readers = field(default_factory=Readers)
    first: Sample | None = None
    error: str | None = None

    def start(self) -> None:
        try:
            self.first, self.error = sample(self.readers), None
        except (OSError, ValueError, IndexError) as exc:
            self.first, self.error = None, f"{type(exc).__name__}: {exc}"

    def stop(self, window_s: float) -> dict[str, Any]:
        if self.first is None:
            return {"known": False, "reason": f"/proc not readable ({self.error})"}
        try:
            last = sample(self.readers)
            load = float(self.readers.loadavg().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            return {"known": False, "reason": f"/proc not readable ({type(exc).__name__}: {exc})"}
        wall = max(last.at - self.first.at, 1e-9)
        others = max(0.0, (last.busy_s - self.first.busy_s) - (last.own_s - self.first.own_s)) / wall
        steal = max(0.0, last.steal_s - self.first.steal_s) / wall
        return {"known": True, "other_cores": round(others + steal, 4), "other_process_cores": round(others, 4),
                "steal_cores": round(steal, 4), "own_cores": round((last.own_s - self.first.own_s) / wall, 4),
                "load_avg_1m": load, "wall_s": round(wall, 4)}


#: /proc counts CPU time in ticks of 10 ms: a block shorter than this cannot tell a core's worth of other work from
#: a tick or two of the run's own parent waking up. Shorter blocks count only together, over the whole cell.
MIN_JUDGED_S = 0.5


def summarize(blocks: list[dict[str, Any]], threads: int, max_other_load: float = MAX_OTHER_LOAD) -> dict[str, Any]:
    """A cell's machine state over its blocks, and its validity: other work must have taken at most
    ``max_other_load`` x ``threads`` cores in every block long enough to judge (the worst block decides: a cell
    measured while the machine was busy for a moment is as wrong as one measured busy throughout) and over the
    cell's blocks together; blocks too short for /proc's ticks, even together, leave the state unknown."""
    allowed = max_other_load * threads
    known = [b for b in blocks if b.get("known")]
    state: dict[str, Any] = {"method": "proc-stat", "blocks": blocks, "threads": threads,
                             "max_other_load": max_other_load, "allowed_other_cores": allowed}
    if not blocks or len(known) < len(blocks):
        why = next((b.get("reason") for b in blocks if not b.get("known")), "no block measured")
        return {**state, "validity": {"valid": None, "reason": f"machine state unknown: {why}"}}
    wall = sum(b["wall_s"] for b in known)
    mean = sum(b["other_cores"] * b["wall_s"] for b in known) / wall if wall > 0 else 0.0
    judged = [b["other_cores"] for b in known if b["wall_s"] >= MIN_JUDGED_S]
    worst = max([*judged, mean])
    steal = max(b["steal_cores"] for b in known)
    state.update(other_cores_max=round(worst, 4), other_cores_mean=round(mean, 4), steal_cores_max=steal,
                 load_avg_1m_max=max(b["load_avg_1m"] for b in known))
    if wall < MIN_JUDGED_S:
        return {**state, "validity": {"valid": None, "reason": f"machine state unknown: the timed blocks ({wall:.2f} s "
                                                               f"in all) are too short for /proc's 10 ms ticks"}}
    if worst > allowed:
        what = f"other work took {worst:.2f} of the machine's cores during its worst block" + (
            f" ({steal:.2f} of it stolen by the hypervisor)" if steal > 0.05 else "")
        return {**state, "validity": {"valid": False, "other_cores": round(worst, 4),
                                      "reason": f"{what}, more than {max_other_load:.0%} of the {threads} this run "
                                                "uses"}}
    return {**state, "validity": {"valid": True, "other_cores": round(worst, 4),
                                  "reason": f"other work took at most {worst:.2f} cores (allowed: {allowed:.2f})"}}


def combine(validities: list[dict[str, Any]]) -> dict[str, Any]:
    """One verdict for a run (or a group) from its cells' (or groups'): not valid if one is not, unknown if one is
    unknown; ``cells`` and ``not_valid`` count the cells, so verdicts combine again without losing them."""
    if not validities:
        return {"valid": None, "reason": "machine state unknown: no cell measured", "cells": 0, "not_valid": 0}
    cells = sum(v.get("cells", 1) for v in validities)
    bad = [v for v in validities if v.get("valid") is False]
    counts = {"cells": cells, "not_valid": sum(v.get("not_valid", 1) for v in bad)}
    if bad:  # the worst cell's (the most other work in a block), whatever the order: one number per verdict
        def cores(v: dict[str, Any]) -> float:
            found = v.get("other_cores")
            return float(found) if isinstance(found, (int, float)) else 0.0

        worst = max(bad, key=cores)
        return {"valid": False, "reason": worst["reason"], "other_cores": worst.get("other_cores"), **counts}
    unknown = [v for v in validities if v.get("valid") is None]
    if unknown:
        return {"valid": None, "reason": unknown[0]["reason"], **counts}
    return {"valid": True, "reason": "other work stayed within what is allowed in every block", **counts}


class MachineTracker:
    """The machine during every block, on every device: other work's share of the cores, and the cell's verdict."""

    name = "machine"
    provides = ("machine_state",)
    min_block_s = 0.0

    def __init__(self, threads: int, max_other_load: float = MAX_OTHER_LOAD) -> None:
        self.threads, self.max_other_load = threads, max_other_load

    @classmethod
    def open(cls, job: Any) -> MachineTracker:
        return cls(job.config.threads, job.config.max_other_load)

    def setup(self, emit: Callable[[str], None]) -> None:
        pass

    def monitor(self) -> MachineMonitor:
        return MachineMonitor()

    def finish(self, done: Any) -> Any:
        state = summarize([b.monitors[self.name] for b in done.blocks], self.threads, self.max_other_load)
        validity = state.pop("validity")
        return Contribution({"machine_state": state}, validity)
