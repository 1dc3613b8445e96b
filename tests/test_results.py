"""Records: the schema-2 Record, atomic writes, the summary, loading, and every older schema still loading."""

import csv
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from inferbench import SCHEMA_VERSION, records
from inferbench.analysis.runfiles import write_summary
from inferbench.base.codec import decode, encode, plain
from inferbench.base.errors import UsageError
from inferbench.base.files import atomic_write_text
from inferbench.measure.stats import summarize
from inferbench.registry.scenarios import SCENARIOS

FIXTURES = Path(__file__).parent / "fixtures"
COMMITTED = Path(__file__).resolve().parent.parent / "benchmark_results"


def make_record(framework="onnxrt", status="ok", p50=5.0, **overrides):
    lat = [p50 * (1 + 0.01 * (i % 5)) for i in range(50)]
    fields = dict(
        schema_version=SCHEMA_VERSION, model="mobilenet_v3_large", resolution=224, batch_size=1,
        framework=framework, precision="fp32", scenario="inference", variant="", options={},
        status=status, error=None if status == "ok" else "boom",
        parity={"status": "passed" if status == "ok" else "not_run", "max_abs_err": 1e-5, "max_rel_err": 1e-6,
                "cosine": 1.0, "top1_agreement": 1.0},
        latency_ms=summarize(lat) if status == "ok" else None,
        throughput_per_s=200.0 if status == "ok" else None,
        config={"device": {"kind": "cpu", "gpu": None}}, environment={"cpu": {"model": "Test CPU"}},
        run_id="r", created_at="2026-11-23T10:00:00+0000", raw_latencies_ms=lat if status == "ok" else None,
    )
    fields.update(overrides)
    return decode(records.Record, plain(fields), "test record")  # typed blocks, as a record is read


def test_write_and_load_roundtrip(tmp_path):
    records.write_record(tmp_path / "run", make_record("onnxrt"))
    records.write_record(tmp_path / "run", make_record("torch", p50=9.0, precision="bf16", variant="compile"))
    (tmp_path / "run" / "unrelated.json").write_text('{"hello": 1}')
    assert sorted(p.name for p in (tmp_path / "run").glob("*_bs1_*.json")) == [
        "mobilenet_v3_large_224_bs1_onnxrt.json", "mobilenet_v3_large_224_bs1_torch_bf16_compile.json"]
    df = records.load(tmp_path)
    assert sorted(df["framework_key"]) == ["onnxrt", "torch"]
    assert sorted(df["framework"]) == ["onnxrt", "torch:bf16+compile"]  # the display name the analysis uses
    assert set(df.columns) >= {"latency_ms.p50", "parity.status", "environment.cpu.model", "raw_latencies_ms",
                               "precision", "variant", "scenario"}
    assert len(df.loc[df.framework_key == "torch", "raw_latencies_ms"].iloc[0]) == 50
    rec = json.loads((tmp_path / "run" / "mobilenet_v3_large_224_bs1_onnxrt.json").read_text())
    assert records.parse(rec, "again") == make_record("onnxrt")  # the JSON round trip is exact


def test_a_record_of_a_non_square_input_says_height_by_width_and_sorts_beside_square_ones(tmp_path):
    """ "384x640" is a record's size where the input is not square (a square one stays the integer); both kinds
    load, pool apart and sort by height then width; a size of another form is refused by name."""
    from inferbench.base.size import hw, is_size, parse_size, rank

    assert [parse_size(t) for t in ("224", 224, "224x224", " 384 X 640 ")] == [224, 224, 224, "384x640"]
    assert hw("384x640") == (384, 640) and hw(224) == (224, 224) and not is_size("224x224") and is_size("1x2")
    for bad in ("0x4", "384x640x3", "-3", "x4", "", True):
        assert not is_size(bad)
    assert sorted(["384x640", 640, 224, "640x384"], key=rank) == [224, "384x640", "640x384", 640]
    records.write_record(tmp_path / "run", make_record("onnxrt", resolution="384x640"))
    records.write_record(tmp_path / "run", make_record("onnxrt", resolution=640))
    assert sorted(p.name for p in (tmp_path / "run").glob("*.json")) == [
        "mobilenet_v3_large_384x640_bs1_onnxrt.json", "mobilenet_v3_large_640_bs1_onnxrt.json"]
    df = records.load(tmp_path)
    assert sorted(df["cell"]) == ["mobilenet_v3_large@384x640", "mobilenet_v3_large@640"]
    data = json.loads(json.dumps(encode(make_record())))
    for bad in ("384x640x3", "224px", 0):
        data["resolution"] = bad
        with pytest.raises(ValueError, match=r"r.json.resolution"):
            records.parse(data, "r.json")


