"""The artifacts a run needs: exported once per (model, resolution) in child processes, or taken from the cache
(exported here before, or brought from another machine), with their provenance, the model's statistics and the
memory check that refuses an export too big for this machine."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..registry.frameworks import Framework, artifacts_of, get_framework, unavailable_reason
from ..registry.scenarios import scenario as scenario_entry
from ..spec import (
    CellKey,
    ExportJob,
    RunConfig,
)
from .childenv import child_env
from .progress import Progress


def ensure_exports(config: RunConfig, model: str, resolution: int, frameworks: list[Framework],
                   batch_sizes: tuple[int, ...], progress: Progress,
                   strict: bool = True, agreement_inputs: int = 0,
                   quantized: tuple[str, ...] = ()) -> tuple[Path, dict[str, str]]:
    """Export (or reuse from the cache) every artifact the frameworks need (and, with ``agreement_inputs``, the
    outputs on that many inputs that reduced-precision cells are counted against; with the run's labelled images,
    the outputs on them every cell's accuracy is paired with; for the frameworks ``quantized`` names, their INT8
    models calibrated on the run's calibration set); returns the folder and
    the kinds that failed with their reason. A UsageError from an exporter (weights that cannot be
    loaded or downloaded, degenerate reference) is raised when ``strict`` (a single run: nothing
    can run); in a sweep it fails this model's cells only and the sweep goes on."""
    from ..exporters import cache as artifact_cache
    from ..registry.artifacts import (
        EXPORTERS,
        export_order,
        exporter_extra,
        exporter_module,
        exporter_packages,
        requires,
        shares_process,
    )
    from ..registry.models import get_model
    from .isolate import run_child

    spec = get_model(model)
    key_inputs = cache_key(config, spec, resolution)
    key_weights = spec.source.path if spec.source else config.weights
    cache_dir = Path(config.cache_dir)
    folder = artifact_cache.artifact_dir(cache_dir, key_inputs)
    have = exported(config, spec, [resolution])
    scenario = config.scenario
    runnable = [fw for fw in frameworks
                if not unavailable_reason(fw, config.device.kind, spec, config.options, have, scenario)]
    needed = [kind for fw in runnable for kind in artifacts_of(fw, spec, scenario)] \
        + (["agreement"] if agreement_inputs else []) + (["evaluation"] if config.eval_set else [])
    int8 = [fw.artifact_for(spec, scenario, "int8") for fw in runnable if fw.key in quantized and config.calibration]
    needed += int8
    variants = {"train-reference": train_variants(config) if scenario_entry(scenario).trains else (),
                "agreement": (str(agreement_inputs),) if agreement_inputs else (),
                "evaluation": (config.eval_set.digest,) if config.eval_set else (),
                **{kind: (config.calibration.digest,) for kind in int8 if config.calibration}}
    label = f"{model}@{resolution} export"

    def covers(kind: str) -> Any:
        return lambda entry: (not EXPORTERS[kind].per_batch_size or set(batch_sizes) <= set(
            entry.get("batch_sizes", ()))) and set(variants.get(kind, ())) <= set(entry.get("variants", ()))

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
            sizes, kinds = batch_sizes, variants.get(kind, ())
            if EXPORTERS[kind].per_batch_size or kinds:  # one file per batch size and variant: keep those made before
                made = artifact_cache.read_manifest(folder)["artifacts"].get(kind) or {}
                sizes = tuple(sorted({*made.get("batch_sizes", ()), *batch_sizes}))
                kinds = tuple(sorted({*made.get("variants", ()), *kinds})) if kinds else ()
            return ExportJob(kind=kind, module=exporter_module(kind, spec), packages=exporter_packages(kind, spec),
                             folder=str(folder), model=spec.name, resolution=resolution, weights=key_weights,
                             seed=config.seed, batch_sizes=sizes, key_inputs=key_inputs, model_file=spec.source,
                             variants=kinds, eval_set=config.eval_set if kind == "evaluation" else None,
                             calibration=config.calibration if kind in int8 else None)

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


def train_variants(config: RunConfig) -> tuple[str, ...]:
    """The training set-ups whose reference steps a run needs (the ``train-reference`` export's variants)."""
    from ..registry.artifacts import train_variant

    return (train_variant(config.options.optimizer, config.options.bn_mode),)


def provenance(folder: Path, cell: CellKey) -> dict[str, Any]:
    """Where the artifacts a cell used came from: for its own kind, those it is made from, and the reference
    outputs, when and with which library versions each was exported, and the cache it was brought from (an
    artifact exported on another machine)."""
    from ..exporters import cache as artifact_cache
    from ..registry.artifacts import EXPORTERS, export_order
    from ..registry.models import get_model

    spec = get_model(cell.model)
    own = [k for k in artifacts_of(get_framework(cell.framework), spec, cell.scenario, cell.precision)
           if k in EXPORTERS]
    entries = artifact_cache.read_manifest(folder).get("artifacts", {})
    kinds = export_order(own, spec)
    keep = ("exported_at", "versions", "brought_from", "keras_backend", "backend_check", "method")
    return {k: {key: entries[k][key] for key in keep if key in entries[k]}
            for k in kinds if isinstance(entries.get(k), dict)}


def training_plan(stats: dict[str, Any] | None, cells: int, processes: int, batch_size: int,
                  optimizer: str) -> tuple[bool, str | None]:
    """How a training group's workers fit in the memory available now: (side by side, None), (one cell at a time,
    None) when only that fits, or (False, why not even one cell's workers fit: the batch size to try)."""
    from ..base.machine import training_refusal

    if training_refusal(stats, batch_size, optimizer, cells * processes) is None:
        return True, None
    return False, training_refusal(stats, batch_size, optimizer, processes)


#: How long a group waits for memory the machine has but other processes hold (the group before's workers exit as
#: the next group starts: a suite's second group of eleven frameworks was refused once with 12 of 23 GB available).
MEMORY_WAIT_S = 20.0


def memory_refusal(stats: dict[str, Any] | None, workers: int) -> str | None:
    """Why a group's workers, loaded side by side for its interleaved rounds (one, with --sequential), would not
    fit in the memory available now (None: they fit, or the model's size is unknown)."""
    import time

    from ..base.machine import WEIGHT_COPIES, WORKER_BASE_GB, memory_shortfall, memory_total_gb

    def shortfall() -> tuple[float, float, float] | None:
        return memory_shortfall((stats or {}).get("params"), WORKER_BASE_GB, WEIGHT_COPIES, workers)

    short = shortfall()
    until = time.monotonic() + MEMORY_WAIT_S
    while short is not None and short[0] <= 0.9 * (memory_total_gb() or 0.0) and time.monotonic() < until:
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
    """The model's parameters and FLOPs, as the Keras export counted them (None: no Keras export)."""
    from ..exporters import cache as artifact_cache

    return (artifact_cache.read_manifest(folder)["artifacts"].get("keras") or {}).get("model_stats")


def cache_key(config: RunConfig, spec: Any, resolution: int) -> dict[str, Any]:
    """Everything that changes the artifacts of ``spec`` at ``resolution`` (the cache folder's name hashes it); a
    model file's weights are its own contents."""
    from ..exporters import key_inputs

    weights = spec.source.path if spec.source else config.weights
    return key_inputs(spec.name, resolution, weights, config.seed)


def exported(config: RunConfig, spec: Any, resolutions: Any) -> set[str]:
    """The artifact kinds of ``spec`` whose exporters are not installed here but which need no export at any of
    ``resolutions``: in the cache already, or brought from another machine."""
    from ..exporters import already_made

    return already_made(Path(config.cache_dir), spec, [cache_key(config, spec, r) for r in resolutions])
