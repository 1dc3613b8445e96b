"""The command lines' side of the typed chain: from flags and config files to a run's configuration.

- :data:`OPTIONS` declares every user-facing setting once (flags, parser, default, help); it builds the
  ``run`` and ``sweep`` command lines and checks sweep config files with the same rules.
- :func:`build` turns the checked values into a :class:`~inferbench.spec.RunConfig` (what every cell of a run
  shares) and its :class:`~inferbench.spec.CellKey` list (one identity per cell: file name, label, resume,
  analysis grouping).
- A :class:`Plan` (config + cells) is what a sweep saves and ``--resume`` reads back, checked.

The wire objects themselves (``RunConfig``, ``CellKey``, the jobs and the child's result) are in
:mod:`inferbench.spec`, which every lower module imports instead of this one; they are re-exported here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.codec import decode, encode
from ..base.errors import UsageError, shorten
from ..execution.budget import QUICK, parse_duration
from ..execution.exports import exported
from ..registry.frameworks import SETS, Framework, choose, get_framework
from ..registry.models import ModelFile, register
from ..registry.scenarios import SCENARIOS, scenario
from ..spec import (
    BN_MODES,
    EXECUTORS,
    KERAS_BACKENDS,
    OPTIMIZERS,
    PRECISIONS,
    CellKey,
    RunConfig,
    RunnerOptions,
    TimingConfig,
)

DAY_S = 86_400.0
MAX_SLO_MS = 60_000.0  # --slo-p99: a minute (no image is served slower; --slo-p99 86400000 "served" 48,401 QPS)
MAX_RESOLUTION = 4096
MAX_BATCH = 65_536
#: A grid larger than this many cells needs --yes (its size and estimated time are said first).
MAX_CELLS = 2_000
PLAN_VERSION = 2
#: Timed iterations per cell with --objective p99: four times the 299 a distribution-free 95% bound on a p99
#: needs, so that correlated iterations (an effective count below the count) still bound it.
P99_MIN_ITERATIONS = 1200
#: --scenario server's p99 bound when --slo-p99 is not given.
DEFAULT_SLO_P99_MS = 50.0


# --------------------------------------------------------------------------- value parsers
def _int(text: str, minimum: int, what: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _int(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    try:
        return _int(text, 0, "a non-negative integer")
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}") from None


def _float(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    if positive and value == 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    return _float(text, positive=True)


def non_negative_float(text: str) -> float:
    return _float(text, positive=False)


def _items(text: str) -> list[str]:
    return [v.strip() for v in str(text).split(",") if v.strip()]


def names(text: str) -> list[str]:
    return list(dict.fromkeys(_items(text)))


def env_names(text: str) -> list[str]:
    """--pass-env's list: names of shell variables, never NAME=VALUE (a value is set in the shell, then named)."""
    import re

    found = names(text)
    for name in found:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            shown = name if len(name) <= 40 else name[:40] + "..."
            raise argparse.ArgumentTypeError(f"{shown!r} is not a variable name: --pass-env names variables set in "
                                             "the shell (export NAME=VALUE, then --pass-env NAME)")
    return found


