"""``python -m inferbench.run``: export one model, verify every export, measure each framework.

Exit status: 0 every cell ran and no parity check failed; 1 some cell failed or failed parity;
2 bad input (one line on stderr, nothing written); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .base.device import list_gpus
from .base.reading import read_json
from .cli.common import MEASURING_EXITS, Parser, exit_status, guarded, say_skipped, typed, unmeasured_why
from .cli.jsonout import Emit, cell_summary, emitted, json_mode
from .cli.options import add_options, given, verbosity
from .cli.summary import format_summary, terminal_width
from .execution.plan import build, objective_for, open_files
from .execution.runs import run_in_folder
from .execution.tracking import where
from .options import with_defaults
from .registry import frameworks
from .registry.frameworks import SETS, in_set, unavailable_reason
from .registry.modelfiles import FILE_FORMATS, ModelFile
from .registry.models import MODELS, PREPROCESSING, get_model


def build_parser(prog: str = "python -m inferbench.run") -> argparse.ArgumentParser:
    p = Parser(
        prog=prog,
        description="Export a Keras vision model to every runtime, check each export against the Keras reference, "
        "and measure latency and throughput in interleaved rounds. Prints the recommendation first; writes one JSON "
        "record per cell, summary.csv, comparisons.csv and recommendation.json to OUTPUT_DIR/<run id>/.",
        examples=[f"{prog}                                   # the default model, each runtime at its best",
                  f"{prog} --framework all --batch-size 1,8  # every framework here, the naive variants too",
                  f"{prog} --framework tfxla --gpu-id 0      # the command line of the scripts it replaces",
                  f"{prog} --list                            # models, frameworks, and what runs here"],
        exits=MEASURING_EXITS,
    )
    add_options(p, "run")
    return p


def inventory(model: Any = None) -> dict[str, Any]:
    """Models, frameworks (and whether each runs here, else why not) and sets; with ``model`` (a ModelSpec of a
    model file), what runs it here. What ``list`` prints, and its ``--json`` document."""
    gpus = list_gpus()
    out: dict[str, Any] = {"gpus": len(gpus), "model_file": None, "pytorch_model": None}
    if model is not None and model.torch_builder is not None:
        out["pytorch_model"] = {"name": model.name, "builder": model.torch_builder, "task": model.task,
                                "layout": model.layout, "default_resolution": model.default_resolution}
    if model is not None and model.source is not None:
        f = model.source
        out["model_file"] = {"name": f.name, "format": f.format, "path": str(f.path), "layout": f.layout,
                             "input_shape": list(model.input_shape(1, f.resolution)[1:]), "batch_size": f.batch_size,
                             "task": f.task}
    out["models"] = [{"name": spec.name, "default_resolution": spec.default_resolution, "smallest": spec.smallest,
                      "builder": spec.builder_path, "torchvision": spec.torchvision_builder,
                      "preprocessing": PREPROCESSING[spec.preprocessing]} for spec in MODELS.values()]
    out["frameworks"] = []
    for fw in frameworks.FRAMEWORKS.values():
        why = {}
        for dev in ("cpu", "gpu"):
            reason = (fw.unsupported(model) if model is not None else None) or unavailable_reason(fw, dev, model)
            why[dev] = "no NVIDIA GPU on this machine" if dev == "gpu" and reason is None and not gpus else reason
        out["frameworks"].append({"key": fw.key, "description": fw.description, "runs_here": {
            dev: why[dev] is None for dev in why}, "why_not": why})
    out["sets"] = {name: {"what": what, **({} if name == "all" else {dev: [
        k for k, fw in frameworks.FRAMEWORKS.items() if in_set(fw, name, dev)] for dev in ("cpu", "gpu")})}
                   for name, what in SETS.items()}
    return out


def list_everything(out: Any = None, model: Any = None, quiet: bool = False) -> dict[str, Any]:
    """Print :func:`inventory` for people (``quiet``, --json: nothing) and return it."""
    out = out or sys.stdout
    have = inventory(model)
    if quiet:
        return have
    if have["model_file"]:
        f = have["model_file"]
        print(f"Your model: {f['name']} ({FILE_FORMATS[f['format']]}, input {'x'.join(map(str, f['input_shape']))} "
              f"{f['layout']}, batch {f['batch_size'] or 'any'}): {f['path']}\n", file=out)
    if have["pytorch_model"]:
        m = have["pytorch_model"]
        print(f"Your model: {m['name']} (a PyTorch model, {m['builder']}, {m['task']}, {m['layout']}, "
              f"{m['default_resolution']} px by default)\n", file=out)
    print("Models (inputs: seeded image-like fields; preprocessing as listed):", file=out)
    for m in have["models"]:
        tv = f"torchvision.models.{m['torchvision']}" if m["torchvision"] else "(no torchvision equivalent)"
        print(f"  {m['name']:<20} {m['default_resolution']:>3}px (min {m['smallest']:>2})  {m['builder']:<38} "
              f"{tv:<40} [{m['preprocessing']}]", file=out)
    print("  torchvision:NAME, timm:NAME  any model of those libraries, as a PyTorch model (docs/models.md)", file=out)
    print(f"\nFrameworks (GPUs found: {have['gpus']}):", file=out)
    for fw in have["frameworks"]:
        reasons = {dev: "yes" if r is None else f"no ({r})" for dev, r in fw["why_not"].items()}
        status = [f"cpu, gpu: {reasons['cpu']}"] if len(set(reasons.values())) == 1 else \
            [f"{dev}: {r}" for dev, r in reasons.items()]
        print(f"  {fw['key']:<14} {fw['description']}\n  {'':<14} {'; '.join(status)}", file=out)
    print("\nSets (--framework):", file=out)
    for name, entry in have["sets"].items():
        shown = "" if name == "all" else " (" + "; ".join(f"{dev}: {', '.join(entry[dev])}"
                                                          for dev in ("cpu", "gpu")) + ")"
        print(f"  {name:<14} {entry['what']}{shown}", file=out)
    return have


def main(argv: list[str] | None = None, prog: str = "inferbench.run", advise: bool = True) -> int:
    """``run``; ``advise`` False (selftest's check): the answer names no option of run's to try."""
    return guarded(prog, lambda a: _main(a, prog, advise), argv)


def _main(argv: list[str] | None, prog: str, advise: bool = True) -> int:
    values = with_defaults(given(build_parser(typed(prog)).parse_args(argv)), "run")
    if values["list"]:
        specs = [get_model(f.name if isinstance(f, ModelFile) else f) for f in open_files(values)]
        model = next((s for s in specs if s.source), None) or next((s for s in specs if s.torch_builder), None)
        return json_mode(values["json"], "list", lambda emit: emitted(emit, list_everything(
            model=model, quiet=values["json"])))
    return json_mode(values["json"], "run", lambda emit: _run(values, emit, advise))


def _run(values: dict[str, Any], emit: Emit, advise: bool = True) -> int:
    verbosity(values)  # a contradiction is bad input before anything starts
    built = build(values)
    config = built.config
    ran = run_in_folder(values, built, objective_for(values), verbosity(values),
                        lambda: say_skipped(built.skipped, built.notes))
    run_dir, executed, deadline = ran.folder, ran.executed, ran.deadline
    if not values["json"]:  # --json: the document is the answer, stderr has the progress and warnings only
        _say_answer(values, run_dir, executed, config, advise)
    if executed.unmeasured:
        why = unmeasured_why(deadline is not None, config.executor)
        print(f"\n{len(executed.unmeasured)} cell(s) left unmeasured {why}: {', '.join(executed.unmeasured)}",
              file=sys.stderr)
    if deadline is not None and deadline.overrun():  # (what it spent is in recommendation.json: runs.py)
        print(f"inferbench: {deadline.overrun()}", file=sys.stderr)
    status = exit_status(executed, bool(values.get("require_valid")))
    emit(run_document(run_dir, executed.records, executed.unmeasured))
    return status


def _say_answer(values: dict[str, Any], run_dir: Path, executed: Any, config: Any, advise: bool) -> None:
    """The answer for people: the table, the files written and the commands next."""
    print(format_summary(executed.records, objective_for(values), terminal_width(), unmeasured=executed.unmeasured,
                         advise=advise), file=sys.stdout)
    written = [name for name, there in (("a JSON record per cell", executed.records),
                                        *((n, (run_dir / n).exists()) for n in SUMMARY_FILES)) if there]
    print(f"\nresults: {run_dir}/ ({', '.join(written) or 'nothing could be written'})\n"
          f"next: inferbench report {run_dir} --out {run_dir}/report   (figures and the full comparison)"
          + (f"\n      inferbench compare {run_dir} --fail-above 10   (each +ab-{config.ab['digest']} twin, B, against "
             "its cell, A, paired within the rounds)" if config.ab else ""), file=sys.stdout)
    if config.log_to:
        print(where(config.log_to))


def run_document(run_dir: Path, records: list[dict[str, Any]], unmeasured: list[str] | None = None) -> dict[str, Any]:
    """``--json``: the run's answer (``recommendation.json``'s recommendations), its cells, its files, the cells
    --time-budget left unmeasured and what it spent (null without one)."""
    answer = run_dir / "recommendation.json"
    try:
        written = read_json(answer, 64 * 2**20, "answer")
    except ValueError:
        written = {}
    return {"run_dir": str(run_dir), "recommendations": written.get("recommendations", []),
            "cells": [cell_summary(r, written.get("recommendations")) for r in records],
            "files": sorted(str(p) for p in run_dir.iterdir() if p.is_file() and not p.name.startswith(".")),
            "unmeasured": list(unmeasured or []), "time_budget": written.get("time_budget")}


#: What a run writes beside its records (named in the final line only when it is there).
SUMMARY_FILES = ("summary.csv", "comparisons.csv", "recommendation.json")


if __name__ == "__main__":
    sys.exit(main())
