"""Parent-process side of the isolation: run one job in a fresh interpreter and collect its result.

A child that crashes, is killed (e.g. out of memory) or cannot import its framework becomes a
failed result with a readable reason; it never takes the parent down.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base.codec import decode
from ..spec import CellJob, ChildResult, ExportJob, job_to_json
from . import ab

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder that holds the inferbench package


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
        return f"child process died from {name}{hint}"
    return f"child process exited with status {code} without a result"


class Child:
    """One worker process (``python -m inferbench.execution.worker``) and the channel to it.

    The worker writes JSON lines to a pipe of its own (``INFERBENCH_CHANNEL_FD``), never to stdout, so
    that a framework printing there cannot garble them: ``{"progress": phase}`` lines go to
    ``progress``, every other message waits in :meth:`reply`. Commands go to its stdin as JSON lines.
    Its final :class:`~inferbench.spec.ChildResult` comes back as a file (:meth:`result`).
    """

    def __init__(self, job: CellJob | ExportJob, env: dict[str, str],
                 progress: Callable[[str], None] = lambda _: None) -> None:
        self.tmp = tempfile.mkdtemp(prefix="inferbench-")
        job_path, self.result_path, self.log_path = (Path(self.tmp) / n for n in ("job.json", "result.json", "log"))
        job_path.write_text(job_to_json(job))
        read_fd, write_fd = os.pipe()
        child_env = {**env, "INFERBENCH_CHANNEL_FD": str(write_fd)}
        python = sys.executable
        if isinstance(job, CellJob) and job.cell.options.ab and job.config.ab:  # B's twin: B's interpreter
            python, child_env = job.config.ab["executable"], ab.worker_env(child_env)
        else:
            child_env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        child_env["INFERBENCH_PARENT_PID"] = str(os.getpid())  # the worker dies with its parent
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [python, "-m", "inferbench.execution.worker", str(job_path), str(self.result_path)],
                stdin=subprocess.PIPE, stdout=log, stderr=log, text=True, env=child_env, pass_fds=(write_fd,))
        os.close(write_fd)
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, args=(read_fd, progress), daemon=True)
        self.reader.start()

    def _read(self, fd: int, progress: Callable[[str], None]) -> None:
        with os.fdopen(fd, "r") as channel:
            for line in channel:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict) and "progress" in msg:
                    progress(str(msg["progress"]))
                elif isinstance(msg, dict):
                    self.replies.put(msg)
        self.replies.put(None)  # the worker closed its channel: it has ended

    def send(self, command: dict[str, Any]) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it has ended: reply() says so

    def reply(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The worker's next message; None if it ended first. TimeoutError after ``timeout_s``."""
        try:
            return self.replies.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError from None

    def result(self, timeout_s: float | None = None) -> ChildResult:
        """Wait for the worker to end and return its result (a failure if it died or ran out of time)."""
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            return ChildResult(ok=False, error=f"timed out after {timeout_s:g} s", died=True)
        except BaseException:
            self.close()
            raise
        try:
            if self.result_path.exists():
                return decode(ChildResult, json.loads(self.result_path.read_text()), "child result")
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-20:]
            return ChildResult(ok=False, error=_describe_exit(code), traceback="\n".join(tail), died=True)
        finally:
            self.close()

    def close(self) -> None:
        """Kill the worker if it still runs and remove its files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.reader.join(timeout=5)
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_child(
    job: CellJob | ExportJob,
    env: dict[str, str],
    progress: Callable[[str], None] = lambda _: None,
    timeout_s: float | None = None,
) -> ChildResult:
    """Run a one-shot ``job`` (an export) in a worker process; returns its result."""
    return Child(job, env, progress).result(timeout_s)
