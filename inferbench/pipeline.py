"""The work shared by ``run`` and ``sweep``: export once per (model, resolution), then run each cell
in its own child process and write its record atomically.

The chain, in order: :class:`~inferbench.spec.RunConfig` + :class:`~inferbench.spec.CellKey` ->
:class:`~inferbench.spec.CellJob` (sent to the child) -> :class:`~inferbench.spec.ChildResult`
(sent back) -> :class:`~inferbench.results.Record` (written under the cell's file name).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import importlib.util
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import results
from .config import cache_key, exported
from .errors import UsageError
from .frameworks import Framework, get_framework, unavailable_reason
from .spec import CellJob, CellKey, ChildResult, ExportJob, RunConfig


class Progress:
    """Progress on stderr. Lasting lines (a cell's result, an export done or failed, anything FAILED) are
    printed as they come; the passing phases (loading, warm-up, round 3/8) update one status line in
    place on a terminal, and are left out when stderr is piped or a file (``verbosity`` 1, ``-v``, prints
    them as lines, export notes too; -1, ``-q``, prints failures only). Every line starts with the bar,
    units done/total (exports and cells), elapsed time and an ETA from the units done so far."""

    def __init__(self, total: int, stream: Any = None, verbosity: int = 0) -> None:
        self.total, self.done, self.stream, self.verbosity = total, 0, stream or sys.stderr, verbosity
        self.started = time.monotonic()
        self.base = 0  # units already done when this invocation started (a resumed sweep)
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) and verbosity == 0
        self._status = False  # a status line is showing (terminal only)

    def eta(self) -> str:
        if self.done <= self.base:
            return "ETA ?"
        left = (self.total - self.done) * (time.monotonic() - self.started) / (self.done - self.base)
        return f"ETA {int(left // 60)}m{int(left % 60):02d}s"

    def add(self, units: int) -> None:
        """More work than first counted (exports are counted as they are met)."""
        self.total += units

    def _line(self, label: str, text: str) -> str:
        width = 20
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        elapsed = time.monotonic() - self.started
        return f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {self.eta():>10}  {label}  {text}"

    def say(self, label: str, text: str) -> None:
        """A passing phase: on the status line (terminal), as a line with -v, else nowhere."""
        if self.verbosity > 0:
            print(self._line(label, text), file=self.stream, flush=True)
        elif self.live:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            print("\r\x1b[K" + self._line(label, text)[:width], end="", file=self.stream, flush=True)
            self._status = True

    def result(self, label: str, text: str, failure: bool = False) -> None:
        """A lasting line: a result, an export done, a failure (-q keeps failures only)."""
        if self.verbosity < 0 and not failure:
            return
        if self._status:
            print("\r\x1b[K", end="", file=self.stream)
            self._status = False
        print(self._line(label, text), file=self.stream, flush=True)

    def close(self) -> None:
        if self._status:
            print("\r\x1b[K", end="", file=self.stream, flush=True)
            self._status = False


#: Variables that change what a framework computes or how fast. A child never inherits them from the
#: shell: inferbench sets the ones it needs (threads, device, backend, logging) and drops the rest,
#: unless the user passes one on by name (``--pass-env``); the record's ``config.child_env`` holds them all.
CONTROLLED_NAMES = ("TF_XLA_FLAGS", "XLA_FLAGS", "KERAS_BACKEND", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                    "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "LD_PRELOAD", "NVIDIA_TF32_OVERRIDE",
                    "ATEN_CPU_CAPABILITY")
CONTROLLED_PREFIXES = ("TF_", "XLA_", "OMP_", "MKL_", "MKLDNN_", "KMP_", "GOMP_", "DNNL_", "ONEDNN_", "ORT_",
                       "OPENBLAS_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_", "TRITON_", "OV_",
                       "OPENVINO_", "JAX_", "MALLOC_")


#: Terraform's variables share TensorFlow's TF_ prefix and change nothing here.
TERRAFORM_PREFIXES = ("TF_CLI_", "TF_VAR_", "TF_LOG", "TF_IN_AUTOMATION", "TF_WORKSPACE", "TF_DATA_DIR",
                      "TF_PLUGIN_CACHE_DIR", "TF_INPUT", "TF_REGISTRY_", "TF_TOKEN_")


def controlled(name: str) -> bool:
    return (name in CONTROLLED_NAMES or name.startswith(CONTROLLED_PREFIXES)) and not name.startswith(
        TERRAFORM_PREFIXES)


def child_env(config: RunConfig, fw: Framework | None = None, cell: CellKey | None = None) -> dict[str, str]:
    """The whole environment a child process starts with: the parent's, minus every controlled variable
    (:func:`controlled`), plus what inferbench sets (the device it may see, the thread count, oneDNN on,
    the variables its framework takes from the cell's runner options) and what ``--pass-env`` names."""
    from .isolate import thread_env

    env = {k: v for k, v in os.environ.items() if not controlled(k)}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "1", "KERAS_BACKEND": default_keras_backend(),
                "TORCHINDUCTOR_CACHE_DIR": str(private_cache("torchinductor")),
                **config.device.child_env(), **thread_env(config.threads)})
    if fw is not None and cell is not None:
        env.update(fw.child_env(cell.options))
    env.update({k: os.environ[k] for k in config.pass_env if k in os.environ})
    return env


