"""Command-line behaviour: bad input is one line, exit 2, no traceback, no result file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inferbench.run import main


def run_main(capsys, *argv):
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


BAD_INPUTS = [
    (["--framework", "nope"], "valid frameworks"),
    (["--model", "vgg99"], "valid models"),
    (["--batch-size", "0"], "positive"),
    (["--batch-size", "1,-4"], "positive"),
    (["--batch-size", "two"], "integers"),
    (["--weights", "/nonexistent/w.keras"], "cannot read weights"),
    (["--weights", "weights.bin"], "must be"),
    (["--device", "gpu"], "no NVIDIA GPU"),
    (["--resolution", "8"], "too small"),
    (["--threads", "0"], "positive"),
    (["--duration", "-1"], ">= 0"),
    (["--duration", "inf"], "must be a finite number"),
    (["--warmup-seconds", "1e999"], "must be a finite number"),
    (["--duration", "1e308"], "--duration: must be at most 86400, got 1e+308"),
    (["--threads", "10000"], "--threads: must be at most"),
    (["--seed", str(2**70)], "--seed: must be at most 4294967295"),
    (["--batch-size", "99999999"], "must be at most 65536, got 99999999"),
    (["--resolution", "100000"], "must be at most 4096, got 100000"),
    (["--framework", "onnxrt", "--batch-size", "4000", "--resolution", "1024"], "46.9 GB of input alone"),
    (["--framework", "tensorrt-fp16", "--device", "cpu"], "needs an NVIDIA GPU"),
    (["--framework", "onnxrt", "--precision", "bf16"],
     "onnxrt runs in fp32 only; --precision bf16 applies to: openvino, openvino-onnx, torch"),
    (["--cuda-graphs", "--device", "cpu"], "--cuda-graphs needs an NVIDIA GPU"),
    (["--precision", "fp8"], "invalid choice"),
    (["--model", "efficientnet_v2_b0", "--framework", "torch-native"],
     "torchvision has no implementation of efficientnet_v2_b0"),
    (["--model", "efficientnet_v2_b0,resnet50_v2", "--framework", "torch-native"],  # several: none can run it
     "torchvision has no implementation of efficientnet_v2_b0"),
    (["--model", "regnetx_002,resnet50", "--weights", "imagenet"],
     "inferbench builds regnetx_002 itself and has no ImageNet weights"),
    (["--timeout", "0"], "must be > 0"),
    (["--weights", "empty.keras"], "is not a .keras (zip) archive (it is empty)"),
    (["--weights", "text.weights.h5"], "is not an HDF5 file"),
    (["--weights", "cut.keras"], "is not a complete .keras archive (truncated?)"),
    # 1.7 million cells: refused by arithmetic, before a cell is made
    (["--model", "*", "--framework", "onnxrt", "--batch-size", ",".join(map(str, range(1, 26_001)))],
     "this grid has 1,716,000 cells (more than 2000)"),
    (["--output-dir", ""], "--output-dir: must name a folder or file, got an empty string"),
    (["--cache-dir", ""], "--cache-dir: must name a folder or file, got an empty string"),
    (["--model", "m" * 100_000], "unknown model 'mmmm"),
    (["--framework", "onnxrtt"], "unknown framework 'onnxrtt' (did you mean onnxrt?)"),
    (["--model", "mobilenet_v3_larg"], "unknown model 'mobilenet_v3_larg' (did you mean mobilenet_v3_large?)"),
    (["--time-budget", "9" * 400], "--time-budget: must be at most 30 days, got '99999999999999999999...'"),
    (["--scenario", "server", "--slo-p99", "86400000"], "--slo-p99: must be at most 60000, got 86400000"),
    (["--pass-env", "TF_XLA_FLAGS=--tf_xla_auto_jit=2"], "'TF_XLA_FLAGS=--tf_xla_auto_jit=2' is not a variable name"),
    (["--model", "m" * 100_000 + ".onnx"], "--model mmmm"),
]


@pytest.mark.parametrize("argv,message", BAD_INPUTS)
def test_bad_input(capsys, tmp_path, argv, message):
    if "gpu" in argv and shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA GPU")
    out_dir = tmp_path / "out"
    (tmp_path / "empty.keras").write_bytes(b"")
    (tmp_path / "text.weights.h5").write_text("not HDF5")
    (tmp_path / "cut.keras").write_bytes(b"PK\x03\x04" + bytes(100))  # a zip's first bytes, then nothing
    argv = [str(tmp_path / a) if a in ("empty.keras", "text.weights.h5", "cut.keras") else a for a in argv]
    code, out, err = run_main(capsys, *argv, "--output-dir", str(out_dir), "--cache-dir", str(tmp_path / "c"))
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert not out_dir.exists()  # nothing written, not even an empty folder


def test_selftest_errors_say_selftest(fakes, capsys, tmp_path, monkeypatch):
    from inferbench import selftest

    monkeypatch.setattr(selftest, "FRAMEWORKS", {"fake": fakes.frameworks()["fake"]})
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert selftest.main(["--cpu", "--output-dir", str(blocker / "sub")]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert err[0] == "selftest on the cpu: running fake"
    assert err[-1].startswith("inferbench.selftest: error: cannot write to output dir")
    assert captured.out.strip() == "selftest FAIL: the check could not start on the cpu (see above)"


def test_unwritable_output_dir(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run_main(capsys, "--framework", "onnxrt", "--output-dir", str(blocker / "sub"),
                            "--cache-dir", str(tmp_path / "c"))
    assert code == 2 and "cannot write to output dir" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA GPU")
def test_seed_command_line_without_gpu_fails_fast_and_clearly(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "inferbench.run", "--framework", "tfxla", "--gpu-id", "0"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "inferbench.run: error: no NVIDIA GPU found on this machine (nvidia-smi lists none); use --device cpu"
    ]
    assert not (tmp_path / "benchmark_results").exists() or not any((tmp_path / "benchmark_results").rglob("*"))


def test_list_shows_models_and_frameworks(capsys):
    code, out, _ = run_main(capsys, "--list")
    assert code == 0
    for word in ["mobilenet_v3_large", "efficientnet_v2_b0", "tfxla", "torch-native", "tensorrt-fp16"]:
        assert word in out
    assert "no torchvision equivalent" in out


def test_import_inferbench_imports_no_framework():
    code = (
        "import sys, inferbench, inferbench.run, inferbench.records, inferbench.registry.models, "
        "inferbench.registry.frameworks, inferbench.exporters, inferbench.measure.parity, inferbench.cli.summary, "
        "inferbench.execution.isolate, inferbench.analysis.ranking\n"
        "heavy = [m for m in ('tensorflow', 'torch', 'onnxruntime', 'keras', 'onnx', 'tensorrt') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA GPU")
def test_gpu_selftest_without_gpu_is_one_clear_line(capsys):
    from inferbench.selftest import main as selftest

    assert selftest(["--gpu"]) == 2
    err = capsys.readouterr().err
    assert "no NVIDIA GPU" in err and len(err.strip().splitlines()) == 1


def test_a_users_runs_never_land_among_the_committed_results():
    """README's two commands in order: `inferbench run` writes where git ignores it, so the tests that count the
    project's committed records (benchmark_results/) pass after it too."""
    import subprocess

    from inferbench.options import BY_NAME, MEASURING

    root = Path(__file__).resolve().parent.parent
    for command in (*MEASURING, "selftest"):
        default = Path(BY_NAME["output_dir"].default_for(command))
        assert default.parts[0] != "benchmark_results", command
        probe = default / "20261125-000000_mobilenet_v3_large_224_cpu" / "record.json"
        ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=root).returncode
        assert ignored == 0, f"{command}: {default} is not git-ignored"


