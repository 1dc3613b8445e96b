"""--log-to: each cell as one tracking run, against the real MLflow store (its default, SQLite in the working
folder) and W&B's real offline mode; the runs come from the fake framework (tests/fakes.py)."""

from __future__ import annotations

import json
import struct

import pytest
from test_pipeline import QUICK

from inferbench import records
from inferbench.execution import tracking
from inferbench.run import main as run_main


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A clean working folder and no tracking settings from the shell."""
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT", "WANDB_DIR", "WANDB_MODE",
                "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(tmp_path, *argv):
    return run_main([*QUICK, "--framework", "fake", "--batch-size", "1,2", *argv, "--output-dir",
                     str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")])


@pytest.mark.slow  # MLflow's real SQLite store: its schema migrations take most of a minute
def test_mlflow_gets_one_run_per_cell_grouped_by_the_run(fakes, here, capsys, monkeypatch):
    import mlflow

    assert _run(here, "--log-to", "mlflow") == 0
    out = capsys.readouterr().out
    assert "logged each cell to mlflow (sqlite:///mlflow.db in this folder, experiment inferbench" in out
    (run_dir,) = (here / "out").iterdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{here}/mlflow.db")  # read back what the run wrote
    runs = mlflow.search_runs(experiment_names=["inferbench"]).set_index("tags.mlflow.runName")
    assert sorted(runs.index) == ["mobilenet_v3_small_32_bs1_fake", "mobilenet_v3_small_32_bs2_fake"]
    assert set(runs["tags.inferbench.group"]) == {run_dir.name}
    df = records.load(run_dir).set_index("batch_size")
    row = runs.loc["mobilenet_v3_small_32_bs2_fake"]
    assert row["metrics.p50_ms"] == pytest.approx(df.loc[2, "latency_ms.p50"])
    assert row["metrics.throughput_per_s"] == pytest.approx(df.loc[2, "throughput_per_s"])
    assert (row["params.framework"], row["params.batch_size"], row["params.parity"]) == ("fake", "2", "passed")
    assert row["params.rounds_requested"] == "4" and row["tags.inferbench.status"] == "ok"
    # the record itself travels with the run, byte for byte
    local = mlflow.artifacts.download_artifacts(run_id=row["run_id"], artifact_path="record",
                                                dst_path=str(here / "dl"))
    logged = json.loads((here / "dl" / "record" / "mobilenet_v3_small_32_bs2_fake.json").read_text())
    assert local and logged == json.loads((run_dir / "mobilenet_v3_small_32_bs2_fake.json").read_text())


def wandb_records(path):
    """The protobuf records of an offline W&B run file (wandb 0.31 ships no reader for its own format: a
    ':W&B' header, then LevelDB-log chunks of 32 KiB blocks, each chunk headed by crc32, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # FULL, FIRST start a record; MIDDLE, LAST add to it
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def test_wandb_offline_gets_one_run_per_cell_with_summary_config_and_record(fakes, here, capsys):
    assert _run(here, "--log-to", "wandb") == 0
    assert "wandb (project inferbench, offline; offline runs upload with: wandb sync" in capsys.readouterr().out
    (run_dir,) = (here / "out").iterdir()
    runs = sorted((here / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    p50 = records.load(run_dir).set_index("batch_size")["latency_ms.p50"]
    seen = {}
    for folder in runs:
        (file,) = folder.glob("run-*.wandb")
        recs = list(wandb_records(file))
        (run,) = [r.run for r in recs if r.WhichOneof("record_type") == "run"]
        config = {u.key: json.loads(u.value_json) for u in run.config.update}
        summary = {u.key: json.loads(u.value_json) for r in recs if r.WhichOneof("record_type") == "summary"
                   for u in r.summary.update}
        assert run.run_group == run_dir.name and config["framework"] == "fake"
        seen[run.display_name] = summary["p50_ms"]
        assert (folder / "files" / f"{run.display_name}.json").is_file()  # the record travels with the run
    assert seen == pytest.approx({"mobilenet_v3_small_32_bs1_fake": p50[1], "mobilenet_v3_small_32_bs2_fake": p50[2]})


def test_log_to_bad_input_is_one_line_before_anything_runs(fakes, here, capsys, monkeypatch):
    assert _run(here, "--log-to", "tensorboard") == 2
    assert capsys.readouterr().err.strip() == "inferbench.run: error: --log-to tensorboard: valid targets are " \
        "mlflow, wandb"
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    assert _run(here, "--log-to", "wandb") == 2
    assert capsys.readouterr().err.strip() == 'inferbench.run: error: --log-to wandb needs wandb: pip install -e ' \
        '".[wandb]"'
    assert not (here / "out").exists()


@pytest.mark.parametrize("uri,message", [
    ("file:///tmp/mlruns", "is a file store, which MLflow 3 no longer writes to (set MLFLOW_ALLOW_FILE_STORE=true"),
    ("./mlruns", "is a file store, which MLflow 3 no longer writes to"),
    ("bad://what", "MLflow cannot store runs at a bad: URI (it takes http, https, sqlite"),
])
def test_a_tracking_uri_mlflow_refuses_is_the_real_reason_before_anything_runs(fakes, here, capsys, monkeypatch,
                                                                               uri, message):
    """MLflow's own refusal of a file store reads like a deprecation notice, and came only after the cells ran."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert _run(here, "--log-to", "mlflow") == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (here / "out").exists()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the way MLflow itself offers out
    if uri != "bad://what":
        tracking.check_mlflow_uri(uri, "true")


def test_a_store_that_fails_keeps_the_records_and_says_so(fakes, here, capsys, monkeypatch):
    (here / "blocker").write_text("a file where the store's folder should be")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{here}/blocker/mlflow.db")
    assert _run(here, "--log-to", "mlflow") == 1
    err = capsys.readouterr().err
    assert "not written: --log-to mlflow mobilenet_v3_small_32_bs1_fake: " in err
    (run_dir,) = (here / "out").iterdir()
    assert len(list(run_dir.glob("mobilenet_*.json"))) == 2


def test_a_non_square_size_is_a_parameter_as_a_square_one_is():
    """A cell at 384x640 logs its size as the parameter "384x640" (a square one as "224"), never as a metric."""
    from test_results import make_record

    from inferbench.base.codec import encode
    from inferbench.execution.tracking import fields

    for size, said in ((224, "224"), ("384x640", "384x640")):
        params, metrics, _ = fields(encode(make_record(resolution=size)))
        assert params["resolution"] == said and params["batch_size"] == "1" and "resolution" not in metrics
