"""A saved ``torch.export`` program (a PyTorch model's, the user's ``.pt2`` file, an INT8 one) loaded with torch's
weights-only guard: nothing in the file is unpickled as code."""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

#: torch reads this at every ``torch.load``: set, a tensor an archive says is pickled is read as weights only.
WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"


def load_program(path: Path | str | None) -> Any:
    """A saved ``torch.export`` program (a PyTorch model's, the user's ``.pt2`` file, an INT8 one) as a callable
    module. Nothing in the file is unpickled as code: ``torch.export.load`` reads a weight its archive marks as
    pickled (and its example inputs) with torch's weights-only guard off, so a file planted in a shared cache could
    run code; torch's own switch forces weights only for the load. The module's ``eval()`` does nothing (torch's
    raises): a program is what it was exported as."""
    module = load_exported(path).module()
    module.eval = types.MethodType(lambda self, mode=True: self, module)
    return module


def load_exported(path: Path | str | None) -> Any:
    """The ``torch.export.ExportedProgram`` saved in ``path``, read weights only (see :func:`load_program`)."""
    import torch

    before = os.environ.get(WEIGHTS_ONLY)
    os.environ[WEIGHTS_ONLY] = "1"
    try:
        return torch.export.load(str(path))
    finally:
        if before is None:
            del os.environ[WEIGHTS_ONLY]
        else:
            os.environ[WEIGHTS_ONLY] = before
