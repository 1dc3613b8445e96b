"""Result records: the :class:`Record` schema, atomic writing, the CSV summary, loading into pandas.

One JSON record per cell. Writes go to a temporary file in the same folder and are renamed into
place, so an interrupted run never leaves a half-written record.

Schema history (``schema_version``):
  1 — first release: configuration, environment, parity, latency statistics, raw latencies,
      cold start, host memory; ``energy``, ``gpu_state``, ``device_check``, device memory fields,
      ``config.options`` and ``config.child_env`` were added later without a version bump.
  2 — the cell's identity at the top level (``precision``, ``scenario``, ``variant``, and
      ``options``: the runner options of this cell); ``config`` is the run configuration that ran
      (``config.timing`` is the timing after any energy extension; ``timing.config`` is gone); short
      codes instead of sentences as values (``timing.timed_region``, ``runner.sync``, ...; docs/results-schema.md's
      schema table says what each means). Every schema-1 record is upgraded on load.
  3 — cells measured in interleaved rounds. ``raw_rounds`` (the round of each raw latency),
      ``timing.blocks`` (one entry per block: round, n, window, wall-clock start),
      ``timing.group``/``group_cells`` (the cells interleaved together); ``latency_ms.p50_ci95`` from the
      variation between rounds (``between-rounds-t-95``) and
      ``latency_ms.stability`` instead of ``noisy``/``noisy_reasons``; ``parity.checked_batch_sizes``;
      ``memory.timed_peak_host_mb``. Upgrading a schema-2 record moves its iid interval to
      ``latency_ms.p50_ci95_iid`` (it was too narrow to use: iterations are not independent) and sets
      ``p50_ci95`` to null and ``stability.verdict`` to ``unknown``.
  4 — ``model_stats`` (parameters and FLOPs per image of the model as it ran, counted from its
      Keras graph; null for a model file without a Keras graph) and ``environment.peak_fp32`` (the device's
      measured FP32 matrix-product rate). Upgrading sets both to null: nothing was counted then.
  5 — ``machine_state`` (the machine during every timed block: cores other work took, steal, load;
      see :mod:`inferbench.measure.trackers.machine`) and ``validity`` (``valid``: true, false or null when the
      machine's state is unknown, and the ``reason``). Upgrading sets ``machine_state`` to null and ``validity``
      to unknown: nothing watched the machine then. ``tuning``: a tuned cell's tuning phase (null otherwise).
  6 — each cell's rounds spread over worker processes (``timing.processes``, each block's ``process``),
      ``latency_ms.spread`` (the variance between rounds within a process and between processes, its pooled
      value over the group, the standard error and degrees of freedom the interval used), order-statistic
      intervals of the tails (``p90_ci95``, ``p95_ci95``, ``p99_ci95``, null below the samples they need;
      ``n_effective``, ``tails_too_few_samples``), the drift as a slope, ``energy.joules_per_inference_ci95`` and
      its ``per_round_j_per_inference``, ``timing.gc``; ``serving`` (a LoadGen scenario's tests, its
      search and its answer); ``training`` (the training scenario's step, optimizer and batch-norm mode)
      and ``parity.method``/``parity.training`` (training parity's figures). Upgrading a schema-5 record leaves the
      spread unmeasured: its comparisons use an assumed one and say so.
  7 — ``latency_ms.p50`` is the cell's centre, the geometric mean of its round medians (each round weighted alike):
      the quantity ``p50_ci95`` describes and what is ranked; the median of all samples pooled, which leans towards
      the fast rounds (a round stops on time), is ``latency_ms.p50_pooled``. Upgrading a schema-6 record computes
      the centre from its raw latencies and rounds, keeps the old figure as ``p50_pooled`` and moves its interval
      with it (the interval's width is the rounds' and unchanged); a "stable" verdict on a spread between processes
      that was not measured becomes "unknown".
  8 — the tails are estimated as the p50 is: ``latency_ms.p90``/``p95``/``p99`` are the geometric means of the
      rounds' percentiles, ``p90_ci95``/``p95_ci95``/``p99_ci95`` the same random-effects interval over them (null
      when a round holds fewer samples than the percentile needs, ``1 / (1 - q)``: 100 for a p99, or below 3
      rounds); the percentiles of all samples pooled are ``p90_pooled``/``p95_pooled``/``p99_pooled``, descriptive.
      Upgrading a schema-7 record computes them from its raw latencies and rounds (a subsample where the record
      kept one: ``raw_kept``) and keeps the old figures as the pooled ones; without raw latencies, the tails stay
      the pooled figures and lose their intervals (the order statistics' described the pooled percentile).
  9 — ``task`` (what the model's outputs mean: classification, detection, raw), ``outputs`` (each output's name,
      shape an image and kind, as parity judged them; ``parity.outputs``, each part's check where there are several,
      and ``parity.after_postprocess``), ``postprocess`` (the task's post-processing, timed as its own phase).
      Upgrading a schema-8 record makes it a classifier's (every record before tasks was one); its outputs stay
      unknown (null).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard

from .. import SCHEMA_VERSION
from ..base.codec import decode, encode, plain
from ..base.files import atomic_write_text
from ..base.size import is_size
from ..measure.stats import ONE_PROCESS, TAIL_METHOD, TAILS, centre, tail_interval
from ..registry import frameworks
from ..registry.models import task_of
from ..registry.scenarios import SCENARIOS
from ..registry.tasks import TASKS
from ..spec import PRECISIONS, RunnerOptions, record_filename
from .blocks import (
    PARITY_STATUSES,
    SIZE,
    ColdStart,
    Config,
    Energy,
    Enum,
    Environment,
    Latency,
    MachineState,
    Memory,
    Min,
    ModelStats,
    NonEmpty,
    Parity,
    Serving,
    Timing,
    Training,
    Tuning,
    Validity,
)

if TYPE_CHECKING:  # pragma: no cover

    from ..spec import CellJob, ChildResult

#: The record's JSON Schema (draft 2020-12), published for other tools; the tests hold records to it.
SCHEMA_FILE = Path(__file__).parent / "schema" / "record.schema.json"
#: Schema versions this code reads: older ones are upgraded (see :func:`upgrade`).
SUPPORTED_SCHEMAS = frozenset(range(1, SCHEMA_VERSION + 1))
#: The validity of a record from before inferbench watched the machine.
UNWATCHED = {"valid": None, "reason": "machine state unknown: measured before inferbench watched the machine "
                                      "(schema 4 and older)"}
STATUSES = ("ok", "failed")


MAX_LATENCY_MS = 8.64e7  # a day: a longer call is no measurement inferbench made


class ImpossibleRecord(ValueError):
    """A record whose numbers cannot be true (negative or infinite latencies, ...)."""


@dataclass(frozen=True)
class Record:
    """One cell's result, as written to ``<cell file name>``; see docs/results-schema.md."""

    schema_version: int
    model: Annotated[str, NonEmpty()]
    resolution: SIZE  # pixels a side, or "HxW"
    batch_size: Annotated[int, Min(1)]
    framework: Annotated[str, NonEmpty()]
    precision: Annotated[str, Enum(PRECISIONS)]
    scenario: Annotated[str, Enum(SCENARIOS)]
    variant: str
    options: dict[str, Any]
    status: Annotated[str, Enum(STATUSES)]
    error: str | None
    parity: Parity
    latency_ms: Latency | None
    throughput_per_s: Annotated[float | None, Min(0)]
    config: Config
    environment: Environment
    run_id: Annotated[str, NonEmpty()]
    created_at: Annotated[str, NonEmpty()]
    traceback: str | None = None
    raw_latencies_ms: list[Annotated[float, Min(0)]] | None = None
    raw_rounds: list[Annotated[int, Min(0)]] | None = None
    timing: Timing | None = None
    cold_start: ColdStart | None = None
    memory: Memory | None = None
    energy: Energy | None = None
    gpu_state: dict[str, Any] | None = None
    device_check: dict[str, Any] | None = None
    runner: dict[str, Any] | None = None
    model_stats: ModelStats | None = None
    machine_state: MachineState | None = None
    validity: Validity | None = None
    tuning: Tuning | None = None
    serving: Serving | None = None
    training: Training | None = None
    task: Annotated[str, Enum(TASKS)] = "classification"
    outputs: list[dict[str, Any]] | None = None  # name, shape an image, kind (registry.outputs.Output.said)
    postprocess: dict[str, Any] | None = None  # the task's post-processing phase (scenarios/postprocess.py)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be 'ok' or 'failed', not {self.status!r}")
        if self.status == "ok" and not self.latency_ms:
            raise ValueError("an ok record needs latency statistics")
        if self.parity.status not in PARITY_STATUSES:
            raise ValueError(f"bad parity status {self.parity.status!r}")
        impossible = self.impossible()
        if impossible:
            raise ImpossibleRecord(impossible)

    def impossible(self) -> str | None:
        """What makes this record's numbers impossible (a latency that is not a finite positive number, a
        negative or infinite throughput, no samples), or None: such a record is never ranked, it is refused."""
        def number(v: Any) -> TypeGuard[float]:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        if not (isinstance(self.batch_size, int) and self.batch_size >= 1 and is_size(self.resolution)):
            return (f"batch size {self.batch_size!r} must be a positive integer and resolution {self.resolution!r} "
                    "pixels a side or HxW")
        lat = self.latency_ms
        if self.status != "ok" or lat is None:
            return None
        for key in ("p50", "p99", "mean", "min", "max"):
            v = getattr(lat, key)
            if v is not None and not (number(v) and 0 < v <= MAX_LATENCY_MS):
                return (f"latency_ms.{key} = {str(v)[:40]}: not a number of milliseconds above 0 and at most "
                        f"{MAX_LATENCY_MS:.0e} (a day)")
        if not (number(self.throughput_per_s) and self.throughput_per_s >= 0):
            return f"throughput_per_s = {str(self.throughput_per_s)[:40]}: not a finite non-negative number"
        ci = lat.p50_ci95
        if ci is not None and not (len(ci) == 2 and all(number(v) for v in ci)):
            return f"latency_ms.p50_ci95 = {str(ci)[:60]}: not two finite numbers"
        raw = self.raw_latencies_ms
        if raw is not None and not all(number(v) and v > 0 for v in raw):
            return "raw_latencies_ms holds a value that is not a finite positive number"
        for key in ("joules_per_inference", "mean_power_w"):
            v = getattr(self.energy, key, None)
            if v is not None and not (number(v) and v >= 0):
                return f"energy.{key} = {str(v)[:40]}: not a finite non-negative number"
        return None

    @property
    def filename(self) -> str:
        return record_filename(self.model, self.resolution, self.batch_size, self.framework, self.precision,
                               self.variant, self.scenario)

    @classmethod
    def of(cls, job: CellJob, run_id: str, created_at: str, environment: dict[str, Any], child_env: dict[str, str],
           outcome: ChildResult, model_stats: dict[str, Any] | None = None,
           artifacts: dict[str, Any] | None = None) -> Record:
        """The record of a cell from the job that ran and what its child process sent back."""
        cell = job.cell
        blocks: dict[str, Any] = {}
        config = job.config
        if outcome.ok and outcome.cell is not None:
            blocks = kept_raw(dict(outcome.cell.blocks))
            config = dataclasses.replace(config, timing=outcome.cell.timing)
        failed = {"status": "failed", "error": outcome.error, "traceback": outcome.traceback,
                  "parity": not_run(), "latency_ms": None, "throughput_per_s": None}
        data = dict(
            schema_version=SCHEMA_VERSION, model=cell.model, resolution=cell.resolution, batch_size=cell.batch_size,
            framework=cell.framework, precision=cell.precision, scenario=cell.scenario, variant=cell.variant,
            options=encode(cell.options),
            config={**encode(config), "artifact_dir": job.artifact_dir, "child_env": child_env,
                    "artifacts": artifacts or {}},
            environment=environment, run_id=run_id, created_at=created_at, model_stats=model_stats,
            task=task_of(cell.model),
            **({"status": "ok", "error": None, **blocks} if outcome.ok else failed),
        )
        # typed as it is read back (the blocks the child sent are plain JSON values: what the file will hold)
        return decode(cls, plain(data), "record")


