"""Sweeps on a real Ray cluster: two simulated nodes of Ray's own test cluster, each a machine of its own
(custom resources ``machine:a`` and ``machine:b``, one ``inferbench`` slot each), fake runners spread over both;
records complete and never duplicated, a task whose worker is killed retried, --resume running only what is
missing, a machine no node is failing its cells in one line, bad addresses and impossible clusters refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_pipeline import QUICK

from inferbench.sweep import main as sweep_main

ray = pytest.importorskip("ray", reason='Ray is in the test extra: pip install -e ".[test]"')
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of two simulated nodes on this machine (Ray's own test utility), its workers able to import the
    fake frameworks (tests/ on their PYTHONPATH, set before the nodes start)."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "RAY_USAGE_STATS_ENABLED", "RAY_worker_niceness")}
    # the workers at the priority of the user's processes, as inferbench's own local cluster runs them (Ray's
    # default, nice 15, starved them beside other work: these tests took 16 minutes beside two busy loops)
    os.environ.update(PYTHONPATH=str(TESTS), RAY_USAGE_STATS_ENABLED="0", RAY_worker_niceness="0")
    common = {"num_cpus": 2, "object_store_memory": 100 * 2**20, "include_dashboard": False}
    nodes = Cluster()
    nodes.add_node(resources={"machine:a": 1, "inferbench": 1}, **common)
    worker = nodes.add_node(resources={"machine:b": 1, "inferbench": 1}, **common)
    nodes.wait_for_nodes()
    try:
        yield nodes, worker
    finally:
        ray.shutdown()
        nodes.shutdown()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _sweep(tmp_path, address, *argv, name="s"):
    return sweep_main([*QUICK, "--executor", "ray", "--ray-address", address, *argv, "--name", name,
                       "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")])


def _records(folder):
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("mobilenet*.json"))}


def test_every_cell_runs_once_on_each_named_machine(fakes, cluster, tmp_path, monkeypatch):
    log = tmp_path / "loads.log"
    monkeypatch.setenv("FAKE_LOAD_LOG", str(log))  # --pass-env: the driver's value reaches the nodes' cells
    assert _sweep(tmp_path, cluster[0].address, "--framework", "fake,fake-slow", "--batch-size", "1,2",
                  "--machines", "a,b", "--pass-env", "FAKE_LOAD_LOG") == 0
    sweep = tmp_path / "out" / "s"
    for machine in ("a", "b"):
        recs = _records(sweep / machine)
        assert len(recs) == 4 and all(r["status"] == "ok" for r in recs.values())
        assert {r["environment"]["ray"]["machine"] for r in recs.values()} == {machine}
        assert (sweep / machine / "summary.csv").read_text().count("\n") == 5
    assert {r["environment"]["niceness"] for m in "ab" for r in _records(sweep / m).values()} == {0}
    node_ids = {r["environment"]["ray"]["node_id"] for m in "ab" for r in _records(sweep / m).values()}
    assert len(node_ids) == 2  # each machine's cells on its own node
    assert len(log.read_text().split()) == 16  # 8 cells, two worker processes each, each loaded once
    from inferbench.report import main as report_main

    assert report_main([str(sweep), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "The same cell on each machine" in text
    rows = [line for line in text.splitlines() if line.startswith("|") and "@ b |" in line and "@ a |" in line]
    assert len(rows) == 4  # each of the 4 cells: machine b against machine a


def test_a_killed_task_is_retried_and_resume_runs_only_what_is_missing(fakes, cluster, tmp_path, monkeypatch):
    marker, log = tmp_path / "killed", tmp_path / "loads.log"
    monkeypatch.setenv("FAKE_KILL_PARENT_ONCE", str(marker))  # the first measured worker kills its Ray task
    monkeypatch.setenv("FAKE_LOAD_LOG", str(log))
    assert _sweep(tmp_path, cluster[0].address, "--framework", "fake,fake-slow", "--machines", "a",
                  "--pass-env", "FAKE_KILL_PARENT_ONCE,FAKE_LOAD_LOG", name="k") == 0
    assert marker.exists()  # the task died once, and its retry measured the cells
    folder = tmp_path / "out" / "k" / "a"
    recs = _records(folder)
    assert len(recs) == 2 and all(r["status"] == "ok" for r in recs.values())
    name = sorted(recs)[0]
    (folder / name).unlink()
    loads = len(log.read_text().split())
    assert sweep_main(["--resume", str(tmp_path / "out" / "k")]) == 0
    assert sorted(_records(folder)) == sorted(recs) and len(log.read_text().split()) == loads + 2  # that cell only
    assert sweep_main(["--resume", str(tmp_path / "out" / "k")]) == 0
    assert len(log.read_text().split()) == loads + 2  # nothing left to run


def test_a_ray_sweep_keeps_to_the_time_budget_as_a_local_one_does(fakes, cluster, tmp_path, capsys, monkeypatch):
    """The same group loop as a local sweep: the budget is already spent when the first group starts (a clock that
    moves 300 s a reading against 250 s), so that group's node starts none of its cell's other worker processes and
    stops its rounds at the minimum (three, in one process), the next group is never submitted, and --resume
    measures it later."""
    from test_budget import _Steps

    from inferbench.execution import budget

    class Spent(budget.Deadline):
        def __init__(self, budget_s, clock=None):
            super().__init__(250.0, _Steps(300.0))

    real = budget.Deadline
    monkeypatch.setattr(budget, "Deadline", Spent)  # the driver's; the node keeps what was left: nothing
    assert _sweep(tmp_path, cluster[0].address, "--framework", "fake", "--batch-size", "1,2", "--machines", "a",
                  "--rounds", "8", "--time-budget", "1h", name="budget") == 0
    err = capsys.readouterr().err
    assert "1 cell(s) in 1 group(s) left unmeasured" in err and "finish with inferbench sweep --resume" in err
    folder = tmp_path / "out" / "budget" / "a"
    recs = _records(folder)
    assert list(recs) == ["mobilenet_v3_small_32_bs1_fake.json"]
    blocks = recs["mobilenet_v3_small_32_bs1_fake.json"]["timing"]["blocks"]
    assert sorted({b["round"] for b in blocks}) == [0, 1, 2] and {b.get("process", 0) for b in blocks} == {0}
    monkeypatch.setattr(budget, "Deadline", real)
    assert sweep_main(["--resume", str(tmp_path / "out" / "budget")]) == 0
    second = _records(folder)["mobilenet_v3_small_32_bs2_fake.json"]
    assert len({b["round"] for b in second["timing"]["blocks"]}) == 8 and second["status"] == "ok"


def test_a_ray_sweep_budgets_its_next_group_on_the_time_its_node_measured(fakes, cluster, tmp_path, monkeypatch):
    """Before each group after the first, the driver asks the deadline whether the group's time fits: on Ray as
    locally, that time is the one the groups so far took (their nodes send their phases back with their records),
    not the up-front estimate, here made 900 s a group's set-up."""
    from inferbench.execution import budget

    asked = []

    class Watched(budget.Deadline):
        def fits(self, seconds):
            asked.append(seconds)
            return super().fits(seconds)

    monkeypatch.setattr(budget, "Deadline", Watched)
    monkeypatch.setattr(budget, "SETUP_S", {"fake": 900.0})  # the driver's estimate; the nodes measure
    assert _sweep(tmp_path, cluster[0].address, "--framework", "fake", "--batch-size", "1,2,3", "--machines", "a",
                  "--rounds", "3", "--time-budget", "1h", name="measured") == 0
    assert len(_records(tmp_path / "out" / "measured" / "a")) == 3
    assert len(asked) == 2 and all(0 < s < 300 for s in asked), asked  # a few seconds each: measured, not 900


