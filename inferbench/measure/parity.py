"""Do an export's outputs match the Keras reference?

Metrics on the same seeded, image-like inputs: max abs error, max abs error relative to
max |reference| ("max_rel_err"), the smallest per-input cosine similarity, and top-1 agreement.
A top-1 disagreement only fails the gate where the reference itself is not a near-tie (its margin
between the two classes exceeds the allowed absolute error).

Why one file: the gates of every precision (FP32, reduced precision relative to the model's own error, INT8's
agreement and accuracy) share one set of metrics and thresholds, which must be read side by side.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .stats import paired_difference, wilson


@dataclass(frozen=True)
class Thresholds:
    max_rel_err: float  # the batch's max error relative to its max |reference|
    min_cosine: float  # the smallest per-image cosine
    per_image_max_rel_err: float | None = None  # widened(), relative_gate(): each image to its own max |reference|

    def widened(self, spread: dict[str, Any] | None) -> Thresholds:
        """These thresholds, or wider where the model's own FP32 spread (:func:`spread`: two TensorFlow FP32
        programs of the same model, eager and graph, image by image) is so large that ``SPREAD_FACTOR`` times it
        exceeds them. The max error then passes image by image too, each image's error relative to its own
        max |reference| within the factor times the spread (measured so); the cosine's gap from 1 within the
        factor's square times the spread's (for small errors, 1 - cosine grows as the square of the error).
        Never wider than ``WIDEST``; a spread that is not finite, or measured another way, widens nothing."""
        if spread is None or not measured(spread, SPREAD_METHOD):
            return self
        per_image = min(WIDEST.max_rel_err, SPREAD_FACTOR * spread["max_rel_err"])
        gap = min(1.0 - WIDEST.min_cosine, SPREAD_FACTOR ** 2 * max(0.0, 1.0 - spread["cosine"]))
        return Thresholds(max_rel_err=self.max_rel_err, min_cosine=min(self.min_cosine, 1.0 - gap),
                          per_image_max_rel_err=per_image if per_image > self.max_rel_err else None)


def measured(spread: dict[str, Any], method: str) -> bool:
    """Whether ``spread`` is a finite measurement made by ``method``."""
    return spread.get("method") == method and all(
        isinstance(spread.get(k), (int, float)) and np.isfinite(spread[k]) for k in ("max_rel_err", "cosine"))


def larger_own_error(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Per precision, the larger of two measurements of a model's own error (:func:`relative_gate`'s input): the
    larger max error and the smaller cosine. The timed batch is judged by the larger of the model's own error on its
    images and on the 16 reference images: the largest of B images' errors grows with B, and one image's is noisy."""
    if not a or not b:
        return a or b
    out: dict[str, Any] = {}
    for precision in {*a, *b}:
        x, y = a.get(precision), b.get(precision)
        if isinstance(x, dict) and isinstance(y, dict) and measured(x, SENSITIVITY_METHOD) \
                and measured(y, SENSITIVITY_METHOD):
            out[precision] = {**x, "max_rel_err": max(x["max_rel_err"], y["max_rel_err"]),
                              "cosine": min(x["cosine"], y["cosine"])}
        else:
            out[precision] = x or y
    return out


def own_error(precision: str, sensitivity: dict[str, Any] | None) -> Any:
    """The entry of ``sensitivity`` (a model's own reduced-precision errors) that judges ``precision``: TF32 takes
    FP16's; FP32 none."""
    return (sensitivity or {}).get(SENSITIVITY_OF.get(precision, ""))


def relative_gate(precision: str, sensitivity: dict[str, Any] | None) -> Thresholds | None:
    """A reduced precision's gate relative to the model's own error in it (``sensitivity[precision]``, measured by
    ``SENSITIVITY_METHOD``; TF32 takes FP16's): each image's max error within ``SENSITIVITY_FACTOR`` times the
    model's own, the cosine's gap within the factor's square times its own; never stricter than the FP32 gate,
    never wider than ``CEILINGS``. None where it was not measured (the fixed ``THRESHOLDS`` judge then)."""
    own = own_error(precision, sensitivity)
    if not isinstance(own, dict) or not measured(own, SENSITIVITY_METHOD):
        return None
    floor, ceiling = THRESHOLDS["fp32"], CEILINGS[precision]
    per_image = min(ceiling.max_rel_err, max(floor.max_rel_err, SENSITIVITY_FACTOR * own["max_rel_err"]))
    gap = min(1.0 - ceiling.min_cosine, max(1.0 - floor.min_cosine, SENSITIVITY_FACTOR ** 2 * (1.0 - own["cosine"])))
    return Thresholds(max_rel_err=per_image, min_cosine=1.0 - gap, per_image_max_rel_err=per_image)


