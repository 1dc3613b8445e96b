"""The referee: inferbench's cells against bare loops timed as torch's and JAX's own documentation times them.

For each variant, precision and batch size, one child process loads inferbench's runner of the cell (its artifact,
its settings) and, beside it, a bare loop over the same network written as a careful engineer would from the
libraries' documentation — no inferbench code on its timed path:

- torch: the module in eval and inference mode, channels-last, its input made once on the device; a CUDA graph
  captured after warm-up on a side stream and replayed (``torch.cuda.graphs``); FP32 with TF32 off, FP16 by
  ``.half()``;
- JAX: ``jax.jit`` of the Keras model's stateless call, weights and input put on the device once;
- latency: single calls, each synchronised (CUDA events on a GPU: ``elapsed_time``; ``block_until_ready`` for JAX;
  ``perf_counter`` on a CPU); throughput: the same call issued back to back, one synchronisation at the end
  (pipelined); energy: NVML's total-energy counter around the pipelined window (a GPU only).

Blocks of the bare loop and of inferbench's own measurement loop (``measure.timing.run_block``) alternate in the
process; each adjacent pair gives a ratio, inferbench over bare, and their geometric mean with a paired t 95%
interval (``measure.stats.paired_blocks``) is the row: latency (p50 over p50) and throughput (inferbench's closed
loop images/s over the bare pipelined loop's). One table, ``referee.md`` and ``referee.json`` in ``--out``.

    python benchmarks/gpu_referee.py [--device gpu|cpu] [--batch-sizes 1,256] [--precisions fp32,fp16]
                                     [--variants eager,graph,jax] [--blocks 6] [--block-seconds 0.5]
                                     [--model mobilenet_v3_large] [--resolution 224] [--cache-dir DIR] [--out DIR]

On a CPU (the rehearsal: ``benchmarks/gpu_run.sh`` with ``GPU_RUN_DEVICE=cpu``) the CUDA graph variant and FP16 are
skipped and said so.

Looks inside: a runner and the one timed loop (measure.timing.run_block) against bare loops over the same network;
the Python API (inferbench.api) has no such piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: variant -> (inferbench's framework, its runner options, what it needs)
VARIANTS = {"eager": ("torch-native", {"channels_last": True}, "torch eager, channels-last"),
            "graph": ("torch-native", {"channels_last": True, "cuda_graphs": True}, "torch CUDA graph, channels-last"),
            "jax": ("jax", {"keras_backend": "jax"}, "jax.jit of the stateless call")}


def skipped(variant: str, precision: str, device: str) -> str | None:
    """Why a row is not measured on ``device``, or None."""
    if device != "gpu" and (variant == "graph" or precision == "fp16"):
        return "CUDA graphs and FP16 need a GPU"
    if variant == "jax" and precision != "fp32":
        return "inferbench's jax runs FP32 only"
    return None


def bare_torch(runner: Any, x: np.ndarray, graph: bool) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """The bare call and its synchronisation: the runner's own module before compilation, as torch documents it."""
    torch = runner.torch
    module, dev = runner.plain, runner.dev
    t = torch.from_numpy(x).permute(0, 3, 1, 2).to(dev, runner.dtype).contiguous(memory_format=torch.channels_last)
    def sync(out: Any = None) -> None:  # one signature with JAX's: the output, where the library needs it
        if dev.type == "cuda":
            torch.cuda.synchronize()

    if not graph:
        def call() -> Any:
            with torch.inference_mode():
                return module(t)
        return call, sync
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        for _ in range(3):  # warm-up on a side stream before capture, as torch.cuda.graphs asks
            module(t)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.inference_mode():
        module(t)
    return g.replay, sync


def bare_jax(ctx: Any, x: np.ndarray) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """``jax.jit`` of the Keras model's stateless call, loaded again here (not the runner's function)."""
    import jax

    from inferbench.registry.keras_models import load_keras

    model = load_keras(ctx.path)
    device = jax.devices()[0]
    params = jax.device_put(([v.value for v in model.trainable_variables],
                             [v.value for v in model.non_trainable_variables]), device)
    fn = jax.jit(lambda p, v: model.stateless_call(p[0], p[1], v, training=False)[0])
    xs = jax.device_put(x, device)
    return lambda: fn(params, xs), lambda out: out.block_until_ready()


def latency_block(call: Callable[[], Any], sync: Callable[[Any], None], seconds: float, cuda: Any) -> list[float]:
    """Single synchronised calls for ``seconds``: their latencies in s (CUDA events on a GPU)."""
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(out) < 5:
        if cuda is not None:
            a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            a.record()
            y = call()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
            del y
        else:
            t = time.perf_counter()
            sync(call())
            out.append(time.perf_counter() - t)
    return out


