"""The house's rule (docs/architecture.md): each module belongs to one layer and imports only from its own layer or
those below it, counting imports inside functions; so there is no import circle either. This test reads every
module's imports and fails on an arrow that points up."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "inferbench"
#: Lowest first. The frameworks' side (exporters, runners, scenarios) is one layer: an exporter may use a runner.
LAYERS = ("base", "registry", ("spec", "options"), ("measure", "tasks"), ("exporters", "runners", "scenarios"),
          "records", ("analysis", "timeline"), "execution", "cli")
RANK = {name: i for i, names in enumerate(LAYERS) for name in ((names,) if isinstance(names, str) else names)}
COMMANDS = len(LAYERS)  # run, sweep, zoo, report, compare, selftest, commands, __main__: the top


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return -1  # inferbench itself: the version, nothing else
    return RANK.get(parts[1], COMMANDS)


def _imports() -> dict[str, set[str]]:
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("inferbench")):
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                # a submodule named in the import is the target, else the module the names come from
                targets = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules] or [base]
                found.update(t for t in targets if t in modules and t != name)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules and a.name != name)
        edges[name] = found
    return edges


def test_no_module_imports_a_layer_above_its_own():
    up = sorted(f"{a} -> {b}" for a, targets in _imports().items() for b in targets if _layer(b) > _layer(a))
    assert not up, "imports pointing up a layer:\n" + "\n".join(up)


def test_there_is_no_import_circle():
    edges = _imports()
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in edges[node]:
            if seen.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt):] + [node, nxt]))
            if nxt not in seen:
                visit(nxt, path + [node])
        seen[node] = 2

    for module in edges:
        if module not in seen:
            visit(module, [])


def test_every_module_sits_in_a_layer_or_is_a_command():
    commands = {m for m in _imports() if _layer(m) == COMMANDS}
    assert commands == {f"inferbench.{c}" for c in ("run", "sweep", "zoo", "report", "compare", "selftest",
                                                      "commands", "__main__", "api", "history")}, commands


def test_code_outside_the_scenarios_asks_the_scenario_entry_never_the_name():
    """A scenario declares what the rest of the code asks of it (registry/scenarios.py's Scenario); a branch on a
    scenario's name outside scenarios/ is what made the training scenario touch 27 files. The issue's own search
    found 31; the ones left are checks that a name is a scenario and that a plan's cells share its scenario."""
    import re

    pattern = re.compile(r'scenario(\])? ?(==|!=|in|not in) |in SERVING|== "train"|!= "inference"|== "inference"'
                         r'|== "server"|!= "train"|!= "server"')
    found = [f"{p.relative_to(PACKAGE)}:{i}" for p in PACKAGE.rglob("*.py")
             if p.relative_to(PACKAGE).parts[0] != "scenarios" and p.name != "scenarios.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert len(found) <= 3, found


def test_every_test_the_reliability_guarantees_name_exists():
    """docs/reliability.md lists each guarantee with the tests that hold it: a renamed or removed test leaves a
    guarantee that nothing checks (one such name had outlived its test by two rounds)."""
    import re

    docs = (PACKAGE.parent / "docs" / "reliability.md").read_text()
    tests = "".join(p.read_text() for p in (PACKAGE.parent / "tests").glob("*.py"))
    named = set(re.findall(r"`(test_[a-z0-9_]+)`", docs))
    assert len(named) > 40 and not [n for n in sorted(named) if f"def {n}(" not in tests]


def test_the_architecture_tree_names_every_module_and_nothing_that_is_gone():
    """docs/architecture.md's tree is where a newcomer finds a module: it missed serving, training, Ray and the
    budget for a round. Every module of the package (and every script in benchmarks/) is named under its folder,
    and every name there is a module that exists."""
    import re

    docs = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    tree = docs[docs.index("```\ninferbench/\n") + 4:]
    tree = tree[: tree.index("```")]
    entries: dict[str, str] = {}
    folder = ""
    for line in tree.splitlines():
        head = re.match(r"^ {0,2}(\S+/)\s", line + " ")
        if head:
            folder = head.group(1)
            entries[folder] = line[head.end():]
        elif line.startswith(" ") and folder:
            entries[folder] += " " + line
        else:
            folder = ""
            entries.setdefault("", "")
            entries[""] += " " + line
    words = {f: set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) for f, text in entries.items()}
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.name in ("__init__.py", "__main__.py"):
            continue
        if len(rel.parts) == 1:
            if rel.name not in tree:
                missing.append(str(rel))
            continue
        if rel.stem not in words.get(rel.parts[0] + "/", set()):
            missing.append(str(rel))
    scripts = PACKAGE.parent / "benchmarks"
    missing += [p.name for p in sorted(scripts.glob("*.py")) if p.name not in entries.get("benchmarks/", "")]
    assert not missing, missing
    gone = []
    for folder in ("base/", "registry/", "measure/", "exporters/", "runners/", "scenarios/", "records/", "analysis/",
                   "execution/", "cli/"):
        text = entries[folder]
        while "(" in text:  # what a module does, in brackets, is no module's name
            text = re.sub(r"\([^()]*\)", "", text)
        for item in re.split(r"[,:]", text):
            name = item.split()[-1] if item.split() else ""
            name = name.strip("+").removesuffix("/")
            if name and not ((PACKAGE / folder / f"{name}.py").exists() or (PACKAGE / folder / name).is_dir()):
                gone.append(f"{folder}{name}")
    assert not gone, gone


def test_code_speaks_of_what_it_does_not_of_tickets():
    """A comment that points at a ticket number or at "the seed" projects tells a reader nothing they can open;
    the code says what it does and names the tools it was compared with."""
    import re

    pattern = re.compile(r"\bissue \d+|\bseed projects?\b", re.IGNORECASE)
    found = [f"{p.relative_to(PACKAGE.parent)}:{i}" for folder in ("inferbench", "tests", "benchmarks")
             for p in (PACKAGE.parent / folder).rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found


def test_every_scenario_keeps_the_contract_its_entry_declares():
    """registry/scenarios.py declares what the parent and the worker call (Session, TunedSession, ScenarioModule);
    each entry's module and session class have it, and a session tunes exactly where its entry says it does."""
    from inferbench.registry.scenarios import SCENARIOS, ScenarioModule, get_scenario, scenario_module

    for name, entry in SCENARIOS.items():
        assert isinstance(scenario_module(name), ScenarioModule), name
        session = get_scenario(name)
        assert all(callable(getattr(session, m, None)) for m in ("block", "idle", "finish")), name
        tunes = all(callable(getattr(session, m, None)) for m in ("tune", "apply"))
        assert tunes == entry.tunes, name
    assert [n for n, e in SCENARIOS.items() if e.tunes] == ["inference"]


def test_the_typed_core_type_checks():
    """mypy, at its default strictness, over the whole package (pyproject's [tool.mypy]): a record's blocks are
    typed objects end to end, and a None where a number is compared (the training parity's update error, once), or
    an exception built with the wrong arguments (a missing LoadGen's, once), is caught before it runs."""
    import os
    import tempfile

    from mypy import api

    with tempfile.TemporaryDirectory() as cache:  # nothing written into the checkout
        cwd = os.getcwd()
        os.chdir(PACKAGE.parent)  # pyproject's [tool.mypy] is read from here
        try:
            out, err, status = api.run(["--cache-dir", cache, "--no-error-summary"])
        finally:
            os.chdir(cwd)
    assert status == 0, (out + err)[-3000:]


#: A module longer than this says at its top why it is one file (its docstring's "Why one file:").
LONG_MODULE = 450
#: No function longer than this in the rooms where the run's logic lives: a longer one is named phases.
LONG_FUNCTION = 60


def test_a_long_module_says_why_it_is_one_file():
    """One room, one job: a module past :data:`LONG_MODULE` lines either splits along its jobs or says, at its top,
    why it is one (the six files that held two to four jobs each had grown to 522-707 lines unnoticed)."""
    import ast

    long = [f"{p.relative_to(PACKAGE)} ({n} lines)" for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > LONG_MODULE
            and "Why one file:" not in (ast.get_docstring(ast.parse(p.read_text())) or "")]
    assert not long, long


def test_no_function_of_the_run_s_logic_is_longer_than_a_screen():
    """execution/, scenarios/ and analysis/ hold the run's logic: a function there fits on a screen, a longer one is
    named phases (three had grown to 136-153 lines)."""
    import ast

    long = [f"{p.relative_to(PACKAGE)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for folder in ("execution", "scenarios", "analysis") for p in sorted((PACKAGE / folder).rglob("*.py"))
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > LONG_FUNCTION]
    assert not long, long