#: The most raw latencies a record keeps (about 1 MB of JSON; a day at the documented maximum --duration would be
#: gigabytes): beyond it, a uniform random subsample of this many in their order, each with its round. Every
#: statistic of ``latency_ms`` is computed from all of them before (``latency_ms.raw_kept`` says so).
RAW_KEPT_MAX = 100_000


def kept_raw(blocks: dict[str, Any]) -> dict[str, Any]:
    """``blocks`` with at most RAW_KEPT_MAX raw latencies (and their rounds), the subsample said in ``latency_ms``."""
    most = RAW_KEPT_MAX

    raw, rounds = blocks.get("raw_latencies_ms"), blocks.get("raw_rounds")
    if not isinstance(raw, list) or len(raw) <= most:
        return blocks
    keep = sorted(random.Random(0).sample(range(len(raw)), most))  # seeded: the same cell keeps the same samples
    out = {**blocks, "raw_latencies_ms": [raw[i] for i in keep]}
    if isinstance(rounds, list) and len(rounds) == len(raw):
        out["raw_rounds"] = [rounds[i] for i in keep]
    out["latency_ms"] = {**(blocks.get("latency_ms") or {}),
                         "raw_kept": {"kept": most, "of": len(raw), "method": "uniform-random-subsample"}}
    return out


