"""``python -m inferbench.sweep``: a grid of cells (models x resolutions x batch sizes x frameworks x
precisions), each isolated as in ``run``, resumable.

    python -m inferbench.sweep --models mobilenet_v3_large,resnet50 --resolutions 160,224 \\
        --batch-sizes 1,8,32 --frameworks all
    python -m inferbench.sweep --config sweep.toml
    python -m inferbench.sweep --resume inferbench-results/sweeps/<sweep id>

The plan (the configuration plus its cells) is written to ``<sweep dir>/sweep.json`` before the
first cell; every record is written atomically under its cell's file name, so ``--resume`` after
Ctrl-C or a kill runs exactly the cells that have no record yet.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .analysis.runfiles import note_time_budget
from .base.device import list_gpus
from .base.errors import UsageError, check_printable
from .base.files import atomic_write_text, check_writable, new_folder
from .base.reading import read_text
from .base.text import excerpt
from .cli.common import MEASURING_EXITS, Parser, exit_status, guarded, say_skipped, typed, unmeasured_why
from .cli.options import add_options, given, read_config_file, verbosity
from .cli.summary import format_summary, terminal_width
from .execution import budget
from .execution.ab import differs, install_of
from .execution.budget import first_group_s, say, to_export
from .execution.executors import check_cluster, executor_class
from .execution.folders import folder_lock
from .execution.pipeline import execute, machine_folders
from .execution.plan import Plan, build, objective_for
from .execution.tracking import where
from .exporters import cache as artifact_cache
from .exporters.cache import check_cache_dir
from .options import BY_NAME, with_defaults
from .spec import record_filename
from .timeline.keep import location

PLAN = "sweep.json"
#: The most a saved plan may hold (a million-cell grid is refused before it is made; the zoo's 580 cells: 190 kB).
PLAN_BYTES = 64 * 2**20
GRID = ("models", "resolutions", "batch_sizes", "frameworks", "precisions")


def build_parser(prog: str = "python -m inferbench.sweep") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Measure a grid of cells (models x resolutions x batch sizes x frameworks x "
               "precisions), each framework isolated as in run; the plan is saved first, so an interrupted sweep "
               "resumes where it stopped. Options may come from a TOML, JSON or YAML file (--config).",
               examples=[f"{prog} --models mobilenet_v3_large,resnet50 --resolutions 160,224 --batch-sizes 1,8,32",
                         f"{prog} --config benchmarks/sweep_cpu.toml --name cpu-2core-20261126",
                         f"{prog} --resume benchmark_results/sweeps/cpu-2core-20261126"], exits=MEASURING_EXITS)
    add_options(p, "sweep")
    return p


def make_plan(values: dict[str, Any], command: str = "sweep") -> tuple[Plan, dict[str, str], tuple[str, ...]]:
    """Command-line values over config-file values over ``command``'s defaults -> the checked plan."""
    merged = {**(read_config_file(str(values["config"])) if values.get("config") else {}), **values}
    merged = with_defaults(merged, command)
    built = build(merged)
    return Plan(built.config, built.cells, grid={k: merged[k] for k in GRID}), built.skipped, built.notes


def resumed(sweep_dir: Path, values: dict[str, Any]) -> Plan:
    """The saved plan of ``sweep_dir``, checked; the only flag it takes is the plan's own --cache-dir."""
    try:
        text = read_text(sweep_dir / PLAN, PLAN_BYTES, "plan")
    except ValueError as exc:
        raise UsageError(f"{sweep_dir} is not a sweep folder (no readable {PLAN}: {excerpt(exc, 120)})") from None
    plan = Plan.from_json(text, str(sweep_dir / PLAN))
    extra = [k for k in values if k not in ("resume", "cache_dir", "objective", "quiet", "verbose", "require_valid",
                                            "time_budget", "trust_cache")]
    if extra:
        flags = ", ".join(BY_NAME[k].flags[-1] for k in extra)
        raise UsageError(f"--resume runs the saved plan; drop {flags}")
    cache_dir = values.get("cache_dir")
    if plan.config.cache_dir and cache_dir and Path(str(cache_dir)) != Path(plan.config.cache_dir):
        raise UsageError(f"--resume uses the sweep's own cache dir {plan.config.cache_dir}; drop --cache-dir")
    if not plan.config.cache_dir:  # a plan of version 1 did not record it

        plan = dataclasses.replace(plan, config=dataclasses.replace(
            plan.config, cache_dir=str(cache_dir or artifact_cache.default_cache_dir())))
    gpu = plan.config.device.gpu
    if gpu is not None and gpu.uuid not in {g.uuid for g in list_gpus()}:
        raise UsageError(f"the sweep ran on GPU {gpu.uuid} ({gpu.name}), which this machine does not have")
    if plan.config.ab:  # --ab-python's B must still be the install the sweep's twins were measured by

        now = install_of(plan.config.ab["executable"])
        if now["digest"] != plan.config.ab["digest"]:
            changed = differs(plan.config.ab["packages"], now["packages"]) or "its interpreter or Python"
            raise UsageError(f"--resume: B ({plan.config.ab['executable']}) is no longer the install this sweep's "
                             f"twins were measured by ({changed}): start a new sweep")
    if values.get("time_budget"):
        first_group_fits(plan, sweep_dir, float(values["time_budget"]))  # type: ignore[arg-type]
    return plan


def first_group_fits(plan: Plan, sweep_dir: Path, budget_s: float) -> None:
    """--resume --time-budget: the saved plan is not shrunk; its next group must fit the budget (else one line, exit
    2), the rest is kept to while it runs."""
    folders = machine_folders(plan.config, sweep_dir).values()
    todo = [c for c in plan.cells if not all((folder / c.filename).exists() for folder in folders)]
    if todo:
        first, needs = first_group_s(plan.config, todo, to_export(plan.config, todo))
        if needs > budget_s:
            raise UsageError(f"--time-budget {say(budget_s)} is too short for the sweep's next group "
                             f"({first[0].model}@{first[0].resolution} bs{first[0].batch_size}, about {say(needs)})")


