"""A real single-node Slurm cluster on this machine, for the opt-in layer (``python -m pytest -m slurm``): Debian's
``slurm-wlm``, ``slurmdbd``, ``munge`` and ``mariadb-server`` (docs/distributed.md says how to install them), each
daemon started as root from a private folder, one partition ``debug`` of this node, and Slurm's accounting (which
submitit follows its jobs through) on a private MariaDB. ``python tests/slurm_cluster.py`` starts one and prints its
``SLURM_CONF``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db", "sbatch", "sacctmgr")
# MariaDB listens on a free port of 127.0.0.1 only, with no login (skip-grant-tables): the accounting's store for
# the cluster's lifetime, nothing of the system's own MariaDB or munge touched (munged is started only where none
# runs, and stopped with the cluster).


def missing() -> str | None:
    """Why no cluster can be started here (None: it can)."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]
    if absent:
        return (f"no {', '.join(absent)}: apt-get install slurm-wlm slurmdbd munge mariadb-server "
                "(docs/distributed.md)")
    if os.geteuid() != 0:
        return "the single-node cluster's daemons are started as root"
    return None


def _wait(check, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not come up within {timeout_s:.0f} s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(*command: str, env: dict[str, str] | None = None) -> bool:
    return subprocess.run(command, capture_output=True, env=env, check=False).returncode == 0


def _cpus_and_memory() -> tuple[int, int]:
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=False).stdout
    fields = dict(item.split("=", 1) for item in out.split() if "=" in item)
    return int(fields.get("CPUs", os.cpu_count() or 1)), int(fields.get("RealMemory", 1000)) * 9 // 10


class Cluster:
    """The daemons of one single-node cluster under ``root``; :meth:`env` is what its clients need."""

    def __init__(self, root: Path) -> None:
        self.root, self.host = root, socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.processes: list[subprocess.Popen] = []
        self.munged: Path | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _start(self, *command: str) -> None:
        log = open(self.root / f"{Path(command[0]).name}.out", "ab")  # noqa: SIM115 - the daemon's own
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env()))

    def start(self) -> Cluster:
        root = self.root
        for sub in ("state", "spool", "mysql", "run"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        cpus, memory = _cpus_and_memory()
        socket_path = root / "run" / "mysqld.sock"
        db_port = _free_port()
        self.conf.write_text("\n".join([
            "ClusterName=inferbench", f"SlurmctldHost={self.host}", "AuthType=auth/munge", "SlurmUser=root",
            "SlurmdUser=root", f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
            "SlurmctldPort=6917", "SlurmdPort=6918", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/slurmdbd", f"AccountingStorageHost={self.host}",
            "AccountingStoragePort=6919", "JobAcctGatherType=jobacct_gather/none", "MpiDefault=none",
            "ReturnToService=2", "MinJobAge=30", "KillWait=5", f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            f"NodeName={self.host} CPUs={cpus} RealMemory={memory} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP", ""]))
        dbd = root / "slurmdbd.conf"
        dbd.write_text("\n".join([
            "AuthType=auth/munge", f"DbdHost={self.host}", "DbdPort=6919", "SlurmUser=root",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=root",
            f"PidFile={root / 'run' / 'slurmdbd.pid'}", f"LogFile={root / 'slurmdbd.log'}",
            "StorageLoc=slurm_acct_db", ""]))
        dbd.chmod(0o600)
        # MariaDB answering on its own socket, any login taken (skip-grant-tables): the accounting's store only
        subprocess.run(["mariadb-install-db", f"--datadir={root / 'mysql'}", "--user=root", "--auth-root-"
                        "authentication-method=normal"], capture_output=True, check=True)
        self._start("mariadbd", "--user=root", f"--datadir={root / 'mysql'}", f"--socket={socket_path}",
                    "--bind-address=127.0.0.1", f"--port={db_port}", "--skip-grant-tables",
                    f"--pid-file={root / 'run' / 'mysqld.pid'}")
        _wait(socket_path.exists, "MariaDB")
        if not _answers("munge", "-n"):  # munge's daemon, when none runs: stopped with the cluster
            os.makedirs("/run/munge", exist_ok=True)
            subprocess.run(["/usr/sbin/munged", "--force", f"--pid-file={root / 'run' / 'munged.pid'}"],
                           capture_output=True, check=True)
            self.munged = root / "run" / "munged.pid"
        _wait(lambda: _answers("munge", "-n"), "munged")
        self._start("/usr/sbin/slurmdbd", "-D")
        _wait(lambda: _answers("sacctmgr", "-n", "list", "cluster", env=self.env()), "slurmdbd")
        subprocess.run(["sacctmgr", "-i", "add", "cluster", "inferbench"], capture_output=True, env=self.env(),
                       check=False)
        self._start("/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf))
        _wait(lambda: _answers("sinfo", env=self.env()), "slurmctld")
        self._start("/usr/sbin/slurmd", "-D", "-f", str(self.conf))
        _wait(lambda: "idle" in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                                               env=self.env(), check=False).stdout, "slurmd")
        return self

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, env=self.env(), check=False)
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        if self.munged is not None and self.munged.exists():
            os.kill(int(self.munged.read_text().split()[0]), 15)


if __name__ == "__main__":
    why = missing()
    if why:
        sys.exit(why)
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="slurm-"))).start()
    print(f"export SLURM_CONF={cluster.conf}  # Ctrl-C (or SIGTERM) stops the cluster", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        cluster.stop()