#: Per precision. FP32, measured over the zoo (one model per family at 80 px, every CPU runtime):
#: correct exports differ from Keras by up to 1.3e-4 of max |logit| (Inception V3, on every runtime alike,
#: XLA included) with a cosine of at least 1 - 1e-8; one perturbed weight (in the largest tensor or a
#: middle one) gave 1.4e-3 to 2.7e-1 and cosines of 1 - 4e-6 or lower. So the gate takes both: the
#: max error within 1e-3 (its old 1e-4 failed Inception's correct exports) and the cosine within 1e-6 of 1
#: (100x the noise, below every perturbation). tests/test_real_frameworks.py perturbs a weight and expects
#: the gate to fail.
#: ... unless a model's own rounding says otherwise. ResNet-152 (calibrated random weights, 128 px) amplifies
#: FP32 rounding: run eagerly, image by image, it differs from its graph-mode reference by up to 1.6e-3 of an
#: image's max |logit| (cosine 1 - 3.3e-7), and its correct-looking ONNX Runtime export by up to 1.5x that
#: (on each image 1.4x to 3.2x the eager error of the same image; cosine gaps up to 5.6x the eager one), every
#: top-1 agreeing; its ONNX Runtime, OpenVINO and torch exports failed the fixed gate (1.2e-3 to 1.8e-3). The
#: gate widens to SPREAD_FACTOR x the model's spread (its square for the cosine's gap) where that is wider.
SPREAD_FACTOR = 3.0
#: The precisions judged by accuracy, never by their logits (:func:`int8_verdict`): their errors on the reference
#: inputs are reported, and only outputs that are not finite, or not of the reference's shape, fail them. On seeded
#: weights a correct INT8 export's logits say nothing of a trained model's accuracy: MobileNetV3-Small at 32 px,
#: calibrated on 16 seeded inputs, read cosines of 0.45 (OpenVINO) and 0.80 (ONNX Runtime) against FP32.
UNGATED = ("int8",)
UNGATED_SAID = "none on the logits: judged by its accuracy on labelled images (docs/method.md)"
#: The widest an FP32 gate gets, whatever the spread: the FP16 row's max error, a cosine within 1e-4 of 1.
WIDEST = Thresholds(max_rel_err=1e-2, min_cosine=0.9999)
THRESHOLDS: dict[str, Thresholds] = {
    "fp32": Thresholds(max_rel_err=1e-3, min_cosine=0.999999),
    "fp16": Thresholds(max_rel_err=1e-2, min_cosine=0.995),
    "bf16": Thresholds(max_rel_err=3e-2, min_cosine=0.99),
    "tf32": Thresholds(max_rel_err=1e-2, min_cosine=0.995),  # FP16's mantissa (10 bits), FP32's range
}
#: A reduced precision's gate is relative to the model's own error in that precision (:func:`relative_gate`): the
#: Keras model rebuilt with every layer in it (:func:`inferbench.exporters.reference.write_precision_sensitivity`,
#: Keras' own kernels) is a trusted computation of the same weights in the same precision, and a correct export
#: rounds about as much, not twice as much. Measured on the conditioned seeded weights at 224 px (docs/method.md:
#: the default model, MobileNetV3-Small, ResNet-50, EfficientNet-B0): torch's FP16 and BF16 on this project's CPU at
#: 0.75x-1.27x of it over 16 images, up to 1.55x on a single image (OpenVINO's on the default model 0.74x-0.75x, two
#: run cells); one layer's weights 1% off (FP16) at up to 53x, caught in 24
#: of 48 layers sampled (benchmark_results/reduced-precision-cpu-20261127). Never wider than ``CEILINGS``, whatever
#: the model: FP16 within 5% of an image's max logit and a cosine of 0.995 (OpenVINO's accuracy checker's default);
#: BF16 (8 mantissa bits to FP16's 11) 8x that error
#: and a cosine of 0.9, which only the seeded EfficientNet-B0 reaches (its own BF16 cosine is 0.937).
SENSITIVITY_FACTOR = 2.0
CEILINGS: dict[str, Thresholds] = {
    "fp32": WIDEST,
    "fp16": Thresholds(max_rel_err=5e-2, min_cosine=0.995),
    "bf16": Thresholds(max_rel_err=0.4, min_cosine=0.9),  # 8x FP16's error: their unit roundoffs are 2^-8 and 2^-11
    "tf32": Thresholds(max_rel_err=5e-2, min_cosine=0.995),
}
#: The Keras dtype policy each reduced precision's own error is measured in; TF32 (products' inputs rounded to
#: FP16's mantissa, everything else FP32) takes FP16's, which bounds it from above.
SENSITIVITY_POLICIES = {"fp16": "float16", "bf16": "bfloat16"}
SENSITIVITY_OF = {"fp16": "fp16", "bf16": "bf16", "tf32": "fp16"}
#: How a model's own reduced-precision error is measured, as records name it.
SENSITIVITY_METHOD = "keras model, every layer in the precision (dtype policy), vs its FP32 reference, image by image"


