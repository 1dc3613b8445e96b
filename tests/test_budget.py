"""--time-budget: the plan says up front what fits, and the run keeps to it (fake runners, fake clocks)."""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

import pytest

from inferbench.base.errors import UsageError
from inferbench.execution import budget, remembered
from inferbench.options import parse_duration
from inferbench.run import main as run_main
from inferbench.sweep import main as sweep_main

QUICK = ["--model", "mobilenet_v3_small", "--resolution", "32", "--min-iterations", "3", "--warmup", "1",
         "--threads", "1", "--device", "cpu"]


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("20m", 1200), ("1h30m", 5400), ("1.5h", 5400),
                                          ("2min", 120), ("1h 5m 3s", 3903)])
def test_durations_read_as_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0s", "soon", "-5m", "5x", "m", "1h30", "2m5"])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def _plan(fakes, tmp_path, *argv):
    """The run's configuration and cells as `run` builds them (no budget), and the (model, resolution) pairs to
    export (none: a warm cache)."""
    from inferbench.cli.options import given
    from inferbench.execution.plan import build
    from inferbench.options import with_defaults
    from inferbench.run import build_parser

    values = with_defaults(given(build_parser().parse_args([*QUICK, *argv, "--cache-dir", str(tmp_path)])), "run")
    built = build(values)
    return built.config, list(built.cells)


def test_the_estimate_follows_what_the_plan_measures(fakes, tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "SETUP_S", {"fake": 1.0, "fake-slow": 20.0})
    config, cells = _plan(fakes, tmp_path, "--framework", "fake,fake-slow", "--batch-size", "1,2")
    one = budget.estimate(config, cells[:1], {})
    assert budget.estimate(config, cells, {}) > budget.estimate(config, cells[:2], {}) > one
    # a framework's set-up, its rounds, the exports not in the cache
    slow = [c for c in cells if c.framework == "fake-slow"][:1]
    assert budget.estimate(config, slow, {}) - one == pytest.approx(3 * 19.0)  # three workers (8 rounds)
    missing = {("mobilenet_v3_small", 32): {"keras", "reference"}}
    assert budget.estimate(config, cells[:1], missing) == pytest.approx(one + 2 * budget.EXPORT_S)
    assert budget.to_export(config, cells) == missing  # an empty cache
    assert budget.shrunk(config, 1.0) == config
    floor = budget.shrunk(config, 0.0)
    assert (floor.timing.rounds, floor.timing.min_duration_s, floor.processes, floor.quick) == (6, 3.0, 1, True)
    # one worker process instead of three: about a third of the set-up
    assert budget.estimate(floor, slow, {}) < budget.estimate(config, slow, {}) / 2.5


def test_a_busy_machine_makes_the_plan_count_its_set_ups_longer(fakes, tmp_path, monkeypatch):
    """Loading and first calls take longer while other work takes the cores: the plan counts its set-ups (and
    exports) threads / free cores longer — 1 where they fit, at most 4x — and says so; a plan that fitted on a quiet
    machine is shrunk on a busy one."""
    assert budget.slowdown_for(2, 0.0, 2) == 1.0 and budget.slowdown_for(1, 1.0, 2) == 1.0
    assert budget.slowdown_for(2, 1.0, 2) == 2.0 and budget.slowdown_for(2, 1.9, 2) == budget.MAX_BUSY_SLOWDOWN
    monkeypatch.setattr(budget, "SETUP_S", {"fake": 1.0, "fake-slow": 20.0})
    config, cells = _plan(fakes, tmp_path, "--framework", "fake,fake-slow")
    quiet = budget.estimate(config, cells, {})
    busy = budget.estimate(config, cells, {}, slowdown=2.0)
    set_up = sum(budget.setup_s(c.framework, config.processes, config.timing) for c in cells)
    assert busy - quiet == pytest.approx(set_up, rel=0.1)  # the set-ups twice as long, the timed seconds alike
    assert budget.fit(config, cells, quiet + 1, {}).config == config
    fitted = budget.fit(config, cells, quiet + 1, {}, busy=(2.0, 1.0))
    assert fitted.config != config and fitted.estimate_s <= quiet + 1
    assert "the machine is busy now (other work took 1.0 of" in " ".join(fitted.lines)


