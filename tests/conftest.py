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


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One artifact cache for the whole session: exports are slow, and sharing them is the product's job."""
    return tmp_path_factory.mktemp("artifact-cache")


@pytest.fixture
def fakes(monkeypatch):
    """The fake frameworks and exporter (tests/fakes.py), registered for this test and its child processes."""
    import fakes as module

    from inferbench.execution import pipeline
    from inferbench.registry import artifacts, frameworks

    registry = dict(frameworks.FRAMEWORKS)
    exporter_registry = dict(artifacts.EXPORTERS)
    module.register(registry, exporter_registry)
    monkeypatch.setattr(frameworks, "FRAMEWORKS", registry)
    monkeypatch.setattr(artifacts, "EXPORTERS", exporter_registry)
    # the peak FP32 rate is a child process of its own per machine and cache: not measured for the fakes
    monkeypatch.setattr(pipeline, "peak_fp32", lambda config: {"gflops": None, "method": "best-matmul-fp32",
                                                               "why": "not measured with the fake frameworks"})
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    return module
