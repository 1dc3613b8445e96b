"""Progress on stderr for a run, a sweep or the zoo: lasting lines, a status line on a terminal, an ETA."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: When stderr is not a terminal, a run is never silent longer than this: the current phase is printed again.
HEARTBEAT_S = 30.0


class Progress:
    """Progress on stderr. Lasting lines (a cell's result, an export done or failed, anything FAILED) are
    printed as they come; the passing phases (loading, warm-up, round 3/8) update one status line in
    place on a terminal, and are left out when stderr is piped or a file (``verbosity`` 1, ``-v``, prints
    them as lines, export notes too; -1, ``-q``, prints failures only) — except for a **heartbeat**: piped or
    in a file, when nothing was printed for :data:`HEARTBEAT_S`, the current phase is printed as a line (a CI log
    or ``| tee`` never looks hung). Every line starts with the bar, units done/total (exports and cells), elapsed
    time and an ETA: the cells left at the time measuring has taken per cell so far, counting every finished round
    of the group in progress (:meth:`measuring`, :meth:`partial`), so it converges within the first group instead of
    extrapolating the exports' pace to the cells."""

    def __init__(self, total: int, stream: Any = None, verbosity: int = 0,
                 clock: Callable[[], float] = time.monotonic, heartbeat: bool = True, deadline: Any = None,
                 planned_s: float | None = None) -> None:
        self.total, self.done, self.stream, self.verbosity = total, 0, stream or sys.stderr, verbosity
        self.planned_s = planned_s  # the plan's estimate: the ETA until the first round has ended
        self.clock = clock
        self.started = self.last_printed = clock()
        self.base = 0  # units already done when this invocation started (a resumed sweep)
        self.cells_left: float | None = None  # cells to measure in this invocation (set by measuring())
        self.measured = 0.0  # cells measured since, the group in progress counted by its finished rounds
        self.measure_started: float | None = None
        self._group = 0.0  # the group in progress: cells' worth of its finished rounds
        self._groups = 0  # groups this invocation measures
        self._group_started: float | None = None
        self._rounds_started: float | None = None  # when the group in progress began its rounds
        self._group_cells: int | None = None  # the group in progress's cells, where said
        self._setups: list[float] = []  # each group's time before its first round (loading, parity, tuning)
        self._round_s = 0.0  # time in the rounds of the groups done
        # the ETA as last estimated, at a phase's end (when work was done), and when: between two it counts down with
        # the clock (re-estimated at every reading, it grew by the cells left over the cells done each second)
        self._estimate: tuple[float, float] | None = None
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) and verbosity == 0
        self._status = False  # a status line is showing (terminal only)
        self.phase = ("", "starting")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beating = not self.live and verbosity == 0  # piped or a file, at the default verbosity
        # the heartbeat's thread starts with the first phase (a Progress that never says anything leaves none) and
        # stops at close(): a Progress left open must never print its growing elapsed time into later output
        self._heartbeat = heartbeat and self._beating
        self._thread: threading.Thread | None = None
        # --time-budget (a Deadline): the moment it passes is said in a line of its own, on a terminal too, by a
        # timer on the wall clock (never a reading of the deadline's own clock, which a test may drive)
        self._budget_timer: threading.Timer | None = None
        if deadline is not None:
            self._budget_timer = threading.Timer(max(0.0, deadline.wall_left()), self._budget_passed, (deadline,))
            self._budget_timer.daemon = True
            self._budget_timer.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_heartbeat(self) -> None:
        if self._heartbeat and self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._beat, name="inferbench-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(min(5.0, HEARTBEAT_S / 2)):
            self.tick()

    def tick(self) -> None:
        """The heartbeat: the current phase as a line, when nothing was printed for :data:`HEARTBEAT_S`."""
        with self._lock:
            if self._beating and not self._stop.is_set() and self.clock() - self.last_printed >= HEARTBEAT_S:
                self._print(self._line(*self.phase) + "  (still running)")

    def _budget_passed(self, deadline: Any) -> None:
        """--time-budget passed, while the run goes on: said once, at that moment, as a lasting line."""
        with self._lock:
            if self._stop.is_set():
                return
            self._clear_status()  # a terminal's status line gives way to the lasting line
            self._print(self._line(*self.phase) + f"  {deadline.passed_line()}")

    def _clear_status(self) -> None:
        """Take a terminal's status line away (a lasting line follows, or the run ends)."""
        if self._status:
            print("\r\x1b[K", end="", file=self.stream, flush=True)
            self._status = False

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
        self.last_printed = self.clock()

    def measuring(self, cells_left: int, groups_left: int, group_cells: int | None = None) -> None:
        """A group (of ``group_cells`` cells, where known) begins; the first call says how many cells and groups this
        invocation measures."""
        self._start_heartbeat()
        now = self.clock()
        if self.measure_started is None:
            self.measure_started, self.cells_left, self._groups = now, float(cells_left), groups_left
        self._group_started, self._rounds_started, self._group = now, None, 0.0
        self._group_cells = group_cells
        self._reestimate()

    def partial(self, cells: float) -> None:
        """The group in progress has measured ``cells`` cells' worth of rounds (its cells x the share of rounds
        done; 0 when its rounds begin: what came before — loading, parity, tuning — is its set-up)."""
        if self._rounds_started is None and self.measure_started is not None:
            self._rounds_started = self.clock()
            started = self._group_started if self._group_started is not None else self._rounds_started
            self._setups.append(self._rounds_started - started)
        self._group = cells
        self._reestimate()

    def group_done(self, cells: int, left_out: int = 0) -> None:
        """The group in progress ended: its ``cells`` are measured, but ``left_out`` of them (--time-budget passed
        before they were loaded), which no later phase measures either: neither counted as done nor as left."""
        now = self.clock()
        if self._rounds_started is not None:
            self._round_s += now - self._rounds_started
        else:  # no round ran (every cell refused or failed): all of it was set-up
            self._setups.append(now - (self._group_started if self._group_started is not None else now))
        self.measured += cells - left_out
        if self.cells_left is not None:
            self.cells_left -= left_out
        self._group, self._rounds_started = 0.0, None
        self._reestimate()

    def _reestimate(self) -> None:
        """A phase ended: the ETA from the phases measured so far (:meth:`_estimated`), moved from the last one as the
        clock counted it down by at most the time since (down) or twice it (up): it never changes by more than twice
        the time the work since took (it said 10m58s, then 1m05s in the same second), and still catches up with a
        run that turns out slower or faster. Nothing left is said at once."""
        now = self.clock()
        left, last = self._estimated(now), self._estimate
        if left is not None and last is not None and left > 0:
            since = now - last[0]
            counted = max(0.0, last[1] - since)
            left = min(max(left, counted - since), counted + 2 * since)
        self._estimate = None if left is None else (now, left)  # one attribute: the heartbeat's thread reads it

    def eta_s(self) -> float | None:
        """Seconds left: the estimate made when a phase last ended (:meth:`_estimated`), counted down with the clock
        since (never below 0); None before the first round ends. It changes only as work is done: read twice in one
        second it says the same, where re-estimating at every reading made it grow while a round ran."""
        estimate = self._estimate
        if estimate is None and self.planned_s is not None:  # the plan's estimate, counted down
            estimate = (self.started, self.planned_s)
        return None if estimate is None else max(0.0, estimate[1] - (self.clock() - estimate[0]))

    def _estimated(self, now: float) -> float | None:
        """Seconds left at ``now``, from the phases measured so far: the cells left at the time per cell of the
        rounds, plus the groups not yet set up at the mean set-up time; None before the first round ends (the exports
        before it are no guide: one export's pace extrapolated to a sweep said 10m48s, the next second 5m11s)."""
        if self.measure_started is not None and self.cells_left is not None:
            done, setups = self.measured + self._group, list(self._setups)
            rounds_started, group_started = self._rounds_started, self._group_started
            if done <= 0 or not setups:
                return None
            round_s = self._round_s + (now - rounds_started if rounds_started is not None else 0.0)
            setup = sum(setups) / len(setups)
            in_setup = rounds_started is None and group_started is not None and done < self.cells_left
            pending = self._groups - len(setups) - (1 if in_setup else 0)
            current = max(0.0, setup - (now - group_started)) if in_setup and group_started is not None else 0.0
            later = max(0.0, self.cells_left - done)
            size = self._group_cells
            if rounds_started is not None and self._group > 0 and size:  # the group in progress at its own pace,
                # blended with the run's until half its rounds are done (one round's pace alone is noisy)
                left_here = max(0.0, min(later, size - self._group))
                own = min(1.0, 2 * self._group / size)
                current += left_here * (own * (now - rounds_started) / self._group + (1 - own) * round_s / done)
                later -= left_here
            return later * round_s / done + max(0, pending) * setup + current
        return None  # only exports so far: their pace says nothing of the cells' (it said 10m48s, then 5m11s)

    def phases(self) -> dict[str, Any]:
        """The phases measured so far, as :meth:`add_phases` takes them (a Ray node's, sent back with its records)."""
        return {"setups": list(self._setups), "round_s": self._round_s, "measured": self.measured}

    def add_phases(self, phases: dict[str, Any]) -> None:
        """Phases measured elsewhere (a group on a Ray node): what :meth:`group_s` estimates the next group from."""
        self._setups += [float(s) for s in phases.get("setups", ())]
        self._round_s += float(phases.get("round_s", 0.0))
        self.measured += float(phases.get("measured", 0.0))
        self._reestimate()

    def group_s(self, cells: int) -> float | None:
        """A group of ``cells`` cells' time from the phases measured so far (mean set-up plus the rounds' time per
        cell); None before a group has ended."""
        if not self._setups or self.measured <= 0:
            return None
        return sum(self._setups) / len(self._setups) + cells * self._round_s / self.measured

    def eta(self) -> str:
        left = self.eta_s()
        if left is None:
            return "ETA ?"
        work_left = self.measured < self.cells_left if self.cells_left is not None else self.done < self.total
        if left <= 0 and work_left:  # counted down to 0 with work left: how late, never a 0 that stays
            estimate = self._estimate or (self.started, self.planned_s or 0.0)
            late = self.clock() - estimate[0] - estimate[1]
            return f"ETA late {int(late // 60)}m{int(late % 60):02d}s"
        return f"ETA {int(left // 60)}m{int(left % 60):02d}s"

    def add(self, units: int) -> None:
        """More work than first counted (exports are counted as they are met)."""
        self.total += units

    def _line(self, label: str, text: str) -> str:
        width = 20
        # the bar moves with each round of the group in progress (its cells' share of rounds done), not only when a
        # group ends: a 4-cell group of 8 long rounds left it at the same place for minutes
        filled = int(width * min(self.total, self.done + self._group) / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        elapsed = self.clock() - self.started
        return f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s {self.eta():>10}  {label}  {text}"

    def say(self, label: str, text: str) -> None:
        """A passing phase: on the status line (terminal), as a line with -v, else only in the heartbeat."""
        self.phase = (label, text)
        self._start_heartbeat()
        if self.verbosity > 0:
            with self._lock:
                self._print(self._line(label, text))
        elif self.live:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            with self._lock:  # the budget's timer may print a lasting line from its thread
                print("\r\x1b[K" + self._line(label, text)[:width], end="", file=self.stream, flush=True)
                self._status = True

    def result(self, label: str, text: str, failure: bool = False) -> None:
        """A lasting line: a result, an export done, a failure (-q keeps failures only)."""
        self._start_heartbeat()
        if self.verbosity < 0 and not failure:
            return
        with self._lock:
            self._clear_status()
            self._print(self._line(label, text))

    def close(self) -> None:
        with self._lock:  # a budget line being printed ends first; none starts after
            self._stop.set()
        if self._budget_timer is not None:
            self._budget_timer.cancel()
            if self._budget_timer is not threading.current_thread():
                self._budget_timer.join()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._clear_status()
