"""Every per-framework fact lives on its registry entry, and the rest of the project agrees with it:
the extras in pyproject.toml, the versions recorded with each result, the artifact cache key, the
display order; every option is declared once and means the same in run, sweep and config files."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import tomllib

from inferbench import exporters
from inferbench.cli.options import add_options
from inferbench.execution import environment
from inferbench.options import OPTIONS
from inferbench.registry import artifacts
from inferbench.registry.frameworks import FRAMEWORKS, distributions
from inferbench.spec import CellKey, RunConfig, RunnerOptions, TimingConfig

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _names(requirements: list[str]) -> set[str]:
    return {_norm(re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0]) for r in requirements}


def _norm(name: str) -> str:
    """A distribution's or import's name as pip compares them (PEP 503: onnxconverter_common, onnxconverter-common)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("key", list(FRAMEWORKS))
def test_each_framework_entry_agrees_with_pyproject_and_its_module(key):
    fw = FRAMEWORKS[key]
    assert fw.extra in EXTRAS, f"{key}: extra [{fw.extra}] is not in pyproject.toml"
    assert set(fw.distributions) & _names(EXTRAS[fw.extra]), f"{key}: [{fw.extra}] installs none of {fw.distributions}"
    module, _, cls = fw.runner.partition(":")
    assert importlib.util.find_spec(module) is not None and cls, key
    assert fw.precision in ("fp32", "fp16", "bf16", "int8") and set(fw.precisions) <= {"fp16", "bf16", "tf32", "int8"}
    assert not fw.takes("int8") or fw.int8_artifact in artifacts.INT8_FILES  # INT8 loads its own quantised model
    assert set(fw.options) <= {f for f in RunnerOptions.__dataclass_fields__}
    assert {name for _, name in fw.env} <= set(fw.options)
    assert fw.artifact == "none" or fw.artifact in artifacts.EXPORTERS


def test_a_framework_needs_its_exporters_packages_too():
    """'all' must not pick a framework whose artifact cannot be exported here (e.g. only the openvino
    extra installed: the SavedModel needs TensorFlow)."""
    from inferbench.registry.frameworks import needed_packages

    for fw in FRAMEWORKS.values():
        needed = needed_packages(fw)
        assert set(fw.packages) <= set(needed)
        assert {"tensorflow", "keras"} <= set(needed)  # every cell's reference comes from the Keras export
    assert needed_packages(FRAMEWORKS["torch"])["tf2onnx"] == "onnxruntime"


@pytest.mark.parametrize("key", list(FRAMEWORKS))
def test_a_frameworks_own_extra_installs_everything_it_needs(key):
    """The missing-package line names one extra; installing it must be enough, exports included (import
    names are the distribution names here; onnxruntime-gpu provides onnxruntime)."""
    from inferbench.registry.frameworks import needed_packages

    fw = FRAMEWORKS[key]
    installs = _names(EXTRAS[fw.extra]) | ({"onnxruntime"} if "onnxruntime-gpu" in _names(EXTRAS[fw.extra]) else set())
    needed = {_norm(p) for p in needed_packages(fw)}
    assert needed <= installs, f"[{fw.extra}] lacks {needed - installs}"
    for kind, exporter in artifacts.EXPORTERS.items():
        assert {_norm(p) for p in exporter.packages} <= _names(EXTRAS[exporter.extra]), kind
    cpu = {k for k, f in FRAMEWORKS.items() if "cpu" in f.devices}
    if key in cpu:  # the cpu extra is the union of the CPU runtimes
        assert needed <= _names(EXTRAS["cpu"])


