"""Sweeps on a Ray cluster (``sweep --executor ray``): each group of cells a Ray task on a node reserved whole.

The driver (the ``sweep`` command's process) exports every artifact once, as a local sweep does, and puts each
(model, resolution)'s files into Ray's object store; a node fetches them only when its cache lacks them, and checks
every file against its hash before anything loads it. Each group (one model, resolution and batch size, on one
machine) becomes a task that asks for the node's **slot** — the custom resource :data:`SLOT`, one per node — so that
no two measurements ever share a node; ``--machines a,b`` runs every group once on each named machine (a node
started with ``--resources '{"machine:a": 1, "inferbench": 1}'``), its records in a folder per machine, for a
cross-machine comparison. The task runs the one-group pipeline on the node (:func:`inferbench.execution.pipeline.
run_group`: its worker processes, interleaved rounds, the node's own machine state and environment) and returns the
records; the driver writes each atomically as it arrives. A task whose node dies is retried on another
(:data:`RETRIES` times), then its cells are failed with the reason; none ever leaves a partial record. ``--resume``
submits only the cells without a record; Ctrl-C cancels every task.

Ray is imported only here, and only for ``--executor ray`` (the ``ray`` extra).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.codec import encode
from ..base.errors import UsageError, optional
from ..base.files import atomic_write_bytes
from ..exporters import cache as artifact_cache
from ..records.record import parse
from ..spec import CellKey, RunConfig
from .childenv import passed_env
from .pipeline import on_machine
from .progress import Progress
from .remote import kinds_of, measure_here, not_run, received, registries

if TYPE_CHECKING:  # the group loop's types
    from .budget import Deadline
    from .executors import Finished

#: The per-node resource that reserves a node whole while one group measures on it.
SLOT = "inferbench"
#: Custom resources naming machines: ``machine:<name>``.
MACHINE = "machine:"
#: Retries of a task whose node or worker died (Ray's system failures; a cell's own failure is its record).
RETRIES = 2
RAY_EXTRA = "ray"
#: The raylet's setting of its workers' niceness (Ray's default: 15), read from the environment it starts in.
NICENESS = "RAY_worker_niceness"
#: Seconds to wait for a cluster to answer at --ray-address.
CONNECT_DEADLINE_S = 30.0


def import_ray() -> Any:
    return optional("ray", RAY_EXTRA, "--executor ray")


def check_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` of a Ray head, or a UsageError saying what is wrong with it."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray-address {address!r}: expected HOST:PORT of the cluster's head (e.g. 10.0.0.5:6379)")
    return host, int(port)


def connect(config: RunConfig) -> None:
    """Join the cluster at ``config.ray_address`` (or start one of this machine alone, its slot included), in one
    line when it cannot be reached: the host's port is probed first, then Ray is given a deadline (Ray's own retries
    would take minutes)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if config.ray_address:
        host, port = check_address(config.ray_address)
        try:
            with socket.create_connection((host, port), timeout=3.0):
                pass
        except socket.gaierror as exc:
            raise UsageError(f"--ray-address {config.ray_address}: cannot resolve {host!r} ({exc.strerror})") from None
        except OSError as exc:
            raise UsageError(f"--ray-address {config.ray_address}: no Ray head answers there ({exc.strerror or exc}); "
                             f"is `ray start --head --port={port}` running?") from None
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "1")
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    ray = import_ray()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "namespace": "inferbench",
                              "configure_logging": True}
    if not config.ray_address:  # a cluster of this machine alone, for this sweep, started from this thread: Ray's
        # processes die with the thread that started them (PR_SET_PDEATHSIG), so never from a helper thread
        # address="local": a new cluster of its own, never the one RAY_ADDRESS or a running `ray start` names.
        # Ray runs its workers at nice 15 by default, and every cell's worker process with them: any other work on
        # the machine would take precedence over the measurement (the Ray tests ran 4-20x slower beside two busy
        # loops). Its own cluster's workers run at the priority the user's processes have.
        os.environ.setdefault(NICENESS, "0")
        ray.init(**kwargs, address="local", resources={SLOT: 1}, include_dashboard=False,
                 num_cpus=os.cpu_count() or 1)
        return
    kwargs["address"] = config.ray_address
    box: dict[str, Any] = {}

    def init() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - said in one line by the caller
            box["error"] = exc

    thread = threading.Thread(target=init, daemon=True)
    thread.start()
    thread.join(CONNECT_DEADLINE_S)
    if thread.is_alive():
        raise UsageError(f"--ray-address {config.ray_address}: the port answers but no Ray cluster did within "
                         f"{CONNECT_DEADLINE_S:.0f} s (another service on that port?)")
    if "error" in box:
        first = (str(box["error"]).strip().splitlines() or [""])[0][:200]
        hint = "" if os.environ.get("RAY_AUTH_MODE") else " (a cluster started by `ray start` asks for its token: " \
            "export RAY_AUTH_MODE=token, the token in ~/.ray/auth_token or RAY_AUTH_TOKEN)"
        raise UsageError(f"cannot join the Ray cluster at {config.ray_address}: {type(box['error']).__name__}: "
                         f"{first}{hint}")