def not_run() -> dict[str, Any]:
    return {"status": "not_run", "max_abs_err": None, "max_rel_err": None, "cosine": None, "top1_agreement": None}


# --------------------------------------------------------------------------- schema 1 -> 2
_V1_CODES: dict[tuple[str, ...], list[tuple[str, str]]] = {  # (block, ..., key) -> [(sentence prefix, code)]
    ("timing", "timed_region"): [("call + synchronize", "call+sync"), ("prepare", "h2d+call+d2h")],
    ("timing", "throughput_rule"): [("samples", "samples/window")],
    ("timing", "clock"): [("time.perf_counter", "perf_counter")],
    ("cold_start", "load_includes"): [("importing", "import+load")],
    ("latency_ms", "percentile_rule"): [("linear interpolation", "numpy-linear")],
    ("latency_ms", "ci_method"): [("bootstrap percentile interval", "bootstrap-iid-median-95")],
    ("memory", "device_memory_method"): [("framework allocator", "allocator-peak"),
                                         ("NVML", "nvml-process-at-end")],
    ("parity", "reason"): [("independent weights", "own-weights")],
    ("energy", "method"): [("NVML energy counter", "nvml-counter"), ("RAPL energy counter", "rapl-counter")],
    ("energy", "idle_baseline", "method"): [("energy counter", "counter"), ("power samples", "samples")],
    ("energy", "sampler", "reading"): [("nvmlDeviceGetPowerUsage", "nvml-power-usage")],
    ("runner", "sync"): [("none needed", "none-cpu"), ("tf.test.experimental", "tf.sync_devices"),
                         ("predict_on_batch", "predict_on_batch-host"), ("InferenceSession.run", "ort.run-host"),
                         ("IOBinding", "ort.iobinding.synchronize_outputs"),
                         ("torch.cuda.synchronize", "torch.cuda.synchronize"),
                         ("jax.Array", "jax.block_until_ready"), ("CUDA stream", "cuda-stream.synchronize")],
}


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A record of any supported schema as the current schema (the file itself is left as it is)."""
    if data.get("schema_version") == 1:
        data = _v1_to_v2(data)
    if data.get("schema_version") == 2:
        data = _v2_to_v3(data)
    if data.get("schema_version") == 3:
        data = {**data, "schema_version": 4, "model_stats": None,
                "environment": {**(data.get("environment") or {}), "peak_fp32": None}}
    if data.get("schema_version") == 4:
        data = {**data, "schema_version": 5, "machine_state": None, "validity": UNWATCHED}
    if data.get("schema_version") == 5:  # one process per cell: no spread between processes was measured
        lat = data.get("latency_ms")
        data = {**data, "schema_version": 6, "latency_ms": None if lat is None else {
            **lat, "spread": None, "spread_note": "measured before inferbench measured the spread between worker "
                                                  "processes (schema 5 and older): comparisons assume one"}}
    if data.get("schema_version") == 6:
        data = _v6_to_v7(data)
    if data.get("schema_version") == 7:
        data = _v7_to_v8(data)
    if data.get("schema_version") == 8:  # every record before tasks was a classifier's
        data = {**data, "schema_version": 9, "task": "classification", "outputs": None}
    return data


def _v6_to_v7(old: dict[str, Any]) -> dict[str, Any]:
    """The ranked p50 becomes the rounds' centre (:func:`inferbench.measure.stats.centre`); the pooled one stays."""
    lat = old.get("latency_ms")
    if not isinstance(lat, dict) or not isinstance(lat.get("p50"), (int, float)) or not lat["p50"] > 0:
        return {**old, "schema_version": 7}
    stability = lat.get("stability")
    spread = lat.get("spread")
    if isinstance(stability, dict) and stability.get("verdict") == "stable" and not (
            isinstance(spread, dict) and spread.get("measured")):  # never "stable" on a spread nobody measured
        lat = {**lat, "stability": {**stability, "verdict": "unknown", "advice": ONE_PROCESS}}
    raw, rounds = old.get("raw_latencies_ms"), old.get("raw_rounds")
    pooled, value = float(lat["p50"]), float(lat["p50"])
    try:
        if isinstance(raw, list) and raw and (rounds is None or (isinstance(rounds, list) and len(rounds) == len(raw))):
            value = centre(raw, rounds)
    except (TypeError, ValueError):  # samples the record's own checks refuse later: the figure as it was
        value = pooled
    ci = lat.get("p50_ci95")
    moved = [c * value / pooled for c in ci] if isinstance(ci, list) and len(ci) == 2 and all(
        isinstance(c, (int, float)) for c in ci) else ci
    return {**old, "schema_version": 7, "latency_ms": {**lat, "p50": value, "p50_pooled": pooled, "p50_ci95": moved}}


