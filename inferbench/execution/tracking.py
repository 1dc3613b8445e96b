"""Results that travel: ``--log-to mlflow`` and ``--log-to wandb`` log each cell as one tracking run as soon
as its record is written, grouped by the run or sweep folder (its run id).

Each tracking run gets the cell's ``summary.csv`` row, split into parameters (text: framework, model,
device, status, parity...) and metrics (numbers: p50_ms, the interval, p99_ms, throughput, memory,
energy...), the run's configuration (threads, rounds, duration, seed, weights, model files), tags that
group and identify it, and the record itself as a file. Where the runs go is each tool's own setting:
MLflow's ``MLFLOW_TRACKING_URI`` (MLflow's default: ``sqlite:///mlflow.db`` and ``./mlruns`` in the working
folder, offline; ``mlflow ui`` shows them) and
``MLFLOW_EXPERIMENT_NAME`` (default ``inferbench``); W&B's ``WANDB_PROJECT`` (default ``inferbench``),
``WANDB_DIR`` and ``WANDB_MODE``, offline unless set (``wandb sync`` uploads later). Neither package is
imported unless asked for.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .. import __version__
from ..base.errors import UsageError
from ..records.record import record_key
from ..records.table import summary_row

#: --log-to target -> (import name, pip extra that installs it)
TARGETS = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
PROJECT = "inferbench"


def check(targets: tuple[str, ...] | list[str]) -> None:
    """Unknown or uninstalled targets are bad input, found before anything runs."""
    for target in targets:
        if target not in TARGETS:
            raise UsageError(f"--log-to {target}: valid targets are {', '.join(TARGETS)}")
        module, extra = TARGETS[target]
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"--log-to {target} needs {module}: pip install -e \".[{extra}]\"")
        if target == "mlflow":
            check_mlflow_uri(os.environ.get("MLFLOW_TRACKING_URI"), os.environ.get("MLFLOW_ALLOW_FILE_STORE"))


#: Tracking URI schemes MLflow 3 stores runs in (a server, a database, Databricks).
MLFLOW_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks", "databricks-uc", "uc")


def check_mlflow_uri(uri: str | None, allow_file_store: str | None = None) -> None:
    """A tracking URI MLflow will take, found before anything runs: MLflow 3 refuses its file store (a ``file:``
    URI or a plain path) unless MLFLOW_ALLOW_FILE_STORE=true, with a message that reads like a notice."""
    if not uri:
        return  # MLflow's default: sqlite:///mlflow.db in the working folder
    scheme = urlparse(uri).scheme.split("+")[0].lower()  # postgresql+psycopg2
    if scheme in MLFLOW_SCHEMES:
        return
    if scheme in ("", "file") or len(scheme) == 1:  # a path (C:\... has a one-letter scheme)
        if str(allow_file_store).lower() in ("1", "true"):
            return
        raise UsageError(f"MLFLOW_TRACKING_URI={uri[:200]} is a file store, which MLflow 3 no longer writes to "
                         "(set MLFLOW_ALLOW_FILE_STORE=true to use it anyway); use sqlite:///mlflow.db or a server's "
                         "http(s):// address")
    raise UsageError(f"MLFLOW_TRACKING_URI={uri[:200]}: MLflow cannot store runs at a {scheme}: URI (it takes "
                     f"{', '.join(MLFLOW_SCHEMES)}, or a file store with MLFLOW_ALLOW_FILE_STORE=true)")


def where(targets: tuple[str, ...]) -> str:
    """One line: where this run's tracking runs went."""
    places = {"mlflow": f"mlflow ({os.environ.get('MLFLOW_TRACKING_URI') or 'sqlite:///mlflow.db in this folder'}, "
                        f"experiment {os.environ.get('MLFLOW_EXPERIMENT_NAME') or PROJECT}; see: mlflow ui)",
              "wandb": f"wandb (project {os.environ.get('WANDB_PROJECT') or PROJECT}, "
                       f"{os.environ.get('WANDB_MODE') or 'offline'}; offline runs upload with: wandb sync "
                       f"{os.environ.get('WANDB_DIR') or '.'}/wandb/offline-run-*)"}
    return "logged each cell to " + " and ".join(places[t] for t in targets)


def fields(record: dict[str, Any]) -> tuple[dict[str, str], dict[str, float], dict[str, str]]:
    """A record as (parameters, metrics, tags)."""
    params: dict[str, str] = {}
    metrics: dict[str, float] = {}
    for key, value in summary_row(record).items():
        if isinstance(value, bool) or value is None or value == "":
            if value is not None and value != "":
                params[key] = str(value)
        elif isinstance(value, (int, float)):
            if math.isfinite(value):
                metrics[key] = float(value)
        else:
            params[key] = str(value)
    for key in ("resolution", "batch_size"):  # identity, not measurements (a size "384x640" is text already)
        params[key] = str(params.pop(key)) if key in params else str(int(metrics.pop(key)))
    config = record.get("config") or {}
    timing = config.get("timing") or {}
    params.update({"threads": str(config.get("threads")), "rounds_requested": str(timing.get("rounds")),
                   "duration_s": str(timing.get("min_duration_s")), "seed": str(config.get("seed")),
                   "weights": str(config.get("weights")), "inferbench_version": __version__})
    for f in config.get("model_files") or []:
        params[f"model_file.{f['name']}"] = f["path"]
    tags = {"inferbench.group": str(record.get("run_id")), "inferbench.cell": _cell_name(record),
            "inferbench.status": str(record.get("status")), "inferbench.parity": str(record["parity"]["status"])}
    return params, metrics, tags


def _cell_name(record: dict[str, Any]) -> str:
    return record_key(record).removesuffix(".json")


def log(targets: tuple[str, ...], record: dict[str, Any], path: Path) -> dict[str, str]:
    """Log one written record to every target; returns what could not be logged ("--log-to TARGET CELL" ->
    why, one line); the record on disk stays as it is."""
    failures = {}
    for target in targets:
        try:
            {"mlflow": _mlflow, "wandb": _wandb}[target](record, Path(path), *fields(record))
        except Exception as exc:  # noqa: BLE001 - a tracking store's failure never loses the measurement
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            failures[f"--log-to {target} {_cell_name(record)}"] = first
    return failures


def _mlflow(record: dict[str, Any], path: Path, params: dict[str, str], metrics: dict[str, float],
            tags: dict[str, str]) -> None:
    import mlflow

    for name in ("mlflow", "alembic"):  # "creating initial MLflow database tables" is not for the user
        logging.getLogger(name).setLevel(logging.WARNING)
    mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT)
    with mlflow.start_run(run_name=tags["inferbench.cell"], tags=tags):
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        mlflow.log_artifact(str(path), artifact_path="record")


def _wandb(record: dict[str, Any], path: Path, params: dict[str, str], metrics: dict[str, float],
           tags: dict[str, str]) -> None:
    import wandb

    run = wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT, group=tags["inferbench.group"],
                     name=tags["inferbench.cell"], config=params, mode=os.environ.get("WANDB_MODE") or "offline",  # type: ignore[arg-type]
                     tags=[tags["inferbench.status"], f"parity-{tags['inferbench.parity']}"], reinit="create_new",
                     settings=wandb.Settings(silent=True, console="off"))
    try:
        run.summary.update(metrics)
        run.save(str(path), base_path=str(path.parent), policy="now")
    finally:
        run.finish()
