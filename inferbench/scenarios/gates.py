"""The quality gates a cell passes before it is timed, in its worker: its outputs against the reference at the timed
batch size and on the reference inputs (parity), a reduced precision's agreement with FP32 over many inputs, and its
accuracy on the user's labelled images; where a check fails, the first block where the outputs diverged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..base.codec import plain
from ..base.errors import UsageError
from ..base.reading import read_json
from ..exporters.cache import cached
from ..measure import parity
from ..registry import images
from ..registry.artifacts import (
    REFERENCE_INPUTS,
    REFERENCE_LOGITS,
    REFERENCE_OUTPUTS,
    REFERENCE_SENSITIVITY,
    REFERENCE_SPREAD,
    agreement_own,
    agreement_reference,
    agreement_results,
    evaluation_reference,
    timed_reference,
    timed_sensitivity,
)
from ..registry.inputs import agreement_inputs
from ..registry.models import get_model
from ..registry.outputs import Output, packed, read_layout, unpacked
from ..registry.tasks import TaskModule, task, task_module
from ..spec import CellJob
from ..tasks import stored

#: A progress line to the parent (the worker's phase).
Emit = Callable[[str], None]

#: The blocks of a parity check counted once per cell, in its first process (:func:`counted`).
REUSED = ("agreement", "accuracy")
#: What a block taken from the first process says (``taken``), in a process that did not count it.
TAKEN = "from the cell's first process"


def check_parity(job: CellJob, runner: Any, timed_out: Any, emit: Emit) -> dict[str, Any]:
    """The 16 reference inputs and the timed batch (whose compiled program may differ) against the reference, each
    named output (or part of one: the model's task says which) with a tolerance for its kind; where the task runs a
    post-processing after the call, the two agree after it too (``after_postprocess``); own weights: finite,
    input-dependent outputs on the reference inputs only."""
    emit("parity check")
    folder = Path(job.artifact_dir)
    precision, bs = job.cell.precision, job.cell.batch_size
    inputs = np.load(folder / REFERENCE_INPUTS)
    reference_16 = np.load(folder / REFERENCE_LOGITS)
    outputs = read_layout(folder / REFERENCE_OUTPUTS, reference_16.shape[1])
    names = [o.name for o in outputs]
    got = at_batch_size(runner, inputs, bs, names)
    if not job.framework.verified(job.cell.model):
        return parity.sanity(got)
    spread, sensitivity = own_rounding(folder)
    module = task_module(get_model(job.cell.model).task)
    reference = judge_outputs(module, outputs, reference_16, got, precision, spread, sensitivity)
    path = folder / timed_reference(bs)
    if not path.exists():  # never skipped quietly: what is timed is what is checked
        raise RuntimeError(f"the reference outputs of the timed batch (batch size {bs}) are missing from {folder}")
    # the model's own error on the timed images, or the 16's if larger
    timed_own = parity.larger_own_error(sensitivity, _json_if_there(folder / timed_sensitivity(bs)))
    timed = judge_outputs(module, outputs, np.load(path), packed(timed_out, names), precision, spread, timed_own)
    out = parity.combine(reference, timed, bs)
    if got.shape == reference_16.shape:
        out = {**out, **after_postprocess(module, outputs, reference_16, got)}
    if out["status"] == "passed":  # failed: no more to count
        # with labelled images their accuracy decides a reduced precision, where it could be judged; else the agreement
        accuracy = counted(job, "accuracy", check_accuracy, runner, emit) if job.config.eval_set is not None else None
        decided = accuracy_decides(precision, accuracy)
        if precision != "fp32" and job.config.agreement_inputs:
            out = judged(out, "agreement", {**counted(job, "agreement", check_agreement, runner, emit),
                                            "decides": not decided})
        if accuracy is not None:
            out = judged(out, "accuracy", {**accuracy, "decides": decided})
        if precision == "int8":  # judged by its accuracy, never by its logits: without labels, speed only
            out = broken_after(module, parity.int8_verdict(out, accuracy))
    return where_it_diverged(out, runner, inputs, emit)


def counted(job: CellJob, key: str, count: Callable[[CellJob, Any, Emit], dict[str, Any]], runner: Any,
            emit: Emit) -> dict[str, Any]:
    """The cell's ``key`` block (its agreement or accuracy, ``count``'s): counted here, or taken as the cell's first
    process counted it (``job.judged``, marked ``taken``; the same export on the same runtime and inputs gives the same
    outputs, to a compiler's rounding where a process compiles its own: a second count would cost a process minutes
    and change nothing, while the 16-input check runs in every process)."""
    if key not in job.judged:
        return count(job, runner, emit)
    emit(f"parity check: {key} as the cell's first process counted it")
    return {**job.judged[key], "taken": TAKEN}


def reusable(parity: dict[str, Any]) -> dict[str, Any]:
    """What a cell's other processes take from its first one's ``parity`` (:func:`counted`): its agreement and
    accuracy blocks as counted (not whether they decide: each process judges that again)."""
    return {key: plain({k: v for k, v in parity[key].items() if k != "decides"})
            for key in REUSED if isinstance(parity.get(key), dict)}


def broken_after(module: TaskModule, check: dict[str, Any]) -> dict[str, Any]:
    """An unjudged INT8 cell (no labelled images) whose results after the task's post-processing are so far from
    FP32's that no correct quantisation comes near (:meth:`TaskModule.broken`): failed, as a classifier's below
    :data:`inferbench.measure.parity.INT8_GROSS_FLOOR` is: a broken export is no speed to show."""
    after = check.get("after_postprocess")
    if check["status"] != "unjudged" or not after or not module.broken(after):
        return check
    return {**check, "status": "failed", "reason": f"INT8: {module.said(after)}, below "
            f"{parity.INT8_GROSS_FLOOR:.0%}: a broken export (its outputs' quantisation lost them), not a speed to "
            "show"}


def judge_outputs(module: TaskModule, outputs: list[Output], reference: np.ndarray, got: np.ndarray, precision: str,
                  spread: Any, own: Any) -> dict[str, Any]:
    """:func:`inferbench.measure.parity.compare_parts` of the parts the task judges (flat batches in, as stored),
    after the task has set both sides' results in the same rows (``align``: detections a graph kept, paired); a
    batch of another size fails as a whole, saying so."""
    if got.shape != reference.shape:
        return parity.compare(reference, got, precision, spread, own)
    mine, theirs = module.align(unpacked(reference, outputs), unpacked(got, outputs), outputs)
    ref = module.parts(mine, outputs)
    cand = {name: array for name, (array, _) in module.parts(theirs, outputs).items()}
    return parity.compare_parts(ref, {k: v.reshape(len(v), -1) for k, v in cand.items()}, precision, spread, own)


def aligned(job: CellJob, reference: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two flat batches of the cell's model with the task's results in the same rows (``align``: detections a graph
    kept, paired), flat again; as they are where their shapes differ (the comparison then fails on that)."""
    outputs = read_layout(Path(job.artifact_dir) / REFERENCE_OUTPUTS, reference.shape[1])
    if got.shape != reference.shape:
        return reference, got
    mine, theirs = task_module(get_model(job.cell.model).task).align(unpacked(reference, outputs),
                                                                      unpacked(got, outputs), outputs)
    names = [o.name for o in outputs]
    return packed(mine, names), packed(theirs, names)


