"""Sweeps on Slurm (``--executor slurm``): each group of cells a Slurm job, submitted through submitit.

The driver (the command's process, on a login node) exports every artifact once, as a local sweep does, into a cache
every node reads (a shared filesystem: submitit's own job files need one too); each group (one model, resolution
and batch size, on one machine) becomes a job on one node held whole (``--exclusive``: no two measurements ever share
a node), which checks every artifact against its hash, runs the one-group pipeline there (its worker processes,
interleaved rounds, the node's own machine state and environment: :func:`inferbench.execution.remote.measure_here`)
and returns the records; the driver writes each atomically as its job ends. ``--machines a,b`` runs every group on
each named Slurm node (its ``--nodelist``), its records in a folder per machine.

Each job is named uniquely (the sweep's token, the job's number, its group) and kept in the sweep's ledger
(``.slurm/jobs.json``); its time limit is its group's estimate twice over plus :data:`MARGIN_S` unless
``--job-time-limit`` says. A job cancelled, pre-empted, timed out or lost with its node leaves its cells without a
record, said in a line: ``--resume`` measures them again (and says so), takes the records of a job that ended while
no sweep was waiting, and waits for one still queued or running instead of submitting it twice. A job whose cells
failed is their failed records, with why. Ctrl-C cancels every job.

submitit is imported only here, and only for ``--executor slurm`` (the ``slurm`` extra).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.codec import encode
from ..base.errors import UsageError, optional
from ..base.files import atomic_write_text
from ..base.reading import read_json
from ..exporters import cache as artifact_cache
from ..records.record import Record, parse
from ..spec import CellKey, RunConfig, SlurmConfig
from .budget import group_estimate, say
from .pipeline import on_machine
from .progress import Progress
from .remote import kinds_of, measure_here, not_run, received, registries

if TYPE_CHECKING:  # the group loop's types
    from .budget import Deadline
    from .executors import Finished

SLURM_EXTRA = "slurm"
#: The sweep's folder of submitit's job files (pickles, logs) and the ledger of its jobs.
FOLDER = ".slurm"
LEDGER = "jobs.json"
#: A job's time limit beyond twice its group's estimate: the job's own start (Python, the imports, the records).
MARGIN_S = 300.0
#: Seconds between two looks at the jobs, and between two lines saying what they are doing.
POLL_S = 2.0
SAY_EVERY_S = 30.0
#: States of a job still to end (sacct's).
LIVE = ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING", "UNKNOWN")
#: Seconds a Slurm command may take to answer before the set-up is called unanswered.
ASK_S = 20.0


def import_submitit() -> Any:
    return optional("submitit", SLURM_EXTRA, "--executor slurm")


def settings(config: RunConfig) -> SlurmConfig:
    return config.slurm or SlurmConfig()


# --------------------------------------------------------------------------- before anything is written
def _ask(command: list[str]) -> str:
    """A Slurm command's output, or a UsageError saying it did not answer."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=ASK_S, check=False)
    except subprocess.TimeoutExpired:
        raise UsageError(f"--executor slurm: {command[0]} did not answer within {ASK_S:.0f} s (is slurmctld up?)"
                         ) from None
    if done.returncode:
        first = ((done.stderr or done.stdout).strip().splitlines() or [f"exit status {done.returncode}"])[0][:200]
        why = " (submitit follows each job through Slurm's accounting: slurmdbd)" if command[0] == "sacct" else ""
        raise UsageError(f"--executor slurm: {' '.join(command[:2])} failed: {first}{why}")
    return done.stdout


