import dataclasses

import numpy as np
import pytest

from inferbench.measure.parity import THRESHOLDS, DegenerateReference, check_reference, compare


def _reference(n=16, classes=1000, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 1.0, (n, classes)).astype(np.float32)


def test_identical_outputs_pass():
    ref = _reference()
    p = compare(ref, ref.copy())
    assert p["status"] == "passed"
    assert p["max_abs_err"] == 0.0 and p["cosine"] == pytest.approx(1.0) and p["top1_agreement"] == 1.0


def test_fp32_rounding_noise_passes_but_a_wrong_export_fails():
    ref = _reference()
    rng = np.random.default_rng(1)
    scale = np.abs(ref).max()
    ok = ref + rng.normal(0, 1e-5 * scale / 4, ref.shape)
    assert compare(ref, ok)["status"] == "passed"
    deep = ref + rng.normal(0, 1.3e-4 * scale / 4, ref.shape)  # Inception V3's correct exports: ~1.3e-4
    assert compare(ref, deep)["status"] == "passed"
    everywhere = ref + rng.uniform(-9e-4, 9e-4, ref.shape) * scale  # within 1e-3, but off on every logit
    p = compare(ref, everywhere)
    assert p["max_rel_err"] < 1e-3 and p["status"] == "failed" and "cosine" in p["reason"]
    wrong = ref.copy()
    wrong[:, 3] += 0.01 * scale  # one output channel off by 1% of the logit range
    p = compare(ref, wrong)
    assert p["status"] == "failed" and "max_rel_err" in p["reason"]


def test_fp16_thresholds_are_looser():
    ref = _reference()
    scale = np.abs(ref).max()
    half = ref + np.random.default_rng(3).normal(0, 1e-3 * scale, ref.shape)
    assert compare(ref, half, "fp32")["status"] == "failed"
    assert compare(ref, half, "fp16")["status"] == "passed"
    assert THRESHOLDS["fp16"].max_rel_err > THRESHOLDS["fp32"].max_rel_err


def test_top1_flip_at_a_near_tie_is_tolerated_but_not_elsewhere():
    ref = _reference()
    i = 0
    top = ref[i].argmax()
    second = np.argsort(ref[i])[-2]
    tie = ref.copy()
    tie[i, second] = tie[i, top] - 1e-5  # near-tie in the reference
    cand = tie.copy()
    cand[i, second] = tie[i, top] + 1e-5
    p = compare(tie, cand)
    assert p["top1_agreement"] < 1.0 and p["status"] == "passed"
    far = ref.copy()
    far[i, second] = ref[i, top] + 1.0
    assert compare(ref, far)["status"] == "failed"


def test_shape_mismatch_and_nan_fail():
    ref = _reference()
    assert compare(ref, ref[:, :10])["status"] == "failed"
    bad = ref.copy()
    bad[0, 0] = np.nan
    p = compare(ref, bad)
    assert p["status"] == "failed" and "non-finite" in p["reason"]


def test_degenerate_references_are_refused():
    uniform = np.full((16, 1000), 0.001, dtype=np.float32)  # stock MobileNetV3 softmax
    with pytest.raises(DegenerateReference):
        check_reference(uniform)
    tiny = _reference() * 1e-11  # stock random-init logits
    with pytest.raises(DegenerateReference):
        check_reference(tiny)
    same_for_every_input = np.tile(_reference(1), (16, 1))
    with pytest.raises(DegenerateReference):
        check_reference(same_for_every_input)
    facts = check_reference(_reference())
    assert facts["distinct_top1"] >= 3