def test_a_huge_grid_is_refused_before_a_cell_is_made(capsys, tmp_path):
    """1.7 million cells once took minutes and 560 MB before the 2000-cell check: the size comes by arithmetic."""
    import tracemalloc

    tracemalloc.start()
    try:
        code, _, err = run_main(capsys, "--model", "*", "--framework", "onnxrt", "--batch-size",
                                ",".join(map(str, range(1, 26_001))), "--output-dir", str(tmp_path / "out"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2 and "this grid has 1,716,000 cells" in err
    assert peak < 50 * 2**20, f"{peak / 2**20:.0f} MiB allocated: were the cells made?"


@pytest.mark.parametrize("name, char", [("a\nb", "U+000A"), ("a\tb", "U+0009"), ("report\u202egnp.exe", "U+202E"),
                                        ("zero\u200bwidth", "U+200B")])
def test_a_sweep_name_that_does_not_read_as_it_is_is_refused(tmp_path, capsys, name, char):
    """A newline, a tab, a right-to-left override or a zero-width space in --name would reach folders, records and
    reports looking like another name: one line, exit 2, nothing made."""
    from inferbench.sweep import main as sweep_main

    assert sweep_main(["--name", name, "--frameworks", "onnxrt", "--output-dir", str(tmp_path / "out"),
                       "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--name holds the character {char}" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_pass_env_variable_not_set_is_named(fakes, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("INFERBENCH_UNSET_FOR_TEST", raising=False)
    code = main(["--model", "mobilenet_v3_small", "--resolution", "32", "--framework", "fake", "--duration", "0.02",
                 "--rounds", "2", "--processes", "1", "--min-iterations", "2", "--warmup", "0", "--warmup-seconds",
                 "0", "--threads", "1", "--device", "cpu", "--pass-env", "INFERBENCH_UNSET_FOR_TEST",
                 "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")])
    assert code == 0
    assert ("inferbench: --pass-env: not set in this shell, nothing passed on for INFERBENCH_UNSET_FOR_TEST"
            in capsys.readouterr().err)


@pytest.mark.parametrize("argv, rounds, objective", [
    (["--quick"], "quick", None),  # --quick shortens what was not given
    (["--quick", "--rounds", "8"], 8, None),  # 8 is the default: given, it stays (it ran 6 rounds)
    (["--scenario", "server"], None, "throughput"),  # a serving scenario's own objective
    (["--scenario", "server", "--objective", "p50"], None, "p50"),  # p50 is the default: given, it is the objective
])
def test_an_option_given_at_its_default_value_is_still_the_users(argv, rounds, objective):
    """A value the user gave counts as given even where it equals the default: the plan remembers which options
    were given (--rounds 8 --quick ran 6 rounds; --objective p50 --scenario server ranked by throughput)."""
    from inferbench.cli.options import given
    from inferbench.execution.plan import build, objective_for
    from inferbench.options import BY_NAME, with_defaults
    from inferbench.run import build_parser
    from inferbench.spec import QUICK

    values = with_defaults(given(build_parser().parse_args([*argv, "--framework", "onnxrt"])), "run")
    if rounds is not None:
        assert BY_NAME["rounds"].default == 8
        assert build(values).config.timing.rounds == (QUICK["rounds"] if rounds == "quick" else rounds)
    if objective is not None:
        assert objective_for(values) == objective


def test_a_quick_answer_is_untuned_and_says_so_unless_tuning_is_asked_for(fakes, tmp_path):
    """--quick's tuning blocks (1 s over every setting and 3 rounds) could never tell a setting from the default
    (intervals 0.02-7.0): a quick run of the best set measures each runtime at its own setting and says so up front;
    --tune on tunes anyway, with the full tuning budget. (The best set here: a fake runtime with a tuning grid, so
    that no ML framework is needed.)"""
    import dataclasses

    from inferbench.cli.options import given
    from inferbench.execution.plan import QUICK_UNTUNED, build
    from inferbench.options import with_defaults
    from inferbench.registry import frameworks
    from inferbench.run import build_parser

    for key, fw in list(frameworks.FRAMEWORKS.items()):  # the fixture's copy of the registry: the fake alone is best
        frameworks.FRAMEWORKS[key] = dataclasses.replace(fw, best_on=("cpu",) if key == "fake-knob" else ())

    def built(*argv):
        return build(with_defaults(given(build_parser().parse_args([
            *argv, "--framework", "best", "--model", "mobilenet_v3_small", "--resolution", "32", "--device", "cpu",
            "--cache-dir", str(tmp_path)])), "run"))

    quick = built("--quick")
    assert not any(c.options.tune for c in quick.cells) and QUICK_UNTUNED in quick.notes
    asked = built("--quick", "--tune", "on")
    assert all(c.options.tune for c in asked.cells) and asked.config.tune_budget_s == 4.0
    assert [n.split(",")[0] for n in asked.notes] == ["the plan: 1 cell(s) in 1 group(s)"]  # no untuned note
    assert all(c.options.tune for c in built().cells)  # a full run of the best set tunes, as before
    from inferbench.execution.plan import AB_UNTUNED

    ab = built("--ab-python", sys.executable)  # an A/B: a cell and its twin tuned apart could choose differently
    assert not any(c.options.tune for c in ab.cells) and AB_UNTUNED in ab.notes
    assert [bool(c.options.ab) for c in ab.cells] == [False, True] * (len(ab.cells) // 2)  # each twin beside its cell


def test_help_groups_every_option_once_in_the_order_a_newcomer_needs_them(capsys):
    from inferbench.options import GROUPS, OPTIONS
    from inferbench.run import main

    names = [n for _, group in GROUPS for n in group]
    assert sorted(names) == sorted(o.name for o in OPTIONS)  # each option in one group, none left out
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    headings = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings[:4] == ["options", "what to measure", "how long",
                            "is it right: outputs checked beyond the parity gate"]
    body = out[out.index("\nwhat to measure:"):]  # past the usage lines, which name every option
    assert body.index("--framework") < body.index("--quick") < body.index("--eval-dir") < body.index("--output-dir")


def test_a_re_export_says_the_installed_packages_changed_and_where_the_cache_is(tmp_path):
    """Installing an extra changed the cache's key and the next run exported again in silence (32 s)."""
    import json as json_

    from inferbench.execution.plan import build
    from inferbench.exporters import cache as artifact_cache
    from inferbench.exporters import key_inputs
    from inferbench.options import with_defaults

    values = with_defaults({"frameworks": ["onnxrt"], "cache_dir": str(tmp_path), "models": ["mobilenet_v3_small"],
                            "resolutions": ["32"]}, "run")
    assert not any("again" in n for n in build(values).notes)  # an empty cache: nothing to explain
    before = key_inputs("mobilenet_v3_small", 32, "random", 0)
    before["versions"] = {**before["versions"], "openvino": None, "onnx": "0.0.1"}
    folder = artifact_cache.artifact_dir(tmp_path, before)
    folder.mkdir()
    (folder / "manifest.json").write_text(json_.dumps({"key_inputs": before, "artifacts": {}}))
    notes = "\n".join(build(values).notes)
    assert f"exporting mobilenet_v3_small@32 again into a new folder of the artifact cache ({tmp_path}): the " \
        "installed packages changed since its last export (" in notes and "onnx 0.0.1 -> " in notes
