"""Sweeps on Slurm (``--executor slurm``): each group of cells a Slurm job, submitted through submitit.

The driver (the command's process, on a login node) exports every artifact once, as a local sweep does, into a cache
every node reads (a shared filesystem: submitit's own job files need one too); each group (one model, resolution
and batch size, on one machine) becomes a job on one node held whole (``--exclusive``: no two measurements ever share
a node), which checks every artifact against its hash, runs the one-group pipeline there (its worker processes,
interleaved rounds, the node's own machine state and environment: :func:`inferbench.execution.remote.measure_here`)
and returns the records; the driver writes each atomically as its job ends. ``--machines a,b`` runs every group on
each named Slurm node (its ``--nodelist``), its records in a folder per machine. What a job asks for, and the checks
before anything is written: :mod:`.slurm_setup`.

Each job is named uniquely and kept in the sweep's ledger (:mod:`.slurm_ledger`). A job cancelled, pre-empted,
timed out or lost with its node ends without records (SIGTERM ends it at once), its cells left unmeasured, said in a
line: ``--resume`` measures them again (and says so), takes the records of a job that ended while no sweep was
waiting, and waits for one still queued or running instead of submitting it twice. A job whose group raised, or that
failed on its node, fails its cells with why. Ctrl-C cancels every job.

submitit is imported only here, and only for ``--executor slurm`` (the ``slurm`` extra).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.codec import encode
from ..exporters import cache as artifact_cache
from ..records.record import Record, parse
from ..spec import CellKey, RunConfig
from .budget import group_estimate, say
from .pipeline import on_machine
from .progress import Progress
from .remote import kinds_of, measure_here, not_run, received, registries
from .slurm_ledger import FOLDER, LEDGER, Ledger
from .slurm_setup import MARGIN_S, import_submitit, job_name, parameters, preflight, queue, settings, time_limit_min

if TYPE_CHECKING:  # the group loop's types
    from .budget import Deadline
    from .executors import Finished

__all__ = ["FOLDER", "LEDGER", "SlurmGroups", "measure_job", "preflight"]

#: Seconds between two looks for the jobs' result files, and between two looks at Slurm's queue (and lines saying it).
POLL_S = 2.0
SAY_EVERY_S = 30.0
#: Seconds a completed job's result file may take to appear on the driver's view of a shared filesystem.
RESULT_WAIT_S = 30.0
#: How a job that ended without its records ended, in sacct's words, when its cells are measured again on --resume
#: (any other end without records fails its cells: it would fail again).
ENDED_EARLY = ("CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "REQUEUED", "UNKNOWN")
#: Every state sacct gives a job that has ended; the others are still to end, or (UNKNOWN: a job sacct has not
#: heard of yet, or sacct not answering) say nothing: such a job has ended when squeue no longer lists it.
ENDED = (*(s for s in ENDED_EARLY if s not in ("UNKNOWN", "REQUEUED")), "COMPLETED", "FAILED", "OUT_OF_MEMORY",
         "REVOKED", "SPECIAL_EXIT")


def _end_at_once(number: int, frame: Any) -> None:
    os._exit(128 + number)


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
    for number in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(number, _end_at_once)
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
    names = [cell.filename for cell in cells]
    left = None if deadline_at is None else deadline_at - time.time()
    if left is not None and left <= 0:  # started after the budget passed: its cells are left for --resume
        return {"cells": names, "records": [None] * len(cells), "phases": {}, "where": where["slurm"]}
    return {"cells": names, **measure_here(config, cells, path, failed, run_id, batch_sizes, where, left),
            "where": where["slurm"]}


# --------------------------------------------------------------------------- the driver
class SlurmGroups:
    """The Slurm executor of the pipeline's group loop (:func:`inferbench.execution.pipeline._execute`): each group a
    job, submitted at once (Slurm's queue orders them; submitit's local executor runs one at a time), its records
    written as it ends; a job that ended early leaves its cells unmeasured, a failed one fails them with why."""

    def __init__(self, config: RunConfig, run_id: str, run_dir: Path, progress: Progress, strict: bool = False) -> None:
        submitit = import_submitit()
        self.config, self.run_id, self.progress, self.slurm = config, run_id, progress, settings(config)
        self.jobs_dir = run_dir / FOLDER
        self.ledger = Ledger(self.jobs_dir / LEDGER)
        self.executor = submitit.AutoExecutor(folder=self.jobs_dir / "%j", cluster=self.slurm.cluster)
        self.running: list[tuple[Any, str | None, list[CellKey], Path]] = []
        self.finished: list[Finished] = []
        self.started = self.said = time.monotonic()
        self.queued: dict[str, tuple[str, str]] | None = None  # squeue's last word
        self.cells_left, self.groups_left = 0, 0

    def start(self, machine: str | None, group: list[CellKey], folder: Path, failed: dict[str, str],
              batch_sizes: tuple[int, ...], deadline: Deadline | None) -> None:
        c, config = group[0], self.config
        label = _label(c, machine)
        cells = sorted(cell.filename for cell in group)
        prior = self.ledger.last(machine, cells)
        if prior is not None and self._adopted(prior, machine, group, folder, label):
            return
        estimate = group_estimate(self.progress, group, config)
        limit = self.slurm.time_limit_min or time_limit_min(estimate)
        name = job_name(self.ledger.token, len(self.ledger.jobs) + 1, c, machine)
        self.executor.update_parameters(**parameters(config, machine, limit, name))
        deadline_at = None if deadline is None else time.time() + max(0.0, deadline.left())
        try:
            job = self.executor.submit(measure_job, encode(config), [encode(cell) for cell in group],
                                       registries(group), str(folder), kinds_of(group, folder), failed, self.run_id,
                                       batch_sizes, machine, deadline_at, time.time())
        except Exception as exc:  # noqa: BLE001 - sbatch refused it: its cells fail with why, the others go on
            why = f"sbatch refused its job: {_last_line(str(exc))}"
            self.finished.append((machine, group, self._failed(group, folder, machine, why, None)))
            return
        self.running.append((job, machine, group, folder))  # first: Ctrl-C cancels it whatever follows
        self.ledger.add(str(job.job_id), name, machine, cells)
        if self.progress.measure_started is None:  # the ETA comes from the groups' phases as the jobs send them back
            self.progress.measuring(self.cells_left, self.groups_left)
        why = "--job-time-limit" if self.slurm.time_limit_min else \
            f"its estimate {say(estimate)} twice over, plus {say(MARGIN_S)}"
        self.progress.say(label, f"job {job.job_id} submitted: {len(group)} cell{'s' if len(group) > 1 else ''}, "
                                 f"time limit {limit} min ({why})")

    def _adopted(self, prior: dict[str, Any], machine: str | None, group: list[CellKey], folder: Path,
                 label: str) -> bool:
        """--resume, for a group an earlier invocation submitted: its job's records when it ended with them, or the
        job itself while Slurm still lists it (never submitted twice); else its cells are measured again, and said
        so."""
        state = str(prior["state"])
        if state == "SUBMITTED":  # the earlier invocation did not see it end
            job = self.executor._executor.job_class(folder=self.jobs_dir / "%j", job_id=prior["id"])
            listed = {} if self.slurm.cluster == "local" else (queue() or {})
            if job.paths.result_pickle.exists() or prior["id"] in listed:
                how = f"waiting for it ({listed[prior['id']][0]})" if prior["id"] in listed else \
                    "it ended while no sweep waited for it: its records are taken"
                self.progress.result(label, f"job {prior['id']}, submitted by an earlier invocation: {how}")
                self.running.append((job, machine, group, folder))
                return True
            state = self._state(job)
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
        """The groups whose jobs ended (at least one): their records, None for cells left unmeasured, or their
        cells failed with why."""
        while not self.finished:
            look = time.monotonic() - self.said >= SAY_EVERY_S
            if look and self.slurm.cluster != "local":
                self.queued = queue()  # every SAY_EVERY_S at most, however many jobs end meanwhile
            if look:
                self.said = time.monotonic()
            for entry in list(self.running):
                if self._ended(entry[0], look):
                    self.running.remove(entry)
                    self.finished.append((entry[1], entry[2], self._collect(*entry)))
            if not self.finished:
                if look:
                    self._say_waiting()
                time.sleep(POLL_S)
        finished, self.finished = self.finished, []
        return finished

    def _ended(self, job: Any, look: bool) -> bool:
        """Has ``job`` ended? Its result file says so at once; else Slurm's word: sacct's (through submitit's
        watcher, which asks less often as the sweep grows), asked again at once when squeue no longer lists it."""
        if job.paths.result_pickle.exists():
            return True
        if self.slurm.cluster == "local":
            return bool(job.done())
        if _word(job.state) in ENDED:
            return True
        if look and self.queued is not None and str(job.job_id) not in self.queued:
            return True  # Slurm's controller no longer lists it: ended, whatever sacct says
        return False

    def _state(self, job: Any) -> str:
        """How ``job`` ended, in sacct's word, asked now (submitit's local executor: whether its process was
        interrupted)."""
        if self.slurm.cluster == "local":  # its process was interrupted, or ended some other way
            return "INTERRUPTED" if _word(job.state) == "INTERRUPTED" else "ENDED"
        try:
            return _word(job.get_info(mode="force").get("State") or "UNKNOWN")
        except Exception:  # noqa: BLE001 - sacct not answering: not known
            return "UNKNOWN"

    def _collect(self, job: Any, machine: str | None, group: list[CellKey], folder: Path) -> list[Record | None]:
        label, job_id = _label(group[0], machine), str(job.job_id)
        state = "" if job.paths.result_pickle.exists() else self._state(job)
        if state == "COMPLETED":  # a shared filesystem may show the result file a little after Slurm's word
            _appears(job.paths.result_pickle, RESULT_WAIT_S)
        if not job.paths.result_pickle.exists():  # ended without records: early, or failed on its node
            self.ledger.end(job_id, state)
            if self.slurm.cluster == "local" or state in ENDED_EARLY:  # cancelled, timed out, pre-empted, lost
                self.progress.result(label, f"job {job_id} ended ({state}) before writing its records: its "
                                            f"{len(group)} cell(s) are left unmeasured", failure=True)
                return [None] * len(group)
            why = f"its Slurm job {job_id} ended {state} without records: {_last_line(job.stderr() or '')}"
            return self._failed(group, folder, machine, why, job_id)
        try:
            result = job.result()
        except Exception as exc:  # noqa: BLE001 - the group raised on its node (submitit's FailedJobError)
            self.ledger.end(job_id, "FAILED")
            return self._failed(group, folder, machine, f"its Slurm job {job_id} failed: {_raised(exc)}", job_id)
        self.ledger.end(job_id, "COMPLETED")
        if result.get("phases"):
            self.progress.add_phases(result["phases"])  # the next group's time: as measured, not estimated
        where = result.get("where", {})
        self.progress.say(label, f"job {job_id} ended on {where.get('node')} ({where.get('queued_s')} s from its "
                                 "submission to its start)")
        by_cell = dict(zip(result.get("cells", []), result["records"]))  # a resumed group: its own cells, by name
        return [None if by_cell.get(cell.filename) is None else parse(by_cell[cell.filename],
                                                                      "a record from a Slurm job") for cell in group]

    def _failed(self, group: list[CellKey], folder: Path, machine: str | None, why: str,
                job_id: str | None) -> list[Record | None]:
        return [not_run(self.config, cell, why, self.run_id, folder,
                        {"slurm": {"job_id": job_id, "machine": machine, "why": "not run"}}) for cell in group]

    def _say_waiting(self) -> None:
        queued = self.queued or {}
        states = [queued.get(str(job.job_id), ("not listed", "")) for job, *_ in self.running]
        counts = ", ".join(f"{sum(s == state for s in states)} {state[0].lower()}"
                           + (f" ({state[1]})" if state[1] and state[1] != "None" else "")
                           for state in sorted(set(states)))
        said = counts if self.queued is not None else "squeue does not answer"
        self.progress.say("slurm", f"{len(self.running)} job(s): {said}; {time.monotonic() - self.started:.0f} s")

    def cancel(self) -> None:
        for job, *_ in self.running:  # Ctrl-C, SIGTERM: nothing keeps measuring on the cluster
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001, S110 - a job already gone: nothing to cancel
                pass


def _appears(path: Path, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(1.0)


def _label(cell: CellKey, machine: str | None) -> str:
    return cell.group_label + on_machine(machine)


def _word(state: Any) -> str:
    """sacct's state as one word ("CANCELLED by 0": CANCELLED)."""
    return (str(state).split() or ["UNKNOWN"])[0].upper()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no message")[:300]


def _raised(exc: BaseException) -> str:
    """What a job's group raised, in one line: the last line of the traceback submitit hands back."""
    parts = str(exc).split("-" * 22)
    return _last_line(parts[1] if len(parts) > 2 else str(exc))
