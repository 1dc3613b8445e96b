"""Result records: schema, atomic writing, CSV summary, loading into pandas.

One JSON record per cell (framework x model x resolution x batch size). Writes go to a temporary
file in the same folder and are renamed into place, so an interrupted run never leaves a
half-written record.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import SCHEMA_VERSION
from .errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Schema versions this code reads (older ones get upgraded here when a new version appears).
SUPPORTED_SCHEMAS = frozenset({1})
REQUIRED_KEYS = (
    "schema_version", "framework", "model", "resolution", "batch_size", "status", "error", "parity",
    "latency_ms", "throughput_per_s", "environment",
)
SUMMARY_COLUMNS = (
    "framework", "model", "resolution", "batch_size", "device", "precision", "status", "parity",
    "p50_ms", "p50_ci95_low_ms", "p50_ci95_high_ms", "p99_ms", "mean_ms", "cv", "n",
    "throughput_per_s", "load_s", "first_call_s", "peak_host_memory_mb", "noisy", "error",
)


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def validate(record: dict[str, Any]) -> None:
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        raise ValueError(f"record lacks keys: {', '.join(missing)}")
    if record["status"] not in ("ok", "failed"):
        raise ValueError(f"status must be 'ok' or 'failed', not {record['status']!r}")
    if record["status"] == "ok" and not record["latency_ms"]:
        raise ValueError("an ok record needs latency statistics")
    if record["parity"]["status"] not in ("passed", "failed", "not_applicable", "not_run"):
        raise ValueError(f"bad parity status {record['parity']['status']!r}")


def record_filename(record: dict[str, Any]) -> str:
    prec = record.get("config", {}).get("precision", "fp32")
    return (
        f"{record['model']}_{record['resolution']}_bs{record['batch_size']}_{record['framework']}"
        f"{'' if prec == 'fp32' else '_' + prec}.json"
    )


def write_record(folder: Path, record: dict[str, Any]) -> Path:
    validate(record)
    path = Path(folder) / record_filename(record)
    # strict JSON: a NaN or infinity (e.g. a CV over zero latencies) is written as null
    atomic_write_text(path, json.dumps(_finite(record), indent=1, sort_keys=False, allow_nan=False) + "\n")
    return path


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def summary_row(record: dict[str, Any]) -> dict[str, Any]:
    lat = record.get("latency_ms") or {}
    ci = lat.get("p50_ci95") or [None, None]
    cold = record.get("cold_start") or {}
    return {
        "framework": record["framework"],
        "model": record["model"],
        "resolution": record["resolution"],
        "batch_size": record["batch_size"],
        "device": record.get("config", {}).get("device", {}).get("label"),
        "precision": record.get("config", {}).get("precision", "fp32"),
        "status": record["status"],
        "parity": record["parity"]["status"],
        "p50_ms": lat.get("p50"),
        "p50_ci95_low_ms": ci[0],
        "p50_ci95_high_ms": ci[1],
        "p99_ms": lat.get("p99"),
        "mean_ms": lat.get("mean"),
        "cv": lat.get("cv"),
        "n": lat.get("n"),
        "throughput_per_s": record.get("throughput_per_s"),
        "load_s": cold.get("load_s"),
        "first_call_s": cold.get("first_call_s"),
        "peak_host_memory_mb": (record.get("memory") or {}).get("peak_host_mb"),
        "noisy": lat.get("noisy"),
        "error": record.get("error"),
    }


def write_summary(path: Path, records: Iterable[dict[str, Any]]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(SUMMARY_COLUMNS))
    writer.writeheader()
    for rec in records:
        writer.writerow(summary_row(rec))
    atomic_write_text(path, buf.getvalue())


def iter_records(path: Path) -> list[dict[str, Any]]:
    """Every inferbench record under ``path`` (a file or a folder, searched recursively)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"no such file or folder: {path}")
    files = [path] if path.is_file() else sorted(path.rglob("*.json"))
    records = []
    unsupported: dict[Any, list[str]] = {}
    malformed: list[str] = []
    for file in files:
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "schema_version" in data and "framework" in data:
            version = data["schema_version"]
            if version not in SUPPORTED_SCHEMAS:
                unsupported.setdefault(version, []).append(str(file))
                continue
            try:
                validate(data)
            except (ValueError, TypeError, KeyError) as exc:
                malformed.append(f"{file} ({exc})")
                continue
            data["_source"] = str(file)
            records.append(data)
    if unsupported:
        found = "; ".join(f"schema_version {v!r} in {len(fs)} file(s), e.g. {fs[0]}" for v, fs in unsupported.items())
        newer = any(isinstance(v, int) and v > SCHEMA_VERSION for v in unsupported)
        hint = "upgrade inferbench" if newer else "these records come from another tool or a pre-release"
        raise UsageError(f"{path} mixes in records this inferbench cannot read ({found}; it reads "
                         f"{', '.join(map(str, sorted(SUPPORTED_SCHEMAS)))}): {hint}")
    if malformed:
        raise UsageError(f"{path} holds {len(malformed)} record(s) that claim an inferbench schema but are "
                         f"incomplete, e.g. {malformed[0]}")
    return records


def load(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A folder (or file) of result records as a DataFrame, one row per cell.

    Nested blocks are flattened with dots (``latency_ms.p50``, ``parity.status``,
    ``environment.cpu.model``); raw latencies stay a list column (``raw_latencies_ms``).
    """
    import pandas as pd

    records = iter_records(Path(path))
    if not records:
        raise UsageError(f"no inferbench result records found under {path}")
    raw = [r.get("raw_latencies_ms") for r in records]
    flat = pd.json_normalize([{k: v for k, v in r.items() if k != "raw_latencies_ms"} for r in records])
    flat["raw_latencies_ms"] = raw
    return flat