def pipelined(call: Callable[[], Any], sync: Callable[[Any], None], n: int, energy: Callable[[], float | None]) \
        -> tuple[float, float | None]:
    """``n`` calls back to back, one synchronisation: (seconds, joules by NVML's counter or None)."""
    e0, t0 = energy(), time.perf_counter()
    y = None
    for _ in range(n):
        y = call()
    sync(y)
    seconds, e1 = time.perf_counter() - t0, energy()
    return seconds, (e1 - e0) if e0 is not None and e1 is not None else None


def nvml_energy(gpu_uuid: str | None) -> Callable[[], float | None]:
    """NVML's total energy counter in J (None without a GPU or NVML)."""
    if not gpu_uuid:
        return lambda: None
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3


def child(variant: str, combos: list[tuple[str, int]], folder: str, model: str, resolution: int, blocks: int,
          block_s: float, threads: int, gpu_uuid: str | None) -> list[dict[str, Any]]:
    """Every (precision, batch) row of ``variant`` in this one process (the library's start paid once); a row that
    fails says why and the next one runs."""
    rows = []
    for precision, batch in combos:
        try:
            rows.append(row(variant, precision, batch, folder, model, resolution, blocks, block_s, threads, gpu_uuid))
        except Exception as exc:  # noqa: BLE001 - a row's failure is its result
            rows.append({"variant": variant, "precision": precision, "batch": batch,
                         "skipped": f"failed: {type(exc).__name__}: {str(exc)[:200]}"})
        gc.collect()
    return rows


def row(variant: str, precision: str, batch: int, folder: str, model: str, resolution: int, blocks: int,
        block_s: float, threads: int, gpu_uuid: str | None) -> dict[str, Any]:
    from inferbench.measure.stats import paired_blocks
    from inferbench.measure.timing import run_block
    from inferbench.registry.artifacts import EXPORTERS
    from inferbench.registry.frameworks import get_framework, load_runner
    from inferbench.registry.inputs import make_inputs
    from inferbench.registry.models import get_model
    from inferbench.runners.base import LoadContext
    from inferbench.spec import RunnerOptions, TimingConfig

    key, options, _ = VARIANTS[variant]
    fw, spec, device = get_framework(key), get_model(model), "gpu" if gpu_uuid else "cpu"
    artifact = fw.artifact_for(spec)
    ctx = LoadContext(Path(folder), None if artifact == "none" else Path(folder) / EXPORTERS[artifact].path, spec,
                      resolution, device, threads, 0, precision, RunnerOptions(**options), batch, (batch,))
    runner = load_runner(fw)()
    runner.load(ctx)
    x = make_inputs(spec, batch, resolution, 3)
    prepared = runner.prepare(x)
    call, sync = bare_jax(ctx, x) if key == "jax" else bare_torch(runner, x, variant == "graph")
    cuda = runner.torch.cuda if key != "jax" and device == "gpu" else None
    energy = nvml_energy(gpu_uuid)
    cfg = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=block_s, min_iterations=5, rounds=1)
    for _ in range(10):  # both warm: compilation, autotuning, allocator
        sync(call())
        runner.synchronize(runner.call(prepared))
    rows: dict[str, list[float]] = {k: [] for k in ("bare_ms", "ib_ms", "bare_ips", "ib_ips", "bare_j")}
    for _ in range(blocks):
        lat = latency_block(call, sync, block_s, cuda)
        n = max(5, int(block_s / max(float(np.median(lat)), 1e-6)))
        seconds, joules = pipelined(call, sync, n, energy)
        ib = run_block(lambda: runner.call(prepared), runner.synchronize, cfg, 0).latencies_s
        rows["bare_ms"].append(float(np.median(lat)) * 1e3)
        rows["ib_ms"].append(float(np.median(ib)) * 1e3)
        rows["bare_ips"].append(n * batch / seconds)
        rows["ib_ips"].append(len(ib) * batch / float(np.sum(ib)))
        if joules is not None:
            rows["bare_j"].append(joules / (n * batch))
    return {"variant": variant, "precision": precision, "batch": batch,
            "bare_p50_ms": float(np.median(rows["bare_ms"])), "inferbench_p50_ms": float(np.median(rows["ib_ms"])),
            "latency": paired_blocks(rows["ib_ms"], rows["bare_ms"]),
            "bare_pipelined_ips": float(np.median(rows["bare_ips"])),
            "inferbench_ips": float(np.median(rows["ib_ips"])),
            "throughput": paired_blocks(rows["ib_ips"], rows["bare_ips"]),
            "bare_j_per_image": float(np.median(rows["bare_j"])) if rows["bare_j"] else None,
            "runner": runner.details()}


def _ratio(r: dict[str, Any]) -> str:
    lo_hi = r["ci95"]
    return f"{r['ratio']:.3f}" + (f" [{lo_hi[0]:.3f}–{lo_hi[1]:.3f}]" if lo_hi else "")


