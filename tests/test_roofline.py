"""Each row against its machine's compute and memory roofs (inferbench/records/roofline.py), checked where the truth
is known: a large matrix product is compute-bound near its roof, a large copy memory-bound near its roof, and a
tiny product overhead-bound, each timed by the one loop (measure/timing.run_block) against roofs measured in the
same process (measure/peak.py), so that the machine's load moves both sides alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferbench.measure import peak
from inferbench.measure.timing import run_block
from inferbench.records.roofline import bytes_per_image, limit, roofline
from inferbench.spec import TimingConfig


def _throughput(call) -> float:
    """Calls a second by the one loop: one block's median latency."""
    block = run_block(call, lambda _: None, TimingConfig(min_duration_s=0.6, min_iterations=5, rounds=1), 0)
    return 1.0 / float(np.median(block.latencies_s))


def _record(resolution: str, params: int, flops: float, inner: int, outputs: int, throughput: float,
            measured: dict) -> dict:
    """A record as the roofline reads it: a "model" whose input is 3 x the resolution's pixels and whose weights,
    FLOPs, intermediates and outputs are given."""
    return {"precision": "fp32", "batch_size": 1, "resolution": resolution, "throughput_per_s": throughput,
            "model_stats": {"params": params, "flops_per_image": flops, "activations_per_image": inner},
            "outputs": [{"name": "out", "shape": [outputs]}], "environment": {"peak_fp32": measured}}


@pytest.fixture(scope="module")
def roofs():
    """This machine's roofs, measured here as a run measures them (one thread: the kernels below use one)."""
    measured = peak.measure("cpu", threads=1)
    assert measured["gflops"] > 0 and measured["memory"]["gbps"] > 0
    return {**measured, "valid": True}


def test_a_large_matrix_product_is_compute_bound_near_its_roof(roofs):
    n = 768  # A is the "image": 3 x 384 x 512 = 768 x 768 values; B the weights; C the output
    a, b = (np.random.default_rng(0).standard_normal((n, n), dtype=np.float32) for _ in range(2))
    rec = _record("384x512", n * n, 2.0 * n ** 3, 1, n * n, _throughput(lambda: a @ b), roofs)
    rate = rec["throughput_per_s"] * 2.0 * n ** 3 / 1e9
    row = roofline(rec, rate, roofs["gflops"])
    assert row["limit"] == "compute" and row["compute_roof_pct"] > 25, row
    assert row["memory_roof_pct_high"] < 10  # its bytes are nothing beside its FLOPs


