"""Reference outputs: what every export is compared with, computed by the model's source framework at full
precision (the Keras model; a model file's own framework: TensorFlow for a SavedModel, ONNX Runtime with
graph optimisations off for an ONNX file).

This exporter writes the outputs of the timed batches: the very batch each batch size times (seed + 3),
so that parity is checked on what is timed too, not only on the 16 reference inputs (XLA, oneDNN, OpenVINO
and TensorRT compile a program per batch shape). :func:`write_parity_reference` writes the 16.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..base.reading import read_json
from ..base.size import Size
from ..measure import parity
from ..measure.parity import DegenerateReference, check_reference
from ..registry.artifacts import (
    PARITY_INPUTS,
    REFERENCE_INPUTS,
    REFERENCE_LOGITS,
    REFERENCE_OUTPUTS,
    REFERENCE_SENSITIVITY,
    REFERENCE_SPREAD,
    ExportContext,
    source_kind,
    timed_reference,
    timed_sensitivity,
)
from ..registry.inputs import make_inputs
from ..registry.keras_models import graph_call, images_per_call, load_keras, output_names
from ..registry.models import ModelSpec, get_model
from ..registry.outputs import LOGITS, Output, host, layout, named, packed, write_layout
from ..registry.tasks import task, task_module
from ..runners.tf import load_saved_model, serving_function, serving_names

Predict = Callable[[np.ndarray], np.ndarray]


def export(ctx: ExportContext) -> dict[str, Any]:
    spec = get_model(ctx.model)
    model = None
    if source_kind(spec) == "keras":
        model = load_keras(ctx.path("keras"))
    predict = predictor(spec, ctx, model)
    facts: dict[str, Any] = {"notes": []}
    if model is not None:
        import keras

        facts["keras_backend"] = keras.backend.backend()
        if facts["keras_backend"] != "tensorflow":
            facts.update(backend_check(ctx, predict, facts["keras_backend"]))
    reduced = None  # the model rebuilt in each reduced precision, once for every batch size (each took 25 s on JAX)
    for bs in ctx.batch_sizes:
        path = ctx.folder / timed_reference(bs)
        if facts.get("keras_backend", "tensorflow") != "tensorflow" and path.exists():
            continue  # computed before (by TensorFlow, or as here): kept
        inputs = make_inputs(spec, bs, ctx.resolution, ctx.seed + 3)
        np.save(path, predict(inputs))
        if model is not None:  # the model's own FP16/BF16 error on these very images: the timed batch's gate
            reduced = reduced or in_each_reduced_precision(model)
            own = precision_sensitivity(reduced, inputs, np.load(path), images_per_call(ctx.resolution, 16))
            (ctx.folder / timed_sensitivity(bs)).write_text(json.dumps(own, indent=1))
        facts.setdefault("computed_batch_sizes", []).append(bs)
    paths = [p for bs in ctx.batch_sizes for p in (timed_reference(bs), timed_sensitivity(bs))
             if (ctx.folder / p).exists()]
    return {"paths": paths, "batch_sizes": list(ctx.batch_sizes), "source": source_kind(spec), **facts}


def backend_check(ctx: ExportContext, predict: Predict, backend: str) -> dict[str, Any]:
    """Keras on another backend than TensorFlow (a machine without TensorFlow: a GPU machine with the artifacts
    brought) stands in for TensorFlow's reference only where it reproduces it: its outputs on the 16 reference
    inputs against those TensorFlow exported, within the FP32 gate (widened by the model's own FP32 spread, as every
    export's); else the export fails, saying so."""
    spread_file = ctx.folder / REFERENCE_SPREAD
    spread = read_json(spread_file, 2**20, "spread") if spread_file.exists() else None
    check = parity.compare(np.load(ctx.folder / REFERENCE_LOGITS), predict(np.load(ctx.folder / REFERENCE_INPUTS)),
                           "fp32", spread)
    if check["status"] != "passed":
        raise RuntimeError(f"Keras on {backend} does not reproduce the TensorFlow reference on the 16 reference "
                           f"inputs ({check.get('reason')}): it cannot compute the reference of a new timed batch "
                           "here; install TensorFlow, or export the batch sizes you time where it is")
    said = {k: check.get(k) for k in ("status", "max_rel_err", "cosine", "top1_agreement")}
    return {"backend_check": said, "notes": [
        f"computed with Keras on {backend} (not TensorFlow); it reproduces TensorFlow's 16-input reference "
        f"within the FP32 gate (max rel err {check.get('max_rel_err'):.2g})"]}


def keras_call(model: Any) -> Any:
    """The Keras model as a function on the backend Keras runs on: TensorFlow's graph function, else the model called
    on that backend (JAX, torch), outputs as host arrays."""
    import keras


    backend = keras.backend.backend()
    if backend == "tensorflow":
        return graph_call(model)
    if backend == "jax":  # FP32 means FP32: XLA's GPU default for convolutions and products is TF32
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    else:  # torch: cuDNN's convolutions run on TF32 tensor cores by default
        import torch

        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    return lambda x: host(model(x, training=False), keras.ops.convert_to_numpy)


@dataclass(frozen=True)
class Source:
    """The source model as a function: a batch of any size -> its outputs in their flat form
    (:func:`inferbench.registry.outputs.packed`: one row an image, every output flattened in the declared order),
    computed ``chunk`` images a call; :meth:`outputs` declares them (names and shapes an image)."""

    call: Callable[[np.ndarray], Any]
    names: tuple[str, ...]
    chunk: int

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return np.concatenate([packed(self.call(batch[i:i + self.chunk]), self.names)
                               for i in range(0, len(batch), self.chunk)])

    def outputs(self, batch: np.ndarray) -> list[Output]:
        return layout(named(self.call(batch[:self.chunk]), self.names))  # a file's fixed batch: a whole chunk


def predictor(spec: ModelSpec, ctx: ExportContext, model: Any = None) -> Source:
    """The source model as a function (``model``: the Keras model, where the caller has it already)."""
    fmt = source_kind(spec)
    names: tuple[str, ...] = (LOGITS,)
    if fmt == "keras":
        model = model if model is not None else load_keras(ctx.path("keras"))
        call, names = keras_call(model), output_names(model)
    elif fmt == "savedmodel":
        loaded = load_saved_model(ctx.path("savedmodel"))
        call, names = serving_function(loaded), serving_names(loaded)
    elif fmt == "pt2":
        example = make_inputs(spec, spec.fixed_batch or 2, ctx.resolution, ctx.seed)
        call, names = program_call(ctx.path("pt2"), example)
    else:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the file's own numbers
        session = ort.InferenceSession(str(ctx.path("onnx")), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        names = tuple(o.name for o in session.get_outputs())
        call = lambda x: session.run(None, {name: x})  # noqa: E731
    return Source(call, names, spec.fixed_batch or images_per_call(ctx.resolution, 64))


def program_call(path: Any, example: np.ndarray) -> tuple[Callable[[np.ndarray], Any], tuple[str, ...]]:
    """A PyTorch program as a function on host arrays (torch eager, FP32, on the CPU: its own numbers), and the names
    of its outputs (a mapping's keys; else ``output`` or ``output0``..., as :func:`~inferbench.registry.programs.
    program_shapes` reads them from the file)."""
    import torch

    from .torch_program import load_program

    module = load_program(path)

    def call(x: np.ndarray) -> Any:
        with torch.inference_mode():
            y = module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
        if isinstance(y, dict):
            return {k: v.float().numpy() for k, v in y.items()}
        return [v.float().numpy() for v in y] if isinstance(y, (tuple, list)) else y.float().numpy()

    first = call(example)
    names = tuple(first) if isinstance(first, dict) else ("output",) if not isinstance(first, list) \
        else tuple(f"output{i}" for i in range(len(first)))
    return call, names


def parity_inputs(spec: ModelSpec, resolution: Size, seed: int) -> np.ndarray:
    """The 16 seeded reference inputs every export is compared on (NumPy only: the same bytes on every machine)."""
    return make_inputs(spec, PARITY_INPUTS, resolution, seed + 2)


def write_parity_reference(ctx: ExportContext, spec: ModelSpec, predict: Source) -> dict[str, Any]:
    """The 16 seeded reference inputs, the source's outputs on them and their declaration (names, shapes, the kinds
    the model's task gives them); refused (UsageError) where the task cannot read the outputs, or they are
    degenerate, since they could not tell a correct export from a broken one."""
    inputs = parity_inputs(spec, ctx.resolution, ctx.seed)
    declared = task_module(spec.task).kinds(predict.outputs(inputs), spec.name)
    logits = predict(inputs)
    try:
        facts = check_reference(logits, classifier=spec.source is None and task(spec.task).classifier)
    except DegenerateReference as exc:
        raise UsageError(f"{exc}: these weights cannot tell a correct export from a broken one") from None
    (ctx.folder / "reference").mkdir(exist_ok=True)
    np.save(ctx.folder / REFERENCE_INPUTS, inputs)
    np.save(ctx.folder / REFERENCE_LOGITS, logits)
    write_layout(ctx.folder / REFERENCE_OUTPUTS, declared)
    return {**facts, "task": spec.task, "outputs": [o.said() for o in declared]}


def write_fp32_spread(ctx: ExportContext, model: Any) -> dict[str, Any]:
    """The Keras model's own FP32 rounding spread on the reference inputs: its outputs computed eagerly, one
    image per call (op by op, no graph fusion), against the graph-mode reference (:func:`parity.spread`). The
    parity gate widens for a model whose spread is large (see ``parity.SPREAD_FACTOR``)."""
    import keras

    inputs, names = np.load(ctx.folder / REFERENCE_INPUTS), output_names(model)
    eager = np.concatenate([packed(host(model(inputs[i:i + 1], training=False), keras.ops.convert_to_numpy), names)
                            for i in range(len(inputs))])
    spread = parity.spread(np.load(ctx.folder / REFERENCE_LOGITS), eager)
    (ctx.folder / REFERENCE_SPREAD).write_text(json.dumps(spread, indent=1))
    return spread


def write_precision_sensitivity(ctx: ExportContext, model: Any) -> dict[str, Any]:
    """:func:`precision_sensitivity` on the reference inputs, written beside the reference. The reduced-precision
    gate is relative to it (``parity.relative_gate``)."""
    out = precision_sensitivity(in_each_reduced_precision(model), np.load(ctx.folder / REFERENCE_INPUTS),
                                np.load(ctx.folder / REFERENCE_LOGITS), images_per_call(ctx.resolution, 16))
    (ctx.folder / REFERENCE_SENSITIVITY).write_text(json.dumps(out, indent=1))
    return out


def precision_sensitivity(reduced: Reduced, inputs: np.ndarray, reference: np.ndarray, chunk: int) -> dict[str, Any]:
    """The model's own error in each reduced precision: the Keras model rebuilt with every layer's dtype policy set
    to FP16 or BF16 (weights and each layer's computation in that precision; Keras' own kernels on its backend),
    its outputs on ``inputs`` against the FP32 ``reference`` (:func:`parity.spread`, per precision). A model that
    cannot be rebuilt so (or whose outputs are not finite in it) gets the reason instead, and its reduced-precision
    exports are judged by the fixed thresholds alone."""
    def measure(call: Predict) -> dict[str, Any]:
        got = np.concatenate([call(inputs[i:i + chunk]) for i in range(0, len(inputs), chunk)])
        return {**parity.spread(reference, got), "method": parity.SENSITIVITY_METHOD}

    return in_each_precision(reduced, measure)


def rebuilt(model: Any, policy: str) -> Any:
    """The Keras model rebuilt with every layer in the dtype ``policy`` ("float16", "float64", ...: weights and
    computation in it), its weights copied."""
    config = model.get_config()
    out = model.__class__.from_config({**config, "layers": in_policy(config["layers"], policy)})
    out.set_weights(model.get_weights())
    return out


def in_policy(layers: list[dict[str, Any]], policy: str) -> list[dict[str, Any]]:
    """A functional model's layer configs with every layer's dtype set to ``policy``, into the layers of a model
    nested in it (a file's model wrapped around its side inputs), its inputs left as they are."""
    out = []
    for layer in layers:
        inner = layer.get("config", {})
        if isinstance(inner.get("layers"), list):
            inner = {**inner, "layers": in_policy(inner["layers"], policy)}
        if "dtype" in inner and layer.get("class_name") != "InputLayer":
            inner = {**inner, "dtype": policy}
        out.append({**layer, "config": inner})
    return out


#: The Keras model in each reduced precision (``parity.SENSITIVITY_POLICIES``), as a function of a batch (float32
#: outputs, one row an input), or the reason Keras cannot rebuild it so.
Reduced = dict[str, Predict | str]


def in_each_reduced_precision(model: Any) -> Reduced:
    """The Keras model rebuilt in each reduced precision (every layer's dtype policy, so weights and computation are in
    it), as a function whose outputs must be finite; where Keras cannot rebuild it so, the reason."""
    out: Reduced = {}
    names = output_names(model)
    for precision, policy in parity.SENSITIVITY_POLICIES.items():
        try:
            call = keras_call(rebuilt(model, policy))
        except Exception as exc:  # a model Keras cannot rebuild in that dtype: the fixed thresholds judge it
            out[precision] = _reason(exc)
            continue

        def finite(batch: np.ndarray, call: Any = call) -> np.ndarray:
            got = packed(call(batch), names)
            if not np.all(np.isfinite(got)):
                raise ValueError("its outputs are not finite")
            return got

        out[precision] = finite
    return out


def in_each_precision(reduced: Reduced, measure: Callable[[Predict], dict[str, Any]]) -> dict[str, Any]:
    """``measure`` of each of the ``reduced`` precisions' functions (:func:`in_each_reduced_precision`), per
    precision; where Keras could not rebuild the model, or its outputs are not finite, the reason."""
    out: dict[str, Any] = {}
    for precision, call in reduced.items():
        try:
            out[precision] = {"error": call} if isinstance(call, str) else measure(call)
        except Exception as exc:  # outputs not finite, or a call Keras cannot make in that dtype
            out[precision] = {"error": _reason(exc)}
    return out


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