def positive_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in _items(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be positive integers, got {text!r}")
    return list(dict.fromkeys(values))


def resolutions(text: str) -> list[int | str]:
    out: list[int | str] = []
    for item in _items(text):
        if item in ("default", "min"):
            out.append(item)
            continue
        try:
            out.append(int(item))
        except ValueError:
            raise argparse.ArgumentTypeError(f"resolution must be an integer, 'default' or 'min', got {item!r}") \
                from None
    return list(dict.fromkeys(out))


def path_value(text: str) -> str:
    """A folder or file name from the command line: not empty, and no part longer than the file system takes."""
    if not str(text).strip():
        raise argparse.ArgumentTypeError("must name a folder or file, got an empty string")
    too_long = [part for part in Path(text).parts if len(part.encode()) > 255]
    if too_long:
        raise argparse.ArgumentTypeError(f"{shorten(too_long[0])} is longer than a file name may be (255 bytes)")
    return str(text)


def precisions(text: str) -> list[str]:
    values = names(text)
    bad = [p for p in values if p not in PRECISIONS]
    if bad:
        raise argparse.ArgumentTypeError(f"invalid choice: {', '.join(bad)} (choose from {', '.join(PRECISIONS)})")
    return values


# --------------------------------------------------------------------------- the declarations
@dataclass(frozen=True)
class Option:
    """One user-facing setting: its flags, parser, default and help, for every command that has it."""

    name: str  # key in sweep config files and in the namespace
    flags: tuple[str, ...]
    help: str
    default: Any = None
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False  # a flag without a value (true when given)
    metavar: str | None = None
    commands: tuple[str, ...] = ("run", "sweep")
    in_file: bool = True  # may appear in a sweep config file
    command_defaults: tuple[tuple[str, Any], ...] = ()  # (command, default) where a command's differs
    maximum: float | None = None  # the largest value (each value of a list) this machine or model can take

    def parser(self) -> Callable[[str], Any] | None:
        """``parse`` with the range check: the one rule for flags and config files alike."""
        if self.parse is None or self.maximum is None:
            return self.parse
        parse, maximum = self.parse, self.maximum

        def bounded(text: str) -> Any:
            value = parse(text)
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, (int, float)) and v > maximum:
                    raise argparse.ArgumentTypeError(f"must be at most {maximum:.10g}, got {v:.10g}")
            return value

        return bounded

    def default_for(self, command: str) -> Any:
        return dict(self.command_defaults).get(command, self.default)

    def check(self, value: Any, where: str) -> Any:
        """A config-file value through the same rules as the command-line flag."""
        if self.switch:
            if not isinstance(value, bool):
                raise UsageError(f"{where}: {self.name} must be true or false, got {value!r}")
            return value
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        if isinstance(value, (dict, bool)) or value is None:
            raise UsageError(f"{where}: {self.name} must be a value or a list, got {value!r}")
        text = str(value)
        if self.choices is not None and text not in self.choices:
            raise UsageError(f"{where}: {self.name} must be one of {', '.join(self.choices)}, got {text!r}")
        parse = self.parser()
        if parse is None:
            return text
        try:
            return parse(text)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{where}: {self.name}: {exc}") from None


