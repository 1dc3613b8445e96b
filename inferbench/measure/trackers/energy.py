"""Energy around the timed window, never on the timed thread: what the RAPL and NVML trackers share.

Two sources, combined when both exist:
- an *energy counter* read just before and just after the window (NVML's total-energy counter on
  Volta and newer GPUs, in mJ; RAPL's package counter on CPUs, in µJ, which wraps at a known range);
- a *power sampler* on a background thread (tens of ms) for the time series, mean and peak; it also
  gives the energy (trapezoid) where there is no counter.
An idle baseline measured just before the rounds, and again just after them, gives net (above idle) figures next to
gross ones: each round's against the idle power on the line between the two readings (:func:`interpolated`).
Counters update about every 100 ms, so a window shorter than ``MIN_WINDOW_S`` is flagged.

Sensors are injected, so every piece of this logic is tested on machines without the hardware.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import stats
from ..stats import satterthwaite
from . import Contribution

Clock = Callable[[], float]
Reading = dict[str, Any]  # a baseline's or a block's energy figures

#: Energy counters update about every 100 ms; a window must be much longer for the delta to mean much.
MIN_WINDOW_S = 1.0
SAMPLE_INTERVAL_S = 0.02


class Sensor(Protocol):
    name: str

    def energy_j(self) -> float | None:
        """Monotonic energy counter in joules (may wrap, see ``wrap_j``), or None if there is none."""

    def power_w(self) -> float | None:
        """Instantaneous power in watts, or None if the sensor cannot tell."""

    @property
    def wrap_j(self) -> float | None:
        """The counter wraps to zero after this many joules (None: it does not wrap)."""


def counter_delta(start: float, end: float, wrap: float | None) -> float:
    """Energy between two counter readings, across at most one wrap-around."""
    if end >= start:
        return end - start
    if wrap is None:
        raise ValueError(f"energy counter went backwards ({start} -> {end}) and does not wrap")
    return wrap - start + end


class PowerSampler:
    """Samples ``read_w`` every ``interval_s`` on a daemon thread until stopped."""

    def __init__(self, read_w: Callable[[], float | None], interval_s: float = SAMPLE_INTERVAL_S,
                 clock: Clock = time.monotonic, sleep: Callable[[float], Any] | None = None) -> None:
        self.read_w, self.interval_s, self.clock = read_w, interval_s, clock
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._thread: threading.Thread | None = None
        self.errors = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                watts = self.read_w()
            except Exception:  # a sensor hiccup must not end the run
                watts = None
                self.errors += 1
            if watts is not None:
                self.samples.append((self.clock(), float(watts)))
            self._sleep(self.interval_s)

    def start(self) -> None:
        self._stop.clear()
        self.samples = []
        self._thread = threading.Thread(target=self._run, name="inferbench-power", daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return list(self.samples)


def trapezoid_j(samples: list[tuple[float, float]]) -> float | None:
    if len(samples) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


def _read(fn: Callable[[], float | None]) -> float | None:
    """One sensor reading; a sensor error (NVML's, a powercap file gone) is no reading, never a failed cell."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - NVMLError and friends
        return None


#: Settling: mean power over windows of SETTLE_WINDOW_S until two in a row agree within SETTLE_TOLERANCE (or
#: SETTLE_MAX_S has passed). NVML's power reading is itself a ~1 s moving average on Ampere and newer, and a GPU
#: keeps its clocks (and its power) up for a while after the last kernel: a baseline taken at once is too high.
SETTLE_WINDOW_S = 0.5
SETTLE_TOLERANCE = 0.03
SETTLE_MAX_S = 8.0


def settle(sensor: Sensor, clock: Clock = time.monotonic, sleep: Callable[[float], Any] = time.sleep,
           window_s: float = SETTLE_WINDOW_S, tolerance: float = SETTLE_TOLERANCE,
           max_s: float = SETTLE_MAX_S) -> dict[str, Any]:
    """Wait until the idle device's power stops falling: ``{"settled", "settle_s", "windows_w", "reading"}`` (the
    windows' mean powers, for the record). Each window's mean comes from the energy counter where there is one
    (RAPL has nothing else), else from power readings; a sensor with neither cannot be watched and is not waited
    for (``settled`` None)."""
    start = clock()
    means: list[float] = []
    counter = _read(sensor.energy_j) is not None
    if not counter and _read(sensor.power_w) is None:
        return {"settled": None, "settle_s": 0.0, "windows_w": means, "reading": None}
    reading = "counter" if counter else "power"
    while clock() - start < max_s:
        t0, e0, watts = clock(), _read(sensor.energy_j) if counter else None, []
        while clock() - t0 < window_s:
            if not counter:
                w = _read(sensor.power_w)
                if w is not None:
                    watts.append(w)
            sleep(min(0.05, window_s))
        e1, t1 = (_read(sensor.energy_j) if counter else None), clock()
        if counter and e0 is not None and e1 is not None and e1 >= e0 and t1 > t0:
            means.append((e1 - e0) / (t1 - t0))
        elif watts:
            means.append(sum(watts) / len(watts))
        else:
            return {"settled": None, "settle_s": clock() - start, "windows_w": means, "reading": reading}
        if len(means) >= 2 and abs(means[-1] - means[-2]) <= tolerance * max(abs(means[-2]), 1e-9):
            return {"settled": True, "settle_s": clock() - start, "windows_w": [round(m, 2) for m in means],
                    "reading": reading}
    return {"settled": False, "settle_s": clock() - start, "windows_w": [round(m, 2) for m in means],
            "reading": reading}


#: The idle baseline is read in this many equal windows: their spread is its standard error (``idle_w_se``), which
#: the net energy's interval carries (every round's net energy leans on the same baseline).
IDLE_WINDOWS = 4


def idle_baseline(sensor: Sensor, seconds: float = 2.0, clock: Clock = time.monotonic,
                  sleep: Callable[[float], Any] = time.sleep, settle_first: bool = True) -> dict[str, Any]:
    """Mean power of the idle device over ``seconds``, from the counter if there is one, else from samples, with its
    standard error from :data:`IDLE_WINDOWS` windows of it (``idle_w_se``, ``idle_df``); first (``settle_first``)
    waits for the power to stop falling after the work before it (:func:`settle`)."""
    settled = settle(sensor, clock, sleep) if settle_first else None
    e0, t0 = _read(sensor.energy_j), clock()
    counter = [(t0, e0)]  # every reading of the counter: the windows' ends are picked from them afterwards
    watts: list[tuple[float, float]] = []
    while clock() - t0 < seconds:
        w = _read(sensor.power_w)
        if w is not None:
            watts.append((clock() - t0, w))
        sleep(min(0.05, seconds / IDLE_WINDOWS))
        counter.append((clock(), _read(sensor.energy_j)))
    t1, e1 = counter[-1]
    out: dict[str, Any] = {"seconds": t1 - t0, "settle": settled}
    if e0 is not None and e1 is not None and t1 > t0 and e1 >= e0:
        return {"idle_w": (e1 - e0) / (t1 - t0), **out, **_windows_error(counter, t0, t1), "method": "counter"}
    if watts:
        chunks = [[w for at, w in watts if k * seconds / IDLE_WINDOWS <= at < (k + 1) * seconds / IDLE_WINDOWS]
                  for k in range(IDLE_WINDOWS)]
        means = [(sum(c) / len(c), 1.0) for c in chunks if c]
        return {"idle_w": sum(w for _, w in watts) / len(watts), **out, **_standard_error(means),
                "method": "samples"}
    return {"idle_w": None, **out, "method": "none"}


def _windows_error(counter: list[tuple[float, float | None]], t0: float, t1: float) -> dict[str, Any]:
    """The baseline's standard error from :data:`IDLE_WINDOWS` windows of the counter readings, each window ending at
    the reading nearest its boundary (a stalled loop leaves windows of unequal length: each is weighted by its
    length, and one shorter than a quarter of its share is not used)."""
    share = (t1 - t0) / IDLE_WINDOWS
    ends = [min((r for r in counter if r[1] is not None), key=lambda r: abs(r[0] - (t0 + k * share)))
            for k in range(IDLE_WINDOWS + 1)]
    means = [((b - a) / (u - t), u - t) for (t, a), (u, b) in zip(ends, ends[1:])
             if a is not None and b is not None and u - t >= share / 4 and b >= a]
    return _standard_error(means)


def _standard_error(means: list[tuple[float, float]]) -> dict[str, Any]:
    """The standard error of the mean of windows (their means and lengths, the mean weighted by length) and its
    degrees of freedom (None, 0 with fewer than two windows)."""
    if len(means) < 2:
        return {"idle_w_se": None, "idle_df": 0}
    total = sum(w for _, w in means)
    mean = sum(m * w for m, w in means) / total
    var = sum(w * (m - mean) ** 2 for m, w in means) / total * len(means) / (len(means) - 1)  # per window of the mean
    return {"idle_w_se": (var / len(means)) ** 0.5, "idle_df": len(means) - 1}


@dataclass
class EnergyMonitor:
    """A window monitor (see ``measure.timing``): counter and sampler around the timed window."""

    sensor: Sensor
    idle_w: float | None = None
    interval_s: float = SAMPLE_INTERVAL_S
    clock: Clock = time.monotonic
    sampler_factory: Callable[..., PowerSampler] = PowerSampler

    def start(self) -> None:
        # a sensor without a power reading (RAPL) gets no sampler thread waking for nothing
        self.sampler = (self.sampler_factory(self.sensor.power_w, self.interval_s, self.clock)
                        if _read(self.sensor.power_w) is not None else None)
        if self.sampler is not None:
            self.sampler.start()
        self.e0 = _read(self.sensor.energy_j)

    def stop(self, window_s: float) -> dict[str, Any]:
        e1 = _read(self.sensor.energy_j)
        samples = self.sampler.stop() if self.sampler is not None else []
        watts = [w for _, w in samples]
        gross_j: float | None = None
        counter_error = None
        if self.e0 is not None and e1 is not None:
            try:
                gross_j = counter_delta(self.e0, e1, self.sensor.wrap_j)
                method = f"{self.sensor.name.lower()}-counter"
            except ValueError as exc:  # a broken counter must not cost the latency measurement
                counter_error = str(exc)
        if gross_j is None:
            gross_j, method = trapezoid_j(samples), f"{self.sensor.name.lower()}-samples-trapezoid"
        out: dict[str, Any] = {
            "available": gross_j is not None, "method": method if gross_j is not None else None,
            "sensor": self.sensor.name, "window_s": window_s, "gross_j": gross_j,
            "idle_w": self.idle_w,
            "net_j": None if gross_j is None or self.idle_w is None else gross_j - self.idle_w * window_s,
            "mean_power_w": None if gross_j is None or window_s <= 0 else gross_j / window_s,
            "peak_power_w": max(watts) if watts else None,
            "sampler": None if self.sampler is None else {
                "interval_s": self.interval_s, "n": len(samples), "errors": self.sampler.errors,
                "thread": "background",  # the timed thread reads only the counter, before and after
                "reading": getattr(self.sensor, "power_reading", None)},
            "too_short": window_s < MIN_WINDOW_S,
        }
        if counter_error:
            out["counter_error"] = counter_error
        if gross_j is None:
            out["reason"] = counter_error or "no energy counter and fewer than two power samples"
        return out


def combine(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """One energy block from the blocks of every round: energies and windows add up, peaks take the
    maximum; the method and sampler are the first block's (every block reads the same sensor)."""
    if len(blocks) == 1:
        return blocks[0]
    out = dict(blocks[0])

    def total(key: str) -> float | None:
        values = [b.get(key) for b in blocks]
        return None if any(v is None for v in values) else float(sum(float(v) for v in values if v is not None))

    window = total("window_s") or 0.0
    gross = total("gross_j")
    peaks = [b["peak_power_w"] for b in blocks if b.get("peak_power_w") is not None]
    out.update(available=all(b.get("available") for b in blocks), window_s=window, gross_j=gross,
               net_j=total("net_j"), mean_power_w=None if gross is None or window <= 0 else gross / window,
               peak_power_w=max(peaks) if peaks else None, too_short=any(b.get("too_short") for b in blocks),
               blocks=len(blocks))
    if out.get("sampler"):
        out["sampler"] = {**out["sampler"], "n": sum((b.get("sampler") or {}).get("n", 0) for b in blocks),
                          "errors": sum((b.get("sampler") or {}).get("errors", 0) for b in blocks)}
    errors = [b["counter_error"] for b in blocks if b.get("counter_error")]
    if errors:
        out["counter_error"] = errors[0]
    return out


def per_inference(energy: dict[str, Any], inferences: int, throughput: float) -> dict[str, Any]:
    """Add joules per inference, inferences per joule and throughput per watt to an energy block."""
    out = dict(energy)
    gross, net = energy.get("gross_j"), energy.get("net_j")
    out["joules_per_inference"] = gross / inferences if gross is not None and inferences else None
    out["net_joules_per_inference"] = net / inferences if net is not None and inferences else None
    out["inferences_per_joule"] = inferences / gross if gross else None
    mean_w = energy.get("mean_power_w")
    out["throughput_per_watt"] = throughput / mean_w if mean_w else None
    return out


class EnergyTracker:
    """The energy part of a tracker (see :mod:`inferbench.measure.trackers`): an idle baseline once the device has
    settled, an energy monitor around every block, and the cell's ``energy`` block from all of them. RAPL and
    NVML open it with their sensor."""

    name = "energy"
    provides: tuple[str, ...] = ("energy",)
    min_block_s = MIN_WINDOW_S * 2  # never energy over a block the ~100 ms counter cannot resolve

    def __init__(self, sensor: Sensor, idle_seconds: float = 2.0) -> None:
        self.sensor, self.idle_seconds = sensor, idle_seconds
        self.idle: dict[str, Any] = {"idle_w": None}
        self.after: dict[str, Any] | None = None  # the idle power read again after the rounds
        self.after_read = False

    def setup(self, emit: Callable[[str], None]) -> None:
        emit("idle power baseline")
        self.idle = _read_idle(self.sensor, self.idle_seconds)

    def monitor(self) -> EnergyMonitor:
        return EnergyMonitor(self.sensor, self.idle["idle_w"])

    def after_rounds(self) -> None:
        """The idle power again, now the rounds are over: a baseline that drifted while they ran (a device warming
        up) is no longer taken for the load's. The parent asks every worker of the group at once, each idle until all
        have read it (``execution/rounds.py``), before any of them collects its record."""
        self.after_read = True  # once, even where the reading fails: never again while the others collect
        self.after = _read_idle(self.sensor, self.idle_seconds) if self.idle.get("idle_w") is not None else None

    def finish(self, done: Any) -> Any:
        if not self.after_read:  # finished without the group's idle phase (a session run on its own)
            self.after_rounds()
        monitors, used = interpolated(self.idle, self.after, [(getattr(b, "started_at", None) or None,
                                                               b.monitors[self.name]) for b in done.blocks])
        energy = per_inference(combine(monitors), done.inferences, done.throughput)
        energy.update(idle_baseline=self.idle, idle_after=self.after, idle_used=used)
        if used is not None:
            energy["idle_w"] = used["idle_w"]
        samples = sum(len(b.latencies_s) for b in done.blocks)
        batch = done.inferences / samples if samples else 0
        for key in ("gross_j", "net_j"):  # for the intervals between rounds (and processes)
            energy[f"per_round_{'' if key == 'gross_j' else 'net_'}j_per_inference"] = {
                str(b.round): m[key] / (len(b.latencies_s) * batch)
                for b, m in zip(done.blocks, monitors) if m.get(key) is not None and b.latencies_s and batch}
        return Contribution({"energy": net_interval(energy, [energy], done.inferences, None)})


def _read_idle(sensor: Sensor, seconds: float) -> dict[str, Any]:
    """:func:`idle_baseline`, with the wall-clock time of its middle (``at``: the blocks' ``started_at`` clock)."""
    found = idle_baseline(sensor, seconds=seconds)
    return {**found, "at": time.time() - float(found.get("seconds") or 0.0) / 2}


def interpolated(before: Reading, after: Reading | None, blocks: list[tuple[float | None, Reading]],
                 ) -> tuple[list[Reading], Reading | None]:
    """The blocks' energy monitors (each with the wall-clock time it started) with their net energy against the idle
    power on the line between the baseline read ``before`` the rounds and the one read ``after`` them, at each
    block's middle; and the baseline so used (None, and the blocks as they were, without both readings): its mean
    over the blocks weighted by their windows (``idle_w``), ``drift_w`` (after less before), and its standard error
    (``idle_w_se``, with ``idle_df`` by Satterthwaite's rule): each reading's by its weight, and the drift's shape —
    the idle power between the readings is not known to lie on the line: a uniform spread over their difference."""
    b0, b1 = before.get("idle_w"), (after or {}).get("idle_w")
    t0, t1 = before.get("at"), (after or {}).get("at")
    se0, se1 = before.get("idle_w_se"), (after or {}).get("idle_w_se")
    if after is None or b0 is None or b1 is None or t0 is None or t1 is None or t1 <= t0 or any(
            started is None for started, _ in blocks) or (se0 is not None and se1 is None):
        return [m for _, m in blocks], None  # (a reading after without its error would cost the interval)
    out, weights = [], []
    for started, monitor in blocks:
        assert started is not None
        window = float(monitor.get("window_s") or 0.0)
        w = min(1.0, max(0.0, (started + window / 2 - t0) / (t1 - t0)))
        idle = b0 + w * (b1 - b0)
        gross = monitor.get("gross_j")
        out.append({**monitor, "idle_w": idle, "net_j": None if gross is None else gross - idle * window})
        weights.append((w, window))
    total = sum(x for _, x in weights)
    mean_w = sum(w * x for w, x in weights) / total if total > 0 else 0.5
    used: dict[str, Any] = {"idle_w": b0 + mean_w * (b1 - b0), "drift_w": b1 - b0, "weight_after": mean_w,
                            "method": "interpolated", "idle_w_se": None, "idle_df": 0, "shared_w_se": None,
                            "shared_df": 0}
    if se0 is not None and se1 is not None:
        # the shape: the idle power anywhere between the readings, uniform over them, about the line's point
        shape = (b1 - b0) ** 2 * ((mean_w - 0.5) ** 2 + 1 / 12)
        own = (((1 - mean_w) * se0) ** 2, float(before.get("idle_df") or 0))  # this worker's reading before
        shared = [((mean_w * se1) ** 2, float(after.get("idle_df") or 0)), (shape, math.inf)]  # the group's at once
        for names, parts in ((("idle_w_se", "idle_df"), [own, *shared]), (("shared_w_se", "shared_df"), shared)):
            found = satterthwaite(parts)
            if found is not None:
                used.update(dict(zip(names, found)))
    return out, used


def net_interval(energy: dict[str, Any], processes: list[dict[str, Any]], inferences: int,
                 of_round: Any) -> dict[str, Any]:
    """``energy`` with ``net_joules_per_inference_ci95``: the rounds' spread of their net energy per inference (as
    latency's, with the processes' part; ``of_round``: each round's process, None for one) and, for a cell of one
    worker process, its idle baseline's standard error (``processes``: the energy blocks of its processes), which
    shifts every round alike (:func:`inferbench.measure.stats.net_interval`) — the baseline read before and after the
    rounds where both were (``idle_used``: :func:`interpolated`, the drift's shape in it), else the one before —; with
    several processes each one's own reading before the rounds is part of the spread between them, which the rounds
    measure, but the group's reading after them (all at once, one counter) and the drift's shape are shared: their
    part (``shared_w_se``) shifts every process alike. The gross figure leans on no baseline: its interval has no
    such part."""
    value = energy.get("net_joules_per_inference")
    per_round = {int(r): float(v) for r, v in (energy.get("per_round_net_j_per_inference") or {}).items()}
    if len(processes) > 1:  # each process's own reading's error is in the rounds' between-process part already; the
        # group's reading after the rounds (at once, one counter) and the drift's shape are shared by all: one shift
        used = [(b.get("idle_used") or {}, float(b.get("window_s") or 0.0)) for b in processes]
        known = inferences > 0  # without the shared part's error (no reading after): the rounds' parts alone
        shifts = [(sum(u["shared_w_se"] * window for u, window in used) / inferences,
                   min(math.inf if u["shared_df"] is None else u["shared_df"] for u, _ in used))] if known and all(
            u.get("shared_w_se") is not None for u, _ in used) else []
    else:
        idles = [(b.get("idle_used") or b.get("idle_baseline") or {}, float(b.get("window_s") or 0.0))
                 for b in processes]
        known = inferences > 0 and all(idle.get("idle_w_se") is not None for idle, _ in idles)  # (none: the rounds')
        shifts = [(idle["idle_w_se"] * window / inferences, math.inf if idle["idle_df"] is None else idle["idle_df"])
                  for idle, window in idles] if known else []
    ci = stats.net_interval(value, per_round, of_round, shifts) if value is not None and known else None
    return {**energy, "net_joules_per_inference_ci95": None if ci is None else list(ci)}