def default_keras_backend() -> str:
    """The backend Keras runs on where no runner option says otherwise (exports, the reference): TensorFlow,
    or where it is not installed (a GPU machine with artifacts brought from elsewhere) JAX, then torch. A Keras
    model's weights read the same on every backend (the ``ported`` export)."""
    return next((b for b in ("tensorflow", "jax", "torch") if importlib.util.find_spec(b) is not None), "tensorflow")


@functools.cache
def private_cache(name: str) -> Path:
    """A cache folder only this user can write (mode 0700, owned by this user), never in the artifact cache: what
    torch's inductor keeps there (pickled graphs, generated Python modules) is loaded and run, so a folder others
    can write to would let them run code in a benchmark. A folder that fails the check is not used: a fresh
    private temporary one is (its compiled programs then start cold)."""
    import stat
    import tempfile

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inferbench" / "private"
    folder = base / name
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path in (base, folder):
            info = path.stat()
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise PermissionError(f"{path} is not this user's alone")
        return folder
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"inferbench-{name}-"))


def recorded_env(env: dict[str, str]) -> dict[str, str]:
    """The controlled part of a child's environment, as recorded with each result."""
    return {k: v for k, v in sorted(env.items()) if controlled(k)}


def ignored_shell_variables(config: RunConfig) -> list[str]:
    """Controlled variables set in this shell that the children will not see as they are (not passed on,
    and not what inferbench sets them to anyway)."""
    ours = child_env(config)
    return sorted(k for k, v in os.environ.items() if controlled(k) and k not in config.pass_env and ours.get(k) != v)