#: The commands that measure cells.
MEASURING = ("run", "sweep", "zoo")
_T = TimingConfig()
OPTIONS: tuple[Option, ...] = (
    Option("frameworks", ("--framework", "--frameworks"), "'best' (each runtime at its best-known setting: tf, "
           "onnxrt, openvino, torch-inductor on a CPU), 'all' (every framework that can run here, the naive "
           "variants too) or a comma list of framework keys (see --list)", ["best"], names,
           metavar="best|all|KEY[,KEY...]", commands=MEASURING, command_defaults=(("zoo", ["all"]),)),
    Option("models", ("--model", "--models"), "registered model name(s) or shell-style patterns ('efficientnet_b*', "
           "'*'; see --list), or your own model: a .keras file, a TF SavedModel folder or an .onnx file; "
           "comma-separated", ["mobilenet_v3_large"], names,
           metavar="NAME|PATH[,...]", commands=MEASURING, command_defaults=(("zoo", ["*"]),)),
    Option("input_shape", ("--input-shape",), "the input of a model file, where inferbench cannot read it from the "
           "file (a SavedModel, a dynamic size): HxWx3 (NHWC) or 3xHxW (NCHW), square", None,
           metavar="HxWxC|CxHxW"),
    Option("resolutions", ("--resolution", "--resolutions"), "input height = width in pixels, 'default' (each "
           "model's own: 224 for most, see --list) or 'min' (the smallest each model takes: a quick check)",
           ["default"], resolutions, metavar="PX[,PX...]",
           maximum=MAX_RESOLUTION, commands=MEASURING),
    Option("batch_sizes", ("--batch-size", "--batch-sizes"), "batch size(s), comma-separated", [1], positive_ints,
           metavar="N[,N...]", maximum=MAX_BATCH, commands=MEASURING),
    Option("precisions", ("--precision", "--precisions"), "fp32, fp16 or bf16 (comma list in a sweep): frameworks "
           "that take it run at it (torch, torch-native), the others at their own", [], precisions,
           metavar="P[,P...]"),
    Option("weights", ("--weights",), "'random' (seeded, offline), 'imagenet' (downloads) or a .keras / "
           ".weights.h5 file", "random"),
    Option("seed", ("--seed",), "seed for weights and inputs", 0, non_negative_int, metavar="N", maximum=2**32 - 1,
           commands=MEASURING),
    Option("device", ("--device",), "where to run: auto = the GPU if there is one, else the CPU", "auto",
           choices=("cpu", "gpu", "auto"), commands=MEASURING),
    Option("gpu_id", ("--gpu-id",), "GPU index in PCI bus order, as nvidia-smi lists them (implies --device gpu)",
           None, non_negative_int, metavar="N", commands=("run", "sweep", "selftest", "zoo"),
           command_defaults=(("selftest", 0),)),
    Option("threads", ("--threads",), "intra-op threads for every framework (default: the cores available to "
           "this process; at most the machine's cores)", None, positive_int, metavar="N", maximum=os.cpu_count() or 1,
           commands=MEASURING),
    Option("duration", ("--duration",), "minimum seconds of timed inference per cell, all rounds together",
           _T.min_duration_s, non_negative_float, metavar="S", commands=("run", "sweep", "selftest", "zoo"),
           command_defaults=(("selftest", 3.0), ("zoo", 1.0)), maximum=DAY_S),
    Option("min_iterations", ("--min-iterations",), "minimum timed iterations per cell, all rounds together",
           _T.min_iterations, positive_int, metavar="N", maximum=10_000_000, commands=MEASURING,
           command_defaults=(("zoo", 5),)),
    Option("warmup", ("--warmup",), "minimum warm-up calls", _T.warmup_iterations, non_negative_int, metavar="N",
           maximum=1_000_000, commands=MEASURING, command_defaults=(("zoo", 1),)),
    Option("warmup_seconds", ("--warmup-seconds",), "minimum warm-up seconds", _T.warmup_seconds,
           non_negative_float, metavar="S", maximum=DAY_S, commands=MEASURING, command_defaults=(("zoo", 0.0),)),
    Option("pass_env", ("--pass-env",), "shell variables to pass on to the frameworks (TF_XLA_FLAGS, OMP_*, "
           "ORT_*, ... are otherwise set by inferbench, never inherited; recorded either way)", [], env_names,
           metavar="VAR[,VAR...]", commands=MEASURING),
    Option("rounds", ("--rounds",), "rounds per cell: every cell of a group measures one block per round, in a "
           "fresh random order; intervals come from the variation between rounds", _T.rounds, positive_int,
           metavar="N", maximum=10_000, commands=MEASURING, command_defaults=(("zoo", 1),)),
    Option("processes", ("--processes",), "worker processes per cell, its rounds spread over them: what differs "
           "between processes (memory layout, thread placement) and no round can see is measured from them, and every "
           "interval includes it (1: not measured, an assumed 1.5%% instead)", 2, positive_int, metavar="N",
           maximum=16, commands=MEASURING, command_defaults=(("zoo", 1),)),
    Option("sequential", ("--sequential",), "measure each cell on its own, one framework loaded at a time, instead of "
           "a group's cells side by side in interleaved rounds: for models too big to load every framework at once "
           "(comparisons between cells are then unpaired, their intervals wider; the zoo always runs so)", False,
           switch=True),
    Option("max_other_load", ("--max-other-load",), "a cell is not valid when other work (other processes, and on "
           "a virtual machine the hypervisor's steal) took more than PCT percent of the cores the run uses during one "
           "of its blocks", 25.0, non_negative_float, metavar="PCT", maximum=100.0, commands=MEASURING),
    Option("allow_busy", ("--allow-busy",), "judge a busy machine's cells anyway: without it, a group measured while "
           "other work took more than --max-other-load gets a best guess only, no margin, significance or stability "
           "(the records say it was allowed)", False, switch=True, commands=MEASURING),
    Option("require_valid", ("--require-valid",), "exit 1 unless the run is valid: no cell measured while other "
           "work took more than --max-other-load (for CI; a machine whose state cannot be read is not valid)", False,
           switch=True, commands=MEASURING, in_file=False),
    Option("timeout", ("--timeout",), "give up on a cell after this many seconds (default: no limit)", None,
           positive_float, metavar="S", maximum=7 * DAY_S, commands=MEASURING),
    Option("tune", ("--tune",), "before the timed rounds, try each runtime's small grid of settings (threads, "
           "spinning, OpenVINO's hint and pinning, OpenMP's wait policy) in short paired rounds and measure the "
           "fastest (the cell is then '+tuned'; docs/frameworks.md lists the grids): auto = on for the default "
           "'best' set", "auto", choices=("auto", "on", "off"), commands=MEASURING),
    Option("tune_budget", ("--tune-budget",), "seconds of timed tuning blocks per cell, every setting together",
           4.0, positive_float, metavar="S", maximum=3600.0, commands=MEASURING),
    Option("include_transfer", ("--include-transfer",), "time host array in -> host array out (copies inside "
           "the window), as the scripts inferbench replaces did", False, switch=True),
    Option("channels_last", ("--channels-last",), "torch-native: channels-last memory format", False, switch=True),
    Option("torch_compile", ("--torch-compile",), "torch, torch-native: torch.compile the module", False,
           switch=True),
    Option("cuda_graphs", ("--cuda-graphs",), "torch, torch-native on a GPU: replay a CUDA graph", False,
           switch=True),
    Option("keras_backend", ("--keras-backend",), "backend for keras-eager, keras and kerasxla", "tensorflow",
           choices=KERAS_BACKENDS, commands=("run", "sweep", "selftest")),
    Option("executor", ("--executor",), "where the sweep's cells run: local (this machine, one group after another) "
           "or ray (a Ray cluster: each group a task on a node reserved whole; pip install -e \".[ray]\"; "
           "docs/distributed.md)", "local", choices=EXECUTORS, commands=("sweep", "zoo")),
    Option("ray_address", ("--ray-address",), "--executor ray: the cluster's head as HOST:PORT (default: a cluster "
           "of this machine alone, started for the sweep)", None, metavar="HOST:PORT", commands=("sweep", "zoo")),
    Option("machines", ("--machines",), "--executor ray: run every cell on each of these machines (nodes started with "
           "--resources '{\"machine:NAME\": 1, \"inferbench\": 1}'), each machine's records in a folder of its own, "
           "for a cross-machine comparison", [], names, metavar="NAME[,NAME...]", commands=("sweep", "zoo")),
    Option("optimizer", ("--optimizer",), "--scenario train: the optimizer (SGD with momentum 0.9, or Adam; the "
           "hyper-parameters in docs/training.md)", "sgd", choices=OPTIMIZERS),
    Option("bn_mode", ("--bn-mode",), "--scenario train: batch norm normalises with the batch's statistics (train) "
           "or is frozen (its moving statistics; its scale and offset not trained)", "train", choices=BN_MODES),
    Option("fused_bn", ("--fused-batch-norm",), "--scenario train, Keras and TensorFlow on TensorFlow: batch norm "
           "by TensorFlow's fused kernel (Keras 3 composes it otherwise)", False, switch=True),
    Option("channels_first", ("--channels-first",), "--scenario train, Keras and TensorFlow: train in NCHW "
           "(TensorFlow has no NCHW convolutions on a CPU; torch's layout switch is --channels-last)", False,
           switch=True),
    Option("log_to", ("--log-to",), "also log each cell as a tracking run: mlflow (MLFLOW_TRACKING_URI, default a "
           "local store), wandb (offline unless WANDB_MODE says otherwise); grouped by run or sweep", [], names,
           metavar="mlflow|wandb[,...]"),
    Option("objective", ("--objective",), "what the recommendation optimises: p50 (median latency), p90, p99 (tail "
           "latency), throughput, or energy (joules per inference, where a sensor exists); the serving scenarios' "
           "own by default: server and offline throughput, single-stream p90, multi-stream p99", "p50",
           choices=("p50", "p90", "p99", "throughput", "energy"), commands=("run", "sweep", "report"), in_file=False),
    Option("json", ("--json",), "print one JSON document on standard output (the answer, the cells, the files; "
           "its JSON Schema: inferbench/records/schema/output.schema.json) and everything meant for people on "
           "standard error", False, switch=True, commands=("run", "compare", "report", "list"), in_file=False),
    Option("quiet", ("-q", "--quiet"), "while running, print failures only (the answer and the table still "
           "follow)", False, switch=True, commands=("run", "sweep", "selftest", "zoo"), in_file=False),
    Option("verbose", ("-v", "--verbose"), "print every phase of every cell as its own line, and exporter notes",
           False, switch=True, commands=("run", "sweep", "selftest", "zoo"), in_file=False),
    Option("yes", ("--yes",), f"run a grid of more than {MAX_CELLS} cells", False, switch=True, in_file=False,
           commands=MEASURING),
    Option("scenario", ("--scenario",), "what each cell measures: inference (the latency and throughput of one "
           "call per batch, in interleaved rounds), under MLPerf LoadGen single-stream (p90 of single queries), "
           "multi-stream (p99 of 8-sample queries), server (the largest load whose p99 stays within --slo-p99) or "
           "offline (the most samples per second), or train (one training step: forward, loss, backward, update; "
           "samples per second, after training parity)", "inference", choices=tuple(SCENARIOS)),
    Option("slo_p99", ("--slo-p99",), "--scenario server: the p99 latency bound in milliseconds (default: "
           "50; at most a minute: under a longer bound a runtime's queue grows for the whole test unseen)", None,
           positive_float, metavar="MS", maximum=MAX_SLO_MS),
    Option("time_budget", ("--time-budget",), "bound the whole run or sweep (90s, 20m, 1h30m): the plan says up "
           "front what fits (rounds and blocks shortened down to --quick's, then the costliest frameworks left out, "
           "each said), and the run keeps to it (a group's rounds cut, never below 3 nor two a worker process; groups "
           "that would overrun left unmeasured, a sweep's for --resume)", None, parse_duration, metavar="DURATION",
           commands=("run", "sweep"), in_file=False),
    Option("quick", ("--quick",), f"a first answer: fewer, shorter rounds ({QUICK['rounds']} of "
           f"{QUICK['min_duration_s'] / QUICK['rounds']:g} s) in {QUICK['processes']} worker process a cell, "
           f"{QUICK['tune_budget_s']:g} s of tuning, and LoadGen's tests shortened; the record says it was quick",
           False, switch=True),
    Option("output_dir", ("--output-dir",), "results go to OUTPUT_DIR/<run id>/ (the default is git-ignored: "
           "benchmark_results/ holds the project's own committed runs)", "inferbench-results",
           parse=path_value, metavar="DIR", in_file=False, commands=("run", "sweep", "selftest", "zoo"),
           command_defaults=(("sweep", "inferbench-results/sweeps"), ("zoo", "inferbench-results/zoo"))),
    Option("cache_dir", ("--cache-dir",), "artifact cache (default: $INFERBENCH_CACHE or "
           "~/.cache/inferbench/artifacts)", None, parse=path_value, metavar="DIR", in_file=False,
           commands=("run", "sweep", "selftest", "zoo")),
    Option("trust_cache", ("--trust-cache",), "use an artifact cache that another user owns or can write to (one "
           "shared on purpose): without it such a cache is refused, since what is exported there runs as you", False,
           switch=True, in_file=False, commands=("run", "sweep", "selftest", "zoo")),
    Option("name", ("--name",), "folder name (default: sweep-<timestamp> or zoo-<timestamp>)", None, path_value,
           metavar="NAME",
           commands=("sweep", "zoo"), in_file=False),
    Option("config", ("--config",), "TOML, JSON or YAML file with the keys of these options (command-line "
           "values win)", None, metavar="FILE", commands=("sweep",), in_file=False),
    Option("resume", ("--resume",), "finish an interrupted sweep: run only the cells without a record", None,
           metavar="SWEEP_DIR", commands=("sweep", "zoo"), in_file=False),
    Option("list", ("--list",), "list models and frameworks, and whether each runs here", False, switch=True,
           commands=("run",), in_file=False),
)
BY_NAME = {o.name: o for o in OPTIONS}


