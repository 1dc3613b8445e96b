"""The one column table of a record: its fields by dotted name, its display name, the summary's columns and rows,
and every CSV inferbench writes (each text cell neutralised for spreadsheets)."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.files import atomic_write_text
from ..base.text import visible
from ..measure.training import STEP_FLOPS_FACTOR
from ..registry.scenarios import scenario
from .roofline import COLUMNS as ROOFLINE_COLUMNS
from .roofline import FP32_ROOF, roofline

if TYPE_CHECKING:  # pragma: no cover

    pass


#: A reduced-precision cell against its own runtime's FP32 (filled by
#: :func:`inferbench.analysis.runfiles.summary_rows`).
VS_FP32_COLUMNS = ("fp32_cell", "gain_over_fp32", "gain_over_fp32_ci95_low", "gain_over_fp32_ci95_high",
                   "top1_agreement_with_fp32", "top1_accuracy_points_vs_fp32", "accuracy_kept_vs_fp32",
                   "not_ranked_because")

SUMMARY_COLUMNS = (
    "run_id", "framework", "model", "resolution", "batch_size", "precision", "variant", "device", "device_name",
    "host", "status", "parity", "top1_accuracy", "top1_accuracy_fp32", "p50_ms", "p50_ci95_low_ms",
    "p50_ci95_high_ms", "p90_ms", "p95_ms", "p99_ms", "p99_pooled_ms", "p99_pooled_ci95_low_ms",
    "p99_pooled_ci95_high_ms", "mean_ms", "cv", "n", "throughput_per_s", "load_s",
    "first_call_s", "peak_host_memory_mb", "timed_peak_host_memory_mb", "energy_j_per_inference",
    "net_energy_j_per_inference", "net_energy_ci95_low", "net_energy_ci95_high", "mean_power_w", "energy_missing",
    "rounds", "stability", "valid", "validity_reason", "other_cores_max", "params", "gflop_per_image",
    "gflop_per_s", "fraction_of_peak", *ROOFLINE_COLUMNS, "error", *VS_FP32_COLUMNS, "task", "postprocess_ms",
)


def summary_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's row of ``summary.csv``: a busy cell's (:func:`busy`) without its interval, its stability "not
    judged" (its raw figures stay in its record); the columns against FP32 are filled beside the group's cells
    (:func:`inferbench.analysis.runfiles.summary_rows`)."""
    lat = record.get("latency_ms") or {}
    ci = [None, None] if busy(record) else lat.get("p50_ci95") or [None, None]
    whole = [None, None] if busy(record) else lat.get("p99_pooled_ci95") or [None, None]  # the whole run's p99
    cold = record.get("cold_start") or {}
    energy = record.get("energy") or {}
    top1 = (record["parity"].get("accuracy") or {}).get("top1") or {}  # on the user's labelled images (--eval-dir)
    return {
        "run_id": record.get("run_id"),
        "framework": record["framework"],
        "model": record["model"],
        "resolution": record["resolution"],
        "batch_size": record["batch_size"],
        "precision": record.get("precision", "fp32"),
        "variant": record.get("variant", ""),
        "device": (record.get("config", {}).get("device") or {}).get("kind"),
        "device_name": device_of(record),
        "host": (record.get("environment") or {}).get("hostname"),
        "status": record["status"],
        "parity": record["parity"]["status"],
        **{k: top1.get(v) for k, v in (("top1_accuracy", "accuracy"), ("top1_accuracy_fp32", "fp32"))},
        "p50_ms": lat.get("p50"),
        "p50_ci95_low_ms": ci[0],
        "p50_ci95_high_ms": ci[1],
        "p90_ms": lat.get("p90"),
        "p95_ms": lat.get("p95"),
        "p99_ms": lat.get("p99"),  # a typical round's p99 (the rounds' centre, as the p50)
        "p99_pooled_ms": lat.get("p99_pooled"),  # the whole run's: the p99 a user of the run met
        "p99_pooled_ci95_low_ms": whole[0],
        "p99_pooled_ci95_high_ms": whole[1],
        "mean_ms": lat.get("mean"),
        "cv": lat.get("cv"),
        "n": lat.get("n"),
        "throughput_per_s": record.get("throughput_per_s"),
        "load_s": cold.get("load_s"),
        "first_call_s": cold.get("first_call_s"),
        "peak_host_memory_mb": (record.get("memory") or {}).get("peak_host_mb"),
        "timed_peak_host_memory_mb": (record.get("memory") or {}).get("timed_peak_host_mb"),
        "energy_j_per_inference": energy.get("joules_per_inference"),
        "net_energy_j_per_inference": energy.get("net_joules_per_inference"),
        "net_energy_ci95_low": (energy.get("net_joules_per_inference_ci95") or [None, None])[0],
        "net_energy_ci95_high": (energy.get("net_joules_per_inference_ci95") or [None, None])[1],
        "mean_power_w": energy.get("mean_power_w"),
        "energy_missing": None if energy.get("available") else energy.get("reason"),
        "rounds": (lat.get("stability") or {}).get("rounds"),
        "stability": stability_word(record),
        "valid": (record.get("validity") or {}).get("valid"),
        "validity_reason": (record.get("validity") or {}).get("reason"),
        "other_cores_max": (record.get("machine_state") or {}).get("other_cores_max"),
        **compute_rate(record),
        **roofs(record),
        "error": record.get("error"),
        "task": record.get("task") or "classification",
        "postprocess_ms": (record.get("postprocess") or {}).get("ms_p50"),
    }


