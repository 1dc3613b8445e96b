"""The machine during the timed blocks: other work's share of the cores, validity, the threads a process may use.
Readers are injected: a quiet and a busy machine are simulated exactly, the real one is never needed."""

from __future__ import annotations

import csv
import json
import os
import time

import pytest
from test_pipeline import QUICK

from inferbench import SCHEMA_VERSION, records
from inferbench.base.device import cpu_quota, default_threads
from inferbench.measure.trackers import machine
from inferbench.run import main as run_main


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def fake_machine(clock: Clock, own_cores: float, other_cores: float, steal_cores: float = 0.0) -> machine.Readers:
    """A machine whose every process took ``own_cores`` (this one) + ``other_cores`` since time 0, at 100 ticks/s."""
    def stat() -> str:
        busy = (own_cores + other_cores) * clock.t * 100
        return f"cpu  {busy:.0f} 0 0 500000 0 0 0 {steal_cores * clock.t * 100:.0f} 0 0\n"

    def own() -> str:
        ticks = own_cores * clock.t * 100
        return f"42 (python3 -m worker) S 1 1 1 0 -1 0 0 0 0 0 {ticks / 2:.0f} {ticks / 2:.0f} 0 0 20 0 4 0"

    return machine.Readers(stat=stat, own=own, loadavg=lambda: "1.50 1.20 1.00 2/300 4242\n", clock=clock,
                           ticks_per_s=100.0)


def block(readers: machine.Readers, clock: Clock, seconds: float = 2.0) -> dict:
    monitor = machine.MachineMonitor(readers)
    monitor.start()
    clock.t += seconds
    return monitor.stop(seconds)


def test_other_works_share_of_the_machine_is_measured_around_each_block():
    clock = Clock()
    quiet = block(fake_machine(clock, own_cores=2.0, other_cores=0.05), clock)
    assert quiet["known"] and quiet["other_cores"] == pytest.approx(0.05, abs=0.01)
    assert quiet["own_cores"] == pytest.approx(2.0, abs=0.01) and quiet["load_avg_1m"] == 1.5
    busy = block(fake_machine(clock, own_cores=0.3, other_cores=1.7), clock)
    assert busy["other_cores"] == pytest.approx(1.7, abs=0.01)  # the run's own work is taken out, not counted
    stolen = block(fake_machine(clock, own_cores=1.0, other_cores=0.0, steal_cores=0.8), clock)
    assert stolen["other_cores"] == pytest.approx(0.8, abs=0.01) and stolen["steal_cores"] == pytest.approx(0.8,
                                                                                                             abs=0.01)


def test_a_cell_is_valid_only_if_other_work_stayed_small_in_every_block():
    clock = Clock()
    quiet = [block(fake_machine(clock, 2.0, 0.1), clock) for _ in range(4)]
    assert machine.summarize(quiet, threads=2)["validity"]["valid"] is True  # 0.1 <= 25% of 2 cores
    one_busy = quiet[:3] + [block(fake_machine(clock, 1.0, 1.0), clock)]  # one round when a neighbour woke up
    state = machine.summarize(one_busy, threads=2)
    assert state["validity"]["valid"] is False and state["other_cores_max"] == pytest.approx(1.0, abs=0.01)
    assert "took 1.00 of the machine's cores during its worst block, more than 25% of the 2 this run uses" in \
        state["validity"]["reason"]
    assert machine.summarize(one_busy, threads=2, max_other_load=0.6)["validity"]["valid"] is True
    # the threshold is a share of the cores the run uses: 1 core of other work beside a 8-thread run is fine
    assert machine.summarize(one_busy, threads=8)["validity"]["valid"] is True