def after_postprocess(module: TaskModule, outputs: list[Output], reference: np.ndarray,
                      got: np.ndarray) -> dict[str, Any]:
    """Where the task runs a post-processing after the call (a detector's suppression), the reference's and this
    runtime's results after it, on the reference inputs, matched (``after_postprocess``; reported, not a gate: the
    outputs before it are judged)."""
    ref = module.postprocess(unpacked(reference, outputs), outputs)
    if ref is None:
        return {}
    cand = module.postprocess(unpacked(got, outputs), outputs)
    return {"after_postprocess": module.agreement(ref, cand or [])}


def accuracy_decides(precision: str, accuracy: dict[str, Any] | None) -> bool:
    """Does a cell's accuracy on labelled images decide its parity? For a reduced precision, where it was judged
    (passed or failed); not where it could not be (its export failed, FP32 gets none right): the agreement does then."""
    return precision != "fp32" and accuracy is not None and accuracy["status"] in ("passed", "failed")


def judged(check: dict[str, Any], key: str, block: dict[str, Any]) -> dict[str, Any]:
    """``check`` with ``block`` (an agreement or accuracy block) under ``key``; failed with its reason where the block
    failed and ``decides`` (with labelled images, their accuracy decides a reduced precision, not the agreement)."""
    failed = block["status"] == "failed" and block["decides"]
    return {**check, key: block, "status": "failed" if failed else check["status"],
            "reason": "; ".join(r for r in (check.get("reason"), failed and f"{key}: {block['reason']}") if r) or None}