def add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Every option of ``command``; values not given stay out of the namespace (see :func:`given`)."""
    for o in OPTIONS:
        if command not in o.commands:
            continue
        default = o.default_for(command)
        shown = "" if default in (None, False, []) else \
            f" (default: {','.join(map(str, default)) if isinstance(default, list) else default})"
        if o.maximum is not None:
            shown += f" (at most {o.maximum:.10g})"
        kwargs: dict[str, Any] = {"dest": o.name, "default": argparse.SUPPRESS, "help": o.help + shown}
        if o.switch:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(metavar=o.metavar, choices=o.choices, type=o.parser())
        parser.add_argument(*o.flags, **kwargs)


def given(ns: argparse.Namespace) -> dict[str, Any]:
    return dict(vars(ns))


def verbosity(values: dict[str, Any]) -> int:
    """-q: -1, default: 0, -v: 1 (both given: an error)."""
    if values.get("quiet") and values.get("verbose"):
        raise UsageError("--quiet and --verbose contradict each other: give one")
    return 1 if values.get("verbose") else -1 if values.get("quiet") else 0


def read_config_file(path: str) -> dict[str, Any]:
    """A sweep config file's values, each checked like its command-line flag."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start:exc.start + 1]
        raise UsageError(f"config {path} is not UTF-8 text (byte {exc.start}: {bad!r})") from None
    try:
        if file.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif file.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif file.suffix == ".json":
            data = json.loads(text)
        else:
            raise UsageError(f"config must be .toml, .json or .yaml, got {path}")
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - every parser's own error (RecursionError included) is bad input
        raise UsageError(f"cannot parse config {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config {path} must be a table of keys")
    valid = [o.name for o in OPTIONS if o.in_file]
    unknown = sorted(set(data) - set(valid))
    if unknown:
        raise UsageError(f"unknown key(s) in {path}: {', '.join(unknown)}; valid: {', '.join(valid)}")
    return {key: BY_NAME[key].check(value, path) for key, value in data.items()}