def ensure_exports(config: RunConfig, model: str, resolution: int, frameworks: list[Framework],
                   batch_sizes: tuple[int, ...], progress: Progress,
                   strict: bool = True) -> tuple[Path, dict[str, str]]:
    """Export (or reuse from the cache) every artifact the frameworks need; returns the folder and
    the kinds that failed with their reason. A UsageError from an exporter (weights that cannot be
    loaded or downloaded, degenerate reference) is raised when ``strict`` (a single run: nothing
    can run); in a sweep it fails this model's cells only and the sweep goes on."""
    from .exporters import (
        EXPORTERS,
        export_order,
        exporter_extra,
        exporter_module,
        exporter_packages,
        requires,
        shares_process,
    )
    from .exporters import cache as artifact_cache
    from .isolate import run_child
    from .models import get_model

    spec = get_model(model)
    key_inputs = cache_key(config, spec, resolution)
    key_weights = spec.source.path if spec.source else config.weights
    cache_dir = Path(config.cache_dir)
    folder = artifact_cache.artifact_dir(cache_dir, key_inputs)
    have = exported(config, spec, [resolution])
    runnable = [fw for fw in frameworks if not unavailable_reason(fw, config.device.kind, spec, config.options, have)]
    needed = [fw.artifact_for(spec) for fw in runnable if fw.artifact != "none"]
    label = f"{model}@{resolution} export"

    def covers(kind: str) -> Any:
        return lambda entry: not EXPORTERS[kind].per_batch_size or set(batch_sizes) <= set(entry.get("batch_sizes", ()))

    waiting = "waiting: another inferbench process is exporting this model to the same cache"
    with artifact_cache.export_lock(folder, lambda: progress.result(label, waiting)):
        todo: list[str] = []
        failed: dict[str, str] = {}
        for kind in export_order(needed, spec) if runnable else []:
            entry = artifact_cache.cached(folder, kind)
            if entry and covers(kind)(entry):
                progress.say(f"{label} {kind}", "cached")
                continue
            missing = [p for p in exporter_packages(kind, spec) if importlib.util.find_spec(p) is None]
            source = artifact_cache.brought(cache_dir, key_inputs, kind, covers(kind)) if missing else None
            if source is not None:  # exported elsewhere (a GPU machine without TensorFlow): verified, copied in
                artifact_cache.bring(source, folder, kind, key_inputs)
                progress.result(f"{label} {kind}", f"brought from {source.name} (exported with other library "
                                f"versions; {', '.join(missing)} not installed here)")
            elif missing:
                extra = exporter_extra(kind, spec)
                failed[kind] = (f"{', '.join(missing)} not installed: pip install -e \".[{extra}]\" "
                                "(or bring a cache folder exported elsewhere with --cache-dir)")
                progress.result(f"{label} {kind}", f"FAILED: {failed[kind]}", failure=True)
            else:
                todo.append(kind)
        shared = [k for k in todo if shares_process(k, spec)]  # first, in one process, where no dependency forbids
        if not any(dep in todo and dep not in shared for k in shared for dep in requires(k, spec)):
            todo = shared + [k for k in todo if k not in shared]

        def blocked(kind: str) -> bool:
            """Marks ``kind`` failed when an export it needs failed (naming the export that really failed)."""
            deps = [dep for dep in requires(kind, spec) if dep in failed]
            if deps:
                root = failed[deps[0]]
                failed[kind] = root if root.startswith("needs the ") else \
                    f"needs the {deps[0]} export, which failed: {root}"
            return bool(deps)

        def job(kind: str) -> Any:
            sizes = batch_sizes
            if EXPORTERS[kind].per_batch_size:  # one file per batch size: keep those made before
                sizes = tuple(sorted({*(artifact_cache.read_manifest(folder)["artifacts"].get(kind) or {}).get(
                    "batch_sizes", ()), *batch_sizes}))
            return ExportJob(kind=kind, module=exporter_module(kind, spec), packages=exporter_packages(kind, spec),
                             folder=str(folder), model=spec.name, resolution=resolution, weights=key_weights,
                             seed=config.seed, batch_sizes=sizes, key_inputs=key_inputs, model_file=spec.source)

        alone: set[str] = set()  # kinds to retry in a process of their own (after a shared process failed)
        while todo:
            kind = todo.pop(0)
            if blocked(kind):
                continue
            chain = [kind]  # the TensorFlow-side exports share one process: TensorFlow is imported once
            while kind not in alone and shares_process(kind, spec) and todo and todo[0] not in alone \
                    and shares_process(todo[0], spec):
                nxt = todo.pop(0)
                if not blocked(nxt):
                    chain.append(nxt)
            progress.add(len(chain))
            jobs = [job(k) for k in chain]
            def stamp(entry: dict[str, Any] | None) -> Any:
                return (entry or {}).get("exported_at"), (entry or {}).get("files")

            before = {k: stamp(artifact_cache.read_manifest(folder)["artifacts"].get(k)) for k in chain}
            timeout = None if config.timeout_s is None else config.timeout_s * len(chain)  # --timeout is per export
            res = run_child(dataclasses.replace(jobs[0], then=tuple(jobs[1:])), child_env(config),
                            lambda phase: progress.say(label, phase), timeout)
            for i, k in enumerate(chain):
                progress.done += 1
                entry = artifact_cache.read_manifest(folder)["artifacts"].get(k)
                if entry and (res.ok or stamp(entry) != before[k]):  # recorded by this process, hashes and all
                    notes = entry.get("notes") or [] if progress.verbosity > 0 else []  # for developers
                    progress.result(f"{label} {k}", f"exported in {float(entry.get('export_s', 0)):.1f}s"
                                    + "".join(f"\n    note: {n}" for n in notes))
                    continue
                if res.usage_error and strict:
                    raise UsageError(res.error)
                died = res.died and len(chain) > 1  # killed (for memory, say), not an exception: retried alone
                rest = chain[i + (0 if died else 1):]  # each again on its own (those needing k are blocked then)
                if not died:
                    failed[k] = str(res.error or "the export process ended without making it")
                    progress.result(f"{label} {k}", f"FAILED: {failed[k]}", failure=True)
                else:
                    progress.done -= 1
                todo[:0] = rest
                alone.update(rest)
                progress.add(-len(rest))
                break
        return folder, failed