def test_a_model_with_a_large_own_spread_gets_a_wider_gate_and_others_do_not():
    """ResNet-152's correct exports land at up to 2.7e-3 of an image's max |logit| where its own eager run
    differs from the graph reference by up to 1.55e-3 per image: each image within 3x that spread (the cosine gap
    within 9x) passes them; a model with a small spread keeps the fixed gate, a broken export still fails the
    wider one, and a spread that is not finite, measured another way or huge widens nothing or only so far."""
    from inferbench.measure.parity import SPREAD_METHOD, WIDEST

    ref = _reference()
    scale = np.abs(ref).max()
    rng = np.random.default_rng(5)
    export = ref + rng.normal(0, 1.8e-3 * scale / 4, ref.shape)  # max error ~1.8e-3 of the range
    assert compare(ref, export)["status"] == "failed"
    deep = {"max_rel_err": 1.55e-3, "cosine": 1 - 3.26e-7, "method": SPREAD_METHOD}
    p = compare(ref, export, fp32_spread=deep)
    assert p["status"] == "passed", p["reason"]
    th = p["thresholds"]
    assert th["widened"] and th["max_rel_err"] == THRESHOLDS["fp32"].max_rel_err
    assert th["per_image_max_rel_err"] == pytest.approx(3 * 1.55e-3) and p["max_rel_err_per_image"] < 3 * 1.55e-3
    assert th["min_cosine"] == pytest.approx(1 - 9 * 3.26e-7)
    shallow = {"max_rel_err": 1e-5, "cosine": 1 - 1e-10, "method": SPREAD_METHOD}
    p = compare(ref, export, fp32_spread=shallow)
    assert p["status"] == "failed" and not p["thresholds"]["widened"]
    assert p["thresholds"]["per_image_max_rel_err"] is None
    wrong = ref.copy()
    wrong[:, 3] += 0.01 * scale
    assert compare(ref, wrong, fp32_spread=deep)["status"] == "failed"
    for useless in ({**deep, "max_rel_err": float("inf")}, {**deep, "cosine": float("nan")},
                    {**deep, "method": "keras eager (one image per call) vs graph reference"}):  # an older cache's
        p = compare(ref, export, fp32_spread=useless)
        assert p["status"] == "failed" and not p["thresholds"]["widened"]
    garbage = ref + rng.normal(0, 0.5, ref.shape)  # noise of half a logit
    p = compare(ref, garbage, fp32_spread={"max_rel_err": 0.5, "cosine": 0.5, "method": SPREAD_METHOD})
    assert p["status"] == "failed"  # a huge spread widens only to WIDEST
    assert p["thresholds"]["per_image_max_rel_err"] == WIDEST.max_rel_err
    assert p["thresholds"]["min_cosine"] == pytest.approx(WIDEST.min_cosine)


def test_the_spread_is_measured_image_by_image():
    """A batch's error relative to its max |reference| hides an image with small logits (ResNet-152's 16 reference
    images span max |logit| 2.7 to 66): the spread takes each image relative to its own."""
    from inferbench.measure.parity import spread

    ref = _reference()
    ref[0] *= 20  # one image with logits 20x the others'
    other = ref.copy()
    other[1] += 1e-3 * np.abs(ref[1]).max()  # 1e-3 of image 1's own range
    s = spread(ref, other)
    assert s["max_rel_err"] == pytest.approx(1e-3, rel=1e-3)
    assert compare(ref, other)["max_rel_err"] < 1e-4  # the batch's view: 20x smaller
    assert 0.999 < s["cosine"] < 1.0 and s["method"]


