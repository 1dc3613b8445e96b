"""The training scenario's fixed parts, framework-free: the hyper-parameters every framework trains with, the
seeded batches and labels, the reference optimizer (the update rules in NumPy, as Keras states them), and the
training parity rule.

**Training parity.** From the same initial weights, on the same batches, a framework's training must do what the
reference does (the Keras model's eager GradientTape steps, the update applied by :func:`apply_update`):

1. the loss at step 1 within ``loss_rel`` (relative),
2. each trainable variable's gradient at step 1 with a cosine of at least ``grad_cosine`` to the reference's,
3. the weights' change by the framework's own timed step 1 (its own optimizer): all variables' change together
   within ``update_rel`` of the reference's (relative, in norm: a learning rate or an optimizer constant off),
   and each variable's change at a cosine of at least ``update_cosine`` to the reference's (a variable left out of
   the step, or moved the wrong way).

The change after all ``PARITY_STEPS`` steps is reported (``update_rel_err_after_steps``), not judged: training is
chaotic enough that rounding decides it. VGG16-BN at batch 2: inputs changed by one part in a million moved the
reference's own change after three steps by 9%, and XLA's and torch's were 8.4% off TensorFlow's eager one while
their step-1 changes agreed to 1e-3.

Variables whose reference gradient is all but zero (a convolution's bias before a batch norm that uses the batch's
statistics: the normalisation takes it out) carry no signal: they pass when the framework's gradient is as small,
and their change is not compared (Adam turns rounding noise into full-size steps there). A learning rate off by
10%, a layer whose gradient is dropped, a batch norm in the wrong mode: each fails one of the three.
(Momentum's and Adam's later steps are therefore checked only by the losses staying finite.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: Steps of the parity check (weights compared after them); step 1's loss and gradients are compared too.
PARITY_STEPS = 3
#: The optimizers' default learning rates. The rate a cell trains with is the default, lowered where step 1 would
#: move some kernel by more than ``STEP_CAP`` of its norm (:func:`learning_rate`, decided once by the reference
#: from its step-1 gradients, used by every framework): on a random-weight model trained on one repeated batch for
#: minutes, a fixed rate diverged (VGG16, SGD 1e-3: the loss 7.6, 5.6e3, 7e23, nan in four steps).
LEARNING_RATES = {"sgd": 1e-3, "adam": 1e-4}
STEP_CAP = 1e-2
MOMENTUM = 0.9
#: Adam's constants; epsilon where Keras puts it (added to sqrt(v), with the bias correction in the step size):
#: torch, which adds it to sqrt(v-hat), is given epsilon / sqrt(1 - beta_2^t) at step t to compute the same.
ADAM = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}
#: The parity rule's thresholds (fp32); measured margins in docs/training.md.
THRESHOLDS = {"loss_rel": 1e-3, "grad_cosine": 0.999, "update_rel": 0.02, "update_cosine": 0.99}
#: A variable whose reference gradient norm is below this fraction of the largest one carries no signal.
ZERO_GRADIENT = 1e-4
#: A training step's floating-point operations per image, as a multiple of the forward pass's: the backward pass
#: computes two products for each of the forward's (the activations' gradients and the weights'). The usual
#: approximation (Kaplan et al. 2020, "6N per token" = 3 x the forward's 2N); GFLOP/s of a training cell use it.
STEP_FLOPS_FACTOR = 3
#: Seed offsets of the parity steps' batches (the timed batch is seed + 3, as in inference).
BATCH_SEED, LABEL_SEED = 30, 7


def learning_rate(optimizer: str, weights: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> float:
    """The rate to train with: the optimizer's default, or lower so that step 1 moves no kernel (a variable of 2 or
    more axes) by more than ``STEP_CAP`` of its norm. SGD moves a kernel by lr |g|; Adam's first step moves each
    element by about lr, a kernel by lr sqrt(n). Kernels only: a bias or a batch-norm offset may start at zero."""
    rate = LEARNING_RATES[optimizer]
    for name, g in grads.items():
        w = np.asarray(weights[name])
        if w.ndim < 2 or _norm(w) == 0:
            continue
        step = _norm(g) if optimizer == "sgd" else math.sqrt(w.size)
        if step > 0:
            rate = min(rate, STEP_CAP * _norm(w) / step)
    return float(rate)


def settings(optimizer: str, rate: float) -> dict[str, Any]:
    """The optimizer's hyper-parameters, as records state them."""
    out: dict[str, Any] = {"optimizer": optimizer, "learning_rate": rate, "default_learning_rate":
                           LEARNING_RATES[optimizer], "step_cap": STEP_CAP}
    return {**out, "momentum": MOMENTUM, "nesterov": False} if optimizer == "sgd" else {**out, **ADAM}


