"""From checked option values to a run's plan: :func:`build` turns them into a :class:`~inferbench.spec.RunConfig`
(what every cell of a run shares) and its :class:`~inferbench.spec.CellKey` list (one identity per cell: file name,
label, resume, analysis grouping), with every rule across options (executor, training, memory, the time budget, the
objective); a :class:`Plan` (config + cells) is what a sweep saves and ``--resume`` reads back, checked. The options
themselves are declared in :mod:`inferbench.options`; the command lines' glue is :mod:`inferbench.cli.options`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.codec import decode, encode
from ..base.device import Device, default_threads, resolve
from ..base.errors import UsageError
from ..base.machine import cpu_precision_refusal
from ..base.size import Size, parse_size
from ..exporters import cache as artifact_cache
from ..measure.stats import TAILS, TWO_PROCESSES, needed_samples
from ..options import BY_NAME, MAX_CELLS, was_given
from ..registry.builders import refuse_imagenet
from ..registry.frameworks import SETS, Framework, choose, get_framework
from ..registry.images import open_eval_set
from ..registry.modelfiles import ModelFile, describe_weights, open_model_file
from ..registry.models import MODELS, check_torch_name, get_model, is_model_file, list_models, register, torch_source
from ..registry.scenarios import scenario
from ..registry.tasks import AUTO, LABELS_OF_LAYOUT, task
from ..spec import QUICK, CellKey, RunConfig, RunnerOptions, SlurmConfig, TimingConfig, groups_of
from . import budget
from .budget import fit, to_export
from .childenv import env_digest
from .exports import cache_key, exported
from .rules import check_ab, check_int8, check_memory, check_rules, check_target, eval_notes, int8_notes
from .tracking import check as check_tracking

PLAN_VERSION = 2


#: What a --quick run of the best set says up front.
QUICK_UNTUNED = ("--quick: not tuned (tuning's blocks would be too short to tell a setting from the default): each "
                 "runtime at its own default setting; --tune on tunes anyway")


#: What an A/B run of the best set says up front.
AB_UNTUNED = ("--ab-python: not tuned (a cell and its twin tuned apart may choose different settings, and their ratio "
              "would be the setting's and the install's together): each runtime at its own default setting; --tune on "
              "tunes both anyway, and compare RUN calls a pair tuned otherwise not comparable")


#: Worker processes a cell by default, where the rounds allow (:func:`default_processes`): two degrees of freedom
#: for what differs between processes in every cell, where two processes gave one (estimated 0 in 38-60% of runs).
DEFAULT_PROCESSES = 3


#: --scenario server's p99 bound when --slo-p99 is not given.
DEFAULT_SLO_P99_MS = 50.0


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Plan:
    """A sweep's plan: its configuration plus its cells (saved as ``sweep.json``, read by ``--resume``)."""

    config: RunConfig
    cells: tuple[CellKey, ...]
    grid: dict[str, Any] = field(default_factory=dict)  # the values as given, for the reader
    plan_version: int = PLAN_VERSION

    def to_json(self) -> str:
        return json.dumps(encode(self), indent=1, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, where: str) -> Plan:
        """A saved plan, checked field by field (an older version upgraded first); UsageError if it is not one."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if data.get("plan_version") == 1:
                data = _upgrade_plan_v1(data)
            if data.get("plan_version") != PLAN_VERSION:
                raise ValueError(f"plan_version {data.get('plan_version')!r}; this inferbench reads "
                                 f"{PLAN_VERSION} (and upgrades 1)")
            plan = decode(cls, data, "plan")
            register(*plan.config.model_files)
            check_ranges(plan)
            for i, cell in enumerate(plan.cells):
                try:
                    cell.check()
                except (ValueError, UsageError) as exc:
                    raise ValueError(f"plan.cells[{i}]: {exc}") from None
                if cell.scenario != plan.config.scenario:
                    raise ValueError(f"plan.cells[{i}]: scenario {cell.scenario!r} is not the plan's")
        except (ValueError, KeyError, TypeError, AttributeError, UsageError) as exc:
            raise UsageError(f"{where} is not a usable sweep plan: {exc}") from None
        return plan


def _upgrade_plan_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Plan 1 (the first sweep files) kept settings as a loose dict and the device as a request ('auto')."""
    s = data["settings"]
    opts = s.get("options") or {}
    options = encode(RunnerOptions(
        include_transfer=bool(opts.get("include_transfer")), channels_last=bool(opts.get("channels_last")),
        torch_compile=bool(opts.get("compile")), cuda_graphs=bool(opts.get("cuda_graphs")),
        keras_backend=str(opts.get("keras_backend") or "tensorflow")))
    device = resolve(s["device"], s.get("gpu_id"))
    cells = []
    for c in data["cells"]:
        fw = get_framework(c["framework"])
        cell_options = RunnerOptions(**options).for_framework(fw)
        cells.append({**c, "scenario": "inference", "options": encode(cell_options)})
    config = {"weights": s["weights"], "seed": s["seed"], "device": encode(device), "threads": s["threads"],
              "timing": s["timing"], "options": options, "cache_dir": "", "timeout_s": s.get("timeout")}
    return {"plan_version": PLAN_VERSION, "config": config, "cells": cells, "grid": data.get("grid", {})}