def nodes() -> list[dict[str, float]]:
    """Every alive node's total resources."""
    ray = import_ray()
    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def demand(config: RunConfig, machine: str | None) -> dict[str, float]:
    """What a group's task asks of its node: its slot (the node whole), a GPU for a GPU run, its machine."""
    need: dict[str, float] = {SLOT: 1.0}
    if config.device.kind == "gpu":
        need["GPU"] = 1.0
    if machine:
        need[MACHINE + machine] = 0.001  # any fraction: the name, not a count
    return need


def unfit(need: dict[str, float], cluster: list[dict[str, float]]) -> str | None:
    """Why no node of ``cluster`` can run a task that needs ``need`` (Ray would leave it pending for ever)."""
    if any(all(node.get(k, 0.0) >= v for k, v in need.items()) for node in cluster):
        return None
    missing = sorted(k for k in need if not any(node.get(k, 0.0) >= need[k] for node in cluster))
    if SLOT in missing:
        return (f"no node of the cluster offers the '{SLOT}' resource that reserves a node for one measurement: start "
                f"each node with ray start ... --resources '{{\"{SLOT}\": 1}}'")
    named = [k.removeprefix(MACHINE) for k in missing if k.startswith(MACHINE)]
    if named:
        return f"no node of the cluster is machine {', '.join(named)} (a node started with --resources " \
               f"'{{\"{MACHINE}{named[0]}\": 1, \"{SLOT}\": 1}}')"
    return f"no node of the cluster has {', '.join(missing) or 'all of ' + str(need)} together with a free slot"


def preflight(config: RunConfig) -> None:
    """Before anything is written: the cluster answers, and some node can run some cell (one line, exit 2)."""
    connect(config)
    cluster = nodes()
    why = [unfit(demand(config, m), cluster) for m in (config.machines or (None,))]
    if all(why):
        raise UsageError(f"the Ray cluster cannot run any cell: {why[0]}")


# --------------------------------------------------------------------------- artifacts to the nodes
def package(folder: Path, kinds: list[str]) -> dict[str, Any]:
    """``kinds``' files and manifest entries of a cache folder, to be put into Ray's object store."""
    manifest = artifact_cache.read_manifest(folder)
    entries = {k: manifest["artifacts"][k] for k in kinds if k in manifest.get("artifacts", {})}
    files = {rel: (folder / rel).read_bytes() for entry in entries.values() for rel in entry.get("files", {})}
    return {"name": folder.name, "key_inputs": manifest.get("key_inputs"), "entries": entries, "files": files}


def unpack(ref: Any, cache_dir: str, kinds: list[str]) -> Path:
    """On a node: the cache folder holding ``kinds``, fetched from the object store (``ref``) only where this node's
    cache lacks them, every file checked against its hash."""
    ray = import_ray()
    base = Path(cache_dir)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:  # the driver's cache path is not this node's: the node's own default
        base = artifact_cache.default_cache_dir()
    name = ref["name"]
    folder = base / name
    if all(artifact_cache.cached(folder, k) and _holds(folder, k, ref["files"].get(k, {})) for k in kinds):
        return folder  # this node's own cache has every file this run ships, each with its hash
    data = ray.get(ref["data"])
    for rel, content in data["files"].items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"the shipped artifacts name a file outside their folder: {rel!r}")
        atomic_write_bytes(folder / rel, content)
    for kind, entry in data["entries"].items():
        artifact_cache.record(folder, kind, entry, data["key_inputs"])
    damaged = [k for k in data["entries"] if not artifact_cache.cached(folder, k)]
    if damaged:
        raise RuntimeError(f"the artifacts {', '.join(damaged)} of {name} do not match their hashes after shipping")
    return folder