#: Agreement over many images (:func:`agreement`): a reduced precision's top-1 and top-5 agreement with FP32 over
#: ``inferbench.spec.AGREEMENT_INPUTS`` seeded image-like inputs (``--agreement-inputs``), so that no gate is decided
#: by 16 images. Its disagreement may be at most ``SENSITIVITY_FACTOR`` times the model's own in that precision (the
#: Keras model with every layer in it, on the same inputs), never less than ``AGREEMENT_FLOOR`` (MLPerf's 99% of
#: FP32), never more than ``AGREEMENT_CEILINGS``; it fails only where the Wilson interval's lower end is past that.
AGREEMENT_FLOOR = 0.01
AGREEMENT_CEILINGS: dict[str, dict[str, float]] = {
    "fp16": {"top1": 0.10, "top5": 0.02},
    "bf16": {"top1": 0.50, "top5": 0.10},
}
#: How the model's own agreement is measured, as records name it.
AGREEMENT_METHOD = "keras model, every layer in the precision (dtype policy), top-1/top-5 vs its FP32 reference"
#: top-1: the cell's top class is FP32's; top-5: FP32's top class is among the cell's five highest.
AGREEMENT_KINDS = {"top1": 1, "top5": 5}


def agreements(reference: np.ndarray, candidate: np.ndarray) -> dict[str, int]:
    """How many of the inputs agree with FP32's top class (``top1``: the candidate's top class is it; ``top5``: it is
    among the candidate's five highest), and of how many (``inputs``); non-finite outputs agree nowhere."""
    ref = np.asarray(reference, dtype=np.float64)
    top = ref.argmax(axis=1)
    return {"inputs": int(len(ref)), **{kind: int(np.sum(hits(candidate, top, k)))
                                        for kind, k in AGREEMENT_KINDS.items()}}


def hits(scores: np.ndarray, classes: np.ndarray, k: int) -> np.ndarray:
    """Per input, whether ``classes`` (one per input) is among the ``k`` highest of its ``scores``; non-finite
    scores hit nothing."""
    scores = np.asarray(scores, dtype=np.float64).reshape(len(classes), -1)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return (best == np.asarray(classes)[:, None]).any(axis=1) & np.isfinite(scores).all(axis=1)


#: With labelled images (``--eval-dir``), a reduced precision passes where its top-1 accuracy is at least this share of
#: FP32's on the same images: MLPerf's rule for its quantised and reduced-precision entries, a plain comparison of the
#: two accuracies, as MLPerf makes it (:func:`accuracy`; the paired interval says how far the images decide it).
ACCURACY_GATE = 0.99


def accuracy(labels: np.ndarray, candidate: np.ndarray, reference: np.ndarray, precision: str) -> dict[str, Any]:
    """A cell's top-1 and top-5 accuracy on labelled images, each with its 95% Wilson interval, beside FP32's (the
    source's ``reference`` outputs on the same images) and the paired difference with its interval
    (:func:`inferbench.measure.stats.paired_difference`); for a reduced precision, MLPerf's gate on top-1
    (:data:`ACCURACY_GATE`). ``status``: passed / failed (a reduced precision), measured (FP32: the FP32 gate on
    the reference inputs judges it), not_measured (FP32 classifies none of them right: nothing to hold it to)."""
    labels = np.asarray(labels)
    n, classes = len(labels), int(np.shape(reference)[1])
    out: dict[str, Any] = {"images": n, "gate": ACCURACY_GATE}
    for kind, k in [(kind, k) for kind, k in AGREEMENT_KINDS.items() if k < classes]:
        mine, fp32 = hits(candidate, labels, k), hits(reference, labels, k)
        a, b, c = int(np.sum(mine & fp32)), int(np.sum(mine & ~fp32)), int(np.sum(~mine & fp32))
        out[kind] = {"accuracy": (a + b) / n, "ci95": wilson(a + b, n), "fp32": (a + c) / n,
                     "fp32_ci95": wilson(a + c, n), "difference": (b - c) / n,
                     "difference_ci95": paired_difference(a, b, c, n - a - b - c)}
    top1 = out["top1"]
    if precision == "fp32":
        return {"status": "measured", "reason": None, **out}
    if top1["fp32"] == 0:
        return {"status": "not_measured", "reason": f"FP32 classifies none of the {n} labelled images right: no "
                "accuracy to keep (labels in another class order than the model's?)", **out}
    allowed = -(1 - ACCURACY_GATE) * top1["fp32"]
    ratio = top1["accuracy"] / top1["fp32"]
    lo, hi = top1["difference_ci95"]
    if top1["difference"] >= allowed - 1e-12:
        return {"status": "passed", "reason": None, **out}
    unsure = ", though the images cannot tell (the interval reaches it: more images, --eval-images)" \
        if hi >= allowed else ""
    return {"status": "failed", "reason": (
        f"top-1 accuracy {top1['accuracy']:.1%} against FP32's {top1['fp32']:.1%} on {n} labelled images: "
        f"{ratio:.1%} of FP32 (difference {top1['difference'] * 100:+.1f} points "
        f"[{lo * 100:+.1f} to {hi * 100:+.1f}]), "
        f"below MLPerf's {ACCURACY_GATE:.0%}{unsure}"), **out}


