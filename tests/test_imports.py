"""Every name imported from inferbench resolves: in the package, the tests, benchmarks/ and the notebooks, at module
level and inside functions alike. A moved name once broke two benchmark scripts unnoticed (they imported from a module
that no longer had it): a script that is not run by a test is read here instead."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sources() -> list[tuple[str, str]]:
    """(where, Python source) for every .py file of the package, tests and benchmarks, and every notebook's code."""
    out = [(str(p.relative_to(ROOT)), p.read_text()) for folder in ("inferbench", "tests", "benchmarks")
           for p in sorted((ROOT / folder).rglob("*.py"))]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        out.append((str(nb.relative_to(ROOT)), "\n".join(line for line in code.splitlines()
                                                       if not line.lstrip().startswith(("%", "!")))))
    return out


def _package_of(where: str) -> list[str]:
    parts = list(Path(where).with_suffix("").parts)
    return parts if parts[-1] == "__init__" else parts[:-1]


def _imports(where: str, source: str) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) for each inferbench import in ``source`` (relative ones resolved)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                package = [p for p in _package_of(where) if p != "__init__"]
                module = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "inferbench":
                found += [(node.lineno, module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "inferbench"]
    return found


def test_every_inferbench_import_resolves():
    missing = []
    for where, source in _sources():
        for line, module, name in _imports(where, source):
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                missing.append(f"{where}:{line}: {module}: {exc}")
                continue
            if name is not None and name != "*" and not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"{where}:{line}: {module} has no {name}")
    assert not missing, "\n".join(missing)


#: What notebooks and benchmark scripts may import of inferbench: the public API and its two analysis modules.
PUBLIC = ("inferbench", "inferbench.api", "inferbench.analysis.frames", "inferbench.analysis.plots")


def test_notebooks_and_scripts_use_the_public_api():
    """The notebooks and benchmarks/ import inferbench through its public API only (twenty internal modules were
    imported before it existed); a script that studies an internal piece says so at its top ("Looks inside: ..."),
    and only such a script imports more."""
    reached = []
    for where, source in _sources():
        if not where.startswith(("notebooks/", "benchmarks/")):
            continue
        inside = "Looks inside:" in (ast.get_docstring(ast.parse(source)) or "") if where.endswith(".py") else False
        for line, module, name in _imports(where, source):
            target = f"{module}.{name}" if name else module
            if module not in PUBLIC and target not in PUBLIC and not inside:
                reached.append(f"{where}:{line}: {module}")
    assert not reached, "\n".join(reached)
