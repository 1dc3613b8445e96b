"""The pipeline's own logic on fake frameworks (tests/fakes.py): isolation, records, identity, failures,
timeouts, resume and kills, in seconds and without any ML framework installed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from inferbench import SCHEMA_VERSION, records
from inferbench.measure.stats import ASSUMED
from inferbench.run import main as run_main
from inferbench.sweep import main as sweep_main

TESTS = Path(__file__).resolve().parent
QUICK = ["--model", "mobilenet_v3_small", "--resolution", "32", "--duration", "0.05", "--min-iterations", "3",
         "--warmup", "1", "--warmup-seconds", "0", "--threads", "1", "--device", "cpu", "--rounds", "4"]


def _run(tmp_path, *argv, cache="cache"):
    """A quick run into ``tmp_path/out``, with the artifact cache ``tmp_path/cache`` (None: the one in ``argv``)."""
    return run_main([*QUICK, *argv, "--output-dir", str(tmp_path / "out"),
                     *(["--cache-dir", str(tmp_path / cache)] if cache else [])])


def test_a_run_goes_from_flags_to_records_through_the_fake_runner(fakes, tmp_path, capsys):
    assert _run(tmp_path, "--framework", "fake", "--batch-size", "1,2") == 0
    (run_dir,) = (tmp_path / "out").iterdir()
    names = sorted(p.name for p in run_dir.glob("*.json"))
    assert names == ["mobilenet_v3_small_32_bs1_fake.json", "mobilenet_v3_small_32_bs2_fake.json",
                     "recommendation.json"]
    rec = json.loads((run_dir / names[1]).read_text())
    assert rec["schema_version"] == SCHEMA_VERSION
    assert (rec["model"], rec["resolution"], rec["batch_size"], rec["framework"]) == ("mobilenet_v3_small", 32, 2,
                                                                                      "fake")
    assert rec["parity"]["status"] == "passed" and rec["parity"]["max_rel_err"] < 1e-6
    assert rec["latency_ms"]["n"] == len(rec["raw_latencies_ms"]) >= 3
    assert rec["timing"]["timed_region"] == "call+sync" and rec["runner"]["sync"] == "none-cpu"
    # the record's configuration is the one that ran, as written by the typed chain
    assert rec["config"]["timing"] == {"warmup_iterations": 1, "warmup_seconds": 0.0, "min_duration_s": 0.05,
                                       "min_iterations": 3, "rounds": 4}
    # measured in 4 rounds, each sample with its round; parity on the reference inputs and the timed batch
    assert len(rec["raw_rounds"]) == len(rec["raw_latencies_ms"]) and set(rec["raw_rounds"]) == {0, 1, 2, 3}
    assert [b["round"] for b in rec["timing"]["blocks"]] == [0, 1, 2, 3]
    # its rounds spread over two worker processes (round r by process r mod 2), the spread between them measured
    assert [b["process"] for b in rec["timing"]["blocks"]] == [0, 1, 0, 1] and rec["timing"]["processes"] == 2
    # (two processes give it one degree of freedom: where it came out at 0, the assumed part stands in, and says so)
    spread = rec["latency_ms"]["spread"]
    used = spread["between_var"] if spread["pooled_between_var"] is None else spread["pooled_between_var"]
    assert spread["processes"] == 2 and spread["measured"] == (used > 0), spread
    assert rec["latency_ms"]["ci_method"] == "rounds-and-processes-t-95" + ("" if used > 0 else ASSUMED)
    assert rec["latency_ms"]["stability"]["rounds"] == 4
    assert rec["parity"]["checked_batch_sizes"] == [16, 2]
    assert rec["memory"]["timed_peak_host_mb"] > 0
    assert rec["config"]["threads"] == 1 and rec["config"]["device"] == {"kind": "cpu", "gpu": None}
    records.parse(rec, "record")  # and it reads back as a Record
    out = capsys.readouterr().out
    # the answer first: whether the machine let it be valid, then the recommendation, before the table
    assert out.startswith("validity not known: machine state unknown: the timed blocks (0.")  # QUICK's are tiny
    assert out.splitlines()[1:3] == ["recommendation (median latency, lower is better; verified cells only):",
                                     out.splitlines()[2]] and out.splitlines()[2].startswith(
        "  mobilenet_v3_small@32 batch 1 on ")
    assert ": fake, " in out.splitlines()[2] and "energy not measured: " in out
    assert len((run_dir / "summary.csv").read_text().splitlines()) == 3
    assert (run_dir / "comparisons.csv").read_text().splitlines()[0] == (
        "model,resolution,batch_size,scenario,framework,baseline,ratio,ratio_ci_low,ratio_ci_high,"
        "significant,verified,method")


def test_target_ci_adds_rounds_until_every_paired_ratio_is_known_that_well_or_the_cap_stops_it(fakes, tmp_path,
                                                                                                capsys):
    assert _run(tmp_path / "a", "--framework", "fake,fake-flat", "--target-ci", "30", "--duration", "0.2",
                "--processes", "1") == 0  # steady: the configured rounds do
    err = capsys.readouterr().err
    # which of the two sleeps reads faster is the machine's to say (a busy runner adds its own delay to each): the
    # widest ratio is the slower one's over the faster one's, whichever that was
    said = re.search(r"--target-ci \+-30\.0% reached after 4 rounds; the widest: (\S+) over (\S+) \d+\.\d{3}x", err)
    assert said and {said[1], said[2]} == {"fake", "fake-flat"}, err
    (a,) = (tmp_path / "a" / "out").iterdir()
    rec = json.loads(next(a.glob("*_fake-flat.json")).read_text())
    assert rec["latency_ms"]["stability"]["rounds"] == 4
    target = rec["timing"]["target_ci"]
    assert target["reached"] and target["rounds"] == 4 and target["widest"]["against"] == said[2]
    lo, hi = target["widest"]["ci95"]
    assert lo < target["widest"]["ratio"] < hi and (hi / lo) ** 0.5 - 1 <= 0.30
    assert _run(tmp_path / "b", "--framework", "fake,fake-jumpy", "--target-ci", "5", "--duration", "0.2") == 0
    err = capsys.readouterr().err
    assert "--target-ci +-5.0% not reached: stopped at 16 rounds (4x --rounds); the widest: " in err, err
    assert "round 16 done (--target-ci: at most 16)" not in err  # a passing phase, not a lasting line
    (b,) = (tmp_path / "b" / "out").iterdir()
    rec = json.loads(next(b.glob("*_fake-jumpy.json")).read_text())
    assert rec["latency_ms"]["stability"]["rounds"] == 16 and rec["config"]["target_ci"] == 0.05
    assert not rec["timing"]["target_ci"]["reached"] and rec["timing"]["target_ci"]["rounds"] == 16
    assert [blk["process"] for blk in rec["timing"]["blocks"]] == [0, 1] * 8  # round r by process r mod 2
    for argv, said in ((["--scenario", "offline"], "--target-ci applies to the inference scenario"),
                       (["--time-budget", "5m"], "--target-ci adds rounds and --time-budget takes them away"),
                       (["--target-ci", "2"], "with 2 worker process(es) a cell, a paired interval's part for what "
                                              "differs between processes is +-3.0%"),
                       (["--target-ci", "2", "--quick"], "--processes 5, or a target above 4.2%")):
        assert _run(tmp_path / "c", "--framework", "fake", "--target-ci", "5", *argv) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "c" / "out").exists()


def test_the_widest_paired_interval_narrows_with_rounds_to_the_process_floor_and_is_compares_own():
    """Two cells in the same rounds, their medians moved alike by the machine (30% per round) with their own noise
    (3%): the interval --target-ci sizes the rounds on is the paired one compare gives the answer, it holds the true
    ratio, and its process part is the ratio's own once two processes measured one (the assumed 1.5% a
    side before: it gives no floor any more, and with one degree of freedom it can widen as well as narrow)."""
    from inferbench.measure.stats import Sample, compare, process_floor, widest_interval

    rng = np.random.default_rng(5)
    machine = np.exp(rng.normal(0, 0.3, 64))
    a = {r: float(2.0 * machine[r] * np.exp(rng.normal(0, 0.03))) for r in range(64)}
    b = {r: float(3.0 * machine[r] * np.exp(rng.normal(0, 0.03))) for r in range(64)}
    halves = []
    for n in (4, 8, 16, 64):
        cut = [({r: v for r, v in m.items() if r < n}, 2) for m in (a, b)]
        found = widest_interval(cut)
        cmp = compare(Sample(list(cut[1][0].values()), list(cut[1][0]), 2),
                      Sample(list(cut[0][0].values()), list(cut[0][0]), 2), paired=True)
        assert (found["cell"], found["against"]) == (1, 0) and found["ci95"] == cmp["ci95"]
        assert found["ci95"][0] < 1.5 < found["ci95"][1]
        halves.append((found["half"], cmp["method"]))
    assert halves[-1][0] < halves[0][0] and process_floor(2) > 0.02
    assert halves[-1][1] == "paired-rounds-and-processes-t-95"  # measured by the ratio, not assumed
    assert widest_interval([({0: 1.0, 1: 1.0}, 1), ({0: 2.0, 1: 2.0}, 1)]) is None  # fewer than 3 rounds
    alone = widest_interval([({}, 2), ({r: a[r] for r in range(8)}, 2)])  # the other cell failed: its own median
    assert alone["cell"] == 1 and alone["against"] is None and alone["ci95"][0] < alone["ratio"] < alone["ci95"][1]


def test_failures_are_rows_and_parity_failures_are_never_ranked(fakes, tmp_path, capsys):
    assert _run(tmp_path, "--framework", "fake,fake-wrong,fake-crash") == 1
    df = records.load(tmp_path / "out").set_index("framework")
    assert df.loc["fake", "status"] == "ok" and df.loc["fake", "parity.status"] == "passed"
    assert df.loc["fake-wrong", "status"] == "ok" and df.loc["fake-wrong", "parity.status"] == "failed"
    assert df.loc["fake-crash", "status"] == "failed"
    assert df.loc["fake-crash", "error"] == "RuntimeError: the fake framework crashed while loading"
    assert "Traceback" in df.loc["fake-crash", "traceback"]
    out = capsys.readouterr().out
    assert "fake-wrong bs1 FAILED PARITY" in out and "fake-crash bs1 failed" in out
    assert ": fake, " in out.splitlines()[2]  # recommended: not fake-wrong, however fast


def test_cells_are_loaded_once_and_interleaved_in_random_order(fakes, tmp_path, monkeypatch):
    log = tmp_path / "loads.log"
    monkeypatch.setenv("FAKE_LOAD_LOG", str(log))
    assert _run(tmp_path, "--framework", "fake,fake-slow,fake-wrong", "--rounds", "8") == 1  # fake-wrong: parity
    assert len(log.read_text().split()) == 9  # three workers per cell (8 rounds: the default), each loaded once
    recs = records.iter_records(tmp_path / "out")[0]
    blocks = sorted((b["started_at"], b["round"], r["framework"]) for r in recs for b in r["timing"]["blocks"])
    assert [rnd for _, rnd, _ in blocks] == sorted(r for r in range(8) for _ in range(3))  # round by round
    orders = {tuple(fw for _, rnd, fw in blocks if rnd == r) for r in range(8)}
    assert len(orders) > 1  # a fresh random order per round (all 8 alike: chance 6 x 6^-8)
    assert len({r["timing"]["group"] for r in recs}) == 1 and recs[0]["timing"]["group_cells"] == 3


def test_a_models_exports_share_one_process_and_a_failure_fails_its_own(fakes, tmp_path, monkeypatch, capsys):
    log = tmp_path / "exports.log"
    monkeypatch.setenv("FAKE_EXPORT_LOG", str(log))
    assert _run(tmp_path, "--framework", "fake") == 0
    (keras, pid1), (reference, pid2) = (line.split() for line in log.read_text().splitlines())
    assert (keras, reference) == ("keras", "reference") and pid1 == pid2  # one process for both
    assert "export reference  exported in" in capsys.readouterr().err
    # a failure in the shared process: what was made before it stays made, the failure is the cell's reason
    log.unlink()
    monkeypatch.setenv("FAKE_REFERENCE_FAILS", "1")
    assert _run(tmp_path, "--framework", "fake", "--seed", "1") == 1
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["keras", "reference"]
    (rec,) = [r for r in records.iter_records(tmp_path / "out")[0] if r["config"]["seed"] == 1]
    assert rec["status"] == "failed" and "the fake reference export failed" in rec["error"]
    err = capsys.readouterr().err
    assert "export keras  exported in" in err and "export reference  FAILED: RuntimeError: the fake reference" in err


def test_an_export_killed_in_the_shared_process_is_retried_alone(fakes, tmp_path, monkeypatch, capsys):
    """An export the kernel kills (for memory, say) while it shares a process with the model's other exports is
    run again in a process of its own; what was made before it stays made."""
    log = tmp_path / "exports.log"
    monkeypatch.setenv("FAKE_EXPORT_LOG", str(log))
    monkeypatch.setenv("FAKE_REFERENCE_KILLED_ONCE", str(tmp_path / "killed"))
    assert _run(tmp_path, "--framework", "fake") == 0
    (keras, pid1), (first, pid2), (again, pid3) = (line.split() for line in log.read_text().splitlines())
    assert (keras, first, again) == ("keras", "reference", "reference")
    assert pid1 == pid2 != pid3  # killed in the shared process, then alone
    (rec,) = records.iter_records(tmp_path / "out")[0]
    assert rec["status"] == "ok" and rec["parity"]["status"] == "passed"


def test_a_worker_that_dies_mid_rounds_fails_alone(fakes, tmp_path, capsys):
    assert _run(tmp_path, "--framework", "fake,fake-dies", "--min-iterations", "80") == 1
    df = records.load(tmp_path / "out").set_index("framework")
    assert df.loc["fake", "status"] == "ok" and len(df.loc["fake", "timing.blocks"]) == 4
    assert df.loc["fake-dies", "status"] == "failed"
    assert df.loc["fake-dies", "error"] == "child process exited with status 9 without a result"


def test_parity_is_checked_at_the_timed_batch_size_too(fakes, tmp_path, capsys):
    assert _run(tmp_path, "--framework", "fake,fake-batchbug", "--batch-size", "4") == 1  # a parity failure
    df = records.load(tmp_path / "out").set_index("framework")
    assert df.loc["fake", "parity.checked_batch_sizes"] == [16, 4]
    assert df.loc["fake-batchbug", "parity.status"] == "failed"
    # every parity call runs at the timed batch size, so the bug shows on the reference inputs too
    assert "timed batch (4): max_rel_err" in df.loc["fake-batchbug", "parity.reason"]
    assert "fake-batchbug bs4 FAILED PARITY" in capsys.readouterr().out


def test_children_never_inherit_what_changes_a_framework(fakes, tmp_path, monkeypatch, capsys):
    """The bug of the scripts inferbench replaces: TF_XLA_FLAGS auto-jit exported in the shell silently turned graph
    mode into XLA."""
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("ORT_FAKE", "1")
    assert _run(tmp_path, "--framework", "fake") == 0
    (rec,) = records.iter_records(tmp_path / "out")[0]
    assert rec["runner"]["environment_seen"] == {"TF_XLA_FLAGS": None, "OMP_NUM_THREADS": "1", "ORT_FAKE": None,
                                                 "KERAS_BACKEND": "tensorflow"}
    env = rec["config"]["child_env"]
    assert "TF_XLA_FLAGS" not in env and env["OMP_NUM_THREADS"] == "1" and env["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert "not passed on" in capsys.readouterr().err  # and the user is told, naming them
    # passed on by name, on purpose: the child sees it and the record says so
    assert _run(tmp_path, "--framework", "fake", "--pass-env", "TF_XLA_FLAGS") == 0
    (rec,) = [r for r in records.iter_records(tmp_path / "out")[0] if r["config"]["pass_env"]]
    assert rec["runner"]["environment_seen"]["TF_XLA_FLAGS"] == "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    assert rec["config"]["child_env"]["TF_XLA_FLAGS"] == "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    assert rec["config"]["pass_env"] == ["TF_XLA_FLAGS"]


def test_a_hung_child_is_killed_at_the_timeout(fakes, tmp_path, capsys):
    start = time.monotonic()
    assert _run(tmp_path, "--framework", "fake-hang", "--timeout", "3", "-v") == 1  # -v: every phase as a line
    assert time.monotonic() - start < 300  # the child would hang an hour: it was killed (a loaded runner is slow)
    rec = records.load(tmp_path / "out").iloc[0]
    assert rec["error"] == "timed out after 3 s"
    assert "loading" in capsys.readouterr().err  # progress still flowed while the parent waited


def test_runner_options_are_part_of_the_identity(fakes, tmp_path):
    """A plain and a --torch-compile record of the same cell are two cells: two files, never merged."""
    from inferbench.analysis import frames as analysis

    assert _run(tmp_path, "--framework", "fake") == 0
    assert _run(tmp_path, "--framework", "fake", "--torch-compile", "--keras-backend", "torch") == 0
    names = sorted(p.name for p in (tmp_path / "out").rglob("*_fake*.json"))
    assert names == ["mobilenet_v3_small_32_bs1_fake.json",
                     "mobilenet_v3_small_32_bs1_fake_compile+keras-backend-torch.json"]
    df = analysis.load(tmp_path / "out")
    assert sorted(analysis.latest(df)["framework"]) == ["fake", "fake+compile+keras-backend-torch"]
    tagged = df[df["variant"] != ""].iloc[0]
    assert tagged["options.torch_compile"] and tagged["config.child_env.KERAS_BACKEND"] == "torch"
    assert tagged["runner.keras_backend"] == "torch"  # the option reached the child's environment


def test_all_skips_what_is_not_installed_with_the_install_command(fakes, tmp_path, capsys, monkeypatch):
    from inferbench.registry import frameworks

    keep = {k: v for k, v in frameworks.FRAMEWORKS.items() if k in ("fake", "fake-slow")}
    monkeypatch.setattr(frameworks, "FRAMEWORKS", keep)
    monkeypatch.setattr(frameworks, "missing_packages",
                        lambda fw, *a, **k: ["slowlib"] if fw.key == "fake-slow" else [])
    assert _run(tmp_path, "--framework", "all") == 0
    err = capsys.readouterr().err
    assert 'not run here: fake-slow (slowlib not installed: pip install -e ".[test]")' in err
    assert list(records.load(tmp_path / "out")["framework"]) == ["fake"]
    # named explicitly, it is a failed row that says what to install
    assert _run(tmp_path / "b", "--framework", "fake-slow") == 1
    assert records.load(tmp_path / "b" / "out").iloc[0]["error"] == 'slowlib not installed: pip install -e ".[test]"'


def test_artifacts_exported_elsewhere_are_verified_and_brought_in(fakes, tmp_path, capsys, monkeypatch):
    """A machine that cannot export (a GPU machine without TensorFlow) uses a cache exported elsewhere: each
    artifact hashed against its manifest, copied into this machine's own cache folder, its origin in the record.
    A damaged one is not brought: the cell fails with one line naming what to install."""
    import dataclasses
    import shutil

    from inferbench.registry import artifacts

    assert _run(tmp_path, "--framework", "fake") == 0  # exported "elsewhere": every exporter installed
    (elsewhere,) = (tmp_path / "cache").glob("mobilenet_v3_small_32_*")
    capsys.readouterr()
    for kind in ("keras", "reference"):  # this machine lacks the exporters' framework (and so keys another folder)
        monkeypatch.setitem(artifacts.EXPORTERS, kind, dataclasses.replace(artifacts.EXPORTERS[kind],
                                                                         packages=("fake_tensorflow",)))
    assert _run(tmp_path / "here", "--framework", "fake", "--cache-dir", str(tmp_path / "cache"), cache=None) == 0
    err = capsys.readouterr().err
    assert f"keras  brought from {elsewhere.name}" in err and "fake_tensorflow not installed here" in err
    (here,) = set((tmp_path / "cache").glob("mobilenet_v3_small_32_*")) - {elsewhere}
    assert (here / fakes.WEIGHTS).read_bytes() == (elsewhere / fakes.WEIGHTS).read_bytes()
    rec = records.load(tmp_path / "here" / "out").iloc[0]
    assert rec["status"] == "ok" and rec["parity.status"] == "passed"
    raw = json.loads(next((tmp_path / "here" / "out").glob("*/*_fake.json")).read_text())
    assert raw["config"]["artifacts"]["keras"]["brought_from"]["folder"] == elsewhere.name
    assert raw["config"]["artifacts"]["reference"]["brought_from"]["folder"] == elsewhere.name

    shutil.rmtree(here)  # and once more, from a damaged copy: one weight changed after it was exported
    weights = elsewhere / fakes.WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-1] + bytes([weights.read_bytes()[-1] ^ 1]))
    assert _run(tmp_path / "damaged", "--framework", "fake", "--cache-dir", str(tmp_path / "cache"), cache=None) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out and "brought from" not in out.err
    error = records.load(tmp_path / "damaged" / "out").iloc[0]["error"]
    assert error == 'fake_tensorflow not installed: pip install -e ".[test]"'


def test_the_summary_grows_a_row_per_cell_and_is_never_rebuilt(fakes, tmp_path, monkeypatch):
    """summary.csv gets each cell's row once, as its record is written (a run used to rebuild it from every record
    after every group: quadratic in the run's size); comparisons and the recommendation cover every group."""
    from inferbench.analysis import runfiles as ranking

    rows = []
    real = ranking.summary_row
    monkeypatch.setattr(ranking, "summary_row", lambda r: rows.append(r["batch_size"]) or real(r))
    assert _run(tmp_path, "--framework", "fake", "--batch-size", "1,2,3") == 0
    assert sorted(rows) == [1, 2, 3]  # once per cell: three groups, no rebuild
    (folder,) = (tmp_path / "out").iterdir()
    summary = (folder / "summary.csv").read_text().splitlines()
    assert len(summary) == 4 and summary[0].startswith("run_id,framework")
    answer = json.loads((folder / "recommendation.json").read_text())
    assert [r["batch_size"] for r in answer["recommendations"]] == [1, 2, 3]
    assert len((folder / "comparisons.csv").read_text().splitlines()) == 4