#: The key :func:`with_defaults` adds: the names of the options given (on the command line or in a config file), so
#: that a value equal to its default still counts as the user's (:func:`was_given`).
GIVEN = "_given"


def with_defaults(values: dict[str, Any], command: str) -> dict[str, Any]:
    """``values`` over ``command``'s defaults; an option the command lacks takes its plain default (the zoo
    has no --precision: it runs each framework at its own). ``GIVEN`` names the options ``values`` holds."""
    return {**{o.name: o.default_for(command) if command in o.commands else o.default for o in OPTIONS}, **values,
            GIVEN: frozenset(values) | values.get(GIVEN, frozenset())}


def was_given(values: dict[str, Any], name: str) -> bool:
    """Did the user give option ``name`` (whatever its value: ``--rounds 8`` is given even where 8 is the default)?"""
    return name in values.get(GIVEN, values)


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
    from ..base.device import resolve

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


def build(values: dict[str, Any]) -> Built:
    """Checked option values (defaults included) -> the run's configuration and its cells."""
    from ..base.device import default_threads, resolve
    from ..exporters import cache as artifact_cache
    from ..registry.models import describe_weights, get_model

    for key in ("models", "resolutions", "batch_sizes"):
        if not values[key]:
            raise UsageError(f"{key} is empty: give at least one")
    files = open_files(values)
    models = [get_model(m.name if isinstance(m, ModelFile) else m) for m in files]
    if values["weights"] == "imagenet":
        from ..registry.builders import refuse_imagenet

        refuse_imagenet([m.name for m in models if m.keras_builder and ":" in m.keras_builder])
    model_files = tuple(m for m in files if isinstance(m, ModelFile))
    from ..execution.tracking import check as check_tracking

    check_tracking(values["log_to"])
    device = resolve(values["device"], values["gpu_id"])
    if values["cuda_graphs"] and device.kind != "gpu":
        raise UsageError("--cuda-graphs needs an NVIDIA GPU (--device gpu)")
    entry = scenario(values["scenario"])
    serving = entry.serves
    if values.get("slo_p99") is not None and not entry.bound:
        raise UsageError(f"--slo-p99 applies to --scenario server, not {values['scenario']}")
    if serving and values["tune"] == "on":
        raise UsageError(f"--tune applies to the inference scenario: {values['scenario']} searches its own serving "
                         "configurations (concurrency, batching delay)")
    check_training(values)
    check_executor(values)
    if values.get("time_budget") and not entry.closed_loop:
        raise UsageError(f"--time-budget applies to the inference scenario: {values['scenario']}'s cells take as long "
                         "as their own steps need (--quick shortens them)")
    tune = entry.tunes and (values["tune"] == "on" or (values["tune"] == "auto" and "best" in values["frameworks"]))
    from ..execution.childenv import env_digest

    options = RunnerOptions(**{f.name: values[f.name] for f in dataclasses.fields(RunnerOptions)
                               if f.name not in ("tune", "env")}, tune=tune, env=env_digest(values["pass_env"]))
    from ..execution.childenv import thread_env

    reserved = sorted(set(values["pass_env"]) & {*thread_env(1), "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"})
    if reserved:
        raise UsageError(f"--pass-env cannot pass {', '.join(reserved)}: inferbench sets the threads (--threads) "
                         "and the device (--device, --gpu-id) itself, and records them")
    unset = [n for n in values["pass_env"] if n not in os.environ]
    if unset:  # named, and nothing to pass: said, as the record's pass_env lists what was asked
        print(f"inferbench: --pass-env: not set in this shell, nothing passed on for {', '.join(unset)}",
              file=sys.stderr)
    iterations, rounds, duration, warmup_s = (values["min_iterations"], values["rounds"], values["duration"],
                                              values["warmup_seconds"])
    processes = 1 if serving else values["processes"]
    if values.get("quick"):  # a first answer: the defaults shortened (what the user set stays, default or not)
        rounds = rounds if was_given(values, "rounds") else QUICK["rounds"]
        duration = duration if was_given(values, "duration") else QUICK["min_duration_s"]
        warmup_s = warmup_s if was_given(values, "warmup_seconds") else QUICK["warmup_seconds"]
        processes = processes if was_given(values, "processes") or serving else QUICK["processes"]
        if not was_given(values, "tune_budget"):
            values = {**values, "tune_budget": QUICK["tune_budget_s"]}
    if values.get("objective") == "p99":  # a p99 is ranked only where the samples bound it: enough of them
        iterations = max(iterations, P99_MIN_ITERATIONS)
    timing = TimingConfig(warmup_iterations=values["warmup"], warmup_seconds=warmup_s, min_duration_s=duration,
                          min_iterations=iterations, rounds=rounds)
    cache_dir = str(Path(values["cache_dir"] or artifact_cache.default_cache_dir()).resolve())
    config = RunConfig(weights=describe_weights(str(values["weights"])), seed=values["seed"], device=device,
                       threads=values["threads"] or default_threads(), timing=timing, options=options,
                       cache_dir=cache_dir, timeout_s=values["timeout"], scenario=values["scenario"],
                       pass_env=tuple(values["pass_env"]), model_files=model_files, log_to=tuple(values["log_to"]),
                       sequential=values["sequential"], max_other_load=values["max_other_load"] / 100.0,
                       allow_busy=values["allow_busy"],
                       tune_budget_s=values["tune_budget"], processes=processes,
                       quick=bool(values.get("quick")), slo_p99_ms=values.get("slo_p99") or (
                           DEFAULT_SLO_P99_MS if entry.bound else None),
                       executor=values["executor"], ray_address=values.get("ray_address"),
                       machines=tuple(values["machines"]))
    left: dict[str, dict[str, str]] = {}  # framework -> model -> why 'all' left it out
    explicit = not set(values["frameworks"]) & {"all", "best"}
    plan: list[tuple[Any, Any, list[tuple[Framework, list[str]]]]] = []  # (model, resolutions, frameworks)
    for spec in models:
        res_list = dict.fromkeys(spec.resolution(None if r == "default" else spec.smallest if r == "min" else int(r))
                                 for r in values["resolutions"])
        have = exported(config, spec, res_list)
        frameworks, left_out = choose(values["frameworks"], device.kind, spec, options, have, config.scenario,
                                      lenient=len(models) > 1)
        for k, why in left_out.items():
            left.setdefault(k, {})[spec.name] = why
        plan.append((spec, res_list, [(fw, precisions_of(fw, values["precisions"], explicit)) for fw in frameworks]))
    for key in values["frameworks"]:  # named explicitly and runnable on none of several models: as for one model
        if key not in SETS and len(left.get(key, {})) == len(models) > 1:
            raise UsageError(f"{key}: {next(iter(left[key].values()))}")
    skipped = {k: next(iter(by.values())) if len(by) == 1 or len(set(by.values())) == 1 and len(by) == len(models)
               else f"not for {len(by)} of {len(models)} models: {', '.join(by)} (e.g. {next(iter(by.values()))})"
               for k, by in left.items()}
    # the grid's size by arithmetic, before a cell is made: a 1.7-million-cell grid is refused at once
    size = sum(len(res) * len(values["batch_sizes"]) * sum(len(p) for _, p in fws) for _, res, fws in plan)
    if not size:
        why = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no framework chosen"
        raise UsageError(f"nothing can run here ({why})")
    if size > MAX_CELLS and not values["yes"]:
        per_cell = timing.min_duration_s + timing.warmup_seconds + 10.0  # + loading, parity, first call
        raise UsageError(f"this grid has {size:,} cells (more than {MAX_CELLS}), about "
                         f"{size * per_cell / 3600:,.0f} h at {per_cell:.0f} s per cell; pass --yes to run it")
    cells = [CellKey(spec.name, res, bs, fw.key, prec, config.scenario, options.for_framework(fw))
             for spec, res_list, fws in plan for res in res_list for bs in values["batch_sizes"]
             for fw, precs in fws for prec in precs]
    notes: tuple[str, ...] = ()
    if values.get("time_budget"):  # what fits: rounds shortened, then the costliest frameworks left out
        from ..execution.budget import fit, to_export

        fitted = fit(config, list(dict.fromkeys(cells)), values["time_budget"], to_export(config, cells))
        config, cells, notes = fitted.config, list(fitted.cells), fitted.lines
    check_memory(cells)
    return Built(config, tuple(dict.fromkeys(cells)), skipped, notes)