def _holds(folder: Path, kind: str, files: dict[str, str]) -> bool:
    """Does ``folder``'s manifest list every one of ``files`` (path -> hash) for ``kind``? A node's cache may hold
    a kind from an earlier run with other batch sizes or training set-ups."""
    held = artifact_cache.read_manifest(folder).get("artifacts", {}).get(kind, {}).get("files", {})
    return all(held.get(rel) == digest for rel, digest in files.items())


# --------------------------------------------------------------------------- the task
def measure_on_node(config_data: dict[str, Any], cells_data: list[dict[str, Any]], shipped: dict[str, Any],
                    artifacts: dict[str, Any], kinds: list[str], failed: dict[str, str], run_id: str,
                    batch_sizes: tuple[int, ...], machine: str | None, budget_left_s: float | None = None
                    ) -> dict[str, Any]:
    """A Ray task: one group measured on this node (:func:`inferbench.execution.remote.measure_here`), its
    artifacts fetched from the object store where the node's cache lacks them, its rounds kept to what is left of
    --time-budget (``budget_left_s``, when the task was submitted)."""
    ray = import_ray()
    config, cells = received(config_data, cells_data, shipped)
    folder = unpack(artifacts, config.cache_dir, kinds)
    context = ray.get_runtime_context()
    where = {"ray": {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(), "machine": machine,
                     "hostname": socket.gethostname()}}
    return measure_here(config, cells, folder, failed, run_id, batch_sizes, where, budget_left_s)