def test_the_base_install_runs_report_compare_and_list(tmp_path):
    """No ML framework needed to read results: report, compare and list run with TensorFlow, Keras, torch,
    ONNX Runtime and OpenVINO made unimportable."""
    import subprocess
    import sys

    fixture = Path(__file__).parent / "fixtures" / "schema_v1"
    block = ("import sys\n"  # a None in sys.modules: `import` fails and find_spec says not installed
             "for name in ('tensorflow', 'keras', 'torch', 'onnxruntime', 'openvino', 'onnx', 'tf2onnx',"
             " 'torchvision', 'onnx2torch'):\n"
             "    sys.modules[name] = None\n"
             "from inferbench.commands import main\n"
             f"assert main(['report', {str(fixture)!r}, '--out', {str(tmp_path / 'r')!r}]) == 0\n"
             # a schema-1 record has no rounds: compare runs, and says that nothing could be judged (exit 3)
             f"assert main(['compare', {str(fixture)!r}, {str(fixture)!r}]) == 3\n"
             "assert main(['list']) == 0\n")
    proc = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "r" / "report.md").exists() and "no interval (none-too-few-rounds)" in proc.stdout
    # and list is honest: without TensorFlow nothing can run (every artifact comes from the Keras export)
    assert "cpu: yes" not in proc.stdout and 'not installed: pip install -e ".[onnxruntime]"' in proc.stdout


def test_recorded_versions_and_the_cache_key_follow_the_registries():
    recorded = set(environment.packages())
    assert set(distributions()) <= recorded and set(artifacts.packages()) <= recorded
    versions = environment.package_versions()
    for name in distributions():
        installed = importlib.util.find_spec(name.replace("-", "_")) is not None
        if installed and name not in ("onnxruntime-gpu",):
            assert name in versions, f"{name} is installed but its version is not recorded"

    assert set(exporters.key_inputs("mobilenet_v3_small", 96, "random", 0)["versions"]) == set(artifacts.packages())


def test_display_order_and_colours_come_from_the_registry():
    from inferbench.analysis import plots

    colours = [plots._color(k) for k in FRAMEWORKS]
    assert len(set(colours)) == len(colours)  # one fixed colour per framework
    assert plots._color("torch:bf16") == plots._color("torch")  # a precision: the runtime's colour, its own marker
    # a variant: its family's hue lightened, never the plain form's colour nor another family's
    assert plots._color("torch+compile") != plots._color("torch") and plots._color("torch+compile") not in colours
    plain, light = plots._color("torch")[:3], plots._color("torch+compile")[:3]
    assert all(abs(v - (p + (1 - p) / 2)) < 1e-9 for p, v in zip(plain, light))


def test_every_option_is_declared_once_and_shared_by_run_and_sweep():
    flags = [f for o in OPTIONS for f in o.flags]
    assert len(flags) == len(set(flags))
    from inferbench.run import build_parser as run_parser
    from inferbench.sweep import build_parser as sweep_parser

    def helps(parser):
        return {a.dest: a.help for a in parser._actions if a.dest not in ("help", "version")}

    run, sweep = helps(run_parser()), helps(sweep_parser())
    for o in OPTIONS:
        if {"run", "sweep"} <= set(o.commands) and o.name != "output_dir":
            assert run[o.name] == sweep[o.name], o.name
    assert run["frameworks"] and "--framework" in run_parser()._option_string_actions
    assert "--frameworks" in run_parser()._option_string_actions  # one name, both spellings, everywhere
    import argparse

    parser = argparse.ArgumentParser()
    add_options(parser, "sweep")
    assert vars(parser.parse_args([])) == {}  # nothing given, nothing in the namespace: defaults are merged once


def test_the_typed_chain_makes_a_json_round_trip():
    from inferbench.base.codec import decode, encode
    from inferbench.base.device import Device, Gpu
    from inferbench.spec import CellJob, ChildResult, job_from_json, job_to_json

    gpu = Device("gpu", Gpu(0, "GPU-x", "H100", "0000:17:00.0", 81559.0))
    config = RunConfig("random", 0, gpu, 16, TimingConfig(1, 0.5, 2.0, 20), RunnerOptions(torch_compile=True),
                       "/cache", 60.0)
    torch_options = config.options.for_framework(FRAMEWORKS["torch"])
    cell = CellKey("mobilenet_v3_large", 224, 8, "torch", "bf16", options=torch_options)
    job = CellJob(cell, FRAMEWORKS["torch"], config, "/cache/a", "/cache/a/torch/model.pt", (1, 8))
    assert job_from_json(job_to_json(job)) == job
    assert decode(ChildResult, encode(ChildResult(ok=False, error="x")), "r") == ChildResult(ok=False, error="x")
    assert cell.label == "mobilenet_v3_large@224 torch bf16 +compile bs8"
    assert cell.filename == "mobilenet_v3_large_224_bs8_torch_bf16_compile.json"
    assert RunnerOptions(torch_compile=True).for_framework(FRAMEWORKS["onnxrt"]) == RunnerOptions()
    with pytest.raises(ValueError, match=r"cell job.cell.batch_size: expected int"):
        job_from_json(job_to_json(job).replace('"batch_size": 8', '"batch_size": 8.5'))