def check_executor(values: dict[str, Any]) -> None:
    """--executor ray's options only with it, a well-formed address, Ray installed: one line each."""
    import importlib.util

    if values["executor"] != "ray":
        extra = [flag for name, flag in (("ray_address", "--ray-address"), ("machines", "--machines"))
                 if values.get(name)]
        if extra:
            raise UsageError(f"{', '.join(extra)} applies to --executor ray")
        return
    if importlib.util.find_spec("ray") is None:
        raise UsageError('--executor ray needs Ray: pip install -e ".[ray]"')
    if values.get("ray_address"):
        from ..execution.distributed import check_address

        check_address(str(values["ray_address"]))
    import re

    for name in values.get("machines") or ():  # each machine's records go to a folder of that name
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", str(name)):
            raise UsageError(f"--machines: {name!r} is not a machine name (letters, digits, '.', '_', '-'; it names "
                             "the folder of that machine's records)")


#: The training scenario's own options (refused in the others).
TRAIN_OPTIONS = ("optimizer", "bn_mode", "fused_bn", "channels_first")


def check_training(values: dict[str, Any]) -> None:
    """The training scenario's options where they apply, and the inference options it has no use for: one line."""
    given = [f"{BY_NAME[k].flags[0]}" for k in TRAIN_OPTIONS if values.get(k) != BY_NAME[k].default]
    if not scenario(values["scenario"]).trains:
        if given:
            raise UsageError(f"{', '.join(given)} applies to --scenario train, not {values['scenario']}")
        return
    if values["tune"] == "on":
        raise UsageError("--tune applies to the inference scenario: training has no tuning grid yet")
    inference_only = [flag for name, flag in (("include_transfer", "--include-transfer"),
                                              ("cuda_graphs", "--cuda-graphs")) if values.get(name)]
    if inference_only:
        raise UsageError(f"{', '.join(inference_only)} applies to inference, not to --scenario train")
    if [p for p in values["precisions"] if p != "fp32"]:
        raise UsageError("--scenario train runs in fp32 here: mixed-precision training is not measured yet")
    if values["fused_bn"] and values["keras_backend"] != "tensorflow":
        raise UsageError("--fused-batch-norm is TensorFlow's kernel: it needs --keras-backend tensorflow")