def cell_job(config: RunConfig, cell: CellKey, folder: Path, batch_sizes: tuple[int, ...],
             interleaving: dict[str, Any]) -> CellJob:
    from .exporters import EXPORTERS
    from .models import get_model

    fw = get_framework(cell.framework)
    kind = fw.artifact_for(get_model(cell.model))
    artifact = None if kind == "none" else str(folder / EXPORTERS[kind].path)
    return CellJob(cell=cell, framework=fw, config=config, artifact_dir=str(folder), artifact=artifact,
                   group_batch_sizes=batch_sizes, interleaving=interleaving)


def cannot_run(config: RunConfig, cell: CellKey, failed_exports: dict[str, str]) -> str | None:
    from .models import get_model

    fw = get_framework(cell.framework)
    spec = get_model(cell.model)
    kind = fw.artifact_for(spec)
    reason = unavailable_reason(fw, config.device.kind, spec, cell.options, exported(config, spec, [cell.resolution]))
    for needed in (kind, "reference"):  # every cell's parity needs the reference outputs
        if reason is None and needed in failed_exports:
            reason = f"export of {needed} failed: {failed_exports[needed]}"
    return reason


def run_group(config: RunConfig, cells: list[CellKey], folder: Path, failed_exports: dict[str, str], run_id: str,
              environment: dict[str, Any], batch_sizes: tuple[int, ...], progress: Progress) -> list[results.Record]:
    """The records of one group's cells, measured together in interleaved rounds (:mod:`inferbench.rounds`)."""
    from .rounds import measure_group

    c = cells[0]
    # a nonce per invocation: it names the group (a cell re-run by --resume is never paired with earlier
    # rounds) and draws the order of its rounds
    nonce = uuid.uuid4().hex[:8]
    interleaving = {"group": f"{run_id}/{c.model}@{c.resolution}/bs{c.batch_size}/{nonce}", "group_cells": len(cells)}
    jobs = {cell: cell_job(config, cell, folder, batch_sizes, interleaving) for cell in cells}
    envs = {cell: child_env(config, get_framework(cell.framework), cell) for cell in cells}
    outcomes = {cell: ChildResult(ok=False, error=reason) for cell in cells
                if (reason := cannot_run(config, cell, failed_exports)) is not None}
    runnable = [cell for cell in cells if cell not in outcomes]
    stats = model_stats(folder)
    too_big = memory_refusal(stats, len(runnable))
    if too_big:
        outcomes.update({cell: ChildResult(ok=False, error=too_big) for cell in runnable})
        runnable = []
    measured = measure_group([jobs[c] for c in runnable], [envs[c] for c in runnable],
                             int(nonce, 16), progress.say, config.timeout_s)
    outcomes.update(zip(runnable, measured))
    created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return [results.Record.of(jobs[cell], run_id, created, environment, recorded_env(envs[cell]), outcomes[cell],
                              stats, provenance(folder, cell)) for cell in cells]


def provenance(folder: Path, cell: CellKey) -> dict[str, Any]:
    """Where the artifacts a cell used came from: for its own kind, those it is made from, and the reference
    outputs, when and with which library versions each was exported, and the cache it was brought from (an
    artifact exported on another machine)."""
    from .exporters import EXPORTERS, export_order
    from .exporters import cache as artifact_cache
    from .models import get_model

    spec = get_model(cell.model)
    kind = get_framework(cell.framework).artifact_for(spec)
    entries = artifact_cache.read_manifest(folder).get("artifacts", {})
    kinds = export_order([kind], spec) if kind in EXPORTERS else export_order([], spec)
    return {k: {key: entries[k][key] for key in ("exported_at", "versions", "brought_from") if key in entries[k]}
            for k in kinds if isinstance(entries.get(k), dict)}


#: What a worker holds, estimated from the model's weights (fitted on the zoo's records, rounded up: TF workers
#: 0.7-1.0 GB plus 1.7-2.5 copies of the weights, ONNX Runtime 0.1 GB plus 1.7, OpenVINO 0.1 GB plus 2.9).
WORKER_BASE_GB, WEIGHT_COPIES = 1.0, 3.0


