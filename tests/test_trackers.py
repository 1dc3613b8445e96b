"""The tracker seam (inferbench.measure.trackers): one module + one entry adds a sensor; a sensor that cannot be
opened, started or read costs its own figures, never the cell; the cell's validity comes from every tracker."""

from __future__ import annotations

import types

import pytest

from inferbench.measure import trackers
from inferbench.measure.trackers.energy import EnergyTracker
from inferbench.scenarios.inference import _finish_trackers, _open_trackers


class Counter:
    """A 50 W sensor on a fake clock."""

    name, wrap_j = "FAKE", None

    def __init__(self) -> None:
        self.t = 0.0

    def energy_j(self) -> float:
        return 50.0 * self.t

    def power_w(self) -> None:
        return None


class Opens(EnergyTracker):
    @classmethod
    def open(cls, job):
        return cls(Counter(), idle_seconds=0.0)


class CannotOpen:
    name, provides, min_block_s = "energy", ("energy",), 0.0

    @classmethod
    def open(cls, job):
        return "FAKE counter not readable (permission denied)"


class Crashes(Opens):
    def finish(self, done):
        raise OSError("the counter vanished")


class Judges:
    name, provides, min_block_s = "judge", (), 0.0

    def __init__(self, verdict):
        self.verdict = verdict

    @classmethod
    def open(cls, job):
        return cls(job.verdict)

    def setup(self, emit):
        pass

    def monitor(self):
        return None

    def finish(self, done):
        return trackers.Contribution({}, self.verdict)


JOB = types.SimpleNamespace(verdict={"valid": True, "reason": "quiet"})


def _done(blocks=()):
    return trackers.Finished(list(blocks), inferences=10, throughput=5.0, memory={"peak_host_mb": 1.0})


def _with(monkeypatch, **entries):
    monkeypatch.setattr(trackers, "TRACKERS", {k: f"test_trackers:{v}" for k, v in entries.items()})


def test_a_tracker_is_one_class_and_one_entry(monkeypatch):
    _with(monkeypatch, energy="Opens", judge="Judges")
    opened, missing = _open_trackers(JOB, lambda phase: None)
    assert [t.name for t in opened] == ["energy", "judge"] and missing == {}
    energy = opened[0]
    monitor = energy.monitor()
    monitor.start()
    energy.sensor.t += 2.0
    block = types.SimpleNamespace(monitors={"energy": monitor.stop(2.0)})
    out = _finish_trackers(opened, missing, _done([block]))
    assert out["energy"]["gross_j"] == pytest.approx(100.0) and out["energy"]["joules_per_inference"] == 10.0
    assert out["validity"] == {"valid": True, "reason": "quiet"}


def test_a_sensor_that_cannot_be_read_costs_its_figures_never_the_cell(monkeypatch):
    _with(monkeypatch, energy="CannotOpen", judge="Judges")
    opened, missing = _open_trackers(JOB, lambda phase: None)
    out = _finish_trackers(opened, missing, _done())
    assert out["energy"] == {"available": False, "reason": "FAKE counter not readable (permission denied)"}
    _with(monkeypatch, energy="Crashes", judge="Judges")
    opened, missing = _open_trackers(JOB, lambda phase: None)
    out = _finish_trackers(opened, missing, _done())
    assert out["energy"]["available"] is False and "the counter vanished" in out["energy"]["reason"]
    assert out["validity"]["valid"] is None  # a watcher that failed cannot vouch for the cell


def test_the_cells_verdict_not_valid_beats_unknown_beats_valid():
    ok, unknown = {"valid": True, "reason": "quiet"}, {"valid": None, "reason": "machine state unknown: x"}
    bad = {"valid": False, "reason": "another process used the GPU"}
    assert trackers.judge([ok, ok])["valid"] is True
    assert trackers.judge([ok, unknown]) == unknown
    assert trackers.judge([ok, unknown, bad]) == {"valid": False, "reason": "another process used the GPU"}
    assert trackers.judge([])["valid"] is None  # nothing watched: never valid


def test_every_registered_tracker_loads_and_says_what_it_provides():
    for name in trackers.TRACKERS:
        cls = trackers.load_tracker(name)
        assert callable(cls.open) and cls.provides and isinstance(cls.min_block_s, float), name