def open_files(values: dict[str, Any]) -> list[str | ModelFile]:
    """``--model`` values: registered names as they are, model files opened, checked and registered."""
    from ..registry.models import is_model_file, open_model_file

    names = expand_patterns(values["models"])
    files: list[str | ModelFile] = list(names)
    if not any(is_model_file(m) for m in names):
        if values["input_shape"]:
            raise UsageError("--input-shape applies to a model file (--model PATH) only")
        return files
    if str(values["weights"]) != "random":
        raise UsageError("--weights applies to registered models; a model file brings its own weights")
    res = [r for r in values["resolutions"] if r not in ("default", "min")]
    if len(res) > 1:
        raise UsageError("a model file runs at one resolution: give one --resolution (or --input-shape)")
    for i, m in enumerate(names):
        if is_model_file(m):
            files[i] = open_model_file(m, values["input_shape"], res[0] if res else None)
            register(files[i])
            if files[i].batch_size is not None and set(values["batch_sizes"]) != {files[i].batch_size}:
                raise UsageError(f"{m} has its batch size fixed to {files[i].batch_size}: pass --batch-size "
                                 f"{files[i].batch_size} (or export it with a dynamic batch dimension)")
    return files


def expand_patterns(models: list[str]) -> list[str]:
    """``--model`` values with shell-style patterns (``efficientnet_b*``, ``*``) replaced by the registered models
    they match, in registry order; a pattern that matches none is bad input."""
    from ..registry.models import MODELS, list_models

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


