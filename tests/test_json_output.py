"""--json: run, compare, report and list each print one JSON document on standard output, valid against
inferbench/records/schema/output.schema.json, and everything meant for people on standard error; bad input prints no
document."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
from test_pipeline import _run

from inferbench.cli.jsonout import SCHEMA
from inferbench.commands import main as inferbench


def _document(capsys, command):
    """The one document on stdout, checked against the schema (and the command's own definition in it)."""
    out = capsys.readouterr().out
    doc = json.loads(out)  # the whole of stdout is one document: nothing else printed there
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(doc, schema)
    jsonschema.validate(doc, {"$ref": f"#/$defs/{command}", "$defs": schema["$defs"]})  # its own command's
    assert doc["command"] == command
    return doc


def test_run_and_compare_print_one_document_each_and_the_people_part_on_stderr(fakes, tmp_path, capsys):
    assert _run(tmp_path / "a", "--framework", "fake,fake-wrong", "--json") == 1  # fake-wrong fails parity
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    # stdout the document, stderr the progress only (no text table, no results lines)
    assert doc["exit_status"] == 1 and "results:" not in captured.err + captured.out
    assert "recommendation (" not in captured.err and "framework  " not in captured.err
    assert "parity failed" in captured.err  # the progress lines stay
    cells = {c["framework"]: c for c in doc["cells"]}
    assert cells["fake"]["parity"] == "passed" and cells["fake-wrong"]["parity"] == "failed"
    assert cells["fake"]["p50_ms"] > 0 and len(cells["fake"]["p50_ci95"]) == 2
    (run_dir,) = (tmp_path / "a" / "out").iterdir()
    assert doc["run_dir"] == str(run_dir) and str(run_dir / "recommendation.json") in doc["files"]
    assert (run_dir / cells["fake"]["file"]).is_file()
    assert doc["recommendations"][0]["recommended"] == "fake"  # the answer, as recommendation.json has it

    assert _run(tmp_path / "b", "--framework", "fake") == 0
    capsys.readouterr()
    (other,) = (tmp_path / "b" / "out").iterdir()
    assert inferbench(["compare", str(run_dir), str(other), "--json", "--fail-above", "10"]) in (0, 1, 3)
    doc = _document(capsys, "compare")
    (row,) = [c for c in doc["cells"] if c["framework"] == "fake"]
    assert row["verdict"] and doc["old"] == str(run_dir) and doc["fail_above"] == 10

    assert inferbench(["report", str(run_dir), "--out", str(tmp_path / "report"), "--json"]) == 0
    doc = _document(capsys, "report")
    assert doc["report"].endswith("report.md") and any(f.endswith(".png") for f in doc["files"])


def test_list_prints_what_runs_here_as_a_document(capsys):
    assert inferbench(["list", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # the document only, not the listing for people on stderr too
    print(captured.out)  # (read again by _document)
    doc = _document(capsys, "list")
    frameworks = {f["key"]: f for f in doc["frameworks"]}
    for f in frameworks.values():  # a reason exactly where it does not run
        assert all(f["runs_here"][dev] is (f["why_not"][dev] is None) for dev in ("cpu", "gpu")), f
    assert frameworks["tensorrt-fp32"]["why_not"]["cpu"] == "needs an NVIDIA GPU"
    # a CPU runtime on a GPU machine is not one waiting for an NVIDIA card (it said "needs an NVIDIA GPU")
    assert frameworks["openvino"]["why_not"]["gpu"] == "runs on the CPU only (openvino has no NVIDIA GPU path)"
    assert "onnxrt" in doc["sets"]["best"]["cpu"] and doc["models"][0]["name"]


@pytest.mark.parametrize("argv", [["compare", "nowhere-a", "nowhere-b", "--json"],
                                  ["run", "--framework", "no-such-runtime", "--json"],
                                  ["run", "--no-such-flag", "--json"],
                                  ["run", "--framework", "fake", "--json", "--output-dir", "READ-ONLY"]])
def test_bad_input_is_one_line_and_the_error_document(argv, capsys, tmp_path, fakes):
    """Bad input (a missing folder, an unknown runtime or flag, an output folder that cannot be written: the user
    named it) is one line on standard error, exit 2, and with --json the error document on standard output: the
    same line, so a script reading the document always gets one."""
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o555)
    argv = [str(read_only / "out") if a == "READ-ONLY" else a for a in argv]
    if argv[0] == "run" and "--output-dir" not in argv:
        argv += ["--output-dir", str(tmp_path / "out")]
    if os.geteuid() == 0 and str(read_only) in " ".join(argv):  # root writes anywhere: a file stands in the way
        read_only.chmod(0o755)
        (read_only / "out").write_text("")
    assert inferbench(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    doc = json.loads(captured.out)  # the whole of stdout
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(doc, schema)
    jsonschema.validate(doc, {"$ref": "#/$defs/error", "$defs": schema["$defs"]})
    assert doc["exit_status"] == 2 and doc["command"] == argv[0] and line.endswith(doc["error"])
    assert not (tmp_path / "out").exists()