# --------------------------------------------------------------------------- from values to a config
@dataclass(frozen=True)
class Built:
    config: RunConfig
    cells: tuple[CellKey, ...]
    skipped: dict[str, str]  # frameworks 'all' left out here, with the reason
    notes: tuple[str, ...] = ()  # what the plan says up front (--time-budget: what fits)
    expected_s: float | None = None  # the plan's own estimate of its time here (the ETA before a round has ended)


def build(values: dict[str, Any]) -> Built:
    """Checked option values (defaults included) -> the run's configuration and its cells."""
    for key in ("models", "resolutions", "batch_sizes"):
        if not values[key]:
            raise UsageError(f"{key} is empty: give at least one")
    files = open_files(values)
    models = [get_model(m.name if isinstance(m, ModelFile) else m) for m in files]
    if values["weights"] == "imagenet":
        refuse_imagenet([m.name for m in models if m.keras_builder and ":" in m.keras_builder])
    check_tracking(values["log_to"])
    entry = scenario(values["scenario"])
    device = resolve(values["device"], values["gpu_id"])
    check_rules(values, entry, device)
    eval_set = open_eval_set(values["eval_dir"], values["eval_images"], values["seed"], values["follow_links"]) \
        if values.get("eval_dir") else None
    if eval_set is not None:
        check_labels(eval_set, models)
    if values.get("postprocess") == "inside":
        check_postprocess_inside(models, entry, values["scenario"])
    tuning = _tuning(values, entry)
    config = _config(values, entry, device, tuning.tune, tuple(m for m in files if isinstance(m, ModelFile)),
                     eval_set)
    plan, skipped = _frameworks(values, models, config)
    cells = _cells(values, plan, config, skipped)
    if values.get("ab_python"):  # B's twin of every cell, in the same groups (its variant: +ab-<digest>)
        install = check_ab(values, entry)
        config = dataclasses.replace(config, ab=install)
        # each twin beside its cell: a budget that leaves out a group's last cells leaves out pairs
        cells = [x for c in cells
                 for x in (c, dataclasses.replace(c, options=dataclasses.replace(c.options, ab=install["digest"])))]
    calibration = check_int8(values, cells, config.device.kind)
    config = dataclasses.replace(config, calibration=calibration)
    notes = tuning.notes + eval_notes(eval_set, config.weights, models) + int8_notes(calibration, eval_set)
    if values.get("time_budget"):  # what fits: rounds shortened, then the costliest frameworks left out
        here = config.device.kind == "cpu" and values["executor"] == "local"  # a GPU's, or other nodes', load
        fitted = fit(config, list(dict.fromkeys(cells)), values["time_budget"], to_export(config, cells),
                     budget.busy_slowdown(config.threads) if here else (1.0, None))
        config, cells, notes = fitted.config, list(fitted.cells), notes + fitted.lines
    check_memory(cells)
    cells = list(dict.fromkeys(cells))
    expected = budget.estimate(config, cells, to_export(config, cells))
    notes += reexports(config, cells) + ((TWO_PROCESSES,) if config.processes == 2 else ())
    if not values.get("time_budget"):  # (a budget's own lines say what the plan takes)
        notes += (f"the plan: {len(cells)} cell(s) in {len(groups_of(cells, config.sequential))} group(s), about "
                  f"{budget.say(expected)} here (exports included; the progress line's ETA follows the rounds)",)
    return Built(config, tuple(cells), skipped, notes, expected)