def test_one_verdict_names_one_number_the_worst_cells_whatever_the_order():
    """A run said "other work took 1.21 ... cores", report of the same folder "1.54 ...": each named the first busy
    cell it met. The verdict of a run or a report names the worst, in any order of its cells."""
    import itertools

    cells = [{"valid": False, "other_cores": c, "reason": f"other work took {c:.2f} of the machine's cores"}
             for c in (1.21, 1.91, 1.54)] + [{"valid": True, "other_cores": 0.1, "reason": "fine"}]
    said = {machine.combine(list(order))["reason"] for order in itertools.permutations(cells)}
    assert said == {"other work took 1.91 of the machine's cores"}
    again = machine.combine([machine.combine(cells[:2]), machine.combine(cells[2:])])  # verdicts combine again
    assert again["reason"] == "other work took 1.91 of the machine's cores" and again["not_valid"] == 3


def test_a_machine_that_cannot_be_read_is_never_called_valid():
    def broken() -> str:
        raise FileNotFoundError("/proc/stat")

    monitor = machine.MachineMonitor(machine.Readers(stat=broken))
    monitor.start()
    out = monitor.stop(1.0)
    assert out == {"known": False, "reason": "/proc not readable (FileNotFoundError: /proc/stat)"}
    verdict = machine.summarize([out], threads=2)["validity"]
    assert verdict["valid"] is None and verdict["reason"].startswith("machine state unknown")
    assert machine.combine([{"valid": True, "reason": "ok"}, verdict])["valid"] is None
    assert machine.combine([{"valid": True, "reason": "ok"}, verdict, {"valid": False, "reason": "busy"}])[
        "valid"] is False


def test_the_real_proc_files_read_here():
    monitor = machine.MachineMonitor()
    monitor.start()
    end = time.process_time() + 0.05  # 50 ms of this process's own CPU time: several of /proc's 10 ms ticks
    while time.process_time() < end:
        pass
    state = monitor.stop(0.1)
    assert state["known"] and state["own_cores"] > 0 and state["other_cores"] >= 0


