"""Reference logits of the timed batches: the Keras model's outputs on the very batch each batch size
times (seed + 3), so that parity is checked on what is timed too, not only on the 16 reference inputs
(XLA, oneDNN, OpenVINO and TensorRT compile a program per batch shape)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..models import get_model, make_inputs
from . import ExportContext, timed_reference


def export(ctx: ExportContext) -> dict[str, Any]:
    import keras

    spec = get_model(ctx.model)
    model = keras.saving.load_model(ctx.path("keras"), compile=False)
    for bs in ctx.batch_sizes:
        batch = make_inputs(spec, bs, ctx.resolution, ctx.seed + 3)
        logits = np.concatenate([np.asarray(model(batch[i:i + 64], training=False), dtype=np.float32)
                                 for i in range(0, bs, 64)])
        np.save(ctx.folder / timed_reference(bs), logits)
    return {"paths": [timed_reference(bs) for bs in ctx.batch_sizes], "batch_sizes": list(ctx.batch_sizes),
            "notes": []}
