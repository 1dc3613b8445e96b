"""The work shared by ``run`` and ``sweep``: export once per (model, resolution), then run each cell
in its own child process and write its record atomically."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import SCHEMA_VERSION, results
from .device import Device
from .errors import UsageError
from .frameworks import get_framework, unavailable_reason


@dataclass(frozen=True)
class Settings:
    """What every cell of one run or sweep shares."""

    weights: str
    seed: int
    device: Device
    threads: int
    timing: dict[str, Any]
    cache_dir: Path
    timeout_s: float | None = None
    #: runner options: channels_last, compile, cuda_graphs (torch); include_transfer (all)
    options: dict[str, Any] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        from .isolate import thread_env

        return {**self.device.child_env(), **thread_env(self.threads)}


@dataclass(frozen=True)
class Cell:
    model: str
    resolution: int
    batch_size: int
    framework: str
    precision: str = "fp32"

    @property
    def label(self) -> str:
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        return f"{self.model}@{self.resolution} {self.framework}{prec} bs{self.batch_size}"

    @property
    def filename(self) -> str:
        return results.record_filename({"model": self.model, "resolution": self.resolution,
                                        "batch_size": self.batch_size, "framework": self.framework,
                                        "config": {"precision": self.precision}})


class Progress:
    """Progress on stderr: cells done/total, elapsed, ETA; one line per phase, one result line per cell."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total, self.done, self.stream = total, 0, stream or sys.stderr
        self.started = time.monotonic()
        self.cell_seconds: list[float] = []

    def eta(self) -> str:
        if not self.cell_seconds:
            return "ETA ?"
        left = (self.total - self.done) * sum(self.cell_seconds) / len(self.cell_seconds)
        return f"ETA {int(left // 60)}m{int(left % 60):02d}s"

    def say(self, label: str, text: str) -> None:
        elapsed = time.monotonic() - self.started
        width = 20
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        print(f"[{bar}] {self.done}/{self.total} {elapsed:6.0f}s {self.eta():>11}  {label:<34} {text}",
              file=self.stream, flush=True)


def ensure_exports(settings: Settings, model: str, resolution: int, frameworks: list[str],
                   batch_sizes: list[int], progress: Progress, strict: bool = True) -> tuple[Path, dict[str, str]]:
    """Export (or reuse from the cache) every artifact the frameworks need; returns the folder and
    the kinds that failed with their reason. A UsageError from an exporter (weights that cannot be
    loaded or downloaded, degenerate reference) is raised when ``strict`` (a single run: nothing
    can run); in a sweep it fails this model's cells only and the sweep goes on."""
    from .exporters import EXPORTERS, export_order
    from .exporters import cache as artifact_cache
    from .isolate import run_child

    key_inputs = artifact_cache.key_inputs(model, resolution, settings.weights, settings.seed)
    folder = artifact_cache.artifact_dir(settings.cache_dir, key_inputs)
    runnable = [get_framework(k) for k in frameworks if not unavailable_reason(get_framework(k), settings.device.kind)]
    failed: dict[str, str] = {}
    needed = [fw.artifact for fw in runnable if fw.artifact != "none"]
    for kind in export_order(needed) if runnable else []:
        label = f"{model}@{resolution} export {kind}"
        blocked = [dep for dep in EXPORTERS[kind].requires if dep in failed]
        if blocked:
            root = failed[blocked[0]]  # name the export that really failed, and why
            failed[kind] = root if root.startswith("needs the ") else \
                f"needs the {blocked[0]} export, which failed: {root}"
            continue
        if artifact_cache.cached(folder, kind):
            progress.say(label, "cached")
            continue
        t0 = time.monotonic()
        res = run_child(
            {"type": "export", "kind": kind, "folder": str(folder), "model": model, "resolution": resolution,
             "weights": settings.weights, "seed": settings.seed, "batch_sizes": batch_sizes,
             "key_inputs": key_inputs},
            settings.env(), lambda phase, lb=label: progress.say(lb, phase), settings.timeout_s,
        )
        if res["ok"]:
            notes = res["result"].get("notes") or []
            progress.say(label, f"done in {time.monotonic() - t0:.1f}s" + "".join(f"\n    note: {n}" for n in notes))
        elif res.get("usage_error") and strict:
            raise UsageError(res["error"])
        else:
            failed[kind] = res["error"]
            progress.say(label, f"FAILED: {res['error']}")
    return folder, failed


def failed_record(base: dict[str, Any], error: str, traceback: str | None = None) -> dict[str, Any]:
    return {**base, "status": "failed", "error": error, "traceback": traceback,
            "parity": {"status": "not_run", "max_abs_err": None, "max_rel_err": None, "cosine": None,
                       "top1_agreement": None},
            "latency_ms": None, "throughput_per_s": None}