def reexports(config: RunConfig, cells: list[CellKey]) -> tuple[str, ...]:
    """A line per model and resolution exported again although the cache holds them: the installed packages (every
    exporter's version is part of the cache's key) changed since, and which."""
    out = []
    for model, resolution in dict.fromkeys((c.model, c.resolution) for c in cells):
        changed = artifact_cache.versions_changed(Path(config.cache_dir), cache_key(config, get_model(model),
                                                                                     resolution))
        if changed:
            out.append(f"exporting {model}@{resolution} again into a new folder of the artifact cache "
                       f"({config.cache_dir}): the installed packages changed since its last export ({changed})")
    return tuple(out)


@dataclass(frozen=True)
class _Tuning:
    tune: bool
    notes: tuple[str, ...]  # why the best set is measured untuned


def _tuning(values: dict[str, Any], entry: Any) -> _Tuning:
    """Whether the cells are tuned, and why not where the best set would have been: --quick's tuning blocks (1 s
    over every setting and 3 rounds: 83 ms each) gave intervals of 0.02-7.0 that could never tell a setting from the
    default; an A/B's cell and twin tuned apart may choose different settings (their ratio the setting's and the
    install's together)."""
    auto = values["tune"] == "auto" and "best" in values["frameworks"]
    quick_untuned = bool(entry.tunes and auto and values.get("quick"))
    ab_untuned = bool(entry.tunes and auto and values.get("ab_python") and not quick_untuned)
    tune = entry.tunes and (values["tune"] == "on" or (auto and not quick_untuned and not ab_untuned))
    return _Tuning(tune, ((QUICK_UNTUNED,) if quick_untuned else ()) + ((AB_UNTUNED,) if ab_untuned else ()))


def _timing(values: dict[str, Any], entry: Any) -> tuple[TimingConfig, int]:
    """The timing every cell shares and the worker processes a cell: --quick's shortened defaults where the user
    set nothing else; one process a serving cell; a tail objective's rounds long enough to hold it."""
    iterations, rounds, duration, warmup_s = (values["min_iterations"], values["rounds"], values["duration"],
                                              values["warmup_seconds"])
    processes = values["processes"]
    if values.get("quick"):  # a first answer: the defaults shortened (what the user set stays, default or not)
        rounds = rounds if was_given(values, "rounds") else QUICK["rounds"]
        duration = duration if was_given(values, "duration") else QUICK["min_duration_s"]
        warmup_s = warmup_s if was_given(values, "warmup_seconds") else QUICK["warmup_seconds"]
        processes = processes if was_given(values, "processes") else QUICK["processes"]
    processes = 1 if entry.serves else processes or default_processes(rounds)
    check_target(values.get("target_ci"), processes)
    if values.get("objective") in TAILS:  # a tail is ranked only where every round holds it: enough samples in each
        iterations = max(iterations, needed_samples(TAILS[values["objective"]]) * rounds)
    return TimingConfig(warmup_iterations=values["warmup"], warmup_seconds=warmup_s, min_duration_s=duration,
                        min_iterations=iterations, rounds=rounds), processes


