"""Child-process side: ``python -m inferbench.execution.worker JOB.json RESULT.json``.

Process plumbing only: read a job (:mod:`inferbench.spec`), run it (an export, or a cell through its
scenario, :mod:`inferbench.scenarios`), write the :class:`~inferbench.spec.ChildResult` atomically.
Each export and each cell runs in a process of its own, so no two frameworks ever share one (thread
pools, allocators and CUDA contexts fight).

Messages to the parent are JSON lines on the pipe ``INFERBENCH_CHANNEL_FD`` (``{"progress": phase}``,
``{"ready": true}``, ``{"block": {...}}``). A cell's worker sets up its session, says ready, then
measures one block per ``{"block": R}`` line on stdin, reads the idle device once the rounds are over
(``{"idle": true}``, every worker of the group at once) and ends at ``{"finish": true}`` (see
:mod:`inferbench.execution.rounds`). Any failure ends the worker with a failed result.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, cast

from ..base.codec import encode
from ..base.errors import MissingDependency, TooBig, UsageError
from ..base.files import atomic_write_text
from ..registry.scenarios import TunedSession, get_scenario
from ..spec import CellJob, ChildResult, job_from_json

_channel: Any = None


def send(message: dict[str, Any]) -> None:
    if _channel is not None:
        _channel.write(json.dumps(message, allow_nan=True) + "\n")
        _channel.flush()


def emit(phase: str) -> None:
    send({"progress": phase})


def failure(exc: BaseException) -> ChildResult:
    if isinstance(exc, (UsageError, MissingDependency)):
        return ChildResult(ok=False, error=str(exc), usage_error=isinstance(exc, UsageError))
    if isinstance(exc, TooBig):  # refused before it started, in one line
        return ChildResult(ok=False, error=str(exc))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ChildResult(ok=False, error=f"{type(exc).__name__}: {first}" if first else type(exc).__name__,
                       traceback=traceback.format_exc())


def run_job(text: str, commands: Any = None) -> ChildResult:
    """Run one job; every failure comes back as a result, never as an exception. A cell reads its
    commands from ``commands`` (lines; stdin in a worker)."""
    try:
        job = job_from_json(text)
        if isinstance(job, CellJob):
            from ..registry.models import register

            register(*job.config.model_files)
            return serve(job, sys.stdin if commands is None else commands)
        from ..exporters import run

        return ChildResult(ok=True, export=run(job, emit))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as a failed row
        return failure(exc)


def serve(job: CellJob, commands: Any) -> ChildResult:
    session = get_scenario(job.cell.scenario)(job, emit)
    # a search may want more rounds; the cell's other processes take what this one judged (a server's has none)
    send({"ready": True, "rounds": getattr(session, "rounds", None), "judged": getattr(session, "judged", {})})
    for line in commands:
        command = json.loads(line)
        if "block" in command:
            send({"block": session.block(int(command["block"]))})
        elif "tune" in command:  # a tuning block with a live setting (inferbench.execution.rounds)
            t = command["tune"]
            send({"tune": cast(TunedSession, session).tune(t["setting"], int(t["round"]), float(t["block_s"]))})
        elif "apply" in command:
            apply = command["apply"]
            send({"apply": cast(TunedSession, session).apply(apply["setting"], apply["tuning"])})
        elif command.get("idle"):  # the rounds are over: the trackers' readings of the idle device, the group's at once
            send({"idle": session.idle()})
        elif command.get("finish"):
            session.stopped = command.get("stopped")  # the rounds ended early (--time-budget): its answer says so
            return ChildResult(ok=True, cell=session.finish())
    raise RuntimeError("the parent stopped sending commands")


def die_with_parent() -> None:
    """A killed sweep or run must not leave its worker measuring on: ask Linux to SIGKILL this process
    when its parent dies, and leave at once if the parent is already gone."""
    parent = os.environ.get("INFERBENCH_PARENT_PID")
    if not parent:
        return
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(parent):
        os._exit(3)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    die_with_parent()
    job_path, result_path = Path(args[0]), Path(args[1])

    tempfile.tempdir = str(job_path.parent)  # the job's folder, which the parent removes on every path (a SIGTERM)
    global _channel
    fd = os.environ.get("INFERBENCH_CHANNEL_FD")
    _channel = os.fdopen(int(fd), "w") if fd else None
    result = run_job(job_path.read_text())

    atomic_write_text(result_path, json.dumps(encode(result), allow_nan=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
