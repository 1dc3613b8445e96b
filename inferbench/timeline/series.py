"""The store's rows as series, keyed as a user thinks of them: one cell (model, resolution, batch size, runtime,
precision, variant, scenario, task) on one kind of machine (its device, CPU model and flags, threads). The versions
(the runtime's, inferbench's, Python's, the GPU driver) are labels along a series, not part of its key: a version
that changes is what a step is asked about. Each point is a run's median latency with its own interval; a point
measured on a busy machine, at another machine speed, or that failed, stays in the series but apart from its level."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..registry.scenarios import scenario

#: A series' key, in the order it is said.
KEY = ("model", "resolution", "batch_size", "framework", "precision", "variant", "scenario", "task",
       "device_name", "cpu_model", "cpu_flags", "threads")
#: A run whose machine speed (machine_state.speed) differs from the series' usual one by more than this is kept apart.
SPEED_APART = 0.10
Z95 = 1.959964


@dataclass(frozen=True)
class Point:
    """One run's figure in a series: its log centre and that centre's own standard error (from its interval), or
    why it is kept apart from the series' level (``apart``)."""

    row: dict[str, Any]
    log_centre: float | None
    se: float | None
    apart: str | None

    @property
    def kept(self) -> bool:
        return self.apart is None


@dataclass(frozen=True)
class Series:
    key: tuple[Any, ...]
    points: tuple[Point, ...]

    @property
    def label(self) -> str:
        r = self.points[0].row
        extra = "".join(f" {r[k]}" for k in ("precision", "variant") if r[k] and r[k] != "fp32")
        label = scenario(r["scenario"]).label
        scenario_said = f" {label}" if label else ""
        return (f"{r['model']}@{r['resolution']} bs{r['batch_size']} {r['framework']}{extra}{scenario_said} on "
                f"{r['device_name']}, {r['threads']} threads")

    @property
    def kept(self) -> list[Point]:
        return [p for p in self.points if p.kept]


def series_of(rows: list[dict[str, Any]]) -> list[Series]:
    """``rows`` (oldest first) grouped into series, in the order each series first appears."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in KEY), []).append(r)
    return [Series(key, tuple(points_of(members))) for key, members in groups.items()]


def points_of(rows: list[dict[str, Any]]) -> list[Point]:
    """Each row as a point: its log median and standard error, or why it is apart."""
    speeds = sorted(r["speed_gflops"] for r in rows if r["speed_gflops"] and _judged(r) is None)
    usual = speeds[len(speeds) // 2] if speeds else None
    out = []
    for r in rows:
        apart = _judged(r)
        if apart is None and usual and r["speed_gflops"] and abs(math.log(r["speed_gflops"] / usual)) > SPEED_APART:
            apart = f"another machine speed ({r['speed_gflops']:.0f} GFLOP/s, usually {usual:.0f})"
        p50, lo, hi = r["p50_ms"], r["p50_ci95_low_ms"], r["p50_ci95_high_ms"]
        centre = math.log(p50) if p50 else None
        se = (math.log(hi) - math.log(lo)) / (2 * Z95) if lo and hi and hi > lo > 0 else None
        if apart is None and se is None:
            apart = "no interval"
        out.append(Point(r, centre, se, apart))
    return out


def _judged(r: dict[str, Any]) -> str | None:
    """Why ``r`` cannot stand for the series' level (failed, not verified, measured on a busy machine), or None."""
    if r["status"] != "ok" or not r["p50_ms"]:
        return "failed"
    if r["parity"] == "failed":
        return "parity failed"
    if r["busy"]:
        return "NOT VALID (a busy machine)"
    return None


def versions(row: dict[str, Any]) -> dict[str, Any]:
    """What a point ran with, beside its key: the runtime's and inferbench's versions, Python, the GPU driver."""
    return {"runtime": row["runtime_version"], "inferbench": row["inferbench_version"],
            "commit": (row["inferbench_commit"] or "")[:10] or None, "python": row["python"],
            "gpu driver": row["gpu_driver"]}
