"""Sweeps as Slurm jobs through submitit (``--executor slurm``).

The fast layer runs each job through submitit's local executor (each job a process of this machine, submitit's own
pickles, job folders and states), with the fake runners: one job per group, records complete and never doubled, a
job killed mid-run leaving its cells for --resume (which measures them again, once, and says so), a resumed sweep
taking the records of a job that ended while no sweep waited; the options' rules; and the batch script submitit
hands to ``sbatch`` (a stand-in ``sbatch`` on PATH records it: no Slurm here). The opt-in layer (``-m slurm``)
runs against a real single-node Slurm cluster (tests/slurm_cluster.py): a sweep submitted, a job cancelled by
``scancel`` mid-run, resumed, nothing lost or doubled."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_pipeline import QUICK

from inferbench.execution import slurm
from inferbench.sweep import main as sweep_main

pytest.importorskip("submitit", reason='submitit is in the test extra: pip install -e ".[test]"')
LOCAL = ["--executor", "slurm", "--slurm-cluster", "local"]


def _sweep(tmp_path, *argv, name="s"):
    return sweep_main([*QUICK, *argv, "--name", name, "--output-dir", str(tmp_path / "out"),
                       "--cache-dir", str(tmp_path / "cache")])


def _records(folder):
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("mobilenet*.json"))}


def _ledger(folder):
    return json.loads((folder / slurm.FOLDER / slurm.LEDGER).read_text())


def test_each_group_is_one_job_and_its_records_say_which(fakes, tmp_path):
    assert _sweep(tmp_path, *LOCAL, "--framework", "fake,fake-slow", "--batch-size", "1,2") == 0
    folder = tmp_path / "out" / "s"
    recs = _records(folder)
    assert len(recs) == 4 and all(r["status"] == "ok" and r["parity"]["status"] == "passed" for r in recs.values())
    jobs = _ledger(folder)["jobs"]
    assert len(jobs) == 2 and {j["state"] for j in jobs} == {"COMPLETED"}
    assert len({j["name"] for j in jobs}) == 2 and all(_ledger(folder)["token"] in j["name"] for j in jobs)
    by_job = {j["id"]: set(j["cells"]) for j in jobs}
    for name, rec in recs.items():  # each record names the job that measured it, and that job measured it
        assert name in by_job[rec["environment"]["slurm"]["job_id"]]
        assert rec["config"]["executor"] == "slurm" and rec["config"]["slurm"]["cluster"] == "local"
    assert (folder / "summary.csv").read_text().count("\n") == 5


@pytest.mark.parametrize("signal", ["9", "15"])  # killed; terminated as scancel, pre-emption and time limits do
def test_a_job_killed_mid_run_leaves_its_cells_for_resume_which_measures_them_once(fakes, tmp_path, monkeypatch,
                                                                                  capsys, signal):
    """SIGTERM too: submitit's handler lets it pass, and without inferbench's own the group went on, its cells
    measured under a job being cancelled."""
    marker, log = tmp_path / "killed", tmp_path / "loads.log"
    monkeypatch.setenv("FAKE_KILL_PARENT_ONCE", str(marker))  # the first cell loaded kills its job's process
    monkeypatch.setenv("FAKE_KILL_SIGNAL", signal)
    monkeypatch.setenv("FAKE_LOAD_LOG", str(log))
    argv = [*LOCAL, "--framework", "fake,fake-slow", "--batch-size", "1,2", "--pass-env",
            "FAKE_KILL_PARENT_ONCE,FAKE_KILL_SIGNAL,FAKE_LOAD_LOG"]
    _sweep(tmp_path, *argv, name="k")
    err = capsys.readouterr().err
    folder = tmp_path / "out" / "k"
    assert marker.exists() and len(_records(folder)) == 2  # the killed job's two cells: no record, none failed
    assert "before writing its records: its 2 cell(s) are left unmeasured" in err
    assert "2 cell(s) left unmeasured (their jobs ended early: said above): finish with inferbench sweep --resume " \
        f"{folder}" in err
    loads = len(log.read_text().split())
    assert sweep_main(["--resume", str(folder)]) == 0
    assert "measured again: its job" in capsys.readouterr().err
    recs = _records(folder)
    assert len(recs) == 4 and all(r["status"] == "ok" for r in recs.values())
    assert len(log.read_text().split()) == loads + 4  # its two cells, two worker processes each: once
    jobs = _ledger(folder)["jobs"]
    assert [j["state"] for j in jobs] == ["ENDED", "COMPLETED", "COMPLETED"]  # the killed job's, as it could tell
    assert len({j["name"] for j in jobs}) == 3
    assert sweep_main(["--resume", str(folder)]) == 0
    assert len(log.read_text().split()) == loads + 4 and len(_ledger(folder)["jobs"]) == 3  # nothing left to do


def test_resume_takes_the_records_of_a_job_that_ended_while_no_sweep_waited(fakes, tmp_path, monkeypatch, capsys):
    """The driver was gone (a login session closed) when a job ended: its result is in submitit's folder, its cells
    have no record. --resume writes them from that result, measuring nothing again."""
    log = tmp_path / "loads.log"
    monkeypatch.setenv("FAKE_LOAD_LOG", str(log))
    assert _sweep(tmp_path, *LOCAL, "--framework", "fake,fake-slow", "--pass-env", "FAKE_LOAD_LOG", name="g") == 0
    folder = tmp_path / "out" / "g"
    before = _records(folder)
    ledger = _ledger(folder)
    ledger["jobs"][0]["state"] = "SUBMITTED"  # as the driver left it
    (folder / slurm.FOLDER / slurm.LEDGER).write_text(json.dumps(ledger))
    for name in before:
        (folder / name).unlink()
    loads = len(log.read_text().split())
    assert sweep_main(["--resume", str(folder)]) == 0
    assert "submitted by an earlier invocation: it ended while no sweep waited for it: its records are taken" in \
        capsys.readouterr().err
    after = _records(folder)
    assert after == before and len(log.read_text().split()) == loads  # the same records, nothing measured
    assert len(_ledger(folder)["jobs"]) == 1


def test_a_job_whose_artifacts_differ_from_the_drivers_fails_its_cells_with_why(fakes, tmp_path, monkeypatch):
    """A node that reads another cache than the driver exported into (no shared filesystem): the job checks every
    artifact against its hash before anything loads, and its cells' records say why they failed."""
    real_start = slurm.SlurmGroups.start

    def start(self, machine, group, folder, *rest):
        for path in folder.rglob("*.npz"):  # what the node reads is not what the driver exported
            path.write_bytes(b"another cache")
        real_start(self, machine, group, folder, *rest)

    monkeypatch.setattr(slurm.SlurmGroups, "start", start)
    _sweep(tmp_path, *LOCAL, "--framework", "fake", name="f")
    (rec,) = _records(tmp_path / "out" / "f").values()
    assert rec["status"] == "failed" and rec["error"].startswith("its Slurm job ")
    assert "RuntimeError: the artifacts" in rec["error"] and "on a filesystem every node shares?" in rec["error"]


