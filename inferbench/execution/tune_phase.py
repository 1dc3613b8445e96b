"""A group's tuning phase, in the parent: a worker for each of a tuned cell's load-time settings beside its own,
every (worker, live setting) pair a short block per tuning round, all of the group's candidates in a fresh random
order each round; :func:`inferbench.measure.tuning.choose` picks the setting, a switch is confirmed in fresh rounds
of the two alone, the chosen worker measures the cell with it and the others are closed."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from typing import Any

from ..base.codec import plain
from ..measure.tuning import Candidate, choose, confirm, setting_digest
from ..registry.frameworks import load_runner
from . import handle
from .handle import SETTLE_S, Worker, group_label

#: Rounds of the tuning phase: the fewest that give a paired interval.
TUNE_ROUNDS = 3


#: A tuned cell's tuning reason when the budget left no room for its tuning phase.
NOT_TUNED = ("not tuned: too little of --time-budget was left for its tuning phase; inferbench's own setting is "
             "measured")


def grid(cell: Worker) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A cell's runner's tuning grid on this machine: its load-time settings and its live ones, the default first."""
    runner: Any = load_runner(cell.job.framework)
    return runner.tuning_grid(cell.job.config.threads, cell.job.config.device.kind)


def tune(cells: list[tuple[Worker, dict[str, str]]], order: random.Random, progress: Callable[[str, str], None],
          note: Callable[[str, str], None], timeout_s: float | None, spawned: list[Worker],
          room: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
    """The tuning phase of ``cells`` (with their workers' environments): candidates measured in interleaved rounds,
    each cell then measured by the worker of its chosen setting, with its chosen live setting. Without ``room`` for it
    (--time-budget), no tuning worker is started: each cell is measured at inferbench's own setting, and its
    record's tuning block says why."""
    if not cells:
        return
    if not room:
        for cell, _ in cells:
            load_grid, live_grid = grid(cell)
            decision = {**choose([Candidate(load_grid[0], live_grid[0])]), "reason": NOT_TUNED, "seconds": 0.0,
                        "rounds": 0, "block_s": 0.0}
            if _apply(cell, decision, timeout_s):
                note(cell.job.cell.label, NOT_TUNED)
        return
    before = {id(cell): cell.used_s for cell, _ in cells}  # the tuning's own time: its workers' from here on
    plans = [_candidates(cell, env, progress, timeout_s, spawned, clock) for cell, env in cells]
    _tuning_rounds([(candidates, block_s) for _, _, candidates, block_s in plans], order, 0, timeout_s,
                   lambda r: progress(group_label([c.job for c, _ in cells]),
                                      f"tuning round {r + 1}/{TUNE_ROUNDS} done"))
    decisions = [choose([cand for _, cand in candidates]) for _, _, candidates, _ in plans]
    _confirm(plans, decisions, order, progress, timeout_s)
    for (cell, workers, candidates, block_s), decision in zip(plans, decisions):
        chosen = next((w for w, cand in candidates if cand.load == decision["chosen_load"] and w.result is None), cell)
        seconds = sum(w.used_s for w in workers) - before[id(cell)]
        _adopt(cell, chosen, workers)
        if cell.result is not None:
            continue
        decision.update(seconds=seconds, rounds=TUNE_ROUNDS, block_s=block_s)
        if _apply(cell, decision, timeout_s):
            note(cell.job.cell.label, f"tuned in {decision['seconds']:.0f} s: " + (
                "inferbench's own setting kept" if decision["is_default"] else
                ", ".join(f"{k}={v}" for k, v in decision["chosen"].items())) + f" ({decision['reason']})")


def _candidates(cell: Worker, env: dict[str, str], progress: Callable[[str, str], None], timeout_s: float | None,
                spawned: list[Worker], clock: Callable[[], float],
                ) -> tuple[Worker, list[Worker], list[tuple[Worker, Candidate]], float]:
    """A cell's tuning candidates: a worker of its own for each load-time setting beside the cell's (those that
    failed to start closed), every live setting on each; with the block length its tuning budget gives each."""
    load_grid, live_grid = grid(cell)
    workers = [cell]
    for setting in load_grid[1:]:
        job = dataclasses.replace(cell.job, setting=setting)
        extra = handle.start(job, env, progress, timeout_s, f" ({', '.join(f'{k}={v}' for k, v in setting.items())})",
                       clock)
        spawned.append(extra)
        if extra.result is None:
            workers.append(extra)
        else:
            extra.child.close()
    candidates = [(w, Candidate(w.job.setting, live)) for w in workers for live in live_grid]
    return cell, workers, candidates, max(0.05, cell.job.config.tune_budget_s / (TUNE_ROUNDS * len(candidates)))


def _tuning_rounds(plans: list[tuple[list[tuple[Worker, Candidate]], float]], order: random.Random, first: int,
                   timeout_s: float | None, done: Callable[[int], None]) -> None:
    """:data:`TUNE_ROUNDS` rounds of a block for every (worker, candidate) of ``plans`` (each with its block length),
    in a fresh random order per round; each block's median kept on its candidate. ``first``: the first round's index
    (the confirmation's follow the tuning's); ``done(r)`` after each round."""
    for r in range(TUNE_ROUNDS):
        blocks = [(w, cand, block_s) for candidates, block_s in plans for w, cand in candidates]
        order.shuffle(blocks)
        for worker, cand, block_s in blocks:
            if worker.result is not None:
                continue
            time.sleep(SETTLE_S)
            worker.child.send({"tune": {"setting": cand.live, "round": first + r, "block_s": block_s}})
            reply = handle.await_reply(worker, "tune", timeout_s)
            if reply is not None:
                cand.medians_ms[r] = float(reply["tune"]["p50_ms"])
        done(r)


def _adopt(cell: Worker, chosen: Worker, workers: list[Worker]) -> None:
    """The cell goes on in the worker of its chosen load-time setting; the tuning's other workers are closed."""
    if chosen is not cell:
        cell.child.close()
        cell.child, cell.job = chosen.child, chosen.job
        cell.setup_s = chosen.setup_s if chosen.setup_s is not None else cell.setup_s  # its next process's
        cell.judged = chosen.judged
        cell.used_s, cell.result = cell.used_s + chosen.used_s, None
    for worker in workers[1:]:
        if worker is not chosen:
            worker.child.close()


def _apply(cell: Worker, decision: dict[str, Any], timeout_s: float | None) -> bool:
    """The tuning's decision (with its setting's digest) kept on the cell and its live setting applied in its
    worker; False where the worker ended."""
    decision["digest"] = setting_digest(decision["chosen"])
    cell.tuning = plain(decision)
    cell.child.send({"apply": {"setting": decision["chosen_live"], "tuning": cell.tuning}})
    reply = handle.await_reply(cell, "apply", timeout_s)
    if reply is not None:  # judged again where the setting changed what is timed
        cell.judged = reply["apply"].get("judged", cell.judged)
    return reply is not None


def _confirm(plans: list[Any], decisions: list[dict[str, Any]], order: random.Random,
             progress: Callable[[str, str], None], timeout_s: float | None) -> None:
    """Fresh rounds for each cell whose tuning switched: its chosen setting and its default alone, interleaved as
    the tuning's; each decision confirmed or undone on them (:func:`inferbench.measure.tuning.confirm`), in place."""
    pairs: list[tuple[int, list[tuple[Worker, Candidate]], float]] = []
    for i, ((_, _, candidates, block_s), decision) in enumerate(zip(plans, decisions)):
        if decision["is_default"]:
            continue
        default = candidates[0]
        chosen = next(c for c in candidates if (c[1].load, c[1].live) == (decision["chosen_load"],
                                                                          decision["chosen_live"]))
        pairs.append((i, [(w, Candidate(c.load, c.live)) for w, c in (default, chosen)], block_s))
    if not pairs:
        return
    _tuning_rounds([(pair, block_s) for _, pair, block_s in pairs], order, TUNE_ROUNDS, timeout_s,
                   lambda r: progress(group_label([plans[i][0].job for i, _, _ in pairs]),
                                      f"confirming round {r + 1}/{TUNE_ROUNDS} done"))
    for i, pair, _ in pairs:
        (_, default), (_, chosen) = pair
        decisions[i] = confirm(decisions[i], chosen, default)
