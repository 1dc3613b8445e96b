"""The training scenario's reference: what every framework's training is compared with (training parity,
:mod:`inferbench.measure.training`).

For each timed batch size and training set-up (optimizer, batch-norm mode): the Keras model, made ready to train
as every trainer makes it (dropout off, batch norm in its mode), takes ``PARITY_STEPS`` steps on the seeded parity
batches, eagerly: TensorFlow's GradientTape gives each step's loss and gradients, the update rules in NumPy
(:class:`inferbench.measure.training.Optimizer`) apply them. Written: the losses, step 1's gradients and each
trainable weight's change over the steps, by variable name (``<layer>/<variable>``), in one ``.npz`` per batch size
and set-up (two copies of the weights: VGG16's at 224 px, 1.1 GB).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..base.machine import training_refusal
from ..measure.memory import current_rss_mb
from ..measure.training import PARITY_STEPS, Optimizer, batch_seed, labels, learning_rate
from ..registry.artifacts import ExportContext, train_reference
from ..registry.inputs import make_inputs
from ..registry.keras_models import load_keras
from ..registry.models import get_model
from ..runners import keras_train
from ..spec import RunnerOptions
from . import cache


def export(ctx: ExportContext) -> dict[str, Any]:
    refuse_what_memory_cannot_hold(ctx)
    spec = get_model(ctx.model)
    (ctx.folder / "train-reference").mkdir(exist_ok=True)
    paths = []
    for variant in ctx.variants:
        optimizer, _, bn = variant.partition("-bn")
        options = RunnerOptions(optimizer=optimizer, bn_mode=bn)
        for bs in ctx.batch_sizes:
            model = keras_train.for_training(load_keras(ctx.path("keras")), options)
            arrays = steps(model, spec, ctx, bs, optimizer)
            np.savez(ctx.folder / train_reference(bs, variant), **arrays)  # type: ignore[arg-type]  # numpy's stub
            paths.append(train_reference(bs, variant))
    return {"paths": ["train-reference"], "batch_sizes": list(ctx.batch_sizes), "variants": list(ctx.variants),
            "notes": []}


def refuse_what_memory_cannot_hold(ctx: ExportContext) -> None:
    """Before a step is taken: a batch whose training would not fit the memory available now is bad input, one line
    with the batch size to try (UsageError), from the Keras export's model size (--scenario train --batch-size 65536
    grew this export past 9.3 GB before the cells' own check could run)."""
    stats = (cache.read_manifest(ctx.folder)["artifacts"].get("keras") or {}).get("model_stats")
    for variant in ctx.variants:
        for bs in sorted(ctx.batch_sizes, reverse=True):
            why = training_refusal(stats, bs, variant.partition("-bn")[0], own_gb=current_rss_mb() / 1024)
            if why:
                raise UsageError(f"the reference training steps: {why}")


def steps(model: Any, spec: Any, ctx: ExportContext, batch_size: int, optimizer: str) -> dict[str, np.ndarray]:
    """The reference steps as arrays: ``losses``, ``learning_rate`` (:func:`~inferbench.measure.training.
    learning_rate`), ``labels/<step>``, ``grad/<name>`` (step 1), ``update/<name>`` (step 1's change),
    ``update_all/<name>`` (after all the steps, less before)."""
    classes = keras_train.classes(model)
    named = keras_train.trainable(model)
    weights = keras_train.weights(model)
    before = {k: v.copy() for k, v in weights.items()}
    out: dict[str, np.ndarray] = {}
    update: Optimizer | None = None
    losses = []
    for step in range(PARITY_STEPS):
        x = make_inputs(spec, batch_size, ctx.resolution, batch_seed(ctx.seed, step))
        y = labels(batch_size, classes, ctx.seed, step)
        loss, grads = keras_train.tf_gradients(model, x, y)
        if not np.isfinite(loss):
            raise RuntimeError(f"the reference training diverged at step {step + 1} (loss {loss})")
        if update is None:  # step 1: its gradients, and the rate they allow
            out.update({f"grad/{k}": v for k, v in grads.items()})
            update = Optimizer(optimizer, learning_rate(optimizer, weights, grads))
            out["learning_rate"] = np.asarray(update.lr, dtype=np.float64)
        update.apply(weights, grads)
        for name, variable in named:
            variable.assign(weights[name])
        losses.append(loss)
        out[f"labels/{step}"] = y
        if step == 0:
            out.update({f"update/{k}": weights[k].astype(np.float64) - before[k] for k in weights})
    out.update({f"update_all/{k}": weights[k].astype(np.float64) - before[k] for k in weights})
    out["losses"] = np.asarray(losses, dtype=np.float64)
    return out


def read(path: Any) -> dict[str, Any]:
    """A reference file as the parity rule takes it: ``loss`` (step 1), ``grads``, ``update``, ``update_all``,
    ``losses``, the
    parity steps' ``labels``, the ``learning_rate`` every framework trains with."""
    with np.load(path) as data:
        part = {key: {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith(key + "/")}
                for key in ("grad", "update", "update_all", "labels")}
        losses = np.asarray(data["losses"])
        rate = float(data["learning_rate"])
    return {"loss": float(losses[0]), "learning_rate": rate, "losses": [float(x) for x in losses],
            "grads": part["grad"], "update": part["update"], "update_all": part["update_all"],
            "labels": [part["labels"][str(i)] for i in range(len(losses))]}