def test_the_plan_shrinks_its_rounds_then_leaves_out_the_costliest_framework(fakes, tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "SETUP_S", {"fake": 1.0, "fake-slow": 20.0, "fake-quiet": 2.0})
    config, cells = _plan(fakes, tmp_path, "--framework", "fake,fake-slow,fake-quiet", "--rounds", "12",
                          "--duration", "12")
    own = budget.estimate(config, cells, {})
    assert budget.fit(config, cells, own + 1, {}).config == config  # it fits: nothing changes
    # a little short: the rounds shrink (not to the floor), every framework kept
    fitted = budget.fit(config, cells, own * 0.85, {})
    assert {c.framework for c in fitted.cells} == {"fake", "fake-slow", "fake-quiet"} and not fitted.left_out
    assert 6 < fitted.config.timing.rounds < 12 and fitted.estimate_s <= own * 0.85
    assert fitted.config.processes == 3 and not fitted.config.quick
    assert "instead of 12 rounds, 12 s a cell, 3 processes" in fitted.lines[0]
    assert fitted.lines[-1].startswith("time budget")
    # far too short for all three: the rounds at the floor; the costliest framework (fake-slow's set-up) may be left
    # out: it stays in the plan, loaded last, and only where the time left allows it when its turn comes
    floor = budget.estimate(budget.shrunk(config, 0.0), [c for c in cells if c.framework != "fake-slow"], {})
    fitted = budget.fit(config, cells, floor + 1, {})
    assert fitted.config.timing.rounds == 6 and fitted.config.processes == 1 and list(fitted.left_out) == ["fake-slow"]
    assert [c.framework for c in fitted.cells] == ["fake", "fake-quiet", "fake-slow"]
    assert any("may leave out fake-slow (about" in line and "the costliest last" in line for line in fitted.lines)
    # shorter than one framework's smallest plan: refused, with what it would take
    with pytest.raises(UsageError, match="is too short: the smallest plan's first group"):
        budget.fit(config, cells, 2.0, {})


def test_a_budget_shorter_than_the_first_group_is_refused_even_with_more_groups(fakes, tmp_path, monkeypatch):
    """Three groups of one slow framework: 'the groups that fit' would start the first and overrun the budget."""
    monkeypatch.setattr(budget, "SETUP_S", {"fake-slow": 60.0})
    config, cells = _plan(fakes, tmp_path, "--framework", "fake-slow", "--batch-size", "1,4,16")
    first = budget.estimate(budget.shrunk(config, 0.0), cells[:1], {})
    with pytest.raises(UsageError, match="first group"):
        budget.fit(config, cells, first * 0.9, {})
    fitted = budget.fit(config, cells, first * 1.5, {})  # the first group fits, the plan does not: said
    assert "the groups that fit are measured" in fitted.lines[-1] and len(fitted.cells) == 3


