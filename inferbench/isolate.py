"""Parent-process side of the isolation: run one job in a fresh interpreter and collect its result.

A child that crashes, is killed (e.g. out of memory) or cannot import its framework becomes a
failed result with a readable reason; it never takes the parent down.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .codec import decode
from .config import CellJob, ChildResult, ExportJob, job_to_json
from .worker import PROGRESS_PREFIX

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


def thread_env(threads: int) -> dict[str, str]:
    """Same intra-op thread count for every framework, set before the framework is imported."""
    n = str(threads)
    return {
        "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
        "TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": "1",
    }


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
        return f"child process died from {name}{hint}"
    return f"child process exited with status {code} without a result"


def _forward_progress(stream: Any, progress: Callable[[str], None]) -> None:
    for line in stream:
        if line.startswith(PROGRESS_PREFIX):
            progress(line[len(PROGRESS_PREFIX):].strip())


def run_child(
    job: CellJob | ExportJob,
    env: dict[str, str],
    progress: Callable[[str], None] = lambda _: None,
    timeout_s: float | None = None,
) -> ChildResult:
    """Run ``job`` in ``python -m inferbench.worker``; returns the worker's result."""
    with tempfile.TemporaryDirectory(prefix="inferbench-") as tmp:
        job_path, result_path, log_path = (Path(tmp) / n for n in ("job.json", "result.json", "stderr.log"))
        job_path.write_text(job_to_json(job))
        child_env = {**os.environ, **env}
        child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        child_env.setdefault("KERAS_BACKEND", "tensorflow")
        child_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_PARENT, os.environ.get("PYTHONPATH")) if p
        )
        child_env["INFERBENCH_PARENT_PID"] = str(os.getpid())  # the worker dies with its parent
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "inferbench.worker", str(job_path), str(result_path)],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, env=child_env,
            )
            # progress is read on a thread so that the timeout is enforced even if the child hangs silently
            reader = threading.Thread(target=_forward_progress, args=(proc.stdout, progress), daemon=True)
            reader.start()
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                reader.join(timeout=5)
                return ChildResult(ok=False, error=f"timed out after {timeout_s:g} s")
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            reader.join(timeout=5)
        if result_path.exists():
            return decode(ChildResult, json.loads(result_path.read_text()), "child result")
        tail = log_path.read_text(errors="replace").strip().splitlines()[-20:]
        return ChildResult(ok=False, error=_describe_exit(code), traceback="\n".join(tail))
