"""The device's peak FP32 rate, measured once per machine: how close a cell comes to the machine's limit.

A large square FP32 matrix product is about the fastest work a device does per FLOP, so its rate is a
practical ceiling (not the datasheet's): on the CPU through NumPy's BLAS (PyTorch's oneDNN/MKL gave the
same within 2% on this project's 2-core machine, and costs seconds to import); on a GPU through PyTorch
with TF32 off. It runs in a child process with the run's
thread count and controlled environment, best of several repeats after a warm-up, and is cached per
(host, device, threads, library versions) in the artifact cache, so a machine pays for it once
(about 1 s on the CPU). Other work's share of the machine is watched meanwhile (``machine``): a measurement
taken while other work took more of it than a run allows (``valid``: false) is used once, never cached
(a busy machine's peak was once a fifth of the real one and inflated every "% of peak"). Delete
``<cache dir>/peak/`` to measure again.

    python -m inferbench.measure.peak cpu     # prints the measurement as JSON (what the parent runs)
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from ..base.files import atomic_write_text
from ..base.reading import read_json
from .trackers.machine import MAX_OTHER_LOAD, MachineMonitor

METHOD = "best-matmul-fp32"
CPU_SIZE = 2048
GPU_SIZE = 8192


def _best(call: Any, size: int, repeats: int, sync: Any = lambda: None) -> float:
    """GFLOP/s of the fastest of ``repeats`` calls of an ``size``-cubed matrix product (after one warm-up)."""
    call()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def measure(kind: str) -> dict[str, Any]:
    """Run in the child: the peak FP32 rate of ``kind`` ("cpu" or "gpu") by every library that is here."""
    import numpy as np

    rates: dict[str, float] = {}
    if kind == "cpu":
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((CPU_SIZE, CPU_SIZE), dtype=np.float32) for _ in range(2))
        rates["numpy"] = _best(lambda: a @ b, CPU_SIZE, 8)
    elif importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False  # FP32 proper, not TF32 tensor cores
            ga, gb = (torch.randn(GPU_SIZE, GPU_SIZE, device="cuda") for _ in range(2))
            rates["torch"] = _best(lambda: ga @ gb, GPU_SIZE, 10, torch.cuda.synchronize)
    if not rates:
        return {"gflops": None, "method": METHOD, "why": f"no library here multiplies FP32 matrices on the {kind}"}
    best = max(rates, key=rates.__getitem__)
    return {"gflops": round(rates[best], 1), "method": METHOD, "library": best,
            "by_library": {k: round(v, 1) for k, v in rates.items()},
            "size": CPU_SIZE if kind == "cpu" else GPU_SIZE}


def peak_fp32(kind: str, key: dict[str, Any], env: dict[str, str], cache_dir: str) -> dict[str, Any]:
    """The cached measurement for this machine (``key``: host, device, threads), else a fresh one from a
    child process started with ``env``; never raises (a failure is a ``why``)."""
    versions = {}
    for name in ("numpy", "torch"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    full = {**key, "kind": kind, "versions": versions, "format": 2}  # 2: only valid measurements are cached
    digest = hashlib.sha256(json.dumps(full, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "peak" / f"{digest}.json"
    try:
        return read_json(path, 2**20, "kept peak")
    except ValueError:
        pass
    try:
        done = subprocess.run([sys.executable, "-m", __name__, kind], env=env, capture_output=True, text=True,
                              timeout=300, check=True)
        result = {**json.loads(done.stdout.strip().splitlines()[-1]), "threads": key.get("threads"),
                  "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return {"gflops": None, "method": METHOD, "why": f"the measurement failed: {str(exc).splitlines()[0][:200]}"}
    busy = (result.get("machine") or {}).get("other_cores")
    result["valid"] = None if busy is None else busy <= MAX_OTHER_LOAD * max(int(key.get("threads") or 1), 1)
    if result.get("gflops") and result["valid"]:  # a measurement on a busy machine is never cached

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(result, indent=1))
        except OSError:
            pass  # measured again next time
    return result


def measured_with_machine(kind: str) -> dict[str, Any]:
    """:func:`measure`, with how much of the machine other work took meanwhile (``machine``)."""
    monitor = MachineMonitor()
    monitor.start()
    start = time.perf_counter()
    result = measure(kind)
    return {**result, "machine": monitor.stop(time.perf_counter() - start)}


if __name__ == "__main__":
    print(json.dumps(measured_with_machine(sys.argv[1])))