def where_it_diverged(check: dict[str, Any], runner: Any, inputs: np.ndarray, emit: Emit) -> dict[str, Any]:
    """A failed parity check with where it went wrong, where the runtime's blocks can be read
    (:meth:`~inferbench.runners.base.Runner.block_errors`): the first block past the gate on the outputs
    (:func:`inferbench.measure.parity.divergence`), said in the reason, and the error block by block (``blocks``)."""
    if check["status"] != "failed":
        return check
    emit("parity failed: reading its blocks")
    try:
        blocks = runner.block_errors(inputs)
    except Exception as exc:  # noqa: BLE001 - the failure stands as it is; only where it went wrong is not known
        return {**check, "blocks": {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}}
    if blocks is None:
        return check
    found = parity.divergence(blocks, parity.blocks_threshold(check))
    return {**check, "blocks": found, "reason": f"{check.get('reason')}; {found['said']}"}


def check_agreement(job: CellJob, runner: Any, emit: Emit) -> dict[str, Any]:
    """A reduced-precision cell's top-1 and top-5 agreement with FP32 over ``--agreement-inputs`` seeded inputs
    (:func:`inferbench.measure.parity.agreement`), computed at the timed batch size; ``not_measured`` with the reason
    where the FP32 outputs on them were not exported (or not whole), or are no class scores, or the count could not be
    finished (the 16-input check stands)."""
    folder, count = Path(job.artifact_dir), job.config.agreement_inputs

    def not_measured(why: str) -> dict[str, Any]:
        return {"status": "not_measured", "inputs": count, "reason": f"{why}: judged by the 16 reference inputs only"}

    spec = get_model(job.cell.model)
    if not task(spec.task).agrees_over_many:
        return not_measured("agreement over many inputs is a classifier's (top-1 and top-5) or a post-processing's; "
                            "this model's outputs are judged part by part on the reference inputs")
    if str(count) not in ((cached(folder, "agreement") or {}).get("variants") or ()):
        return not_measured(f"no FP32 outputs on {count} agreement inputs in the cache (their export failed)")
    if not task(spec.task).classifier:
        return agreement_after(job, runner, emit, not_measured)
    reference = np.load(folder / agreement_reference(count))
    if reference.ndim != 2 or reference.shape[1] < 2:
        return not_measured(f"the model's outputs are no class scores (shape {reference.shape[1:]} an input)")
    emit(f"parity check: agreement over {count} inputs")
    got = outputs_on(runner, lambda: agreement_inputs(get_model(job.cell.model), job.cell.resolution, job.config.seed,
                                                      count), job.cell.batch_size, reference.size, not_measured,
                     "the agreement inputs")
    if isinstance(got, dict):
        return got
    return parity.agreement(reference, got, job.cell.precision, _json_if_there(folder / agreement_own(count)))


def agreement_after(job: CellJob, runner: Any, emit: Emit, not_measured: Callable[[str], dict[str, Any]]
                    ) -> dict[str, Any]:
    """A detector's or segmenter's agreement with FP32 after the shared post-processing over the agreement inputs
    (:meth:`TaskModule.agreement`), each batch post-processed as it comes (never its raw heads held whole): failed
    where no correct export comes near (:meth:`TaskModule.broken`), else measured, beside the 16 inputs' gate."""
    folder, count, spec = Path(job.artifact_dir), job.config.agreement_inputs, get_model(job.cell.model)
    emit(f"parity check: agreement over {count} inputs after the post-processing")
    found: list[Any] = []
    try:
        module, outputs = task_module(spec.task), read_layout(folder / REFERENCE_OUTPUTS)
        reference = stored.load(folder / agreement_results(count))
        for x in rebatched(agreement_inputs(spec, job.cell.resolution, job.config.seed, count), job.cell.batch_size):
            flat = at_batch_size(runner, x, job.cell.batch_size, [o.name for o in outputs])
            found += stored.compact(module.postprocess(unpacked(flat, outputs), outputs) or [])
    except Exception as exc:  # noqa: BLE001 - not counted; the cell and its 16-input check stand
        return not_measured(f"its outputs on the agreement inputs could not be computed: {type(exc).__name__}: "
                            f"{str(exc)[:160]}")
    after = module.agreement(reference, found)
    said = module.said(after, "seeded agreement inputs")
    broken = module.broken(after)
    return {"status": "failed" if broken else "measured", "inputs": count, "after_postprocess": after, "said": said,
            "reason": f"{said}, below {parity.INT8_GROSS_FLOOR:.0%}: a broken export" if broken else None}


