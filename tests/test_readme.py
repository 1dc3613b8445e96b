"""README's example answer against what README's command prints today (the example once said it was "printed
before record schema 7", showed four runtimes where five run and intervals the code no longer printed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferbench.run import main

README = Path(__file__).resolve().parent.parent / "README.md"
FIRST_WORDS = ("VALID: ", "NOT VALID (", "validity not known: ")


def example() -> list[str]:
    """README's example output: the code block under "## The answer"."""
    section = README.read_text().split("## The answer", 1)[1]
    return section.split("```\n", 2)[1].rstrip("\n").splitlines()


def columns(header: str) -> list[str]:
    return [c for c in re.split(r"\s{2,}", header.strip()) if c and c != "..."]


def test_readme_example_names_the_command_and_its_folder():
    """The example says which command printed it and where its run is kept (a real run, committed)."""
    text = README.read_text().split("## The answer", 1)[1]
    folder = re.search(r"`(benchmark_results/[^`]+)/`", text)
    assert "`inferbench run --quick`" in text and folder and (README.parent / folder.group(1)).is_dir()
    lines = example()
    assert lines[0].startswith(FIRST_WORDS) and lines[1].startswith("recommendation (median latency")


@pytest.mark.slow  # README's command on the real runtimes, the smallest model at its smallest size: a minute or two
def test_readme_example_has_the_shape_readme_command_prints_today(tmp_path, shared_cache, capsys):
    code = main(["--quick", "--model", "mobilenet_v3_small", "--resolution", "min", "--output-dir",
                 str(tmp_path / "out"), "--cache-dir", str(shared_cache)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    said = example()
    assert out[0].startswith(FIRST_WORDS) and out[1] == said[1]
    group = re.compile(r"^  \S+@\d+ batch 1 on .+, \d+ threads?: (best guess )?\S+, [\d.]+ ms")
    assert group.match(out[2]) and group.match(said[2]), (out[2], said[2])
    header = next(i for i, line in enumerate(out) if line.startswith("framework"))
    readme_header = next(line for line in said if line.startswith("framework"))
    assert columns(out[header])[:len(columns(readme_header))] == columns(readme_header)
    ran = {line.split()[0] for line in out[header + 2:] if line and not line.startswith(("(", " ", "results:"))
           and len(line.split()) > 3 and line.split()[2] == "ok"}
    shown = {line.split()[0] for line in said[said.index(readme_header) + 1:] if line.split()[0] != "..."}
    assert ran == shown, (ran, shown)  # the runtimes README shows are the ones its command runs here
    stability = {m.group(1) for line in said for m in [re.search(r"\s(unknown|stable|unstable|not judged)(\s|$)",
                                                                line)] if m}
    assert stability and not any("±" in line and "unknown" in line for line in said)
