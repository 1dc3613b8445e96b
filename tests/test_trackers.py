"""The tracker seam (inferbench.measure.trackers): one module + one entry adds a sensor; a sensor that cannot be
opened, started or read costs its own figures, never the cell; the cell's validity comes from every tracker."""

from __future__ import annotations

import math
import types

import pytest

from inferbench.measure import trackers
from inferbench.measure.trackers.energy import EnergyTracker
from inferbench.scenarios.base import finish_tracked, open_tracked


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
    opened, missing = open_tracked(JOB, lambda phase: None)
    assert [t.name for t in opened] == ["energy", "judge"] and missing == {}
    energy = opened[0]
    monitor = energy.monitor()
    monitor.start()
    energy.sensor.t += 2.0
    block = types.SimpleNamespace(monitors={"energy": monitor.stop(2.0)}, latencies_s=[0.2] * 10, round=0)
    out = finish_tracked(opened, missing, _done([block]))
    assert out["energy"]["gross_j"] == pytest.approx(100.0) and out["energy"]["joules_per_inference"] == 10.0
    assert out["energy"]["per_round_j_per_inference"] == {"0": pytest.approx(10.0)}  # for its interval
    assert out["validity"] == {"valid": True, "reason": "quiet"}


def test_the_energy_tracker_reads_the_idle_power_again_after_the_rounds_and_nets_each_round_on_the_line(monkeypatch):
    """The idle baseline is read in the set-up and again at the finish; a round whose middle lies halfway between the
    two readings is netted against their mean (40 W before, 48 W after: 44 W over its 2 s of 100 J)."""
    from inferbench.measure.trackers import energy

    readings = iter([{"idle_w": 40.0, "idle_w_se": 0.5, "idle_df": 3, "at": 100.0, "method": "counter"},
                     {"idle_w": 48.0, "idle_w_se": 0.5, "idle_df": 3, "at": 110.0, "method": "counter"}])
    monkeypatch.setattr(energy, "_read_idle", lambda sensor, seconds: next(readings))
    _with(monkeypatch, energy="Opens", judge="Judges")
    opened, missing = open_tracked(JOB, lambda phase: None)
    tracker = opened[0]  # set up: the baseline before
    monitor = tracker.monitor()
    monitor.start()
    tracker.sensor.t += 2.0
    block = types.SimpleNamespace(monitors={"energy": monitor.stop(2.0)}, latencies_s=[0.2] * 10, round=0,
                                  started_at=104.0)
    out = finish_tracked(opened, missing, _done([block]))["energy"]
    assert out["idle_baseline"]["idle_w"] == 40.0 and out["idle_after"]["idle_w"] == 48.0
    assert out["idle_used"]["drift_w"] == 8.0 and out["idle_used"]["weight_after"] == pytest.approx(0.5)
    assert out["net_j"] == pytest.approx(100.0 - 44.0 * 2.0) and out["idle_w"] == pytest.approx(44.0)
    assert out["idle_used"]["idle_w_se"] == pytest.approx(math.sqrt(2 * 0.25 ** 2 + 64 / 12))


def test_a_sensor_that_cannot_be_read_costs_its_figures_never_the_cell(monkeypatch):
    _with(monkeypatch, energy="CannotOpen", judge="Judges")
    opened, missing = open_tracked(JOB, lambda phase: None)
    out = finish_tracked(opened, missing, _done())
    assert out["energy"] == {"available": False, "reason": "FAKE counter not readable (permission denied)"}
    _with(monkeypatch, energy="Crashes", judge="Judges")
    opened, missing = open_tracked(JOB, lambda phase: None)
    out = finish_tracked(opened, missing, _done())
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


