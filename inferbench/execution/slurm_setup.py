"""What ``--executor slurm`` asks of Slurm, and the checks before anything is written: submitit's parameters of one
group's job (:func:`parameters`), its name and time limit, the set-up checked in one line each (:func:`preflight`:
the commands on PATH, the controller and its accounting answering, the partition and nodes known, a job as the
sweep will submit it accepted by ``sbatch --test-only``), and what ``squeue`` says of the jobs still queued."""

from __future__ import annotations

import getpass
import math
import shutil
import subprocess
from typing import Any

from ..base.errors import UsageError, optional
from ..spec import CellKey, RunConfig, SlurmConfig

SLURM_EXTRA = "slurm"
#: A job's time limit beyond twice its group's estimate: the job's own start (Python, the imports, the records).
MARGIN_S = 300.0
#: Seconds a Slurm command may take to answer before the set-up is called unanswered.
ASK_S = 20.0
#: What each Slurm command that fails is a sign of.
HINTS = {"sacct": " (submitit follows each job through Slurm's accounting: slurmdbd)",
         "sinfo": " (is slurmctld up, and this machine its client? SLURM_CONF names the cluster's slurm.conf)",
         "sbatch": " (a job as the sweep submits it: --partition, --account, --gpus-per-job, --machines, --sbatch)"}


def import_submitit() -> Any:
    return optional("submitit", SLURM_EXTRA, "--executor slurm")


def settings(config: RunConfig) -> SlurmConfig:
    return config.slurm or SlurmConfig()


def time_limit_min(estimate_s: float) -> int:
    """A job's time limit in minutes: its group's estimate twice over, plus :data:`MARGIN_S`."""
    return math.ceil((2.0 * estimate_s + MARGIN_S) / 60.0)


def job_name(token: str, number: int, cell: CellKey, machine: str | None) -> str:
    """Unique per sweep (its token) and per job (its number), and readable in squeue: the group it measures."""
    where = f"-{machine}" if machine else ""
    return f"inferbench-{token}-{number:03d}-{cell.model}-{cell.resolution}-bs{cell.batch_size}{where}"


def _extra(slurm: SlurmConfig) -> dict[str, str]:
    return {k.strip().lstrip("-").replace("-", "_"): v for k, _, v in (o.partition("=") for o in slurm.sbatch)}


def parameters(config: RunConfig, machine: str | None, limit_min: int, name: str) -> dict[str, Any]:
    """submitit's parameters of one group's job: one node held whole, one task, the batch script running the group
    itself (no srun step: a step would be bound to one CPU unless told every one), the GPUs a GPU run asks for."""
    slurm = settings(config)
    gpus = slurm.gpus_per_job if slurm.gpus_per_job is not None else int(config.device.kind == "gpu")
    out: dict[str, Any] = {"name": name, "timeout_min": limit_min, "nodes": 1, "tasks_per_node": 1,
                           "slurm_exclusive": True, "slurm_use_srun": False}
    for key, value in (("gpus_per_node", gpus or None), ("slurm_partition", slurm.partition),
                       ("slurm_account", slurm.account), ("slurm_nodelist", machine),
                       ("slurm_additional_parameters", _extra(slurm) or None)):
        if value is not None:
            out[key] = value
    return out


def _ask(command: list[str]) -> str:
    """A Slurm command's output (and its standard error), or a UsageError saying it did not answer."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=ASK_S, check=False)
    except subprocess.TimeoutExpired:
        raise UsageError(f"--executor slurm: {command[0]} did not answer within {ASK_S:.0f} s (is slurmctld up?)"
                         ) from None
    if done.returncode:
        lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
        first = (lines[-1] if lines else f"exit status {done.returncode}")[:200]
        raise UsageError(f"--executor slurm: {' '.join(command[:2])} failed: {first}{HINTS.get(command[0], '')}")
    return done.stdout + done.stderr


def test_only(config: RunConfig, machine: str | None) -> list[str]:
    """``sbatch --test-only`` of a job as the sweep submits it for ``machine``: what Slurm would refuse (a partition
    the account may not use, a node outside it, more GPUs than a node has) is found before anything is written."""
    slurm = settings(config)
    asked = parameters(config, machine, slurm.time_limit_min or 5, "inferbench-check")
    flags = {"nodes": 1, "ntasks_per_node": 1, "time": asked["timeout_min"], "gpus_per_node": asked.get(
        "gpus_per_node"), "partition": slurm.partition, "account": slurm.account, "nodelist": machine, **_extra(slurm)}
    return ["sbatch", "--test-only", "--exclusive", *(f"--{k.replace('_', '-')}={v}" for k, v in flags.items()
                                                      if v is not None), "--wrap", "true"]


def preflight(config: RunConfig) -> None:
    """Before anything is written: submitit installed and, on a Slurm cluster, its commands on PATH, its controller
    and accounting answering, the partition and every named machine known to it, and a job as the sweep submits it
    accepted (one line each, exit 2)."""
    import_submitit()
    slurm = settings(config)
    if slurm.cluster == "local":
        return
    # (submitit's Slurm executor itself refuses to start without srun, which each job runs its task through)
    missing = [tool for tool in ("sbatch", "srun", "squeue", "sacct", "scancel", "sinfo") if shutil.which(tool) is None]
    if missing:
        raise UsageError(f"--executor slurm: no {missing[0]} on PATH: is this a Slurm login node? (--slurm-cluster "
                         "local runs each job as a process of this machine)")
    partitions = [p.strip().rstrip("*") for p in _ask(["sinfo", "-h", "-o", "%P"]).split()]
    _ask(["sacct", "-n", "-X", "-S", "now", "-o", "JobID"])
    if slurm.partition and slurm.partition not in partitions:
        raise UsageError(f"--partition {slurm.partition}: no such partition (sinfo lists {', '.join(partitions)})")
    nodes = set(_ask(["sinfo", "-h", "-N", "-o", "%N"]).split())
    unknown = [m for m in config.machines if m not in nodes]
    if unknown:
        raise UsageError(f"--machines {unknown[0]}: no Slurm node of that name (sinfo -N lists "
                         f"{', '.join(sorted(nodes))})")
    for machine in config.machines or (None,):
        _ask(test_only(config, machine))


def queue() -> dict[str, tuple[str, str]] | None:
    """This user's jobs Slurm's controller still lists: id -> (state, reason); None when squeue does not answer."""
    try:
        done = subprocess.run(["squeue", "-h", "-u", getpass.getuser(), "-o", "%i|%T|%r"], capture_output=True,
                              text=True, timeout=ASK_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode:
        return None
    rows = [line.split("|") for line in done.stdout.splitlines() if line.count("|") == 2]
    return {job_id.strip(): (state.strip(), reason.strip()) for job_id, state, reason in rows}