def test_threads_default_to_what_the_process_may_use(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # a container given 1.5 CPUs (cgroup v2)
    cores = len(os.sched_getaffinity(0))
    assert cpu_quota(tmp_path) == 1.5 and default_threads(tmp_path) == min(2, cores)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")  # cgroup v1: half a CPU
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(tmp_path) == 0.5 and default_threads(tmp_path) == 1


def _run(tmp_path, *argv):
    """A quick run, but with blocks of 0.6 s: /proc's 10 ms ticks cannot judge shorter ones."""
    return run_main([*QUICK, "--duration", "1.2", "--rounds", "2", *argv, "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(tmp_path / "cache")])


def test_a_busy_machine_says_so_first_and_fails_require_valid(fakes, tmp_path, capsys):
    """Other work is simulated in the workers (tests/fakes.py: fake-busy, fake-quiet), whatever the machine does."""
    assert _run(tmp_path / "quiet", "--framework", "fake-quiet", "--require-valid") == 0
    out = capsys.readouterr().out
    assert out.startswith("VALID: other work stayed within what is allowed in every block (1 cells)\n"
                          "recommendation (median latency")
    rec = records.load(tmp_path / "quiet" / "out").iloc[0]
    assert rec["validity.valid"] == True and rec["machine_state.other_cores_max"] < 0.1  # noqa: E712
    assert rec["schema_version"] == SCHEMA_VERSION and len(rec["machine_state.blocks"]) == 2

    three = ["--rounds", "3", "--duration", "1.8"]  # rounds enough for intervals and margins
    assert _run(tmp_path / "busy", "--framework", "fake-busy,fake-quiet", *three) == 0  # measured; the verdict is said
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("NOT VALID (1 of 2 cells): other work took ") and "re-run when it is quiet" in first
    (folder,) = (tmp_path / "busy" / "out").iterdir()
    answer = json.loads((folder / "recommendation.json").read_text())
    assert answer["validity"]["valid"] is False and answer["recommendations"][0]["validity"]["valid"] is False
    assert "NO" in out.split("framework", 1)[1]  # the table says which cell
    # a busy machine's group is not judged: a best guess, named as such; no interval, margin, significance or
    # stability claimed, on the terminal and in the files
    answer_lines = out.split("\n\n", 1)[0]
    assert "best guess fake-" in answer_lines and "not judged (the machine was busy: the first" in answer_lines
    assert answer_lines.count("other work took") == 1, answer_lines  # the reason once: on the first line
    assert "--allow-busy" in answer_lines and "next: fake-" in answer_lines and "not compared" in answer_lines
    assert not any(word in answer_lines for word in ("x better", "95% CI", "stable", "within the noise"))
    rec = answer["recommendations"][0]
    assert rec["not_judged"].startswith("the machine was busy") and rec["stability"] == "not judged"
    assert "margin" not in rec and rec["ci95"] is None  # no margin, no interval (the records keep the figures)
    with (folder / "comparisons.csv").open() as fh:
        assert [(row["significant"], row["ratio_ci_low"]) for row in csv.DictReader(fh)] == [("", ""), ("", "")]
    from inferbench.analysis.ranking import verdict  # the report's "is the difference real?" too

    busy, quiet = sorted(records.iter_records(folder)[0], key=lambda r: r["framework"])
    assert "not judged (the machine was busy" in verdict("fake-busy", busy, "fake-quiet", quiet)
    # --allow-busy: judged anyway, and the records say it was allowed
    assert _run(tmp_path / "allowed", "--framework", "fake-busy,fake-quiet", "--allow-busy", *three) == 0
    out = capsys.readouterr().out
    (folder,) = (tmp_path / "allowed" / "out").iterdir()
    rec = json.loads((folder / "recommendation.json").read_text())["recommendations"][0]
    assert out.startswith("NOT VALID") and rec["not_judged"] is None and rec["stability"] != "not judged"
    assert "best guess" not in out and "95% CI" in out.split("\n\n", 1)[0]
    assert all(r["config"]["allow_busy"] is True for r in records.iter_records(folder)[0])
    assert _run(tmp_path / "gate", "--framework", "fake-busy", "--require-valid") == 1
    assert "--require-valid: the run is not valid (1 of 1 cells): other work took" in capsys.readouterr().err


def test_a_threshold_outside_0_to_100_percent_is_bad_input(capsys, tmp_path):
    assert run_main(["--max-other-load", "150", "--output-dir", str(tmp_path / "out")]) == 2
    assert "--max-other-load: must be at most 100, got 150" in capsys.readouterr().err
    assert run_main(["--max-other-load", "-5", "--output-dir", str(tmp_path / "out")]) == 2


def test_blocks_too_short_for_procs_ticks_leave_the_state_unknown():
    clock = Clock()
    short = [block(fake_machine(clock, 1.0, 0.0), clock, seconds=0.05) for _ in range(4)]
    verdict = machine.summarize(short, threads=2)["validity"]
    assert verdict["valid"] is None and "too short for /proc's 10 ms ticks" in verdict["reason"]


def test_a_reduced_precision_is_refused_where_the_cpu_would_emulate_it():
    """BF16 and FP16 run where the CPU has their instructions (x86: AVX-512 or AMX; Arm: BF16, half-precision SIMD);
    elsewhere one line names what is missing and what the CPU has. FP32 always runs."""
    from inferbench.base.machine import cpu_precision_refusal

    epyc = {"fma", "avx", "avx2", "sse4_2"}
    xeon = epyc | {"avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"}
    assert cpu_precision_refusal("fp32", epyc) is None
    assert cpu_precision_refusal("bf16", xeon) is None and cpu_precision_refusal("bf16", {"asimd", "bf16"}) is None
    assert cpu_precision_refusal("fp16", xeon | {"avx512_fp16"}) is None
    assert cpu_precision_refusal("fp16", {"asimd", "asimdhp"}) is None
    assert cpu_precision_refusal("bf16", epyc) == (
        "--precision bf16: this CPU has no BF16 instructions (avx512_bf16 or amx_bf16; its AVX-512/AMX flags: none): "
        "a runtime would emulate BF16 and time the emulation")
    said = cpu_precision_refusal("fp16", xeon)
    assert said is not None and "(avx512_fp16 or amx_fp16; its AVX-512/AMX flags: amx_bf16, amx_tile, avx512_bf16, " \
        "avx512_vnni, avx512f)" in said