def check_memory(cells: tuple[CellKey, ...] | list[CellKey]) -> None:
    """The input batch alone must fit in a quarter of the machine's memory, with room for the framework."""
    from ..base.machine import memory_total_gb

    memory_gb = memory_total_gb() or math.inf
    for cell in cells:
        batch_gb = cell.batch_size * cell.resolution ** 2 * 3 * 4 / 2**30
        if batch_gb > memory_gb / 4:
            raise UsageError(f"batch {cell.batch_size} at {cell.resolution} px is {batch_gb:.1f} GB of input alone; "
                             f"this machine has {memory_gb:.0f} GB")


def check_ranges(plan: Plan) -> None:
    """A saved plan's numbers through the same range rules as the flags (a hand edit cannot bypass them)."""
    c, t = plan.config, plan.config.timing
    numbers = [("duration", t.min_duration_s), ("warmup_seconds", t.warmup_seconds), ("warmup", t.warmup_iterations),
               ("min_iterations", t.min_iterations), ("rounds", t.rounds), ("seed", c.seed), ("threads", c.threads),
               ("timeout", c.timeout_s)]
    numbers += [(name, value) for cell in plan.cells
                for name, value in (("batch_sizes", cell.batch_size), ("resolutions", cell.resolution))]
    for name, value in numbers:
        if value is not None:
            BY_NAME[name].check(value if isinstance(value, int) else repr(float(value)), "plan")
    check_memory(plan.cells)


def precisions_of(fw: Framework, requested: list[str], explicit: bool) -> list[str]:
    """The precisions a framework runs at: those of ``requested`` it takes, else its own. A framework
    named explicitly must take at least one of them."""
    taken = [p for p in requested if fw.takes(p)]
    if taken:
        return taken
    if requested and explicit:
        fw.precision_for(requested[0])  # raises the one-line explanation
    return [fw.precision]




def objective_for(values: dict[str, Any]) -> str:
    """The objective of a run: as given, else its scenario's own (server: the QPS within the bound)."""
    if was_given(values, "objective") and values.get("objective"):
        return str(values["objective"])
    return scenario(values.get("scenario")).objective
