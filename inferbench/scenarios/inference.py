"""The inference scenario: what one cell does in its child process, phase by phase.

Set-up, once per run (:class:`Session`):

1. **load**: the runner imports its framework and loads the artifact (``cold_start.load_s``).
2. **first call** on the timed batch (``cold_start.first_call_s``: compilation lands here).
3. **parity** on the 16 reference inputs and on the timed batch itself, against the Keras reference
   logits (``parity.checked_batch_sizes``), every call at the timed batch size (:func:`at_batch_size`);
   a framework with its own weights is checked for finite, input-dependent outputs instead and ranked
   nowhere.
4. **prepare** the timed batch afresh: a runner's state belongs to the timed batch again, and the
   host-to-device copy stays outside the window.
5. **device check**: on a GPU, the framework runs on the GPU that NVML measures.
6. **energy set-up**: sensor, GPU state, idle baseline; blocks too short for the energy counter are
   extended (the record's ``config.timing`` is the timing that ran, ``timing.extended_for_energy_from_s``
   says from what).
7. **warm-up** by count and time; then the host memory high-water mark is reset, so that
   ``memory.timed_peak_host_mb`` is the timed phase's alone.

Then, on the parent's command, once per round (:meth:`Session.block`):

8. **timed block** by :func:`inferbench.measure.timing.run_block`, the one loop; the parent runs the
   blocks of all the cells of a group in a fresh random order each round.

And at the end (:meth:`Session.finish`):

9. **collect**: statistics from the rounds, energy per inference, memory, runner details.

``finish`` returns a :class:`~inferbench.spec.CellOutcome`: the record's measurement blocks and the
timing configuration that ran.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..measure import stats
from ..measure.timing import run_block, warm_up
from ..measure.trackers import judge
from ..measure.trackers.energy import net_interval
from ..measure.trackers.machine import summarize as machine_summary
from ..measure.trackers.speed import summarize as speed_summary
from ..spec import CellJob, CellOutcome, TimingConfig
from .base import Emit, Loaded, Measured, timed_call, timing_for
from .gates import check_parity


class Session(Measured):
    """One cell, loaded and warmed up, measuring a block per round on command."""

    def __init__(self, job: CellJob, emit: Emit) -> None:
        self.job, self.emit = job, emit
        loaded = Loaded(job, emit)
        self.runner, self.batch, self.prepared, self.parity = loaded.runner, loaded.batch, loaded.prepared, \
            loaded.parity
        self.device_check, self.trackers, self.untracked = loaded.device_check, loaded.trackers, loaded.untracked
        self.timing = timing_for(job.config.timing, self.trackers)
        self.call, self.sync, self.region = timed_call(self.runner, self.batch, self.prepared, job.cell, loaded.post)
        self.cold_start, self.task = loaded.cold_start, loaded.task
        self.start_timed(loaded.rss_before)

    def tune(self, setting: dict[str, Any], round_index: int, block_s: float) -> dict[str, Any]:
        """One tuning block with a live ``setting`` (:meth:`Runner.apply`): its median latency, for the parent's
        choice (:mod:`inferbench.measure.tuning`)."""
        self.runner.apply(setting)
        config = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=block_s, min_iterations=3,
                              rounds=1)
        block = run_block(self.call, self.sync, config, round_index)
        return {"p50_ms": float(np.median(block.latencies_s)) * 1e3, "n": len(block.latencies_s)}

    def apply(self, setting: dict[str, Any], tuning: dict[str, Any]) -> dict[str, Any]:
        """Measure from now on with the chosen live ``setting``; what is timed is checked again (parity, when the
        setting is not the one checked at set-up) and warmed up afresh. ``tuning``: the record's tuning block."""
        self.runner.apply(setting)
        self.extra["tuning"] = tuning
        if setting and setting != tuning.get("default"):
            out = self.runner.call(self.prepared)
            self.runner.synchronize(out)
            self.parity = check_parity(self.job, self.runner, self.runner.to_numpy(out), self.emit)
        self.warmup = warm_up(self.call, self.sync, self.timing.config)
        return {"applied": setting, "judged": self.judged}