def _v7_to_v8(old: dict[str, Any]) -> dict[str, Any]:
    """The tails become the rounds' centres with the rounds' interval (:func:`inferbench.measure.stats.tail_interval`);
    the pooled percentiles stay, as ``p90_pooled`` and so on."""
    lat = old.get("latency_ms")
    if not isinstance(lat, dict):
        return {**old, "schema_version": 8}
    raw, rounds = old.get("raw_latencies_ms"), old.get("raw_rounds")
    usable = isinstance(raw, list) and bool(raw) and (rounds is None or (isinstance(rounds, list)
                                                                         and len(rounds) == len(raw)))
    timing = old.get("timing")
    processes = timing.get("processes") if isinstance(timing, dict) else None
    new = dict(lat)
    for name in TAILS:
        if not isinstance(lat.get(name), (int, float)):
            continue
        new[f"{name}_pooled"], new[f"{name}_ci95"] = lat[name], None
        try:
            if usable and isinstance(raw, list):
                new[name] = centre(raw, rounds, name)
                found = tail_interval(raw, rounds, name, processes if isinstance(processes, int) else None)
                new[f"{name}_ci95"] = None if found is None else list(found[:2])
                new["tail_method"] = TAIL_METHOD
        except (TypeError, ValueError):  # samples the record's own checks refuse later: the figure as it was
            new[name] = lat[name]
    return {**old, "schema_version": 8, "latency_ms": new}