def test_the_cpu_build_of_onnx_runtime_is_not_offered_for_the_gpu(monkeypatch):
    """A GPU machine with ONNX Runtime's CPU build (same import name) must not run onnxrt on the GPU: it would
    fall back to the CPU. The GPU build is a distribution of its own."""
    from inferbench.registry import frameworks

    monkeypatch.setattr(frameworks, "missing_packages", lambda fw, *a, **k: [])
    monkeypatch.setattr(frameworks, "_installed", lambda dist: dist != "onnxruntime-gpu")
    why = frameworks.unavailable_reason(FRAMEWORKS["onnxrt"], "gpu")
    assert why == 'onnxruntime is its CPU build here; the GPU needs onnxruntime-gpu (pip install -e ".[gpu]", which ' \
        'replaces it)'
    assert frameworks.unavailable_reason(FRAMEWORKS["onnxrt"], "cpu") is None
    assert frameworks.unavailable_reason(FRAMEWORKS["onnxrt-trt"], "gpu") == why
    monkeypatch.setattr(frameworks, "_installed", lambda dist: True)
    assert frameworks.unavailable_reason(FRAMEWORKS["onnxrt"], "gpu") is None


def test_keras_on_another_backend_needs_that_backend_not_tensorflow():
    from inferbench.registry.frameworks import needed_packages
    from inferbench.spec import RunnerOptions

    for key in ("keras-eager", "keras", "kerasxla"):
        fw = FRAMEWORKS[key]
        assert fw.runtime_packages(RunnerOptions(keras_backend="jax")) == ("keras", "jax")
        assert fw.runtime_packages(RunnerOptions(keras_backend="torch")) == ("keras", "torch")
        assert fw.runtime_packages(RunnerOptions()) == ("tensorflow", "keras")
        # with the Keras model and its reference already exported (brought from elsewhere), TensorFlow is not needed
        assert "tensorflow" not in needed_packages(fw, None, RunnerOptions(keras_backend="jax"), {"keras", "reference"})
        assert "tensorflow" in needed_packages(fw, None, RunnerOptions(keras_backend="jax"))
    assert FRAMEWORKS["torch"].runtime_packages(RunnerOptions(keras_backend="jax")) == FRAMEWORKS["torch"].packages


def test_a_named_framework_one_of_several_models_cannot_run_is_left_out_for_that_model_only():
    """sweep/zoo --model resnet50,resnet50_v2 --framework torch-native: resnet50 runs on its twin, resnet50_v2 (no
    twin) is left out with the reason; for one model alone (or when no model can run it) it stays a UsageError."""
    from inferbench.base.errors import UsageError
    from inferbench.registry.frameworks import choose
    from inferbench.registry.models import get_model

    with pytest.raises(UsageError, match="torchvision has no implementation of resnet50_v2"):
        choose(["torch-native"], "cpu", get_model("resnet50_v2"))
    chosen, skipped = choose(["torch-native", "onnxrt"], "cpu", get_model("resnet50_v2"), lenient=True)
    assert [f.key for f in chosen] == ["onnxrt"]
    assert skipped == {"torch-native": "torchvision has no implementation of resnet50_v2"}
    assert [f.key for f in choose(["torch-native"], "cpu", get_model("resnet50"), lenient=True)[0]] == ["torch-native"]


def test_the_docs_count_the_models_the_registry_has():
    """README and docs/ (but docs/measured.md, whose counts are dated measurements) name the registry's number of
    models wherever they count them all: they said 65 where `list` shows 66."""
    import re
    from pathlib import Path

    from inferbench.registry.models import MODELS

    root = Path(__file__).resolve().parents[1]
    found = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if doc.name == "measured.md":
            continue
        text = " ".join(doc.read_text().split())
        found += [(doc.name, int(m.group(1) or m.group(2)))
                  for m in re.finditer(r"(?:all |of the )(\d+) models\b|\b(\d+) (?:registered )?models\b", text)]
    assert len(found) >= 4 and {n for _, n in found} == {len(MODELS)}, found