def test_a_machine_no_node_is_fails_its_own_cells_in_one_line(fakes, cluster, tmp_path, capsys):
    assert _sweep(tmp_path, cluster[0].address, "--framework", "fake", "--machines", "a,c") == 1
    recs = _records(tmp_path / "out" / "s" / "c")
    (rec,) = recs.values()
    assert rec["status"] == "failed" and rec["error"].startswith("no node of the cluster is machine c")
    assert all(r["status"] == "ok" for r in _records(tmp_path / "out" / "s" / "a").values())


@pytest.mark.parametrize("argv, message", [
    (["--machines", "c"], "the Ray cluster cannot run any cell: no node of the cluster is machine c"),
    (["--ray-address", "127.0.0.1:1"], "--ray-address 127.0.0.1:1: no Ray head answers there"),
    (["--ray-address", "nohost"], "--ray-address 'nohost': expected HOST:PORT"),
    (["--machines", "a,../x"], "--machines: '../x' is not a machine name"),
])
def test_a_cluster_that_cannot_run_anything_is_one_line_and_leaves_nothing(fakes, cluster, tmp_path, capsys, argv,
                                                                           message):
    address = argv[argv.index("--ray-address") + 1] if "--ray-address" in argv else cluster[0].address
    rest = [a for i, a in enumerate(argv) if "--ray-address" not in (a, argv[i - 1] if i else "")]
    assert _sweep(tmp_path, address, "--framework", "fake", *rest) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and len(err) == 1 and not (tmp_path / "out").exists()


