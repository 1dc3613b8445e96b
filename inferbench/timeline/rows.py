"""A record as one row of the history store: its typed fields (identity, machine, versions, machine speed, validity,
centre and interval, energy, parity, agreement and accuracy), never a copy of its file. ``COLUMNS`` declares each
column once, with its SQL type; docs/history.md lists them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..records.table import busy, summary_row
from ..registry.frameworks import FRAMEWORKS

#: column -> SQL type, in the store's order (DuckDB and PostgreSQL both read these types)
COLUMNS: dict[str, str] = {
    "record_id": "TEXT PRIMARY KEY",  # the record's content digest: a record is stored once, however often added
    "run_id": "TEXT", "created_at": "TIMESTAMPTZ", "source": "TEXT",
    # the cell
    "model": "TEXT", "resolution": "TEXT", "batch_size": "INTEGER", "framework": "TEXT", "precision": "TEXT",
    "variant": "TEXT", "scenario": "TEXT", "task": "TEXT",
    # the machine
    "host": "TEXT", "device": "TEXT", "device_name": "TEXT", "cpu_model": "TEXT", "cpu_flags": "TEXT",
    "gpu_driver": "TEXT", "threads": "INTEGER",
    # the versions
    "runtime_version": "TEXT", "inferbench_version": "TEXT", "inferbench_commit": "TEXT", "python": "TEXT",
    "packages": "TEXT",  # JSON: every recorded package's version (the environment's diff at a step)
    # how the machine was
    "speed_gflops": "DOUBLE PRECISION", "valid": "BOOLEAN", "busy": "BOOLEAN", "validity_reason": "TEXT",
    # what was measured
    "status": "TEXT", "parity": "TEXT", "p50_ms": "DOUBLE PRECISION", "p50_ci95_low_ms": "DOUBLE PRECISION",
    "p50_ci95_high_ms": "DOUBLE PRECISION", "p99_ms": "DOUBLE PRECISION", "p99_pooled_ms": "DOUBLE PRECISION",
    "throughput_per_s": "DOUBLE PRECISION", "n": "INTEGER", "rounds": "INTEGER", "stability": "TEXT",
    "energy_j_per_inference": "DOUBLE PRECISION", "net_energy_j_per_inference": "DOUBLE PRECISION",
    "top1_agreement": "DOUBLE PRECISION", "top1_accuracy": "DOUBLE PRECISION", "max_abs_err": "DOUBLE PRECISION",
}


#: A step re-measured as an A/B in one run (``inferbench history confirm``): one row a confirming run.
CONFIRMATIONS: dict[str, str] = {
    "confirmation_id": "TEXT PRIMARY KEY",  # the step's id and the confirming run's folder, digested
    "step_id": "TEXT", "series": "TEXT", "at_run": "TEXT", "run_dir": "TEXT", "confirmed_at": "TIMESTAMPTZ",
    "this_side": "TEXT",  # "after" or "before": which side of the step this install is (B, --ab-python, the other)
    "other_python": "TEXT", "ratio": "DOUBLE PRECISION",  # the step's ratio, after over before, paired in rounds
    "ratio_ci95_low": "DOUBLE PRECISION", "ratio_ci95_high": "DOUBLE PRECISION", "verdict": "TEXT",
}


def record_id(record: Mapping[str, Any]) -> str:
    """The digest of a record's content (its file's JSON, keys sorted, without where it was read from)."""
    content = {k: v for k, v in record.items() if not k.startswith("_")}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:32]


def runtime_version(record: Mapping[str, Any]) -> str | None:
    """The version of the package that runs the record's framework (the first of its distributions recorded)."""
    packages = (record.get("environment") or {}).get("packages") or {}
    entry = FRAMEWORKS.get(record["framework"])
    names = entry.distributions if entry else ()
    return next((f"{name} {packages[name]}" for name in names if packages.get(name)), None)


def created(text: Any) -> datetime | None:
    """A record's ``created_at`` as an aware time (UTC when it names no zone), None when it is not one."""
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def row(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` (a dict at the current schema, as :func:`inferbench.records.load.iter_records` gives) as a row."""
    summary = summary_row(record)
    env = record.get("environment") or {}
    cpu = env.get("cpu") or {}
    own = env.get("inferbench") or {}
    parity = record.get("parity") or {}
    speed = ((record.get("machine_state") or {}).get("speed") or {}).get("gflops_median")
    return {
        "record_id": record_id(record), "run_id": record.get("run_id"), "created_at": created(record.get("created_at")),
        "source": record.get("_source"),
        **{k: summary[k] for k in ("model", "framework", "precision", "variant", "task", "host", "device",
                                   "device_name", "valid", "validity_reason", "status", "parity", "p50_ms",
                                   "p50_ci95_low_ms", "p50_ci95_high_ms", "p99_ms", "p99_pooled_ms",
                                   "throughput_per_s", "n", "rounds", "stability", "energy_j_per_inference",
                                   "net_energy_j_per_inference", "top1_accuracy")},
        "resolution": str(record["resolution"]), "batch_size": record["batch_size"],
        "scenario": record.get("scenario", "inference"),
        "cpu_model": cpu.get("model"), "cpu_flags": ",".join(sorted(cpu.get("flags") or [])),
        "gpu_driver": ((record.get("gpu_state") or {}).get("start") or {}).get("driver"),
        "threads": (record.get("config") or {}).get("threads"),
        "runtime_version": runtime_version(record), "inferbench_version": own.get("version"),
        "inferbench_commit": own.get("commit"), "python": env.get("python"),
        "packages": json.dumps(env.get("packages") or {}, sort_keys=True),
        "speed_gflops": speed, "busy": busy(record),
        "top1_agreement": parity.get("top1_agreement"), "max_abs_err": parity.get("max_abs_err"),
    }