def test_a_record_refuses_what_it_cannot_be(tmp_path):
    with pytest.raises(ValueError, match="an ok record needs latency statistics"):
        make_record(latency_ms=None)
    with pytest.raises(ValueError, match="parity.status: 'maybe' is not one of passed"):
        make_record(parity={"status": "maybe"})
    data = json.loads(json.dumps(encode(make_record())))
    del data["parity"]
    with pytest.raises(ValueError, match="missing key 'parity'"):
        records.parse(data, "r.json")
    data = json.loads(json.dumps(encode(make_record())))
    data["batch_size"] = "1"
    with pytest.raises(ValueError, match=r"r.json.batch_size: expected int"):
        records.parse(data, "r.json")


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text("old")

    def boom(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "new content")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_summary_and_comparisons_csv(tmp_path):
    rounds = [i % 4 for i in range(50)]
    recs = [make_record(raw_rounds=rounds), make_record("tf", status="failed"),
            make_record("torch", p50=10.0, raw_rounds=rounds, timing={"group": "r/g"}),
            make_record("torch-native", p50=2.0, raw_rounds=rounds, timing={"group": "r/g"},
                        parity={**encode(make_record().parity), "status": "not_applicable"})]
    recs[0] = make_record(raw_rounds=rounds, timing={"group": "r/g"})
    write_summary(tmp_path, [encode(r) for r in recs])
    lines = (tmp_path / "summary.csv").read_text().splitlines()
    assert lines[0].startswith("run_id,framework,model,resolution,batch_size,precision,variant,device,device_name,host")
    assert {"p90_ms", "p95_ms", "energy_j_per_inference", "energy_missing", "net_energy_j_per_inference",
            "net_energy_ci95_low", "net_energy_ci95_high"} <= set(lines[0].split(","))
    assert len(lines) == 5 and ",failed," in lines[2]
    lat = [5.0 * (1 + 0.01 * (i % 7)) * (1 + 0.05 * (i % 4)) for i in range(50)]  # rounds at their own levels
    lat = summarize(lat, rounds)
    write_summary(tmp_path / "tails", [encode(make_record(raw_rounds=rounds, latency_ms=lat))])
    first = next(csv.DictReader((tmp_path / "tails" / "summary.csv").open()))  # the whole run's p99, and a round's
    assert float(first["p99_pooled_ms"]) == pytest.approx(lat["p99_pooled"])
    assert [float(first[f"p99_pooled_ci95_{s}_ms"]) for s in ("low", "high")] == pytest.approx(lat["p99_pooled_ci95"])
    assert float(first["p99_ms"]) == pytest.approx(lat["p99"])
    rows = list(csv.DictReader((tmp_path / "comparisons.csv").open()))
    # the baseline is the fastest *verified* cell: torch-native (own weights) is faster but unverified
    assert [(r["framework"], r["baseline"], r["verified"]) for r in rows] == [
        ("torch-native", "onnxrt", "False"), ("onnxrt", "onnxrt", "True"), ("torch", "onnxrt", "True")]
    torch = rows[2]
    assert float(torch["ratio"]) == pytest.approx(2.0) and torch["significant"] == "True"
    assert torch["method"] == "paired-rounds-and-processes-t-95+process-sd-assumed-1.5%"  # no processes recorded
    assert float(torch["ratio_ci_low"]) <= 2.0 <= float(torch["ratio_ci_high"])


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(UsageError, match="no inferbench result records"):
        records.load(tmp_path)
    with pytest.raises(UsageError, match="no such file"):
        records.load(tmp_path / "nope")
    newer = encode(make_record())
    newer["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "new.json").write_text(json.dumps(newer))
    with pytest.raises(UsageError, match=f"schema_version {SCHEMA_VERSION + 1} in 1 file.*upgrade inferbench"):
        records.load(tmp_path)


def test_schema_1_records_are_upgraded_on_load():
    """Old result files are kept as fixtures (and committed results) so that old records keep loading."""
    df = records.load(FIXTURES / "schema_v1")
    assert (df["schema_version"] == SCHEMA_VERSION).all()
    row = df.iloc[0]
    assert row["latency_ms.n"] == len(row["raw_latencies_ms"])
    assert (row["precision"], row["scenario"], row["variant"]) == ("fp32", "inference", "")
    assert row["parity.reason"] == "own-weights" and row["timing.timed_region"] == "call+sync"
    assert row["latency_ms.percentile_rule"] == "numpy-linear"
    assert row["latency_ms.ci_method"] == "bootstrap-iid-median-95"
    # schema 2 -> 3: the iid interval was too narrow to use; it is kept aside, and no claim is made
    assert row["latency_ms.p50_ci95"] is None and row["latency_ms.p50_ci95_iid"][0] <= row["latency_ms.p50"]
    assert row["latency_ms.stability.verdict"] == "unknown" and "latency_ms.noisy" not in df
    assert "timing.config.min_duration_s" not in df and "environment.gpu_note" not in df
    # schema 3 -> 4: nothing was counted then; no FLOPs are made up
    assert row["model_stats"] is None and row["environment.peak_fp32"] is None and pd.isna(row["gflop_per_s"])
    # the 2 x 14 runs of 2026-11-23 and -24 (schema 3) upgrade beside the sweeps of 2026-11-26 (36 records) and
    # 2026-11-27 (24, BF16 beside FP32; 24, INT8 beside FP32; 12, torch-inductor's INT8 beside its FP32) and the
    # sweep with the roofs of 2026-12-04 (45)
    every = records.load([p for p in COMMITTED.iterdir() if p.is_dir()
                          and (p.name == "sweeps" or p.name.startswith("202611"))])
    assert len(every) == 88 + 24 + 12 + 45 and (every["schema_version"] == SCHEMA_VERSION).all()
    assert set(every["runner.sync"]) <= {"none-cpu", "predict_on_batch-host", "ort.run-host", "ov.infer-sync",
                                         "jax.block_until_ready"}
    assert set(every["timing.timed_region"]) == {"call+sync"}


def test_schema_1_options_become_the_variant(tmp_path):
    src = json.loads(next((FIXTURES / "schema_v1").glob("*.json")).read_text())
    src["config"]["options"] = {"compile": True, "channels_last": True, "include_transfer": False,
                                "cuda_graphs": False, "keras_backend": "torch"}
    src["config"]["precision"] = "bf16"
    up = records.parse(src, "v1")
    assert up.framework == "torch-native" and up.precision == "bf16"
    assert up.variant == "channels-last+compile"  # keras_backend is not an option torch-native takes
    assert up.filename == "mobilenet_v3_large_224_bs1_torch-native_bf16_channels-last+compile.json"


def test_schema_1_energy_and_timing_are_upgraded(tmp_path):
    src = json.loads(next((FIXTURES / "schema_v1").glob("*.json")).read_text())
    src["config"]["timing"] = {"warmup_iterations": 1, "warmup_seconds": 0.0, "min_duration_s": 0.5,
                               "min_iterations": 5}
    src["timing"]["config"] = {**src["config"]["timing"], "min_duration_s": 2.0}  # what ran, after extension
    src["energy"] = {"available": True, "method": "NVML energy counter", "warning": "short",
                     "idle_baseline": {"method": "power samples", "idle_w": 50.0},
                     "sampler": {"thread": "background (sensor calls ...)", "reading": "nvmlDeviceGetPowerUsage (...)"}}
    up = records.parse(src, "v1")
    assert up.config.timing is not None and up.config.timing["min_duration_s"] == 2.0
    assert "config" not in encode(up.timing)
    assert encode(up.energy) == {"available": True, "method": "nvml-counter", "idle_baseline": {"method": "samples",
                         "idle_w": 50.0}, "sampler": {"thread": "background", "reading": "nvml-power-usage"}}
    src["energy"]["method"] = "NVML power samples (trapezoid)"
    assert records.parse(src, "v1").energy.method == "nvml-samples-trapezoid"


def test_summary_table_shows_device_memory_and_energy_on_a_gpu():
    from inferbench.cli.summary import format_summary

    src = encode(make_record())
    assert "dev MB" not in format_summary([src])  # a CPU run has no device memory column
    gpu = {**src, "config": {"device": {"kind": "gpu", "label": "gpu0"}},
           "energy": {"available": True, "mean_power_w": 61.5, "joules_per_inference": 0.0123}}
    peak = dict(gpu, framework="torch", memory={"peak_device_mb": 812.4})
    nvml = dict(gpu, framework="onnxrt", memory={"peak_device_mb": None, "device_used_mb_at_end": 1034.0})
    lines = format_summary([peak, nvml]).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("framework"))  # after the recommendation
    header, _, torch_row, onnx_row = lines[start:start + 4]
    assert "dev MB" in header and "W" in header.split() and "J/inf" in header
    assert " 812 " in torch_row and "1034 (nvml)" in onnx_row and "61.5" in torch_row and "0.0123" in onnx_row


