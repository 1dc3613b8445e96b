"""The ledger of a Slurm sweep's jobs (``<sweep>/.slurm/jobs.json``): each job's id, name, machine, cells and how it
ended, kept beside the records so that ``--resume`` knows what each cell's last job did."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..base.files import atomic_write_text
from ..base.reading import read_json

#: The sweep's folder of submitit's job files (pickles, logs) and the ledger of its jobs.
FOLDER = ".slurm"
LEDGER = "jobs.json"


class Ledger:
    """The sweep's jobs, kept beside its records (``.slurm/jobs.json``): each job's id, name, machine, cells and how
    it ended, so that ``--resume`` knows what each cell's last job did."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            data = read_json(path, 2**24, "the sweep's Slurm jobs") if path.exists() else {}
        except ValueError as exc:
            data = exc
        if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
            raise UsageError(f"{path} is not the ledger inferbench keeps of a sweep's jobs ({str(data)[:120]}): move "
                             "it aside, and --resume submits every cell without a record again")
        self.token: str = data.get("token") or uuid.uuid4().hex[:6]
        self.jobs: list[dict[str, Any]] = list(data.get("jobs", []))

    def add(self, job_id: str, name: str, machine: str | None, cells: list[str]) -> None:
        self.jobs.append({"id": job_id, "name": name, "machine": machine, "cells": cells, "state": "SUBMITTED",
                          "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        self._save()

    def end(self, job_id: str, state: str) -> None:
        for job in self.jobs:
            if job["id"] == job_id:
                job["state"] = state
        self._save()

    def last(self, machine: str | None, cells: list[str]) -> dict[str, Any] | None:
        """The newest job that measured all of ``cells`` on ``machine``."""
        return next((j for j in reversed(self.jobs) if j["machine"] == machine and set(cells) <= set(j["cells"])),
                    None)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"token": self.token, "jobs": self.jobs}, indent=1) + "\n")
