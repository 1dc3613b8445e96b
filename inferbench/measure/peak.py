"""The device's peak FP32 rate and memory bandwidth, measured once per machine: how close a cell comes to the
machine's limits (its roofline: :func:`inferbench.records.roofline.roofline`).

A large square FP32 matrix product is about the fastest work a device does per FLOP, so its rate is a
practical ceiling (not the datasheet's): on the CPU through NumPy's BLAS (PyTorch's oneDNN/MKL gave the
same within 2% on this project's 2-core machine, and costs seconds to import); on a GPU through PyTorch
with TF32 off. It runs in a child process with the run's
thread count and controlled environment, best of several repeats after a warm-up, and is cached per
(host, device, threads, library versions) in the artifact cache, so a machine pays for it once
(a few seconds on the CPU, most of it importing torch for the reduced precisions).

Beside it, each reduced precision's own peak (``by_precision``: BF16 and FP16 by torch's matrix product in that
type, INT8 by ``torch._int_mm``, int8 in and int32 out, counted as two operations a multiply-add as FLOPs are), the
roof of a row at that precision; on a CPU only where it has the precision's instructions (an emulated rate is no
roof: FP16 ran at 0.3 GFLOP/s on an AVX-512 CPU without avx512_fp16, against 207 for FP32), said otherwise.

The memory bandwidth beside it (``memory``): on the CPU, the better of STREAM's Add (``a = b + c``: two streams
read, one written, as the triad) and Copy (``a = b``) kernels over float32 arrays four times the last-level cache (at
least 256 MiB in all), split in chunks among the run's threads (NumPy releases the GIL in its loops), best of
several passes; on a GPU a large device-to-device copy. Counted as STREAM counts: the bytes the kernel reads and
writes. Both, because a roof is the best a kernel attains: NumPy's Add reads each line it stores to first (16
bytes moved for 12 counted), where its Copy is a ``memcpy`` that streams large stores past the cache; on a 2-core
Intel Xeon (AVX-512, 2026-12-07) a one-thread copy ran at 179% of Add's figure, 23 against 12.9 GB/s.

Other work's share of the machine is watched meanwhile (``machine``): a measurement
taken while other work took more of it than a run allows (``valid``: false) is used once, never cached
(a busy machine's peak was once a fifth of the real one and inflated every "% of peak"). Delete
``<cache dir>/peak/`` to measure again.

    python -m inferbench.measure.peak cpu [THREADS]    # prints the measurement as JSON (what the parent runs)
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
REDUCED = ("bf16", "fp16", "int8")
CPU_SIZE = 2048
GPU_SIZE = 8192
BANDWIDTH_METHOD = {"cpu": "stream-add-or-copy-float32-numpy-threads", "gpu": "device-to-device-copy-torch"}
MIN_WORKING_SET = 256 * 2**20  # bytes: the CPU kernel's three arrays at least, and four times the last-level cache
GPU_COPY = 2**30  # bytes copied by a GPU's device-to-device copy


def _fastest(call: Any, repeats: int, sync: Any = lambda: None) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``call`` (after one warm-up; ``sync`` waits for a device)."""
    call()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def _best(call: Any, size: int, repeats: int, sync: Any = lambda: None) -> float:
    """GFLOP/s of the fastest of ``repeats`` calls of an ``size``-cubed matrix product (after one warm-up)."""
    return 2 * size**3 / _fastest(call, repeats, sync) / 1e9


def last_level_cache() -> int | None:
    """The CPU's last-level cache in bytes (Linux's sysfs: the highest cache level of cpu0), None where not said."""
    levels = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        try:
            levels[level] = int(size.rstrip("KMG")) * scale
        except ValueError:
            continue
    return levels[max(levels)] if levels else None


