"""Child-process side: ``python -m inferbench.worker JOB.json RESULT.json``.

Process plumbing only: read a job (:mod:`inferbench.config`), run it (an export, or a cell through its
scenario, :mod:`inferbench.scenarios`), write the :class:`~inferbench.config.ChildResult` atomically.
Each export and each cell runs in a fresh interpreter, so no two frameworks ever share a process
(thread pools, allocators and CUDA contexts fight). Progress goes to stdout as ``@@inferbench <phase>``
lines.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

from .codec import encode
from .config import CellJob, ChildResult, job_from_json
from .errors import MissingDependency, UsageError

PROGRESS_PREFIX = "@@inferbench "


def emit(phase: str) -> None:
    print(PROGRESS_PREFIX + phase, flush=True)


def run_job(text: str) -> ChildResult:
    """Run one job; every failure comes back as a result, never as an exception."""
    try:
        job = job_from_json(text)
        if isinstance(job, CellJob):
            from .scenarios import get_scenario

            return ChildResult(ok=True, cell=get_scenario(job.cell.scenario)(job, emit))
        from .exporters import run

        return ChildResult(ok=True, export=run(job, emit))
    except (UsageError, MissingDependency) as exc:
        return ChildResult(ok=False, error=str(exc), usage_error=isinstance(exc, UsageError))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as a failed row
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return ChildResult(ok=False, error=f"{type(exc).__name__}: {first}" if first else type(exc).__name__,
                           traceback=traceback.format_exc())


def die_with_parent() -> None:
    """A killed sweep or run must not leave its worker measuring on: ask Linux to SIGKILL this process
    when its parent dies, and leave at once if the parent is already gone."""
    parent = os.environ.get("INFERBENCH_PARENT_PID")
    if not parent:
        return
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(parent):
        os._exit(3)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    die_with_parent()
    job_path, result_path = Path(args[0]), Path(args[1])
    result = run_job(job_path.read_text())
    from .results import atomic_write_text

    atomic_write_text(result_path, json.dumps(encode(result), allow_nan=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