def _config(values: dict[str, Any], entry: Any, device: Device, tune: bool, model_files: tuple[ModelFile, ...],
            eval_set: Any) -> RunConfig:
    """What every cell of the run shares."""
    options = RunnerOptions(**{f.name: values[f.name] for f in dataclasses.fields(RunnerOptions)
                               if f.name not in ("tune", "env", "ab")}, tune=tune, env=env_digest(values["pass_env"]))
    timing, processes = _timing(values, entry)
    cache_dir = str(Path(values["cache_dir"] or artifact_cache.default_cache_dir()).resolve())
    return RunConfig(weights=describe_weights(str(values["weights"])), seed=values["seed"],
                     device=device, threads=values["threads"] or default_threads(), timing=timing, options=options,
                     cache_dir=cache_dir, timeout_s=values["timeout"], scenario=values["scenario"],
                     pass_env=tuple(values["pass_env"]), model_files=model_files, log_to=tuple(values["log_to"]),
                     sequential=values["sequential"], max_other_load=values["max_other_load"] / 100.0,
                     allow_busy=values["allow_busy"], tune_budget_s=values["tune_budget"], processes=processes,
                     quick=bool(values.get("quick")),
                     slo_p99_ms=values.get("slo_p99") or (DEFAULT_SLO_P99_MS if entry.bound else None),
                     executor=values["executor"], ray_address=values.get("ray_address"),
                     machines=tuple(values["machines"]), slurm=slurm_config(values),
                     agreement_inputs=values["agreement_inputs"],
                     eval_set=eval_set, trust_cache=bool(values.get("trust_cache")),
                     target_ci=values["target_ci"] / 100.0 if values.get("target_ci") else None)


def slurm_config(values: dict[str, Any]) -> SlurmConfig | None:
    """--executor slurm's job settings (None with another executor)."""
    if values["executor"] != "slurm":
        return None
    return SlurmConfig(partition=values.get("partition"), account=values.get("account"),
                       gpus_per_job=values.get("gpus_per_job"), time_limit_min=values.get("job_time_limit"),
                       sbatch=tuple(values.get("sbatch") or ()), cluster=values.get("slurm_cluster") or "slurm")


#: Per model: (its spec, its resolutions, each framework that runs it with its precisions).
_Grid = list[tuple[Any, Any, list[tuple[Framework, list[str]]]]]