def test_the_docs_count_the_tests_and_name_the_frameworks_the_code_has():
    """docs/install.md's "N of the M tests" (the fast layer of the full suite, README's test command) is what pytest
    collects now (it once said 308 where 464 were collected); README names no count (a new test would force an edit
    of the front door); docs/frameworks.md's table of keys names every framework the registry has and no other."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from inferbench.registry.frameworks import FRAMEWORKS

    root = Path(__file__).resolve().parents[1]

    def collected(marks: str) -> int:
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p",
                              "no:cacheprovider", "-o", "addopts=", "-m", marks], cwd=root, capture_output=True,
                             text=True, timeout=600)
        found = re.search(r"^(\d+)(?:/\d+)? tests? collected", out.stdout, re.M)
        assert found, out.stdout[-2000:] + out.stderr[-2000:]
        return int(found.group(1))

    said = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if doc.name != "measured.md":  # its counts are dated measurements
            said += [(doc.name, int(a), int(b)) for a, b in re.findall(r"\b(\d+) of the (\d+) tests\b",
                                                                      " ".join(doc.read_text().split()))]
    assert said and {(a, b) for _, a, b in said} == {(collected("not zoo and not postgres and not slurm and not slow"),
                                                       collected("not zoo and not postgres and not slurm"))}, said
    assert "install.md" in {doc for doc, _, _ in said} and "README.md" not in {doc for doc, _, _ in said}
    table = (root / "docs" / "frameworks.md").read_text().split("## Framework keys", 1)[1].split("\n\n", 2)[1]
    keys = {k for row in table.splitlines()[2:] for k in re.findall(r"`([a-z0-9-]+)`", row.split("|")[1])}
    assert keys - {"best", "all"} == set(FRAMEWORKS), keys ^ set(FRAMEWORKS)


def test_every_artifact_says_the_route_it_took_from_the_source():
    """The route into a runtime is part of the answer: a record names how the artifact a runtime loaded was made, back
    to the source (a Keras model, a PyTorch program, the user's file)."""
    from inferbench.registry.artifacts import route
    from inferbench.registry.frameworks import FRAMEWORKS
    from inferbench.registry.models import get_model

    keras, ssd = get_model("mobilenet_v3_large"), get_model("torchvision:ssdlite320_mobilenet_v3_large")

    def of(fw, spec):
        return route(FRAMEWORKS[fw].artifact_for(spec, "inference", "fp32"), spec)

    assert of("torch", keras) == "onnx2torch from tf2onnx from the Keras model"
    assert of("openvino", keras) == "tf.saved_model.save from the Keras model"
    assert of("onnxrt", ssd) == "torch.onnx.export (dynamo) from the PyTorch program (torch.export)"
    assert of("openvino", ssd) == "the PyTorch program (torch.export)" != of("openvino-onnx", ssd)
    assert route("onnx-int8", keras) == "ONNX Runtime's static QDQ quantisation from tf2onnx from the Keras model"


def test_a_model_files_route_starts_at_the_users_file(tmp_path, monkeypatch):
    from test_model_files import onnx_file

    from inferbench.registry import models
    from inferbench.registry.artifacts import route, unreachable
    from inferbench.registry.modelfiles import open_model_file

    monkeypatch.setattr(models, "_FILES", {})
    found = open_model_file(str(onnx_file(tmp_path / "net.onnx")))
    models.register(found)
    spec = models.get_model(found.name)
    assert route("onnx", spec) == "the user's ONNX file as it is"
    assert route("torch", spec) == "onnx2torch from the user's ONNX file as it is"
    # OpenVINO's INT8 quantises the file it converts; torch's needs a program or a Keras twin, said so
    assert route("openvino-int8", spec) == "NNCF's post-training quantisation from the user's ONNX file as it is"
    assert "which inferbench makes from a Keras model only" in unreachable("torch-int8", spec)
