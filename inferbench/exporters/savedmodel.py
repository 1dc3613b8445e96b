"""TF SavedModel with a ``serve`` endpoint (dynamic batch), exported from the ``.keras`` artifact."""

from __future__ import annotations

import contextlib
import io
from typing import Any

from ..base.size import hw
from ..registry.artifacts import ExportContext
from ..registry.keras_models import load_keras


def export(ctx: ExportContext) -> dict[str, Any]:
    model = load_keras(ctx.path("keras"))
    with contextlib.redirect_stdout(io.StringIO()):  # Keras prints the endpoint listing
        model.export(ctx.folder / "savedmodel", format="tf_saved_model")
    return {
        "paths": ["savedmodel"],
        "input_signature": {"shape": [None, *hw(ctx.resolution), 3], "dtype": "float32",
                            "layout": "NHWC", "endpoint": "serve"},
        "notes": [],
    }