def preflight(config: RunConfig) -> None:
    """Before anything is written: submitit installed and, on a Slurm cluster, its commands on PATH, its controller
    and accounting answering, the partition and every named machine known to it (one line each, exit 2)."""
    import_submitit()
    slurm = settings(config)
    if slurm.cluster == "local":
        return
    missing = [tool for tool in ("sbatch", "squeue", "sacct", "scancel", "sinfo") if shutil.which(tool) is None]
    if missing:
        raise UsageError(f"--executor slurm: no {missing[0]} on PATH: is this a Slurm login node? (--slurm-cluster "
                         "local runs each job as a process of this machine)")
    _ask(["sacct", "-n", "-X", "-S", "now", "-o", "JobID"])
    partitions = [p.strip().rstrip("*") for p in _ask(["sinfo", "-h", "-o", "%P"]).split()]
    if slurm.partition and slurm.partition not in partitions:
        raise UsageError(f"--partition {slurm.partition}: no such partition (sinfo lists {', '.join(partitions)})")
    nodes = set(_ask(["sinfo", "-h", "-N", "-o", "%N"]).split())
    unknown = [m for m in config.machines if m not in nodes]
    if unknown:
        raise UsageError(f"--machines {unknown[0]}: no Slurm node of that name (sinfo -N lists "
                         f"{', '.join(sorted(nodes))})")


# --------------------------------------------------------------------------- a job's submission
def time_limit_min(estimate_s: float) -> int:
    """A job's time limit in minutes: its group's estimate twice over, plus :data:`MARGIN_S`."""
    return math.ceil((2.0 * estimate_s + MARGIN_S) / 60.0)


def job_name(token: str, number: int, cell: CellKey, machine: str | None) -> str:
    """Unique per sweep (its token) and per job (its number), and readable in squeue: the group it measures."""
    where = f"-{machine}" if machine else ""
    return f"inferbench-{token}-{number:03d}-{cell.model}-{cell.resolution}-bs{cell.batch_size}{where}"


def parameters(config: RunConfig, machine: str | None, limit_min: int, name: str) -> dict[str, Any]:
    """submitit's parameters of one group's job: one node held whole, one task, the batch script running the group
    itself (no srun step: a step would be bound to one CPU unless told every one), the GPUs a GPU run asks for."""
    slurm = settings(config)
    gpus = slurm.gpus_per_job if slurm.gpus_per_job is not None else int(config.device.kind == "gpu")
    extra = {k.strip().lstrip("-").replace("-", "_"): v for k, _, v in (o.partition("=") for o in slurm.sbatch)}
    out: dict[str, Any] = {"name": name, "timeout_min": limit_min, "nodes": 1, "tasks_per_node": 1,
                           "slurm_exclusive": True, "slurm_use_srun": False}
    for key, value in (("gpus_per_node", gpus or None), ("slurm_partition", slurm.partition),
                       ("slurm_account", slurm.account), ("slurm_nodelist", machine),
                       ("slurm_additional_parameters", extra or None)):
        if value is not None:
            out[key] = value
    return out