def stream(threads: int, working_set: int, repeats: int = 6) -> dict[str, float]:
    """GB/s of STREAM's Add (``a = b + c``, float32; 12 bytes a value: two read, one written) and Copy (``a = b``;
    8 bytes) over three arrays of ``working_set`` bytes in all, in chunks among ``threads`` threads, each the best
    of ``repeats`` passes after a warm-up."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    n = working_set // 12
    b, c = np.ones(n, dtype=np.float32), np.full(n, 2.0, dtype=np.float32)
    a = np.empty_like(b)
    bounds = np.linspace(0, n, max(threads, 1) + 1, dtype=np.int64)
    parts = [slice(int(lo), int(hi)) for lo, hi in zip(bounds, bounds[1:])]
    with ThreadPoolExecutor(max(threads, 1)) as pool:
        add = _fastest(lambda: list(pool.map(lambda part: np.add(b[part], c[part], out=a[part]), parts)), repeats)
        copy = _fastest(lambda: list(pool.map(lambda part: np.copyto(a[part], b[part]), parts)), repeats)
    return {"add": 12 * n / add / 1e9, "copy": 8 * n / copy / 1e9}


def measure_bandwidth(kind: str, threads: int) -> dict[str, Any]:
    """The device's memory bandwidth (GB/s): the better of :func:`stream`'s kernels (each said in ``kernels``), or
    a GPU's device-to-device copy."""
    if kind == "cpu":
        llc = last_level_cache()
        working_set = max(MIN_WORKING_SET, 4 * (llc or 0))
        kernels = stream(threads, working_set)
        return {"gbps": round(max(kernels.values()), 1), "method": BANDWIDTH_METHOD[kind],
                "kernels": {k: round(v, 1) for k, v in kernels.items()},
                "working_set_mb": round(working_set / 2**20), "last_level_cache_mb": llc and round(llc / 2**20, 1),
                "threads": threads}
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            src = torch.empty(GPU_COPY // 4, dtype=torch.float32, device="cuda")
            dst = torch.empty_like(src)

            seconds = _fastest(lambda: dst.copy_(src), 10, torch.cuda.synchronize)
            return {"gbps": round(2 * GPU_COPY / seconds / 1e9, 1), "method": BANDWIDTH_METHOD[kind],
                    "working_set_mb": round(2 * GPU_COPY / 2**20)}
    return {"gbps": None, "method": BANDWIDTH_METHOD.get(kind), "why": f"no library here copies memory on the {kind}"}


def reduced_peaks(kind: str) -> dict[str, dict[str, Any]]:
    """The peak rate of each of :data:`REDUCED` on ``kind`` by torch (GFLOP/s, or INT8 GOP/s), or why not."""
    from ..base.machine import cpu_precision_refusal

    if importlib.util.find_spec("torch") is None:
        return {p: {"gflops": None, "why": "torch is not installed"} for p in REDUCED}
    import torch

    gpu = kind == "gpu" and torch.cuda.is_available()
    if kind == "gpu" and not gpu:
        return {p: {"gflops": None, "why": "torch sees no CUDA device"} for p in REDUCED}
    device, size, sync = ("cuda", GPU_SIZE, torch.cuda.synchronize) if gpu else ("cpu", CPU_SIZE, lambda: None)
    out: dict[str, dict[str, Any]] = {}
    for precision in REDUCED:
        refusal = None if gpu else cpu_precision_refusal(precision)
        if refusal:
            out[precision] = {"gflops": None, "why": refusal.split(": ", 1)[1]}
            continue
        call, op = _product(torch, precision, size, device)
        try:
            out[precision] = {"gflops": round(_best(call, size, 8, sync), 1), "library": "torch", "op": op,
                              "size": size}
        except RuntimeError as exc:  # a build or device without the kernel
            out[precision] = {"gflops": None, "why": str(exc).splitlines()[0][:200]}
    return out


def _product(torch: Any, precision: str, size: int, device: str) -> tuple[Any, str]:
    """A ``size``-squared matrix product in ``precision`` on ``device`` (INT8: ``torch._int_mm``), and its name."""
    if precision == "int8":
        q = torch.randint(-64, 64, (size, size), dtype=torch.int8, device=device)
        return (lambda: torch._int_mm(q, q)), "torch._int_mm"
    a = torch.randn(size, size, device=device).to(torch.bfloat16 if precision == "bf16" else torch.float16)
    return (lambda: a @ a), "torch.matmul"


def measure(kind: str, threads: int = 1) -> dict[str, Any]:
    """Run in the child: the peak FP32 rate of ``kind`` ("cpu" or "gpu") by every library that is here, and its
    memory bandwidth (``memory``)."""
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
    memory, reduced = measure_bandwidth(kind, threads), reduced_peaks(kind)
    if not rates:
        return {"gflops": None, "method": METHOD, "why": f"no library here multiplies FP32 matrices on the {kind}",
                "memory": memory, "by_precision": reduced}
    best = max(rates, key=rates.__getitem__)
    return {"gflops": round(rates[best], 1), "method": METHOD, "library": best,
            "by_library": {k: round(v, 1) for k, v in rates.items()},
            "size": CPU_SIZE if kind == "cpu" else GPU_SIZE, "memory": memory, "by_precision": reduced}


def peak_fp32(kind: str, key: dict[str, Any], env: dict[str, str], cache_dir: str) -> dict[str, Any]:
    """The cached measurement for this machine (``key``: host, device, threads), else a fresh one from a
    child process started with ``env``; never raises (a failure is a ``why``)."""
    versions = {}
    for name in ("numpy", "torch"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    full = {**key, "kind": kind, "versions": versions, "format": 5}  # 3: bandwidth; 4: reduced precisions; 5: Copy
    digest = hashlib.sha256(json.dumps(full, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "peak" / f"{digest}.json"
    try:
        return read_json(path, 2**20, "kept peak")
    except ValueError:
        pass
    try:
        done = subprocess.run([sys.executable, "-m", __name__, kind, str(key.get("threads") or 1)], env=env,
                              capture_output=True, text=True,
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


def measured_with_machine(kind: str, threads: int = 1) -> dict[str, Any]:
    """:func:`measure`, with how much of the machine other work took meanwhile (``machine``)."""
    monitor = MachineMonitor()
    monitor.start()
    start = time.perf_counter()
    result = measure(kind, threads)
    return {**result, "machine": monitor.stop(time.perf_counter() - start)}


if __name__ == "__main__":
    print(json.dumps(measured_with_machine(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)))