def memory_refusal(stats: dict[str, Any] | None, workers: int) -> str | None:
    """Why a group's workers, loaded side by side for its interleaved rounds (one, with --sequential), would not
    fit in the memory available now (None: they fit, or the model's size is unknown)."""
    from .machine import memory_shortfall

    short = memory_shortfall((stats or {}).get("params"), WORKER_BASE_GB, WEIGHT_COPIES, workers)
    if short is None:
        return None
    need, weights_gb, available = short
    who = f"the {workers} frameworks of this group, loaded side by side for interleaved rounds," if workers > 1 \
        else "this framework"
    advice = "run fewer frameworks at once (--framework) or one at a time (--sequential)" if workers > 1 \
        else "a lower --resolution or --batch-size will not shrink the weights: this model needs a bigger machine"
    return (f"not run: {who} would hold about {need:.0f} GB ({weights_gb:.1f} GB of weights, about "
            f"{WEIGHT_COPIES:g} copies each, beside ~{WORKER_BASE_GB:g} GB of runtime), more than 90% of the "
            f"{available:.0f} GB available: {advice}")


def model_stats(folder: Path) -> dict[str, Any] | None:
    """The model's parameters and FLOPs, as the Keras export counted them (None: no Keras export)."""
    from .exporters import cache as artifact_cache

    return (artifact_cache.read_manifest(folder)["artifacts"].get("keras") or {}).get("model_stats")


def peak_fp32(config: RunConfig) -> dict[str, Any]:
    """The device's peak FP32 rate, measured once per machine and thread count (:mod:`inferbench.measure.peak`)."""
    import socket

    from .machine import cpu_model
    from .measure.peak import peak_fp32 as measured

    gpu = config.device.gpu
    key = {"host": socket.gethostname(), "device": gpu.uuid if gpu else cpu_model(), "threads": config.threads}
    return measured(config.device.kind, key, child_env(config), config.cache_dir)


@dataclass
class Executed:
    records: list[dict[str, Any]]  # every record of the run's cells in its folder, at the current schema
    unwritten: dict[str, str] = field(default_factory=dict)  # cell label -> why its record could not be written


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder`` for this process: a second run or ``--resume`` of it is refused with one line."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise UsageError(f"cannot use {folder}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise UsageError(f"{folder} is in use by another inferbench process" + (f" (pid {holder})" if holder else "")
                         + "; wait for it to finish or stop it") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def set_aside_if_unreadable(path: Path) -> str | None:
    """A record that cannot be read is moved aside (kept for inspection, never deleted), so that its cell
    runs again; returns the line that says so, or None when the record is fine or absent."""
    if not path.exists():
        return None
    try:
        results.parse(json.loads(path.read_text()), path.name)
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = next(a for i in range(1, 10_000) if not (a := path.with_name(
            f"{path.name}.unreadable-{stamp}" + (f"-{i}" if i > 1 else ""))).exists())  # never over an earlier one
        os.replace(path, aside)
        return f"{path.name} could not be read ({str(exc)[:120]}); moved to {aside.name}, its cell runs again"


def execute(config: RunConfig, cells: list[CellKey], run_dir: Path, run_id: str,
            progress: Progress | None = None, strict: bool = True, objective: str = "p50",
            verbosity: int = 0) -> Executed:
    """Run every cell whose record is not in ``run_dir`` yet (the caller holds :func:`folder_lock`).

    The cells of one model, resolution and batch size form a group, measured together in interleaved
    rounds; the groups run one after another. Records are written atomically under the cell's file
    name when their group ends: an interrupted run (Ctrl-C or a kill) loses at most the group in
    progress, and running ``execute`` again on the same folder resumes without repeating or
    duplicating a cell. A record that cannot be read is set aside and its
    cell runs again; a record that cannot be written (disk full, permissions) fails that cell only.
    """
    ignored = ignored_shell_variables(config)
    if ignored:
        print(f"inferbench: not passed on to the frameworks (they change what is measured; inferbench sets its own "
              f"values, recorded in config.child_env; --pass-env NAME passes one on): {', '.join(ignored)}",
              file=sys.stderr)
    for stale in run_dir.glob(".*.tmp"):  # a write cut short by a kill; we hold the folder, no one else writes
        stale.unlink(missing_ok=True)
    for cell in cells:
        note = set_aside_if_unreadable(run_dir / cell.filename)
        if note:
            print(f"inferbench: {note}", file=sys.stderr)
    todo = [c for c in cells if not (run_dir / c.filename).exists()]
    unwritten: dict[str, str] = {}
    progress = progress or Progress(len(cells), verbosity=verbosity)
    progress.total, progress.done = len(cells), len(cells) - len(todo)
    progress.base = progress.done
    try:
        return _execute(config, cells, todo, run_dir, run_id, progress, strict, objective, unwritten)
    finally:
        progress.close()  # a status line never swallows the next message (an error, Ctrl-C)