# --------------------------------------------------------------------------- the driver
class RayGroups:
    """The Ray executor of the pipeline's group loop (:func:`inferbench.execution.pipeline._execute`): each group a
    task on a node reserved whole, submitted when a node that can run it is free (never queued inside Ray: its
    share of --time-budget starts when it is submitted); a group no node can run, or whose node left the cluster,
    comes back failed with why."""

    def __init__(self, config: RunConfig, run_id: str, run_dir: Path, progress: Progress, strict: bool = False) -> None:
        self.ray = import_ray()
        connect(config)
        self.config, self.run_id, self.progress = config, run_id, progress
        self.cluster = nodes()
        self.remote = self.ray.remote(measure_on_node)
        # --pass-env's variables as the driver has them (the cells' identity digests them here), on every node
        self.runtime_env = {"env_vars": passed_env(config.pass_env)} if config.pass_env else None
        self.shipped: dict[str, Any] = {}
        self.running: dict[Any, tuple[str | None, list[CellKey], Path]] = {}
        self.finished: list[Finished] = []
        self.warned: set[str | None] = set()
        self.started = time.monotonic()
        self.cells_left, self.groups_left = 0, 0

    def start(self, machine: str | None, group: list[CellKey], folder: Path, failed: dict[str, str],
              batch_sizes: tuple[int, ...], deadline: Deadline | None) -> None:
        c, config = group[0], self.config
        kinds = kinds_of(group, folder)
        why = unfit(demand(config, machine), self.cluster)
        if why:  # never submitted: Ray would leave it pending for ever
            self.finished.append((machine, group, [_failed(config, cell, why, self.run_id, folder, machine)
                                                   for cell in group]))
            return
        key = f"{folder.name}:{','.join(sorted(kinds))}"
        if key not in self.shipped:
            data = package(folder, kinds)
            self.shipped[key] = {"name": folder.name, "data": self.ray.put(data),
                                 "files": {k: dict(e.get("files", {})) for k, e in data["entries"].items()}}
        left = None if deadline is None else max(0.0, deadline.left())  # the node keeps the rest of the budget
        ref = self.remote.options(num_cpus=0, resources=demand(config, machine), max_retries=RETRIES,
                                  retry_exceptions=False, runtime_env=self.runtime_env).remote(
            encode(config), [encode(cell) for cell in group], registries(group), self.shipped[key], kinds, failed,
            self.run_id, batch_sizes, machine, left)
        self.running[ref] = (machine, group, folder)
        if self.progress.measure_started is None:  # the ETA comes from the groups' phases as the nodes send them back
            self.progress.measuring(self.cells_left, self.groups_left)
        self.progress.say(c.group_label + on_machine(machine),
                          f"submitted: {len(group)} cell{'s' if len(group) > 1 else ''}")

    def busy(self) -> int:
        return len(self.running) + len(self.finished)

    def free(self, machine: str | None) -> bool:
        """Is a node that can run a group for ``machine`` free? (One no node can run: yes, it fails at once.)"""
        need = demand(self.config, machine)
        nodes_for = sum(1 for node in self.cluster if all(node.get(k, 0.0) >= v for k, v in need.items()))
        taken = sum(1 for m, _, _ in self.running.values() if m == machine)
        return nodes_for == 0 or taken < nodes_for

    def wait(self) -> list[Finished]:
        """The groups that ended (at least one): their records, or their cells failed with why."""
        ray, config = self.ray, self.config
        while not self.finished:
            done, _ = ray.wait(list(self.running), num_returns=1, timeout=30.0)
            if not done:
                self.progress.say("ray", f"{len(self.running)} task{'s' if len(self.running) > 1 else ''} running, "
                                  f"{time.monotonic() - self.started:.0f} s")
                alive = nodes()  # a task whose machine left the cluster would wait for ever
                for ref, (machine, group, folder) in list(self.running.items()):
                    why = unfit(demand(config, machine), alive)
                    if why:
                        ray.cancel(ref, force=True)
                        self.running.pop(ref)
                        self.finished.append((machine, group, [_failed(
                            config, cell, f"its node left the cluster: {why}", self.run_id, folder, machine)
                            for cell in group]))
                continue
            machine, group, folder = self.running.pop(done[0])
            try:
                result = ray.get(done[0])
                records = [None if data is None else parse(data, "a record from the cluster")
                           for data in result["records"]]
                self._say_niceness(machine, records)
                self.progress.add_phases(result["phases"])  # the next group's time: as measured, not estimated
            except Exception as exc:  # noqa: BLE001 - a lost node or task: its cells fail, the others go on
                why = _task_failure(exc)
                records = [_failed(config, cell, why, self.run_id, folder, machine) for cell in group]
            self.finished.append((machine, group, records))
        finished, self.finished = self.finished, []
        return finished

    def _say_niceness(self, machine: str | None, records: list[Any]) -> None:
        """Once per machine: its node ran the cells below normal priority (a cluster started by `ray start` without
        RAY_worker_niceness=0), so any other work there took precedence over them; each record says it too."""
        nice = next((r.environment.niceness for r in records if r is not None  # None: a cell left out
                     and r.environment.niceness), None)
        if nice and machine not in self.warned:
            self.warned.add(machine)
            self.progress.say(f"ray{' ' + machine if machine else ''}",
                              f"WARNING: its node ran the cells at nice {nice} (Ray's default for workers): other work "
                              f"there takes precedence over the measurement; start its nodes with {NICENESS}=0 "
                              "(environment.niceness in each record)")

    def cancel(self) -> None:
        for ref in self.running:  # Ctrl-C, SIGTERM: nothing keeps measuring on the cluster
            self.ray.cancel(ref, force=True)


def _task_failure(exc: BaseException) -> str:
    """A task's failure in one line: a node or worker that died (after the retries), or the task's own error."""
    ray = import_ray()
    if isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError)):
        return f"the node measuring it was lost ({type(exc).__name__}), after {RETRIES} retries elsewhere"
    cause = getattr(exc, "cause", None) or exc
    first = (str(cause).strip().splitlines() or [""])[0][:200]
    return f"{type(cause).__name__}: {first}" if first else type(cause).__name__


def _failed(config: RunConfig, cell: CellKey, why: str, run_id: str, folder: Path, machine: str | None) -> Any:
    """The record of a cell that did not run on the cluster, with why."""
    return not_run(config, cell, why, run_id, folder, {"ray": {"machine": machine, "why": "not run"}})
