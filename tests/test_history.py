"""The history (inferbench history, inferbench/timeline/): every run's records kept in a real DuckDB file, series
per cell and machine, steps found on simulated series with a known truth (tests/history_sim.py), and bad input as
one line. The same store on a real PostgreSQL server: the opt-in layer at the end (-m postgres)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from history_sim import row, series_rows
from test_json_output import _document
from test_pipeline import _run

from inferbench.commands import main as inferbench
from inferbench.timeline import keep, steps
from inferbench.timeline.series import series_of
from inferbench.timeline.store import opened


def _doc(capsys):
    """The one --json document, valid against the published schema (output.schema.json's ``history``)."""
    return _document(capsys, "history")


def test_two_runs_are_one_series_of_two_points_in_a_real_duckdb_file(fakes, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("INFERBENCH_HISTORY")  # the default: history.duckdb in the results' root (--output-dir)
    assert _run(tmp_path, "--framework", "fake") == 0
    assert _run(tmp_path, "--framework", "fake") == 0
    store = tmp_path / "out" / "history.duckdb"
    assert "history: 1 record(s) added to " + str(store) in capsys.readouterr().err
    assert inferbench(["history", "show", "--history", str(store), "--json"]) == 0
    (series,) = _doc(capsys)["series"]
    assert series["key"]["framework"] == "fake" and len(series["points"]) == 2
    runs = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert [p["run_id"] for p in series["points"]] == runs  # oldest first, each run once
    # a run the load left not valid, or at another machine speed, is kept apart from the level and says why
    apart = [p["apart"] for p in series["points"] if p["apart"]]
    assert all(a.startswith(("NOT VALID (a busy machine)", "another machine speed")) for a in apart), apart
    kept = 2 - len(apart)
    assert series["not_searched"].startswith(f"{kept} comparable point(s)")  # two runs: too few to look for steps
    assert inferbench(["history", "show", "--history", str(store)]) == 0
    header, _, line = capsys.readouterr().out.splitlines()
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    shown = readme[readme.index("**Over time.**"):].split("```\n", 2)[1].splitlines()
    assert header.split() == shown[0].split()  # README's line is what show prints after two runs
    assert line.endswith(f"not yet ({kept} of 6 runs)") and shown[1].endswith("not yet (2 of 6 runs)")
    # each record once, by content: adding the same folders again adds nothing
    assert inferbench(["history", "add", str(tmp_path / "out"), "--history", str(store)]) == 0
    assert "0 record(s) added, 2 already there" in capsys.readouterr().out
    with opened(store) as s:
        (r,) = s.rows("run_id = ?", (runs[0],))
    assert r["p50_ms"] > 0 and r["p50_ci95_low_ms"] < r["p50_ms"] < r["p50_ci95_high_ms"] and r["parity"] == "passed"
    assert r["cpu_model"] and r["inferbench_version"] and r["created_at"].tzinfo is not None


def test_history_off_keeps_none_and_a_broken_store_never_fails_the_run(fakes, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("INFERBENCH_HISTORY")
    assert _run(tmp_path / "a", "--framework", "fake", "--history", "off") == 0
    assert not (tmp_path / "a" / "out" / "history.duckdb").exists()
    bad = tmp_path / "bad.duckdb"
    bad.write_text("not a database\n")
    assert _run(tmp_path / "b", "--framework", "fake", "--history", str(bad)) == 0  # the records are on disk
    err = capsys.readouterr().err
    assert "history not updated" in err and f"inferbench history add {tmp_path / 'b' / 'out'}" in err
    assert bad.read_text() == "not a database\n"


def test_bad_input_is_one_line_and_exit_2(fakes, tmp_path, capsys):
    bad = tmp_path / "bad.duckdb"
    bad.write_text("garbage")
    assert inferbench(["history", "show", "--history", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a valid DuckDB database file" in err and "Traceback" not in err
    assert inferbench(["history", "show", "--history", str(tmp_path / "none.duckdb")]) == 2
    assert "no history at" in capsys.readouterr().err
    assert not (tmp_path / "none.duckdb").exists()  # show never makes a store
    alien = tmp_path / "alien"
    alien.mkdir()
    (alien / "r.json").write_text(json.dumps({"schema_version": 99, "framework": "x"}))
    assert inferbench(["history", "add", str(alien), "--history", str(tmp_path / "h.duckdb")]) == 2
    assert "schema_version 99" in capsys.readouterr().err
    assert inferbench(["history", "add", str(tmp_path / "empty-nothing"), "--history", str(tmp_path / "h.db")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_a_series_of_one_point_is_said_and_check_judges_nothing(tmp_path, capsys):
    store = tmp_path / "h.duckdb"
    with opened(store) as s:
        s.add(series_rows(1, {}, seed=1))
    assert inferbench(["history", "show", "--history", str(store), "--points"]) == 0
    assert "1 comparable point(s): at least 6 are needed" in capsys.readouterr().out
    assert inferbench(["history", "check", "--history", str(store), "--fail-on-step", "5"]) == 3
    assert "nothing could be judged" in capsys.readouterr().err


def test_check_exits_1_on_a_simulated_slowdown_and_names_what_changed(tmp_path, capsys):
    store = tmp_path / "h.duckdb"
    with opened(store) as s:
        s.add(series_rows(30, {15: 1.2}, seed=3, slow_share=0, busy_share=0))
    assert inferbench(["history", "check", "--history", str(store), "--fail-on-step", "10", "--json"]) == 1
    doc = _doc(capsys)
    ((x,),) = [s["steps"] for s in doc["series"]]
    assert abs(x["ratio"] - 1.2) < 0.05 and x["ratio_ci95"][0] < 1.2 < x["ratio_ci95"][1]
    assert x["at_run"] in {f"run-{i:04d}" for i in range(13, 18)}
    assert x["changed"]["runtime"] == ["onnxruntime 1.30.0", "onnxruntime 1.31.0"]
    assert inferbench(["history", "check", "--history", str(store), "--fail-on-step", "30"]) == 0


def test_steps_are_found_near_the_truth_and_not_where_there_are_none():
    """60-run series, heavy-tailed invocation effects, slow machine states and busy runs (the truth is not the
    detector's model): two true 10% steps are found within 3 runs in most series, and series without a step get
    almost none. A detector that answers a constant (always the middle, or never) fails one side or the other."""
    found = false = 0
    ratios = []
    for seed in range(30):
        s = series_of(series_rows(60, {20: 1.1, 40: 1.1}, seed=seed))[0]
        for x in steps.detect(s).steps:
            at = s.points.index(s.kept[x.index])
            near = any(abs(at - t) <= 3 for t in (20, 40))
            found, false = found + near, false + (not near)
            ratios += [x.ratio] if near else []
    assert found >= 0.85 * 60 and false <= 18  # the goal: at most 1 false step per 100 runs (1,800 here)
    assert 1.07 < sorted(ratios)[len(ratios) // 2] < 1.13  # each step's size: 10%
    null = sum(len(steps.detect(series_of(series_rows(60, {}, seed=100 + seed))[0]).steps) for seed in range(30))
    assert null <= 18  # the benchmark's 200 series a case: docs/history.md


def test_confirm_measures_the_step_as_an_ab_in_one_run_and_check_reads_it(fakes, tmp_path, capsys):
    """A step found in the history (a simulated 3x slowdown of the fake runtime's cell) is re-measured here and by
    the other install (--ab-python: a 3x slowed interpreter, the test hook set in its workers only, standing for the
    side before the step) as an A/B in one run; the confirmed ratio is kept beside the step, and check goes by it.
    Where the machine's load left the pair unjudged, confirm says so (exit 3) and keeps nothing."""
    from test_pipeline import _python_b

    store = tmp_path / "h.duckdb"
    rows = series_rows(12, {6: 3.0}, seed=2, slow_share=0, busy_share=0, framework="fake")
    with opened(store) as s:
        s.add([{**r, "model": "mobilenet_v3_small", "resolution": "32", "threads": 1} for r in rows])
    assert inferbench(["history", "check", "--history", str(store), "--json"]) == 1
    ((step,),) = [s["steps"] for s in _doc(capsys)["series"]]
    slow = _python_b(tmp_path / "slow-python", "INFERBENCH_TEST_SLOWDOWN=fake:3")
    assert inferbench(["history", "confirm", "abc", "--history", str(store), "--ab-python", str(slow)]) == 2
    assert f"its steps are {step['id']}" in capsys.readouterr().err
    status = inferbench(["history", "confirm", step["id"], "--history", str(store), "--ab-python", str(slow),
                         "--quick", "--output-dir", str(tmp_path / "out"), "--json"])
    doc = _doc(capsys)
    if status == 3:  # the load left the pair unjudged: said, nothing kept
        assert doc["confirmed"] is None
        return
    c = doc["confirmed"]
    # this install is "after" (no version told it otherwise): B, the slowed one, stands for "before", so the A/B in
    # one run says the step went the other way, and check, which failed on the detected step, goes by it
    assert status == 0 and c["this_side"] == "after" and c["verdict"].startswith("reversed")
    assert c["ratio_ci95_low"] < c["ratio"] < c["ratio_ci95_high"] < 1 < step["ratio"]
    assert inferbench(["history", "check", "--history", str(store), "--json"]) == 0
    ((checked,),) = [s["steps"] for s in _doc(capsys)["series"] if s["steps"]]
    assert checked["confirmed"]["ratio"] == c["ratio"]


def test_the_report_shows_the_cells_series_over_time(fakes, tmp_path, capsys):
    """report --history: the series of the report's cells, one panel each, and the steps found in a table; a store
    that is not there is one line."""
    store = tmp_path / "h.duckdb"
    assert _run(tmp_path, "--framework", "fake", "--history", str(store)) == 0
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    rows = series_rows(20, {10: 1.5}, seed=4, slow_share=0, busy_share=0, framework="fake")
    with opened(store) as s:
        (mine,) = s.rows()
        s.add([{**r, **{k: mine[k] for k in ("model", "resolution", "device_name", "cpu_model", "cpu_flags",
                                               "threads")}} for r in rows])
    assert inferbench(["report", str(run_dir), "--out", str(tmp_path / "rep"), "--history", str(store)]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    section = md[md.index("## Over time"):]
    assert "![median latency over time, per series](history.png)" in section and (tmp_path / "rep" /
                                                                                 "history.png").stat().st_size
    assert "| mobilenet_v3_small@32 bs1 fake on " in section and "runtime onnxruntime 1.30.0 → onnxruntime" in section
    assert inferbench(["report", str(run_dir), "--out", str(tmp_path / "r2"), "--history", str(tmp_path / "no")]) == 2
    assert "no history store there" in capsys.readouterr().err


def test_busy_runs_and_another_machine_speed_stay_apart_from_the_level():
    when = series_rows(8, {}, seed=5, slow_share=0, busy_share=0)
    when.append(row(8, when[-1]["created_at"], 12.0, 0.01, busy=True, record_id="busy"))
    when.append(row(9, when[-1]["created_at"], 5.2, 0.01, speed=250.0, record_id="slow"))
    (s,) = series_of(when)
    busy, slow = (p.apart for p in s.points[-2:])
    assert busy == "NOT VALID (a busy machine)" and slow.startswith("another machine speed (250 GFLOP/s, usually 3")
    assert not steps.detect(s).steps  # neither moves the level


def test_the_noise_floor_is_the_series_own_spread():
    """A 6% step is a step on a quiet series and noise on one whose runs wander by 10% from one to the next."""
    quiet = series_of(series_rows(40, {20: 1.06}, seed=7, invocation_sd=0.005, slow_share=0, busy_share=0))[0]
    noisy = series_of(series_rows(40, {20: 1.06}, seed=7, invocation_sd=0.10, slow_share=0, busy_share=0))[0]
    q, n = steps.detect(quiet), steps.detect(noisy)
    assert len(q.steps) == 1 and abs(q.steps[0].ratio - 1.06) < 0.015 and q.floor < 0.03
    assert n.floor > 0.15 and not n.steps


def test_an_older_store_gains_the_columns_it_lacks(tmp_path):
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE records (record_id TEXT PRIMARY KEY, run_id TEXT)")
    con.execute("INSERT INTO records VALUES ('a', 'r')")
    con.close()
    with opened(path) as s:
        assert s.count() == 1 and s.add(series_rows(2, {}, seed=1)) == 2
        assert {r["record_id"] for r in s.rows()} >= {"a"}


def test_the_default_store_follows_output_dir_and_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("INFERBENCH_HISTORY")
    assert keep.location({"output_dir": "inferbench-results"}) == os.path.join("inferbench-results",
                                                                                "history.duckdb")
    assert keep.location({"output_dir": str(tmp_path), "_given": ["output_dir"]}) == str(tmp_path / "history.duckdb")
    assert keep.location({"history": "off"}) == ""
    monkeypatch.setenv("INFERBENCH_HISTORY", "postgresql://u:secret@db/h")
    assert keep.location({"output_dir": str(tmp_path)}) == "postgresql://u:secret@db/h"


# --------------------------------------------------------------------------- the opt-in layer: a real PostgreSQL
def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server from Debian's packages (postgresql), in a temporary folder, on a Unix socket only; run as
    the 'postgres' user when the tests run as root (the server refuses root)."""
    bin_ = _postgres_bin()
    if bin_ is None:
        pytest.fail("PostgreSQL's server is not installed: apt-get install postgresql (the -m postgres layer needs it)")
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="inferbench-pg-"))  # not under pytest's own folder: the server's user reads it
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_user, str(bin_ / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
                   check=True, capture_output=True)
    subprocess.run([*as_user, str(bin_ / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log"), "-o",
                    f"-c listen_addresses='' -c unix_socket_directories={sock}", "start"], check=True,
                   capture_output=True)
    try:
        yield f"postgresql://postgres@/postgres?host={sock}"
    finally:
        subprocess.run([*as_user, str(bin_ / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.postgres
def test_the_same_history_in_a_real_postgresql_server(fakes, tmp_path, capsys, postgres):
    assert _run(tmp_path, "--framework", "fake", "--history", postgres) == 0
    assert "history: 1 record(s) added to postgresql://" in capsys.readouterr().err
    with opened(postgres) as s:
        s.add(series_rows(30, {15: 1.2}, seed=3, slow_share=0, busy_share=0))
        assert s.add(series_rows(30, {15: 1.2}, seed=3, slow_share=0, busy_share=0)) == 0  # once, by content
    assert inferbench(["history", "check", "--history", postgres, "--fail-on-step", "10", "--json"]) == 1
    doc = _doc(capsys)
    assert {s["key"]["framework"] for s in doc["series"]} == {"fake", "onnxrt"}
    (x,) = [x for s in doc["series"] for x in s["steps"]]
    assert math.isclose(x["ratio"], 1.2, rel_tol=0.05)
    assert inferbench(["history", "show", "--history", "postgresql://u:secret@/none?host=/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "history store postgresql://u:***@" in err and "secret" not in err and len(err.splitlines()) == 1
