"""Framework keys, as users type them, with every per-framework fact in one registry entry.

Adding a framework = one runner module + one entry here (+ an extra in ``pyproject.toml`` if it
needs a package). Everything else reads the entry: which artifact it loads, which packages it needs
(checked without importing them, recorded with their versions), which extra installs them, which
runner options and precisions it takes, what its child process's environment gets, which models it
can run, and the display order (the order of this list). Nothing is imported until a child process
calls :func:`load_runner`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ..base.errors import UsageError, did_you_mean
from .artifacts import export_order, exporter_extra, exporter_packages, source_kind, unreachable
from .modelfiles import FILE_FORMATS
from .models import get_model
from .ports import ported_models
from .scenarios import scenario as scenario_entry
from .tasks import task as task_entry

#: Runner options every framework takes (they change the timed region, not the framework).
COMMON_OPTIONS = ("include_transfer", "postprocess", "env", "ab")


@dataclass(frozen=True)
class Framework:
    key: str
    runner: str  # "module:Class", imported only in the child that runs it
    artifact: str  # exporter kind whose artifact the runner loads ("none": builds its own model)
    packages: tuple[str, ...]  # import names that must be installed
    distributions: tuple[str, ...]  # pip distributions whose versions are recorded (any one may be present)
    extra: str  # pip extra that installs them
    description: str
    devices: tuple[str, ...] = ("cpu", "gpu")
    precision: str = "fp32"
    precisions: tuple[str, ...] = ()  # other precisions it can run with --precision (besides its own)
    same_weights: bool = True  # False: its own weights (outputs only sanity-checked, never ranked)...
    ported: bool = False  # ...unless the Keras weights are ported into it (inferbench.registry.ports) for the model
    needs_port: bool = False  # runs only models with a weight port
    options: tuple[str, ...] = ()  # runner options it takes, besides COMMON_OPTIONS
    env: tuple[tuple[str, str], ...] = ()  # child environment variable <- runner option
    needs_torchvision_twin: bool = False  # runs only models that torchvision implements
    best_on: tuple[str, ...] = ()  # devices where it is its runtime's best-known setting (the key set 'best')
    also_loads: tuple[str, ...] = ()  # artifact kinds its runner loads too, for a model file that lacks ``artifact``
    gpu_build: str | None = None  # the pip distribution of its GPU build, where the CPU build has the same import name
    trainer: str | None = None  # "module:Class" of its training runner (--scenario train); None: it does not train
    train_artifact: str = ""  # the artifact kind its trainer loads ("": the runner's own)
    int8_artifact: str = ""  # the artifact kind its INT8 cells load (--precision int8), quantised from its own
    int8_devices: tuple[str, ...] = ("cpu",)  # where its INT8 runs INT8 kernels (elsewhere: simulated, refused)
    route_of: str = ""  # the framework whose runtime it runs by another route in (another artifact); "" if none

    def __post_init__(self) -> None:
        assert bool(self.int8_artifact) == self.takes("int8"), f"{self.key}: INT8 needs its artifact"

    def takes(self, precision: str) -> bool:
        return precision == self.precision or precision in self.precisions

    def precision_for(self, requested: str | None) -> str:
        """The precision this framework runs at when the user asks for ``requested`` (None: its own)."""
        if requested is None or self.takes(requested):
            return requested or self.precision
        raise UsageError(f"{self.key} runs in {self.precision} only; --precision {requested} applies to: "
                         + ", ".join(k for k, fw in FRAMEWORKS.items() if requested in fw.precisions))

    def artifact_for(self, model: Any = None, scenario: str = "inference", precision: str = "fp32") -> str:
        """The artifact kind it loads for ``model`` (a ModelSpec) in ``scenario``: its own, or one it also loads
        that a model file can give (OpenVINO reads an ONNX file as well as a SavedModel); "none" for the Keras
        weights of a model without a port (a torchvision twin then runs its own weights); its trainer's for
        training; its INT8 model for ``precision`` int8."""
        if precision == "int8" and self.int8_artifact:
            return self.int8_artifact
        if model is not None and source_kind(model) in self.also_loads:  # the source itself, where it loads that
            return source_kind(model)
        own = (self.train_artifact or self.artifact) if scenario_entry(scenario).trains else self.artifact
        if own == "ported" and model is not None and model.name not in ported_models():
            return "none"
        return next((k for k in self.also_loads if model is not None and unreachable(own, model)
                     and not unreachable(k, model)), own)

    def cannot_train(self) -> str | None:
        """Why it cannot follow the training scenario, or None."""
        if self.trainer is None:
            trainers = ", ".join(k for k, fw in FRAMEWORKS.items() if fw.trainer)
            return f"{self.key} is run here as an inference runtime; the frameworks that train: {trainers}"
        return None

    def unsupported(self, model: Any, scenario: str = "inference") -> str | None:
        """Why this framework cannot run ``model`` (a ModelSpec) in ``scenario``, or None."""
        trains = scenario_entry(scenario).trains
        if trains and self.cannot_train():
            return self.cannot_train()
        if trains and model.source is not None and model.source.format != "keras":
            return f"training starts from a Keras model; {model.name} is {_file_format(model)}"
        if trains and not task_entry(model.task).classifier:
            return f"training steps a classifier (cross-entropy on its class scores); {model.name}'s task is " \
                f"{model.task}"
        if source_kind(model) == "pt2" and (self.needs_torchvision_twin or self.needs_port):
            return None if "pt2" in self.also_loads and not trains else \
                f"{model.name} is a PyTorch program: torch and torch-inductor run it"
        if self.needs_torchvision_twin and model.source is not None:
            return f"runs torchvision's own implementation of a registered model; {model.name} is a model file"
        if self.needs_torchvision_twin and model.torchvision_builder is None:
            return f"torchvision has no implementation of {model.name}"
        refused = dict(model.refused_by).get(self.key)
        if refused:
            return f"{model.name}: {refused}"
        kind = self.artifact_for(model, scenario)
        why = unreachable(kind, model)
        if why:
            return why
        if self.route_of and FRAMEWORKS[self.route_of].artifact_for(model, scenario) == kind:
            return f"{self.route_of} reads the same {self.artifact} for {model.name}: there is one route in"
        if self.needs_port and model.name not in ported_models():
            return f"no Keras->torchvision weight port for {model.name} (ported: {', '.join(ported_models())})"
        return None

    def verified(self, model: str) -> bool:
        """Are its outputs comparable with the reference for ``model`` (same weights: the Keras model's, ported, or
        the PyTorch program it loads itself)?"""
        return self.same_weights or (self.ported and model in ported_models()) or \
            ("pt2" in self.also_loads and source_kind(get_model(model)) == "pt2")  # the PyTorch source itself

    def runtime_packages(self, options: Any = None) -> tuple[str, ...]:
        """The packages its runner imports with these runner options: Keras on JAX or torch needs that backend,
        not TensorFlow."""
        backend = getattr(options, "keras_backend", "tensorflow") if "keras_backend" in self.options else None
        if backend in KERAS_BACKEND_PACKAGES and "keras" in self.packages:
            return ("keras", KERAS_BACKEND_PACKAGES[backend])
        return self.packages

    def child_env(self, options: Any) -> dict[str, str]:
        return {var: str(getattr(options, name)) for var, name in self.env}


def _file_format(model: Any) -> str:
    return FILE_FORMATS[model.source.format]


_TF = ("tensorflow", "keras")
#: What Keras needs besides itself on a backend other than TensorFlow (--keras-backend).
KERAS_BACKEND_PACKAGES = {"jax": "jax", "torch": "torch"}
_TRAIN = ("optimizer", "bn_mode")  # the training scenario's options every trainer takes...
_TF_TRAIN = (*_TRAIN, "fused_bn", "channels_first")  # ...and those of Keras and TensorFlow
_KERAS: dict[str, Any] = dict(options=("keras_backend", *_TF_TRAIN), env=(("KERAS_BACKEND", "keras_backend"),))
_TORCH_OPTIONS = ("torch_compile", "cuda_graphs", "tune")
_TUNE = ("tune",)  # runners with a tuning grid (Runner.tuning_grid)
_ONNX2TORCH = ("torch", "onnx2torch", "onnx", "safetensors")  # the module rebuilt from the ONNX graph + its weights

FRAMEWORKS: dict[str, Framework] = {
    fw.key: fw
    for fw in [
        Framework("keras-eager", "inferbench.runners.keras:KerasEagerRunner", "keras", _TF, _TF, "tf",
                  "Keras model called eagerly, model(x, training=False): the eager baseline; training: "
                  "compile(run_eagerly=True), train_on_batch", trainer="inferbench.runners.keras:KerasEagerTrainer",
                  **_KERAS),
        Framework("keras", "inferbench.runners.keras:KerasRunner", "keras", _TF, _TF, "tf",
                  "Keras' compiled predict step (predict_on_batch), jit_compile=False; training: its compiled train "
                  "step",
                  trainer="inferbench.runners.keras:KerasTrainer", **_KERAS),
        Framework("kerasxla", "inferbench.runners.keras:KerasXlaRunner", "keras", _TF, _TF, "tf",
                  "Keras' compiled predict step (predict_on_batch), jit_compile=True (XLA; torch.compile on torch); "
                  "training: its train step, jit_compile=True", trainer="inferbench.runners.keras:KerasXlaTrainer",
                  **_KERAS),
        Framework("jax", "inferbench.runners.jax:JaxRunner", "keras", ("keras", "jax"), ("jax", "jaxlib"), "jax",
                  "JAX: jax.jit of the Keras model's stateless call (XLA), inputs and outputs on the device, "
                  "block_until_ready (keras/kerasxla on --keras-backend jax: Keras' predict_on_batch instead)",
                  best_on=("cpu", "gpu"), options=_TUNE),
        Framework("tf", "inferbench.runners.tf:TfRunner", "savedmodel", ("tensorflow",), ("tensorflow",), "tf",
                  "TF SavedModel serving function (graph mode, no XLA); training: a tf.function GradientTape step on "
                  "the Keras model", best_on=("cpu", "gpu"), options=(*_TUNE, *_TF_TRAIN),
                  trainer="inferbench.runners.tf:TapeTrainer", train_artifact="keras"),
        Framework("tfxla", "inferbench.runners.tf:TfXlaRunner", "savedmodel", ("tensorflow",), ("tensorflow",),
                  "tf", "the same SavedModel function under tf.function(jit_compile=True) (XLA); training: the "
                  "GradientTape step, jit_compile=True", options=(*_TUNE, *_TF_TRAIN),
                  trainer="inferbench.runners.tf:TapeXlaTrainer", train_artifact="keras"),
        Framework("onnxrt", "inferbench.runners.onnxrt:OnnxRuntimeRunner", "onnx", ("onnxruntime",),
                  ("onnxruntime", "onnxruntime-gpu"), "onnxruntime",
                  "ONNX Runtime (tf2onnx export), all graph optimisations, provider chosen by device (int8: "
                  "quantised by its own quantize_static, QDQ)",
                  best_on=("cpu", "gpu"), gpu_build="onnxruntime-gpu", options=_TUNE, precisions=("int8",),
                  int8_artifact="onnx-int8"),
        Framework("onnxrt-trt", "inferbench.runners.onnxrt:OnnxRuntimeTrtRunner", "onnx", ("onnxruntime",),
                  ("onnxruntime-gpu",), "gpu",
                  "ONNX Runtime with its TensorRT execution provider (--precision fp16 for FP16)",
                  devices=("gpu",), precisions=("fp16",), gpu_build="onnxruntime-gpu"),
        Framework("openvino", "inferbench.runners.openvino:OpenVinoRunner", "savedmodel", ("openvino",),
                  ("openvino",), "openvino", "OpenVINO Runtime: the SavedModel (of an ONNX file: the "
                  "file; of a PyTorch program: the program) converted by OpenVINO, static batch shape, LATENCY hint, "
                  "f32 (bf16/f16 with --precision; int8: quantised by NNCF)", devices=("cpu",), best_on=("cpu",),
                  also_loads=("pt2", "onnx"), options=_TUNE,
                  precisions=("bf16", "fp16", "int8"), int8_artifact="openvino-int8"),
        Framework("openvino-onnx", "inferbench.runners.openvino:OpenVinoRunner", "onnx", ("openvino",),
                  ("openvino",), "openvino", "OpenVINO Runtime by the other route in: the ONNX export (tf2onnx's of a "
                  "Keras model, torch's dynamo export of a PyTorch program) converted by OpenVINO, beside openvino's "
                  "own (the SavedModel, the program); as openvino otherwise", devices=("cpu",), options=_TUNE,
                  precisions=("bf16", "fp16"), route_of="openvino"),
        Framework("torch", "inferbench.runners.torch:TorchRunner", "torch", _ONNX2TORCH, _ONNX2TORCH, "torch",
                  "PyTorch module converted from the ONNX export (identical weights; of a PyTorch model: its program), "
                  "inference_mode", precisions=("fp16", "bf16", "tf32"), options=_TORCH_OPTIONS, also_loads=("pt2",)),
        Framework("torch-native", "inferbench.runners.torch:TorchNativeRunner", "ported", ("torch", "torchvision"),
                  ("torch", "torchvision"), "torch",
                  "torchvision's implementation of the same architecture, eager, with the Keras weights ported "
                  "in (models without a port: own seeded weights, unverified)",
                  same_weights=False, ported=True, precisions=("fp16", "bf16", "tf32"), best_on=("gpu",),
                  options=("channels_last", *_TORCH_OPTIONS, *_TRAIN), needs_torchvision_twin=True,
                  trainer="inferbench.runners.torch_train:TorchTrainer"),
        Framework("torch-inductor", "inferbench.runners.torch:TorchInductorRunner", "ported", ("torch", "torchvision"),
                  ("torch", "torchvision"), "torch",
                  "PyTorch at its best-known setting: the torchvision twin with the Keras weights, channels-last, "
                  "torch.compile (inductor, weights frozen on the CPU); compile time is in the first call (int8: "
                  "quantised by PT2E's x86 inductor quantizer)",
                  same_weights=False, ported=True, needs_port=True, precisions=("fp16", "bf16", "tf32", "int8"),
                  int8_artifact="torch-int8",
                  needs_torchvision_twin=True, best_on=("cpu", "gpu"), options=(*_TUNE, *_TRAIN), also_loads=("pt2",),
                  trainer="inferbench.runners.torch_train:TorchInductorTrainer"),
        Framework("tensorrt-fp32", "inferbench.runners.tensorrt:TensorRTRunner", "tensorrt", ("tensorrt", "torch"),
                  ("tensorrt", "torch"), "tensorrt", "TensorRT engine built from the ONNX export, FP32",
                  devices=("gpu",), best_on=("gpu",)),
        Framework("tensorrt-fp16", "inferbench.runners.tensorrt:TensorRTRunner", "onnx-fp16", ("tensorrt", "torch"),
                  ("tensorrt", "torch"), "tensorrt", "TensorRT engine built from the ONNX export cast to FP16 "
                  "(strongly typed, as TensorRT 11 builds every network)",
                  devices=("gpu",), precision="fp16"),
        Framework("tensorrt-int8", "inferbench.runners.tensorrt:TensorRTRunner", "tensorrt", ("tensorrt", "torch"),
                  ("tensorrt", "torch"), "tensorrt", "TensorRT engine built from the ONNX export quantised with "
                  "symmetric QDQ pairs (explicit quantisation, strongly typed)", devices=("gpu",), precision="int8",
                  int8_artifact="onnx-int8-sym", int8_devices=("gpu",)),
    ]
}


#: Named sets of keys: every framework, or each runtime at its best-known setting on the device.
SETS = {"all": "every framework that can run here",
        "best": "the default: each runtime at its best-known setting on the device (training: every framework "
                "that trains)"}


def in_set(fw: Framework, name: str, device: str, scenario: str = "inference") -> bool:
    """Is ``fw`` a member of the set ``name`` (of :data:`SETS`) on ``device`` in ``scenario``? (Training has no
    best-known setting yet: both sets are every framework that trains.)"""
    if scenario_entry(scenario).trains:
        return fw.trainer is not None
    return name == "all" or device in fw.best_on


def get_framework(key: str) -> Framework:
    try:
        return FRAMEWORKS[key]
    except KeyError:
        raise UsageError(
            f"unknown framework {key!r}{did_you_mean(key, [*FRAMEWORKS, *SETS])}; valid frameworks: "
            f"{', '.join(FRAMEWORKS)}, {', '.join(SETS)}"
        ) from None


def display_order(key: str) -> int:
    """Position of a framework in every table and figure (unknown keys last)."""
    keys = list(FRAMEWORKS)
    return keys.index(key) if key in keys else len(keys)


def choose(keys: list[str], device: str, model: Any, options: Any = None,
           have: frozenset[str] | set[str] = frozenset(),
           scenario: str = "inference", lenient: bool = False) -> tuple[list[Framework], dict[str, str]]:
    """The frameworks to run for ``keys`` (a set of :data:`SETS` or framework keys) on ``device`` for
    ``model`` with the runner ``options``, and those a set left out with the reason (not installed, no
    implementation of the model, needs a GPU). ``have``: artifact kinds that need no export here (cached, or
    brought from another machine), whose exporters need not be installed.

    A framework named explicitly that cannot run the model or the device is a UsageError (``lenient``, for one
    model of several: left out with the reason, like a set's; the caller refuses a framework no model can run); one
    that is named explicitly but not installed runs and becomes a failed row naming the extra to install.
    """
    if not keys:
        raise UsageError("--framework is empty")
    chosen: list[Framework] = []
    skipped: dict[str, str] = {}
    for key in keys:
        if key in SETS:
            for fw in FRAMEWORKS.values():
                if not in_set(fw, key, device, scenario):
                    continue
                reason = fw.unsupported(model, scenario) or layout_refusal(fw, device, options) \
                    or unavailable_reason(fw, device, model, options, have, scenario)
                if reason is None:
                    chosen.append(fw)
                else:
                    skipped[fw.key] = reason + _instead(fw, key, device, model, options, have, scenario)
            continue
        fw = get_framework(key)
        if device not in fw.devices:
            raise UsageError(f"{key} needs an NVIDIA GPU (--device gpu); it cannot run on the {device}")
        if fw.unsupported(model, scenario) or layout_refusal(fw, device, options):
            why = fw.unsupported(model, scenario) or layout_refusal(fw, device, options)
            if not lenient:
                raise UsageError(f"{key}: {why}")
            skipped[key] = str(why)
            continue
        chosen.append(fw)
    chosen = list(dict.fromkeys(chosen))  # keep order, drop repeats
    return chosen, {k: v for k, v in skipped.items() if k not in {fw.key for fw in chosen}}


def _instead(fw: Framework, set_name: str, device: str, model: Any, options: Any, have: Any, scenario: str) -> str:
    """For a model file: the frameworks outside the set, of the same runtime (its extra), that can run it — the
    set leaves a runtime out, not just a setting of it (the 'best' set's torch-inductor needs a registered model;
    the file still runs on torch through its ONNX export)."""
    if model is None or getattr(model, "source", None) is None or set_name == "all":
        return ""
    others = [k for k, other in FRAMEWORKS.items() if other.extra == fw.extra and other is not fw
              and not in_set(other, set_name, device, scenario) and device in other.devices
              and not (other.unsupported(model, scenario) or unavailable_reason(other, device, model, options, have,
                                                                                 scenario))]
    return f"; this file runs on {', '.join(others)} instead: --framework {','.join(others)} (or all)" if others else ""


def layout_refusal(fw: Framework, device: str, options: Any) -> str | None:
    """Why ``fw`` cannot train in the layout ``options`` ask for on ``device`` (None: it can)."""
    on_tf = "tensorflow" in fw.runtime_packages(options)
    if getattr(options, "channels_first", False) and "channels_first" in fw.options and on_tf and device == "cpu":
        return "TensorFlow has no NCHW (channels-first) convolutions on a CPU; --channels-first needs a GPU here"
    return None


def needed_packages(fw: Framework, model: Any = None, options: Any = None,
                    have: frozenset[str] | set[str] = frozenset(), scenario: str = "inference") -> dict[str, str]:
    """Every package ``fw`` needs with these runner ``options``, its own and its artifacts' exporters' (the
    reference export included: the Keras model's, or a model file's own framework) but for the artifact kinds
    in ``have`` (already exported, here or elsewhere), with the extra that installs each."""
    needed = {pkg: fw.extra for pkg in fw.runtime_packages(options)}
    for kind in export_order(artifacts_of(fw, model, scenario), model):
        if kind not in have:
            needed.update({pkg: exporter_extra(kind, model) for pkg in exporter_packages(kind, model)
                           if pkg not in needed})
    if model is not None:  # what the model's own builder needs (ViT: keras-hub), in every process that loads it
        needed.update({pkg: model.extra for pkg in model.packages if pkg not in needed})
    return needed


def artifacts_of(fw: Framework, model: Any, scenario: str, precision: str = "fp32") -> list[str]:
    """The artifact kinds a cell of ``fw`` needs in ``scenario`` at ``precision``: its own (and for training the
    reference steps)."""
    entry = scenario_entry(scenario)
    return [fw.artifact_for(model, scenario, precision)] + ([entry.reference] if entry.trains else [])


def missing_packages(fw: Framework, model: Any = None, options: Any = None,
                     have: frozenset[str] | set[str] = frozenset(), scenario: str = "inference") -> list[str]:
    """Import names of the packages ``fw`` needs that are not installed (checked without importing them)."""
    return [pkg for pkg in needed_packages(fw, model, options, have, scenario)
            if importlib.util.find_spec(pkg) is None]


def unavailable_reason(fw: Framework, device: str, model: Any = None, options: Any = None,
                       have: frozenset[str] | set[str] = frozenset(), scenario: str = "inference") -> str | None:
    """Why ``fw`` cannot run here (for ``model``, a ModelSpec, None: a registered model; with the runner
    ``options``; ``have``: the artifact kinds already exported), or None if it can."""
    if device not in fw.devices:  # a CPU-only runtime on a GPU is not one waiting for an NVIDIA card
        return "needs an NVIDIA GPU" if device == "cpu" else f"runs on the CPU only ({fw.key} has no NVIDIA GPU path)"
    missing = missing_packages(fw, model, options, have, scenario)
    if not missing and device == "gpu" and fw.gpu_build and not _installed(fw.gpu_build):
        return (f"{fw.packages[0]} is its CPU build here; the GPU needs {fw.gpu_build} (pip install -e \".[gpu]\", "
                f"which replaces it)")
    if missing:  # its own extra installs all it needs (tests/test_registry.py holds pyproject to that)
        backend = [p for p in missing if p in KERAS_BACKEND_EXTRAS and fw.options]
        of_model = [p for p in missing if model is not None and p in model.packages]
        own = [p for p in missing if p not in backend and p not in of_model]  # only these need fw's own extra
        extras = ([fw.extra] if own else []) + ([model.extra] if of_model else [])
        extras += [KERAS_BACKEND_EXTRAS[p] for p in backend]
        return f"{', '.join(missing)} not installed: pip install -e \".[{','.join(dict.fromkeys(extras))}]\""
    return None


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
        return True
    except metadata.PackageNotFoundError:
        return False


#: The extra that installs a Keras backend's package.
KERAS_BACKEND_EXTRAS = {"jax": "jax"}


def distributions() -> tuple[str, ...]:
    """Every pip distribution some framework needs: their versions go into each record."""
    return tuple(dict.fromkeys(d for fw in FRAMEWORKS.values() for d in fw.distributions))


def load_runner(fw: Framework, scenario: str = "inference") -> type:
    """The runner class of ``fw`` (its trainer's for the training scenario), imported now."""
    path = fw.trainer if scenario_entry(scenario).trains else fw.runner
    if path is None:
        raise UsageError(fw.cannot_train() or f"{fw.key} has no runner")
    module_name, _, cls = path.partition(":")
    return getattr(importlib.import_module(module_name), cls)