def test_no_share_of_a_peak_measured_busy_or_below_the_rate_achieved(tmp_path):
    """A busy machine's "peak" made shares of 111-234%: a peak measured busy is none ("peak not measured: busy"),
    one below the rate a cell achieved is no peak either; a good one gives the share, in the terminal and the CSVs."""
    from inferbench.cli.summary import _rate
    from inferbench.records.table import compute_rate

    stats = {"flops_per_image": 500_000_000, "params": 1, "flops_method": "test"}  # 200/s x 0.5 GFLOP: 100 GFLOP/s

    def with_peak(gflops, valid):
        return encode(make_record(model_stats=stats, environment={"cpu": {"model": "Test CPU"}, "peak_fp32": {
            "gflops": gflops, "valid": valid}}))

    good, busy, low = with_peak(400.0, True), with_peak(400.0, False), with_peak(60.0, True)
    assert compute_rate(good)["fraction_of_peak"] == pytest.approx(0.25) and _rate(good) == "100 (25%)"
    assert compute_rate(busy)["fraction_of_peak"] is None and _rate(busy) == "100 (peak not measured: busy)"
    assert compute_rate(low)["fraction_of_peak"] is None and _rate(low) == "100 (peak below this rate)"
    for name, rec in (("good", good), ("busy", busy), ("low", low)):
        atomic_write_text(tmp_path / name / "r.json", json.dumps(rec))
        share = records.load(tmp_path / name)["fraction_of_peak"].iloc[0]
        assert (share == pytest.approx(0.25)) if name == "good" else pd.isna(share), (name, share)