def run_cell(settings: Settings, cell: Cell, folder: Path, failed_exports: dict[str, str], run_id: str,
             environment: dict[str, Any], batch_sizes: list[int], progress: Progress) -> dict[str, Any]:
    from .isolate import run_child

    fw = get_framework(cell.framework)
    device = settings.device
    env = settings.env()
    if fw.keras_backend:
        env["KERAS_BACKEND"] = settings.options.get("keras_backend") or "tensorflow"
    base = {
        "schema_version": SCHEMA_VERSION, "framework": fw.key, "model": cell.model,
        "resolution": cell.resolution, "batch_size": cell.batch_size,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run_id": run_id,
        "config": {
            "device": {**device.as_dict(), "label": device.label}, "threads": settings.threads,
            "weights": settings.weights, "seed": settings.seed, "precision": cell.precision,
            "timing": settings.timing, "framework_description": fw.description,
            "artifact_dir": str(folder), "include_transfer": bool(settings.options.get("include_transfer")),
            "options": settings.options,
            "child_env": env,  # what the framework's process was started with (threads, device, backend)
        },
        "environment": environment,
    }
    reason = unavailable_reason(fw, device.kind)
    if reason:
        return failed_record(base, reason)
    if fw.artifact in failed_exports:
        return failed_record(base, f"export of {fw.artifact} failed: {failed_exports[fw.artifact]}")
    res = run_child(
        {"type": "cell", "framework": fw.key, "model": cell.model, "resolution": cell.resolution,
         "batch_size": cell.batch_size, "seed": settings.seed, "threads": settings.threads,
         "device": device.as_dict(), "folder": str(folder), "timing": settings.timing,
         "options": {**settings.options, "precision": cell.precision, "batch_sizes": batch_sizes}},
        env, lambda phase: progress.say(cell.label, phase), settings.timeout_s,
    )
    if res["ok"]:
        return {**base, "status": "ok", "error": None, **res["result"]}
    return failed_record(base, res["error"], res.get("traceback"))


def execute(settings: Settings, cells: list[Cell], run_dir: Path, run_id: str,
            progress: Progress | None = None, strict: bool = True) -> list[dict[str, Any]]:
    """Run every cell whose record is not in ``run_dir`` yet; returns all records of ``run_dir``'s cells.

    Records are written one by one, atomically, under deterministic names: an interrupted run (Ctrl-C
    or a kill) loses at most the cell in progress, and running ``execute`` again on the same folder
    resumes without repeating or duplicating a cell.
    """
    from .environment import capture

    todo = [c for c in cells if not (run_dir / c.filename).exists()]
    progress = progress or Progress(len(cells))
    progress.total, progress.done = len(cells), len(cells) - len(todo)
    environment = capture(settings.device)
    exports: dict[tuple[str, int], tuple[Path, dict[str, str]]] = {}
    for cell in todo:
        group = (cell.model, cell.resolution)
        if group not in exports:
            same = [c for c in cells if (c.model, c.resolution) == group]
            exports[group] = ensure_exports(
                settings, cell.model, cell.resolution, sorted({c.framework for c in same}),
                sorted({c.batch_size for c in same}), progress, strict)
        folder, failed = exports[group]
        batch_sizes = sorted({c.batch_size for c in cells if (c.model, c.resolution) == group})
        t0 = time.monotonic()
        rec = run_cell(settings, cell, folder, failed, run_id, environment, batch_sizes, progress)
        results.write_record(run_dir, rec)
        progress.cell_seconds.append(time.monotonic() - t0)
        progress.done += 1
        progress.say(cell.label, one_line(rec))
        results.write_summary(run_dir / "summary.csv", _records_of(run_dir, cells))
    return _records_of(run_dir, cells)


def _records_of(run_dir: Path, cells: list[Cell]) -> list[dict[str, Any]]:
    out = []
    for cell in cells:
        path = run_dir / cell.filename
        if path.exists():
            out.append(json.loads(path.read_text()))
    return out


def one_line(rec: dict[str, Any]) -> str:
    if rec["status"] != "ok":
        return f"FAILED: {rec['error']}"
    lat = rec["latency_ms"]
    ci = lat["p50_ci95"]
    noisy = "  NOISY" if lat["noisy"] else ""
    return (f"p50 {lat['p50']:.3f} ms [{ci[0]:.3f}, {ci[1]:.3f}]  {rec['throughput_per_s']:.1f}/s  "
            f"parity {rec['parity']['status']}{noisy}")