def _size(text: Any) -> Size:
    """A resolution as the API may pass it (224, "224", "384x640"); one line for anything else."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise UsageError(f"--resolution: {exc}") from None


def _frameworks(values: dict[str, Any], models: list[Any], config: RunConfig) -> tuple[_Grid, dict[str, str]]:
    """Per model, its resolutions and the frameworks (with their precisions) that can run it here; and why 'all'
    left a framework out. A framework named explicitly that runs none of several models, a precision this CPU would
    emulate: one line each."""
    left: dict[str, dict[str, str]] = {}  # framework -> model -> why 'all' left it out
    explicit = not set(values["frameworks"]) & {"all", "best"}
    plan: _Grid = []
    for spec in models:
        res_list = dict.fromkeys(spec.resolution(None if r == "default" else spec.smallest if r == "min" else _size(r))
                                 for r in values["resolutions"])
        have = exported(config, spec, res_list)
        frameworks, left_out = choose(values["frameworks"], config.device.kind, spec, config.options, have,
                                      config.scenario, lenient=len(models) > 1)
        for k, why in left_out.items():
            left.setdefault(k, {})[spec.name] = why
        plan.append((spec, res_list, [(fw, precisions_of(fw, values["precisions"], explicit,
                                                         beside=not values.get("reduced_only"))) for fw in frameworks]))
    if config.device.kind == "cpu" and values["executor"] == "local":  # a reduced precision this CPU would emulate
        # (on Ray's nodes the CPUs are theirs, not this one's: each worker's record says what it executed)
        used = {p for _, _, fws in plan for _, ps in fws for p in ps}
        refused = next((refusal for p in sorted(used) if (refusal := cpu_precision_refusal(p))), None)
        if refused:
            raise UsageError(refused)
    for key in values["frameworks"]:  # named explicitly and runnable on none of several models: as for one model
        if key not in SETS and len(left.get(key, {})) == len(models) > 1:
            raise UsageError(f"{key}: {next(iter(left[key].values()))}")
    skipped = {k: next(iter(by.values())) if len(by) == 1 or len(set(by.values())) == 1 and len(by) == len(models)
               else f"not for {len(by)} of {len(models)} models: {', '.join(by)} (e.g. {next(iter(by.values()))})"
               for k, by in left.items()}
    return plan, skipped


def _cells(values: dict[str, Any], plan: _Grid, config: RunConfig, skipped: dict[str, str]) -> list[CellKey]:
    """The grid's cells, its size checked by arithmetic before one is made (a 1.7-million-cell grid is refused at
    once; more than MAX_CELLS needs --yes)."""
    timing = config.timing
    size = sum(len(res) * len(values["batch_sizes"]) * sum(len(p) for _, p in fws) for _, res, fws in plan)
    if not size:
        why = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no framework chosen"
        raise UsageError(f"nothing can run here ({why})")
    if size > MAX_CELLS and not values["yes"]:
        per_cell = timing.min_duration_s + timing.warmup_seconds + 10.0  # + loading, parity, first call
        raise UsageError(f"this grid has {size:,} cells (more than {MAX_CELLS}), about "
                         f"{size * per_cell / 3600:,.0f} h at {per_cell:.0f} s per cell; pass --yes to run it")
    return [CellKey(spec.name, res, bs, fw.key, prec, config.scenario, config.options.for_framework(fw))
            for spec, res_list, fws in plan for res in res_list for bs in values["batch_sizes"]
            for fw, precs in fws for prec in precs]


def default_processes(rounds: int) -> int:
    """Worker processes a cell when --processes is not given: :data:`DEFAULT_PROCESSES` where the rounds give each
    at least two (a spread within every process beside the one between them), else two (one round: one)."""
    return min(rounds, DEFAULT_PROCESSES if rounds >= 2 * DEFAULT_PROCESSES else 2)


def check_postprocess_inside(models: list[Any], entry: Any, name: str) -> None:
    """``--postprocess inside`` needs a task that post-processes and a scenario that times calls back to back; one
    line otherwise."""
    if entry.serves or entry.trains:
        raise UsageError(f"--postprocess inside applies to the inference scenario, not --scenario {name}")
    for m in models:
        if not task(m.task).postprocess:
            raise UsageError(f"--postprocess inside: {m.name} ({m.task} outputs) has no post-processing to time; "
                             "it applies to detection and segmentation models")


def check_labels(eval_set: Any, models: list[Any]) -> None:
    """Every model's task measures its accuracy on what the labelled set labels its images with (classes, or a COCO
    file's boxes); one line otherwise."""
    have = LABELS_OF_LAYOUT.get(eval_set.layout)
    for m in models:
        needs = task(m.task).labels
        if not needs:
            raise UsageError(f"--eval-dir: inferbench measures no accuracy for {m.name} ({m.task} outputs) yet; "
                             "leave --eval-dir out")
        if needs != have:
            what = {"coco": "a COCO instances file", "labels": "a labels file",
                    "masks": "a folder of images and masks"}.get(eval_set.layout,
                                                                                   "a folder per class")
            raise UsageError(f"--eval-dir: {what} labels its images with {have}, and {m.name} ({m.task}) is measured "
                             f"on {needs}")