def compute_rate(record: Mapping[str, Any]) -> dict[str, Any]:
    """The model's size and the achieved FLOP rate of a record: GFLOP per image, GFLOP/s (throughput x FLOPs per
    image; a training step's: 3 x the forward's) and its fraction of the device's measured peak FP32 rate (None
    where either is unknown)."""
    stats = record.get("model_stats") or {}
    flops, throughput = stats.get("flops_per_image"), record.get("throughput_per_s")
    if flops and scenario(record.get("scenario")).trains:
        flops *= STEP_FLOPS_FACTOR
    rate = throughput * flops / 1e9 if flops and throughput else None
    peak = usable_peak(record)
    fraction = rate / peak if rate and peak else None
    return {"params": stats.get("params"), "gflop_per_image": flops / 1e9 if flops else None, "gflop_per_s": rate,
            "fraction_of_peak": fraction if fraction is None or fraction <= 1.0 else None}


def roofs(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record against its machine's compute and memory roofs (:func:`inferbench.records.roofline.roofline`),
    from its achieved FLOP rate and the usable peak."""
    return roofline(record, compute_rate(record)["gflop_per_s"], usable_peak(record))


def usable_peak(record: Mapping[str, Any]) -> float | None:
    """The device's measured peak rate at the record's precision, where it is one: FP32's (TF32 cells' too), or a
    reduced precision's own (``peak_fp32.by_precision``; none in records made before it was measured); not measured
    while the machine was busy (``peak_fp32.valid`` false: a busy machine's "peak" made shares of 111-234%)."""
    peak = (record.get("environment") or {}).get("peak_fp32") or {}
    if peak.get("valid") is False:
        return None
    precision = record.get("precision") or "fp32"
    return peak.get("gflops") if precision in FP32_ROOF else \
        ((peak.get("by_precision") or {}).get(precision) or {}).get("gflops")


def peak_note(record: dict[str, Any]) -> str | None:
    """Why a record's achieved rate has no share of the peak although both were measured: a peak measured busy, or
    one below the rate achieved (then it was no peak); None where the share stands or nothing was measured."""
    peak = (record.get("environment") or {}).get("peak_fp32") or {}
    if not peak.get("gflops"):
        return None
    if peak.get("valid") is False:
        return "peak not measured: busy"
    rate = compute_rate(record)
    return "peak below this rate" if rate["gflop_per_s"] and rate["fraction_of_peak"] is None else None


#: A spreadsheet reads a cell starting with one of these as a formula (=HYPERLINK(...), +cmd|...).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a spreadsheet shows it, never runs it: text that would start a formula gets a leading
    apostrophe (numbers, negative ones included, are left as they are); a hidden character is shown as its code
    (:func:`inferbench.base.text.visible`: a CSV is read in a terminal too)."""
    if isinstance(value, str):
        value = visible(value)
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        try:
            float(value)
            return value
        except ValueError:
            return "'" + value
    return value


def write_csv(path: Path, columns: Iterable[str], rows: Iterable[dict[str, Any]], lineterminator: str = "\r\n") -> None:
    """Every CSV inferbench writes: atomically, each text cell neutralised for spreadsheets (:func:`csv_cell`)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator=lineterminator)
    writer.writeheader()
    writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)
    atomic_write_text(path, buf.getvalue())