def test_the_schema_file_is_generated_from_the_record_type_and_the_docs_name_every_field():
    """One declaration of a record's shape: the Record type and its block shapes. The shipped schema file is what
    inferbench.records.schema makes from them (regenerate with python -m inferbench.records.schema), and
    docs/results-schema.md's table names exactly the Record's fields."""
    import re

    from inferbench.records import schema

    assert records.SCHEMA_FILE.read_text() == schema.render(), "run python -m inferbench.records.schema"
    generated = schema.record_schema()
    assert generated["properties"]["scenario"]["enum"] == list(SCENARIOS)  # from the registry, every scenario
    table = (Path(__file__).parents[1] / "docs" / "results-schema.md").read_text()
    documented = {name for row in re.findall(r"^\| (`[^|]*`) \|", table, flags=re.M)
                  for name in re.findall(r"`(\w+)`", row)}
    assert documented == set(records.Record.__dataclass_fields__)


def test_the_published_json_schema_holds_every_record():
    """inferbench/records/schema/record.schema.json: what other tools can validate against. Every committed record
    (upgraded to the current schema) and a fresh one pass; its fields are the Record's; a broken one fails."""
    import jsonschema

    schema = json.loads(records.SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert set(schema["properties"]) == set(records.Record.__dataclass_fields__)
    found, _ = records.iter_records(COMMITTED)
    assert sum("/zoo/" not in r["_source"] and "/gpu-" not in r["_source"] and "/contention-" not in r["_source"]
               and "/train-" not in r["_source"] and "/serving-" not in r["_source"]
               and "/aa-calibration-" not in r["_source"] for r in found) == 88 + 24 + 12 + 45 + 5 + 8 + 16 + 24 + 26 \
        + 2 + 2 + 10 + 40 + 4
    # sweeps (+ INT8, + the roofs' sweep), README's example, the INT8 quick run, the detection and segmentation
    # runs, the PyTorch sources' runs (SSDlite and LR-ASPP, FP32 and INT8), the 384x640 detector's and OpenVINO's
    # routes' runs, the 640 detector's INT8 judged by mAP, Faster R-CNN's (FP32 at batch 1 and 4, INT8), and the
    # task models' INT8 on every runtime that has it, judged on labelled images (6 + 6 + 8 + 8 + 12), and the 384x640
    # detector's again on a set labelled above one score floor
    calibration = [r for r in found if "/aa-calibration-cpu-20261126/" in r["_source"]]  # compare's A/A
    assert len(calibration) == 2 * (10 + 10 + 5 + 10) and all(r["parity"]["status"] == "passed" for r in calibration)
    assert all(r["validity"]["valid"] is False for r in calibration if "/busy-2/" in r["_source"])
    assert all(r["environment"]["invocation_spread"]["per_framework"]["onnxrt"] > 0 for r in calibration
               if "/calibrate/" not in r["_source"])  # the runs after the calibration carry it
    assert all(len(r["machine_state"]["speed"]["rounds"]) == 9 for r in calibration)  # before every round, after
    excess = [r for r in found if "/aa-calibration-cpu-20261127/" in r["_source"]]  # the excess, the calibrated hook
    assert len(excess) == 2 * (10 + 10 + 5 + 10) and all(r["parity"]["status"] == "passed" for r in excess)
    assert all(r["timing"]["test_slowdown"] == 1.3 for r in excess if "/slowed/" in r["_source"]
               and r["framework"] == "onnxrt")
    assert all(r["environment"]["invocation_spread"]["within_se_per_framework"]["onnxrt"] > 0 for r in excess
               if "/calibrate/" not in r["_source"])  # the runs after it carry the excess and its parts
    ab = [r for r in found if "/aa-calibration-cpu-20261128-ab/" in r["_source"]]  # an A/B in one run
    assert len(ab) == 20 * 4 and all(r["parity"]["status"] == "passed" and r["validity"]["valid"] for r in ab)
    twins = [r for r in ab if r["variant"].startswith("ab-")]
    assert len(twins) == 40 and all(r["environment"]["interpreter"].endswith(("/python-a", "/python-slowed"))
                                    for r in twins)
    assert all(r["timing"]["test_slowdown"] == 1.3 for r in twins if "/slowed/" in r["_source"]
               and r["framework"] == "onnxrt")
    assert not any(r["timing"].get("test_slowdown") for r in ab if r not in twins)  # A is never slowed
    pooled = [r for r in found if "/aa-calibration-cpu-20261128-pooled/" in r["_source"]]  # compare, 3 a side pooled
    assert len(pooled) == 2 * (10 + 10 + 5) and all(r["parity"]["status"] == "passed" for r in pooled)
    assert {r["framework"] for r in pooled if r["timing"].get("test_slowdown") == 1.3} == {"onnxrt"}
    assert all(("/slowed/" in r["_source"] and r["framework"] == "onnxrt") == bool(r["timing"].get("test_slowdown"))
               for r in pooled)
    served = [r for r in found if "/serving-cpu-20261126/" in r["_source"]]  # under LoadGen
    assert {r["scenario"] for r in served} == {"server", "offline", "inference"} and all(
        r["parity"]["status"] == "passed" for r in served)
    held = {r["framework"]: r["serving"]["answer"]["found"] for r in served if r["scenario"] == "server"}
    assert held == {"openvino": True, "onnxrt": True, "torch-inductor": True, "tf": False}  # tf held no load
    trained = [r for r in found if "/train-vgg16-cpu-20261126/" in r["_source"]]  # a training table
    assert len(trained) == 27 and all(r["scenario"] == "train" and r["parity"]["status"] == "passed"
                                      and r["parity"]["method"] == "training" for r in trained)
    watched = [r for r in found if "/contention-cpu-20261126/" in r["_source"]]  # the machine watched
    assert len(watched) == 12 and all(r["validity"]["valid"] is not None and r["tuning"] for r in watched)
    gpu = [r for r in found if "/gpu-h100-20261125/" in r["_source"]]  # the H100 run: energy and GPU state
    assert len(gpu) == 24 and all(r["energy"]["available"] and r["gpu_state"]["start"]["uuid"] for r in gpu)
    for rec in found:
        errors = list(validator.iter_errors({k: v for k, v in rec.items() if k != "_source"}))
        assert not errors, f"{rec['_source']}: {errors[0].message}"
    fresh = encode(make_record())
    assert validator.is_valid(fresh)
    for broken in ({**fresh, "status": "done"}, {**fresh, "schema_version": 2}, {**fresh, "batch_size": 0},
                   {k: v for k, v in fresh.items() if k != "parity"}, {**fresh, "extra_key": 1}):
        assert not validator.is_valid(broken)


def test_a_record_keeps_a_bounded_subsample_of_its_raw_latencies_and_says_so(tmp_path, fakes, monkeypatch):
    """A day at the longest --duration would be gigabytes of raw latencies per record: past RAW_KEPT_MAX a record
    keeps a uniform random subsample in time order, each with its round; latency_ms (computed from them all)
    stays as it was and says what was kept. The subsample keeps every round's share and the pooled median."""
    import jsonschema
    import numpy as np

    from inferbench.records.record import RAW_KEPT_MAX, kept_raw

    rng = np.random.default_rng(7)
    shares = [0.4, 0.3, 0.2, 0.1]  # a fast round has more samples: its share must survive the subsample
    rounds = np.repeat(np.arange(4), [int(s * 250_000) for s in shares])
    raw = rng.lognormal(np.log(1.0 + rounds), 0.2)  # round r near r + 1 ms
    full = summarize(raw.tolist(), rounds.tolist())
    blocks = {"latency_ms": full, "raw_latencies_ms": raw.tolist(), "raw_rounds": rounds.tolist()}
    kept = kept_raw(blocks)
    assert kept_raw({**blocks, "raw_latencies_ms": raw[:1000].tolist()})["raw_latencies_ms"] == raw[:1000].tolist()
    assert len(kept["raw_latencies_ms"]) == len(kept["raw_rounds"]) == RAW_KEPT_MAX
    assert kept["latency_ms"]["raw_kept"] == {"kept": RAW_KEPT_MAX, "of": 250_000, "method": "uniform-random-subsample"}
    assert {k: v for k, v in kept["latency_ms"].items() if k != "raw_kept"} == full  # from all of them
    position = {v: i for i, v in enumerate(raw.tolist())}
    order = [position[v] for v in kept["raw_latencies_ms"]]
    assert order == sorted(order) and all(rounds[i] == r for i, r in zip(order, kept["raw_rounds"]))
    counts = np.bincount(kept["raw_rounds"], minlength=4) / RAW_KEPT_MAX
    assert np.allclose(counts, shares, atol=0.01)
    assert abs(np.median(kept["raw_latencies_ms"]) / full["p50_pooled"] - 1) < 0.02
    record = make_record(latency_ms=kept["latency_ms"], raw_latencies_ms=kept["raw_latencies_ms"],
                         raw_rounds=kept["raw_rounds"])
    path = records.write_record(tmp_path, record)
    assert path.stat().st_size < 4_000_000
    written = json.loads(path.read_text())
    jsonschema.Draft202012Validator(json.loads(records.SCHEMA_FILE.read_text())).validate(written)
    assert records.parse(written, str(path)).latency_ms.raw_kept["of"] == 250_000

    from inferbench.records import record as record_module
    from inferbench.run import main as run_main

    monkeypatch.setattr(record_module, "RAW_KEPT_MAX", 10)  # a real run's records go through the same bound
    assert run_main(["--model", "mobilenet_v3_small", "--resolution", "32", "--framework", "fake", "--duration",
                     "0.05", "--min-iterations", "40", "--warmup", "0", "--warmup-seconds", "0", "--threads", "1",
                     "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out"),
                     "-q"]) == 0
    (ran,) = records.iter_records(tmp_path / "out")[0]
    assert len(ran["raw_latencies_ms"]) == 10 and ran["latency_ms"]["raw_kept"]["of"] == ran["latency_ms"]["n"] >= 40


