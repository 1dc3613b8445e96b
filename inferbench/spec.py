"""The typed chain's wire objects: what a run's configuration, a cell's identity, a job sent to a child process
and the result it sends back are. Frozen dataclasses, each making a JSON round trip through
:mod:`inferbench.base.codec`; they import the registries they name (frameworks, models, scenarios, the device) and
nothing that builds them: the declared options (:mod:`inferbench.options`) sit beside them,
:func:`inferbench.execution.plan.build` above.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from .base.codec import decode, encode
from .base.device import Device
from .base.size import Size, is_size
from .registry.frameworks import COMMON_OPTIONS, Framework, get_framework
from .registry.images import Calibration, EvalSet
from .registry.modelfiles import ModelFile
from .registry.models import get_model
from .registry.scenarios import SCENARIOS
from .registry.scenarios import scenario as scenario_entry

PRECISIONS = ("fp32", "fp16", "bf16", "tf32", "int8")  # tf32: FP32 storage, tensor cores' 10-bit mantissa (GPU)
#: int8: weights and activations quantised after training, calibrated on --calib-dir's images (else seeded inputs)
KERAS_BACKENDS = ("tensorflow", "jax", "torch")
#: The training scenario's optimizers and batch-norm modes (--optimizer, --bn-mode).
OPTIMIZERS = ("sgd", "adam")
BN_MODES = ("train", "frozen")
EXECUTORS = ("local", "ray", "slurm")
#: Where --executor slurm submits its jobs: a Slurm cluster, or submitit's local executor (each job a process here).
SLURM_CLUSTERS = ("slurm", "local")


#: Short names of runner options in a cell's variant tag (the others: the name with dashes; "": the value alone,
#: "+adam").
_TAG_WORDS = {"include_transfer": "e2e", "torch_compile": "compile", "tune": "tuned", "channels_first": "nchw",
              "fused_bn": "fused-bn", "bn_mode": "bn", "optimizer": "", "postprocess": "post"}
#: Where a task's post-processing is timed (--postprocess): apart from the call, or inside it as well.
POSTPROCESS = ("outside", "inside")


@dataclass(frozen=True)
class RunnerOptions:
    """Runner options that change what is measured: each cell carries the ones its framework takes."""

    channels_last: bool = False
    torch_compile: bool = False
    cuda_graphs: bool = False
    keras_backend: str = "tensorflow"
    include_transfer: bool = False
    postprocess: str = "outside"  # "inside": the task's post-processing in the timed call (POSTPROCESS)
    tune: bool = False  # each runtime at its best setting measured here (a short tuning phase before the rounds)
    env: str = ""  # digest of the shell variables passed on to the measured children (--pass-env): "" for none
    ab: str = ""  # digest of --ab-python's install: the cell measured by that interpreter's packages ("" this one's)
    # the training scenario's (scenario "train"; refused elsewhere)
    optimizer: str = "sgd"
    bn_mode: str = "train"  # batch norm with the batch's statistics while training, or frozen (its moving ones)
    fused_bn: bool = False  # TensorFlow's fused batch-norm kernel instead of Keras 3's composed one
    channels_first: bool = False  # Keras and TensorFlow in NCHW (torch's layout switch is channels_last)

    def __post_init__(self) -> None:
        if self.keras_backend not in KERAS_BACKENDS:
            raise ValueError(f"keras_backend must be one of {', '.join(KERAS_BACKENDS)}, not {self.keras_backend!r}")
        if self.postprocess not in POSTPROCESS:
            raise ValueError(f"postprocess must be one of {', '.join(POSTPROCESS)}, not {self.postprocess!r}")
        if self.optimizer not in OPTIMIZERS or self.bn_mode not in BN_MODES:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)} and bn_mode one of "
                             f"{', '.join(BN_MODES)}, not {self.optimizer!r} / {self.bn_mode!r}")

    def for_framework(self, fw: Framework) -> RunnerOptions:
        """These options with the ones ``fw`` does not take back at their defaults."""
        takes = set(COMMON_OPTIONS) | set(fw.options)
        default = RunnerOptions()
        return RunnerOptions(**{f.name: getattr(self if f.name in takes else default, f.name)
                                for f in dataclasses.fields(self)})

    @property
    def tag(self) -> str:
        """Short name of every option away from its default: part of the cell's identity and file name."""
        default = RunnerOptions()
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                word = _TAG_WORDS.get(f.name, f.name.replace("_", "-"))
                parts.append(word if value is True else f"{word}-{value}" if word else str(value))
        return "+".join(parts)