def _v2_to_v3(old: dict[str, Any]) -> dict[str, Any]:
    rec = json.loads(json.dumps(old))  # a deep copy
    rec["schema_version"] = 3
    lat = rec.get("latency_ms")
    if isinstance(lat, dict):
        lat.pop("noisy", None)
        lat.pop("noisy_reasons", None)
        lat["p50_ci95_iid"] = lat.get("p50_ci95")
        lat["p50_ci95"] = None
        lat["stability"] = {"verdict": "unknown", "rounds": 1, "half_width": None, "drift": None,
                            "advice": "measured before rounds (schema 2): no interval"}
    return rec


def _v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    rec = json.loads(json.dumps(old))  # a deep copy
    config = rec.setdefault("config", {})
    opts = config.get("options") or {}
    options = RunnerOptions(
        include_transfer=bool(opts.get("include_transfer", config.get("include_transfer", False))),
        channels_last=bool(opts.get("channels_last")), torch_compile=bool(opts.get("compile")),
        cuda_graphs=bool(opts.get("cuda_graphs")), keras_backend=str(opts.get("keras_backend") or "tensorflow"))
    fw = frameworks.FRAMEWORKS.get(rec.get("framework", ""))
    cell_options = options.for_framework(fw) if fw else options
    config["options"] = encode(options)
    for gone in ("framework_description", "include_transfer", "precision"):
        config.pop(gone, None)
    rec.update(schema_version=2, precision=(old.get("config") or {}).get("precision") or "fp32",
               scenario="inference", variant=cell_options.tag, options=encode(cell_options))
    for (*path, key), codes in _V1_CODES.items():
        section: Any = rec
        for block in path:
            section = section.get(block) if isinstance(section, dict) else None
        if isinstance(section, dict) and isinstance(section.get(key), str):
            section[key] = next((code for prefix, code in codes if section[key].startswith(prefix)), section[key])
    energy = rec.get("energy")
    if isinstance(energy, dict):
        energy.pop("warning", None)
        if isinstance(energy.get("method"), str) and energy["method"].endswith(" power samples (trapezoid)"):
            energy["method"] = energy["method"].split(" ")[0].lower() + "-samples-trapezoid"
        if isinstance(energy.get("sampler"), dict):
            energy["sampler"]["thread"] = "background"
    if isinstance(rec.get("timing"), dict) and isinstance(rec["timing"].get("config"), dict):
        # schema 1 kept the timing that ran (after an energy extension) here and the requested one in config
        config["timing"] = rec["timing"].pop("config")
    if isinstance(rec.get("environment"), dict):
        rec["environment"].pop("gpu_note", None)
    return rec


