"""The Kubernetes manifests docs/distributed.md gives, checked for what can be checked without a cluster: each
against its schema (Kubernetes' own, through kubernetes-validate; KubeRay's RayJob, from its CRD: tests/data), and
each command parsed by inferbench's own parser, as the pod would run it (the Indexed Job's for each index)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from inferbench.cli.options import read_config_file
from inferbench.execution.distributed import NICENESS, SLOT
from inferbench.sweep import build_parser

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason='in the test extra: pip install -e ".[test]"')
ROOT = Path(__file__).resolve().parents[1]
KUBERNETES = "1.33.0"  # a release every managed service still offers
RAYJOB_SCHEMA = ROOT / "tests" / "data" / "kuberay-rayjob-v1.schema.json"


def _manifests() -> list[dict]:
    text = (ROOT / "docs" / "distributed.md").read_text().split("## On Kubernetes", 1)[1]
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block)]


def _kind(kind: str) -> list[dict]:
    return [m for m in _manifests() if m["kind"] == kind]


def _valid(resource: dict) -> None:
    """Against Kubernetes' own schema, unknown fields refused (Kubernetes would drop them unsaid)."""
    kubernetes_validate.validate(resource, KUBERNETES, strict=True)


def _pod_template(template: dict) -> None:
    _valid({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})


def test_the_docs_give_one_rayjob_one_indexed_job_and_its_config_map():
    assert sorted(m["kind"] for m in _manifests()) == ["ConfigMap", "Job", "RayJob"]


def test_the_rayjob_is_kuberays_and_its_pods_are_kubernetes():
    (job,) = _kind("RayJob")
    schema = json.loads(RAYJOB_SCHEMA.read_text())
    jsonschema.validate(job, schema)
    spec = job["spec"]["rayClusterSpec"]
    _pod_template(spec["headGroupSpec"]["template"])
    for group in spec["workerGroupSpecs"]:
        _pod_template(group["template"])
    with pytest.raises(jsonschema.ValidationError):  # the check can fail: a misspelt field is refused
        jsonschema.validate({**job, "spec": {**job["spec"], "entryPoint": "x"}}, schema)


def test_the_rayjobs_nodes_each_hold_one_slot_and_its_head_none():
    (job,) = _kind("RayJob")
    spec = job["spec"]["rayClusterSpec"]
    for group in spec["workerGroupSpecs"]:  # never two workers on one node
        _one_pod_a_node(group["template"])
    assert SLOT not in json.loads(json.loads(spec["headGroupSpec"]["rayStartParams"].get("resources", '"{}"')))
    for group in spec["workerGroupSpecs"]:
        assert json.loads(json.loads(group["rayStartParams"]["resources"])) == {SLOT: 1}
        for container in group["template"]["spec"]["containers"]:  # its cells' workers at normal priority
            assert {"name": NICENESS, "value": "0"} in container["env"]


def test_the_rayjobs_entrypoint_is_a_sweep_inferbench_parses_on_the_clusters_head():
    (job,) = _kind("RayJob")
    command = shlex.split(job["spec"]["entrypoint"])
    assert command[:2] == ["inferbench", "sweep"]
    args = build_parser().parse_args(command[2:])
    assert args.executor == "ray" and args.ray_address == "127.0.0.1:6379"  # the head itself: never a private
    assert args.output_dir == "/results"  # cluster of its own, which --executor ray alone would start
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]
    (container,) = head["template"]["spec"]["containers"]
    assert any(m["mountPath"] == args.output_dir for m in container["volumeMounts"])  # the records on the volume
    if args.device == "gpu":  # the driver resolves the device where it runs: a GPU of its own, nothing scheduled on it
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1 and head["rayStartParams"]["num-gpus"] == "0"


def test_the_indexed_job_and_its_config_map_are_kubernetes():
    (job,), (shards,) = _kind("Job"), _kind("ConfigMap")
    _valid(job)
    _valid(shards)
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail
        _valid({**job, "spec": {**job["spec"], "completionsMode": "Indexed"}})


def test_each_index_runs_a_sweep_inferbench_parses_on_a_shard_file_it_reads(tmp_path):
    (job,), (shards,) = _kind("Job"), _kind("ConfigMap")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == len(shards["data"])
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {v["name"]: v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} == {
        "shards": shards["metadata"]["name"]}
    for name, text in shards["data"].items():
        (tmp_path / name).write_text(text)
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"SHARD": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
                   "POD": "metadata.name"}  # Kubernetes expands $(SHARD) and $(POD) in args from these
    names = set()
    for index in range(spec["completions"]):
        pod_name = f"{job['metadata']['name']}-{index}-x7k2p"  # each attempt a pod of its own name
        args = [a.replace("$(SHARD)", str(index)).replace("$(POD)", pod_name) for a in container["args"]]
        assert container["command"] == ["inferbench"] and args[0] == "sweep"
        parsed = build_parser().parse_args(args[1:])
        assert Path(parsed.config).parent == Path(mounts["shards"])
        values = read_config_file(str(tmp_path / Path(parsed.config).name))  # inferbench's own reading of it
        assert values["models"] and getattr(parsed, "executor", "local") == "local" and parsed.history == "off"
        names.add(parsed.name)
    assert len(names) == spec["completions"]  # a folder of its own per index
    _one_pod_a_node(spec["template"])


def _one_pod_a_node(template: dict) -> None:
    """Never two measurements on one node: the pods refuse a node where another of theirs runs."""
    anti = template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
