"""Agreement over many images: the source's FP32 outputs on ``N`` seeded image-like inputs (made as the 16 reference
inputs are, :func:`inferbench.registry.inputs.agreement_inputs`), against which a reduced-precision cell's top-1 and
top-5 agreement is counted (:func:`inferbench.measure.parity.agreement`), and, for a Keras source, the model's own
agreement in each reduced precision: the Keras model with every layer in it, on the same inputs. For a task with a
post-processing (a detector's suppression, a segmenter's masks) its results after it instead, computed a chunk at a
time (:mod:`inferbench.tasks.stored`: the raw heads of 1,000 inputs would take gigabytes). Exported only for runs
with reduced-precision cells, once per count (``--agreement-inputs``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..measure import parity
from ..registry.artifacts import (
    REFERENCE_OUTPUTS,
    ExportContext,
    agreement_own,
    agreement_reference,
    agreement_results,
    source_kind,
)
from ..registry.inputs import agreement_inputs
from ..registry.keras_models import load_keras
from ..registry.models import get_model
from ..registry.outputs import read_layout, unpacked
from ..registry.tasks import task, task_module
from ..tasks import stored
from .reference import Source, in_each_precision, in_each_reduced_precision, predictor


def export(ctx: ExportContext) -> dict[str, Any]:
    spec = get_model(ctx.model)
    model = load_keras(ctx.path("keras")) if source_kind(spec) == "keras" else None
    predict = predictor(spec, ctx, model)
    (ctx.folder / "agreement").mkdir(exist_ok=True)
    paths: list[str] = []
    notes: list[str] = []
    if not task(spec.task).classifier:
        return {"paths": [post_processed(ctx, predict, int(v)) for v in sorted(ctx.variants, key=int)],
                "variants": sorted(ctx.variants, key=int), "notes": notes}
    for count in sorted({int(v) for v in ctx.variants}):
        if (ctx.folder / agreement_reference(count)).exists() and (model is None or (
                ctx.folder / agreement_own(count)).exists()):  # made before (by TensorFlow, or as here): kept
            paths += [p for p in (agreement_reference(count), agreement_own(count)) if (ctx.folder / p).exists()]
            continue
        reference = np.concatenate([predict(x) for x in agreement_inputs(spec, ctx.resolution, ctx.seed, count)])
        np.save(ctx.folder / agreement_reference(count), reference)
        paths.append(agreement_reference(count))
        if model is None:
            notes.append("a model file: no Keras model to measure its own reduced-precision agreement with")
            continue
        chunks = functools.partial(agreement_inputs, spec, ctx.resolution, ctx.seed, count)
        own = own_agreement(model, chunks, reference)
        (ctx.folder / agreement_own(count)).write_text(json.dumps(own, indent=1))
        paths.append(agreement_own(count))
    return {"paths": paths, "variants": sorted(ctx.variants, key=int), "notes": notes}


#: FP32's post-processed results on the agreement inputs are held whole in each cell beside the cell's own: at most
#: this many bytes (a mask at 520 px: 270 kB; 1,000 of them 270 MB).
MAX_RESULTS_BYTES = 2**29


def post_processed(ctx: ExportContext, predict: Source, count: int) -> str:
    """The source's results after its task's post-processing on the ``count`` agreement inputs, written once (kept
    where made before); their path."""
    path = agreement_results(count)
    if not (ctx.folder / path).exists():
        spec = get_model(ctx.model)
        module, outputs = task_module(spec.task), read_layout(ctx.folder / REFERENCE_OUTPUTS)
        results: list[Any] = []
        held = 0  # bytes
        for x in agreement_inputs(spec, ctx.resolution, ctx.seed, count):
            chunk = stored.compact(module.postprocess(unpacked(predict(x), outputs), outputs) or [])
            results += chunk
            held += stored.nbytes(chunk)
            if held * count > MAX_RESULTS_BYTES * len(results):  # a cell holds them whole, and its own beside them
                each = held / len(results)
                raise RuntimeError(f"FP32's results after the post-processing take {each / 2**20:.2f} MB an input, "
                                   f"{each * count / 2**30:.1f} GiB for {count} held whole in each cell: "
                                   f"--agreement-inputs {int(MAX_RESULTS_BYTES // each)} or fewer counts them")
        stored.save(ctx.folder / path, results)
    return path


def own_agreement(model: Any, inputs: Callable[[], Iterable[np.ndarray]], reference: np.ndarray) -> dict[str, Any]:
    """The Keras model's own top-1 / top-5 agreement with its FP32 ``reference`` in each reduced precision, on the
    batches ``inputs()`` yields (:func:`inferbench.measure.parity.agreements`; the reason where Keras cannot)."""
    def measure(call: Any) -> dict[str, Any]:
        got = np.concatenate([call(x) for x in inputs()])
        return {**parity.agreements(reference, got), "method": parity.AGREEMENT_METHOD}

    return in_each_precision(in_each_reduced_precision(model), measure)
