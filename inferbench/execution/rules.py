"""The rules across options a plan must keep (one line each for what cannot hold): the scenario's, the executor's,
training's, INT8's and its calibration, an A/B's second install, --target-ci against the processes, memory; and what
a plan says up front of --eval-dir and INT8."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
from typing import Any

from ..base import machine
from ..base.device import Device
from ..base.errors import UsageError
from ..base.size import pixels
from ..execution.distributed import check_address
from ..measure.stats import process_floor
from ..options import BY_NAME, was_given
from ..registry.artifacts import unreachable
from ..registry.frameworks import get_framework
from ..registry.images import calibration
from ..registry.models import get_model
from ..registry.scenarios import scenario
from ..spec import CellKey
from .ab import differs, install_of
from .childenv import thread_env
from .environment import package_versions


def check_rules(values: dict[str, Any], entry: Any, device: Device) -> None:
    """The rules across options (one line each for what cannot hold)."""
    if values["cuda_graphs"] and device.kind != "gpu":
        raise UsageError("--cuda-graphs needs an NVIDIA GPU (--device gpu)")
    if values.get("slo_p99") is not None and not entry.bound:
        raise UsageError(f"--slo-p99 applies to --scenario server, not {values['scenario']}")
    if entry.serves and values["tune"] == "on":
        raise UsageError(f"--tune applies to the inference scenario: {values['scenario']} searches its own serving "
                         "configurations (concurrency, batching delay)")
    check_training(values)
    check_executor(values)
    if values.get("eval_dir") and entry.trains:
        raise UsageError(f"--eval-dir measures a model's accuracy in inference, not in {values['scenario']}")
    if values.get("target_ci") and not entry.closed_loop:
        raise UsageError(f"--target-ci applies to the inference scenario: {values['scenario']}'s answer is not a "
                         "ratio of rounds (--quick shortens its steps)")
    if values.get("target_ci") and values.get("time_budget"):
        raise UsageError("--target-ci adds rounds and --time-budget takes them away: give one (a group that added "
                         "rounds would leave the later groups unmeasured)")
    reserved = sorted(set(values["pass_env"]) & {*thread_env(1), "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"})
    if reserved:
        raise UsageError(f"--pass-env cannot pass {', '.join(reserved)}: inferbench sets the threads (--threads) "
                         "and the device (--device, --gpu-id) itself, and records them")
    unset = [n for n in values["pass_env"] if n not in os.environ]
    if unset:  # named, and nothing to pass: said, as the record's pass_env lists what was asked
        print(f"inferbench: --pass-env: not set in this shell, nothing passed on for {', '.join(unset)}",
              file=sys.stderr)


def check_target(target_pct: float | None, processes: int) -> None:
    """--target-ci no number of rounds can reach with ``processes`` worker processes a cell: below the part of a
    paired interval for what differs between them (at its assumed size until measured), refused with what would
    reach it."""
    if not target_pct:
        return
    floor = process_floor(processes)
    if target_pct / 100 <= floor:
        more = next((p for p in range(processes + 1, 17) if process_floor(p) < target_pct / 100), None)
        raise UsageError(f"--target-ci {target_pct:g}: with {processes} worker process(es) a cell, a "
                         f"paired interval's part for what differs between processes is +-{floor:.1%} (1.5% a "
                         "process, assumed until measured), and more rounds do not narrow it: "
                         + (f"--processes {more}, or " if more else "") + f"a target above {floor:.1%}")


def eval_notes(eval_set: Any, weights: str, models: list[Any]) -> tuple[str, ...]:
    """What the plan says of --eval-dir up front: the images each cell's accuracy is measured on, and where the weights
    are seeded, that it is chance."""
    if eval_set is None:
        return ()
    seeded = [m.name for m in models if m.source is None] if weights == "random" else []
    return (f"accuracy: every cell on {eval_set.describe()}",) + ((
        f"accuracy: {', '.join(seeded)} with seeded random weights classifies real images by chance: give --weights "
        "imagenet or your trained model for an accuracy that means something",) if seeded else ())


def check_int8(values: dict[str, Any], cells: list[CellKey], device: str) -> Any:
    """The calibration of the run's INT8 cells (--calib-dir's images, else seeded inputs), None without any; one line
    for what cannot hold: --calib-dir without INT8 cells, INT8 on a device its runtime quantises for no other, INT8
    judged by nothing (no labelled images and --agreement-inputs 0), a model its INT8 cannot be made from."""
    int8 = [c for c in cells if c.precision == "int8"]
    if not int8:
        if values.get("calib_dir") or was_given(values, "calib_images"):
            raise UsageError("--calib-dir and --calib-images apply to INT8 cells (--precision int8, tensorrt-int8): "
                             "what their quantisation is calibrated on")
        return None
    for c in int8:
        fw = get_framework(c.framework)
        if device not in fw.int8_devices:
            raise UsageError(f"{c.framework} runs INT8 on the {' or '.join(fw.int8_devices).upper()} only (its "
                             f"{device.upper()} path would time simulated quantisation)"
                             + ("; on a GPU: tensorrt-int8" if device == "gpu" else ""))
        why = unreachable(fw.artifact_for(get_model(c.model), c.scenario, "int8"), get_model(c.model))
        if why:
            raise UsageError(f"{c.framework} --precision int8 on {c.model}: its INT8 model {why}")
    if not values.get("eval_dir") and not values["agreement_inputs"]:
        raise UsageError("--precision int8 without --eval-dir is judged by its agreement with FP32 over seeded "
                         "inputs: --agreement-inputs 0 would leave it judged by nothing")

    return calibration(values.get("calib_dir"), values["calib_images"], values["seed"], values["follow_links"])


def int8_notes(calibration: Any, eval_set: Any) -> tuple[str, ...]:
    """What the plan says of INT8 cells up front: what they are calibrated on, and without labelled images that their
    accuracy is not judged (they are ranked apart, as speed only)."""
    if calibration is None:
        return ()
    return (f"int8: calibrated on {calibration.describe()}",) + (() if eval_set is not None else (
        "int8: without --eval-dir its accuracy is not judged: INT8 cells are measured and ranked apart, as speed "
        "only (their agreement with FP32 over seeded inputs is reported, never a gate)",))


def check_ab(values: dict[str, Any], entry: Any) -> dict[str, Any]:
    """--ab-python where its twins can be paired with their cells (side by side in one group's rounds, on this
    machine), and B's install as its records will say it: one line each where not."""
    why = (f"--executor {values['executor']} runs each group on another machine, where this interpreter's path "
           "means nothing" if values["executor"] != "local" else "--sequential measures each cell on its own, unpaired"
           if values["sequential"] else f"{values['scenario']} is not measured in rounds a twin could be paired in"
           if not entry.closed_loop and not entry.trains else None)
    if why:
        raise UsageError(f"--ab-python pairs each cell with its twin within rounds: not here ({why})")
    install = install_of(str(values["ab_python"]))

    changed = differs(package_versions(), install["packages"])
    print(f"inferbench: A/B in one run: B is {install['executable']} (Python {install['python']}; " + (
        f"differs in {changed})" if changed else "the same package versions as this install: an A/A unless the "
        "interpreter or its environment differs)"), file=sys.stderr)
    return install


