"""Fake trainers and the fake training reference for the fast test layer (registered by tests/fakes.py): the
training scenario's own logic (parity verdicts, divergence, rounds, records) without any ML framework.

The fake model is tests/fakes.py's: the mean colour of each cell of a 4x4 grid (48 features) times ``W`` (48 x 10),
plus ``b`` (10); trained with softmax cross-entropy. The reference steps and every fake trainer share
:func:`loss_and_grads`; the trainers' optimizer is their own (``torch.optim``-style SGD and Adam, as torch
computes them), so that the reference's NumPy rules are checked against an independent implementation.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np
from fakes import WEIGHTS

from inferbench.measure import training
from inferbench.registry.artifacts import train_reference
from inferbench.registry.inputs import make_inputs
from inferbench.registry.models import get_model
from inferbench.runners.base import LoadContext, Trainer

CLASSES = 10


def features(batch: np.ndarray) -> np.ndarray:
    n, r = batch.shape[0], batch.shape[1]
    cells = batch[:, : r - r % 4, : r - r % 4, :].reshape(n, 4, r // 4, 4, r // 4, 3).mean(axis=(2, 4))
    return cells.reshape(n, -1) / 255.0


def loss_and_grads(w: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    f = features(x).astype(np.float64)
    logits = f @ w["dense/kernel"] + w["dense/bias"]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(y)), y]).mean())
    d = p.copy()
    d[np.arange(len(y)), y] -= 1.0
    d /= len(y)
    return loss, {"dense/kernel": (f.T @ d).astype(np.float32), "dense/bias": d.sum(axis=0).astype(np.float32)}


def initial(folder: Any) -> dict[str, np.ndarray]:
    weights = np.load(folder / WEIGHTS)["weights"][:, :CLASSES].astype(np.float32)
    return {"dense/kernel": weights, "dense/bias": np.zeros(CLASSES, np.float32)}


def export(ctx: Any) -> dict[str, Any]:
    """Stands in for the ``train-reference`` exporter: the reference steps of the fake model."""
    spec = get_model(ctx.model)
    (ctx.folder / "train-reference").mkdir(exist_ok=True)
    for variant in ctx.variants:
        optimizer = variant.partition("-bn")[0]
        for bs in ctx.batch_sizes:
            w = initial(ctx.folder)
            before, out = {k: v.copy() for k, v in w.items()}, {}
            update, losses = None, []
            for step in range(training.PARITY_STEPS):
                x = make_inputs(spec, bs, ctx.resolution, training.batch_seed(ctx.seed, step))
                y = training.labels(bs, CLASSES, ctx.seed, step)
                loss, grads = loss_and_grads(w, x, y)
                if update is None:
                    out.update({f"grad/{k}": v for k, v in grads.items()})
                    update = training.Optimizer(optimizer, training.learning_rate(optimizer, w, grads))
                    out["learning_rate"] = np.float64(update.lr)
                update.apply(w, grads)
                losses.append(loss)
                out[f"labels/{step}"] = y
                if step == 0:
                    out.update({f"update/{k}": w[k].astype(np.float64) - before[k] for k in w})
            out.update({f"update_all/{k}": w[k].astype(np.float64) - before[k] for k in w})
            np.savez(ctx.folder / train_reference(bs, variant), losses=np.array(losses), **out)
    return {"paths": ["train-reference"], "batch_sizes": list(ctx.batch_sizes), "variants": list(ctx.variants),
            "notes": []}


class FakeTrainer(Trainer):
    name = "fake"
    delay_s = 0.002
    lr_factor = 1.0

    def load(self, ctx: LoadContext) -> None:
        self.w = initial(ctx.folder)
        self.optimizer = ctx.options.optimizer
        self.state: dict[str, list[np.ndarray]] = {}
        self.t = 0
        self.classes = CLASSES

    def set_learning_rate(self, rate: float) -> None:
        self.lr = rate * self.lr_factor

    def prepare_batch(self, inputs: np.ndarray, labels: np.ndarray) -> Any:
        return inputs, labels

    def grads_for_step(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        return loss_and_grads(self.w, *prepared)

    def step(self, prepared: Any) -> Any:
        time.sleep(self.delay_s)
        loss, grads = self.grads_for_step(prepared)
        self.t += 1
        for name, g in grads.items():  # as torch.optim computes them
            if self.optimizer == "sgd":
                buf = self.state.setdefault(name, [np.zeros_like(g)])
                buf[0] = training.MOMENTUM * buf[0] + g if self.t > 1 else g.copy()
                self.w[name] = (self.w[name] - self.lr * buf[0]).astype(np.float32)
            else:
                b1, b2 = training.ADAM["beta_1"], training.ADAM["beta_2"]
                eps = training.ADAM["epsilon"] / math.sqrt(1 - b2 ** self.t)  # where Keras adds it
                m, v = self.state.setdefault(name, [np.zeros_like(g), np.zeros_like(g)])
                m = b1 * m + (1 - b1) * g
                v = b2 * v + (1 - b2) * g * g
                self.state[name] = [m, v]
                denom = np.sqrt(v) / math.sqrt(1 - b2 ** self.t) + eps
                self.w[name] = (self.w[name] - self.lr / (1 - b1 ** self.t) * m / denom).astype(np.float32)
        return loss

    def gradients(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        return loss_and_grads(self.w, *prepared)

    def weights(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.w.items()}

    def details(self) -> dict[str, Any]:
        return {"sync": "none-cpu"}

    def training_details(self) -> dict[str, Any]:
        return {"layout": "NHWC", "step": "fake-numpy"}


class LrTrainer(FakeTrainer):
    """Its learning rate 10% off the reference's."""

    lr_factor = 1.1


class DropGradTrainer(FakeTrainer):
    """Its step drops the bias's gradient (as a layer left out of the optimizer would)."""

    def grads_for_step(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = super().grads_for_step(prepared)
        return loss, {**grads, "dense/bias": np.zeros_like(grads["dense/bias"])}


class DivergeTrainer(FakeTrainer):
    """Its loss stops being finite at its 12th step (FAKE_DIVERGE_AT)."""

    def step(self, prepared: Any) -> Any:
        loss = super().step(prepared)
        return float("nan") if self.t >= int(os.environ.get("FAKE_DIVERGE_AT", "12")) else loss


TRAINERS = {"fake": "FakeTrainer", "fake-lr": "LrTrainer", "fake-dropgrad": "DropGradTrainer",
            "fake-diverge": "DivergeTrainer"}
