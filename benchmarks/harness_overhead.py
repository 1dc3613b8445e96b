"""How much does inferbench's harness add to what it measures?

For ``onnxrt`` and ``torch``: in one child process with inferbench's thread settings, alternate
short blocks of (a) a bare loop ``t = perf_counter(); call(); lat.append(perf_counter() - t)`` on the
same loaded artifact and (b) inferbench's own runner + measurement loop. Each adjacent pair of
blocks gives a ratio of median latencies; their geometric mean (with a paired t 95% interval,
``inferbench.measure.stats.paired_blocks``) is the harness overhead (target: within 2%). Short alternating
blocks cancel the slow drift of a shared machine, which moves block medians by far more than 2%.

With ``--sampler`` it measures instead what the power sampler costs the measurement: blocks of
inferbench's loop alone against blocks of the same loop with the energy monitor running (its
sampler thread reading the sensor every 20 ms). The sensor is the real one where the machine has
it (NVML on a GPU, RAPL's counter on a CPU); elsewhere a stand-in that makes one /proc read per
sample, so at least the thread's wake-ups are measured, and the output says which. ``--device gpu``
runs ``torch`` on the GPU (the first in PCI bus order) with NVML as the sensor: the sampler's cost where
it matters most, a small model whose every call is launch-bound on the CPU thread.

With ``--wall-time`` it also times the default ``python -m inferbench.run`` end to end, cold (empty
artifact cache) and warm.

    python benchmarks/harness_overhead.py [--blocks 30] [--block-seconds 0.5] [--sampler] [--device cpu|gpu]
                                          [--cache-dir DIR] [--wall-time]

Looks inside: the one timed loop (measure.timing.run_block) against a bare loop over the same call; the Python API
(inferbench.api) has no such piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


class StandInSensor:
    """Where there is no NVML or RAPL: one small /proc read per sample, about an NVML query's cost."""

    name, wrap_j = "stand-in (/proc/stat read per sample; no NVML or RAPL on this machine)", None

    def energy_j(self) -> None:
        return None

    def power_w(self) -> float:
        with open("/proc/stat", "rb") as fh:
            return float(len(fh.read(256)))


def child(framework: str, folder: str, blocks: int, block_s: float, threads: int, sampler: bool,
          gpu_uuid: str | None = None) -> dict:
    from inferbench.measure.timing import run_block
    from inferbench.registry.artifacts import EXPORTERS
    from inferbench.registry.frameworks import get_framework, load_runner
    from inferbench.registry.inputs import make_inputs
    from inferbench.registry.models import get_model
    from inferbench.runners.base import LoadContext
    from inferbench.spec import TimingConfig

    fw = get_framework(framework)
    spec = get_model("mobilenet_v3_large")
    device = "gpu" if gpu_uuid else "cpu"
    ctx = LoadContext(Path(folder), Path(folder) / EXPORTERS[fw.artifact].path, spec, 224, device, threads, 0)
    runner = load_runner(fw)()
    runner.load(ctx)
    x = make_inputs(spec, 1, 224, 3)
    prepared = runner.prepare(x)

    # the bare call, written the way a one-off script would
    if framework == "onnxrt":
        sess, feed = runner.session, prepared

        def bare() -> object:
            return sess.run(None, feed)
    else:
        import torch

        module, tensor = runner.module, prepared
        sync = torch.cuda.synchronize if gpu_uuid else (lambda: None)

        def bare() -> object:
            with torch.inference_mode():
                out = module(tensor)
            sync()
            return out

    for _ in range(20):
        bare()
    cfg = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=block_s, min_iterations=20, rounds=1)

    def bare_block() -> list[float]:
        lat = []
        end = time.perf_counter() + block_s
        while time.perf_counter() < end or len(lat) < 20:
            t = time.perf_counter()
            bare()
            lat.append(time.perf_counter() - t)
        return lat

    def harness_block(monitors: list | None = None) -> list[float]:
        return run_block(lambda: runner.call(prepared), runner.synchronize, cfg, 0, monitors=monitors or ()).latencies_s

    sensor_name = None
    if sampler:  # baseline: inferbench's loop alone; candidate: the same loop with the energy monitor
        from inferbench.measure.trackers.energy import EnergyMonitor
        from inferbench.measure.trackers.rapl import RaplSensor

        if gpu_uuid:  # NVML on a GPU; RAPL where the kernel exposes it
            from inferbench.measure.trackers.nvml import NvmlSensor

            try:
                sensor = NvmlSensor(gpu_uuid)
            except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError
                sys.exit(f"no NVML sensor: {exc}")
        else:
            sensor = RaplSensor.find()[0] or StandInSensor()
        sensor_name = sensor.name
        blocks_ab = (harness_block, lambda: harness_block([("energy", EnergyMonitor(sensor))]))
    else:  # baseline: a bare loop; candidate: inferbench's loop
        blocks_ab = (bare_block, harness_block)
    medians: tuple[list[float], list[float]] = ([], [])
    for _ in range(blocks):
        for block, out in zip(blocks_ab, medians):
            out.append(float(np.median(block())) * 1e3)
    from inferbench.measure.stats import paired_blocks

    ratio = paired_blocks(medians[1], medians[0])  # candidate over baseline, paired by block
    return {"framework": framework, "baseline_ms": float(np.median(medians[0])),
            "candidate_ms": float(np.median(medians[1])), "ratio": ratio["ratio"],
            "ratio_ci95": ratio["ci95"], "pairs": blocks, "sensor": sensor_name}