def test_the_cpu_clock_is_read_around_each_block_and_heat_throttling_makes_a_cell_not_valid(tmp_path):
    """A sensor added as one module and one entry (trackers/cpufreq.py): its figures join machine_state beside the
    machine tracker's, and thermal throttling during a block says the cell is not valid."""
    from inferbench.measure.trackers.cpufreq import Clocks, ClockTracker

    for i in range(2):
        cpu = tmp_path / f"cpu{i}"
        (cpu / "cpufreq").mkdir(parents=True)
        (cpu / "thermal_throttle").mkdir()
        (cpu / "cpufreq" / "scaling_cur_freq").write_text("3000000\n")
        (cpu / "cpufreq" / "cpuinfo_max_freq").write_text("3500000\n")
        (cpu / "thermal_throttle" / "core_throttle_count").write_text("7\n")
    tracker = ClockTracker(Clocks(sys_cpu=tmp_path, cpuinfo=tmp_path / "none"))
    assert tracker.source == "sysfs-scaling_cur_freq"

    def block(throttled: int, mhz: int) -> types.SimpleNamespace:
        (tmp_path / "cpu1" / "cpufreq" / "scaling_cur_freq").write_text(f"{mhz * 1000}\n")
        monitor = tracker.monitor()
        monitor.start()
        (tmp_path / "cpu1" / "thermal_throttle" / "core_throttle_count").write_text(f"{7 + throttled}\n")
        return types.SimpleNamespace(monitors={tracker.name: monitor.stop(1.0)})

    cool = tracker.finish(_done([block(0, 3000)]))
    clock = cool.fields["machine_state"]["cpu_clock"]
    assert clock["mhz_rated"] == 3500 and clock["mhz_min"] == 3000 and clock["throttle_events"] == 0
    assert cool.validity is None  # the clock alone is no verdict
    hot = tracker.finish(_done([block(3, 2200)]))
    assert hot.fields["machine_state"]["cpu_clock"]["mhz_min"] == 2200
    assert hot.validity == {"valid": False, "reason": "the CPU throttled for heat 3 time(s) during the blocks"}
    merged = finish_tracked([Judges({"valid": True, "reason": "quiet"}), tracker], {}, _done([block(0, 3000)]))
    assert merged["validity"]["valid"] is True and merged["machine_state"]["cpu_clock"]["mhz_min"] == 3000


def test_the_machines_own_speed_is_one_state_or_two():
    """A fixed matrix product read before every round by a probe process (trackers/speed.py): on the 2-core VM it
    ran at 148 or 201 GFLOP/s as the hypervisor placed the virtual CPUs, and the runtimes' latencies moved with it."""
    from inferbench.measure.trackers.speed import probe, same_state, summarize

    speed = summarize([{"round": r, "gflops": g} for r, g in enumerate([201.0, 199.0, 148.0, 150.0])])
    assert speed["gflops_median"] == pytest.approx(174.5) and speed["gflops_min"] == 148.0 and speed["states"] == 2
    assert summarize([{"round": 0, "gflops": 199.0}, {"round": 1, "gflops": 201.0}])["states"] == 1
    assert same_state(201.0, 195.0) is True and same_state(201.0, 148.0) is False
    assert same_state(float("nan"), 148.0) is None and same_state(None, 148.0) is None
    assert probe(seconds=0.01) > 0.1  # the real product, on this machine
    from inferbench.measure.trackers.speed import matched, steady

    # a round is steady when the readings before and after it agree; the last reading only closes the last round
    readings = [{"round": r, "gflops": g} for r, g in enumerate([200.0, 201.0, 150.0, 148.0, 149.0, 199.0])]
    assert sorted(steady(readings)) == [0, 2, 3] and steady(readings)[0] == pytest.approx(200.5)
    other = [{"round": r, "gflops": g} for r, g in enumerate([149.0, 150.0, 151.0, 150.0, 200.0])]
    assert matched(readings, other, 2) == ([2, 3], [0, 1, 2], pytest.approx(149.0, abs=1.5))
    assert matched(readings, other, 3) is None  # no speed with 3 steady rounds on both sides


def test_a_run_reads_the_machines_speed_before_every_round_and_after_the_last(fakes, tmp_path):
    from test_pipeline import _run

    from inferbench import records

    assert _run(tmp_path, "--framework", "fake") == 0
    (rec,) = records.iter_records(tmp_path / "out")[0]
    speed = rec["machine_state"]["speed"]
    assert [r["round"] for r in speed["rounds"]] == [0, 1, 2, 3, 4] and speed["gflops_median"] > 0
    assert 0 <= speed["steady_rounds"] <= 4