def _execute(config: RunConfig, cells: list[CellKey], todo: list[CellKey], run_dir: Path, run_id: str,
             progress: Progress, strict: bool, objective: str, unwritten: dict[str, str]) -> Executed:
    from .environment import capture

    environment = {**capture(config.device), "peak_fp32": peak_fp32(config)}
    exports: dict[tuple[str, int], tuple[Path, dict[str, str]]] = {}

    def group_of(cell: CellKey) -> tuple[tuple[str, int], tuple[int, ...]]:
        group = (cell.model, cell.resolution)
        same = [c for c in cells if (c.model, c.resolution) == group]
        batch_sizes = tuple(sorted({c.batch_size for c in same}))
        if group not in exports:
            frameworks = [get_framework(k) for k in dict.fromkeys(c.framework for c in same)]
            exports[group] = ensure_exports(config, cell.model, cell.resolution, frameworks, batch_sizes,
                                            progress, strict)
        return group, batch_sizes

    if strict:  # bad input (weights a model cannot load) stops the run before any record is written
        for cell in todo:
            group_of(cell)
    groups: dict[tuple[Any, ...], list[CellKey]] = {}
    for cell in todo:  # interleaved: a group per model, resolution and batch size; --sequential: a cell each
        key = (cell.model, cell.resolution, cell.batch_size) + ((cell,) if config.sequential else ())
        groups.setdefault(key, []).append(cell)
    # every record of the run, kept in memory as it is written (read from disk once, for a resumed folder): the
    # summary files are rewritten from it after each group, never by reading every record back
    kept = {results.record_key(r): r for r in records_of(run_dir, cells)}
    for same in groups.values():
        group, batch_sizes = group_of(same[0])
        folder, failed = exports[group]
        c = same[0]
        if not config.sequential:
            progress.result(f"{c.model}@{c.resolution} bs{c.batch_size}",
                            f"group of {len(same)} cell{'s' if len(same) > 1 else ''}, {config.timing.rounds} "
                            "interleaved rounds")
        records = run_group(config, same, folder, failed, run_id, environment, batch_sizes, progress)
        progress.done += len(same)
        for cell, record in zip(same, records):
            try:
                path = results.write_record(run_dir, record)
            except OSError as exc:  # disk full, permissions: this cell fails, the others still run
                unwritten[cell.label] = f"{exc.strerror or exc} ({exc.filename or run_dir})"
                progress.result(cell.label, f"RECORD NOT WRITTEN: {unwritten[cell.label]}", failure=True)
                continue
            written = results.as_written(record)
            kept[results.record_key(written)] = written
            if config.log_to:
                from .tracking import log

                unwritten.update(log(config.log_to, written, path))
            progress.result(cell.label, one_line(record), failure=record.status != "ok"
                            or record.parity["status"] == "failed")
        try:
            results.write_summary(run_dir, ordered(kept, cells), objective)
        except OSError as exc:
            unwritten["summary.csv"] = f"{exc.strerror or exc} ({exc.filename or run_dir})"
            progress.result("summary.csv", f"not written: {unwritten['summary.csv']}", failure=True)
    return Executed(ordered(kept, cells), unwritten)


def ordered(kept: dict[str, dict[str, Any]], cells: list[CellKey]) -> list[dict[str, Any]]:
    """The kept records of ``cells``, in the run's order of cells."""
    return [kept[c.filename] for c in cells if c.filename in kept]


def records_of(run_dir: Path, cells: list[CellKey]) -> list[dict[str, Any]]:
    """The records of ``cells`` in ``run_dir``, at the current schema."""
    out = []
    for cell in cells:
        path = run_dir / cell.filename
        if path.exists():
            out.append(results.upgrade(json.loads(path.read_text())))
    return out


def one_line(rec: results.Record) -> str:
    if rec.status != "ok" or rec.latency_ms is None:
        return f"FAILED: {rec.error}"
    lat = rec.latency_ms
    ci = lat.get("p50_ci95")
    interval = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    unstable = "  UNSTABLE" if lat["stability"]["verdict"] == "unstable" else ""
    return (f"p50 {lat['p50']:.3f} ms{interval}  {rec.throughput_per_s:.1f}/s  "
            f"parity {rec.parity['status']}{unstable}")
