"""The notebooks run top to bottom on the committed results, so they cannot rot."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("name", ["single_machine.ipynb", "cross_gpu.ipynb"])
def test_notebook_executes(name):
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
                   ).execute()
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 2
    for c in nb.cells:  # each figure once: the plot functions return a closed figure
        if c.cell_type == "code":
            assert sum("image/png" in o.get("data", {}) for o in c.get("outputs", [])) <= 1, c.source
    assert nb.cells[1].metadata.get("tags") == ["parameters"] and "RESULTS = None" in nb.cells[1].source
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
