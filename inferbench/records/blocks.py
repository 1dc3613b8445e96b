"""The shape of a record's blocks, declared once: what :class:`~inferbench.records.record.Record`'s fields hold, for
the published JSON Schema (generated from these types by :mod:`inferbench.records.schema`, never written by hand)
and for readers. A block is a plain JSON object in the record; its shape lists the keys every reader may rely on
(more may follow as inferbench learns to measure more: blocks stay open to new keys, the record itself does not).

Markers in ``Annotated[...]`` add what a type cannot say (:class:`Enum`, :class:`Min`, :class:`NonEmpty`,
:class:`Pair`, :class:`Doc`); a shape class there says what a block of plain JSON holds.

Why one file: the blocks are one record's parts, and the schema generated from them is one document; a reader
looks for a key's meaning in one place.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any

from ..base.codec import EXTRA
from ..registry.scenarios import SCENARIOS


@dataclass(frozen=True)
class Enum:
    """One of these values (of a registry: its keys)."""

    values: Any

    def check(self, value: Any, where: str) -> None:
        if value not in tuple(self.values):
            raise ValueError(f"{where}: {str(value)[:40]!r} is not one of {', '.join(map(str, self.values))}")


@dataclass(frozen=True)
class Min:
    """At least ``value`` (``exclusive``: more than it); a number checked is finite."""

    value: float
    exclusive: bool = False

    def check(self, value: Any, where: str) -> None:
        for v in value if isinstance(value, list) else [value]:
            if not (math.isfinite(v) and (v > self.value if self.exclusive else v >= self.value)):
                raise ValueError(f"{where}: {v!r} is not {'above' if self.exclusive else 'at least'} {self.value:g}")


@dataclass(frozen=True)
class Max:
    """At most ``value``."""

    value: float

    def check(self, value: Any, where: str) -> None:
        for v in value if isinstance(value, list) else [value]:
            if not v <= self.value:
                raise ValueError(f"{where}: {v!r} is above {self.value:g}")


@dataclass(frozen=True)
class Pattern:
    """A string matching ``regex`` (JSON Schema's ``pattern``: searched, so anchored with ^ and $)."""

    regex: str

    def check(self, value: Any, where: str) -> None:
        if not re.search(self.regex, value):
            raise ValueError(f"{where}: {str(value)[:40]!r} does not match {self.regex}")


#: A record's input size: pixels a side (square), or "HxW" (height x width).
SIZE = Annotated[int, Min(1)] | Annotated[str, Pattern(r"^[1-9][0-9]*x[1-9][0-9]*$")]


@dataclass(frozen=True)
class Doc:
    text: str


@dataclass(frozen=True)
class NonEmpty:
    """A string of at least one character."""

    def check(self, value: Any, where: str) -> None:
        if not value:
            raise ValueError(f"{where}: empty")


@dataclass(frozen=True)
class Pair:
    """Exactly two items (an interval's low and high)."""

    def check(self, value: Any, where: str) -> None:
        if len(value) != 2:
            raise ValueError(f"{where}: {len(value)} items, not 2")


@dataclass(frozen=True)
class Block:
    """A block of a record, read as a typed object: the keys every reader may rely on are its fields; a key it does
    not list (what a newer inferbench measures, or a runner's own detail) is kept as read, in :attr:`extra`, and the
    block is written back with the same keys in the same order (:func:`inferbench.base.codec.encode`)."""

    __open__ = True

    @property
    def extra(self) -> dict[str, Any]:
        """The keys beyond the fields, as read."""
        return dict(getattr(self, EXTRA, {}))


Number = float | None
NonNegative = Annotated[float, Min(0)] | None  # a figure that cannot be below zero (a time, a size, an energy)
Interval = Annotated[list[float] | None, Pair()]


@dataclass(frozen=True)
class Stability(Block):
    verdict: Annotated[str, Enum(("stable", "unstable", "unknown"))]
    rounds: int
    advice: str
    half_width: Number = None
    drift: Number = None


@dataclass(frozen=True)
class Latency(Block):
    """Per-iteration latencies in milliseconds, summarised."""

    n: Annotated[int, Min(1)]
    mean: float
    p50: float  # the geometric mean of the round medians: what p50_ci95 describes and what is ranked
    p99: float
    p50_ci95: Interval
    percentile_rule: str
    ci_method: str
    stability: Stability
    min: float | None = None
    max: float | None = None
    p25: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    iqr: float | None = None
    std: Number = None
    cv: Number = None
    p50_ci95_iid: Interval = None
    p90_ci95: Interval = None
    p95_ci95: Interval = None
    p99_ci95: Interval = None
    n_effective: Number = None
    spread: dict[str, Any] | None = None
    p50_pooled: float | None = None  # the median of every sample pooled: descriptive (fast rounds weigh more)
    p90_pooled: float | None = None  # the tails of every sample pooled: descriptive (p90, p95, p99: the rounds')
    p95_pooled: float | None = None
    p99_pooled: float | None = None
    p99_pooled_ci95: list[float] | None = None  # by resampling whole rounds (measure.stats.pooled_interval)
    raw_kept: dict[str, Any] | None = None  # kept, of, method: raw_latencies_ms is a subsample (record.RAW_KEPT_MAX)
    spread_note: str | None = None
    tail_method: str | None = None
    tails_too_few_samples: Any = None
    rounds_not_counted: Any = None  # starved rounds (measure.stats.starved_rounds): round, samples

@dataclass(frozen=True)
class Agreement(Block):
    """A reduced-precision cell's agreement with FP32 over many seeded inputs (``parity.agreement``): a classifier's
    ``top1`` and ``top5`` each hold the agreement, its 95% Wilson interval (``ci95``), the model's own agreement in
    that precision and the disagreement allowed (INT8: ``measured``, reported, never a gate); a detector's or
    segmenter's ``after_postprocess`` holds its results matched with FP32's after the shared post-processing, said in
    ``said`` (``measured``; ``failed`` where the export is broken)."""

    status: Annotated[str, Enum(("passed", "failed", "measured", "not_measured"))]
    inputs: int
    reason: str | None = None
    top1: dict[str, Any] | None = None
    top5: dict[str, Any] | None = None
    own: dict[str, Any] | None = None  # the Keras model's own counts in that precision (top1, top5, inputs, method)
    factor: Number = None
    floor: Number = None
    decides: bool | None = None  # false with labelled images (--eval-dir): their accuracy decides instead
    after_postprocess: dict[str, Any] | None = None  # a detector's or segmenter's: its task's agreement block
    said: str | None = None  # that agreement in the answer's words
    taken: str | None = None  # "from the cell's first process": counted there, not in this one (scenarios/gates.py)


@dataclass(frozen=True)
class Accuracy(Block):
    """A cell's accuracy on the user's labelled images (``--eval-dir``; ``parity.accuracy``): ``top1`` and ``top5``
    each hold the cell's accuracy and its 95% Wilson interval (``ci95``), FP32's on the same images (``fp32``,
    ``fp32_ci95``: the source's outputs) and the paired difference with its 95% interval (``difference``,
    ``difference_ci95``: Newcombe's method 10); a reduced precision passes at ``gate`` x FP32's top-1 (MLPerf's 99%)."""

    status: Annotated[str, Enum(("passed", "failed", "measured", "not_measured"))]
    images: int
    reason: str | None = None
    top1: dict[str, Any] | None = None
    top5: dict[str, Any] | None = None
    gate: Number = None
    eval_set: str | None = None  # the labelled set's digest (the run's config.eval_set says where it is)
    decides: bool | None = None  # true for a reduced precision: a failed gate fails the cell's parity
    note: str | None = None  # seeded random weights: the accuracy is chance
    taken: str | None = None  # "from the cell's first process": counted there, not in this one (scenarios/gates.py)


#: unjudged: an INT8 cell whose accuracy could not be judged (no labelled images): measured, ranked apart as speed only
PARITY_STATUSES = ("passed", "failed", "unjudged", "not_applicable", "not_run")


@dataclass(frozen=True)
class Parity(Block):
    status: Annotated[str, Enum(PARITY_STATUSES)]
    reason: str | None = None
    max_abs_err: Number = None
    max_rel_err: Number = None
    cosine: Number = None
    top1_agreement: Number = None
    inputs: int | None = None
    precision: str | None = None
    thresholds: dict[str, Any] | None = None
    checked_batch_sizes: list[int] | None = None
    sanity: dict[str, Any] | None = None
    method: str | None = None  # "training": the training scenario's rule (inferbench.measure.training)
    training: dict[str, Any] | None = None  # its loss, gradient and weight-change figures
    agreement: Agreement | None = None  # a reduced precision's top-1 / top-5 agreement with FP32 over many inputs
    accuracy: Accuracy | None = None  # top-1 / top-5 accuracy on the user's labelled images (--eval-dir)
    blocks: dict[str, Any] | None = None  # a failed check: each block's error against FP64, the first past the gate
    max_rel_err_per_image: Any = None
    served: Any = None  # what LoadGen served, against the reference (a serving cell)
    outputs: dict[str, Any] | None = None  # several outputs (or parts): each one's check, by name
    after_postprocess: dict[str, Any] | None = None  # the task's results after its post-processing, matched

@dataclass(frozen=True)
class ColdStart(Block):
    load_s: NonNegative = None
    first_call_s: NonNegative = None
    load_includes: str | None = None
    parity_s: NonNegative = None  # the parity check (reference inputs, timed batch, a reduced precision's agreement)
    trackers_s: NonNegative = None  # the trackers' set-up: the idle power baseline (settling) above all


@dataclass(frozen=True)
class Memory(Block):
    peak_host_mb: NonNegative = None
    timed_peak_host_mb: NonNegative = None
    host_before_load_mb: NonNegative = None
    peak_device_mb: NonNegative = None
    device_used_mb_at_end: NonNegative = None
    device_memory_method: str | None = None
    timed_peak_method: str | None = None

@dataclass(frozen=True)
class Energy(Block):
    available: bool | None = None  # absent in records that only carry the figures
    reason: str | None = None
    joules_per_inference: NonNegative = None
    mean_power_w: NonNegative = None
    net_joules_per_inference: Number = None  # below zero where the idle baseline is above the rounds' power
    joules_per_inference_ci95: Interval = None
    net_joules_per_inference_ci95: Interval = None
    ci_method: str | None = None  # joules_per_inference_ci95's rule, as latency's (an assumed process part said)
    per_round_j_per_inference: dict[str, Any] | None = None
    peak_power_w: NonNegative = None
    inferences_per_joule: NonNegative = None
    throughput_per_watt: NonNegative = None
    gross_j: NonNegative = None
    net_j: Number = None
    idle_w: NonNegative = None
    idle_baseline: Any = None
    idle_after: Any = None
    idle_used: Any = None
    window_s: NonNegative = None
    method: str | None = None
    sensor: str | None = None
    sampler: Any = None
    blocks: Any = None
    too_short: Any = None

@dataclass(frozen=True)
class ModelStats(Block):
    """The model as it ran: parameters and floating-point operations per image (a multiply-add counts 2), counted
    from its Keras graph at batch 1, else from its ONNX graph (``flops_method`` says which); null where neither
    could be read."""

    params: Annotated[int, Min(0)]
    flops_per_image: Annotated[int | None, Min(0)]
    flops_method: str
    flops_resolution: SIZE | None = None
    grouped_convolutions: Annotated[int, Min(0)] | None = None
    why: str | None = None
    activations_per_image: Annotated[int, Min(0)] | None = None  # every layer's outputs at batch 1 (training memory)


@dataclass(frozen=True)
class DeviceShape(Block):
    kind: Annotated[str, Enum(("cpu", "gpu"))]
    label: str | None = None
    gpu: Any = None

@dataclass(frozen=True)
class Config(Block):
    """The run configuration that ran (:class:`inferbench.spec.RunConfig`), with the artifacts and the child's
    controlled environment."""

    device: DeviceShape
    threads: int | None = None
    seed: int | None = None
    weights: str | None = None
    timing: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    cache_dir: str | None = None
    timeout_s: Number = None
    scenario: str | None = None
    pass_env: list[str] | None = None
    model_files: list[Any] | None = None
    log_to: list[str] | None = None
    sequential: bool | None = None
    max_other_load: Number = None
    allow_busy: bool | None = None
    tune_budget_s: Number = None
    processes: int | None = None
    quick: bool | None = None
    slo_p99_ms: Number = None
    executor: str | None = None
    ray_address: str | None = None
    machines: list[Any] | None = None
    slurm: dict[str, Any] | None = None
    agreement_inputs: int | None = None
    eval_set: Any = None
    calibration: Any = None
    target_ci: Number = None
    ab: Any = None
    artifact_dir: str | None = None
    child_env: dict[str, Any] | None = None
    artifacts: dict[str, Any] | None = None

@dataclass(frozen=True)
class PeakFp32(Block):
    """The device's peak FP32 rate as inferbench measured it (a large matrix product, best of repeats): gflops,
    method, library, threads; gflops null with a why when it could not be measured."""

    gflops: Number = None
    method: str | None = None


#: The largest spread between invocations a calibration may claim: a cell's median moving by 25% (one sd) from one
#: invocation to the next leaves nothing a comparison could tell; a larger figure is a broken or planted file.
MAX_INVOCATION_SD = 0.25
Spread = Annotated[float, Min(0), Max(MAX_INVOCATION_SD)]


@dataclass(frozen=True)
class InvocationSpread(Block):
    """This machine's measured spread between invocations (``benchmarks/aa_calibration.py --across``: the sd of a
    cell's log centre from one invocation to the next beyond each run's own standard error — 0 where the runs'
    errors explain it all —, with the raw sd and the runs' typical error beside it), per framework and the largest,
    with its degrees of freedom, the file it was read from and when and how it was measured; ``compare`` adds it to
    each side's own error."""

    sd: Annotated[float, Min(0), Max(MAX_INVOCATION_SD)] | None  # null: ignored, and why
    df: Annotated[int, Min(0)] | None = None
    per_framework: dict[str, Spread | None] | None = None
    df_per_framework: dict[str, Annotated[int, Min(0)]] | None = None
    total_sd_per_framework: dict[str, Annotated[float, Min(0)] | None] | None = None
    within_se_per_framework: dict[str, Annotated[float, Min(0)] | None] | None = None
    method: str | None = None
    invocations: Annotated[int, Min(2)] | None = None
    measured_at: str | None = None
    by: str | None = None
    file: str | None = None
    ignored: str | None = None  # the file was not a calibration inferbench wrote: why (no comparison uses it)


@dataclass(frozen=True)
class Environment(Block):
    peak_fp32: PeakFp32 | None = None
    invocation_spread: InvocationSpread | None = None
    hostname: str | None = None
    cpu: dict[str, Any] | None = None
    gpu: Any = None
    memory_gb: Number = None
    os: Any = None
    python: Any = None
    interpreter: str | None = None
    packages: dict[str, Any] | None = None
    inferbench: dict[str, Any] | None = None
    env: dict[str, Any] | None = None
    niceness: Any = None

@dataclass(frozen=True)
class Validity(Block):
    """Was the machine quiet enough for the numbers to be the runtimes' own? True, false, or null when unknown."""

    valid: bool | None
    reason: str
    other_cores: Number = None  # the worst block's: other work's share of the cores (a verdict that measured it)

@dataclass(frozen=True)
class SpeedReading(Block):
    round: Annotated[int, Min(0)]
    gflops: Annotated[float, Min(0, exclusive=True)]


@dataclass(frozen=True)
class Speed(Block):
    """The machine's own speed: a fixed matrix product read before every round and after the last (``compare`` sets
    side by side only rounds read at one speed)."""

    rounds: list[SpeedReading] | None = None
    gflops_median: Annotated[float, Min(0)] | None = None


@dataclass(frozen=True)
class MachineState(Block):
    """The machine during every timed block (cores other work took, steal, load), its threshold and summary."""

    speed: Speed | None = None
    threads: int | None = None
    method: str | None = None
    max_other_load: Number = None
    allowed_other_cores: Number = None
    other_cores_max: Number = None
    other_cores_mean: Number = None
    steal_cores_max: Number = None
    load_avg_1m_max: Number = None
    cpu_clock: Any = None
    blocks: list[Any] | None = None

@dataclass(frozen=True)
class VsDefault(Block):
    """A setting's median latency over that of inferbench's own setting, paired within rounds, with its interval."""

    ratio: Annotated[float, Min(0, exclusive=True)]
    ci95: Interval = None


@dataclass(frozen=True)
class TuningRow(Block):
    """One setting tuning tried: the setting, its median latency, its ratio to inferbench's own setting."""

    setting: dict[str, Any]
    p50_ms: Annotated[float, Min(0, exclusive=True)] | None = None
    vs_default: VsDefault | None = None


@dataclass(frozen=True)
class Tuning(Block):
    """The tuning phase of a tuned cell (``+tuned``): every setting tried with its median latency and its ratio to
    inferbench's own setting, the one chosen and why; null when the cell was not tuned."""

    chosen: dict[str, Any]
    default: dict[str, Any]
    reason: str
    table: list[TuningRow]
    seconds: Annotated[float, Min(0)] | None = None
    selection: str | None = None  # a switch: what the selection rounds said (their gain overstates the winner's)
    confirmation: VsDefault | None = None  # a switch: the chosen over the default in fresh rounds of the two alone
    digest: str | None = None  # the chosen setting's (part of the cell's identity: compare sets no other beside it)
    chosen_load: dict[str, Any] | None = None
    chosen_live: dict[str, Any] | None = None
    is_default: bool | None = None
    rule: str | None = None
    rounds: int | None = None
    block_s: Number = None

@dataclass(frozen=True)
class Timing(Block):
    """How a cell was timed: the clock, the timed region, the throughput rule, its blocks (one per round: round,
    process, samples, window, start) and the group it was interleaved with."""

    clock: str | None = None
    timed_region: str | None = None
    throughput_rule: str | None = None
    window_s: NonNegative = None
    blocks: list[dict[str, Any]] | None = None
    group: str | None = None
    group_cells: int | None = None
    processes: int | None = None
    process_of_round: Any = None
    alone: str | None = None
    warmup_iterations: int | None = None
    warmup_s: NonNegative = None
    block_warmup_calls: int | None = None
    gc: Any = None
    test_slowdown: Any = None
    extended_for_energy_from_s: NonNegative = None
    target_ci: dict[str, Any] | None = None


@dataclass(frozen=True)
class Knobs(Block):
    """A serving configuration: queries in flight and the batching delay."""

    concurrency: Annotated[int, Min(1)] | None = None
    max_delay_ms: Annotated[float, Min(0)] | None = None


QPS = Annotated[float, Min(0)]


@dataclass(frozen=True)
class ServingAnswer(Block):
    """The answer: the load held at the bound (server: ``max_valid_qps``, the search's ``bracket``) or the samples
    per second (offline: ``qps`` with ``qps_ci95``), the configuration that gave it."""

    knobs: Knobs
    found: bool | None = None
    qps: QPS | None = None
    qps_ci95: Annotated[list[QPS | None], Pair()] | None = None
    max_valid_qps: QPS | None = None
    smallest_invalid_qps: QPS | None = None
    bracket: Annotated[list[QPS | None], Pair()] | None = None
    bound_ms: Annotated[float, Min(0, exclusive=True)] | None = None
    held_in_a_row: Annotated[int, Min(0)] | None = None
    stopped: str | None = None
    steps: list[int] | None = None
    valid: bool | None = None
    largest_valid_qps: QPS | None = None

@dataclass(frozen=True)
class ServingStep(Block):
    """One LoadGen test: its configuration, the load it was scheduled at, LoadGen's verdict and what it measured."""

    knobs: Knobs
    target: QPS | None = None
    valid: bool | None = None
    qps: QPS | None = None
    completed_qps: QPS | None = None
    p50_ms: Annotated[float, Min(0)] | None = None
    p99_ms: Annotated[float, Min(0)] | None = None


@dataclass(frozen=True)
class Serving(Block):
    """A serving scenario's LoadGen tests (``single-stream``, ``multi-stream``, ``server``, ``offline``): every test
    (``steps``: its serving configuration, target, LoadGen's verdict and why, QPS and percentiles), the answer, the
    single-query latency, the settings; null for the inference scenario."""

    scenario: Annotated[str, Enum(tuple(SCENARIOS))]
    answer: ServingAnswer
    steps: list[ServingStep]
    mlperf_valid: bool
    single_query: dict[str, Any] | None = None
    samples: Any = None
    knob_grid: list[Any] | None = None
    settings: dict[str, Any] | None = None
    mlperf_note: str | None = None
    loadgen_logs: str | None = None

@dataclass(frozen=True)
class Training(Block):
    """The training scenario's step (``--scenario train``): the optimizer and its hyper-parameters, the batch-norm
    mode and kernel, the layout, what the step is, dropout (off), the loss and how many steps ran; null for the
    other scenarios."""

    optimizer: str
    learning_rate: NonNegative  # the rate trained with: the default, or lower (measure.training.learning_rate)
    bn_mode: str
    layout: str
    step: str
    parity_steps: Annotated[int, Min(0)]
    dropout: str = "off"
    loss: str | None = None
    labels: str | None = None
    momentum: NonNegative = None
    nesterov: bool | None = None
    beta_1: NonNegative = None
    beta_2: NonNegative = None
    epsilon: NonNegative = None
    batch_norm_kernel: str | None = None
    compiled: bool | None = None
    steps_timed: Annotated[int, Min(0)] | None = None
    steps_total: Annotated[int, Min(0)] | None = None
    last_loss: Number = None
    default_learning_rate: NonNegative = None
    step_cap: NonNegative = None