def check_accuracy(job: CellJob, runner: Any, emit: Emit) -> dict[str, Any]:
    """A cell's accuracy on the user's labelled images (``--eval-dir``) beside the source's FP32 on the same images, by
    its task's measure (a classifier's top-1 and top-5, :func:`inferbench.measure.parity.accuracy`; a detector's COCO
    mAP), computed at the timed batch size; ``not_measured`` with the reason where the FP32 outputs on them were not
    exported, are no class scores, or the cell's cannot be computed; failed where they have another size."""
    es, folder, spec = job.config.eval_set, Path(job.artifact_dir), get_model(job.cell.model)
    assert es is not None
    note = "seeded random weights: accuracy on real images is chance (--weights imagenet, or your trained model)" \
        if job.config.weights == "random" and spec.source is None else None

    def not_measured(why: str) -> dict[str, Any]:
        return {"status": "not_measured", "images": es.images, "reason": why, "eval_set": es.digest, "note": note}

    if es.digest not in ((cached(folder, "evaluation") or {}).get("variants") or ()):
        return not_measured("no FP32 outputs on the labelled images in the cache (their export failed)")
    reference = np.load(folder / evaluation_reference(es.digest))
    if task(spec.task).classifier and (reference.ndim != 2 or reference.shape[1] < 2):
        return not_measured(f"the model's outputs are no class scores (shape {reference.shape[1:]} an image)")
    emit(f"parity check: accuracy on {es.images} labelled images")
    try:
        listed = images.items(es)  # listed once: the images read and their labels
    except UsageError as exc:  # the set changed since the run began
        return not_measured(str(exc))
    got = outputs_on(runner, lambda: images.inputs(spec, listed, job.cell.resolution, task(spec.task).whole_image),
                     job.cell.batch_size, reference.size, not_measured, "the labelled images")
    if isinstance(got, dict):
        return got
    outputs = read_layout(folder / REFERENCE_OUTPUTS, reference.shape[1])
    block = task_module(spec.task).accuracy(images.labels(es, listed, job.cell.resolution),
                                            unpacked(got, outputs),
                                            unpacked(reference, outputs), outputs, job.cell.precision)
    return {**block, "eval_set": es.digest, "note": note}


def outputs_on(runner: Any, chunks: Any, batch_size: int, size: int, not_measured: Callable[[str], dict[str, Any]],
               what: str) -> np.ndarray | dict[str, Any]:
    """The runner's outputs on the batches ``chunks()`` yields (the ``what``), regrouped into calls of the timed batch
    size; else the block that says why (``not_measured``'s): not measured where they could not be computed, failed
    where they have another size than ``size``."""
    try:
        got = np.concatenate([at_batch_size(runner, x, batch_size) for x in rebatched(chunks(), batch_size)])
    except Exception as exc:  # noqa: BLE001 - not counted; the cell and its 16-input check stand
        return not_measured(f"its outputs on {what} could not be computed: {type(exc).__name__}: {str(exc)[:160]}")
    return got if got.size == size else {**not_measured(f"output size {got.size} != {size}"), "status": "failed"}


def rebatched(chunks: Any, size: int) -> Any:
    """The arrays of ``chunks`` (an iterable of batches) regrouped into batches of ``size`` (the last may be smaller),
    never holding more than a batch and a chunk."""
    held: list[np.ndarray] = []
    have = 0
    for chunk in chunks:
        start = 0
        while have + len(chunk) - start >= size:  # a full batch: what is held and the head of this chunk
            take = size - have
            yield np.concatenate([*held, chunk[start:start + take]]) if held else chunk[start:start + take]
            held, have, start = [], 0, start + take
        if start < len(chunk):
            held.append(chunk[start:])
            have += len(chunk) - start
    if have:
        yield np.concatenate(held)


def own_rounding(folder: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """A Keras source's own rounding, which may widen the parity gate (:func:`inferbench.measure.parity.compare`):
    its FP32 spread and its error in each reduced precision (None where its export did not measure them)."""
    return _json_if_there(folder / REFERENCE_SPREAD), _json_if_there(folder / REFERENCE_SENSITIVITY)


def _json_if_there(path: Path) -> Any:
    return read_json(path, 2**20, "cached figures") if path.exists() else None


def at_batch_size(runner: Any, inputs: np.ndarray, batch_size: int, names: list[str] | None = None) -> np.ndarray:
    """The runner's outputs for ``inputs`` in their flat form (:func:`inferbench.registry.outputs.packed`, by the
    declared ``names``), computed in calls of exactly the timed batch size (the last one padded with copies of its
    last input): what is checked is the program that is timed, and a compiling runtime (XLA, inductor, OpenVINO's
    static shape, TensorRT) never compiles another."""
    outputs = []
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start:start + batch_size]
        padded = np.concatenate([chunk, np.repeat(chunk[-1:], batch_size - len(chunk), axis=0)])
        out = runner.call(runner.prepare(np.ascontiguousarray(padded)))
        runner.synchronize(out)
        outputs.append(np.array(packed(runner.to_numpy(out), names)[:len(chunk)], copy=True))
    return np.concatenate(outputs)
