"""inferbench's public Python API: what the command lines do, from Python, with typed results.

::

    from inferbench import api

    plan = api.plan(frameworks=["onnxrt", "openvino"], batch_sizes=[1, 8], quick=True)
    result = api.run(plan)                        # the records, the answer, the folder
    print("\\n".join(result.answer_lines()))
    df = api.load(result.folder)                  # one row per record (pandas)
    cmp = api.compare("runs/main", result.folder, fail_above=10)
    api.report(result.folder, out="report")       # report.md, report.html and figures

Options are the command line's, by their names in a sweep config file (``frameworks``, ``batch_sizes``,
``precisions``, ``quick``...; ``inferbench run --help`` lists them), checked by the same rules. Nothing heavy is
imported here: pandas and matplotlib are imported by :func:`load`, :func:`report` and the figure functions of
:mod:`inferbench.analysis.plots`, the frameworks only in the child processes that measure.

Names: :func:`plan`, :func:`run`, :func:`export`, :func:`records`, :func:`load`, :func:`recommend`,
:func:`compare`, :func:`report`, the types they return (:class:`Plan`, :class:`RunResult`, :class:`Comparison`, and
the record itself, :class:`Record`), and two modules for the frame :func:`load` returns: ``frames`` (tables: the
latest of each cell, podiums, fronts, ratios) and ``plots`` (the report's figures), imported when first asked for.
docs/python.md has a runnable example.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analysis.answer import recommendation_lines
from .analysis.comparison import ab_frame, compare_frames, geometric_mean_of, summary_lines
from .analysis.ranking import recommendations
from .base.codec import encode
from .base.errors import UsageError, did_you_mean
from .base.size import Size
from .execution.exports import ensure_exports
from .execution.plan import Built, build, objective_for
from .execution.progress import Progress
from .execution.runs import run_in_folder
from .options import BY_NAME, GIVEN, with_defaults
from .records.load import read_records
from .records.record import Record
from .registry.frameworks import get_framework
from .spec import CellKey, RunConfig

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from .analysis import frames, plots

__all__ = ["Comparison", "Plan", "Record", "RunResult", "compare", "export", "frames", "load", "plan", "plots",
           "recommend", "records", "report", "run"]

Paths = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


@dataclass(frozen=True)
class Plan:
    """A checked plan: the configuration every cell shares, the cells (one identity each), what the plan says up
    front, and the option values it was built from."""

    config: RunConfig
    cells: tuple[CellKey, ...]
    notes: tuple[str, ...]
    skipped: dict[str, str]  # frameworks 'all' or 'best' left out on this machine, with why
    values: Mapping[str, Any] = field(repr=False, default_factory=dict)


def plan(**options: Any) -> Plan:
    """The plan ``inferbench run`` would make of these options (a sweep config file's names and values: lists
    where the flag takes several), checked by the same rules; a UsageError says what cannot hold."""
    unknown = [k for k in options if k not in BY_NAME or "run" not in BY_NAME[k].commands]
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r}{did_you_mean(unknown[0], BY_NAME)}")
    values = with_defaults({k: BY_NAME[k].check(v, "api.plan") for k, v in options.items()}, "run")
    built: Built = build(values)
    return Plan(built.config, built.cells, built.notes, built.skipped, values)


@dataclass(frozen=True)
class RunResult:
    """A run that ended: its folder, a typed record per cell, the answer (``recommendation.json``'s
    recommendations) and the cells --time-budget left unmeasured."""

    folder: Path
    records: list[Record]
    answer: list[dict[str, Any]]
    unmeasured: list[str]

    def answer_lines(self) -> list[str]:
        """The answer as the terminal prints it: the validity line, then each group's recommendation."""
        return recommendation_lines(self.answer)


def run(planned: Plan | None = None, *, output_dir: str | os.PathLike[str] = "inferbench-results", verbosity: int = 0,
        **options: Any) -> RunResult:
    """Measure a plan (or the plan of ``options``) as ``inferbench run`` does, in a new folder under
    ``output_dir``; progress on stderr (``verbosity`` -1: none)."""
    chosen = planned if planned is not None else plan(**options)
    values = {**chosen.values, "output_dir": str(output_dir),  # given here: the history goes beside it, as the CLI's
              GIVEN: frozenset(chosen.values.get(GIVEN, ())) | {"output_dir"}}
    built = Built(chosen.config, chosen.cells, chosen.skipped, chosen.notes)
    ran = run_in_folder(values, built, objective_for(values), verbosity)
    typed, _ = read_records(ran.folder)
    answer = recommendations([encode(r) for r, _ in typed], objective_for(values))
    return RunResult(ran.folder, [r for r, _ in typed], answer, list(ran.executed.unmeasured))