#: Each executor's own options (refused with another), besides --machines (Ray's and Slurm's).
EXECUTOR_OPTIONS = {"ray": ("ray_address",),
                    "slurm": ("partition", "account", "gpus_per_job", "job_time_limit", "sbatch", "slurm_cluster")}


def check_executor(values: dict[str, Any]) -> None:
    """Each executor's options only with it, a well-formed address, Ray or submitit installed: one line each."""
    executor = values["executor"]
    extra = sorted({BY_NAME[name].flags[0] for other, own in EXECUTOR_OPTIONS.items() if other != executor
                    for name in own if values.get(name) not in (None, [], (), BY_NAME[name].default)}
                   | ({"--machines"} if executor == "local" and values.get("machines") else set()))
    if extra:
        owner = {BY_NAME[n].flags[0]: o for o, own in EXECUTOR_OPTIONS.items() for n in own} | {"--machines": "ray"}
        raise UsageError(f"{', '.join(extra)} applies to --executor {owner[extra[0]]}"
                         + (" (or slurm)" if extra[0] == "--machines" else ""))
    if executor == "local":
        return
    extra_name, module = ("ray", "ray") if executor == "ray" else ("slurm", "submitit")
    if importlib.util.find_spec(module) is None:
        raise UsageError(f'--executor {executor} needs {module}: pip install -e ".[{extra_name}]"')
    if values.get("ray_address"):
        check_address(str(values["ray_address"]))

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


def check_memory(cells: tuple[CellKey, ...] | list[CellKey]) -> None:
    """The input batch alone must fit in a quarter of the machine's memory, with room for the framework."""
    memory_gb = machine.memory_total_gb() or math.inf
    for cell in cells:
        batch_gb = cell.batch_size * pixels(cell.resolution) * 3 * 4 / 2**30
        if batch_gb > memory_gb / 4:
            raise UsageError(f"batch {cell.batch_size} at {cell.resolution} px is {batch_gb:.1f} GB of input alone; "
                             f"this machine has {memory_gb:.0f} GB")