def open_files(values: dict[str, Any]) -> list[str | ModelFile]:
    """``--model`` values: registered names as they are, model files opened, checked and registered."""
    given = expand_patterns(values["models"])
    pytorch = [m for m in given if torch_source(m) and not is_model_file(m)]
    if pytorch and str(values["weights"]) not in ("random", "imagenet"):
        raise UsageError("--weights takes random or imagenet for a PyTorch model (torchvision:NAME, timm:NAME): a "
                         "weights file is a Keras model's")
    names = [check_torch_name(m) if m in pytorch else m for m in given]
    files: list[str | ModelFile] = list(names)
    if not any(is_model_file(m) for m in names):
        for key, flag, default in (("input_shape", "--input-shape", None), ("task", "--task", AUTO)):
            if values.get(key, default) != default:
                raise UsageError(f"{flag} applies to a model file (--model PATH) only")
        return files
    if str(values["weights"]) != "random":
        raise UsageError("--weights applies to registered models; a model file brings its own weights")
    res = [r for r in values["resolutions"] if r not in ("default", "min")]
    if len(res) > 1:
        raise UsageError("a model file runs at one resolution: give one --resolution (or --input-shape)")
    for i, m in enumerate(names):
        if is_model_file(m):
            found = files[i] = open_model_file(m, values["input_shape"], res[0] if res else None,
                                                values.get("task", AUTO))
            register(found)
            if found.batch_size is not None and set(values["batch_sizes"]) != {found.batch_size}:
                raise UsageError(f"{m} has its batch size fixed to {found.batch_size}: pass --batch-size "
                                 f"{found.batch_size} (or export it with a dynamic batch dimension)")
    return files


def expand_patterns(models: list[str]) -> list[str]:
    """``--model`` values with shell-style patterns (``efficientnet_b*``, ``*``) replaced by the registered models
    they match, in registry order; a pattern that matches none is bad input."""
    out: list[str] = []
    for m in models:
        if any(ch in m for ch in "*?[") and "/" not in m and not Path(m).exists():  # a file may have * in its name
            matched = set(list_models(m))
            if not matched:
                raise UsageError(f"--model {m} matches no registered model (see inferbench list)")
            out += [name for name in MODELS if name in matched]
        else:
            out.append(m)
    return list(dict.fromkeys(out))


def precisions_of(fw: Framework, requested: list[str], explicit: bool, beside: bool = True) -> list[str]:
    """The precisions a framework runs at: those of ``requested`` it takes, else its own. A reduced precision comes
    with the framework's own FP32 beside it in the same rounds (``beside``; --reduced-only: without), so that the
    answer can say what it gains and what it costs. A framework named explicitly must take at least one of them."""
    taken = [p for p in requested if fw.takes(p)]
    if taken:
        return (["fp32"] if beside and fw.precision == "fp32" and "fp32" not in taken else []) + taken
    if requested and explicit:
        fw.precision_for(requested[0])  # raises the one-line explanation
    return [fw.precision]


def objective_for(values: dict[str, Any]) -> str:
    """The objective of a run: as given, else its scenario's own (server: the QPS within the bound)."""
    if was_given(values, "objective") and values.get("objective"):
        return str(values["objective"])
    return scenario(values.get("scenario")).objective


def check_ranges(plan: Plan) -> None:
    """A saved plan's numbers through the same range rules as the flags (a hand edit cannot bypass them)."""
    c, t = plan.config, plan.config.timing
    numbers: list[tuple[str, Any]] = [
        ("duration", t.min_duration_s), ("warmup_seconds", t.warmup_seconds), ("warmup", t.warmup_iterations),
        ("min_iterations", t.min_iterations), ("rounds", t.rounds), ("seed", c.seed), ("threads", c.threads),
        ("timeout", c.timeout_s)]
    numbers += [(name, value) for cell in plan.cells
                for name, value in (("batch_sizes", cell.batch_size), ("resolutions", cell.resolution))]
    for name, value in numbers:
        if value is not None:
            BY_NAME[name].check(value if isinstance(value, (int, str)) else repr(float(value)), "plan")
    inside = [get_model(c.model) for c in plan.cells if c.options.postprocess == "inside"]
    if inside:  # (a cell tagged so whose task has nothing to post-process would be timed bare under the tag)
        check_postprocess_inside(inside, scenario(plan.config.scenario), plan.config.scenario)
    check_memory(plan.cells)
