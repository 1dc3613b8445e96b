"""The artifacts a run needs: exported once per (model, resolution) in child processes, or taken from the cache
(exported here before, or brought from another machine), with their provenance, the model's statistics and the
memory check that refuses an export too big for this machine."""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from pathlib import Path
from typing import Any

from ..base import machine
from ..base.errors import UsageError
from ..base.machine import WEIGHT_COPIES, WORKER_BASE_GB, memory_shortfall, training_refusal
from ..base.size import Size
from ..exporters import already_made, key_inputs
from ..exporters import cache as artifact_cache
from ..registry import artifacts
from ..registry.artifacts import (
    export_order,
    exporter_extra,
    exporter_module,
    exporter_packages,
    requires,
    shares_process,
    train_variant,
)
from ..registry.frameworks import Framework, artifacts_of, get_framework, unavailable_reason
from ..registry.models import ModelSpec, get_model
from ..registry.scenarios import scenario as scenario_entry
from ..registry.tasks import task
from ..spec import (
    CellKey,
    ExportJob,
    RunConfig,
)
from .childenv import child_env
from .isolate import run_child
from .progress import Progress


def ensure_exports(config: RunConfig, model: str, resolution: Size, frameworks: list[Framework],
                   batch_sizes: tuple[int, ...], progress: Progress,
                   strict: bool = True, agreement_inputs: int = 0,
                   quantized: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> tuple[Path, dict[str, str]]:
    """Export (or reuse from the cache) every artifact the frameworks need (and, with ``agreement_inputs``, the
    outputs on that many inputs that reduced-precision cells are counted against; with the run's labelled images,
    the outputs on them every cell's accuracy is paired with; for the frameworks ``quantized`` names, their INT8
    models calibrated on the run's calibration set; ``also``: kinds no framework here loads, made for another machine
    — benchmarks/gpu_bring.py packs TensorRT's FP16 model for a GPU); returns the folder and
    the kinds that failed with their reason. A UsageError from an exporter (weights that cannot be
    loaded or downloaded, degenerate reference) is raised when ``strict`` (a single run: nothing
    can run); in a sweep it fails this model's cells only and the sweep goes on."""
    todo = _Exports(config, get_model(model), resolution, frameworks, batch_sizes, progress, agreement_inputs,
                    quantized, also)
    waiting = "waiting: another inferbench process is exporting this model to the same cache"
    with artifact_cache.export_lock(todo.folder, lambda: progress.result(todo.label, waiting)):
        todo.run(strict)
    return todo.folder, todo.failed


class _Exports:
    """What one (model, resolution) needs exported, phase by phase: the kinds needed and their variants, those in
    the cache or brought from another machine's, then the rest exported in child processes (the TensorFlow-side
    ones sharing one where no dependency forbids), a kind whose dependency failed named after it."""

    def __init__(self, config: RunConfig, spec: ModelSpec, resolution: Size, frameworks: list[Framework],
                 batch_sizes: tuple[int, ...], progress: Progress, agreement_inputs: int,
                 quantized: tuple[str, ...], also: tuple[str, ...] = ()) -> None:
        self.config, self.spec, self.resolution, self.batch_sizes = config, spec, resolution, batch_sizes
        self.progress = progress
        if not task(spec.task).agrees_over_many:
            agreement_inputs = 0
        self.key_inputs = cache_key(config, spec, resolution)
        self.cache_dir = Path(config.cache_dir)
        self.folder = artifact_cache.artifact_dir(self.cache_dir, self.key_inputs)
        have = exported(config, spec, [resolution])
        scenario = config.scenario
        self.runnable = [fw for fw in frameworks
                         if not unavailable_reason(fw, config.device.kind, spec, config.options, have, scenario)]
        self.needed = [kind for fw in self.runnable for kind in artifacts_of(fw, spec, scenario)] \
            + (["agreement"] if agreement_inputs else []) + (["evaluation"] if config.eval_set else []) + list(also)
        self.int8 = [fw.artifact_for(spec, scenario, "int8") for fw in self.runnable
                     if fw.key in quantized and config.calibration]
        self.needed += self.int8
        self.variants = {"train-reference": train_variants(config) if scenario_entry(scenario).trains else (),
                         "agreement": (str(agreement_inputs),) if agreement_inputs else (),
                         "evaluation": (config.eval_set.digest,) if config.eval_set else (),
                         **{kind: (config.calibration.digest,) for kind in self.int8 if config.calibration}}
        self.label = f"{spec.name}@{resolution} export"
        self.failed: dict[str, str] = {}
        self.alone: set[str] = set()  # kinds to retry in a process of their own (after a shared process failed)

    def covers(self, kind: str) -> Any:
        """Does a cached entry of ``kind`` hold every batch size and variant this run needs?"""
        return lambda entry: (not artifacts.EXPORTERS[kind].per_batch_size or set(self.batch_sizes) <= set(
            entry.get("batch_sizes", ()))) and set(self.variants.get(kind, ())) <= set(entry.get("variants", ()))

    def to_export(self) -> list[str]:
        """The kinds to export here, in order (the process-sharing ones first where no dependency forbids); those
        cached are said, those exported elsewhere brought in, those whose exporter's packages are missing failed."""
        todo: list[str] = []
        for kind in export_order(self.needed, self.spec) if self.runnable else []:
            entry = artifact_cache.cached(self.folder, kind)
            if entry and self.covers(kind)(entry):
                self.progress.say(f"{self.label} {kind}", "cached")
                continue
            missing = [p for p in exporter_packages(kind, self.spec) if importlib.util.find_spec(p) is None]
            source = artifact_cache.brought(self.cache_dir, self.key_inputs, kind, self.covers(kind)) \
                if missing else None
            if source is not None:  # exported elsewhere (a GPU machine without TensorFlow): verified, copied in
                artifact_cache.bring(source, self.folder, kind, self.key_inputs)
                self.progress.result(f"{self.label} {kind}", f"brought from {source.name} (exported with other "
                                     f"library versions; {', '.join(missing)} not installed here)")
            elif missing:
                self.failed[kind] = (f"{', '.join(missing)} not installed: pip install -e "
                                     f"\".[{exporter_extra(kind, self.spec)}]\" (or bring a cache folder exported "
                                     "elsewhere with --cache-dir)")
                self.progress.result(f"{self.label} {kind}", f"FAILED: {self.failed[kind]}", failure=True)
            else:
                todo.append(kind)
        shared = [k for k in todo if shares_process(k, self.spec)]
        if not any(dep in todo and dep not in shared for k in shared for dep in requires(k, self.spec)):
            todo = shared + [k for k in todo if k not in shared]
        return todo

    def blocked(self, kind: str) -> bool:
        """Marks ``kind`` failed when an export it needs failed (naming the export that really failed)."""
        deps = [dep for dep in requires(kind, self.spec) if dep in self.failed]
        if deps:
            root = self.failed[deps[0]]
            self.failed[kind] = root if root.startswith("needs the ") else \
                f"needs the {deps[0]} export, which failed: {root}"
        return bool(deps)

    def job(self, kind: str) -> ExportJob:
        sizes, kinds = self.batch_sizes, self.variants.get(kind, ())
        if artifacts.EXPORTERS[kind].per_batch_size or kinds:  # a file per batch size and variant: keep those made
            made = artifact_cache.read_manifest(self.folder)["artifacts"].get(kind) or {}
            sizes = tuple(sorted({*made.get("batch_sizes", ()), *self.batch_sizes}))
            kinds = tuple(sorted({*made.get("variants", ()), *kinds})) if kinds else ()
        spec, config = self.spec, self.config
        return ExportJob(kind=kind, module=exporter_module(kind, spec), packages=exporter_packages(kind, spec),
                         folder=str(self.folder), model=spec.name, resolution=self.resolution,
                         weights=spec.source.path if spec.source else config.weights, seed=config.seed,
                         batch_sizes=sizes, key_inputs=self.key_inputs, model_file=spec.source, variants=kinds,
                         eval_set=config.eval_set if kind == "evaluation" else None,
                         calibration=config.calibration if kind in self.int8 else None)

    def run(self, strict: bool) -> None:
        """Every kind to export, a chain at a time (the TensorFlow-side exports share one process: TensorFlow is
        imported once); a chain whose process died is retried a kind at a time."""
        todo = self.to_export()
        while todo:
            kind = todo.pop(0)
            if self.blocked(kind):
                continue
            chain = [kind]
            while kind not in self.alone and shares_process(kind, self.spec) and todo and todo[0] not in self.alone \
                    and shares_process(todo[0], self.spec):
                nxt = todo.pop(0)
                if not self.blocked(nxt):
                    chain.append(nxt)
            todo[:0] = self.export(chain, strict)

    def export(self, chain: list[str], strict: bool) -> list[str]:
        """One child process exports ``chain``; each kind it recorded is said, the first it did not fails (or, where
        the process was killed rather than raised, is retried alone): the kinds to export again, each alone."""
        progress = self.progress
        progress.add(len(chain))
        jobs = [self.job(k) for k in chain]

        def stamp(entry: dict[str, Any] | None) -> Any:
            return (entry or {}).get("exported_at"), (entry or {}).get("files")

        before = {k: stamp(artifact_cache.read_manifest(self.folder)["artifacts"].get(k)) for k in chain}
        timeout = None if self.config.timeout_s is None else self.config.timeout_s * len(chain)  # per export
        res = run_child(dataclasses.replace(jobs[0], then=tuple(jobs[1:])), child_env(self.config),
                        lambda phase: progress.say(self.label, phase), timeout)
        for i, k in enumerate(chain):
            progress.done += 1
            entry = artifact_cache.read_manifest(self.folder)["artifacts"].get(k)
            if entry and (res.ok or stamp(entry) != before[k]):  # recorded by this process, hashes and all
                notes = entry.get("notes") or [] if progress.verbosity > 0 else []  # for developers
                progress.result(f"{self.label} {k}", f"exported in {float(entry.get('export_s', 0)):.1f}s"
                                + "".join(f"\n    note: {n}" for n in notes))
                continue
            if res.usage_error and strict:
                raise UsageError(res.error)
            died = res.died and len(chain) > 1  # killed (for memory, say), not an exception: retried alone
            rest = chain[i + (0 if died else 1):]  # each again on its own (those needing k are blocked then)
            if not died:
                self.failed[k] = str(res.error or "the export process ended without making it")
                progress.result(f"{self.label} {k}", f"FAILED: {self.failed[k]}", failure=True)
            else:
                progress.done -= 1
            self.alone.update(rest)
            progress.add(-len(rest))
            return rest
        return []


def train_variants(config: RunConfig) -> tuple[str, ...]:
    """The training set-ups whose reference steps a run needs (the ``train-reference`` export's variants)."""
    return (train_variant(config.options.optimizer, config.options.bn_mode),)


def provenance(folder: Path, cell: CellKey) -> dict[str, Any]:
    """Where the artifacts a cell used came from: for its own kind, those it is made from, and the reference
    outputs, when and with which library versions each was exported, and the cache it was brought from (an
    artifact exported on another machine)."""
    spec = get_model(cell.model)
    own = [k for k in artifacts_of(get_framework(cell.framework), spec, cell.scenario, cell.precision)
           if k in artifacts.EXPORTERS]
    entries = artifact_cache.read_manifest(folder).get("artifacts", {})
    kinds = export_order(own, spec)
    keep = ("exported_at", "versions", "brought_from", "keras_backend", "backend_check", "method", "converter",
            "kept_fp32", "side_inputs")
    return {k: {key: entries[k][key] for key in keep if key in entries[k]}
            for k in kinds if isinstance(entries.get(k), dict)}


def training_plan(stats: dict[str, Any] | None, cells: int, processes: int, batch_size: int,
                  optimizer: str) -> tuple[bool, str | None]:
    """How a training group's workers fit in the memory available now: (side by side, None), (one cell at a time,
    None) when only that fits, or (False, why not even one cell's workers fit: the batch size to try)."""
    if training_refusal(stats, batch_size, optimizer, cells * processes) is None:
        return True, None
    return False, training_refusal(stats, batch_size, optimizer, processes)


#: How long a group waits for memory the machine has but other processes hold (the group before's workers exit as
#: the next group starts: a suite's second group of eleven frameworks was refused once with 12 of 23 GB available).
MEMORY_WAIT_S = 20.0


def memory_refusal(stats: dict[str, Any] | None, workers: int) -> str | None:
    """Why a group's workers, loaded side by side for its interleaved rounds (one, with --sequential), would not
    fit in the memory available now (None: they fit, or the model's size is unknown)."""
    def shortfall() -> tuple[float, float, float] | None:
        return memory_shortfall((stats or {}).get("params"), WORKER_BASE_GB, WEIGHT_COPIES, workers)

    short = shortfall()
    until = time.monotonic() + MEMORY_WAIT_S
    while short is not None and short[0] <= 0.9 * (machine.memory_total_gb() or 0.0) and time.monotonic() < until:
        time.sleep(0.5)  # what the machine has would hold them: the group before may still be releasing its workers'
        short = shortfall()
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
    """The model's parameters and FLOPs, as the Keras export counted them, else as an ONNX graph did (a PyTorch
    program's export, the user's ONNX file: :mod:`inferbench.exporters.onnx_stats`); None where neither did."""
    artifacts = artifact_cache.read_manifest(folder)["artifacts"]
    keras = (artifacts.get("keras") or {}).get("model_stats")
    return keras or next((e["model_stats"] for e in artifacts.values() if isinstance(e, dict) and e.get("model_stats")),
                         None)


def cache_key(config: RunConfig, spec: Any, resolution: Size) -> dict[str, Any]:
    """Everything that changes the artifacts of ``spec`` at ``resolution`` (the cache folder's name hashes it); a
    model file's weights are its own contents."""
    weights = spec.source.path if spec.source else config.weights
    return key_inputs(spec.name, resolution, weights, config.seed, spec.task)


def exported(config: RunConfig, spec: Any, resolutions: Any) -> set[str]:
    """The artifact kinds of ``spec`` whose exporters are not installed here but which need no export at any of
    ``resolutions``: in the cache already, or brought from another machine."""
    return already_made(Path(config.cache_dir), spec, [cache_key(config, spec, r) for r in resolutions])