#: The top-1 agreement with FP32 below which an INT8 program is no quantisation of the model but a broken (or
#: tampered) one, judged where no labelled images decide: the committed INT8 runs of 2026-11-27 agreed with FP32 on
#: 0.32-0.76 of 1,000 seeded inputs (ResNet-50 on torch-inductor the lowest, its 95% interval from 0.29); a third of
#: that is 100 times chance over 1,000 classes (0.001), where an anti-correlated or random program lands. The upper
#: end of the agreement's interval must be below it: a few inputs fail nothing by chance.
INT8_GROSS_FLOOR = 0.10


def int8_verdict(check: dict[str, Any], accuracy: dict[str, Any] | None) -> dict[str, Any]:
    """An INT8 cell's parity after its logits' sanity check passed: its accuracy on labelled images decides
    (MLPerf's 99% of FP32's top-1, :func:`accuracy`); where there are none, or they could not be judged, the cell is
    ``unjudged``: measured, shown and ranked apart as speed only, never beside the verified cells — unless its
    agreement with FP32 is below :data:`INT8_GROSS_FLOOR`: then it failed (a broken export is no speed to show)."""
    if check["status"] != "passed" or (accuracy is not None and accuracy["status"] in ("passed", "failed")):
        return check
    top1 = ((check.get("agreement") or {}).get("top1") or {})
    ci = top1.get("ci95")
    if ci is not None and ci[1] < INT8_GROSS_FLOOR:
        return {**check, "status": "failed", "reason": (
            f"INT8's top-1 agreement with FP32 is {top1['agreement']:.3f} [95% CI {ci[0]:.3f}-{ci[1]:.3f}] over "
            f"{check['agreement']['inputs']} inputs, below {INT8_GROSS_FLOOR:.2f}, which no correct quantisation "
            "measured came near (0.32-0.76): a broken export, not a speed to show")}
    why = "no labelled images, --eval-dir" if accuracy is None else f"its accuracy: {accuracy.get('reason')}"
    return {**check, "status": "unjudged", "reason": f"speed only: INT8's accuracy not judged ({why})"}


def agreement(reference: np.ndarray, candidate: np.ndarray, precision: str,
              own: dict[str, Any] | None = None) -> dict[str, Any]:
    """The agreement block of a reduced-precision cell's parity: its top-1 and top-5 agreement with FP32 over many
    inputs, each with its 95% Wilson interval, and the verdict against the model's own agreement in that precision
    (``own``: :func:`agreements` of the Keras model in it, measured by ``AGREEMENT_METHOD``; TF32 takes FP16's)."""
    counts = agreements(reference, candidate)
    n = counts["inputs"]
    own_counts = own_error(precision, own)
    if not (isinstance(own_counts, dict) and own_counts.get("method") == AGREEMENT_METHOD
            and own_counts.get("inputs") == n):
        own_counts = None  # not measured, or measured on another number of inputs
    out: dict[str, Any] = {"inputs": n, "factor": SENSITIVITY_FACTOR, "floor": AGREEMENT_FLOOR, "own": own_counts}
    reasons = []
    classes = np.shape(reference)[1]
    for kind in [k for k, top in AGREEMENT_KINDS.items() if top < classes]:  # top-5 of 5 classes: every one agrees
        interval = wilson(counts[kind], n)
        if SENSITIVITY_OF.get(precision) not in AGREEMENT_CEILINGS:  # INT8: beside its accuracy, never a gate
            out[kind] = {"agreement": counts[kind] / n if n else None, "ci95": interval, "own": None,
                         "allowed_disagreement": None}
            continue
        own_off = None if own_counts is None else 1 - own_counts[kind] / n
        ceiling = AGREEMENT_CEILINGS[SENSITIVITY_OF[precision]][kind]
        allowed = ceiling if own_off is None else min(ceiling, max(AGREEMENT_FLOOR, SENSITIVITY_FACTOR * own_off))
        out[kind] = {"agreement": counts[kind] / n if n else None, "ci95": interval, "own": None if own_off is None
                     else 1 - own_off, "allowed_disagreement": allowed}
        if interval is not None and 1 - interval[1] > allowed:
            base = f"the {precision.upper()} ceiling; the model's own agreement was not measured" \
                if own_off is None else f"the {precision.upper()} ceiling" if allowed == ceiling \
                else "the floor, MLPerf's 99%" if allowed == AGREEMENT_FLOOR \
                else f"{SENSITIVITY_FACTOR:g}x the model's own {SENSITIVITY_OF[precision].upper()} {own_off:.3g}"
            reasons.append(f"{kind.replace('top', 'top-')} agreement with FP32 {counts[kind] / n:.3f} "
                           f"[{interval[0]:.3f}-{interval[1]:.3f}] over {n} inputs: disagreement past {allowed:.3g} "
                           f"({base})")
    if SENSITIVITY_OF.get(precision) not in AGREEMENT_CEILINGS:
        return {"status": "measured", "reason": None, **out}
    return {"status": "failed" if reasons else "passed", "reason": "; ".join(reasons) or None, **out}


