"""Every user-facing setting, declared once beside the typed chain (:mod:`inferbench.spec`): its flags, value
parser, default, range and help (:data:`OPTIONS`), the value parsers themselves, and which options a user gave
(:func:`with_defaults`, :func:`was_given`: a value equal to its default still counts as given). The command lines
(:mod:`inferbench.cli.options`) and sweep config files read the same declarations; the plan
(:mod:`inferbench.execution.plan`) turns the checked values into a run's configuration and cells.

Why one file: it is the one table of options (one declaration each) with the parsers they name; splitting it
would make two places to look for an option.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base.errors import UsageError, shorten
from .base.size import hw, parse_size
from .registry.images import MAX_IMAGES as MAX_EVAL_IMAGES
from .registry.scenarios import SCENARIOS
from .registry.tasks import AUTO, TASKS
from .spec import (
    AGREEMENT_INPUTS,
    AGREEMENT_MIN,
    BN_MODES,
    CALIB_IMAGES,
    EVAL_IMAGES,
    EXECUTORS,
    KERAS_BACKENDS,
    MAX_CALIB_IMAGES,
    OPTIMIZERS,
    POSTPROCESS,
    PRECISIONS,
    QUICK,
    SLURM_CLUSTERS,
    TimingConfig,
)

DAY_S = 86_400.0
MAX_SLO_MS = 60_000.0  # --slo-p99: a minute (no image is served slower; --slo-p99 86400000 "served" 48,401 QPS)
MAX_RESOLUTION = 4096
MAX_BATCH = 65_536
#: A grid larger than this many cells needs --yes (its size and estimated time are said first).
MAX_CELLS = 2_000


#: The commands --executor slurm's options belong to.
SLURM_COMMANDS = ("run", "sweep", "zoo")


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


def agreement_count(text: str) -> int:
    """0 (not counted) or at least :data:`~inferbench.spec.AGREEMENT_MIN`: fewer inputs decide a gate no better than
    the 16 reference inputs do."""
    value = non_negative_int(text)
    if 0 < value < AGREEMENT_MIN:
        raise argparse.ArgumentTypeError(f"must be 0 (not counted) or at least {AGREEMENT_MIN}, got {value}")
    return value


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


#: sbatch options inferbench sets itself (each from its own flag or from the plan): never through --sbatch.
OWN_SBATCH = {"job_name": "the job's name is inferbench's, unique per sweep and group",
              "time": "--job-time-limit", "partition": "--partition", "account": "--account",
              "nodelist": "--machines", "exclusive": "each job holds its node whole",
              "gpus_per_node": "--gpus-per-job", "output": "the job's log", "error": "the job's log",
              "gpus": "--gpus-per-job", "nodes": "a group runs on one node", "ntasks": "one task a job",
              "ntasks_per_node": "one task a job", "array": "one job a group",
              "signal": "a job ends at once on SIGTERM, its cells measured again on --resume"}


def sbatch_options(text: str) -> list[str]:
    """--sbatch's list: further sbatch options as KEY=VALUE (submitit's names: qos=high, constraint=h100,
    mem=64G), never one inferbench sets itself."""
    found = names(text)
    for item in found:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*", key) or not value.strip():
            raise argparse.ArgumentTypeError(shorten(f"{item!r} is not KEY=VALUE (e.g. qos=high,mem=64G)"))
        if key in OWN_SBATCH:
            raise argparse.ArgumentTypeError(f"{key}: set by inferbench ({OWN_SBATCH[key]})")
    return found


def env_names(text: str) -> list[str]:
    """--pass-env's list: names of shell variables, never NAME=VALUE (a value is set in the shell, then named)."""
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
    """Sizes: pixels a side (square), HxW (height x width), 'default' or 'min'."""
    out: list[int | str] = []
    for item in _items(text):
        if item in ("default", "min"):
            out.append(item)
            continue
        try:
            size = parse_size(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"resolution must be pixels a side (224), height x width (384x640), "
                                             f"'default' or 'min', got {item!r}") from None
        if isinstance(size, str) and max(hw(size)) > MAX_RESOLUTION:
            raise argparse.ArgumentTypeError(f"each side must be at most {MAX_RESOLUTION}, got {item!r}")
        out.append(size)
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