@dataclass(frozen=True)
class CellKey:
    """The identity of a cell: file name, progress label, resume check and analysis grouping."""

    model: str
    resolution: Size
    batch_size: int
    framework: str
    precision: str = "fp32"
    scenario: str = "inference"
    options: RunnerOptions = field(default_factory=RunnerOptions)

    def __post_init__(self) -> None:
        if not is_size(self.resolution) or self.batch_size < 1:
            raise ValueError(f"resolution must be pixels a side or HxW and batch_size positive, got "
                             f"{self.resolution!r}, {self.batch_size}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r}")

    def check(self) -> None:
        """The cell against the registries: a model and framework that exist, a resolution the model
        takes, a precision and runner options its framework takes (UsageError or ValueError if not)."""
        fw = get_framework(self.framework)
        get_model(self.model).resolution(self.resolution)
        if not fw.takes(self.precision):
            raise ValueError(f"{self.framework} does not run in {self.precision}")
        if self.options != self.options.for_framework(fw):
            raise ValueError(f"{self.framework} does not take the options of {self.label}")

    @property
    def variant(self) -> str:
        return self.options.tag

    @property
    def group_label(self) -> str:
        """The group the cell is measured in (one model, resolution and batch size), as progress lines name it."""
        return f"{self.model}@{self.resolution} bs{self.batch_size}"

    @property
    def label(self) -> str:
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        var = f" +{self.variant}" if self.variant else ""
        label = scenario_entry(self.scenario).label
        scen = f" [{label}]" if label else ""
        return f"{self.model}@{self.resolution} {self.framework}{prec}{var} bs{self.batch_size}{scen}"

    @property
    def filename(self) -> str:
        return record_filename(self.model, self.resolution, self.batch_size, self.framework, self.precision,
                               self.variant, self.scenario)


#: A cell's identity as a record's columns say it, declared once: :class:`CellKey`'s fields, its runner options
#: written as the ``variant`` tag. Every grouping of the analysis, ``compare`` and the ranking is derived from it.
IDENTITY = ("model", "resolution", "batch_size", "framework", "precision", "scenario", "variant")
#: The runtime part of the identity: what a comparison sets side by side (a runtime at a precision: OpenVINO in BF16
#: competes with ONNX Runtime in FP32 for the same answer once both pass parity, its precision in its name)...
RUNTIME = ("framework", "precision", "variant")
#: ...within a group that shares the rest (one model, resolution, batch size and scenario).
GROUP_FIELDS = tuple(f for f in IDENTITY if f not in RUNTIME)
assert [f.name for f in dataclasses.fields(CellKey)] == [*IDENTITY[:-1], "options"], "IDENTITY must follow CellKey"


def record_filename(model: str, resolution: Size, batch_size: int, framework: str, precision: str = "fp32",
                    variant: str = "", scenario: str = "inference") -> str:
    """The one file name of a cell's record (fp32, default options and inference add nothing)."""
    parts = [f"{model}_{resolution}_bs{batch_size}_{framework}"]
    parts += [precision] if precision != "fp32" else []
    parts += [variant] if variant else []
    parts += [scenario_entry(scenario).label] if scenario_entry(scenario).label else []
    return "_".join(parts) + ".json"


@dataclass(frozen=True)
class TimingConfig:
    warmup_iterations: int = 5
    warmup_seconds: float = 1.0
    min_duration_s: float = 4.0  # per cell, all rounds together
    min_iterations: int = 16  # per cell, all rounds together
    rounds: int = 8

    def __post_init__(self) -> None:
        if self.warmup_iterations < 0 or self.warmup_seconds < 0:
            raise ValueError("warm-up must not be negative")
        if self.min_iterations < 1:
            raise ValueError("min_iterations must be at least 1")
        if self.min_duration_s < 0:
            raise ValueError("min_duration_s must not be negative")
        if self.rounds < 1:
            raise ValueError("rounds must be at least 1")

    @property
    def block_s(self) -> float:
        return self.min_duration_s / self.rounds

    @property
    def block_iterations(self) -> int:
        return math.ceil(self.min_iterations / self.rounds)


#: --quick's settings, and where --time-budget's shrinking stops: 6 rounds of 0.5 s a cell in one worker process each
#: (a between-process spread measured from two processes and 3 rounds has one degree of freedom: t = 12.7 made a
#: quick interval +-300%; one process takes the assumed spread instead, and 6 rounds give 5 degrees of freedom).
#: A block is never shorter than the machine check can judge (measure.trackers.machine.MIN_JUDGED_S, 0.5 s: /proc's
#: 10 ms ticks; execution/budget.py asserts it): 0.25 s blocks left a busy machine's --quick cells judged on their
#: average only.
QUICK = {"rounds": 6, "min_duration_s": 3.0, "warmup_seconds": 0.3, "processes": 1,
         "tune_budget_s": 1.0}  # tuning: --time-budget's floor only (--quick itself does not tune unless --tune on)


