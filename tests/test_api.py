"""The public Python API (inferbench.api) end to end on the fake runners: a plan checked as the command line's, a run
with typed records and its answer, the records loaded, recommended, compared and reported; bad input one
UsageError."""

from __future__ import annotations

import pytest

from inferbench import api
from inferbench.base.errors import UsageError

SMALL = dict(models=["mobilenet_v3_small"], resolutions=[32], duration=0.05, min_iterations=3, warmup=1,
             warmup_seconds=0.0, threads=1, device="cpu", rounds=4)


def test_a_plan_is_checked_by_the_command_line_s_rules(fakes, tmp_path):
    p = api.plan(frameworks=["fake", "fake-slow"], batch_sizes=[1, 2], cache_dir=str(tmp_path / "c"), **SMALL)
    assert [(c.framework, c.batch_size) for c in p.cells] == [("fake", 1), ("fake-slow", 1), ("fake", 2),
                                                              ("fake-slow", 2)]
    assert p.config.timing.rounds == 4 and p.config.threads == 1
    # 4 rounds give two worker processes a cell: the plan says up front what one degree of freedom costs
    assert p.config.processes == 2 and any(n.startswith("two worker processes a cell: ") for n in p.notes)
    for more in (dict(rounds=6), dict(processes=1)):
        other = api.plan(frameworks=["fake"], cache_dir=str(tmp_path / "c"), **{**SMALL, **more})
        assert other.config.processes != 2 and not any(n.startswith("two worker processes") for n in other.notes)
    with pytest.raises(UsageError, match="unknown option 'batch_size'.*batch_sizes"):
        api.plan(batch_size=[1])
    with pytest.raises(UsageError, match="rounds"):
        api.plan(rounds=0)  # the flag's own range rule


def test_run_gives_typed_records_and_the_answer_and_the_rest_reads_them(fakes, tmp_path, monkeypatch):
    result = api.run(frameworks=["fake", "fake-slow"], cache_dir=str(tmp_path / "c"), output_dir=tmp_path / "out",
                     verbosity=-1, **SMALL)
    assert result.folder.parent == tmp_path / "out"
    assert sorted(r.framework for r in result.records) == ["fake", "fake-slow"]
    assert not (tmp_path / "out" / "history.duckdb").exists()  # the tests keep none (INFERBENCH_HISTORY=off)
    monkeypatch.delenv("INFERBENCH_HISTORY")  # the default: beside output_dir, as the command's --output-dir
    kept = api.run(frameworks=["fake"], cache_dir=str(tmp_path / "c"), output_dir=tmp_path / "out2", verbosity=-1,
                   **SMALL)
    assert kept.folder.parent == tmp_path / "out2" and (tmp_path / "out2" / "history.duckdb").is_file()
    monkeypatch.setenv("INFERBENCH_HISTORY", "off")
    assert all(isinstance(r, api.Record) and r.status == "ok" for r in result.records)
    (answer,) = result.answer
    assert answer["recommended"] == "fake" and answer["runner_up"] == "fake-slow"
    lines = result.answer_lines()
    assert lines[1].startswith("recommendation (median latency") and "fake" in lines[2]

    assert sorted(r.framework for r in api.records(result.folder)) == ["fake", "fake-slow"]
    df = api.load(result.folder)
    assert set(df["framework"]) == {"fake", "fake-slow"} and df["ranked"].all()
    assert api.recommend(result.records)[0]["recommended"] == "fake"
    assert api.recommend(result.folder, "throughput")[0]["recommended"] == "fake"

    same = api.compare(result.folder, result.folder)
    assert len(same.rows) == 2 and not same.regressions
    assert same.summary[0].startswith("judged")

    md = api.report(result.folder, out=tmp_path / "report")
    assert md.name == "report.md" and (tmp_path / "report" / "report.html").is_file()


def test_bad_input_is_one_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such file or folder"):
        api.load(tmp_path / "nothing")
    with pytest.raises(UsageError, match="no result folders given"):
        api.records([])
    with pytest.raises(UsageError, match="objective"):
        api.recommend(tmp_path, "fastest")


@pytest.mark.slow
def test_the_example_in_docs_python_md_runs_as_written(tmp_path, monkeypatch):
    """docs/python.md's example, run as it stands (real ONNX Runtime and OpenVINO, --quick), in a fresh folder."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "python.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INFERBENCH_CACHE", str(tmp_path / "cache"))
    exec(compile(block, "docs/python.md", "exec"), {})
    (folder,) = (tmp_path / "inferbench-results").iterdir()
    assert (folder / "report" / "report.html").is_file() and len(list(folder.glob("*.json"))) >= 3
