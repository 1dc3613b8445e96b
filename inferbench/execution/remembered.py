"""What this machine remembers for the next plan made on it, beside the artifact cache: each framework's measured
set-up time (a worker's start to ready) and each group's last valid ranking of its frameworks. --time-budget's plan
foresees from the first and loads the likely winners first by the second."""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..base import files
from ..base.reading import finite, read_json
from ..base.text import excerpt
from ..exporters.cache import export_lock
from ..spec import CellKey, RunConfig
from .environment import setup_path


def device_of(config: RunConfig) -> str:
    """The device a run's set-up times are kept for: ``cpu``, or the GPU's name."""
    return config.device.gpu.name if config.device.gpu else "cpu"


def setup_key(framework: str, scenario: str) -> str:
    """A measured set-up's name: the framework's and its scenario's (a serving worker's set-up includes its single
    queries and served parity)."""
    return f"{framework} {scenario}"


#: The most a kept file may hold (a few hundred entries take a few kB), and the longest set-up it may say (a day).
KEPT_BYTES = 2**20
LONGEST_SETUP_S = 86_400.0


def _kept(path: Path) -> dict[str, Any]:
    """What a file of this module's holds (through the one bounded reader), or nothing: a missing file silently, a
    bad one (a FIFO, a planted Infinity, not an object) with one WARNING naming it, and the plan goes on without."""
    if not os.path.lexists(path):
        return {}
    try:
        data = read_json(path, KEPT_BYTES, "kept file")
    except ValueError as exc:
        print(f"inferbench: WARNING: ignored {excerpt(exc, 200)}", file=sys.stderr)
        return {}
    return data if isinstance(data, dict) else {}


def measured_setups(config: RunConfig) -> dict[str, float]:
    """This machine's set-up time per framework (a worker's start to ready: load, parity, warm-up), as runs on it
    measured them (:func:`remember_setups`); empty where none did. An entry that is not a finite number of seconds
    within a day is left out."""
    data = _kept(setup_path(config.cache_dir, config.threads, device_of(config)))
    out = {str(k): finite(v.get("seconds"), 0.0, LONGEST_SETUP_S) for k, v in data.items() if isinstance(v, dict)}
    return {k: v for k, v in out.items() if v is not None}


def remember_setups(config: RunConfig, seconds: dict[str, list[float]]) -> None:
    """Keep the set-up times a group's workers took (per :func:`setup_key`, its workers' mean) for the next plan on
    this machine shape; a warm-up of another length is counted as measured (it is part of what the plan foresees). A
    file that cannot be written is left as it is: the plan falls back to :data:`SETUP_S`. Two runs at once take turns
    (a lock beside the file): neither loses the other's entries."""
    if not seconds:
        return
    path = setup_path(config.cache_dir, config.threads, device_of(config))
    try:
        with export_lock(path.parent, name=".setup.lock"):
            data = _kept(path)
            when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            for framework, taken in seconds.items():
                data[framework] = {"seconds": round(sum(taken) / len(taken), 2), "workers": len(taken),
                                   "measured_at": when}
            files.atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except (OSError, ValueError):
        return


def ranking_path(config: RunConfig) -> Path:
    """Where this machine's last valid ranking of each group is kept, beside its set-up times."""
    setups = setup_path(config.cache_dir, config.threads, device_of(config))
    return setups.with_name(setups.stem + "-ranking.json")


def _ranking_key(cell: Any) -> str:
    """A group's name in the ranking file (a cell key or a record: the same fields)."""
    return f"{cell.model}@{cell.resolution} bs{cell.batch_size} {cell.scenario}"


def rankings(config: RunConfig) -> dict[str, list[str]]:
    """Per group, the frameworks this machine last ranked, fastest first (:func:`remember_ranking`); empty where
    none was kept or the file cannot be read."""
    kept = _kept(ranking_path(config)).items()
    return {str(k): [f for f in v["fastest_first"] if isinstance(f, str)] for k, v in kept
            if isinstance(v, dict) and isinstance(v.get("fastest_first"), list)}


def remember_ranking(config: RunConfig, records: list[Any]) -> None:
    """Keep a group's frameworks in the order they ranked (the rounds' centre, fastest first), where every cell of
    the group ran, passed parity and was measured on a quiet machine: what the next --time-budget loads first on
    this machine. A file that cannot be written is left as it is (the plan then keeps the registry's order)."""
    done = [r for r in records if r is not None]
    judged = [r for r in done if r.status == "ok" and r.parity.status == "passed" and r.latency_ms
              and r.validity is not None and r.validity.valid is True and not r.options.get("ab")]
    if len(judged) < 2 or len(judged) < len(done):
        return  # a busy or failed group says nothing of the runtimes' order
    order = list(dict.fromkeys(r.framework for r in sorted(judged, key=lambda r: r.latency_ms.p50)))
    path = ranking_path(config)
    try:
        with export_lock(path.parent, name=".setup.lock"):
            data = _kept(path)
            data[_ranking_key(judged[0])] = {"fastest_first": order, "measured_at": datetime.datetime.now(
                datetime.timezone.utc).isoformat(timespec="seconds")}
            files.atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except (OSError, ValueError):
        return


def likely_first(cells: list[CellKey], known: dict[str, list[str]]) -> list[CellKey]:
    """``cells`` group by group (in the order the groups first appear), each group's frameworks in the order
    ``known`` ranked them (:func:`rankings`), those it never ranked after them in their own order: the order a
    budget loads them in."""
    position = {c: i for i, c in enumerate(cells)}

    def rank(cell: CellKey) -> tuple[int, int]:
        order = known.get(_ranking_key(cell), [])
        return (order.index(cell.framework) if cell.framework in order else len(order), position[cell])

    groups: dict[tuple[Any, ...], list[CellKey]] = {}
    for c in cells:
        groups.setdefault((c.model, c.resolution, c.batch_size), []).append(c)
    return [c for group in groups.values() for c in sorted(group, key=rank)]