def adopt_legacy_names(sweep_dir: Path, plan: Plan) -> None:
    """A version-1 sweep named its records without the runner-option tag (called under the folder's lock)."""
    for cell in plan.cells:
        legacy = sweep_dir / record_filename(cell.model, cell.resolution, cell.batch_size, cell.framework,
                                             cell.precision)
        if cell.variant and legacy.exists() and not (sweep_dir / cell.filename).exists():
            os.replace(legacy, sweep_dir / cell.filename)


def main(argv: list[str] | None = None, prog: str = "inferbench.sweep") -> int:
    return guarded(prog, lambda a: _main(a, prog), argv, "finish it with --resume (completed cells are kept)")


def _main(argv: list[str] | None, prog: str) -> int:
    return execute_sweep(given(build_parser(typed(prog)).parse_args(argv)))


def execute_sweep(values: dict[str, Any], command: str = "sweep",
                  finish: Callable[[Path, list[dict[str, Any]]], None] | None = None) -> int:
    """A new sweep (``values``: the options given, on ``command``'s defaults) or a resumed one (``resume``);
    ``finish(folder, records)`` runs after the cells (the zoo's matrix)."""
    if "resume" in values:
        sweep_dir = Path(str(values["resume"]))
        plan = resumed(sweep_dir, values)
        check_cache_dir(Path(plan.config.cache_dir), bool(values.get("trust_cache")))
        check_cluster(plan.config)
        with folder_lock(sweep_dir):
            adopt_legacy_names(sweep_dir, plan)
            return _run(plan, sweep_dir, objective_for({**values, "scenario": plan.config.scenario}), verbosity(values),
                        finish, bool(values.get("require_valid")), values.get("time_budget"), command != "zoo",
                        location(values))
    else:
        plan, skipped, notes = make_plan(values, command)
        name = check_printable(str(values.get("name") or time.strftime(f"{command}-%Y%m%d-%H%M%S")), "--name")
        if name in (".", "..") or "/" in name or "\\" in name or name.startswith("-"):  # never outside --output-dir
            raise UsageError(f"--name must be a plain folder name inside --output-dir, got {name!r}")
        check_cluster(plan.config)  # the cluster answers and can run a cell, before anything is made
        check_cache_dir(Path(plan.config.cache_dir), bool(values.get("trust_cache")))  # all before the plan is written
        out_root = Path(str(values.get("output_dir") or BY_NAME["output_dir"].default_for(command)))
        check_writable(out_root)
        try:  # created exclusively: no other sweep shares it (a default name is numbered on a clash)
            sweep_dir = new_folder(out_root, name, numbered="name" not in values)
        except FileExistsError:
            held = "holds a sweep; use --resume " + str(out_root / name) + " or" if (out_root / name / PLAN).exists() \
                else "exists; use"
            raise UsageError(f"{out_root / name} already {held} another --name") from None
        say_skipped(skipped, notes)
        with folder_lock(sweep_dir):  # held from the plan's write on: no --resume can take the folder first
            try:
                atomic_write_text(sweep_dir / PLAN, plan.to_json())
            except OSError:
                shutil.rmtree(sweep_dir, ignore_errors=True)  # a full disk leaves no half-made sweep behind
                raise
            return _run(plan, sweep_dir, objective_for({**values, "scenario": plan.config.scenario}), verbosity(values),
                        finish, bool(values.get("require_valid")), values.get("time_budget"), command != "zoo",
                        location(values))


def _run(plan: Plan, sweep_dir: Path, objective: str, level: int = 0,
         finish: Callable[[Path, list[dict[str, Any]]], None] | None = None, require_valid: bool = False,
         budget_s: float | None = None, benchmark: bool = True, history: str = "") -> int:
    machines = plan.config.machines
    print(f"sweep {sweep_dir}: {len(plan.cells)} cells" + (f" on each of {', '.join(machines)}" if machines else "")
          + {"ray": " (Ray)", "slurm": " (Slurm jobs)"}.get(plan.config.executor, ""), file=sys.stderr)
    # a model whose export cannot start (e.g. weights that do not fit it) fails its own cells only

    executor = executor_class(plan.config)  # the same group loop: each group here, a Ray task or a Slurm job
    deadline = budget.Deadline(budget_s) if budget_s else None
    executed = execute(plan.config, list(plan.cells), sweep_dir, sweep_dir.name, strict=False, objective=objective,
                       verbosity=level, deadline=deadline, executor=executor, history=history)
    print(format_summary(executed.records, objective, terminal_width(), benchmark))
    if finish is not None:
        finish(sweep_dir, executed.records)
    if executed.unmeasured:
        why = unmeasured_why(deadline is not None, plan.config.executor)
        print(f"\n{len(executed.unmeasured)} cell(s) left unmeasured {why}: finish with "
              f"inferbench sweep --resume {sweep_dir}", file=sys.stderr)
    if deadline is not None:  # what the budget was and what was spent, in the run's answer

        note_time_budget(sweep_dir, deadline.spent())
        if deadline.overrun():
            print(f"inferbench: {deadline.overrun()}", file=sys.stderr)
    print(f"\nresults: {sweep_dir}/\nnext: inferbench report {sweep_dir} --out REPORT_DIR")
    if plan.config.log_to:
        print(where(plan.config.log_to))
    return exit_status(executed, require_valid)


if __name__ == "__main__":
    sys.exit(main())