def parse(data: Any, where: str) -> Record:
    """A record (of any supported schema) from JSON values, checked; ValueError names what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    version = data.get("schema_version")
    if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:  # never read as if it were ours
        newer = "; a newer inferbench wrote it" if type(version) is int and version > SCHEMA_VERSION else ""
        raise ValueError(f"schema version {str(version)[:20]} is not one this inferbench reads "
                         f"(1-{SCHEMA_VERSION}{newer})")
    return decode(Record, upgrade(data), where)


# --------------------------------------------------------------------------- writing
def as_written(record: Record) -> dict[str, Any]:
    """The record as its file holds it (what reading it back gives), without reading it back."""
    return json.loads(json.dumps(plain(encode(record))))


def record_key(record: dict[str, Any]) -> str:
    """A record's cell, as its file name (the identity :class:`~inferbench.spec.CellKey` writes it under)."""
    return record_filename(record["model"], record["resolution"], record["batch_size"], record["framework"],
                           record.get("precision", "fp32"), record.get("variant", ""),
                           record.get("scenario", "inference"))


def write_record(folder: Path, record: Record) -> Path:
    path = Path(folder) / record.filename
    # strict JSON: a NaN or infinity (e.g. a CV over zero latencies) is written as null
    atomic_write_text(path, json.dumps(plain(encode(record)), indent=1, allow_nan=False) + "\n")
    return path



