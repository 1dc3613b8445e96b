"""The shape of a record's blocks, declared once: what :class:`~inferbench.records.record.Record`'s fields hold, for
the published JSON Schema (generated from these types by :mod:`inferbench.records.schema`, never written by hand)
and for readers. A block is a plain JSON object in the record; its shape lists the keys every reader may rely on
(more may follow as inferbench learns to measure more: blocks stay open to new keys, the record itself does not).

Markers in ``Annotated[...]`` add what a type cannot say (:class:`Enum`, :class:`Min`, :class:`NonEmpty`,
:class:`Pair`, :class:`Doc`); a shape class there says what a block of plain JSON holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any


@dataclass(frozen=True)
class Enum:
    """One of these values (of a registry: its keys)."""

    values: Any


@dataclass(frozen=True)
class Min:
    """At least ``value`` (``exclusive``: more than it)."""

    value: float
    exclusive: bool = False


@dataclass(frozen=True)
class Doc:
    text: str


@dataclass(frozen=True)
class NonEmpty:
    """A string of at least one character."""


@dataclass(frozen=True)
class Pair:
    """Exactly two items (an interval's low and high)."""


Number = float | None
Interval = Annotated[list[float] | None, Pair()]


@dataclass(frozen=True)
class Stability:
    verdict: Annotated[str, Enum(("stable", "unstable", "unknown"))]
    rounds: int
    advice: str
    half_width: Number = None
    drift: Number = None


@dataclass(frozen=True)
class Latency:
    """Per-iteration latencies in milliseconds, summarised."""

    n: Annotated[int, Min(1)]
    mean: float
    p50: float
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
    raw_kept: dict[str, Any] | None = None  # kept, of, method: raw_latencies_ms is a subsample (record.RAW_KEPT_MAX)


@dataclass(frozen=True)
class Parity:
    status: Annotated[str, Enum(("passed", "failed", "not_applicable", "not_run"))]
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


@dataclass(frozen=True)
class ColdStart:
    load_s: Number = None
    first_call_s: Number = None
    load_includes: str | None = None


@dataclass(frozen=True)
class Memory:
    peak_host_mb: Number = None
    timed_peak_host_mb: Number = None
    host_before_load_mb: Number = None
    peak_device_mb: Number = None
    device_used_mb_at_end: Number = None


@dataclass(frozen=True)
class Energy:
    available: bool
    reason: str | None = None
    joules_per_inference: Number = None
    mean_power_w: Number = None


@dataclass(frozen=True)
class ModelStats:
    """The model as it ran: parameters and floating-point operations per image (a multiply-add counts 2), counted
    from its Keras graph at batch 1; null for a model file without one."""

    params: Annotated[int, Min(0)]
    flops_per_image: Annotated[int | None, Min(0)]
    flops_method: str
    flops_resolution: Annotated[int, Min(1)] | None = None
    grouped_convolutions: Annotated[int, Min(0)] | None = None
    why: str | None = None
    activations_per_image: Annotated[int, Min(0)] | None = None  # every layer's outputs at batch 1 (training memory)


@dataclass(frozen=True)
class DeviceShape:
    kind: Annotated[str, Enum(("cpu", "gpu"))]


@dataclass(frozen=True)
class Config:
    """The run configuration that ran (:class:`inferbench.spec.RunConfig`), with the artifacts and the child's
    controlled environment."""

    device: DeviceShape
    threads: int | None = None
    seed: int | None = None
    weights: str | None = None


@dataclass(frozen=True)
class PeakFp32:
    """The device's peak FP32 rate as inferbench measured it (a large matrix product, best of repeats): gflops,
    method, library, threads; gflops null with a why when it could not be measured."""

    gflops: Number = None
    method: str | None = None


@dataclass(frozen=True)
class Environment:
    peak_fp32: PeakFp32 | None = None


@dataclass(frozen=True)
class Validity:
    """Was the machine quiet enough for the numbers to be the runtimes' own? True, false, or null when unknown."""

    valid: bool | None
    reason: str


@dataclass(frozen=True)
class MachineState:
    """The machine during every timed block (cores other work took, steal, load), its threshold and summary."""


@dataclass(frozen=True)
class Tuning:
    """The tuning phase of a tuned cell (``+tuned``): every setting tried with its median latency and its ratio to
    inferbench's own setting, the one chosen and why; null when the cell was not tuned."""

    chosen: dict[str, Any]
    default: dict[str, Any]
    reason: str
    table: list[dict[str, Any]]
    seconds: Number = None


@dataclass(frozen=True)
class Serving:
    """A serving scenario's LoadGen tests (``single-stream``, ``multi-stream``, ``server``, ``offline``): every test
    (``steps``: its serving configuration, target, LoadGen's verdict and why, QPS and percentiles), the answer, the
    single-query latency, the settings; null for the inference scenario."""

    scenario: str
    answer: dict[str, Any]
    steps: list[dict[str, Any]]
    mlperf_valid: bool


@dataclass(frozen=True)
class Training:
    """The training scenario's step (``--scenario train``): the optimizer and its hyper-parameters, the batch-norm
    mode and kernel, the layout, what the step is, dropout (off), the loss and how many steps ran; null for the
    other scenarios."""

    optimizer: str
    learning_rate: Number  # the rate trained with: the default, or lower (measure.training.learning_rate)
    bn_mode: str
    layout: str
    step: str
    parity_steps: Annotated[int, Min(0)]
    dropout: str = "off"
    loss: str | None = None
    labels: str | None = None
    momentum: Number = None
    nesterov: bool | None = None
    beta_1: Number = None
    beta_2: Number = None
    epsilon: Number = None
    batch_norm_kernel: str | None = None
    compiled: bool | None = None
    steps_timed: Annotated[int, Min(0)] | None = None
    steps_total: Annotated[int, Min(0)] | None = None
    last_loss: Number = None
    default_learning_rate: Number = None
    step_cap: Number = None