class DegenerateReference(Exception):
    """The reference outputs cannot tell a correct export from a broken one."""


def check_reference(ref: np.ndarray, classifier: bool = True) -> dict[str, Any]:
    """Raise DegenerateReference unless logits vary across classes *and* across inputs.

    The stock random-init MobileNetV3 gives logits ~1e-11 that are identical for every input: any
    export, however wrong, agrees with it. A user's model file (``classifier=False``) may be no
    classifier, or have two classes: its outputs must only be finite and vary across inputs.
    """
    ref = np.asarray(ref, dtype=np.float64)
    if ref.ndim != 2 or ref.shape[0] < 2:
        raise DegenerateReference(f"reference must be (inputs >= 2, classes), got shape {ref.shape}")
    if not np.all(np.isfinite(ref)):
        raise DegenerateReference("reference outputs contain NaN or infinity")
    across_classes = float(ref.std(axis=1).mean())
    across_inputs = float(ref.std(axis=0).mean())
    distinct_top1 = int(len(set(ref.argmax(axis=1).tolist())))
    facts = {
        "std_across_classes": across_classes,
        "std_across_inputs": across_inputs,
        "distinct_top1": distinct_top1,
        "inputs": int(ref.shape[0]),
    }
    if not classifier:
        if across_inputs < 1e-3:
            raise DegenerateReference(f"the model's outputs hardly depend on its input (std across inputs "
                                      f"{across_inputs:.3g} over {ref.shape[0]} inputs; need >= 1e-3)")
        return facts
    needed_top1 = min(3, ref.shape[0])
    if across_classes < 1e-3 or across_inputs < 1e-3 or distinct_top1 < needed_top1:
        raise DegenerateReference(
            "reference outputs are degenerate (std across classes "
            f"{across_classes:.3g}, across inputs {across_inputs:.3g}, {distinct_top1} distinct top-1 "
            f"classes over {ref.shape[0]} inputs; need >= 1e-3, >= 1e-3, >= {needed_top1})"
        )
    return facts


def spread(reference: np.ndarray, other: np.ndarray) -> dict[str, Any]:
    """The model's own rounding spread that :meth:`Thresholds.widened` takes, from two FP32 computations of the
    same outputs, image by image (a batch's max error relative to its max |reference| depends on which images
    share the batch: ResNet-152's 16 reference images span max |logit| 2.7 to 66): the largest of each image's
    max error relative to its own max |reference|, and the smallest cosine."""
    ref = np.asarray(reference, dtype=np.float64)
    other = np.asarray(other, dtype=np.float64).reshape(ref.shape)
    return {"max_rel_err": per_image_rel_err(ref, other), "cosine": min_cosine(ref, other), "method": SPREAD_METHOD}


def min_cosine(ref: np.ndarray, cand: np.ndarray) -> float:
    """The smallest per-image cosine similarity (0 where not finite, or where one of the two is all zeros; 1 where
    both are: an image a suppression padded to its cap left no box, in the reference and the candidate alike)."""
    if not np.all(np.isfinite(cand)):
        return 0.0
    num = (ref * cand).sum(axis=1)
    norms = np.linalg.norm(ref, axis=1), np.linalg.norm(cand, axis=1)
    den = norms[0] * norms[1]
    both_zero = (norms[0] == 0) & (norms[1] == 0)
    return float(np.min(np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(both_zero, 1.0, 0.0))))


def per_image_rel_err(ref: np.ndarray, cand: np.ndarray) -> float:
    """The largest of each image's max error relative to its own max |reference| (inf where not finite)."""
    scale = np.abs(ref).max(axis=1)
    per_image = np.abs(cand - ref).max(axis=1) / np.where(scale > 0, scale, np.inf)
    return float(per_image.max()) if np.all(np.isfinite(cand)) else float("inf")


#: How :func:`spread` is measured, as records name it.
SPREAD_METHOD = "keras eager vs graph reference, image by image (max of per-image max_rel_err, min cosine)"