#: Reduced-precision cells' top-1 / top-5 agreement with FP32 is counted over this many seeded inputs (the gate's
#: statistic: :func:`inferbench.measure.parity.agreement`) unless --agreement-inputs says otherwise.
AGREEMENT_INPUTS = 1000
CALIB_IMAGES = 300  # INT8's calibration inputs (--calib-images): ONNX Runtime's and NNCF's own default
MAX_CALIB_IMAGES = 2000  # at most (NNCF holds them all: 1.2 GB at 224 px)
EVAL_IMAGES = 1000  # --eval-images: the labelled images each cell's accuracy is measured on, at most
AGREEMENT_MIN = 1000  # the least --agreement-inputs takes besides 0 (the tests count fewer, through RunConfig)


@dataclass(frozen=True)
class SlurmConfig:
    """How ``--executor slurm`` submits each group's job (through submitit; docs/distributed.md)."""

    partition: str | None = None  # --partition (None: the cluster's default)
    account: str | None = None  # --account
    gpus_per_job: int | None = None  # --gpus-per-job (None: one for a GPU run, none for the CPU)
    time_limit_min: int | None = None  # --job-time-limit (None: each group's estimate, with a margin)
    sbatch: tuple[str, ...] = ()  # --sbatch: further sbatch options, KEY=VALUE each
    cluster: str = "slurm"  # --slurm-cluster: a Slurm cluster, or submitit's local executor

    def __post_init__(self) -> None:
        if self.cluster not in SLURM_CLUSTERS:
            raise ValueError(f"cluster must be one of {', '.join(SLURM_CLUSTERS)}, not {self.cluster!r}")
        if self.gpus_per_job is not None and self.gpus_per_job < 0:
            raise ValueError(f"gpus_per_job must be at least 0, got {self.gpus_per_job}")
        if self.time_limit_min is not None and self.time_limit_min < 1:
            raise ValueError(f"time_limit_min must be at least 1, got {self.time_limit_min}")


@dataclass(frozen=True)
class RunConfig:
    """What every cell of one run or sweep shares; written into each record as ``config``."""

    weights: str
    seed: int
    device: Device
    threads: int
    timing: TimingConfig
    options: RunnerOptions
    cache_dir: str
    timeout_s: float | None = None
    scenario: str = "inference"
    pass_env: tuple[str, ...] = ()  # shell variables passed on to the children on purpose
    model_files: tuple[ModelFile, ...] = ()  # the user's model files among the cells' models (--model PATH)
    log_to: tuple[str, ...] = ()  # tracking targets each record is logged to (--log-to)
    sequential: bool = False  # each cell its own group: one framework loaded at a time (--sequential)
    max_other_load: float = 0.25  # share of the run's cores other work may take before a cell is not valid
    allow_busy: bool = False  # judge a busy machine's cells anyway: margins, significance, stability (--allow-busy)
    processes: int = 2  # worker processes per cell, its rounds spread over them (--processes)
    quick: bool = False  # a first answer: fewer, shorter rounds; LoadGen's tests shortened (--quick)
    slo_p99_ms: float | None = None  # the server scenario's p99 bound (--slo-p99)
    tune_budget_s: float = 4.0  # the tuning phase's timed blocks, per cell, all candidates together (--tune-budget)
    executor: str = "local"  # where a sweep's groups run: this machine, a Ray cluster, Slurm jobs (--executor)
    ray_address: str | None = None  # the Ray cluster's head (None: one of this machine, started for the sweep)
    machines: tuple[str, ...] = ()  # --executor ray or slurm: every cell on each of these machines (--machines)
    slurm: SlurmConfig | None = None  # --executor slurm: how each group's job is submitted
    agreement_inputs: int = AGREEMENT_INPUTS  # reduced precisions' agreement with FP32 over this many (0: not counted)
    eval_set: EvalSet | None = None  # labelled images each cell's accuracy is measured on (--eval-dir)
    calibration: Calibration | None = None  # what INT8 cells are calibrated on (--calib-dir, --calib-images)
    target_ci: float | None = None  # rounds added until every paired ratio's 95% half-width is below it (--target-ci)
    ab: dict[str, Any] | None = None  # --ab-python's install (executable, python, packages, digest): B's cells' workers
    trust_cache: bool = False  # --trust-cache: a cache shared on purpose; each worker loads private, checked copies

    def __post_init__(self) -> None:
        if self.slo_p99_ms is not None and not 0 < self.slo_p99_ms < math.inf:
            raise ValueError(f"slo_p99_ms must be a positive finite number, got {self.slo_p99_ms}")
        if self.target_ci is not None and not 0 < self.target_ci < 1:
            raise ValueError(f"target_ci must be a fraction between 0 and 1, got {self.target_ci}")
        if self.agreement_inputs < 0:
            raise ValueError(f"agreement_inputs must be at least 0, got {self.agreement_inputs}")
        if self.processes < 1:
            raise ValueError(f"processes must be at least 1, got {self.processes}")
        if not 0 < self.tune_budget_s < math.inf:
            raise ValueError(f"tune_budget_s must be a positive finite number, got {self.tune_budget_s}")
        if not 0.0 <= self.max_other_load <= 1.0:
            raise ValueError(f"max_other_load must be between 0 and 1, got {self.max_other_load}")
        if self.device.kind not in ("cpu", "gpu") or (self.device.kind == "gpu") != (self.device.gpu is not None):
            raise ValueError(f"device must be the CPU or one GPU, got {self.device}")
        if self.threads < 1 or self.seed < 0:
            raise ValueError(f"threads must be positive and seed non-negative, got {self.threads}, {self.seed}")
        if self.timeout_s is not None and not 0 < self.timeout_s < math.inf:
            raise ValueError(f"timeout_s must be a positive finite number or null, got {self.timeout_s}")
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {self.executor!r}")


