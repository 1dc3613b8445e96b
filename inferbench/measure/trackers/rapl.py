"""CPU package energy from Linux powercap (``intel-rapl``; AMD's packages appear there too), every package of the
machine summed: a tracker of the CPU's energy (see :mod:`inferbench.measure.trackers`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .energy import EnergyTracker

if TYPE_CHECKING:  # pragma: no cover
    from ...spec import CellJob

POWERCAP = Path("/sys/class/powercap")


class RaplSensor:
    """The energy of every CPU package (``intel-rapl:0``, ``intel-rapl:1``, ...), summed. Each package's counter (µJ)
    wraps at its own ``max_energy_range_uj``; the sensor keeps a running total that does not wrap, from each
    package's change since the previous reading (read before and after every block, far more often than the
    counters wrap: 262 kJ is 43 minutes at 100 W)."""

    name = "RAPL"

    def __init__(self, zones: list[Path]) -> None:
        if not zones:
            raise ValueError("no RAPL package zone")
        self.zones = zones
        self._wraps = [int((z / "max_energy_range_uj").read_text()) / 1e6 for z in zones]
        self._last = self._read()  # fails now if unreadable
        self._total = 0.0

    @classmethod
    def find(cls, root: Path = POWERCAP) -> tuple[RaplSensor | None, str]:
        zones = sorted(root.glob("intel-rapl:[0-9]*")) if root.is_dir() else []
        zones = [z for z in zones if ":" not in z.name.split("intel-rapl:", 1)[1]]  # packages, not their sub-zones
        if not zones:
            return None, f"no RAPL package zone under {root} (virtual machine or non-Intel/AMD kernel driver)"
        try:
            return cls(zones), ""
        except (OSError, ValueError) as exc:
            return None, f"RAPL counter not readable ({exc}); reading it may need root"

    def _read(self) -> list[float]:
        return [int((z / "energy_uj").read_text()) / 1e6 for z in self.zones]

    @property
    def packages(self) -> int:
        return len(self.zones)

    def energy_j(self) -> float | None:
        now = self._read()
        for i, (before, after) in enumerate(zip(self._last, now)):
            self._total += after - before if after >= before else self._wraps[i] - before + after
        self._last = now
        return self._total

    def power_w(self) -> float | None:
        return None  # RAPL has no instantaneous power: the counter is the measurement

    @property
    def wrap_j(self) -> float | None:
        return None  # the running total does not wrap


class RaplTracker(EnergyTracker):
    """The CPU's energy on a CPU cell: every package's RAPL counter around each block."""

    @classmethod
    def open(cls, job: CellJob) -> RaplTracker | str | None:
        if job.config.device.kind != "cpu":
            return None
        sensor, why = RaplSensor.find()
        return why if sensor is None else cls(sensor, job.idle_seconds)