def ensure_artifacts(cache_dir: str, device: str = "cpu", frameworks: list[str] | None = None,
                     model: str = "mobilenet_v3_large", resolution: int = 224) -> Path:
    """The model's artifacts for ``frameworks`` (default: onnxrt and torch, torch alone on a GPU), exported by one
    short run of them into ``cache_dir``: the cache folder (benchmarks/gpu_referee.py uses it too)."""
    import contextlib
    import io

    from inferbench.exporters import cache, key_inputs
    from inferbench.run import main

    keys = frameworks or (["onnxrt", "torch"] if device == "cpu" else ["torch"])
    said = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
        code = main(["--framework", ",".join(keys), "--device", device, "--model", model,
                     "--resolution", str(resolution), "--keras-backend", "jax" if "jax" in keys else "tensorflow",
                     "--duration", "0", "--min-iterations", "1", "--warmup", "0", "--rounds", "1",
                     "--warmup-seconds", "0", "--output-dir", tempfile.mkdtemp(), "--cache-dir", cache_dir])
    if code != 0:  # nothing measured: exit status 2, so that benchmarks/gpu_run.sh runs this step again next call
        last = [line for line in said.getvalue().splitlines() if line.strip()][-3:]
        print(f"could not export {model} at {resolution} for {', '.join(keys)}:", *last, sep="\n  ", file=sys.stderr)
        sys.exit(2)
    return cache.artifact_dir(Path(cache_dir), key_inputs(model, resolution, "random", 0))


def gpu_and_env(device: str, threads: int) -> tuple[Any, dict[str, str]]:
    """The GPU to measure on (the first in PCI bus order; None on a CPU) and the children's environment: inferbench's
    thread settings, that GPU alone (benchmarks/gpu_referee.py uses it too)."""
    from inferbench.execution.childenv import thread_env

    gpu = None
    if device == "gpu":
        from inferbench.base.device import resolve

        gpu = resolve("gpu", 0).gpu
    return gpu, {**os.environ, **thread_env(threads), "CUDA_VISIBLE_DEVICES": gpu.uuid if gpu else "",
                 "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def wall_time() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("cold (empty artifact cache)", "warm (cached artifacts)"):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "inferbench.run", "--cache-dir", f"{tmp}/cache",
                            "--output-dir", f"{tmp}/out"], check=False, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            print(f"python -m inferbench.run, {label}: {time.perf_counter() - t0:.0f} s wall")


def parser() -> argparse.ArgumentParser:
    """The script's flags (benchmarks/gpu_run.sh's calls are parsed by it in tests/test_gpu_kit.py)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=30, help="pairs of alternating blocks (default: %(default)s)")
    p.add_argument("--block-seconds", type=float, default=0.5, help="seconds per block (default: %(default)s)")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bench-cache"))
    p.add_argument("--sampler", action="store_true", help="measure the power sampler's cost instead")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="cpu: onnxrt and torch on the CPU; gpu: torch on the first GPU (default: %(default)s)")
    p.add_argument("--wall-time", action="store_true")
    p.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "FOLDER"), help=argparse.SUPPRESS)
    p.add_argument("--gpu-uuid", help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    from inferbench.base.device import default_threads

    threads = default_threads()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.blocks, args.block_seconds, threads,
                               args.sampler, args.gpu_uuid)))
        return
    folder = ensure_artifacts(args.cache_dir, args.device)
    gpu, env = gpu_and_env(args.device, threads)
    what, a, b = (("power-sampler overhead", "inferbench loop", "with sampler") if args.sampler
                  else ("harness overhead", "bare loop", "inferbench"))
    where = f"on {gpu.name} ({gpu.uuid})" if gpu else "on the CPU"
    print(f"{what}, mobilenet_v3_large 224 bs1 {where}, {threads} threads, {args.blocks} pairs of "
          f"{args.block_seconds} s blocks")
    for fw in ("torch",) if gpu else ("onnxrt", "torch"):
        out = subprocess.run([sys.executable, __file__, "--blocks", str(args.blocks), "--block-seconds",
                              str(args.block_seconds), "--child", fw, str(folder)]
                             + (["--sampler"] if args.sampler else []) + (["--gpu-uuid", gpu.uuid] if gpu else []),
                             env=env, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        lo, hi = r["ratio_ci95"]
        print(f"  {fw:<7} {a} p50 {r['baseline_ms']:.3f} ms   {b} p50 {r['candidate_ms']:.3f} ms   "
              f"ratio = {r['ratio']:.4f} [95% CI {lo:.4f}-{hi:.4f}] over {r['pairs']} block pairs")
        if r["sensor"]:
            print(f"          sensor: {r['sensor']}")
    if args.wall_time:
        wall_time()


if __name__ == "__main__":
    main()