@dataclass(frozen=True)
class CellJob:
    """One cell, as the parent sends it to a child process."""

    cell: CellKey
    framework: Framework
    config: RunConfig
    artifact_dir: str
    artifact: str | None  # the file or folder the runner loads (None: it builds its own model)
    group_batch_sizes: tuple[int, ...]  # every batch size of this (model, resolution) in the run (TensorRT profiles)
    idle_seconds: float = 2.0
    interleaving: dict[str, Any] = field(default_factory=dict)  # the group its rounds were interleaved with
    setting: dict[str, Any] = field(default_factory=dict)  # load-time settings of a tuning candidate's worker
    log_dir: str | None = None  # where a scenario keeps its logs beside the record (LoadGen's)
    # the agreement and accuracy blocks the cell's first process counted (the same export, runtime and inputs): its
    # other processes take them rather than count them again (scenarios/gates.py: REUSED)
    judged: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportJob:
    """One export of one artifact kind, as the parent sends it to a child process."""

    kind: str
    module: str
    packages: tuple[str, ...]
    folder: str
    model: str
    resolution: Size
    weights: str
    seed: int
    batch_sizes: tuple[int, ...]
    key_inputs: dict[str, Any]
    model_file: ModelFile | None = None  # the model, if it is the user's file
    variants: tuple[str, ...] = ()  # what a per-batch-size export makes besides the batch size (training set-ups)
    eval_set: EvalSet | None = None  # the user's labelled images (--eval-dir), for the evaluation export
    calibration: Calibration | None = None  # what an INT8 export is calibrated on
    then: tuple[ExportJob, ...] = ()  # exports of the same model that follow in the same process


@dataclass(frozen=True)
class CellOutcome:
    """What a cell's scenario measured: the record's measurement blocks and the timing that ran."""

    timing: TimingConfig  # after any extension of the window for the energy counter
    blocks: dict[str, Any]  # parity, latency_ms, throughput_per_s, raw_latencies_ms, timing, energy, ...


@dataclass(frozen=True)
class ChildResult:
    """What a child process sends back: a cell's outcome or an export's manifest entry, or its error
    (a usage error is one line for the user)."""

    ok: bool
    cell: CellOutcome | None = None
    export: dict[str, Any] | None = None
    error: str | None = None
    traceback: str | None = None
    usage_error: bool = False
    died: bool = False  # the process ended without a result (killed, crashed, out of time), not by an exception
    left_out: bool = False  # never loaded: --time-budget left no room for it when its turn came (no record: --resume)


JOB_TYPES: dict[str, type] = {"cell": CellJob, "export": ExportJob}


def job_to_json(job: CellJob | ExportJob) -> str:
    kind = next(k for k, cls in JOB_TYPES.items() if isinstance(job, cls))
    return json.dumps({"type": kind, "job": encode(job)})


def job_from_json(text: str) -> CellJob | ExportJob:
    data = json.loads(text)
    return decode(JOB_TYPES[data["type"]], data["job"], f"{data['type']} job")


def groups_of(cells: list[CellKey], sequential: bool) -> list[list[CellKey]]:
    """The cells in groups measured together: one per model, resolution and batch size (--sequential: a cell
    each)."""
    groups: dict[tuple[Any, ...], list[CellKey]] = {}
    for cell in cells:
        key = (cell.model, cell.resolution, cell.batch_size) + ((cell,) if sequential else ())
        groups.setdefault(key, []).append(cell)
    return list(groups.values())