def compare(reference: np.ndarray, candidate: np.ndarray, precision: str = "fp32",
            fp32_spread: dict[str, Any] | None = None, sensitivity: dict[str, Any] | None = None,
            kind: str = "scores") -> dict[str, Any]:
    """Parity block of a result record: metrics, thresholds and status ("passed"/"failed"). ``fp32_spread``:
    the model's own FP32 rounding spread (:func:`spread`), which may widen an FP32 gate; ``sensitivity``: its own
    error in each reduced precision (``{"fp16": spread, "bf16": ...}``), which may widen that precision's. ``kind``
    (:data:`inferbench.registry.outputs.KINDS`): only class scores count top-1 flips; boxes are held to
    :data:`BOX_PIXELS` as well."""
    own = own_error(precision, sensitivity)
    ungated = precision in UNGATED
    th = THRESHOLDS[precision].widened(fp32_spread) if precision == "fp32" \
        else THRESHOLDS["fp32"] if ungated else relative_gate(precision, sensitivity) or THRESHOLDS[precision]
    if kind == "kept_scores" and precision == "fp32":  # a two-stage detector's: pooled from proposals of their own
        # rounding (0.04-0.08 px apart between runtimes here), its kept scores differed by 0.0005-0.0025 at FP32
        th = dataclasses.replace(th, max_rel_err=max(th.max_rel_err, WIDEST.max_rel_err),
                                 min_cosine=min(th.min_cosine, WIDEST.min_cosine))
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64).reshape(ref.shape) if np.size(candidate) == ref.size \
        else None
    if cand is None:
        return {
            "status": "failed", "reason": f"output shape {np.shape(candidate)} != reference {ref.shape}",
            "max_abs_err": None, "max_rel_err": None, "cosine": None, "top1_agreement": None,
            "precision": precision,
        }
    finite = bool(np.all(np.isfinite(cand)))
    err = np.abs(cand - ref)
    max_abs = float(err.max()) if finite else float("inf")
    scale = float(np.abs(ref).max())
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))  # zeros alike: equal
    cosine = min_cosine(ref, cand)
    ref_top = ref.argmax(axis=1)
    cand_top = cand.argmax(axis=1)
    agree = ref_top == cand_top
    allowed_abs = th.max_rel_err * scale
    rows = np.arange(ref.shape[0])
    margins = ref[rows, ref_top] - ref[rows, cand_top]
    real_flips = int(np.sum(~agree & (margins > 2 * allowed_abs))) if kind == "scores" else 0
    per_image = per_image_rel_err(ref, cand)
    reasons = []
    if not finite:
        reasons.append("non-finite outputs")
    # FP32 widened by the model's own spread: image by image where the batch's max error is past the fixed gate; a
    # reduced precision's gate relative to the model's own error in it: image by image always
    if th.per_image_max_rel_err is not None and (max_rel > th.max_rel_err or precision != "fp32"):
        if per_image > th.per_image_max_rel_err and precision == "fp32":
            reasons.append(f"max_rel_err {max_rel:.3g} > {th.max_rel_err:g} and per image {per_image:.3g} > "
                           f"{th.per_image_max_rel_err:.3g} ({SPREAD_FACTOR:g}x the model's own FP32 spread)")
        elif per_image > th.per_image_max_rel_err:
            reasons.append(f"max_rel_err per image {per_image:.3g} > {th.per_image_max_rel_err:.3g} "
                           f"({SENSITIVITY_FACTOR:g}x the model's own {SENSITIVITY_OF[precision].upper()} error, at "
                           f"most {CEILINGS[precision].max_rel_err:g})")
    elif max_rel > th.max_rel_err:
        reasons.append(f"max_rel_err {max_rel:.3g} > {th.max_rel_err:g}")
    if cosine < th.min_cosine:
        reasons.append(f"cosine {cosine:.6f} < {th.min_cosine:.6g}")
    if real_flips:
        reasons.append(f"{real_flips} top-1 disagreement(s) away from near-ties")
    if kind == "boxes" and precision in BOX_PIXELS and max_abs > BOX_PIXELS[precision]:
        reasons.append(f"boxes off by up to {max_abs:.3g} px > {BOX_PIXELS[precision]:g} px")
    if ungated:  # reported, not gated: only outputs that are no numbers fail (a collapsed INT8 model's accuracy,
        # or without labels its agreement, says so; its logits on 16 near-grey inputs could not: they flatten a
        # correct one's too)
        reasons = [r for r in reasons if r == "non-finite outputs"]
    return {
        "status": "failed" if reasons else "passed",
        "reason": "; ".join(reasons) or None,
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "max_rel_err_per_image": per_image,
        "cosine": cosine,
        "top1_agreement": float(agree.mean()) if kind == "scores" else None,
        "inputs": int(ref.shape[0]),
        "precision": precision,
        "thresholds": {"gate": UNGATED_SAID} if ungated else {
            "max_rel_err": th.max_rel_err, "min_cosine": th.min_cosine,
            **({"per_image_max_rel_err": th.per_image_max_rel_err, "fp32_spread": fp32_spread,
                "widened": th != THRESHOLDS[precision]} if fp32_spread and precision == "fp32" else {}),
            **({"per_image_max_rel_err": th.per_image_max_rel_err, "precision_sensitivity": own,
                "factor": SENSITIVITY_FACTOR, "ceiling": dataclasses.asdict(CEILINGS[precision]),
                "relative": th != THRESHOLDS[precision]} if own else {})},
    }