def _rounded(ref, rel, seed):
    """``ref`` as a reduced-precision computation gives it: each image off by noise of ``rel`` of its own max
    |logit| at the largest (a stand-in for rounding through depth, drawn independently of the gate's own model)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_t(5, ref.shape)
    noise /= np.abs(noise).max(axis=1, keepdims=True)
    return ref + rel * np.abs(ref).max(axis=1, keepdims=True) * noise


def test_a_reduced_precision_gate_is_relative_to_the_models_own_error_in_it():
    """FP16 and BF16 are judged against the model's own error in that precision (a trusted computation of the same
    weights, measured at export): a correct export that rounds about as much passes; one whose error is 2.5x the
    model's own fails (the factor is 2), though it would pass the fixed gate; the same export passes or fails as the
    model's own error says (the gate is not a constant); the gate is never wider than the ceiling nor stricter than
    FP32's; TF32 takes FP16's; without a measurement the fixed thresholds judge."""
    from inferbench.measure.parity import CEILINGS, SENSITIVITY_FACTOR, SENSITIVITY_METHOD, spread

    ref = _reference()
    own = {"fp16": {**spread(ref, _rounded(ref, 4e-3, 1)), "method": SENSITIVITY_METHOD},
           "bf16": {**spread(ref, _rounded(ref, 3e-2, 2)), "method": SENSITIVITY_METHOD}}
    for precision, rel in (("fp16", 4e-3), ("bf16", 3e-2), ("tf32", 4e-3)):
        correct = _rounded(ref, 0.8 * rel, 3)  # another implementation: other rounding, about as much of it
        p = compare(ref, correct, precision, sensitivity=own)
        assert p["status"] == "passed" and p["thresholds"]["relative"], (precision, p["reason"])
        measured = own[{"tf32": "fp16"}.get(precision, precision)]["max_rel_err"]
        assert p["thresholds"]["per_image_max_rel_err"] == pytest.approx(SENSITIVITY_FACTOR * measured)
        worse = _rounded(ref, 2.5 * rel, 4)
        p = compare(ref, worse, precision, sensitivity=own)
        assert p["status"] == "failed" and "per image" in p["reason"] and "own" in p["reason"], p["reason"]
    # FP16 2.5x its own error still passes the fixed gate: the relative one is what catches it
    assert compare(ref, _rounded(ref, 1e-2, 4), "fp16")["status"] == "passed"
    # the same correct export, judged for a model whose own FP16 error is 10x smaller: fails
    robust = {"fp16": {**spread(ref, _rounded(ref, 4e-4, 1)), "method": SENSITIVITY_METHOD}}
    assert compare(ref, _rounded(ref, 3.2e-3, 3), "fp16", sensitivity=robust)["status"] == "failed"
    # bounds: an enormous own error widens only to the ceiling; a tiny one tightens only to the FP32 gate
    huge = {"fp16": {"max_rel_err": 0.9, "cosine": 0.2, "method": SENSITIVITY_METHOD}}
    p = compare(ref, _rounded(ref, 0.2, 5), "fp16", sensitivity=huge)
    assert p["status"] == "failed" and p["thresholds"]["per_image_max_rel_err"] == CEILINGS["fp16"].max_rel_err
    assert p["thresholds"]["min_cosine"] == pytest.approx(CEILINGS["fp16"].min_cosine)
    tiny = {"fp16": {"max_rel_err": 1e-7, "cosine": 1.0, "method": SENSITIVITY_METHOD}}
    p = compare(ref, _rounded(ref, 5e-4, 5), "fp16", sensitivity=tiny)
    assert p["status"] == "passed" and p["thresholds"]["per_image_max_rel_err"] == THRESHOLDS["fp32"].max_rel_err
    # not measured, measured another way, or not finite: the fixed thresholds
    for none in (None, {}, {"fp16": {**own["fp16"], "method": "other"}}, {"fp16": {**own["fp16"], "cosine": np.nan}},
                 {"fp16": {"error": "ValueError: cannot rebuild"}}):
        p = compare(ref, _rounded(ref, 1e-2, 4), "fp16", sensitivity=none)
        assert p["status"] == "passed" and not p["thresholds"].get("relative")
        assert p["thresholds"]["max_rel_err"] == THRESHOLDS["fp16"].max_rel_err


def test_a_reduced_precision_gate_judges_each_image_against_its_own_logits():
    """One image with small logits, off by 4x the model's own error of its own range, fails, though the batch's max
    error relative to the largest logit of all stays within the gate."""
    from inferbench.measure.parity import SENSITIVITY_METHOD, spread

    ref = _reference()
    ref[0] *= 20  # one image with logits 20x the others'
    own = {"fp16": {**spread(ref, _rounded(ref, 4e-3, 1)), "method": SENSITIVITY_METHOD}}
    bad = _rounded(ref, 3e-3, 3)
    bad[5] += 4 * 4e-3 * np.abs(ref[5]).max() * np.sign(np.random.default_rng(6).standard_normal(ref.shape[1]))
    p = compare(ref, bad, "fp16", sensitivity=own)
    assert p["max_rel_err"] < p["thresholds"]["per_image_max_rel_err"] and p["status"] == "failed", p
    assert "per image" in p["reason"], p["reason"]


def _agreement_case(n, noise, seed):
    """FP32 logits with a heavy-tailed margin between the top classes (as a seeded network's), and a computation of
    them with independent rounding noise of relative size ``noise`` (known truth: how often a top class flips is set
    by the noise, not by anything the estimator models)."""
    from inferbench.measure.parity import agreements

    rng = np.random.default_rng(seed)
    ref = rng.standard_t(3, (n, 1000)) + 8 * rng.random((n, 1))
    scale = np.abs(ref).max(axis=1, keepdims=True)
    return ref, lambda s, k: ref + rng.normal(0, noise * s * scale / 3, ref.shape), agreements


def test_agreement_over_many_inputs_passes_a_computation_as_noisy_as_the_models_own_and_fails_a_noisier_one():
    from inferbench.measure.parity import AGREEMENT_METHOD, agreement

    ref, noisy, agreements = _agreement_case(1000, 0.03, 0)
    own = {"fp16": {**agreements(ref, noisy(1.0, 0)), "method": AGREEMENT_METHOD}}
    assert 0.85 < own["fp16"]["top1"] / 1000 < 0.99  # the model's own precision flips some near-ties
    right = agreement(ref, noisy(1.0, 1), "fp16", own)
    assert right["status"] == "passed", right["reason"]
    lo, hi = right["top1"]["ci95"]
    assert lo < right["top1"]["agreement"] < hi and hi - lo < 0.06
    assert right["top1"]["allowed_disagreement"] == pytest.approx(2 * (1 - own["fp16"]["top1"] / 1000))
    wrong = agreement(ref, noisy(4.0, 2), "fp16", own)
    assert wrong["status"] == "failed" and "top-1 agreement with FP32" in wrong["reason"] \
        and "the model's own FP16" in wrong["reason"]
    other = agreement(ref, _agreement_case(1000, 0.03, 5)[0], "fp16", own)  # another model's outputs
    assert other["status"] == "failed" and other["top5"]["agreement"] < 0.1
    tf32 = agreement(ref, noisy(1.0, 3), "tf32", own)  # TF32 is judged by the model's own FP16
    assert tf32["own"] == own["fp16"] and tf32["status"] == "passed"


def test_agreement_without_the_models_own_is_judged_by_the_ceiling_and_never_below_the_floor():
    from inferbench.measure.parity import AGREEMENT_CEILINGS, AGREEMENT_FLOOR, AGREEMENT_METHOD, agreement

    ref = _reference(n=400, seed=3)
    exact = {"bf16": {"top1": 400, "top5": 400, "inputs": 400, "method": AGREEMENT_METHOD}}
    p = agreement(ref, ref.copy(), "bf16", exact)
    assert p["status"] == "passed" and p["top1"]["allowed_disagreement"] == AGREEMENT_FLOOR
    p = agreement(ref, ref.copy(), "bf16", None)
    assert p["own"] is None and p["top1"]["allowed_disagreement"] == AGREEMENT_CEILINGS["bf16"]["top1"]
    bad = ref.copy()
    bad[:, 0] = np.inf
    p = agreement(ref, bad, "bf16", None)
    assert p["status"] == "failed" and p["top1"]["agreement"] == 0.0 and "ceiling" in p["reason"]
    other_count = {"bf16": {**exact["bf16"], "inputs": 999}}  # measured on another number of inputs: not used
    assert agreement(ref, ref.copy(), "bf16", other_count)["own"] is None


def test_the_wilson_interval_covers_a_known_proportion_at_its_nominal_rate():
    from inferbench.measure.stats import wilson

    rng = np.random.default_rng(0)
    for p, n in ((0.98, 1000), (0.5, 200), (0.995, 1000), (0.2, 50)):
        draws = rng.binomial(n, p, 4000)
        covered = np.mean([lo <= p <= hi for lo, hi in (wilson(int(k), n) for k in draws)])
        assert 0.92 < covered < 0.975, (p, n, covered)
    assert wilson(0, 0) is None and wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == pytest.approx(1.0)


def test_divergence_names_the_first_block_past_the_gate_or_says_no_block_is():
    from inferbench.measure.parity import divergence

    names = [f"features.{i}" for i in range(12)]
    growth = [1e-3 * 1.3 ** i for i in range(12)]  # rounding that grows with depth, as in a correct export
    jump = growth[:5] + [g * 40 for g in growth[5:]]  # a defect at block 5
    found = divergence({"names": names, "errors": jump}, 0.04)
    assert found["first"] == "features.5" and found["said"].startswith("diverges first at features.5 (relative error")
    assert divergence({"names": names, "errors": growth}, 0.04)["first"] is None
    assert "computes something else than the reference" in divergence({"names": names, "errors": growth}, 0.04)["said"]
    overflow = growth[:-1] + [float("inf")]  # the logits overflow
    assert divergence({"names": names, "errors": overflow}, 0.04)["first"] == "features.11"
    assert divergence({"names": names, "errors": growth[:3] + [float("nan")] + growth[4:]}, 0.04)["first"] == \
        "features.3"


def test_a_failed_check_says_where_it_diverged_where_the_runtime_can_tell():
    from inferbench.scenarios.gates import where_it_diverged

    class Blocks:  # the harness's side only: what a runner that can read its blocks returns
        def __init__(self, result):
            self.result = result

        def block_errors(self, inputs):
            if isinstance(self.result, Exception):
                raise self.result
            return self.result

    failed = {"status": "failed", "reason": "max_rel_err per image 0.3 > 0.04", "thresholds": {
        "max_rel_err": 0.04, "per_image_max_rel_err": 0.04}}
    curve = {"names": ["features.0", "features.1", "classifier"], "errors": [1e-3, 0.2, 0.3]}
    out = where_it_diverged(failed, Blocks(curve), np.zeros((16, 8, 8, 3)), lambda _: None)
    assert out["blocks"]["first"] == "features.1" and out["status"] == "failed"
    assert out["reason"] == ("max_rel_err per image 0.3 > 0.04; diverges first at features.1 (relative error 0.2 > "
                             "0.04, against the same program in FP64)")
    assert where_it_diverged(failed, Blocks(None), None, lambda _: None) == failed  # cannot tell: as it was
    broke = where_it_diverged(failed, Blocks(RuntimeError("no")), None, lambda _: None)
    assert broke["reason"] == failed["reason"] and broke["blocks"] == {"error": "RuntimeError: no"}
    passed = {**failed, "status": "passed"}
    assert where_it_diverged(passed, Blocks(RuntimeError("never read")), None, lambda _: None) == passed
    # INT8 has no gate on its logits (its accuracy failed it): its blocks are judged at a 0.3 error against FP32, not
    # at the 1e-3 a check without thresholds would fall back to (every INT8 block is past that)
    int8 = {"status": "failed", "precision": "int8", "reason": "accuracy: top-1 0.40 below MLPerf's 99%",
            "thresholds": {"gate": "none on the logits"}}
    quantised = {"names": ["add_1", "add_2", "add_3", "outputs"], "errors": [0.04, 0.06, 0.6, 0.9],
                 "against": "the FP32 ONNX model"}
    out = where_it_diverged(int8, Blocks(quantised), None, lambda _: None)
    assert out["blocks"]["first"] == "add_3" and out["blocks"]["threshold"] == 0.3
    assert "diverges first at add_3 (relative error 0.6 > 0.3, against the FP32 ONNX model)" in out["reason"]


def test_the_agreement_inputs_are_regrouped_into_whole_timed_batches_in_order():
    from inferbench.scenarios.gates import rebatched

    for size in (1, 7, 32, 50, 64):  # smaller and larger than a chunk of 32, and the last chunk partial
        chunks, n = [], 0
        for s in [32] * 31 + [8]:
            chunks.append(np.arange(n, n + s))
            n += s
        out = list(rebatched(iter(chunks), size))
        assert np.concatenate(out).tolist() == list(range(1000))
        assert all(len(o) == size for o in out[:-1]) and 0 < len(out[-1]) <= size
    assert list(rebatched(iter([]), 8)) == []


def test_an_agreement_that_cannot_be_counted_says_why_and_never_takes_the_cell_down(tmp_path):
    """The harness's side of a cell's agreement (a stub runner: it computes a fixed function of its inputs): counted
    where the export's outputs are whole, ``not_measured`` with the reason where they are missing, are no class scores
    or cannot be computed, and failed where the runtime's outputs have another size."""
    from fakes import Stub

    from inferbench.base.device import Device
    from inferbench.exporters import cache
    from inferbench.registry.artifacts import agreement_reference
    from inferbench.registry.frameworks import FRAMEWORKS
    from inferbench.registry.inputs import agreement_inputs
    from inferbench.registry.models import get_model
    from inferbench.scenarios.gates import check_agreement
    from inferbench.spec import CellJob, CellKey, RunConfig, RunnerOptions, TimingConfig

    weights = np.random.default_rng(0).normal(size=(32 * 32 * 3, 10))

    def logits(x):
        return x.reshape(len(x), -1) @ weights

    config = RunConfig(weights="random", seed=0, device=Device("cpu"), threads=1,
                       timing=TimingConfig(0, 0.0, 0.0, 3, 1), options=RunnerOptions(), cache_dir=str(tmp_path),
                       agreement_inputs=40)
    job = CellJob(CellKey("mobilenet_v3_large", 32, 8, "torch-native", "bf16"), FRAMEWORKS["torch-native"], config,
                  str(tmp_path), None, (8,))
    said = []
    missing = check_agreement(job, Stub(logits), said.append)
    assert missing["status"] == "not_measured" and "export failed" in missing["reason"]

    def exported(reference):
        (tmp_path / "agreement").mkdir(exist_ok=True)
        np.save(tmp_path / agreement_reference(40), reference)
        cache.record(tmp_path, "agreement", {"variants": ["40"], "files": cache.hash_tree(
            tmp_path / agreement_reference(40), tmp_path)}, {})

    inputs = np.concatenate(list(agreement_inputs(get_model("mobilenet_v3_large"), 32, 0, 40)))
    exported(logits(inputs))
    right = check_agreement(job, Stub(logits), said.append)
    assert right["status"] == "passed" and right["top1"]["agreement"] == 1.0 and right["inputs"] == 40
    assert said[-1] == "parity check: agreement over 40 inputs"
    # the cell's other processes take its first one's count (a runner that would raise is never called), not its
    # verdict's role (each process judges that again)
    from inferbench.scenarios.gates import counted, reusable

    taken = dataclasses.replace(job, judged=reusable({"agreement": {**right, "decides": True}, "status": "passed"}))
    again = counted(taken, "agreement", check_agreement, Stub(lambda x: 1 / 0), said.append)
    assert again["status"] == "passed" and again["top1"]["agreement"] == 1.0 and "decides" not in again
    assert again["taken"] == "from the cell's first process" and "taken" not in right
    assert said[-1] == "parity check: agreement as the cell's first process counted it"
    assert counted(job, "agreement", check_agreement, Stub(logits), said.append)["inputs"] == 40  # counted here
    assert check_agreement(job, Stub(lambda x: -logits(x)), said.append)["status"] == "failed"
    broken = check_agreement(job, Stub(lambda x: 1 / 0), said.append)
    assert broken["status"] == "not_measured" and "ZeroDivisionError" in broken["reason"]
    wrong_size = check_agreement(job, Stub(lambda x: logits(x)[:, :5]), said.append)
    assert wrong_size["status"] == "failed" and "output size" in wrong_size["reason"]
    exported(logits(inputs)[:, :1])  # one output: no class scores to agree on
    assert "no class scores" in check_agreement(job, Stub(logits), said.append)["reason"]


def test_images_left_empty_in_both_outputs_agree_and_an_empty_candidate_alone_does_not():
    """A suppression padded to its cap leaves an image with no box all zeros, in the reference and a correct runtime
    alike: equal outputs (cosine 1, no error), not a failure; a candidate of zeros where the reference has boxes still
    fails, as a degenerate export must."""
    from inferbench.measure.parity import compare, min_cosine

    ref = np.array([[3.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    assert min_cosine(ref, ref.copy()) == 1.0
    assert compare(ref, ref.copy(), kind="values")["status"] == "passed"
    assert compare(np.zeros((2, 3)), np.zeros((2, 3)), kind="values")["max_rel_err"] == 0.0
    lost = np.zeros_like(ref)
    assert min_cosine(ref, lost) == 0.0 and compare(ref, lost, kind="values")["status"] == "failed"
    assert compare(np.zeros((2, 3)), np.ones((2, 3)), kind="values")["status"] == "failed"