def table(rows: list[dict[str, Any]], where: str) -> str:
    head = [f"# The referee: inferbench over bare loops, {where}", "",
            "Latency: inferbench's p50 over the bare loop's synchronised p50 (< 1: inferbench's is shorter); "
            "throughput: inferbench's closed-loop images/s over the bare pipelined loop's. Each a geometric mean "
            "of adjacent block pairs in one process, with its paired 95% interval.", "",
            "| variant | precision | batch | bare p50 ms | inferbench p50 ms | latency ratio [95% CI] | "
            "bare pipelined img/s | inferbench img/s | throughput ratio [95% CI] | bare J/image |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    body = []
    for r in rows:
        if "skipped" in r:
            body.append(f"| {VARIANTS[r['variant']][2]} | {r['precision']} | {r['batch']} | "
                        f"not measured: {r['skipped']} |||||||")
            continue
        joules = f"{r['bare_j_per_image']:.4f}" if r["bare_j_per_image"] is not None else "—"
        body.append(f"| {VARIANTS[r['variant']][2]} | {r['precision']} | {r['batch']} | {r['bare_p50_ms']:.3f} | "
                    f"{r['inferbench_p50_ms']:.3f} | {_ratio(r['latency'])} | {r['bare_pipelined_ips']:,.0f} | "
                    f"{r['inferbench_ips']:,.0f} | {_ratio(r['throughput'])} | {joules} |")
    return "\n".join(head + body) + "\n"


def parser() -> argparse.ArgumentParser:
    """The script's flags (benchmarks/gpu_run.sh's calls are parsed by it in tests/test_gpu_kit.py)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    p.add_argument("--batch-sizes", default="1,256")
    p.add_argument("--precisions", default="fp32,fp16")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--blocks", type=int, default=6, help="block pairs per row (default: %(default)s)")
    p.add_argument("--block-seconds", type=float, default=0.5)
    p.add_argument("--model", default="mobilenet_v3_large")
    p.add_argument("--resolution", type=int, default=224)
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bench-cache"))
    p.add_argument("--out", type=Path, default=Path("referee"))
    p.add_argument("--child", nargs=3, metavar=("VARIANT", "PRECISION:BATCH,...", "FOLDER"), help=argparse.SUPPRESS)
    p.add_argument("--gpu-uuid", help=argparse.SUPPRESS)
    return p


def measure(variant: str, combos: list[tuple[str, int]], folder: Path, args: argparse.Namespace, gpu: Any,
            env: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of ``variant``, measured in one child process (its rows, or each named failed with the process's
    last line)."""
    done = subprocess.run([sys.executable, __file__, "--child", variant, ",".join(f"{p}:{b}" for p, b in combos),
                           str(folder), "--model", args.model, "--resolution", str(args.resolution), "--blocks",
                           str(args.blocks), "--block-seconds", str(args.block_seconds)]
                          + (["--gpu-uuid", gpu.uuid] if gpu else []), env=env, capture_output=True, text=True)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    why = f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    return [{"variant": variant, "precision": p, "batch": b, "skipped": why} for p, b in combos]


def main() -> None:
    args = parser().parse_args()
    from inferbench.base.device import default_threads

    threads = default_threads()
    if args.child:
        variant, combos, folder = args.child
        pairs = [(c.split(":")[0], int(c.split(":")[1])) for c in combos.split(",")]
        print(json.dumps(child(variant, pairs, folder, args.model, args.resolution, args.blocks, args.block_seconds,
                               threads, args.gpu_uuid)))
        return
    from harness_overhead import ensure_artifacts, gpu_and_env  # the same exports and children (benchmarks/)

    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        sys.exit(f"--variants: {', '.join(unknown)} unknown; known: {', '.join(VARIANTS)}")
    gpu, env = gpu_and_env(args.device, threads)
    keys = sorted({VARIANTS[v][0] for v in variants})
    folder = ensure_artifacts(args.cache_dir, args.device, keys, args.model, args.resolution)
    env["KERAS_BACKEND"] = "jax"
    where = f"{args.model} {args.resolution} px on {gpu.name} ({gpu.uuid})" if gpu else \
        f"{args.model} {args.resolution} px on the CPU, {threads} threads"
    rows = []
    for variant in variants:
        combos = [(p, int(b)) for p in args.precisions.split(",") for b in args.batch_sizes.split(",")]
        said = [{"variant": variant, "precision": p, "batch": b, "skipped": skipped(variant, p, args.device)}
                for p, b in combos if skipped(variant, p, args.device)]
        todo = [(p, b) for p, b in combos if not skipped(variant, p, args.device)]
        measured = measure(variant, todo, folder, args, gpu, env) if todo else []
        rows += measured + said
        for r in measured + said:
            print(table([r], where).splitlines()[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "referee.json").write_text(json.dumps({"where": where, "rows": rows}, indent=1))
    (args.out / "referee.md").write_text(table(rows, where))
    print(f"wrote {args.out / 'referee.md'}")


if __name__ == "__main__":
    main()