#: The most an FP32 export's box coordinates may differ from the reference's, in pixels (a correct export's rounding
#: moves a 640 px box by thousandths of a pixel; half a pixel is a box drawn elsewhere).
BOX_PIXELS = {"fp32": 0.5}


def compare_parts(reference: dict[str, tuple[np.ndarray, str]], candidate: dict[str, np.ndarray], precision: str,
                  fp32_spread: dict[str, Any] | None = None,
                  sensitivity: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`compare` of each named part of a model's outputs (``reference``: name -> its array and kind, one row an
    image; ``candidate``: name -> array), in one parity block: failed where any part failed, naming which and by how
    much; the worst of the parts' figures at the top, each part's block under ``outputs``. A classifier's one part is
    judged exactly as :func:`compare` judges logits."""
    if len(reference) == 1:
        ((name, (ref, kind)),) = reference.items()
        if kind == "scores":
            return compare(ref.reshape(len(ref), -1), candidate[name], precision, fp32_spread, sensitivity)
    checks = {name: compare(ref.reshape(len(ref), -1), candidate[name], precision, fp32_spread, sensitivity, kind)
              for name, (ref, kind) in reference.items()}
    for name, (ref, kind) in reference.items():
        if kind == "masks" and checks[name]["max_abs_err"] is not None:
            checks[name] = with_pixel_flips(checks[name], ref, candidate[name])
    failed = [f"{name}: {c['reason']}" for name, c in checks.items() if c["status"] != "passed"]
    first = next(iter(checks.values()))

    def worst(key: str, pick: Any) -> Any:
        vals = [c[key] for c in checks.values() if c.get(key) is not None]
        return pick(vals) if vals else None

    return {**first, "status": "failed" if failed else "passed", "reason": "; ".join(failed) or None,
            "max_abs_err": worst("max_abs_err", max), "max_rel_err": worst("max_rel_err", max),
            "max_rel_err_per_image": worst("max_rel_err_per_image", max), "cosine": worst("cosine", min),
            "top1_agreement": worst("top1_agreement", min),
            "outputs": {name: {k: c.get(k) for k in ("status", "reason", "max_abs_err", "max_rel_err", "cosine",
                                                      "top1_agreement", "pixel_agreement") if k in c}
                        for name, c in checks.items()}}


def with_pixel_flips(check: dict[str, Any], reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any]:
    """A masks part's check with its pixels' top-class agreement (``pixel_agreement``), failed where a pixel's top
    class moved away from a near-tie (the reference's margin between the two classes past twice the allowed error),
    as a classifier's top-1 flips fail it; an INT8 part (no gate on its numbers) is reported, never failed so."""
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64).reshape(ref.shape)
    top, moved = ref.argmax(axis=1), cand.argmax(axis=1)
    margin = np.take_along_axis(ref, top[:, None], 1)[:, 0] - np.take_along_axis(ref, moved[:, None], 1)[:, 0]
    limit = check.get("thresholds", {}).get("max_rel_err")
    flips = int(np.sum((top != moved) & (margin > 2 * limit * float(np.abs(ref).max())))) if limit else 0
    out = {**check, "pixel_agreement": float(np.mean(top == moved)), "pixel_flips": flips}
    if flips:
        said = f"{flips} pixel(s) of {top.size} changed class away from near-ties"
        out.update(status="failed", reason="; ".join(r for r in (check.get("reason"), said) if r))
    return out


#: How a failed cell's blocks are compared, as records name it (:func:`divergence`).
BLOCKS_METHOD = "each block's output vs the same program in FP64, relative L2, on the 16 reference inputs"
#: At most this many blocks are read, the outputs included (a DenseNet has 58 concatenations).
MAX_BLOCKS = 16
#: Where an INT8 cell's blocks are judged to have lost their signal: a relative L2 error of 0.3 against the FP32
#: model (a signal-to-quantisation-noise ratio of about 10 dB). INT8 has no gate on its logits; this points at a
#: failed cell's first block to look at. Between what a correct graph reaches and what a crushed one starts at: the
#: seeded MobileNetV3-Small calibrated on seeded inputs reads 0.04 at its first residual block and 0.20 at its logits
#: (past 0.1 from its fifth block on: 0.1 would name a correct graph's), calibrated on dim inputs 0.63 at the first.
INT8_BLOCKS = 0.3


def blocks_threshold(check: dict[str, Any]) -> float:
    """The error a failed cell's blocks are judged by (:func:`divergence`): its gate on the outputs, the image-wise
    one where it has one; INT8's :data:`INT8_BLOCKS` (it has no gate on its logits)."""
    if check.get("precision") == "int8":
        return INT8_BLOCKS
    th = check.get("thresholds") or {}
    return float(th.get("per_image_max_rel_err") or th.get("max_rel_err") or 1e-3)