def test_ray_options_without_ray_are_refused(tmp_path, capsys):
    assert sweep_main(["--ray-address", "127.0.0.1:6379", "--output-dir", str(tmp_path)]) == 2
    assert "--ray-address applies to --executor ray" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_onnx_runtime_sweep_on_ray_gives_the_cells_of_a_local_one(cluster, tmp_path, shared_cache):
    """ONNX Runtime on MobileNetV3-Small through the cluster (one machine's node: the two simulated nodes share this
    machine's cores) and through the local executor: the same cells, each measured and verified, the cluster's on
    its node. The overhead per task is printed, not asserted (the local run goes first and last: the cache warm)."""
    import sys
    import time

    common = ["--models", "mobilenet_v3_small", "--resolutions", "96", "--batch-sizes", "1,2", "--frameworks",
              "onnxrt", "--quick", "--duration", "1", "--rounds", "3", "--threads", "2", "--device", "cpu",
              "--cache-dir", str(shared_cache),
              "--output-dir", str(tmp_path / "out")]
    walls, cells = {}, {}
    for name in ("local-cold", "ray", "local"):
        extra = ["--executor", "ray", "--ray-address", cluster[0].address, "--machines", "a"] if name == "ray" else []
        start = time.monotonic()
        assert sweep_main([*common, *extra, "--name", name]) == 0
        walls[name] = time.monotonic() - start
        folder = tmp_path / "out" / name / ("a" if name == "ray" else "")
        recs = [json.loads(p.read_text()) for p in folder.glob("mobilenet*.json")]
        assert all(r["status"] == "ok" and r["parity"]["status"] == "passed" for r in recs)
        cells[name] = sorted((r["framework"], r["batch_size"], r["variant"]) for r in recs)
        assert all(bool(r["environment"].get("ray")) == (name == "ray") for r in recs)
    assert cells["ray"] == cells["local"] == cells["local-cold"] and len(cells["local"]) == 2
    print(f"\nonnxrt sweep of 2 cells (2 groups, 2 tasks): local {walls['local']:.1f} s, on Ray "
          f"{walls['ray']:.1f} s: {(walls['ray'] - walls['local']) / 2:+.1f} s per task", file=sys.__stderr__)


def test_without_ray_address_a_private_local_cluster_is_started_whatever_ray_address_says(monkeypatch):
    """--executor ray without --ray-address attached to whatever cluster RAY_ADDRESS (or a running `ray start`)
    named: it starts a cluster of this machine of its own (Ray's address="local"), as documented."""
    from types import SimpleNamespace

    from inferbench.execution import distributed

    calls = []
    fake = SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: calls.append(kw))
    monkeypatch.setattr(distributed, "import_ray", lambda: fake)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    distributed.connect(SimpleNamespace(ray_address=None))
    (kwargs,) = calls
    assert kwargs["address"] == "local" and kwargs["resources"] == {distributed.SLOT: 1}
    assert os.environ["RAY_worker_niceness"] == "0"  # its workers, and the cells', at the user's priority


def test_a_node_that_ran_the_cells_below_normal_priority_is_said_once_per_machine():
    """A cluster started by `ray start` runs its workers at nice 15 (Ray's default): any other work on the node takes
    precedence over the cells. The records say it (environment.niceness) and the sweep says it once per machine."""
    from types import SimpleNamespace

    from inferbench.execution.distributed import RayGroups

    said = []
    groups = RayGroups.__new__(RayGroups)  # the driver's bookkeeping only: no cluster
    groups.progress, groups.warned = SimpleNamespace(say=lambda label, text: said.append((label, text))), set()
    nice, plain = (SimpleNamespace(environment=SimpleNamespace(niceness=n)) for n in (15, 0))
    groups._say_niceness("a", [plain])
    groups._say_niceness("b", [plain, nice])
    groups._say_niceness("b", [nice])
    assert len(said) == 1 and said[0][0] == "ray b"
    assert "nice 15" in said[0][1] and "RAY_worker_niceness=0" in said[0][1]


def test_every_executor_answers_the_group_loops_protocol():
    """The one group loop (pipeline._run_groups) asks an executor for what executors.Executor declares, and nothing
    else: the local executor, Ray's and Slurm's answer each of its methods with the same parameters, and set the
    counts it reads."""
    import inspect

    from inferbench.execution import executors
    from inferbench.execution.distributed import RayGroups
    from inferbench.execution.slurm import SlurmGroups

    methods = [n for n, v in vars(executors.Executor).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert methods == ["start", "busy", "free", "wait", "cancel"]
    for cls in (executors.Local, RayGroups, SlurmGroups):
        for name in methods:
            assert list(inspect.signature(getattr(cls, name)).parameters) == \
                list(inspect.signature(getattr(executors.Executor, name)).parameters), (cls.__name__, name)
        assert all(f"self.{a}" in inspect.getsource(cls) for a in executors.Executor.__annotations__), cls.__name__
    assert set(executors.Executor.__annotations__) == {"cells_left", "groups_left"}