def test_the_final_line_names_only_what_was_written(fakes, tmp_path, capsys, monkeypatch):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "summary.csv")

    monkeypatch.setattr("inferbench.analysis.runfiles.write_csv", full)
    monkeypatch.setattr("inferbench.analysis.runfiles.append_csv", full)
    assert _run(tmp_path, "--framework", "fake") == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("results: ")]
    assert "a JSON record per cell" in line and "summary.csv" not in line and "recommendation.json" not in line


def test_two_runs_exporting_one_model_to_one_cache_take_turns(fakes, tmp_path):
    """Two processes, one cache, one model, started together: the export runs once (the second waits for the
    first's lock, then finds it cached) and both runs measure."""
    launch = "import sys, fakes; fakes.register(); from inferbench.run import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(TESTS), "FAKE_EXPORT_LOG": str(tmp_path / "exports.log"),
           "FAKE_EXPORT_SLEEP": "2"}
    procs = [subprocess.Popen([sys.executable, "-c", launch, *QUICK, "--framework", "fake", "--output-dir",
                               str(tmp_path / f"out{i}"), "--cache-dir", str(tmp_path / "cache")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert (tmp_path / "exports.log").read_text().count("keras") == 1
    assert any("waiting: another inferbench process is exporting this model" in err for _, err in outs)
    for i in (1, 2):
        assert records.load(tmp_path / f"out{i}").iloc[0]["parity.status"] == "passed"


# --------------------------------------------------------------------------- sweeps: plan, resume, kills
GRID = ["--models", "mobilenet_v3_small", "--resolutions", "32", "--batch-sizes", "1,2,3",
        "--frameworks", "fake-slow,fake", "--duration", "0.3", "--min-iterations", "3", "--warmup", "1",
        "--warmup-seconds", "0", "--threads", "1", "--device", "cpu"]
LAUNCH = "import sys, fakes; fakes.register(); from inferbench.sweep import main; sys.exit(main(sys.argv[1:]))"


def _sweep_process(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.Popen([sys.executable, "-c", LAUNCH, *args], env=env, start_new_session=True, **kwargs)


def _records(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.glob("*.json")
            if p.name not in ("sweep.json", "recommendation.json")}


def _workers_of(parent: int) -> list[int]:
    """Live processes started by inferbench for the parent process ``parent``."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if f"INFERBENCH_PARENT_PID={parent}\0".encode() in env.read_bytes() + b"\0":
                stat = (env.parent / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":  # zombies are dead already
                    found.append(int(env.parent.name))
    return found


def test_killed_sweep_resumes_without_loss_or_repeat(fakes, tmp_path):
    sweep_dir = tmp_path / "s1"
    cache = tmp_path / "cache"
    proc = _sweep_process([*GRID, "--output-dir", str(tmp_path), "--name", "s1", "--cache-dir", str(cache)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while len(_records(sweep_dir)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the cell it was running, mid-flight
    proc.wait()
    before = _records(sweep_dir)
    assert 2 <= len(before) < 6, "the kill should land mid-sweep"

    assert sweep_main(["--resume", str(sweep_dir)]) == 0  # the plan knows its cache folder
    after = _records(sweep_dir)
    assert len(after) == 6
    for name, stamp in before.items():
        assert after[name] == stamp, f"{name} was rerun"
    assert not [p for p in sweep_dir.iterdir() if p.name.endswith(".tmp")]
    df = records.load(sweep_dir)
    assert not df.duplicated(["model", "resolution", "batch_size", "framework"]).any()
    assert (df["status"] == "ok").all() and set(df["parity.status"]) == {"passed"}
    assert len((sweep_dir / "summary.csv").read_text().splitlines()) == 7
    assert sweep_main(["--resume", str(sweep_dir)]) == 0  # a finished sweep runs nothing
    assert _records(sweep_dir) == after


def test_a_killed_sweep_takes_its_worker_with_it(fakes, tmp_path):
    """Killing only the sweep's process (not its group) must not leave a worker measuring on."""
    log = tmp_path / "progress.log"
    args = [*GRID[:4], "--batch-sizes", "1", "--frameworks", "fake-slow", "--duration", "120", "--min-iterations",
            "1", "--warmup", "0", "--warmup-seconds", "0", "--device", "cpu", "-v"]  # -v: the phases in the log
    proc = _sweep_process([*args, "--output-dir", str(tmp_path), "--name", "k", "--cache-dir", str(tmp_path / "c")],
                          stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        deadline = time.monotonic() + 300
        while "measuring" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "measuring" in log.read_text() and _workers_of(proc.pid), "no worker reached its timed window"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 60  # the kernel's SIGKILL of the orphan, on a loaded runner
        while _workers_of(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _workers_of(proc.pid), "the worker outlived the killed sweep"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _plan(tmp_path: Path, fakes) -> Path:
    """A finished small sweep; returns its folder."""
    args = [*GRID, "--frameworks", "fake", "--batch-sizes", "1", "--duration", "0.02"]
    assert sweep_main([*args, "--output-dir", str(tmp_path), "--name", "p", "--cache-dir", str(tmp_path / "c")]) == 0
    return tmp_path / "p"


@pytest.mark.parametrize("edit,message", [
    (lambda p: p["cells"][0].update(batch_size="two"), "plan.cells[0].batch_size: expected int"),
    (lambda p: p["config"].pop("threads"), "plan.config: missing key 'threads'"),
    (lambda p: p["config"]["timing"].update(min_iterations=0), "min_iterations must be at least 1"),
    (lambda p: p["cells"][0].update(framework="tensorflow-lite"), "unknown framework 'tensorflow-lite'"),
    (lambda p: p["cells"][0].update(model="vgg99"), "unknown model 'vgg99'"),
    (lambda p: p.update(plan_version=7), "plan_version 7"),
    (lambda p: p["config"].update(colour="blue"), "plan.config: unknown key(s) colour"),
    (lambda p: p.clear(), "plan_version None"),
    (lambda p: p["cells"][0].update(batch_size=0), "resolution must be pixels a side or HxW and batch_size positive"),
    (lambda p: p["cells"][0].update(precision="fp64"), "precision must be one of fp32, fp16, bf16"),
    (lambda p: p["cells"][0].update(precision="bf16"), "plan.cells[0]: fake does not run in bf16"),
    (lambda p: p["cells"][0].update(resolution=8), "plan.cells[0]: resolution 8 is too small"),
    (lambda p: p["cells"][0]["options"].update(channels_last=True), "fake does not take the options"),
    (lambda p: p["cells"][0]["options"].update(keras_backend="foo"), "keras_backend must be one of"),
    (lambda p: p["config"].update(threads=0), "threads must be positive"),
    (lambda p: p["config"].update(timeout_s=0), "timeout_s must be a positive finite number"),
    (lambda p: p["config"]["device"].update(kind="tpu"), "device must be the CPU or one GPU"),
    (lambda p: p.update(plan_version=1, settings=[1]), "is not a usable sweep plan"),
    (lambda p: p["config"]["timing"].update(min_duration_s=1e308), "plan: duration: must be at most 86400"),
    (lambda p: p["cells"][0].update(batch_size=99999999), "plan: batch_sizes: must be at most 65536"),
    (lambda p: p["config"].update(seed=2**70), "plan: seed: must be at most 4294967295"),
    (lambda p: p["cells"][0]["options"].update(postprocess="inside"), "--postprocess inside: mobilenet_v3_small "
     "(classification outputs) has no post-processing to time"),
])
def test_a_hand_edited_plan_is_one_line_and_exit_2(fakes, tmp_path, capsys, edit, message):
    sweep_dir = _plan(tmp_path, fakes)
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    edit(plan)
    (sweep_dir / "sweep.json").write_text(json.dumps(plan))
    (sweep_dir / "mobilenet_v3_small_32_bs1_fake.json").unlink()
    capsys.readouterr()
    assert sweep_main(["--resume", str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert message in err and "is not a usable sweep plan" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (sweep_dir / "mobilenet_v3_small_32_bs1_fake.json").exists()


def test_a_version_1_sweep_with_runner_options_resumes_without_rerunning(fakes, tmp_path):
    """Plan version 1 named records without the option tag: resuming one renames them, runs nothing twice."""
    args = [*GRID, "--frameworks", "fake", "--batch-sizes", "1,2", "--duration", "0.02", "--include-transfer"]
    assert sweep_main([*args, "--output-dir", str(tmp_path), "--name", "v1", "--cache-dir", str(tmp_path / "c")]) == 0
    sweep_dir = tmp_path / "v1"
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    timing = plan["config"]["timing"]
    old = {"plan_version": 1, "grid": {}, "cells": [
        {k: c[k] for k in ("model", "resolution", "batch_size", "framework", "precision")} for c in plan["cells"]],
        "settings": {"weights": "random", "seed": 0, "device": "cpu", "gpu_id": None, "threads": 1, "timing": timing,
                     "timeout": None, "options": {"include_transfer": True, "compile": False}}}
    (sweep_dir / "sweep.json").write_text(json.dumps(old))
    kept = sweep_dir / "mobilenet_v3_small_32_bs1_fake_e2e.json"
    stamp = kept.read_bytes()
    kept.rename(sweep_dir / "mobilenet_v3_small_32_bs1_fake.json")  # the name version 1 gave it
    (sweep_dir / "mobilenet_v3_small_32_bs2_fake_e2e.json").unlink()
    assert sweep_main(["--resume", str(sweep_dir), "--cache-dir", str(tmp_path / "c")]) == 0
    assert kept.read_bytes() == stamp  # renamed, not rerun
    assert sorted(p.name for p in sweep_dir.glob("*_fake*.json")) == [
        "mobilenet_v3_small_32_bs1_fake_e2e.json", "mobilenet_v3_small_32_bs2_fake_e2e.json"]


def test_thread_counts_are_kept_apart(fakes, tmp_path):
    from inferbench.analysis import frames as analysis

    assert _run(tmp_path, "--framework", "fake") == 0
    assert run_main([*QUICK, "--framework", "fake", "--threads", "2", "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(tmp_path / "cache")]) == 0
    assert sorted(analysis.latest(analysis.load(tmp_path / "out"))["threads"]) == [1, 2]


def test_a_foreign_plan_and_conflicting_flags_are_refused(fakes, tmp_path, capsys):
    sweep_dir = _plan(tmp_path, fakes)
    assert sweep_main(["--resume", str(sweep_dir), "--models", "resnet50"]) == 2
    assert "drop --models" in capsys.readouterr().err
    assert sweep_main(["--resume", str(sweep_dir), "--cache-dir", str(tmp_path / "elsewhere")]) == 2
    assert "uses the sweep's own cache dir" in capsys.readouterr().err
    (sweep_dir / "sweep.json").write_text("[1, 2]")
    assert sweep_main(["--resume", str(sweep_dir)]) == 2
    assert "not a usable sweep plan: not a JSON object" in capsys.readouterr().err
    assert sweep_main(["--resume", str(tmp_path / "nothing")]) == 2
    assert "not a sweep folder" in capsys.readouterr().err


def test_two_runs_in_the_same_second_get_two_folders(fakes, tmp_path, monkeypatch):
    from inferbench.execution import runs

    monkeypatch.setattr(runs.time, "strftime", lambda fmt, *a: "20260101-000000")
    assert _run(tmp_path, "--framework", "fake") == 0
    assert _run(tmp_path, "--framework", "fake", "--batch-size", "2") == 0
    folders = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert folders == ["20260101-000000_mobilenet_v3_small_32_cpu", "20260101-000000_mobilenet_v3_small_32_cpu-2"]
    assert [len(list((tmp_path / "out" / f).glob("*_fake.json"))) for f in folders] == [1, 1]


def test_a_group_too_big_to_load_side_by_side_is_refused_before_loading(monkeypatch):
    """ConvNeXt-XLarge's 1.4 GB of weights in ten frameworks at once would not fit in 24 GB: its cells fail with
    the reason and the way out, before any worker loads; one framework at a time (--sequential) goes ahead."""
    from inferbench.base import machine
    from inferbench.execution.exports import memory_refusal

    monkeypatch.setattr(machine, "memory_total_gb", lambda field="MemTotal": 22.0)
    why = memory_refusal({"params": 350_000_000}, 10)
    assert why and "about 49 GB" in why and "22 GB available" in why and "--sequential" in why
    assert memory_refusal({"params": 350_000_000}, 1) is None  # one worker (--sequential): 5 GB fits
    assert "this framework would hold about 57 GB" in memory_refusal({"params": 5_000_000_000}, 1)
    assert memory_refusal({"params": 5_500_000}, 10) is None  # MobileNetV3-Large: 10 x ~1.1 GB
    assert memory_refusal(None, 10) is None  # a model file without a Keras graph: size unknown


def test_a_group_waits_for_memory_the_group_before_is_still_releasing(monkeypatch):
    """The workers of the group before exit as the next group starts: eleven frameworks of MobileNetV3-Small were once
    refused with 12 of 23 GB available. Memory the machine has (at most 90% of its total needed) is waited for, a
    while; memory it does not have is refused at once."""
    from inferbench.base import machine
    from inferbench.execution import exports

    readings = iter([5.0, 5.0, 20.0])  # MemAvailable: two readings while the workers before exit, then released
    monkeypatch.setattr(machine, "memory_total_gb", lambda field="MemTotal": 22.0 if field == "MemTotal"
                        else next(readings, 20.0))
    assert exports.memory_refusal({"params": 5_500_000}, 11) is None
    monkeypatch.setattr(machine, "memory_total_gb", lambda field="MemTotal": 22.0 if field == "MemTotal" else 5.0)
    monkeypatch.setattr(exports, "MEMORY_WAIT_S", 1.0)
    why = exports.memory_refusal({"params": 5_500_000}, 11)
    assert why and "5 GB available" in why  # still held after the wait: refused, saying so


def test_the_compiled_program_cache_is_this_users_alone(tmp_path, monkeypatch):
    """Inductor loads and runs what its cache holds (pickled graphs, generated modules): it never lives in the
    shared artifact cache, and a folder others can write to is not used."""
    from inferbench.execution import childenv

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    childenv.private_cache.cache_clear()
    try:
        mine = childenv.private_cache("torchinductor")
        assert mine == tmp_path / "inferbench" / "private" / "torchinductor"
        assert mine.stat().st_mode & 0o777 == 0o700
        childenv.private_cache.cache_clear()
        (tmp_path / "inferbench" / "private").chmod(0o777)  # writable by anyone: refused
        fallback = childenv.private_cache("torchinductor")
        assert not fallback.is_relative_to(tmp_path) and fallback.stat().st_mode & 0o777 == 0o700
    finally:
        childenv.private_cache.cache_clear()


def test_the_test_slowdown_hook_is_said_loudly_when_the_shell_sets_it(fakes, tmp_path, capsys, monkeypatch):
    """INFERBENCH_TEST_SLOWDOWN (benchmarks/aa_calibration.py's hook) slows a framework's timed calls on purpose; set
    in a shell it once turned a 1.2 ms p50 into 20 ms with nothing said: the run says so first, the record too."""
    monkeypatch.setenv("INFERBENCH_TEST_SLOWDOWN", "fake:3")
    assert _run(tmp_path, "--framework", "fake") == 0
    err = capsys.readouterr().err
    assert "WARNING: INFERBENCH_TEST_SLOWDOWN=fake:3 is set: that framework's timed calls are slowed on purpose" in err
    (rec,) = records.iter_records(tmp_path / "out")[0]
    assert rec["timing"]["test_slowdown"] == 3.0
    # a sleep after each 2 ms call, calibrated to make the whole 3x: never shorter than asked
    assert rec["latency_ms"]["p50"] >= 3 * 2.0 * 0.9
    monkeypatch.setenv("INFERBENCH_TEST_SLOWDOWN", "fake:0.5")  # no slowdown: one line, nothing measured
    assert _run(tmp_path / "bad", "--framework", "fake") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("INFERBENCH_TEST_SLOWDOWN=fake:0.5: the factor must be a number above 1 (at most 100)")
    assert not list((tmp_path / "bad").rglob("*.json"))


def _python_b(path: Path, env: str = "") -> Path:
    """Another "install" for --ab-python: a script that runs this interpreter, with ``env`` (``NAME=value``: the test
    hook's slowdown, a load that fails) set for its workers only."""
    path.write_text(f'#!/bin/sh\n{env + " " if env else ""}exec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def _busy(recs: Iterable[dict]) -> bool:
    """Did the machine leave a record of these not valid (other work beside the rounds)?"""
    return any((r.get("validity") or {}).get("valid") is False for r in recs)


def test_an_ab_in_one_run_pairs_each_cell_with_its_twin_and_compare_gates_on_it(fakes, tmp_path, capsys):
    """--ab-python measures every cell a second time by another interpreter's workers, as a '+ab-<digest>' twin in
    the same group's interleaved rounds; `compare RUN` judges B against A paired within the rounds, with no term
    between invocations: an A/A passes a 10% gate, a 3x slowdown of B's workers alone (the hook set in B's
    interpreter only) is a REGRESSION. Whatever the machine's load: where it left a side not valid, compare says so
    (not comparable, exit 3) and nothing else; where it judged, the gate held (a 1.5x slowdown at load 5-7 once read
    1.65x [1.04-2.62]: slower, yet no REGRESSION at 10%: the test asked what the load did not allow)."""
    from inferbench.commands import main as inferbench

    same = _python_b(tmp_path / "same-python")
    assert _run(tmp_path / "aa", "--framework", "fake", "--rounds", "6", "--ab-python", str(same)) == 0
    out, err = capsys.readouterr()
    assert "--fail-above 10   (each +ab-" in out
    assert f"A/B in one run: B is {same} (Python" in err
    assert "the same package versions as this install: an A/A unless" in err
    recs = {r["variant"]: r for r in records.iter_records(tmp_path / "aa" / "out")[0]}
    (twin,) = [v for v in recs if v]
    assert re.fullmatch(r"ab-[0-9a-f]{8}", twin) and set(recs) == {"", twin}
    assert recs[twin]["timing"]["group"] == recs[""]["timing"]["group"]  # one group, interleaved
    assert recs[twin]["environment"]["interpreter"] == str(same) and "interpreter" not in recs[""]["environment"]
    assert len({b["round"] for b in recs[twin]["timing"]["blocks"]}) == 6
    (run_dir,) = (tmp_path / "aa" / "out").iterdir()
    status = inferbench(["compare", str(run_dir), "--fail-above", "10"])
    out = capsys.readouterr().out
    assert "A p50 ms" in out and "B/A [95% CI]" in out and "REGRESSION" not in out
    if _busy(recs.values()):  # the machine did not let the rounds be judged: said, never a verdict
        assert status == 3 and "measured on a busy machine (not valid)" in out, out
    else:
        assert status == 0 and "1 of 1 judged cells paired with their twin within the run's rounds" in out, out

    recommendation = json.loads((run_dir / "recommendation.json").read_text())["recommendations"][0]
    assert recommendation["recommended"] == "fake" and any("an A/B twin" in why for why in
                                                           recommendation["not_ranked"].values())

    slow = _python_b(tmp_path / "slow-python", "INFERBENCH_TEST_SLOWDOWN=fake:3")
    assert _run(tmp_path / "ab", "--framework", "fake", "--rounds", "8", "--ab-python", str(slow)) == 0
    capsys.readouterr()
    (run_dir,) = (tmp_path / "ab" / "out").iterdir()
    status = inferbench(["compare", str(run_dir), "--fail-above", "10", "--json"])
    doc = json.loads(capsys.readouterr().out)
    if _busy(records.iter_records(run_dir)[0]):
        assert status == 3 and doc["cells"][0]["verdict"].startswith("not comparable"), doc
        return  # the rest needs a judged pair: the load did not allow one
    assert status == 1, doc
    import jsonschema

    from inferbench.cli.jsonout import SCHEMA

    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(doc, {"$ref": "#/$defs/compare", "$defs": schema["$defs"]})
    (row,) = doc["cells"]
    assert doc["ab"] is True and row["verdict"].startswith("REGRESSION") and row["method"].startswith("paired")
    assert row["ratio"] > 2.0, row  # 3x asked; REGRESSION: its whole interval above 1.10
    assert inferbench(["compare", str(run_dir), "--csv", str(tmp_path / "ab.csv")]) == 0
    table = (tmp_path / "ab.csv").read_text().splitlines()
    assert table[0].endswith(",b,b_interpreter") and table[1].endswith(f",{slow}") and len(table) == 2
    twin_file = next(p for p in run_dir.glob("*_ab-*.json"))
    twin_file.unlink()  # a cell whose twin was never measured (left out, failed to start): not judged, said
    capsys.readouterr()
    assert inferbench(["compare", str(run_dir), "--fail-above", "10", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, {"$ref": "#/$defs/compare", "$defs": schema["$defs"]})
    assert doc["cells"][0]["verdict"].startswith("not comparable: its twin (B) was not measured")
    # B cannot load the model: its twin failed where its cell ran, a regression (never "not comparable")
    broken = _python_b(tmp_path / "broken-python", "FAKE_FAIL_LOAD=1")
    assert _run(tmp_path / "broken", "--framework", "fake", "--ab-python", str(broken)) == 1
    capsys.readouterr()
    assert inferbench(["compare", str(next((tmp_path / "broken" / "out").iterdir())), "--fail-above", "10"]) == 1
    assert "failed in B (REGRESSION)" in capsys.readouterr().out
    # bad input: one line, exit 2, nothing written
    assert _run(tmp_path / "bad", "--framework", "fake", "--ab-python", str(tmp_path / "no-python")) == 2
    assert "--ab-python" in capsys.readouterr().err and not (tmp_path / "bad" / "out").exists()
    assert _run(tmp_path / "bad", "--framework", "fake", "--ab-python", str(same), "--sequential") == 2
    assert "not here (--sequential measures each cell on its own, unpaired)" in capsys.readouterr().err
    assert inferbench(["compare", str(next((tmp_path / "aa" / "out").iterdir()) / "nothing")]) == 2
    plain = tmp_path / "plain"
    assert _run(plain, "--framework", "fake") == 0
    capsys.readouterr()
    assert inferbench(["compare", str(next((plain / "out").iterdir()))]) == 2
    assert "holds no A/B twins" in capsys.readouterr().err


def test_a_sweep_with_twins_resumes_only_with_the_install_its_twins_were_measured_by(fakes, tmp_path, capsys):
    """--ab-python's B is kept in the sweep's plan (its interpreter, packages and their digest); --resume checks that
    B is still that install: an upgraded (here: a plan whose digest no longer matches) is one line, exit 2."""
    same = _python_b(tmp_path / "same-python")
    assert sweep_main([*QUICK, "--framework", "fake", "--ab-python", str(same), "--output-dir", str(tmp_path),
                       "--name", "ab", "--cache-dir", str(tmp_path / "c")]) == 0
    sweep_dir = tmp_path / "ab"
    assert sorted(p.name for p in sweep_dir.glob("*_fake*.json"))[1].startswith("mobilenet_v3_small_32_bs1_fake_ab-")
    assert sweep_main(["--resume", str(sweep_dir)]) == 0  # the same B: nothing left to run
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    plan["config"]["ab"]["digest"] = "00000000"
    (sweep_dir / "sweep.json").write_text(json.dumps(plan))
    capsys.readouterr()
    assert sweep_main(["--resume", str(sweep_dir)]) == 2
    assert "is no longer the install this sweep's twins were measured by" in capsys.readouterr().err
