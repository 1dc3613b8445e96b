"""The post-processing phase: what runs after the call, the same code for every runtime (a detector's decoding and
suppression, :mod:`inferbench.tasks`), timed on its own on the host, on the timed batch's outputs as this runtime
computed them. Outside the timed call: the model's latency is the model's; this phase's is beside it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..registry.artifacts import REFERENCE_LOGITS, REFERENCE_OUTPUTS
from ..registry.models import get_model
from ..registry.outputs import named, packed, read_layout, unpacked
from ..registry.tasks import task, task_module
from ..spec import CellJob
from .gates import Emit

#: The phase is timed for at least this many calls and this many seconds, at most for the longer cap.
CALLS, SECONDS, CAP_CALLS, CAP_SECONDS = 20, 0.5, 1000, 5.0


def declared(job: CellJob) -> list[dict[str, Any]]:
    """The model's outputs as the record lists them: name, shape an image, kind."""
    folder = Path(job.artifact_dir)
    classes = int(np.load(folder / REFERENCE_LOGITS, mmap_mode="r").shape[1])
    return [o.said() for o in read_layout(folder / REFERENCE_OUTPUTS, classes)]


def function(job: CellJob) -> Callable[[Any], Any] | None:
    """The task's post-processing as one function of a runner's host outputs (each output by its name, in its shape
    an image: views, nothing copied; then post-processed: what ``--postprocess inside`` adds to every timed call);
    None where the task has none."""
    spec = get_model(job.cell.model)
    entry, module = task(spec.task), task_module(spec.task)
    if not entry.postprocess:
        return None
    outputs = read_layout(Path(job.artifact_dir) / REFERENCE_OUTPUTS)
    names = [o.name for o in outputs]

    def post(host: Any) -> Any:
        arrays = named(host, names)
        return module.postprocess({o.name: arrays[o.name].reshape(-1, *o.shape) for o in outputs}, outputs)

    return post


def timed(job: CellJob, host: Any, emit: Emit, parity: dict[str, Any]) -> dict[str, Any] | None:
    """The task's post-processing of the timed batch's outputs (``host``: as the runner gave them), called back to
    back: its median and quartiles in ms a batch, and what it kept (None where the task has none); not timed where the
    cell failed parity (its outputs may not even have the reference's shape), said so."""
    spec = get_model(job.cell.model)
    entry, module = task(spec.task), task_module(spec.task)
    if spec.graph_nms:  # nothing of inferbench's after the call: said, not timed
        return {"what": spec.graph_nms, "in_graph": True, "inside": True,
                "where": "inside the timed call: the model's own graph holds it, timed as it is (inferbench's shared "
                         "suppression does not run after it)"}
    if not entry.postprocess:
        return None
    if parity.get("status") == "failed":
        return {"what": entry.postprocess, "error": "not timed: the cell failed parity"}
    folder = Path(job.artifact_dir)
    outputs = read_layout(folder / REFERENCE_OUTPUTS)
    try:
        arrays = unpacked(packed(host, [o.name for o in outputs]), outputs)
    except ValueError as exc:  # outputs of another shape than the reference's
        return {"what": entry.postprocess, "error": f"not timed: {exc}"}
    emit("timing the post-processing")
    times: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        result = module.postprocess(arrays, outputs)
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if (len(times) >= CALLS and spent >= SECONDS) or len(times) >= CAP_CALLS or spent >= CAP_SECONDS:
            break
    q1, p50, q3 = (float(np.percentile(times, q)) * 1e3 for q in (25, 50, 75))
    inside = job.cell.options.postprocess == "inside"
    return {"what": entry.postprocess, "where": ("inside the timed call as well (--postprocess inside: its latency "
            "holds it), timed apart here too" if inside else "outside the timed call") + ": on the host, after the "
            "outputs are copied there, the same code for every runtime", "inside": inside, "ms_p50": p50,
            "ms_iqr": [q1, q3], "calls": len(times), "batch_size": job.cell.batch_size,
            "ms_per_image": p50 / job.cell.batch_size,
            "kept": [len(r["scores"]) for r in result] if result and all(isinstance(r, dict) and "scores" in r
                                                                          for r in result) else None}
