import os
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def no_heartbeat_outlives_its_test():
    """A progress heartbeat left running prints its ever-growing elapsed time into later tests' output: every test
    closes what it opened (inferbench's commands close theirs on every path)."""
    yield
    import threading

    left = [t for t in threading.enumerate() if t.name == "inferbench-heartbeat" and t.is_alive()]
    assert not left, "a Progress was left open: its heartbeat thread still runs"


#: The test files that take longest, in that order ahead of the rest: pytest-xdist hands whole files to its workers
#: in collection order (pyproject's addopts), and a long file handed out last would run alone at the end. Measured
#: with ``--durations`` (2026-11-26, 2-core Xeon): the zoo about 15 min, the others 2-7 min each.
LONGEST_FIRST = ["test_real_frameworks.py", "test_train_real.py", "test_zoo.py", "test_model_files.py",
                 "test_torch_sources.py", "test_precision_real.py", "test_distributed.py", "test_report.py",
                 "test_serve.py"]


#: The layers a run takes only where its -m names them. pyproject's addopts leaves them out, but a -m of the run's own
#: (README's daily "not slow") replaces that expression, and once opted them in by saying nothing of them: the Slurm
#: layer then failed on every machine without a Slurm.
OPT_IN = ("zoo", "postgres", "slurm")


def pytest_collection_modifyitems(config, items):
    named = config.getoption("markexpr") or ""
    silent = [m for m in OPT_IN if not re.search(rf"\b{m}\b", named)]
    left = [item for item in items if any(item.get_closest_marker(m) for m in silent)]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if item not in left]
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order stays


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One artifact cache for the whole session, one for all of pytest-xdist's workers too (beside their own
    temporary folders): exports are slow, and sharing them between processes, which take turns through the
    cache's lock, is the product's job."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "artifact-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def no_history_unless_asked(monkeypatch):
    """A test's runs keep no history (INFERBENCH_HISTORY=off): its result folders hold only what the run itself
    writes. The history's own tests (tests/test_history.py) give --history or clear this."""
    monkeypatch.setenv("INFERBENCH_HISTORY", "off")


@pytest.fixture(autouse=True)
def quiet_machine_for_the_budget(monkeypatch):
    """--time-budget's plan reads how busy the machine is now (other work's share of the cores): every test plans as
    on a quiet machine, so that no plan depends on what else the test machine runs (the rule is tested apart)."""
    from inferbench.execution import budget

    monkeypatch.setattr(budget, "busy_slowdown", lambda threads, *args, **kwargs: (1.0, 0.0))


@pytest.fixture(autouse=True)
def int8_planned_on_any_cpu(monkeypatch):
    """The tests check what INT8 computes and how it is judged, never its speed: on a CPU without INT8 instructions
    (an AVX2-only EPYC) the plan's refusal would end each of them in exit 2, so the plan lets INT8 through there. The
    refusal itself is tested apart on given flags (tests/test_int8.py, tests/test_machine.py); the workers read the
    real flags, and each record says which INT8 instructions were used (none on such a CPU). A test whose seeded
    weights' INT8 agreement needs the CPU's own INT8 asks for :func:`int8_here`."""
    from inferbench.base import machine
    from inferbench.execution import plan

    monkeypatch.setattr(plan, "cpu_precision_refusal",
                        lambda precision: None if precision == "int8" else machine.cpu_precision_refusal(precision))


@pytest.fixture
def int8_here(monkeypatch):
    """For a test of INT8 on seeded weights, whose agreement with FP32 holds only where the CPU computes INT8: the
    plan's refusal as this CPU gives it, and its line (None where the CPU has INT8 instructions). Emulated, on an
    AVX2-only EPYC, every runtime's INT8 of MobileNetV3-Small agreed with FP32 on 2.5-5.6% of 1,000 inputs (the
    VNNI machines': 32-76%): the refusal is the answer there."""
    from inferbench.base import machine
    from inferbench.execution import plan

    monkeypatch.setattr(plan, "cpu_precision_refusal", machine.cpu_precision_refusal)
    return machine.cpu_precision_refusal("int8")


@pytest.fixture
def fakes(monkeypatch):
    """The fake frameworks and exporter (tests/fakes.py), registered for this test and its child processes."""
    import fakes as module

    from inferbench.execution import group
    from inferbench.registry import artifacts, frameworks

    registry = dict(frameworks.FRAMEWORKS)
    exporter_registry = dict(artifacts.EXPORTERS)
    module.register(registry, exporter_registry)
    monkeypatch.setattr(frameworks, "FRAMEWORKS", registry)
    monkeypatch.setattr(artifacts, "EXPORTERS", exporter_registry)
    # the peak FP32 rate is a child process of its own per machine and cache: not measured for the fakes
    monkeypatch.setattr(group, "peak_fp32", lambda config: {"gflops": None, "method": "best-matmul-fp32",
                                                               "why": "not measured with the fake frameworks"})
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    return module
