"""The training scenario (``--scenario train``): what one cell does in its child process.

Set-up, once per worker (:class:`Session`):

1. **load** the framework's trainer (:class:`inferbench.runners.base.Trainer`): the model from its artifact (the
   Keras model, or the Keras weights ported into the torchvision twin), made ready to train (dropout off, batch
   norm in ``--bn-mode``, ``--fused-batch-norm``, the layout), its optimizer (``--optimizer``) and loss.
2. **training parity** (:mod:`inferbench.measure.training`) from the initial weights on the reference's batches:
   step 1's loss and gradients, then ``PARITY_STEPS`` of the framework's own timed step (compilation lands in the
   first: ``cold_start.first_call_s``), and the weights' change after them, against the reference's
   (exporter ``train-reference``); a framework training its own weights is sanity-checked and never ranked.
3. **prepare** the timed batch (seed + 3, as inference's) and its seeded labels.
4. the device check, the trackers (energy, the machine), **warm-up**, the memory high-water mark reset.

Then one timed block per round, as inference's (:class:`~inferbench.scenarios.base.Measured`): an iteration is one
training step and the loss read back (the step has finished when it is); a loss that is not finite fails the cell
with the step where it happened. Latency is the step's time, throughput samples per second.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..base.codec import encode
from ..exporters.train_reference import read
from ..measure import training
from ..measure.memory import current_rss_mb
from ..registry.artifacts import train_reference, train_variant
from ..registry.frameworks import load_runner
from ..registry.inputs import make_inputs
from ..registry.models import get_model
from ..spec import CellJob, CellOutcome
from .base import Emit, Measured, check_device, load, open_tracked, timing_for
from .inference import finalize_group  # noqa: F401 - the parent's call, as inference's
from .inference import merge as merge_processes

__all__ = ["Session", "finalize_group", "merge", "run"]


class Diverged(RuntimeError):
    """The loss stopped being a finite number."""


class Session(Measured):
    def __init__(self, job: CellJob, emit: Emit) -> None:
        self.job, self.emit = job, emit
        cell = job.cell
        spec = get_model(cell.model)
        rss_before = current_rss_mb()
        self.runner, load_s = load(job, load_runner(job.framework, "train")(), spec, emit)
        self.steps = 0
        self.parity, first_step_s = self.check(spec)
        x = make_inputs(spec, cell.batch_size, cell.resolution, job.config.seed + 3)
        self.prepared = self.runner.prepare_batch(x, training.labels(cell.batch_size, self.runner.classes,
                                                                      job.config.seed))
        self.device_check = check_device(encode(job.config.device), self.runner)
        self.trackers, self.untracked = open_tracked(job, emit)
        self.timing = timing_for(job.config.timing, self.trackers)
        self.call, self.sync, self.region = lambda: self.runner.step(self.prepared), self.checked, "step+loss"
        self.cold_start = {"load_s": load_s, "first_call_s": first_step_s, "load_includes": "import+load"}
        self.start_timed(rss_before)
        self.extra["training"] = {**training.settings(cell.options.optimizer, self.rate),
                                  "bn_mode": cell.options.bn_mode, "dropout": "off",
                                  "loss": "softmax-cross-entropy-mean", "labels": "seeded",
                                  "parity_steps": training.PARITY_STEPS, **self.runner.training_details()}

    def checked(self, loss: Any) -> None:
        """The timed step's loss read back (the step has finished); a loss that is not finite ends the cell."""
        value = self.runner.loss_value(loss)
        self.steps += 1
        if not math.isfinite(value):
            raise Diverged(f"training diverged: the loss is {value} at step {self.steps}")
        self.last_loss = value

    def check(self, spec: Any) -> tuple[dict[str, Any], float]:
        """Training parity from the initial weights (see the module's docstring); returns the parity block and the
        first timed step's seconds."""
        job, trainer, cell = self.job, self.runner, self.job.cell
        self.emit("training parity")
        variant = train_variant(cell.options.optimizer, cell.options.bn_mode)
        ref = read(Path(job.artifact_dir) / train_reference(cell.batch_size, variant))
        self.rate = ref["learning_rate"]
        trainer.set_learning_rate(self.rate)
        batches = [trainer.prepare_batch(make_inputs(spec, cell.batch_size, cell.resolution,
                                                     training.batch_seed(job.config.seed, i)), labels)
                   for i, labels in enumerate(ref["labels"])]
        loss, grads = trainer.gradients(batches[0])
        before = trainer.weights()
        losses, first_step_s, after_first = [], 0.0, None
        for prepared in batches:
            start = time.perf_counter()
            out = trainer.step(prepared)
            self.checked(out)
            first_step_s = first_step_s or time.perf_counter() - start
            losses.append(self.last_loss)
            after_first = after_first or trainer.weights()
        after = trainer.weights()
        assert after_first is not None  # the loop ran at least one step
        if not job.framework.verified(cell.model):
            return training.sanity(losses, grads), first_step_s
        reference = {"loss": ref["loss"], "grads": trainer.own(ref["grads"]), "update": trainer.own(ref["update"]),
                     "update_all": trainer.own(ref["update_all"])}
        ours = {"loss": loss, "grads": grads, "update": _minus(after_first, before),
                "update_all": _minus(after, before), "losses": losses}
        return training.compare(ours, reference), first_step_s

    def finish(self) -> CellOutcome:
        outcome = super().finish()
        outcome.blocks["training"] = {**outcome.blocks["training"], "steps_timed": len(outcome.blocks[
            "raw_latencies_ms"]), "steps_total": self.steps, "last_loss": getattr(self, "last_loss", None)}
        return outcome


def merge(outcomes: list[CellOutcome], batch_size: int) -> CellOutcome:
    """One cell's outcome from its worker processes', as inference's; the steps counted over all of them."""
    merged = merge_processes(outcomes, batch_size)
    training = {**merged.blocks["training"], "steps_timed": len(merged.blocks["raw_latencies_ms"]),
                "steps_total": sum(o.blocks["training"]["steps_total"] for o in outcomes)}
    return CellOutcome(timing=merged.timing, blocks={**merged.blocks, "training": training})


def _minus(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: a[k].astype(np.float64) - b[k] for k in a}


def run(job: CellJob, emit: Emit) -> CellOutcome:
    """One cell alone, in this process (tests): set-up, every round's block back to back, collect."""
    session = Session(job, emit)
    for r in range(session.timing.config.rounds):
        session.block(r)
    return session.finish()