def test_a_run_says_what_fits_and_measures_that(fakes, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(budget, "SETUP_S", {"fake": 0.5, "fake-slow": 300.0})
    args = [*QUICK, "--framework", "fake,fake-slow", "--rounds", "6", "--duration", "30", "--output-dir",
            str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    assert run_main([*args, "--time-budget", "90s"]) == 0
    said = capsys.readouterr()
    err = said.err
    assert "measuring 6 rounds, 3 s a cell, 1 process instead of 6 rounds, 30 s a cell, 3 processes" in err
    assert "time budget 1m30s may leave out fake-slow (about " in err
    # fake-slow was not loaded when its turn came (300 s foreseen for its set-up): the answer names it beside it
    answer = said.out.split("\n\n", 1)[0]
    assert "left out by --time-budget (not measured, so not in the answer): mobilenet_v3_small@32 fake-slow bs1" \
        in answer
    (run_dir,) = (tmp_path / "out").iterdir()
    (record,) = [json.loads(p.read_text()) for p in run_dir.glob("*_fake*.json")]
    assert record["framework"] == "fake" and record["config"]["timing"]["rounds"] == 6
    assert record["config"]["timing"]["min_duration_s"] == 3.0 and record["config"]["quick"] is True  # 0.5 s blocks
    assert record["config"]["processes"] == 1 and record["latency_ms"]["spread"]["processes"] == 1
    # too short for anything: one line, exit 2, nothing written
    assert run_main([*args, "--time-budget", "3s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--time-budget 3 s is too short" in err and "Traceback" not in err
    assert len(list((tmp_path / "out").iterdir())) == 1


class _Steps:
    """A clock that moves ``step`` seconds each time it is read (how far the run got, not how fast it ran)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class _Work:
    """A clock that only the run's work moves, whatever this machine's speed: each worker started costs its
    framework's set-up (``setups``), each block what such a block takes (a closed loop's or a training step's block its
    length, at least ``block_s``; a tuning block its own; a LoadGen test ``test_s``: a slow model waits for its minimum
    queries). Installed, every --time-budget reads it (against ``budget_s`` where given, whatever the command says)."""

    def __init__(self, setups: dict[str, float], test_s: float = 0.0, block_s: float = 0.0) -> None:
        self.now, self.setups, self.test_s, self.block_s = 0.0, setups, test_s, block_s

    def __call__(self) -> float:
        return self.now

    def install(self, monkeypatch: Any, budget_s: float | None = None) -> None:
        from inferbench.execution import handle
        from inferbench.registry.scenarios import scenario

        work, real = self, handle.Child

        class Charged(real):  # type: ignore[misc,valid-type]
            def __init__(self, job: Any, *args: Any, **kwargs: Any) -> None:
                work.now += work.setups.get(job.cell.framework, 0.0)
                self.charged_job = job
                super().__init__(job, *args, **kwargs)

            def send(self, command: dict[str, Any]) -> None:
                config = self.charged_job.config
                if "block" in command:
                    work.now += (work.test_s if scenario(config.scenario).serves else
                                 max(work.block_s, config.timing.block_s))
                elif "tune" in command:
                    work.now += command["tune"]["block_s"]
                super().send(command)

        class OnWork(budget.Deadline):
            def __init__(self, given_s: float, clock: Any = None) -> None:
                super().__init__(budget_s or given_s, work)

        monkeypatch.setattr(handle, "Child", Charged)
        monkeypatch.setattr(budget, "Deadline", OnWork)


def test_the_run_keeps_to_the_budget_and_a_sweep_resumes_what_it_left(fakes, tmp_path, capsys, monkeypatch):
    """The estimate said it fits (1 h), the work says otherwise (60 s; each worker's set-up 4 s, each block 10 s): the
    first group's rounds stop at the first one that would pass the budget (never below 4: two for each of its worker
    processes), the next group is not started, and --resume measures it later."""
    _Work({"fake": 4.0}, block_s=10.0).install(monkeypatch, budget_s=60.0)  # 8 s set up, 4 rounds: 48 s, 5: 58 s
    args = ["--models", "mobilenet_v3_small", "--resolutions", "32", "--frameworks", "fake", "--batch-sizes", "1,2",
            "--min-iterations", "3", "--warmup", "1", "--threads", "1", "--device", "cpu", "--duration", "0.08",
            "--rounds", "8", "--processes", "2", "--output-dir", str(tmp_path), "--name", "s",
            "--cache-dir", str(tmp_path / "cache")]
    assert sweep_main([*args, "--time-budget", "1h"]) == 0
    err = capsys.readouterr().err
    assert "--time-budget: rounds stopped at 5 of 8, another would pass it" in err
    assert "1 cell(s) in 1 group(s) left unmeasured" in err and "finish with inferbench sweep --resume" in err
    sweep_dir = tmp_path / "s"
    first = json.loads((sweep_dir / "mobilenet_v3_small_32_bs1_fake.json").read_text())
    assert sorted({b["round"] for b in first["timing"]["blocks"]}) == [0, 1, 2, 3, 4]
    assert set(first["raw_rounds"]) == {0, 1, 2, 3, 4} and first["latency_ms"]["stability"]["rounds"] == 5
    assert not (sweep_dir / "mobilenet_v3_small_32_bs2_fake.json").exists()
    # without a budget, --resume measures the rest at the plan's 8 rounds
    assert sweep_main(["--resume", str(sweep_dir)]) == 0
    second = json.loads((sweep_dir / "mobilenet_v3_small_32_bs2_fake.json").read_text())
    assert len({b["round"] for b in second["timing"]["blocks"]}) == 8


def test_a_deadline_lets_a_group_keep_its_minimum_rounds():
    deadline = budget.Deadline(10.0, clock=_Steps(100.0))
    assert deadline.another_round(1, 1.0) and deadline.another_round(2, 1.0)  # below the minimum: always
    assert not deadline.another_round(3, 1.0) and not deadline.fits(0.0)
    assert deadline.another_round(3, 1.0, processes=2) and not deadline.another_round(4, 1.0, processes=2)
    assert budget.Deadline(1e9, clock=time.monotonic).another_round(7, 1.0)
    assert budget.say(45) == "45 s" and budget.say(450) == "7m30s" and budget.say(3900) == "1h05m"


def _spent(monkeypatch):
    """--time-budget whose clock runs 100 s a reading against 250 s (how far the run got, not how fast)."""
    class Spent(budget.Deadline):
        def __init__(self, budget_s, clock=None):
            super().__init__(250.0, _Steps(100.0))

    monkeypatch.setattr(budget, "Deadline", Spent)


def test_a_run_names_what_the_budget_left_unmeasured(fakes, tmp_path, capsys, monkeypatch):
    from jsonschema import validate

    from inferbench.cli.jsonout import SCHEMA

    _spent(monkeypatch)
    out = tmp_path / "out"
    assert run_main([*QUICK, "--framework", "fake", "--batch-size", "1,2", "--duration", "0.08", "--time-budget",
                     "1h", "--output-dir", str(out), "--cache-dir", str(tmp_path / "cache"), "--json"]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    validate(document, json.loads(SCHEMA.read_text()))
    assert document["unmeasured"] == ["mobilenet_v3_small@32 fake bs2"] and len(document["cells"]) == 1
    assert document["time_budget"]["budget_s"] == 250.0 and document["time_budget"]["overrun_s"] > 0
    assert "1 cell(s) left unmeasured by --time-budget: mobilenet_v3_small@32 fake bs2" in captured.err
    assert "inferbench: --time-budget 4m10s passed: this took" in captured.err  # never left for the user to notice


def test_a_run_within_its_budget_says_nothing_of_it(fakes, tmp_path, capsys):
    assert run_main([*QUICK, "--framework", "fake", "--duration", "0.08", "--time-budget", "1h", "--output-dir",
                     str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "passed: this took" not in capsys.readouterr().err


def test_a_group_that_cannot_run_under_a_budget_fails_its_cells_not_the_sweep(fakes, tmp_path, monkeypatch):
    """Its export failed: no worker starts, and the deadline's check of its rounds must not trip over that."""
    monkeypatch.setenv("FAKE_REFERENCE_FAILS", "1")
    args = ["--models", "mobilenet_v3_small", "--resolutions", "32", "--frameworks", "fake", "--batch-sizes", "1",
            "--device", "cpu", "--threads", "1", "--duration", "0.05", "--output-dir", str(tmp_path), "--name", "s",
            "--cache-dir", str(tmp_path / "cache"), "--time-budget", "1h"]
    assert sweep_main(args) == 1
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*_fake.json")]
    assert record["status"] == "failed" and "the fake reference export failed" in record["error"]


def test_resume_with_a_budget_checks_the_next_group(fakes, tmp_path, capsys, monkeypatch):
    args = ["--models", "mobilenet_v3_small", "--resolutions", "32", "--frameworks", "fake", "--batch-sizes", "1,2",
            "--device", "cpu", "--threads", "1", "--duration", "0.05", "--rounds", "3", "--output-dir", str(tmp_path),
            "--name", "s", "--cache-dir", str(tmp_path / "cache")]
    assert sweep_main(args) == 0
    (tmp_path / "s" / "mobilenet_v3_small_32_bs2_fake.json").unlink()
    capsys.readouterr()
    from inferbench.execution.environment import setup_path

    kept = setup_path(tmp_path / "cache", 1, "cpu")  # what the sweep measured of its workers: the next plan takes it
    assert json.loads(kept.read_text())["fake inference"]["seconds"] > 0
    kept.write_text(json.dumps({"fake inference": {"seconds": 600.0}}))  # the next group: two 10-minute workers
    assert sweep_main(["--resume", str(tmp_path / "s"), "--time-budget", "5m"]) == 2
    err = capsys.readouterr().err
    assert "--time-budget 5m00s is too short for the sweep's next group (mobilenet_v3_small@32 bs2" in err
    assert not (tmp_path / "s" / "mobilenet_v3_small_32_bs2_fake.json").exists()
    kept.write_text(json.dumps({"fake inference": {"seconds": 1.0}}))
    assert sweep_main(["--resume", str(tmp_path / "s"), "--time-budget", "5m"]) == 0
    assert (tmp_path / "s" / "mobilenet_v3_small_32_bs2_fake.json").exists()


def test_serving_keeps_to_a_budget_and_a_search_cut_short_says_what_it_had(fakes, tmp_path, capsys, monkeypatch):
    """--time-budget bounds a serving run too (it was refused): with a clock that says the budget is spent a few tests
    in, the server search stops (never before its fewest tests, 3), and its answer stands on the tests that ran: a
    load held 3 in a row, or none, said with the largest load one test passed (not confirmed); the run's
    recommendation.json keeps the budget and what was spent."""
    pytest.importorskip("mlperf_loadgen", reason='mlcommons-loadgen is in the test extra: pip install -e ".[test]"')
    _spent(monkeypatch)
    out = tmp_path / "out"
    code = run_main([*QUICK, "--quick", "--framework", "fake-5ms", "--scenario", "server", "--slo-p99", "50",
                     "--time-budget", "1h", "--output-dir", str(out), "--cache-dir", str(tmp_path / "cache")])
    captured = capsys.readouterr()
    assert code in (0, 1) and "Traceback" not in captured.err
    said = re.search(r"--time-budget: rounds stopped at (\d+) of (\d+), another would pass it", captured.err)
    assert said and 3 <= int(said.group(1)) < int(said.group(2)), captured.err  # never below its fewest
    (folder,) = out.iterdir()
    (record,) = [json.loads(p.read_text()) for p in folder.glob("*_fake-5ms_*.json")]
    answer = record["serving"]["answer"]
    assert len(record["serving"]["steps"]) == int(said.group(1)) and answer["stopped"] == said.group(0)
    largest = max((s["target"] for s in record["serving"]["steps"] if s["valid"]), default=None)
    assert answer["largest_valid_qps"] == largest
    if answer["found"]:  # three VALID tests in a row held a load: the answer, said to stand on the tests that ran
        assert f"{said.group(0)}: the answer stands on the tests that ran" in captured.out
    else:  # why nothing is recommended, on the answer's lines
        assert f"fake-5ms: no load held p99 <= 50 ms for 3 tests in a row before {said.group(0)}" in captured.out
    spent = json.loads((folder / "recommendation.json").read_text())["time_budget"]
    assert spent["budget_s"] == 250.0 and spent["took_s"] > 250.0 and spent["overrun_s"] > 0


def test_the_moment_the_budget_passes_is_said_once_while_the_run_goes_on():
    """A line when --time-budget passes, not only at the end (a timer on the wall clock: here a budget of 1 s),
    on a terminal's status line too; nothing after the run closed its progress."""
    import io

    from inferbench.execution.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream in (io.StringIO(), Terminal()):
        deadline = budget.Deadline(1.0)
        p = Progress(4, stream, deadline=deadline)
        p.say("mobilenet_v3_small@32 bs1", "loading onnxrt")
        waited = time.monotonic()
        while "passed" not in stream.getvalue() and time.monotonic() - waited < 30:
            time.sleep(0.05)
        p.close()
        lines = [line for line in stream.getvalue().replace("\r\x1b[K", "\n").splitlines() if "passed" in line]
        assert len(lines) == 1 and "--time-budget 1 s passed: the group running ends at its fewest rounds" in lines[0]
        assert "loading onnxrt" in lines[0]  # where the run was
    quiet = io.StringIO()
    p = Progress(4, quiet, deadline=budget.Deadline(2.0))
    p.close()  # long before it passes, however busy the machine
    time.sleep(2.5)
    assert quiet.getvalue() == ""  # closed before it passed: nothing, ever


def test_two_runs_keeping_their_set_up_times_at_once_lose_neither_ones(fakes, tmp_path, monkeypatch):
    """Set-up times are read, updated and written back: two runs (here four threads) doing it at once take turns
    through a lock beside the file, so every one's entry is kept (each write held back 0.2 s: without the lock all
    four read an empty file and the last write alone survives)."""
    import threading

    from inferbench.base import files

    config, _ = _plan(fakes, tmp_path / "cache", "--framework", "fake")
    real = files.atomic_write_text

    def slow(path, text):
        time.sleep(0.2)
        real(path, text)

    monkeypatch.setattr(files, "atomic_write_text", slow)
    threads = [threading.Thread(target=remembered.remember_setups, args=(config, {f"fake{i} inference": [1.0 + i]}))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(remembered.measured_setups(config)) == {f"fake{i} inference" for i in range(4)}


def test_the_plan_takes_each_frameworks_set_up_as_this_machine_measured_it(fakes, tmp_path, capsys, monkeypatch):
    """A run keeps its workers' set-up times (start to ready) per framework and machine shape beside the cache; the
    next plan takes them instead of the table measured elsewhere (the plan said 1 s for torch-inductor's tuning where
    it took 164 s), says which are measured, and a serving worker's are kept apart (its single queries and served
    parity are part of them)."""
    from inferbench.execution.environment import setup_path

    monkeypatch.setattr(budget, "SETUP_S", {"fake": 0.5, "fake-slow": 0.5})
    cache = tmp_path / "cache"
    config, cells = _plan(fakes, cache, "--framework", "fake,fake-slow")
    before = budget.estimate(config, cells, {})
    assert remembered.measured_setups(config) == {}
    args = [*QUICK, "--framework", "fake", "--duration", "0.08", "--output-dir", str(tmp_path / "out"),
            "--cache-dir", str(cache)]
    assert run_main([*args, "--time-budget", "1h"]) == 0
    assert "(set-up estimated: no run on this machine measured it yet)" in capsys.readouterr().err
    kept = json.loads(setup_path(cache, 1, "cpu").read_text())
    assert set(kept) == {"fake inference"} and kept["fake inference"]["seconds"] > 0
    assert kept["fake inference"]["workers"] == 3  # the default 8 rounds: three workers
    assert remembered.measured_setups(config) == {"fake inference": kept["fake inference"]["seconds"]}
    # the plan takes it: its workers a cell, each as long as this machine took, in place of the table's
    setup_path(cache, 1, "cpu").write_text(json.dumps({"fake inference": {"seconds": 100.0},
                                                "fake-slow offline": {"seconds": 7.0}}))
    table = 0.5 + config.timing.warmup_seconds
    assert budget.estimate(config, cells, {}) == pytest.approx(before + config.processes * (100.0 - table))
    assert run_main([*args, "--time-budget", "1h"]) == 0
    assert "(set-up as this machine measured it for fake)" in capsys.readouterr().err
    # a serving worker's set-up is kept under its scenario's name, never taken for inference's
    assert budget.setup_s("fake-slow", 1, config.timing, {"fake-slow offline": 7.0}) == 0.5 + \
        config.timing.warmup_seconds
    assert budget.setup_s("fake-slow", 1, config.timing, {"fake-slow offline": 7.0}, "offline") == 7.0
    setup_path(cache, 1, "cpu").write_text("{not json")  # a broken file: the table, never a crash
    assert remembered.measured_setups(config) == {}


def _passed_once(seen: list[Any]) -> type[budget.Deadline]:
    """A budget of an hour that has passed as soon as ``seen`` holds anything (a worker started or ready)."""

    class Passes(budget.Deadline):
        def __init__(self, budget_s, clock=None):
            super().__init__(3600.0)

        def left(self) -> float:
            return -1.0 if seen else super().left()

    return Passes


def test_once_the_budget_passes_a_loaded_cell_starts_no_tuning_workers_and_no_other_processes(fakes, tmp_path, capsys,
                                                                                            monkeypatch):
    """After --time-budget has passed (here: the moment the cell's first worker is ready), the cell starts nothing
    more: no worker for its tuning's load-time settings (measured at inferbench's own setting, its record's tuning
    block saying why) and none of its other processes (one process, said); its fewest rounds are measured."""
    from inferbench.execution import handle, rounds, tune_phase

    children = []
    real = handle.Child

    def counting(*args, **kwargs):
        children.append(args[0].cell.label)
        return real(*args, **kwargs)

    monkeypatch.setattr(handle, "Child", counting)
    monkeypatch.setattr(budget, "Deadline", _passed_once(children))  # once a worker has started
    out = tmp_path / "out"
    assert run_main([*QUICK, "--framework", "fake-knob", "--tune", "on", "--rounds", "6", "--processes", "3",
                     "--duration", "0.06", "--time-budget", "1h", "--output-dir", str(out),
                     "--cache-dir", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert len(children) == 1, children  # the cell's first worker only: no tuning worker, no second process
    assert tune_phase.NOT_TUNED in err and rounds.FEWER_PROCESSES in err
    (folder,) = out.iterdir()
    record = json.loads(next(folder.glob("*_fake-knob_tuned.json")).read_text())
    assert record["status"] == "ok" and record["tuning"]["reason"] == tune_phase.NOT_TUNED
    assert record["tuning"]["chosen"] == record["tuning"]["default"]
    assert record["latency_ms"]["spread"]["processes"] == 1
    assert len({b["round"] for b in record["timing"]["blocks"]}) == 3  # its fewest


def test_a_framework_not_yet_loaded_when_the_budget_passes_is_left_out_unmeasured(fakes, tmp_path, capsys,
                                                                                   monkeypatch):
    """A group loads its frameworks one after another: once --time-budget has passed (here: as soon as the first
    worker is ready), the frameworks not yet loaded are left out — no record, said, counted unmeasured (a sweep's
    --resume measures them) — and the loaded one keeps its fewest rounds."""
    from inferbench.execution import handle

    started = []
    real = handle.start

    def counting(*args, **kwargs):
        worker = real(*args, **kwargs)
        started.append(worker)
        return worker

    monkeypatch.setattr(handle, "start", counting)
    monkeypatch.setattr(budget, "Deadline", _passed_once(started))  # the moment a worker is ready
    out = tmp_path / "out"
    assert run_main([*QUICK, "--framework", "fake,fake-slow", "--rounds", "6", "--processes", "1", "--duration",
                     "0.06", "--time-budget", "1h", "--output-dir", str(out), "--cache-dir", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "fake-slow bs1  left out: too little of --time-budget was left to load it" in err
    assert "1 cell(s) left unmeasured by --time-budget: mobilenet_v3_small@32 fake-slow bs1" in err
    (folder,) = out.iterdir()
    assert [p.name for p in folder.glob("*.json") if "fake" in p.name] == ["mobilenet_v3_small_32_bs1_fake.json"]
    record = json.loads((folder / "mobilenet_v3_small_32_bs1_fake.json").read_text())
    assert record["status"] == "ok" and len({b["round"] for b in record["timing"]["blocks"]}) == 3  # its fewest
    assert len(started) == 1  # fake-slow's worker never started



#: Per scenario: what it measures, each framework's set-up and a LoadGen test's length in seconds of work, and its
#: options (serving --quick: LoadGen's tests short in real time; their length in work is ``test_s`` whatever it is).
SLOW_WORK = {
    "inference": ("fake,fake-knob,fake-slow", {"fake": 10.0, "fake-knob": 10.0, "fake-slow": 20.0}, 0.0,
                  ["--tune", "on"]),
    "single-stream": ("fake-0ms,fake", {"fake-0ms": 6.0, "fake": 4.0}, 8.0, ["--quick"]),
    "multi-stream": ("fake-0ms", {"fake-0ms": 6.0}, 12.0, ["--quick"]),
    "server": ("fake-0ms,fake", {"fake-0ms": 6.0, "fake": 4.0}, 4.0, ["--quick", "--slo-p99", "50"]),
    "offline": ("fake-0ms,fake", {"fake-0ms": 6.0, "fake": 4.0}, 8.0, ["--quick"]),
    "train": ("fake", {"fake": 25.0}, 0.0, []),
}


@pytest.mark.parametrize("scenario", list(SLOW_WORK))
def test_a_60_s_budget_ends_within_a_tenth_over_in_every_scenario(fakes, tmp_path, capsys, monkeypatch, scenario):
    """A clock only the work moves (:class:`_Work`) and slow runners whose set-ups and LoadGen tests take longer than
    the plan foresees (no run measured them on this machine): the run keeps within 66 s of a 60 s budget in every
    scenario, the budget binding while it runs (rounds stopped, a framework left out, fewer processes, no tuning) —
    the inference run took 75 s when a worker was started as long as the budget had not yet passed."""
    from inferbench.registry.scenarios import SCENARIOS

    assert set(SLOW_WORK) == set(SCENARIOS)  # every scenario
    frameworks, setups, test_s, options = SLOW_WORK[scenario]
    _Work(setups, test_s=test_s).install(monkeypatch)
    out = tmp_path / "out"
    code = run_main([*QUICK, "--framework", frameworks, "--scenario", scenario, *options, "--time-budget", "60s",
                     "--output-dir", str(out), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code in (0, 1) and "Traceback" not in err, err
    (folder,) = out.iterdir()
    spent = json.loads((folder / "recommendation.json").read_text())["time_budget"]
    assert spent["budget_s"] == 60.0 and spent["took_s"] <= 66.0, err
    bound = ("another would pass it", "too little of --time-budget was left")
    assert any(words in err for words in bound), err  # the budget bound this run while it ran
    assert any(json.loads(p.read_text())["status"] == "ok" for p in folder.glob("*_fake*.json"))  # and it measured


def test_a_budget_loads_this_machine_s_last_winner_first_and_leaves_out_the_slowest(fakes, tmp_path, monkeypatch):
    """The frameworks a budget may leave out stay in the plan, each loaded where the time left allows it: the order
    is this machine's last valid ranking of the group (fastest first), kept when a group ends with every cell
    verified on a quiet machine; a busy or failed group changes nothing."""
    from types import SimpleNamespace

    monkeypatch.setattr(budget, "SETUP_S", {"fake": 5.0, "fake-slow": 5.0, "fake-quiet": 5.0})
    config, cells = _plan(fakes, tmp_path, "--framework", "fake,fake-slow,fake-quiet", "--rounds", "12",
                          "--duration", "12")

    def record(framework: str, p50: float, valid: bool = True) -> Any:
        c = next(c for c in cells if c.framework == framework)
        return SimpleNamespace(model=c.model, resolution=c.resolution, batch_size=c.batch_size, scenario=c.scenario,
                               framework=framework, status="ok", parity=SimpleNamespace(status="passed"),
                               latency_ms=SimpleNamespace(p50=p50), validity=SimpleNamespace(valid=valid), options={})

    busy = [record("fake", 9.0, valid=False), record("fake-slow", 1.0), record("fake-quiet", 5.0)]
    remembered.remember_ranking(config, busy)  # one busy cell: nothing kept
    assert remembered.rankings(config) == {}
    remembered.remember_ranking(config, [record("fake", 9.0), record("fake-slow", 1.0), record("fake-quiet", 5.0)])
    assert list(remembered.rankings(config).values()) == [["fake-slow", "fake-quiet", "fake"]]
    floor = budget.estimate(budget.shrunk(config, 0.0), cells[:2], {})
    fitted = budget.fit(config, cells, floor + 1, {})
    assert [c.framework for c in fitted.cells] == ["fake-slow", "fake-quiet", "fake"]  # the likely winner first
    assert list(fitted.left_out) == ["fake"]  # the last of the ranking is the one at risk, not the costliest
    assert any("the fastest of this machine's last valid run first" in line for line in fitted.lines)