def pick_blocks(residual: list[Any], every: list[Any]) -> list[Any]:
    """The blocks a runtime's outputs are read at, before its outputs: its residual additions (where a MobileNet's,
    ResNet's or EfficientNet's block ends) where there are at least 4, else ``every`` computing step; at most
    :data:`MAX_BLOCKS` - 1, evenly spaced, the first and last kept."""
    chosen = residual if len(residual) >= 4 else every
    n = MAX_BLOCKS - 1
    return chosen if len(chosen) <= n else [chosen[round(i * (len(chosen) - 1) / (n - 1))] for i in range(n)]


def relative_l2(got: Any, exact: Any) -> float:
    """||got - exact|| / ||exact|| in float64 (inf where ``got`` is not finite): a block's error."""
    a, b = np.asarray(got, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30)) if np.isfinite(a).all() \
        else float("inf")


def divergence(blocks: dict[str, Any], threshold: float) -> dict[str, Any]:
    """Where a failed cell's outputs went wrong: ``blocks`` (each block's relative error against the same program
    computed exactly, in network order: ``names``, ``errors``; ``against``, what it was computed against: the same
    program in FP64 unless said) and the first block past ``threshold`` (the cell's gate on its outputs), or none: then
    the runtime's own computation did not take it away, and the program itself (weights, graph) computes something
    else than the reference."""
    names, errors = list(blocks["names"]), [float(e) for e in blocks["errors"]]
    against = blocks.get("against") or "the same program in FP64"
    first = next((i for i, e in enumerate(errors) if not e <= threshold), None)  # NaN and inf are past it
    said = (f"diverges first at {names[first]} (relative error {errors[first]:.2g} > {threshold:.2g}, against "
            f"{against})") if first is not None else (
        f"no block diverges from {against} (largest relative error {max(errors):.2g} <= {threshold:.2g}): the program "
        "itself computes something else than the reference, not the runtime's computation of it")
    return {"names": names, "errors": errors, "threshold": threshold, "first": None if first is None else names[first],
            "method": blocks.get("method") or BLOCKS_METHOD, "said": said, "against": against}


def not_applicable(reason: str) -> dict[str, Any]:
    return {
        "status": "not_applicable", "reason": reason, "max_abs_err": None, "max_rel_err": None,
        "cosine": None, "top1_agreement": None,
    }


def combine(reference: dict[str, Any], timed: dict[str, Any] | None, batch_size: int) -> dict[str, Any]:
    """One parity block from the check on the 16 reference inputs and the one on the timed batch (None:
    no reference for it): the worse metrics of the two, failed if either failed, naming which."""
    checks = {f"reference inputs ({reference.get('inputs')})": reference}
    if timed is not None:
        checks[f"timed batch ({batch_size})"] = timed
    failed = [f"{name}: {c.get('reason')}" for name, c in checks.items() if c["status"] != "passed"]
    values = [c for c in checks.values() if c.get("max_rel_err") is not None]
    out = dict(reference)

    def worst(key: str, pick: Any) -> Any:
        vals = [c[key] for c in values if c.get(key) is not None]
        return pick(vals) if vals else None

    parts = {name: part for c in checks.values() for name, part in (c.get("outputs") or {}).items()
             if part.get("status") == "failed" or name not in (reference.get("outputs") or {})}
    if parts:  # a part that failed on the timed batch shows as failed, with the timed batch's figures
        out["outputs"] = {**(reference.get("outputs") or {}), **parts}
    out.update(status="failed" if failed else "passed", reason="; ".join(failed) or None,
               max_abs_err=worst("max_abs_err", max), max_rel_err=worst("max_rel_err", max),
               max_rel_err_per_image=worst("max_rel_err_per_image", max),
               cosine=worst("cosine", min), top1_agreement=worst("top1_agreement", min),
               checked_batch_sizes=[int(reference.get("inputs") or 0)] + ([batch_size] if timed is not None else []))
    return out


def sanity(outputs: np.ndarray) -> dict[str, Any]:
    """A framework with its own weights cannot be compared with the reference: its outputs on the
    reference inputs must at least be finite and vary across classes and inputs (not as many distinct
    top-1 classes as a reference needs: nothing is compared with them). Such a row is shown as
    unverified and never ranked."""
    out = np.asarray(outputs, dtype=np.float64)
    block = not_applicable("own-weights")
    try:
        facts = check_reference(out, classifier=False)
        if facts["std_across_classes"] < 1e-3:
            raise DegenerateReference(f"outputs hardly vary across classes (std {facts['std_across_classes']:.3g}; "
                                      "need >= 1e-3)")
    except DegenerateReference as exc:
        return {**block, "status": "failed", "reason": f"own weights, and {exc}"}
    return {**block, "sanity": facts}
