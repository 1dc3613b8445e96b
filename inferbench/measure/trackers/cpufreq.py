"""The CPU's clock and heat during every timed block (a tracker, see :mod:`inferbench.measure.trackers`): the cores'
current frequency (``/sys/.../cpufreq/scaling_cur_freq``, else ``/proc/cpuinfo``'s ``cpu MHz``) against their rated
maximum, and the thermal-throttle events the kernel counts (Intel's ``thermal_throttle`` counters). Read just before
and just after each block, never inside it. Throttling for heat during a block makes the cell not valid: the
runtime was measured on a slower machine than the one it will run on. Written into ``machine_state`` beside the
machine tracker's figures."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import Contribution

SYS_CPU = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")


def _int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Clocks:
    """Where this machine tells its cores' clocks and throttling (sysfs; ``/proc/cpuinfo`` as a fallback)."""

    sys_cpu: Path = SYS_CPU
    cpuinfo: Path = CPUINFO

    def cpus(self) -> list[Path]:
        return sorted(p for p in self.sys_cpu.glob("cpu[0-9]*") if p.name[3:].isdigit())

    def mhz(self) -> tuple[list[float], str] | None:
        """Every core's current clock in MHz, and where it was read; None where nothing tells."""
        khz = [_int(c / "cpufreq" / "scaling_cur_freq") for c in self.cpus()]
        if khz and all(k is not None for k in khz):
            return [k / 1000 for k in khz if k is not None], "sysfs-scaling_cur_freq"
        try:
            found = re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", self.cpuinfo.read_text(), flags=re.M)
        except OSError:
            return None
        return ([float(v) for v in found], "proc-cpuinfo") if found else None

    def rated_mhz(self) -> float | None:
        khz = [_int(c / "cpufreq" / "cpuinfo_max_freq") for c in self.cpus()]
        known = [k for k in khz if k]
        return max(known) / 1000 if known else None

    def throttle_events(self) -> int | None:
        """Thermal-throttle events counted so far over every core (None where the kernel keeps no count)."""
        counts = [_int(c / "thermal_throttle" / "core_throttle_count") for c in self.cpus()]
        known = [n for n in counts if n is not None]
        return sum(known) if known else None


@dataclass
class ClockMonitor:
    clocks: Clocks

    def start(self) -> None:
        self.first, self.events = self.clocks.mhz(), self.clocks.throttle_events()

    def stop(self, window_s: float) -> dict[str, Any]:
        last, events = self.clocks.mhz(), self.clocks.throttle_events()
        readings = [v for r in (self.first, last) if r for v in r[0]]
        return {"mhz_min": min(readings) if readings else None,
                "mhz_mean": sum(readings) / len(readings) if readings else None,
                "throttle_events": None if events is None or self.events is None else events - self.events}


class ClockTracker:
    name = "cpu_clock"
    provides = ("machine_state",)
    min_block_s = 0.0

    def __init__(self, clocks: Clocks | None = None) -> None:
        self.clocks = clocks or Clocks()
        found = self.clocks.mhz()
        self.source = found[1] if found else None

    @classmethod
    def open(cls, job: Any) -> ClockTracker | None:
        tracker = cls()
        return tracker if tracker.source or tracker.clocks.throttle_events() is not None else None

    def setup(self, emit: Callable[[str], None]) -> None:
        pass

    def monitor(self) -> ClockMonitor:
        return ClockMonitor(self.clocks)

    def finish(self, done: Any) -> Any:
        blocks = [b.monitors[self.name] for b in done.blocks]
        lows = [b["mhz_min"] for b in blocks if b["mhz_min"] is not None]
        means = [b["mhz_mean"] for b in blocks if b["mhz_mean"] is not None]
        events = [b["throttle_events"] for b in blocks if b["throttle_events"] is not None]
        clock = {"mhz_min": min(lows) if lows else None, "mhz_mean": sum(means) / len(means) if means else None,
                 "mhz_rated": self.clocks.rated_mhz(), "source": self.source,
                 "throttle_events": sum(events) if events else None}
        if events and sum(events) > 0:
            verdict = {"valid": False, "reason": f"the CPU throttled for heat {sum(events)} time(s) during the "
                                                 "blocks"}
        else:
            verdict = None  # the clock alone says nothing against the cell: turbo comes and goes
        return Contribution({"machine_state": {"cpu_clock": clock}}, verdict)