def merge(outcomes: list[CellOutcome], batch_size: int) -> CellOutcome:
    """One cell's outcome from its worker processes' (each measured some of the rounds): the raw latencies
    together, their statistics with the process of each round, throughput over every window, energy and the
    machine's state over every block; parity failed if any process's did; the rest from the first process."""
    if len(outcomes) == 1:
        return outcomes[0]
    first = outcomes[0].blocks
    blocks = sorted(({**b, "process": i} for i, o in enumerate(outcomes) for b in o.blocks["timing"]["blocks"]),
                    key=lambda b: b["round"])
    processes = {b["round"]: b["process"] for b in blocks}
    samples = sorted(((r, x) for o in outcomes for r, x in zip(o.blocks["raw_rounds"], o.blocks["raw_latencies_ms"])),
                     key=lambda rx: rx[0])  # sorted is stable: each round keeps its order
    rounds, latencies = [r for r, _ in samples], [x for _, x in samples]
    window = sum(o.blocks["timing"]["window_s"] for o in outcomes)
    parity = next((o.blocks["parity"] for o in outcomes if o.blocks["parity"].get("status") == "failed"),
                  first["parity"])
    memory = {k: max((o.blocks["memory"].get(k) for o in outcomes if isinstance(o.blocks["memory"].get(k),
                                                                                (int, float))), default=v)
              for k, v in first["memory"].items()}
    merged = {**first, "parity": parity, "memory": memory, "raw_latencies_ms": latencies, "raw_rounds": rounds,
              "latency_ms": stats.summarize(latencies, rounds, processes),
              "throughput_per_s": len(latencies) * batch_size / window if window > 0 else float("nan"),
              "timing": {**first["timing"], "blocks": blocks, "window_s": window, "processes": len(outcomes),
                         "process_of_round": "round mod processes"},
              "energy": _merge_energy([o.blocks["energy"] for o in outcomes], processes, len(latencies) * batch_size,
                                      window),
              "validity": judge([o.blocks["validity"] for o in outcomes if o.blocks.get("validity")])}
    states = [o.blocks["machine_state"] for o in outcomes if o.blocks.get("machine_state")]
    if len(states) == len(outcomes) and all("threads" in st for st in states):
        merged["machine_state"] = {**states[0], **{k: v for k, v in machine_summary(
            [b for st in states for b in st["blocks"]], states[0]["threads"], states[0]["max_other_load"]).items()
            if k != "validity"}}
        if all(st.get("speed") for st in states):
            merged["machine_state"]["speed"] = speed_summary([b for st in states for b in st["speed"]["blocks"]])
    return CellOutcome(timing=outcomes[0].timing, blocks=merged)


def _merge_energy(blocks: list[dict[str, Any]], processes: dict[int, int], inferences: int,
                  window: float) -> dict[str, Any]:
    """The processes' energy blocks as one: energies and windows add up, peaks take the maximum; per inference
    with its interval from the per-round figures (rounds and processes)."""
    if not all(b.get("available") for b in blocks):
        return next(b for b in blocks if not b.get("available"))
    out = dict(blocks[0])
    for key in ("gross_j", "net_j"):
        values = [b.get(key) for b in blocks]
        out[key] = None if any(v is None for v in values) else math.fsum(float(v) for v in values if v is not None)
    peaks = [b["peak_power_w"] for b in blocks if b.get("peak_power_w") is not None]
    per_round = {int(r): v for b in blocks for r, v in (b.get("per_round_j_per_inference") or {}).items()}
    per_round_net = {int(r): v for b in blocks for r, v in (b.get("per_round_net_j_per_inference") or {}).items()}
    out.update(window_s=window, peak_power_w=max(peaks) if peaks else None, per_round_j_per_inference=per_round,
               per_round_net_j_per_inference=per_round_net,
               mean_power_w=out["gross_j"] / window if out["gross_j"] is not None and window > 0 else None,
               joules_per_inference=out["gross_j"] / inferences if out["gross_j"] is not None else None,
               net_joules_per_inference=out["net_j"] / inferences if out["net_j"] is not None else None)
    if out["joules_per_inference"]:
        ci = stats.per_round_interval(out["joules_per_inference"], per_round, processes)
        out["joules_per_inference_ci95"] = None if ci is None else list(ci)
        out["ci_method"] = None if ci is None else stats.CI_METHOD + (  # as latency's: an assumed part said
            stats.ASSUMED if stats.assumed_part(per_round, processes) else "")

    return net_interval(out, blocks, inferences, processes)  # each process's own baseline


def finalize_group(outcomes: list[CellOutcome | None]) -> list[CellOutcome | None]:
    """The cells of a group, each with the between-process part of its intervals shrunk toward the group's pooled
    value (:func:`inferbench.measure.stats.shrink_between`: one cell's two or three processes measure it poorly on
    their own, and the runtimes of a group may differ in it)."""
    fits = []
    for o in outcomes:
        spread = (o.blocks.get("latency_ms") or {}).get("spread") if o is not None else None
        fits.append(None if not spread else stats.Spread(**{k: spread[k] for k in (
            "rounds", "processes", "within_var", "within_df", "between_var", "between_df", "between_raw")}))
    shrunk = stats.shrink_between(fits)
    if not shrunk or shrunk[0].group_var is None:
        return outcomes
    out: list[CellOutcome | None] = []
    for o, own in zip(outcomes, shrunk):
        if o is None or not (o.blocks.get("latency_ms") or {}).get("spread"):
            out.append(o)
            continue
        b = o.blocks
        processes = {blk["round"]: blk.get("process", 0) for blk in b["timing"]["blocks"]}
        latency = stats.summarize(b["raw_latencies_ms"], b["raw_rounds"], processes, (own.var, int(own.df)),
                                  own=own.weight > 0)  # moderated from its own fit: counted as its own
        out.append(CellOutcome(timing=o.timing, blocks={**b, "latency_ms": {**latency, "spread": {
            **latency["spread"], "pooled_cells": sum(f is not None for f in fits), "group_between_var": own.group_var,
            "group_between_df": own.group_df, "own_weight": own.weight, "prior_df": own.prior_df,
            "heterogeneous": own.heterogeneous}}}))
    return out


def run(job: CellJob, emit: Emit) -> CellOutcome:
    """One cell alone, in this process: set-up, every round's block back to back, collect (for tests
    and benchmarks; a run interleaves the blocks of its cells, see :mod:`inferbench.execution.rounds`)."""
    session = Session(job, emit)
    for r in range(session.timing.config.rounds):
        session.block(r)
    return session.finish()