class Ledger:
    """The sweep's jobs, kept beside its records (``.slurm/jobs.json``): each job's id, name, machine, cells and how
    it ended, so that ``--resume`` knows what each cell's last job did."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = read_json(path, 2**24, "the sweep's Slurm jobs") if path.exists() else {}
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


# --------------------------------------------------------------------------- the job
def measure_job(config_data: dict[str, Any], cells_data: list[dict[str, Any]], shipped: dict[str, Any], folder: str,
                kinds: list[str], failed: dict[str, str], run_id: str, batch_sizes: tuple[int, ...],
                machine: str | None, deadline_at: float | None, submitted_at: float) -> dict[str, Any]:
    """A Slurm job: one group measured on this node (:func:`inferbench.execution.remote.measure_here`), its artifacts
    read where the driver exported them and checked against their hashes, its rounds kept to what is left of
    --time-budget at ``deadline_at`` (seconds since the epoch: the budget counts the queue too)."""
    started = time.time()
    # scancel, pre-emption and the time limit send SIGTERM, then SIGKILL; submitit's own handler lets SIGTERM pass,
    # so the group would go on, its workers dying one by one into failed records: the job ends at once instead,
    # without records, and --resume measures its cells again
    signal.signal(signal.SIGTERM, lambda number, frame: os._exit(128 + number))
    config, cells = received(config_data, cells_data, shipped)
    path = Path(folder)
    damaged = [k for k in kinds if not artifact_cache.cached(path, k)]
    if damaged:
        raise RuntimeError(f"the artifacts ({', '.join(damaged)}) are not as the driver exported them: is the cache "
                           f"(--cache-dir) on a filesystem every node shares? ({path})")
    job_id = import_submitit().JobEnvironment().job_id
    where = {"slurm": {"job_id": str(job_id), "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                       "machine": machine, "partition": os.environ.get("SLURM_JOB_PARTITION"),
                       "hostname": socket.gethostname(), "cpus": len(os.sched_getaffinity(0)),
                       "queued_s": round(started - submitted_at, 1)}}
    left = None if deadline_at is None else deadline_at - time.time()
    if left is not None and left <= 0:  # started after the budget passed: its cells are left for --resume
        return {"records": [None] * len(cells), "phases": {}, "where": where["slurm"]}
    return {**measure_here(config, cells, path, failed, run_id, batch_sizes, where, left), "where": where["slurm"]}


# --------------------------------------------------------------------------- the driver
class SlurmGroups:
    """The Slurm executor of the pipeline's group loop (:func:`inferbench.execution.pipeline._execute`): each group a
    job, submitted at once (Slurm's queue orders them; submitit's local executor runs one at a time), its records
    written as it ends; a job that ended early leaves its cells for --resume, a failed one fails them with why."""

    def __init__(self, config: RunConfig, run_id: str, run_dir: Path, progress: Progress, strict: bool = False) -> None:
        submitit = import_submitit()
        self.config, self.run_id, self.progress, self.slurm = config, run_id, progress, settings(config)
        self.jobs_dir = run_dir / FOLDER
        self.ledger = Ledger(self.jobs_dir / LEDGER)
        self.executor = submitit.AutoExecutor(folder=self.jobs_dir / "%j", cluster=self.slurm.cluster)
        self.running: list[tuple[Any, str | None, list[CellKey], Path]] = []
        self.finished: list[Finished] = []
        self.started = self.said = time.monotonic()
        self.cells_left, self.groups_left = 0, 0

    def start(self, machine: str | None, group: list[CellKey], folder: Path, failed: dict[str, str],
              batch_sizes: tuple[int, ...], deadline: Deadline | None) -> None:
        c, config = group[0], self.config
        label = f"{c.model}@{c.resolution} bs{c.batch_size}{on_machine(machine)}"
        cells = sorted(cell.filename for cell in group)
        prior = self.ledger.last(machine, cells)
        if prior is not None and self._adopted(prior, machine, group, folder, label):
            return
        estimate = group_estimate(self.progress, group, config)
        limit = self.slurm.time_limit_min or time_limit_min(estimate)
        name = job_name(self.ledger.token, len(self.ledger.jobs) + 1, c, machine)
        self.executor.update_parameters(**parameters(config, machine, limit, name))
        deadline_at = None if deadline is None else time.time() + max(0.0, deadline.left())
        job = self.executor.submit(measure_job, encode(config), [encode(cell) for cell in group], registries(group),
                                   str(folder), kinds_of(group, folder), failed, self.run_id, batch_sizes, machine,
                                   deadline_at, time.time())
        self.ledger.add(str(job.job_id), name, machine, cells)
        self.running.append((job, machine, group, folder))
        if self.progress.measure_started is None:  # the ETA comes from the groups' phases as the jobs send them back
            self.progress.measuring(self.cells_left, self.groups_left)
        why = "--job-time-limit" if self.slurm.time_limit_min else \
            f"its estimate {say(estimate)} twice over, plus {say(MARGIN_S)}"
        self.progress.say(label, f"job {job.job_id} submitted: {len(group)} cell{'s' if len(group) > 1 else ''}, "
                                 f"time limit {limit} min ({why})")

    def _adopted(self, prior: dict[str, Any], machine: str | None, group: list[CellKey], folder: Path,
                 label: str) -> bool:
        """--resume, for a group an earlier invocation submitted: its job's records when it ended with them, or the
        job itself while it is still queued or running (never submitted twice); else its cells are measured again,
        and said so."""
        state = str(prior["state"])
        if state == "SUBMITTED":  # the earlier invocation did not see it end
            job = self.executor._executor.job_class(folder=self.jobs_dir / "%j", job_id=prior["id"])
            if job.paths.result_pickle.exists():
                self.progress.result(label, f"job {prior['id']} ended while no sweep waited for it: its records are "
                                            "taken")
                self.running.append((job, machine, group, folder))
                return True
            state = "NO PROCESS AND NO RESULT" if self.slurm.cluster == "local" else str(job.state).split()[0]
            if state.upper() in LIVE:
                self.progress.result(label, f"waiting for job {prior['id']} ({state}), submitted by an earlier "
                                            "invocation")
                self.running.append((job, machine, group, folder))
                return True
            self.ledger.end(prior["id"], state)
        if state != "COMPLETED":
            self.progress.result(label, f"measured again: its job {prior['id']} ended ({state}) before writing its "
                                        "records", failure=True)
        return False

    def busy(self) -> int:
        return len(self.running) + len(self.finished)

    def free(self, machine: str | None) -> bool:
        """May a group be submitted now? On Slurm, always (its queue holds the jobs, each node measuring one at a
        time); submitit's local executor runs them here, so one at a time."""
        return self.slurm.cluster != "local" or not self.running

    def wait(self) -> list[Finished]:
        """The groups whose jobs ended (at least one): their records, None for cells left for --resume, or their
        cells failed with why."""
        while not self.finished:
            for entry in list(self.running):
                job, machine, group, folder = entry
                if job.done():
                    self.running.remove(entry)
                    self.finished.append((machine, group, self._collect(job, machine, group, folder)))
            if not self.finished:
                self._say_waiting()
                time.sleep(POLL_S)
        finished, self.finished = self.finished, []
        return finished

    def _collect(self, job: Any, machine: str | None, group: list[CellKey], folder: Path) -> list[Record | None]:
        c = group[0]
        label = f"{c.model}@{c.resolution} bs{c.batch_size}{on_machine(machine)}"
        errors = import_submitit().core.utils
        try:
            result = job.result()
        except errors.UncompletedJobError as exc:  # no records: the job ended early, or its group raised
            state = str(job.state).split()[0].upper()
            self.ledger.end(str(job.job_id), state if state not in ("FINISHED", "COMPLETED") else "ENDED")
            if not isinstance(exc, errors.FailedJobError):  # cancelled, timed out, pre-empted, killed, node lost
                self.progress.result(label, f"job {job.job_id} ended ({state}) before writing its records: its "
                                            f"{len(group)} cell(s) have none; --resume measures them again",
                                     failure=True)
                return [None] * len(group)
            why = f"its Slurm job {job.job_id} failed: {_raised(exc)}"
            return [not_run(self.config, cell, why, self.run_id, folder,
                            {"slurm": {"job_id": str(job.job_id), "machine": machine, "why": "not run"}})
                    for cell in group]
        self.ledger.end(str(job.job_id), "COMPLETED")
        if result.get("phases"):
            self.progress.add_phases(result["phases"])  # the next group's time: as measured, not estimated
        where = result.get("where", {})
        self.progress.say(label, f"job {job.job_id} ended on {where.get('node')} ({where.get('queued_s')} s from its "
                                 "submission to its start)")
        return [None if data is None else parse(data, "a record from a Slurm job") for data in result["records"]]

    def _say_waiting(self) -> None:
        if time.monotonic() - self.said < SAY_EVERY_S:
            return
        self.said = time.monotonic()
        self.progress.say("slurm", f"{len(self.running)} job(s) queued or running (squeue says which); "
                                   f"{time.monotonic() - self.started:.0f} s")

    def cancel(self) -> None:
        for job, *_ in self.running:  # Ctrl-C, SIGTERM: nothing keeps measuring on the cluster
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001, S110 - a job already gone: nothing to cancel
                pass


def _raised(exc: BaseException) -> str:
    """What a job's group raised, in one line: the last line of the traceback submitit hands back."""
    parts = str(exc).split("-" * 22)
    trace = parts[1] if len(parts) > 2 else str(exc)
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]
