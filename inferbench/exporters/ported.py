"""The Keras model's weights as NumPy arrays (``ported/keras_weights.npz``), for the torchvision twins
(:mod:`inferbench.registry.ports`): read here, in a TensorFlow process, and loaded into torch in the runner's own
process, so that TensorFlow and torch never share one."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..registry.artifacts import ExportContext
from ..registry.keras_models import load_keras
from ..registry.ports import keras_weights


def export(ctx: ExportContext) -> dict[str, Any]:
    model = load_keras(ctx.path("keras"))
    path = ctx.path("ported")
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **keras_weights(model))  # type: ignore[arg-type]  # numpy's stubs type **kwds as allow_pickle
    import keras

    return {"paths": ["ported"], "keras_backend": keras.backend.backend(),
            "notes": [f"read on Keras' {keras.backend.backend()} backend"]}