#: The longest --time-budget (a month): past it, the bound bounds nothing.
MAX_BUDGET_S = 30 * 86400.0


def parse_duration(text: str) -> float:
    """'90', '90s', '20m', '1h30m', '1.5h' -> seconds (a positive number); a number without its unit only alone
    ('1h30' is refused: minutes or seconds?)."""
    s = str(text).strip().lower().replace(" ", "")
    s = s + "s" if re.fullmatch(r"\d+(?:\.\d+)?", s) else s
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?", s)
    if not s or parts is None or not any(parts.groups()):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 90s, 20m or 1h30m)")
    h, m, sec = (float(g or 0) for g in parts.groups())
    seconds = h * 3600 + m * 60 + sec
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:20] + "...")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 s, got {shown}")
    if not seconds <= MAX_BUDGET_S:  # 400 digits read as inf: no budget bounds that
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BUDGET_S // 86400:.0f} days, got {shown}")
    return seconds


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
           "onnxrt, openvino, torch-inductor on a CPU, each tuned), 'all' (every framework that can run here, the "
           "naive variants too, untuned unless --tune on) or a comma list of framework keys (see --list)", ["best"],
           names, metavar="best|all|KEY[,KEY...]", commands=MEASURING, command_defaults=(("zoo", ["all"]),)),
    Option("models", ("--model", "--models"), "registered model name(s) or shell-style patterns ('efficientnet_b*', "
           "'*'; see --list), or your own model: a .keras file, a TF SavedModel folder or an .onnx file; "
           "comma-separated", ["mobilenet_v3_large"], names,
           metavar="NAME|PATH[,...]", commands=MEASURING, command_defaults=(("zoo", ["*"]),)),
    Option("input_shape", ("--input-shape",), "the input of a model file, where inferbench cannot read it from the "
           "file (a SavedModel, a dynamic size): HxWx3 (NHWC) or 3xHxW (NCHW)", None,
           metavar="HxWxC|CxHxW"),
    Option("task", ("--task",), "what a model file's outputs mean: classification (one array of class scores), "
           "detection (a raw YOLOv8-layout head, [4 + classes, anchors]: decoded and suppressed by the same code for "
           "every runtime), segmentation (class scores a pixel, [classes, height, width]), raw (numbers of no known "
           "meaning, compared by name) or auto (a classifier where there is one output of one dimension that is not "
           "1; a detector where one head holds as many anchors as YOLOv8's strides 8, 16 and 32 give the image, or "
           "SSD's heads; a segmenter where class scores come at the image's own size; else raw); docs/models.md",
           "auto", choices=(AUTO, *TASKS)),
    Option("resolutions", ("--resolution", "--resolutions"), "input size in pixels: a side (224: square) or height "
           "x width (384x640), 'default' (each model's own: 224 for most, see --list) or 'min' (the smallest each "
           "model takes: a quick check)", ["default"], resolutions, metavar="PX|HxW[,...]",
           maximum=MAX_RESOLUTION, commands=MEASURING),
    Option("batch_sizes", ("--batch-size", "--batch-sizes"), "batch size(s), comma-separated", [1], positive_ints,
           metavar="N[,N...]", maximum=MAX_BATCH, commands=MEASURING),
    Option("precisions", ("--precision", "--precisions"), "fp32, fp16, bf16, tf32 or int8 (comma list in a sweep "
           "or zoo): frameworks that take it run at it (torch, torch-native, torch-inductor, openvino; int8: onnxrt, "
           "openvino, torch-inductor, calibrated with --calib-dir), the others at their own; on a CPU only where it "
           "has that precision's instructions (BF16: AVX512_BF16 or AMX; INT8: VNNI or AMX)", [], precisions,
           metavar="P[,P...]", commands=MEASURING),
    Option("reduced_only", ("--reduced-only",), "with a reduced --precision, measure only it (default: each runtime "
           "that takes it also runs its FP32 in the same rounds, and the answer gives each reduced cell's gain over "
           "its own FP32 and what it costs)", False, switch=True, commands=MEASURING),
    Option("agreement_inputs", ("--agreement-inputs",), "reduced-precision cells (fp16, bf16, tf32) are also judged "
           "by their top-1 and top-5 agreement with FP32 over this many seeded image-like inputs, with intervals (a "
           "detector's or segmenter's: its boxes or masks after the post-processing; 0: not counted, the 16 "
           "reference inputs judge alone)", AGREEMENT_INPUTS, agreement_count, metavar="N",
           maximum=100_000, commands=MEASURING),
    Option("eval_dir", ("--eval-dir",), "your labelled images, for each cell's top-1 / top-5 accuracy with intervals "
           "and its difference from FP32's; a reduced precision then passes at 99%% of FP32's top-1 (MLPerf's rule): "
           "a folder per class (torchvision's ImageFolder: classes numbered in sorted folder order, or by the folders' "
           "names where all are numbers) or a labels file ('path label' per line; labels.txt or labels.csv in the "
           "folder, or the file itself); for --task detection a COCO instances file (instances.json in the folder, or "
           "the file itself: COCO mAP, the same 99%% rule)", None, path_value, metavar="DIR|FILE",
           commands=("run", "sweep")),
    Option("eval_images", ("--eval-images",), "at most this many of --eval-dir's images (a seeded sample of a larger "
           "set)", EVAL_IMAGES, positive_int, metavar="N", maximum=MAX_EVAL_IMAGES, commands=("run", "sweep")),
    Option("calib_dir", ("--calib-dir",), "images to calibrate --precision int8 on (any folder of images, read as "
           "--eval-dir's; labels not read); without it, seeded image-like inputs: a timing configuration, not an "
           "accuracy claim", None, path_value, metavar="DIR", commands=MEASURING),
    Option("calib_images", ("--calib-images",), "at most this many of --calib-dir's images (a seeded sample of a "
           "larger folder), or this many seeded inputs (300: ONNX Runtime's and NNCF's own default)", CALIB_IMAGES,
           positive_int, metavar="N", maximum=MAX_CALIB_IMAGES, commands=MEASURING),
    Option("follow_links", ("--follow-links",), "read the images and labels files of --eval-dir and --calib-dir "
           "that are links leading out of their folder (default: such a link is refused: a folder's files are read as "
           "data, and only its own)", False, switch=True, commands=MEASURING),
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
           "interval includes it (default: 3 where --rounds gives each at least two, else 2; 1: not measured, this "
           "machine's spread from earlier runs or an assumed 1.5%% instead)", None, positive_int, metavar="N",
           maximum=16, commands=MEASURING, command_defaults=(("zoo", 1),)),
    Option("sequential", ("--sequential",), "measure each cell on its own, one framework loaded at a time, instead of "
           "a group's cells side by side in interleaved rounds: for models too big to load every framework at once "
           "(comparisons between cells are then unpaired, their intervals wider; the zoo always runs so)", False,
           switch=True),
    Option("max_other_load", ("--max-other-load",), "a cell is not valid when other work (other processes, and on "
           "a virtual machine the hypervisor's steal) took more than PCT percent of the cores the run uses during one "
           "of its blocks", 25.0, non_negative_float, metavar="PCT", maximum=100.0, commands=MEASURING),
    Option("target_ci", ("--target-ci",), "rounds are added (at most 4x --rounds) until every ratio the answer quotes, "
           "each cell against its group's fastest, paired within rounds, is known within +-PCT percent (95%%; a "
           "group of one cell: its own median); said when the cap stops them first", None, positive_float,
           metavar="PCT", maximum=50.0, commands=("run", "sweep")),
    Option("ab_python", ("--ab-python",), "an A/B in one run: every cell measured a second time by this "
           "interpreter's installed packages (another virtual environment: a runtime's next release, a patched build), "
           "as a '+ab-<digest>' twin in the same interleaved rounds; inferbench compare RUN then judges each twin "
           "against its cell, paired within rounds (nothing between invocations to estimate)", None, path_value,
           metavar="PYTHON", commands=("run", "sweep", "history")),
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
           "the window), as the scripts inferbench replaces did; serving: the samples stay on the host, each batch "
           "gathered and copied to the device inside the test", False, switch=True),
    Option("postprocess", ("--postprocess",), "where a detector's or segmenter's post-processing is timed: outside "
           "the call (the default: its own phase, its ms beside the model's) or inside it as well (the outputs "
           "copied to the host and post-processed in every timed call, the cell named '+post-inside': the latency "
           "a caller of the whole pipeline meets)", "outside", choices=POSTPROCESS),
    Option("channels_last", ("--channels-last",), "torch-native: channels-last memory format", False, switch=True),
    Option("torch_compile", ("--torch-compile",), "torch, torch-native: torch.compile the module", False,
           switch=True),
    Option("cuda_graphs", ("--cuda-graphs",), "torch, torch-native on a GPU: replay a CUDA graph", False,
           switch=True),
    Option("keras_backend", ("--keras-backend",), "backend for keras-eager, keras and kerasxla", "tensorflow",
           choices=KERAS_BACKENDS, commands=("run", "sweep", "selftest")),
    Option("executor", ("--executor",), "where the cells run: local (this machine, one group after another), "
           "ray (a Ray cluster: each group a task on a node reserved whole; pip install -e \".[ray]\") or slurm "
           "(each group a Slurm job on a node held whole, through submitit; pip install -e \".[slurm]\"); "
           "docs/distributed.md", "local", choices=EXECUTORS, commands=("run", "sweep", "zoo")),
    Option("ray_address", ("--ray-address",), "--executor ray: the cluster's head as HOST:PORT (default: a cluster "
           "of this machine alone, started for the sweep)", None, metavar="HOST:PORT", commands=("sweep", "zoo")),
    Option("machines", ("--machines",), "--executor ray: run every cell on each of these machines (nodes started with "
           "--resources '{\"machine:NAME\": 1, \"inferbench\": 1}'), each machine's records in a folder of its own, "
           "for a cross-machine comparison; --executor slurm: Slurm node names (each job's --nodelist)", [], names,
           metavar="NAME[,NAME...]", commands=("sweep", "zoo")),
    Option("partition", ("--partition",), "--executor slurm: the partition each job is submitted to (default: the "
           "cluster's default partition)", None, metavar="NAME", commands=SLURM_COMMANDS),
    Option("account", ("--account",), "--executor slurm: the account each job is charged to", None, metavar="NAME",
           commands=SLURM_COMMANDS),
    Option("gpus_per_job", ("--gpus-per-job",), "--executor slurm: the GPUs each job asks for (default: 1 for "
           "--device gpu, 0 on the CPU; the cells measure one of them)", None, non_negative_int, metavar="N",
           commands=SLURM_COMMANDS),
    Option("job_time_limit", ("--job-time-limit",), "--executor slurm: each job's time limit in minutes (default: "
           "its group's estimate twice over plus 5 minutes, said as each job is submitted)", None, positive_int,
           metavar="MIN", maximum=7 * 24 * 60.0, commands=SLURM_COMMANDS),
    Option("sbatch", ("--sbatch",), "--executor slurm: further sbatch options as KEY=VALUE (submitit's names: "
           "qos=high,constraint=h100,mem=64G)", [], sbatch_options, metavar="KEY=VALUE[,...]",
           commands=SLURM_COMMANDS),
    Option("slurm_cluster", ("--slurm-cluster",), "--executor slurm: submit to the Slurm cluster (sbatch), or run each "
           "job as a process of this machine through submitit's local executor (a set-up checked without a "
           "cluster)", "slurm", choices=SLURM_CLUSTERS, commands=SLURM_COMMANDS),
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
    Option("history", ("--history",), "keep every record in a history store (inferbench history show): a DuckDB "
           "file, a postgresql:// URL, or off (default: history.duckdb in the results' root: inferbench-results/, or "
           "--output-dir's folder when given)", None, path_value, metavar="PATH|URL|off",
           commands=("run", "sweep", "zoo", "history", "report")),
    Option("objective", ("--objective",), "what the recommendation optimises: p50 (median latency), p90, p99 (tail "
           "latency), throughput, or energy (joules per inference, where a sensor exists); the serving scenarios' "
           "own by default: server and offline throughput, single-stream p90, multi-stream p99", "p50",
           choices=("p50", "p90", "p99", "throughput", "energy"), commands=("run", "sweep", "report"), in_file=False),
    Option("json", ("--json",), "print one JSON document on standard output (the answer, the cells, the files; "
           "its JSON Schema: inferbench/records/schema/output.schema.json) and everything meant for people on "
           "standard error", False, switch=True, commands=("run", "compare", "report", "list", "history"),
           in_file=False),
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
           "each said), and the run keeps to it in every scenario (a group's rounds or LoadGen tests cut, never below "
           "3 nor two a worker process; groups that would overrun left unmeasured, a sweep's for --resume)", None,
           parse_duration, metavar="DURATION",
           commands=("run", "sweep", "selftest"), in_file=False, command_defaults=(("selftest", 600.0),)),
    Option("quick", ("--quick",), f"a first answer: fewer, shorter rounds ({QUICK['rounds']} of "
           f"{QUICK['min_duration_s'] / QUICK['rounds']:g} s) in {QUICK['processes']} worker process a cell, "
           "no tuning (each runtime at its own default setting; --tune on tunes anyway), and LoadGen's tests "
           "shortened; the record says it was quick",
           False, switch=True, commands=("run", "sweep", "history")),
    Option("output_dir", ("--output-dir",), "results go to OUTPUT_DIR/<run id>/ (the default is git-ignored: "
           "benchmark_results/ holds the project's own committed runs)", "inferbench-results",
           parse=path_value, metavar="DIR", in_file=False, commands=("run", "sweep", "selftest", "zoo", "history"),
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
#: How --help groups the options (each in one group; tests/test_cli.py checks), in the order a newcomer needs them.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("what to measure", ("frameworks", "models", "input_shape", "task", "resolutions", "batch_sizes", "precisions",
                         "reduced_only", "weights", "seed", "scenario", "objective", "list")),
    ("how long", ("quick", "time_budget", "duration", "min_iterations", "warmup", "warmup_seconds", "rounds",
                  "processes", "target_ci", "sequential", "timeout")),
    ("is it right: outputs checked beyond the parity gate", ("agreement_inputs", "eval_dir", "eval_images",
                                                             "calib_dir", "calib_images", "follow_links")),
    ("is it valid: the machine during the rounds", ("max_other_load", "allow_busy", "require_valid")),
    ("device and environment", ("device", "gpu_id", "threads", "pass_env", "ab_python")),
    ("runtime settings", ("tune", "tune_budget", "include_transfer", "postprocess", "channels_last", "torch_compile",
                          "cuda_graphs", "keras_backend")),
    ("serving and training scenarios", ("slo_p99", "optimizer", "bn_mode", "fused_bn", "channels_first")),
    ("across machines", ("executor", "ray_address", "machines", "partition", "account", "gpus_per_job",
                         "job_time_limit", "sbatch", "slurm_cluster")),
    ("output", ("output_dir", "cache_dir", "trust_cache", "name", "config", "resume", "log_to", "history", "json",
                "quiet", "verbose", "yes")),
)


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