def test_run_takes_the_slurm_executor_too(fakes, tmp_path):
    from inferbench.run import main as run_main

    assert run_main([*QUICK, *LOCAL, "--framework", "fake", "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(tmp_path / "cache")]) == 0
    (folder,) = (tmp_path / "out").iterdir()
    (rec,) = _records(folder).values()
    assert rec["status"] == "ok" and rec["environment"]["slurm"]["job_id"] == _ledger(folder)["jobs"][0]["id"]


@pytest.mark.parametrize(("argv", "said"), [
    (["--partition", "debug"], "--partition applies to --executor slurm"),
    (["--executor", "ray", "--job-time-limit", "5"], "--job-time-limit applies to --executor slurm"),
    (["--executor", "slurm", "--ray-address", "127.0.0.1:6379"], "--ray-address applies to --executor ray"),
    (["--machines", "a"], "--machines applies to --executor ray (or slurm)"),
    (["--executor", "slurm", "--sbatch", "time=10"], "time: set by inferbench (--job-time-limit)"),
    (["--executor", "slurm", "--sbatch", "qos"], "'qos' is not KEY=VALUE"),
    (["--executor", "slurm", "--sbatch", "signal=USR1@60"], "signal: set by inferbench"),
    (["--executor", "slurm", "--gpus-per-job", "-1"], "--gpus-per-job"),
])
def test_slurm_options_out_of_place_are_one_line(tmp_path, capsys, argv, said):
    assert sweep_main([*QUICK, "--framework", "onnxrt", *argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and not (tmp_path / "out").exists()


def _stand_ins(folder: Path, **scripts: str) -> str:
    """Slurm's commands as small shell scripts in ``folder`` (there is no Slurm here): a PATH holding only them
    and the interpreter's own."""
    folder.mkdir(exist_ok=True)
    for name in ("sbatch", "srun", "squeue", "sacct", "scancel", "sinfo"):
        path = folder / name
        path.write_text("#!/bin/sh\n" + scripts.get(name, "exit 0") + "\n")
        path.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


def test_no_slurm_or_no_accounting_is_one_line_and_leaves_nothing(fakes, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert _sweep(tmp_path, "--executor", "slurm", "--framework", "fake") == 2
    assert "no sbatch on PATH: is this a Slurm login node?" in capsys.readouterr().err
    _stand_ins(tmp_path / "no-srun")  # every command but srun, through which each job runs (submitit needs it)
    (tmp_path / "no-srun" / "srun").unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "no-srun"))
    assert _sweep(tmp_path, "--executor", "slurm", "--framework", "fake") == 2
    assert "no srun on PATH: is this a Slurm login node?" in capsys.readouterr().err
    monkeypatch.setenv("PATH", _stand_ins(tmp_path / "bin", sacct="echo 'sacct: error: Slurm accounting storage "
                                                                    "is disabled' >&2; exit 1"))
    assert _sweep(tmp_path, "--executor", "slurm", "--framework", "fake") == 2
    err = capsys.readouterr().err
    assert "sacct -n failed: sacct: error: Slurm accounting storage is disabled" in err and "slurmdbd" in err
    monkeypatch.setenv("PATH", _stand_ins(tmp_path / "bin", sinfo="echo 'debug*'"))
    assert _sweep(tmp_path, "--executor", "slurm", "--partition", "gpu", "--framework", "fake") == 2
    assert "--partition gpu: no such partition (sinfo lists debug)" in capsys.readouterr().err
    refused = "echo 'sbatch: error: Batch job submission failed: Invalid account or account/partition combination " \
              "specified' >&2; exit 1"
    monkeypatch.setenv("PATH", _stand_ins(tmp_path / "bin", sinfo="echo 'debug*'", sbatch=refused))
    assert _sweep(tmp_path, "--executor", "slurm", "--account", "nobody", "--framework", "fake") == 2
    err = capsys.readouterr().err
    assert "sbatch --test-only failed: sbatch: error: Batch job submission failed: Invalid account" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def _driver(tmp_path, monkeypatch, **scripts):
    """A SlurmGroups for one group of the fake frameworks, with Slurm's commands as ``scripts`` (stand-ins)."""
    from inferbench.execution.pipeline import Exports
    from inferbench.execution.progress import Progress
    from inferbench.sweep import build_parser, make_plan

    monkeypatch.setenv("PATH", _stand_ins(tmp_path / "bin", **scripts))
    plan, _, _ = make_plan(vars(build_parser().parse_args([
        *QUICK, "--framework", "fake,fake-slow", "--executor", "slurm", "--cache-dir", str(tmp_path / "cache")])))
    cells = list(plan.cells)
    progress = Progress(len(cells), verbosity=-1)
    folder, failed, sizes = Exports(plan.config, cells, progress, True).of(cells[0])
    return slurm.SlurmGroups(plan.config, "s", tmp_path / "run", progress), cells, folder, failed, sizes


def test_a_job_slurm_no_longer_lists_ends_the_wait_and_its_cells_are_left_unmeasured(fakes, tmp_path, monkeypatch):
    """sacct that says nothing of a job (UNKNOWN: submitit's watcher would wait for ever), squeue that no longer
    lists it: the driver stops waiting at its next look at the queue, and the cells are left for --resume."""
    groups, cells, folder, failed, sizes = _driver(tmp_path, monkeypatch, sbatch='echo "Submitted batch job 77"')
    monkeypatch.setattr(slurm, "SAY_EVERY_S", 0.0)
    monkeypatch.setattr(slurm, "POLL_S", 0.01)
    groups.start(None, cells, folder, failed, sizes, None)
    ((machine, group, records),) = groups.wait()
    assert group == cells and records == [None, None]
    assert _ledger(tmp_path / "run")["jobs"][0]["state"] == "UNKNOWN"


def test_a_job_that_failed_on_its_node_fails_its_cells_with_slurms_word(fakes, tmp_path, monkeypatch):
    """FAILED without a result (the node's Python could not start, say): measuring it again would fail again, so
    its cells are failed records, not left for --resume."""
    sacct = 'printf "JobID|State|NodeList\\n77|FAILED|node3\\n"'
    groups, cells, folder, failed, sizes = _driver(tmp_path, monkeypatch, sbatch='echo "Submitted batch job 77"',
                                                   sacct=sacct, squeue="echo '77|RUNNING|None'")
    groups.start(None, cells, folder, failed, sizes, None)
    ((_, _, records),) = groups.wait()
    assert [r.status for r in records] == ["failed", "failed"]
    assert all(r.error.startswith("its Slurm job 77 ended FAILED without records") for r in records)
    assert _ledger(tmp_path / "run")["jobs"][0]["state"] == "FAILED"


def test_a_job_sbatch_refuses_mid_sweep_fails_its_cells_in_one_line(fakes, tmp_path, monkeypatch):
    refused = "echo 'sbatch: error: QOSMaxSubmitJobPerUserLimit' >&2; exit 1"
    groups, cells, folder, failed, sizes = _driver(tmp_path, monkeypatch, sbatch=refused)
    groups.start(None, cells, folder, failed, sizes, None)
    ((_, _, records),) = groups.wait()
    assert all(r.status == "failed" and r.error.startswith("sbatch refused its job: ") for r in records)
    assert "QOSMaxSubmitJobPerUserLimit" in records[0].error and not groups.running


def test_the_batch_script_holds_a_node_whole_with_the_time_the_plan_foresees(fakes, tmp_path, monkeypatch):
    """What submitit hands to sbatch for one group (a stand-in sbatch keeps it): the job's unique name, one node
    held whole, no srun step (a step would be bound to one CPU), the partition, account, named node and further
    options asked for, and a time limit of twice the group's estimate plus the margin; Ctrl-C's cancel reaches
    scancel."""
    from inferbench.execution.pipeline import Exports
    from inferbench.execution.progress import Progress
    from inferbench.sweep import build_parser, make_plan

    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", _stand_ins(bin_dir, sbatch=f'cp "$1" {tmp_path}/script.sh; echo "Submitted batch job '
                                                          '4242"', scancel=f"echo \"$@\" > {tmp_path}/cancelled"))
    plan, _, _ = make_plan(vars(build_parser().parse_args([
        *QUICK, "--framework", "fake,fake-slow", "--executor", "slurm", "--partition", "debug", "--account", "lab",
        "--machines", "node7", "--sbatch", "qos=high,mem=8G", "--cache-dir", str(tmp_path / "cache")])))
    cells = list(plan.cells)
    progress = Progress(len(cells), verbosity=-1)
    folder, failed, sizes = Exports(plan.config, cells, progress, True).of(cells[0])
    groups = slurm.SlurmGroups(plan.config, "s", tmp_path / "run", progress)
    estimate = slurm.group_estimate(progress, cells, plan.config)
    groups.start("node7", cells, folder, failed, sizes, None)
    script = (tmp_path / "script.sh").read_text()
    job = _ledger(tmp_path / "run")["jobs"][0]
    assert job["id"] == "4242" and job["name"].startswith("inferbench-") and job["name"].endswith("-bs1-node7")
    for line in (f"--job-name={job['name']}", "--exclusive", "--partition=debug", "--account=lab",
                 "--nodelist=node7", "--qos=high", "--mem=8G", "--nodes=1", "--ntasks-per-node=1",
                 f"--time={slurm.time_limit_min(estimate)}"):
        assert f"#SBATCH {line}\n" in script, line
    assert "srun" not in script and "--gpus-per-node" not in script  # a CPU run asks for no GPU
    assert slurm.time_limit_min(estimate) == -(-(2 * estimate + slurm.MARGIN_S) // 60)
    groups.cancel()
    assert (tmp_path / "cancelled").read_text().split()[-1] == "4242"


def test_a_gpu_run_asks_for_one_gpu_unless_told():
    from types import SimpleNamespace

    from inferbench.spec import SlurmConfig

    gpu = SimpleNamespace(device=SimpleNamespace(kind="gpu"), slurm=SlurmConfig())
    assert slurm.parameters(gpu, None, 9, "n")["gpus_per_node"] == 1
    four = SimpleNamespace(device=SimpleNamespace(kind="gpu"), slurm=SlurmConfig(gpus_per_job=4))
    assert slurm.parameters(four, None, 9, "n")["gpus_per_node"] == 4
    cpu = SimpleNamespace(device=SimpleNamespace(kind="cpu"), slurm=SlurmConfig())
    assert "gpus_per_node" not in slurm.parameters(cpu, None, 9, "n")


# --------------------------------------------------------------------------- a real Slurm (opt in: -m slurm)
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A single-node Slurm cluster (tests/slurm_cluster.py), its clients pointed at it for the module."""
    import slurm_cluster

    why = slurm_cluster.missing()
    if why:
        pytest.fail(f"-m slurm needs a single-node Slurm: {why}")
    nodes = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm")).start()
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(nodes.conf)
    try:
        yield nodes
    finally:
        nodes.stop()
        os.environ.pop("SLURM_CONF") if saved is None else os.environ.__setitem__("SLURM_CONF", saved)


def _scancel_the_first_running_job(stop: threading.Event, cancelled: list[str]) -> None:
    while not stop.is_set() and not cancelled:
        running = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True,
                                 check=False).stdout.split()
        if running:
            time.sleep(1.0)  # mid-run: its cells are loading or measuring
            subprocess.run(["scancel", running[0]], check=True)
            cancelled.append(running[0])
        time.sleep(0.2)


@pytest.mark.slurm
def test_on_a_real_slurm_a_job_cancelled_mid_run_is_measured_again_on_resume(cluster, fakes, tmp_path, monkeypatch,
                                                                             capsys):
    log = tmp_path / "loads.log"
    monkeypatch.setenv("FAKE_LOAD_LOG", str(log))
    stop, cancelled = threading.Event(), []
    watcher = threading.Thread(target=_scancel_the_first_running_job, args=(stop, cancelled), daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        _sweep(tmp_path, "--executor", "slurm", "--partition", "debug", "--framework", "fake,fake-slow",
               "--batch-size", "1,2,4", "--pass-env", "FAKE_LOAD_LOG", "--duration", "4", name="real")
    finally:
        stop.set()
        watcher.join()
    first = time.monotonic() - started
    folder = tmp_path / "out" / "real"
    assert len(cancelled) == 1 and len(_records(folder)) == 4  # one group of three had no record
    jobs = _ledger(folder)["jobs"]
    assert [j["state"] for j in jobs if j["id"] == cancelled[0]] == ["CANCELLED"]
    assert f"job {cancelled[0]} ended (CANCELLED) before writing its records" in capsys.readouterr().err
    assert sweep_main(["--resume", str(folder)]) == 0
    assert f"measured again: its job {cancelled[0]} ended (CANCELLED)" in capsys.readouterr().err
    recs = _records(folder)
    assert len(recs) == 6 and all(r["status"] == "ok" and r["parity"]["status"] == "passed" for r in recs.values())
    assert {r["environment"]["slurm"]["partition"] for r in recs.values()} == {"debug"}
    jobs = _ledger(folder)["jobs"]
    assert len(jobs) == 4 and sum(j["state"] == "COMPLETED" for j in jobs) == 3
    completed = {j["id"]: set(j["cells"]) for j in jobs if j["state"] == "COMPLETED"}
    for name, rec in recs.items():  # each record from the completed job of its group, never the cancelled one
        assert name in completed[rec["environment"]["slurm"]["job_id"]]
    assert sum(set(recs) <= cells for cells in completed.values()) == 0 and \
        sorted(c for cells in completed.values() for c in cells) == sorted(recs)  # each cell in one completed job
    queued = [r["environment"]["slurm"]["queued_s"] for r in recs.values()]
    print(f"\nreal Slurm: 3 jobs in {first:.1f} s (one cancelled), submission to start {min(queued):.1f}-"
          f"{max(queued):.1f} s", file=__import__("sys").__stderr__)


@pytest.mark.slurm
def test_on_a_real_slurm_a_job_past_its_time_limit_leaves_its_cells_unmeasured(cluster, fakes, tmp_path, capsys):
    """--job-time-limit 1 on a group that takes minutes: Slurm ends the job at its limit (SIGTERM, then SIGKILL),
    the job ends at once without records, and its cells are left for --resume, said."""
    _sweep(tmp_path, "--executor", "slurm", "--partition", "debug", "--framework", "fake", "--duration", "240",
           "--job-time-limit", "1", name="late")
    err = capsys.readouterr().err
    folder = tmp_path / "out" / "late"
    (job,) = _ledger(folder)["jobs"]
    assert job["state"] == "TIMEOUT" and not _records(folder)
    assert f"job {job['id']} ended (TIMEOUT) before writing its records: its 1 cell(s) are left unmeasured" in err
