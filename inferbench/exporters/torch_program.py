"""A ``torch.export`` program (a PyTorch model's, the user's ``.pt2`` file, an INT8 one): exported with a dynamic batch
and saved whole or not at all, and loaded with torch's weights-only guard: nothing in the file is unpickled as code."""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

from ..options import MAX_BATCH

#: torch reads this at every ``torch.load``: set, a tensor an archive says is pickled is read as weights only.
WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"


def export_dynamic(torch: Any, module: Any, example: Any) -> Any:
    """``module`` exported by ``torch.export`` on ``example`` (a batch of two at least: torch takes a batch of one for a
    constant 1) with its batch dimension dynamic, 1 to :data:`~inferbench.options.MAX_BATCH` (the command line's)."""
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    return torch.export.export(module, (example,), dynamic_shapes=({0: batch},))


def save(torch: Any, program: Any, out: Path) -> None:
    """``program`` saved into ``out``, whole or not at all (``torch.export.save`` wants the ``.pt2`` suffix)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.stem + ".part.pt2")
    torch.export.save(program, str(part))
    part.replace(out)


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
    """The ``torch.export.ExportedProgram`` saved in ``path``, read weights only (see :func:`load_program`); with
    torchvision's operators known where it is installed (a detector's program calls ``torchvision::nms``)."""
    import importlib.util

    import torch

    if importlib.util.find_spec("torchvision") is not None:
        import torchvision  # noqa: F401  (registers torchvision's operators before the program names them)

    before = os.environ.get(WEIGHTS_ONLY)
    os.environ[WEIGHTS_ONLY] = "1"
    try:
        return torch.export.load(str(path))
    finally:
        if before is None:
            del os.environ[WEIGHTS_ONLY]
        else:
            os.environ[WEIGHTS_ONLY] = before