def labels(batch_size: int, classes: int, seed: int, step: int | None = None) -> np.ndarray:
    """Seeded class labels (int32) of a batch: the timed batch's (``step`` None) or a parity step's."""
    rng = np.random.default_rng([seed + LABEL_SEED, 0 if step is None else step + 1])
    return rng.integers(0, classes, size=batch_size).astype(np.int32)


def batch_seed(seed: int, step: int) -> int:
    """The seed of a parity step's inputs (:func:`inferbench.registry.inputs.make_inputs`)."""
    return seed + BATCH_SEED + step


class Optimizer:
    """The reference update rules, in NumPy (float64 state, float32 weights), one state per variable name."""

    def __init__(self, optimizer: str, rate: float) -> None:
        self.kind, self.lr = optimizer, rate
        self.t = 0
        self.state: dict[str, tuple[np.ndarray, ...]] = {}

    def apply(self, weights: dict[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        """One step: ``weights`` updated in place from ``grads`` (every trainable variable's)."""
        self.t += 1
        for name, g in grads.items():
            g = np.asarray(g, dtype=np.float64)
            w = weights[name].astype(np.float64)
            if self.kind == "sgd":  # v <- momentum v - lr g; w <- w + v
                v = MOMENTUM * self.state.get(name, (np.zeros_like(g),))[0] - self.lr * g
                self.state[name] = (v,)
                w = w + v
            else:  # Keras' Adam: m, v moving averages; w <- w - lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps)
                b1, b2, eps = ADAM["beta_1"], ADAM["beta_2"], ADAM["epsilon"]
                m, v = self.state.get(name, (np.zeros_like(g), np.zeros_like(g)))
                m, v = m + (g - m) * (1 - b1), v + (g * g - v) * (1 - b2)
                self.state[name] = (m, v)
                alpha = self.lr * math.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t)
                w = w - alpha * m / (np.sqrt(v) + eps)
            weights[name] = w.astype(np.float32)


def _norm(a: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64).ravel()))


def _rel(ours: Mapping[str, Any], reference: Mapping[str, Any], names: list[str]) -> float | None:
    """All ``names``' arrays together: the relative error of ours against the reference's (None: not given)."""
    if not reference or not ours:
        return None
    diff2 = sum(_norm(np.asarray(ours[k], dtype=np.float64) - reference[k]) ** 2 for k in names)
    return math.sqrt(diff2 / max(sum(_norm(reference[k]) ** 2 for k in names), 1e-60))


def _cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    return float(a @ b / max(_norm(a) * _norm(b), 1e-300))


def _worse(value: float, worst: float, larger: bool) -> bool:
    """Is ``value`` worse than ``worst`` so far (larger, or smaller)? A NaN is the worst of all, and stays so."""
    if math.isnan(worst):
        return False
    return math.isnan(value) or (value > worst if larger else value < worst)


