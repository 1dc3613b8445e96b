import json
import os
from pathlib import Path

import pytest

from inferbench import SCHEMA_VERSION, results
from inferbench.errors import UsageError
from inferbench.measure.stats import summarize

FIXTURES = Path(__file__).parent / "fixtures"


def make_record(framework="onnxrt", status="ok", p50=5.0):
    lat = [p50 * (1 + 0.01 * (i % 5)) for i in range(50)]
    return {
        "schema_version": SCHEMA_VERSION, "framework": framework, "model": "mobilenet_v3_large",
        "resolution": 224, "batch_size": 1, "status": status, "error": None,
        "parity": {"status": "passed", "max_abs_err": 1e-5, "max_rel_err": 1e-6, "cosine": 1.0,
                   "top1_agreement": 1.0},
        "latency_ms": summarize(lat) if status == "ok" else None,
        "throughput_per_s": 200.0 if status == "ok" else None,
        "environment": {"cpu": {"model": "Test CPU"}},
        "config": {"device": {"label": "cpu"}, "precision": "fp32"},
        "raw_latencies_ms": lat,
    }


def test_write_and_load_roundtrip(tmp_path):
    results.write_record(tmp_path / "run", make_record("onnxrt"))
    results.write_record(tmp_path / "run", make_record("torch", p50=9.0))
    (tmp_path / "run" / "unrelated.json").write_text('{"hello": 1}')
    df = results.load(tmp_path)
    assert sorted(df["framework"]) == ["onnxrt", "torch"]
    assert set(df.columns) >= {"latency_ms.p50", "parity.status", "environment.cpu.model", "raw_latencies_ms"}
    assert len(df.loc[df.framework == "torch", "raw_latencies_ms"].iloc[0]) == 50


def test_validation_refuses_incomplete_records(tmp_path):
    rec = make_record()
    del rec["parity"]
    with pytest.raises(ValueError, match="parity"):
        results.write_record(tmp_path, rec)
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text("old")

    def boom(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        results.atomic_write_text(target, "new content")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_summary_csv(tmp_path):
    path = tmp_path / "summary.csv"
    results.write_summary(path, [make_record(), make_record("tf", status="failed")])
    lines = path.read_text().splitlines()
    assert lines[0].startswith("framework,model,resolution,batch_size")
    assert len(lines) == 3 and ",failed," in lines[2]


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(UsageError, match="no inferbench result records"):
        results.load(tmp_path)
    with pytest.raises(UsageError, match="no such file"):
        results.load(tmp_path / "nope")
    newer = make_record()
    newer["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "new.json").write_text(json.dumps(newer))
    with pytest.raises(UsageError, match="schema_version 2 in 1 file.*upgrade inferbench"):
        results.load(tmp_path)


def test_committed_v1_record_still_loads():
    """Old result files are kept as fixtures so that old records keep loading."""
    df = results.load(FIXTURES / "schema_v1")
    assert (df["schema_version"] == 1).all()
    assert {"latency_ms.p50", "throughput_per_s", "parity.status"} <= set(df.columns)
    row = df.iloc[0]
    assert row["latency_ms.n"] == len(row["raw_latencies_ms"])


def test_summary_table_shows_device_memory_and_energy_on_a_gpu():
    from inferbench.summary import format_summary

    src = json.loads(next((FIXTURES / "schema_v1").glob("*.json")).read_text())
    assert "dev MB" not in format_summary([src])  # a CPU run has no device memory column
    gpu = {**src, "config": {**src["config"], "device": {"kind": "gpu", "label": "gpu0"}},
           "energy": {"available": True, "mean_power_w": 61.5, "joules_per_inference": 0.0123}}
    peak = dict(gpu, framework="torch", memory={"peak_device_mb": 812.4})
    nvml = dict(gpu, framework="onnxrt", memory={"peak_device_mb": None, "device_used_mb_at_end": 1034.0})
    text = format_summary([peak, nvml])
    header, _, torch_row, onnx_row = text.splitlines()[:4]
    assert "dev MB" in header and "W" in header.split() and "J/inf" in header
    assert " 812 " in torch_row and "1034 (nvml)" in onnx_row and "61.5" in torch_row and "0.0123" in onnx_row
