"""An A/B in one run (``--ab-python PYTHON``): every cell measured twice in one interleaved group, once by this
Python's installed packages (A) and once by another install's (B: a runtime's next release, a patched build, the
main branch's virtual environment), so that ``inferbench compare RUN`` can judge B against A paired within rounds,
with nothing between invocations to estimate.

B's cells are A's with the runner option ``ab`` set to the digest of B's install (its interpreter's path, Python
version and every recorded package's version): their variant says ``+ab-<digest>``, their records carry B's Python
and packages. B's workers run this inferbench (the package linked into a private folder put first on their
``PYTHONPATH``, never this install's site-packages; what the shell's ``PYTHONPATH`` adds follows it, for the probe of
B's packages as for the workers) on B's interpreter with B's packages; exports are made once, by this install, and
loaded by both.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..base.reading import loads
from ..base.text import excerpt

_PACKAGE = Path(__file__).resolve().parents[1]  # the inferbench package itself
#: What B's interpreter is asked, with this inferbench on its path: it must import the worker, and say its packages.
_PROBE = ("import json, sys; import inferbench.execution.worker; from inferbench.execution.environment import "
          "package_versions; print(json.dumps({'python': sys.version.split()[0], 'packages': package_versions()}))")
PROBE_TIMEOUT_S = 120.0


@functools.cache
def package_path() -> str:
    """A private folder holding only a link to this inferbench package: B's workers import it from there, and
    everything else from their own install."""
    folder = Path(tempfile.mkdtemp(prefix="inferbench-ab-"))
    (folder / "inferbench").symlink_to(_PACKAGE, target_is_directory=True)
    atexit.register(shutil.rmtree, folder, True)  # the link only: the package it points to stays
    return str(folder)


def worker_env(env: dict[str, str]) -> dict[str, str]:
    """A worker's environment for B's interpreter: this inferbench first on its path, nothing of this install."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (package_path(), env.get("PYTHONPATH")) if p)}


def install_of(python: str) -> dict[str, Any]:
    """B's install as its records say it (interpreter, Python version, packages) and its digest; UsageError in one
    line when ``python`` is no interpreter that can run inferbench's worker."""
    path = os.path.abspath(os.path.expanduser(python))
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise UsageError(f"--ab-python {python}: no executable file there (give B's interpreter, e.g. "
                         "other-venv/bin/python)")
    env = worker_env(dict(os.environ))  # what B's workers are given: the link first, the shell's path after it
    status, out, err = _probe([path, "-c", _PROBE], env)
    lines = out.strip().splitlines()
    if status != 0 or not lines:
        why = excerpt((err.strip().splitlines() or [f"exit status {status}"])[-1], 200)
        raise UsageError(f"--ab-python {python}: cannot run inferbench's worker there ({why}); B's install needs "
                         "numpy and the frameworks it is to measure")
    try:
        found = loads(lines[-1], "its answer")
    except ValueError:
        found = None
    if not _answered(found):
        raise UsageError(f"--ab-python {python}: did not answer as inferbench's probe asks (it printed "
                         f"{excerpt(lines[-1], 80)!r})")
    text = json.dumps({"executable": path, **found}, sort_keys=True)
    return {"executable": path, "python": found["python"], "packages": found["packages"],
            "digest": hashlib.sha256(text.encode()).hexdigest()[:8]}


#: The most the probe's answer may hold (a few hundred packages: a few kB).
PROBE_BYTES = 2**20


def _probe(command: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """``command`` run in a session of its own, its output bounded (a file it may not write past
    :data:`PROBE_BYTES`); its whole process group ended at :data:`PROBE_TIMEOUT_S` (a hanging interpreter, and
    whatever it started). (status, standard output, standard error), each output cut at the bound."""
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (PROBE_BYTES, PROBE_BYTES))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, preexec_fn=limited)
        except OSError as e:
            raise UsageError(f"--ab-python {command[0]}: could not be run ({e.strerror or e})") from None
        try:
            status = proc.wait(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise UsageError(f"--ab-python {command[0]}: no answer within {PROBE_TIMEOUT_S:g} s: it was ended, with "
                             "every process it had started") from None
        texts = []
        for fh in (out, err):
            fh.seek(0)
            texts.append(fh.read(PROBE_BYTES).decode("utf-8", "replace"))
    return status, texts[0], texts[1]


def _answered(found: Any) -> bool:
    """Is ``found`` the probe's answer: a Python version and a map of package names to versions (or null)?"""
    def short(text: Any) -> bool:
        return isinstance(text, str) and 0 < len(text) <= 100 and text.isprintable()

    return (isinstance(found, dict) and set(found) == {"python", "packages"} and short(found["python"])
            and isinstance(found["packages"], dict) and len(found["packages"]) <= 10_000
            and all(short(k) and (v is None or short(v)) for k, v in found["packages"].items()))


def differs(a: dict[str, str], b: dict[str, str]) -> str:
    """The packages whose versions differ between two installs, said in one phrase ("" when none)."""
    names = sorted(set(a) | set(b))
    return ", ".join(f"{n} {a.get(n, '-')} -> {b.get(n, '-')}" for n in names if a.get(n) != b.get(n))
