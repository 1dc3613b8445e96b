"""Stands in for the ``reference`` exporter with the fake model (see fakes.py): the fake logits of
each timed batch."""

from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np
from fakes import WEIGHTS, _logits

from inferbench.registry.artifacts import timed_reference
from inferbench.registry.inputs import make_inputs
from inferbench.registry.models import get_model


def export(ctx: Any) -> dict[str, Any]:
    if os.environ.get("FAKE_EXPORT_LOG"):  # the process each export ran in, for the tests
        with open(os.environ["FAKE_EXPORT_LOG"], "a") as log:
            log.write(f"reference {os.getpid()}\n")
    if os.environ.get("FAKE_REFERENCE_FAILS"):
        raise RuntimeError("the fake reference export failed")
    marker = os.environ.get("FAKE_REFERENCE_KILLED_ONCE")  # killed (as for memory) the first time, then fine
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    weights = np.load(ctx.folder / WEIGHTS)["weights"]
    for bs in ctx.batch_sizes:
        batch = make_inputs(get_model(ctx.model), bs, ctx.resolution, ctx.seed + 3)
        np.save(ctx.folder / timed_reference(bs), _logits(weights, batch).astype(np.float32))
    return {"paths": [timed_reference(bs) for bs in ctx.batch_sizes], "batch_sizes": list(ctx.batch_sizes),
            "notes": []}