def append_csv(path: Path, columns: Iterable[str], row: dict[str, Any], lineterminator: str = "\r\n") -> None:
    """One row at the end of a CSV inferbench writes (the header first when the file is new), neutralised like
    :func:`write_csv`: a run's ``summary.csv`` grows a line per cell instead of being rewritten from every record."""
    path = Path(path)
    if not path.exists():
        write_csv(path, columns, [row], lineterminator)
        return
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=list(columns), lineterminator=lineterminator).writerow(
        {k: csv_cell(v) for k, v in row.items()})
    with path.open("a", newline="") as fh:
        fh.write(buf.getvalue())
        fh.flush()
        os.fsync(fh.fileno())


RANKED_PARITY = ("passed",)


def ranked(status: str, parity_status: str) -> bool:
    return status == "ok" and parity_status in RANKED_PARITY


def display_name(framework: str, precision: str = "fp32", variant: str = "") -> str:
    """Framework key, with the precision where the key does not already say it and the variant
    (``torch:bf16``, ``torch+compile``)."""
    name = framework if precision == "fp32" or framework.endswith(precision) else f"{framework}:{precision}"
    return f"{name}+{variant}" if variant else name


def busy(record: Mapping[str, Any]) -> bool:
    """Whether other work took the machine while ``record`` was measured and the run did not say --allow-busy: its
    intervals, margins and stability are then not judged anywhere (the raw figures stay in the record)."""
    return str(field(record, "validity.valid")) == "False" and str(field(record, "config.allow_busy")) != "True"


#: The one stability vocabulary of the table, summary.csv, --json, the answer and the figures: "stable" and
#: "unstable" (the rounds agree or not, within the half-width said beside), "unknown" (too few rounds, or one process:
#: the spread between processes not measured) and "not judged" (the machine was busy).
STABILITY_WORDS = ("stable", "unstable", "unknown", "not judged")


def stability_word(record: Mapping[str, Any]) -> str | None:
    """A record's stability in :data:`STABILITY_WORDS` (None: nothing measured)."""
    verdict = field(record, "latency_ms.stability.verdict")
    if verdict is None:
        return None
    return "not judged" if busy(record) else str(verdict)


def stability_said(record: Mapping[str, Any]) -> str:
    """:func:`stability_word` as a table shows it: with the half-width where the verdict stands on it."""
    word = stability_word(record)
    half = field(record, "latency_ms.stability.half_width")
    return "-" if word is None else word + (f" ±{half:.1%}" if half is not None and word in ("stable", "unstable")
                                            else "")


def record_name(record: Mapping[str, Any]) -> str:
    return display_name(record["framework"], record.get("precision", "fp32"), record.get("variant", ""))


def field(record: Mapping[str, Any], dotted: str) -> Any:
    """A value of a record by its dotted name (nested dicts, or the flat rows of ``results.load``);
    None where absent or NaN."""
    if dotted in record:
        value = record[dotted]
    else:
        value = record
        for part in dotted.split("."):
            if not isinstance(value, Mapping) or part not in value:
                return None
            value = value[part]
    return None if isinstance(value, float) and value != value else value


def device_model(record: Mapping[str, Any]) -> str:
    """The GPU's or the CPU's model name (without the ``@ host`` the analysis adds to tell hosts apart)."""
    return str(field(record, "config.device.gpu.name") or field(record, "environment.cpu.model") or "unknown device")


def device_of(record: Mapping[str, Any]) -> str:
    return str(field(record, "device_name") or device_model(record))