def compare(ours: Mapping[str, Any], reference: Mapping[str, Any],
            thresholds: Mapping[str, float] = THRESHOLDS) -> dict[str, Any]:
    """The training parity verdict (the record's ``parity`` block, ``method`` "training").

    ``ours`` and ``reference`` each hold ``loss`` (step 1's loss), ``grads`` (step 1's gradients), ``update``
    (each variable's change by step 1) and ``update_all`` (after all the parity steps; reported), by variable
    name in the framework's own naming and layout (the reference's were ported into it); ``ours`` also
    ``losses`` (its timed step's loss at each parity step)."""
    missing = sorted(set(reference["grads"]) ^ set(ours["grads"]))
    if missing:
        raise ValueError(f"the trainable variables differ from the reference's: {', '.join(missing[:4])}")
    norms = {k: _norm(g) for k, g in reference["grads"].items()}
    floor = ZERO_GRADIENT * max(norms.values(), default=0.0)
    worst_cos, worst_grad, worst_ucos, worst_update = 1.0, None, 1.0, None
    exempt = []
    for name, ref_g in reference["grads"].items():
        g = np.asarray(ours["grads"][name], dtype=np.float64).ravel()
        if norms[name] <= floor:  # no signal: it passes when the framework's gradient is as small
            exempt.append(name)
            cos = 1.0 if _norm(g) <= 10 * floor else 0.0
        else:
            cos = _cosine(g, ref_g)
            ucos = _cosine(ours["update"][name], reference["update"][name])
            if _worse(ucos, worst_ucos, larger=False):
                worst_ucos, worst_update = ucos, name
        if _worse(cos, worst_cos, larger=False):
            worst_cos, worst_grad = cos, name
    signal = [k for k in reference["grads"] if k not in exempt]
    worst_upd = _rel(ours["update"], reference["update"], signal)  # all signal variables' change together
    after = _rel(ours.get("update_all", {}), reference.get("update_all", {}), signal)
    loss_rel = abs(float(ours["loss"]) - float(reference["loss"])) / max(abs(float(reference["loss"])), 1e-30)
    timed_loss_rel = abs(float(ours["losses"][0]) - float(reference["loss"])) / max(abs(float(reference["loss"])),
                                                                                  1e-30)
    checks = {"loss": max(loss_rel, timed_loss_rel) <= thresholds["loss_rel"],
              "gradients": worst_cos >= thresholds["grad_cosine"],
              "weights": worst_upd is not None and worst_upd <= thresholds["update_rel"],
              "directions": worst_ucos >= thresholds["update_cosine"]}
    failed = [k for k, ok in checks.items() if not ok]
    reason = None if not failed else "; ".join(
        {"loss": f"loss at step 1 off by {max(loss_rel, timed_loss_rel):.2g} (relative)",
         "gradients": f"gradient of {worst_grad} at cosine {worst_cos:.6f}",
         "weights": "the weights' change at step 1 not given" if worst_upd is None else
                    f"the weights' change at step 1 off by {worst_upd:.2g} (relative)",
         "directions": f"change of {worst_update} at step 1 at cosine {worst_ucos:.4f}"}[k]
        for k in failed)
    return {"status": "failed" if failed else "passed", "reason": reason, "method": "training",
            "max_rel_err": worst_upd, "cosine": worst_cos, "max_abs_err": None, "top1_agreement": None,
            "thresholds": dict(thresholds),
            "training": {"loss_step1": float(ours["loss"]), "reference_loss_step1": float(reference["loss"]),
                         "loss_rel_err": loss_rel, "timed_step_loss_rel_err": timed_loss_rel,
                         "grad_min_cosine": worst_cos, "grad_worst": worst_grad,
                         "update_rel_err": worst_upd, "update_min_cosine": worst_ucos, "update_worst": worst_update,
                         "update_rel_err_after_steps": after,
                         "steps": len(ours["losses"]), "losses": [float(x) for x in ours["losses"]],
                         "variables": len(norms), "no_signal_variables": len(exempt)}}


def sanity(losses: list[float], grads: Mapping[str, Any]) -> dict[str, Any]:
    """A framework training its own weights (no port of the reference's): nothing to compare, but its losses must
    be finite and its gradients finite and not all zero. Never ranked."""
    finite = all(math.isfinite(x) for x in losses) and all(np.isfinite(np.asarray(g)).all() for g in grads.values())
    moving = any(_norm(g) > 0 for g in grads.values())
    block = {"status": "not_applicable", "reason": "own-weights", "method": "training", "max_abs_err": None,
             "max_rel_err": None, "cosine": None, "top1_agreement": None,
             "sanity": {"losses": [float(x) for x in losses], "finite": finite, "gradients_nonzero": moving}}
    if not (finite and moving):
        return {**block, "status": "failed",
                "reason": "own weights, and " + ("a loss or gradient is not finite" if not finite
                                                 else "every gradient is zero")}
    return block