def test_one_json_sanitiser_serves_every_file_and_document():
    """base.codec.plain: what records, recommendation.json, the tuning decisions and --json documents are written
    through — NaN and infinities as null, NumPy scalars as numbers, paths as text, tuples as lists, keys as text."""
    import math

    import numpy as np

    from inferbench.base.codec import plain

    value = {1: (np.float32(1.5), np.int64(3), float("nan")), "p": Path("/x"), "inf": -math.inf, "s": "a", "n": None}
    out = plain(value)
    assert out == {"1": [1.5, 3, None], "p": "/x", "inf": None, "s": "a", "n": None}
    assert type(out["1"][1]) is int and json.loads(json.dumps(out, allow_nan=False)) == out


def test_every_committed_record_is_read_typed_and_written_back_as_it_was():
    """A record's blocks are typed objects when read (records/blocks.py: a field per key a reader may rely on, the
    rest kept as read); every committed record, of every schema, reads and encodes back to what its upgraded file
    holds, key for key and in order (a field it lacks as null), so typing the blocks changed no record."""
    import copy
    import dataclasses
    from pathlib import Path

    from inferbench.base.codec import encode, plain
    from inferbench.records.blocks import Block, Latency, Parity
    from inferbench.records.record import Record, parse, upgrade

    fields = [f.name for f in dataclasses.fields(Record)]
    seen = 0
    for path in sorted((Path(__file__).resolve().parents[1] / "benchmark_results").rglob("*.json")):
        data = json.loads(path.read_text())
        if not (isinstance(data, dict) and "schema_version" in data and "framework" in data):
            continue
        seen += 1
        record = parse(copy.deepcopy(data), path.name)
        assert isinstance(record.parity, Parity) and isinstance(record.parity, Block)
        assert record.latency_ms is None or isinstance(record.latency_ms, Latency) and record.latency_ms.p50 > 0
        written = plain(upgrade(copy.deepcopy(data)))
        assert json.dumps(plain(encode(record))) == json.dumps({k: written.get(k) for k in fields}), path
    assert seen > 1000


def test_a_cell_whose_idle_baseline_is_above_its_rounds_power_keeps_its_negative_net_energy():
    """Net energy is the rounds' less the idle baseline's over the window: below zero where the baseline read above
    the rounds' power (a warm device idling, a reading's noise). Such a record is written and read as it is, never
    refused as mistyped (a typed block once held it to be non-negative, which would have aborted the run)."""
    energy = {"available": True, "joules_per_inference": 0.01, "mean_power_w": 2.0, "net_j": -0.5,
              "net_joules_per_inference": -0.002, "net_joules_per_inference_ci95": [-0.004, 0.0]}
    record = make_record(energy=energy)
    assert record.energy.net_joules_per_inference == -0.002
    assert records.parse(json.loads(json.dumps(encode(record))), "again").energy.net_j == -0.5