def test_a_large_copy_is_memory_bound_near_its_roof(roofs):
    # an "image" of 4096 x W float32 values, W so that it alone is beyond the last-level cache (at least 192 MiB in,
    # 192 MiB out; a Xeon of these machines has 480 MiB of L3)
    width = max(4096, -(-(peak.last_level_cache() or 0) // (3 * 4096 * 4)))
    values = 3 * 4096 * width
    src, dst = np.ones(values, dtype=np.float32), np.empty(values, dtype=np.float32)
    rec = _record(f"4096x{width}", 1, float(values), 1, values, _throughput(lambda: np.copyto(dst, src)), roofs)
    row = roofline(rec, rec["throughput_per_s"] * values / 1e9, roofs["gflops"])
    assert row["limit"] == "memory" and 25 < row["memory_roof_pct_low"] < 150, row
    assert row["compute_roof_pct"] < 5 and not row["cache_resident"]


def test_a_reduced_precision_product_is_placed_under_its_own_precision_s_roof(roofs):
    """A BF16 (or INT8) product through torch, timed by the one loop, lands compute-bound under the roof measured for
    that precision; under FP32's it would read above 100% where the CPU computes BF16 faster. A CPU without the
    precision's instructions has no such roof: the row gets no share, and the roof says why."""
    reduced = roofs["by_precision"]
    precision = next((p for p in ("bf16", "int8") if reduced[p]["gflops"]), None)
    if precision is None:  # no BF16 or INT8 instructions (or no torch): no roof, said, and no share for the row
        assert all(reduced[p]["why"] for p in ("bf16", "int8"))
        rec = {**_record("16x16", 1, 1e6, 1, 1, 100.0, roofs), "precision": "bf16"}
        assert roofline(rec, 0.1, None)["compute_roof_pct"] is None
        return
    import torch

    from inferbench.records.table import usable_peak

    torch.set_num_threads(1)
    n = 1024
    if precision == "int8":
        q = torch.randint(-64, 64, (n, n), dtype=torch.int8)
        call = lambda: torch._int_mm(q, q)  # noqa: E731
    else:
        a = torch.randn(n, n).to(torch.bfloat16)
        call = lambda: a @ a  # noqa: E731
    rec = {**_record("512x512", n * n, 2.0 * n ** 3, 1, n * n, _throughput(call), roofs), "precision": precision}
    own = usable_peak(rec)
    assert own == reduced[precision]["gflops"] and own != roofs["gflops"]
    rate = rec["throughput_per_s"] * 2.0 * n ** 3 / 1e9
    row = roofline(rec, rate, own)
    assert row["limit"] == "compute" and 20 < row["compute_roof_pct"] < 130, (row, own, roofs["gflops"])


def test_a_tiny_product_is_overhead_bound(roofs):
    a = np.ones((4, 4), dtype=np.float32)
    rec = _record("4x4", 16, 128.0, 16, 16, _throughput(lambda: a @ a), roofs)
    row = roofline(rec, rec["throughput_per_s"] * 128 / 1e9, roofs["gflops"])
    assert row["limit"] == "overhead" and row["cache_resident"], row


def test_the_bytes_range_and_the_limit_rule():
    """Perfect fusion: the weights once per batch plus the image and the outputs; no fusion adds every intermediate
    written and read once; FP16 halves and INT8 quarters the weights and intermediates (the image stays float32)."""
    rec = {"precision": "fp32", "batch_size": 4, "resolution": 10, "outputs": [{"shape": [1000]}],
           "model_stats": {"params": 1000, "activations_per_image": 500}}
    io = 4 * (10 * 10 * 3 + 1000)
    assert bytes_per_image(rec) == (4 * 1000 / 4 + io, 4 * 1000 / 4 + io + 2 * 4 * 500)
    assert bytes_per_image({**rec, "precision": "int8"}) == (1000 / 4 + io, 1000 / 4 + io + 2 * 500)
    assert bytes_per_image({**rec, "model_stats": {}}) is None
    # seconds an image at the compute roof, the memory roof fused and unfused, and as measured
    assert limit(1.0, 0.1, 0.5, 1.2, 80, 8) == "compute"
    assert limit(0.1, 0.5, 2.0, 0.6, 15, 80) == "memory"
    assert limit(0.3, 0.1, 1.0, 0.5, 60, 20) == "compute" and limit(0.3, 0.1, 1.0, 0.5, 20, 60) == "memory"
    assert limit(0.01, 0.01, 0.02, 1.0, 1, 1) == "overhead"


def _committed(tmp_path, gbps: float = 35.7):
    """The committed CPU sweep's records (2-core AMD EPYC), each given a memory roof as a run now measures it."""
    import shutil

    src = Path(__file__).resolve().parents[1] / "benchmark_results" / "sweeps" / "cpu-2core-20261126"
    dst = tmp_path / "sweep"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("report"))
    for f in dst.glob("*.json"):
        d = json.loads(f.read_text())
        if (d.get("environment") or {}).get("peak_fp32"):
            d["environment"]["peak_fp32"]["memory"] = {"gbps": gbps, "last_level_cache_mb": 32.0, "threads": 2}
            f.write_text(json.dumps(d))
    return dst


def test_each_row_carries_its_roofs_in_the_table_the_csv_the_document_and_the_report(tmp_path):
    from inferbench.cli.jsonout import cell_summary
    from inferbench.cli.summary import format_summary
    from inferbench.commands import main as inferbench
    from inferbench.records.load import iter_records
    from inferbench.records.table import SUMMARY_COLUMNS, summary_row

    folder = _committed(tmp_path)
    recs, _ = iter_records(folder)
    (one,) = [r for r in recs if (r["model"], r["batch_size"], r["framework"]) == ("mobilenet_v3_large", 1, "onnxrt")]
    row = summary_row(one)
    assert {"bytes_per_image_low", "limit", "cache_resident"} <= set(SUMMARY_COLUMNS)
    # MobileNetV3-Large: 5.48M weights (21.9 MB) + the image and the logits, to 145 MB with every layer's output
    assert 22e6 < row["bytes_per_image_low"] < 23e6 and 140e6 < row["bytes_per_image_high"] < 150e6
    assert row["limit"] == "compute" and row["cache_resident"] is True and row["memory_roof_gbps"] == 35.7
    assert row["memory_roof_pct_low"] < row["compute_roof_pct"] < row["memory_roof_pct_high"]
    assert cell_summary(one)["roofs"]["limit"] == "compute"
    table = format_summary([one])
    assert "limit (memory roof)" in table and "compute (" in table and ", cache)" in table
    assert inferbench(["report", str(folder), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    section = md[md.index("## Against the machine's roofs"):]
    assert "(36 GB/s)" in section.split("\n\n")[1] and (tmp_path / "rep" / "roofline.png").stat().st_size > 0
    assert "| mobilenet_v3_large@224 | onnxrt+tuned | 1 |" in section
    # the same records without a memory roof (measured before it was): bytes, no shares, no limit, no section
    bare = summary_row({**one, "environment": {**one["environment"], "peak_fp32": {
        k: v for k, v in one["environment"]["peak_fp32"].items() if k != "memory"}}})
    assert bare["bytes_per_image_low"] and bare["limit"] is None and bare["memory_roof_pct_low"] is None
    # an INT8 row: its narrower bytes against the memory roof, but no share of an FP32 roof and so no limit...
    int8 = summary_row({**one, "precision": "int8"})
    assert int8["bytes_per_image_low"] < row["bytes_per_image_low"] and int8["memory_roof_pct_low"] is not None
    assert int8["compute_roof_pct"] is None and int8["limit"] is None and int8["fraction_of_peak"] is None
    # ...until its own roof is measured (a run now measures it beside FP32's): its share of that one, and a limit
    peak = {**one["environment"]["peak_fp32"], "by_precision": {"int8": {"gflops": 4 * one["environment"][
        "peak_fp32"]["gflops"]}}}
    own = summary_row({**one, "precision": "int8", "environment": {**one["environment"], "peak_fp32": peak}})
    assert own["compute_roof_pct"] == pytest.approx(row["compute_roof_pct"] / 4) and own["limit"] is not None
    assert own["fraction_of_peak"] == pytest.approx(row["fraction_of_peak"] / 4)
    # the report's frame reads the same roof for each row: FP32's for FP32, INT8's own for INT8, none without one
    from inferbench.records.load import load

    path = next(f for f in folder.glob("*.json") if json.loads(f.read_text()).get("framework") == "onnxrt"
                and json.loads(f.read_text()).get("batch_size") == 1 and "large" in f.read_text())
    d = json.loads(path.read_text())
    (tmp_path / "int8").mkdir()
    for name, precision, by in (("fp32", "fp32", None), ("own", "int8", peak["by_precision"]), ("none", "int8", None)):
        (tmp_path / "int8" / f"{name}.json").write_text(json.dumps({**d, "precision": precision, "environment": {
            **d["environment"], "peak_fp32": {**d["environment"]["peak_fp32"], "by_precision": by}}}))
    frame = load(tmp_path / "int8").set_index("_source")
    got = {Path(k).stem: v for k, v in frame["peak_gflops"].items()}
    fp32 = d["environment"]["peak_fp32"]["gflops"]
    assert got["fp32"] == fp32 and got["own"] == 4 * fp32 and np.isnan(got["none"]), got