def export(planned: Plan | None = None, **options: Any) -> list[Path]:
    """Export (or find in the artifact cache) what a plan's cells need, without measuring: the artifact folder of
    each (model, resolution), to time later or to carry to a machine that cannot export (a GPU machine without
    TensorFlow). A UsageError where an export failed."""
    chosen = planned if planned is not None else plan(**options)
    folders = []
    for (model, resolution), cells in _by_model(chosen.cells).items():
        frameworks = [get_framework(k) for k in dict.fromkeys(c.framework for c in cells)]
        sizes = tuple(sorted({c.batch_size for c in cells}))
        folder, failed = ensure_exports(chosen.config, model, resolution, frameworks, sizes, Progress(0, verbosity=-1),
                                        agreement_inputs=chosen.config.agreement_inputs if any(
                                            c.precision != "fp32" for c in cells) else 0,
                                        quantized=tuple(c.framework for c in cells if c.precision == "int8"))
        if failed:
            raise UsageError(f"{model}@{resolution}: exports failed: " + "; ".join(f"{k}: {v}" for k, v in
                                                                                 failed.items()))
        folders.append(folder)
    return folders


def _by_model(cells: Iterable[CellKey]) -> dict[tuple[str, Size], list[CellKey]]:
    out: dict[tuple[str, Size], list[CellKey]] = {}
    for c in cells:
        out.setdefault((c.model, c.resolution), []).append(c)
    return out


def records(paths: Paths) -> list[Record]:
    """Every record under ``paths`` (result folders, searched recursively, or record files), upgraded to the current
    schema and typed; a file that is not a readable record is left out (:func:`load` names them)."""
    out: list[Record] = []
    for path in _paths(paths):
        found, _ = read_records(Path(path))
        out += [r for r, _ in found]
    return out


def load(paths: Paths, quick_looks: bool = False) -> pd.DataFrame:
    """One row per record under ``paths`` (pandas), nested fields flattened with dots (``latency_ms.p50``) and the
    analysis' columns added (``p50_ms``, ``ranked``, ``device_name``...; docs/results-schema.md). Quick looks
    (``--quick``, the zoo's one round) are left out unless every record is one or ``quick_looks`` is true."""
    from .analysis.frames import load as load_frame
    from .analysis.frames import measured

    df = load_frame(list(_paths(paths)))
    return df if quick_looks else measured(df)


def recommend(paths: Paths | Iterable[Record], objective: str = "p50") -> list[dict[str, Any]]:
    """The answer per group (device, threads, scenario, model, resolution, batch size): the best verified cell for
    ``objective`` (p50, p90, p99, throughput, energy), its interval and its margin over the runner-up."""
    if objective not in ("p50", "p90", "p99", "throughput", "energy"):
        raise UsageError(f"objective {objective!r} is not one of p50, p90, p99, throughput, energy")
    items: list[Any] = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)  # read once (a generator)
    typed = items if items and all(isinstance(r, Record) for r in items) else records(items)
    return recommendations([encode(r) for r in typed], objective)


@dataclass(frozen=True)
class Comparison:
    """``compare``'s answer: a row per cell in common (NEW over OLD, or an A/B twin over its cell, with the interval
    and the verdict), the notes on what was pooled or left out, the summary lines and the geometric mean."""

    rows: list[dict[str, Any]]
    notes: list[str]
    summary: list[str]
    geometric_mean: dict[str, Any] | None

    @property
    def regressions(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if "REGRESSION" in str(r["verdict"])]


def compare(old: Paths, new: Paths | None = None, fail_above: float | None = None) -> Comparison:
    """NEW's median latency over OLD's per cell, as ``inferbench compare OLD NEW`` judges it; with ``new`` None,
    ``old`` is one run made with ``--ab-python`` and each twin is judged against its cell."""
    from .analysis.frames import load as load_frame

    if new is None:
        rows, notes = ab_frame(load_frame(list(_paths(old))), fail_above)
    else:
        rows, notes = compare_frames(load_frame(list(_paths(old))), load_frame(list(_paths(new))), fail_above)
    return Comparison(rows, notes, summary_lines(rows, ab=new is None), geometric_mean_of(rows))


def report(paths: Paths, out: str | os.PathLike[str], objective: str | None = None) -> Path:
    """``report.md`` (with its figures) and ``report.html`` of the records under ``paths``, in ``out``; returns
    the path of report.md."""
    from .analysis.report import write_report

    return write_report([str(p) for p in _paths(paths)], Path(out), objective=objective)


def __getattr__(name: str) -> Any:
    """``frames`` and ``plots``, imported when first asked for (they import pandas and matplotlib)."""
    if name in ("frames", "plots"):
        import importlib

        return importlib.import_module(f"inferbench.analysis.{name}")
    raise AttributeError(f"module 'inferbench.api' has no attribute {name!r}")


def _paths(paths: Paths) -> list[str | os.PathLike[str]]:
    out = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not out:
        raise UsageError("no result folders given")
    return out
