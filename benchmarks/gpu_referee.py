"""The referee: inferbench's cells against bare loops timed as torch's and JAX's own documentation times them.

For each variant, precision and batch size, a child process loads inferbench's runner of the cell (its artifact,
its settings) and, beside it, a bare loop over the same network written as a careful engineer would from the
libraries' documentation — no inferbench code on its timed path:

- torch: the module in eval and inference mode, channels-last, its input made once on the device; a CUDA graph
  captured after warm-up on a side stream and replayed (``torch.cuda.graphs``); FP32 with TF32 off, FP16 by
  ``.half()``;
- JAX: ``jax.jit`` of the Keras model's stateless call, weights and input put on the device once;
- latency: single calls, each synchronised (``torch.cuda.synchronize``, JAX's ``block_until_ready``), on the host's
  clock and, on a GPU, by CUDA events around the call (``elapsed_time``); throughput: the same call issued back to
  back, one synchronisation at the end (pipelined); energy: NVML's total-energy counter around the pipelined window
  (a GPU only; at least 1 s: the counter moves about every 100 ms; idle power included), and around inferbench's
  block beside it (as long), so the energy ratio is inferbench's J/image over the bare loop's.

Blocks of the bare loop and of inferbench's own measurement loop (``measure.timing.run_block``) alternate in the
process (which comes first alternates too); each adjacent pair gives a ratio, inferbench over bare, and their
geometric mean with a paired t 95% interval (``measure.stats.paired_blocks``) is the row: latency (p50 over p50, both
on the host's clock around a call and its synchronisation; the bare call's GPU time by CUDA events beside it),
throughput (inferbench's closed-loop images/s over the bare pipelined loop's) and, with NVML, energy (J/image over
J/image, both gross: idle power included). The two loops' outputs are compared
first (the largest difference, in the row). One child process a variant measures its rows in turn; one table,
``referee.md`` and ``referee.json`` in ``--out``, written after each variant.

    python benchmarks/gpu_referee.py [--device gpu|cpu] [--batch-sizes 1,256] [--precisions fp32,fp16]
                                     [--variants eager,graph,jax] [--blocks 6] [--block-seconds 0.5]
                                     [--model mobilenet_v3_large] [--resolution 224] [--cache-dir DIR] [--out DIR]
    python benchmarks/gpu_referee.py --idle before|after [--idle-seconds 10] [--device gpu|cpu] [--out DIR]

``--idle LABEL`` reads the idle device's power instead (inferbench's own baseline: settled first, then its mean
over ``--idle-seconds`` with its standard error; NVML on a GPU, RAPL on a CPU where it is readable) into
``idle-LABEL.json`` in ``--out``: benchmarks/gpu_run.sh reads it before its first step and after its last, so a GPU
that warmed up over the call is seen.

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
    t = torch.from_numpy(x)
    t = (t.permute(0, 3, 1, 2) if runner.permute else t).to(dev, runner.dtype).contiguous(
        memory_format=torch.channels_last if runner.channels_last else torch.contiguous_format)

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
        static = (t, module(t))  # the static input and output stay alive as long as the replay does

    def replay() -> Any:
        g.replay()
        return static[1]
    return replay, sync


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


def latency_block(call: Callable[[], Any], sync: Callable[[Any], None], seconds: float, cuda: Any) \
        -> tuple[list[float], list[float]]:
    """Single synchronised calls for ``seconds``: their latencies in s on the host's clock around the call and its
    synchronisation (inferbench's clock), and on a GPU each call's GPU time by CUDA events as well."""
    host: list[float] = []
    gpu: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(host) < 5:
        a, b = (cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) if cuda is not None else (None, None)
        t = time.perf_counter()
        if a is not None:
            a.record()
        y = call()
        if b is not None:
            b.record()
        sync(y)
        host.append(time.perf_counter() - t)
        if a is not None:
            gpu.append(a.elapsed_time(b) / 1e3)
    return host, gpu


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
    """NVML's total energy counter in J (None without a GPU, NVML or a counter: the rows are timed all the same)."""
    if not gpu_uuid:
        return lambda: None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    except Exception:  # noqa: BLE001 - ImportError, NVMLError
        return lambda: None

    def read() -> float | None:
        try:
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3
        except pynvml.NVMLError:
            return None
    return read


#: An energy window at least this long (NVML's counter moves about every 100 ms).
ENERGY_WINDOW_S = 1.0


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
    """One row: inferbench's runner of the cell and the bare loop beside it, checked to compute the same outputs,
    then timed in alternating blocks (bare first, then inferbench first, and so on)."""
    from inferbench.registry.artifacts import EXPORTERS
    from inferbench.registry.frameworks import get_framework, load_runner
    from inferbench.registry.inputs import make_inputs
    from inferbench.registry.models import get_model
    from inferbench.runners.base import LoadContext
    from inferbench.spec import RunnerOptions

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
    for _ in range(10):  # both warm: compilation, autotuning, allocator
        sync(call())
        runner.synchronize(runner.call(prepared))
    ours, theirs = np.asarray(runner.to_numpy(runner.call(prepared)), np.float32), _host(call())
    timed = time_row(runner, prepared, call, sync, batch, blocks, block_s,
                     runner.torch.cuda if key != "jax" and device == "gpu" else None, nvml_energy(gpu_uuid))
    return {"variant": variant, "precision": precision, "batch": batch, **timed,
            "outputs_max_rel_diff": float(np.abs(ours - theirs).max() / max(float(np.abs(theirs).max()), 1e-30)),
            "runner": runner.details()}


def _host(out: Any) -> np.ndarray:
    """A bare call's output on the host, as float32 (a torch tensor, or a JAX array)."""
    return np.asarray(out.float().cpu().numpy() if hasattr(out, "cpu") else out, np.float32)


def time_row(runner: Any, prepared: Any, call: Callable[[], Any], sync: Callable[[Any], None], batch: int,
             blocks: int, block_s: float, cuda: Any, energy: Callable[[], float | None]) -> dict[str, Any]:
    """Blocks of the bare loop (latency, then pipelined throughput and energy) and of inferbench's own loop,
    alternating which comes first, paired by block."""
    from inferbench.measure.stats import paired_blocks
    from inferbench.measure.timing import run_block
    from inferbench.spec import TimingConfig

    # inferbench's block as long as the bare loop's energy window (1 s on a GPU): NVML's counter around both
    window = max(block_s, ENERGY_WINDOW_S if cuda is not None else block_s)
    cfg = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=window, min_iterations=5, rounds=1)
    rows: dict[str, list[float]] = {k: [] for k in ("bare_ms", "bare_gpu_ms", "ib_ms", "bare_ips", "ib_ips",
                                                     "bare_j", "ib_j")}

    def bare() -> None:
        host, gpu = latency_block(call, sync, block_s, cuda)
        n = max(5, int(window / max(float(np.median(host)), 1e-6)))
        seconds, joules = pipelined(call, sync, n, energy)
        rows["bare_ms"].append(float(np.median(host)) * 1e3)
        rows["bare_gpu_ms"] += [float(np.median(gpu)) * 1e3] if gpu else []
        rows["bare_ips"].append(n * batch / seconds)
        rows["bare_j"] += [joules / (n * batch)] if joules is not None else []

    def ours() -> None:
        e0 = energy()
        ib = run_block(lambda: runner.call(prepared), runner.synchronize, cfg, 0).latencies_s
        e1 = energy()
        rows["ib_ms"].append(float(np.median(ib)) * 1e3)
        rows["ib_ips"].append(len(ib) * batch / float(np.sum(ib)))
        rows["ib_j"] += [(e1 - e0) / (len(ib) * batch)] if e0 is not None and e1 is not None else []

    for i in range(blocks):
        for block in (bare, ours) if i % 2 == 0 else (ours, bare):
            block()
    median = {k: float(np.median(v)) if v else None for k, v in rows.items()}
    return {"bare_p50_ms": median["bare_ms"], "bare_gpu_p50_ms": median["bare_gpu_ms"],
            "inferbench_p50_ms": median["ib_ms"], "latency": paired_blocks(rows["ib_ms"], rows["bare_ms"]),
            "bare_pipelined_ips": median["bare_ips"], "inferbench_ips": median["ib_ips"],
            "throughput": paired_blocks(rows["ib_ips"], rows["bare_ips"]), "bare_j_per_image": median["bare_j"],
            "inferbench_j_per_image": median["ib_j"],
            "energy": paired_blocks(rows["ib_j"], rows["bare_j"]) if len(rows["ib_j"]) == len(rows["bare_j"]) >= 2
            else None}


def _ratio(r: dict[str, Any] | None) -> str:
    if r is None:
        return "—"
    lo_hi = r["ci95"]
    return f"{r['ratio']:.3f}" + (f" [{lo_hi[0]:.3f}–{lo_hi[1]:.3f}]" if lo_hi else "")


def table(rows: list[dict[str, Any]], where: str) -> str:
    head = [f"# The referee: inferbench over bare loops, {where}", "",
            "Latency: inferbench's p50 over the bare loop's, both on the host's clock around a call and its "
            "synchronisation (< 1: inferbench's is shorter; the bare call's GPU time by CUDA events beside it); "
            "throughput: inferbench's closed-loop images/s over the bare pipelined loop's (calls back to back, one "
            "synchronisation). Each ratio a geometric mean of adjacent block pairs in one process, with its paired "
            "95% interval; J/image is NVML's counter around each loop's window (as long for both), idle power included "
            "(the energy ratio: inferbench's over the bare loop's). "
            "Outputs: the largest difference between the two loops' outputs, relative to the largest output.", "",
            "| variant | precision | batch | bare p50 ms (GPU time) | inferbench p50 ms | latency ratio [95% CI] | "
            "bare pipelined img/s | inferbench img/s | throughput ratio [95% CI] | bare J/image | "
            "energy ratio [95% CI] | outputs |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    body = []
    for r in rows:
        if "skipped" in r:
            body.append(f"| {VARIANTS[r['variant']][2]} | {r['precision']} | {r['batch']} | "
                        f"not measured: {r['skipped']} |||||||||")
            continue
        gpu = f" ({r['bare_gpu_p50_ms']:.3f})" if r["bare_gpu_p50_ms"] is not None else ""
        joules = f"{r['bare_j_per_image']:.4f}" if r["bare_j_per_image"] is not None else "—"
        body.append(f"| {VARIANTS[r['variant']][2]} | {r['precision']} | {r['batch']} | {r['bare_p50_ms']:.3f}{gpu} "
                    f"| {r['inferbench_p50_ms']:.3f} | {_ratio(r['latency'])} | {r['bare_pipelined_ips']:,.0f} | "
                    f"{r['inferbench_ips']:,.0f} | {_ratio(r['throughput'])} | {joules} | {_ratio(r.get('energy'))} | "
                    f"{r['outputs_max_rel_diff']:.1e} |")
    return "\n".join(head + body) + "\n"


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(b) for b in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of batch sizes") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: batch sizes are 1 or more")
    return sizes


def _precisions(text: str) -> list[str]:
    chosen = text.split(",")
    if not set(chosen) <= {"fp32", "fp16"}:
        raise argparse.ArgumentTypeError(f"{text!r}: the referee times fp32 and fp16")
    return chosen


def _variants(text: str) -> list[str]:
    chosen = text.split(",")
    if not set(chosen) <= set(VARIANTS):
        raise argparse.ArgumentTypeError(f"{text!r}: the variants are {', '.join(VARIANTS)}")
    return chosen


def parser() -> argparse.ArgumentParser:
    """The script's flags (benchmarks/gpu_run.sh's calls are parsed by it in tests/test_gpu_kit.py)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    p.add_argument("--batch-sizes", type=_sizes, default=[1, 256])
    p.add_argument("--precisions", type=_precisions, default=["fp32", "fp16"])
    p.add_argument("--variants", type=_variants, default=list(VARIANTS))
    p.add_argument("--blocks", type=int, default=6, help="block pairs per row (default: %(default)s)")
    p.add_argument("--block-seconds", type=float, default=0.5)
    p.add_argument("--model", default="mobilenet_v3_large")
    p.add_argument("--resolution", type=int, default=224)
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bench-cache"))
    p.add_argument("--out", type=Path, default=Path("referee"))
    p.add_argument("--idle", choices=("before", "after"), help="read the idle device's power instead (see above)")
    p.add_argument("--idle-seconds", type=float, default=10.0, help="the idle reading's length (default: %(default)s)")
    p.add_argument("--child", nargs=3, metavar=("VARIANT", "PRECISION:BATCH,...", "FOLDER"), help=argparse.SUPPRESS)
    p.add_argument("--gpu-uuid", help=argparse.SUPPRESS)
    return p


def measure(variant: str, combos: list[tuple[str, int]], folder: Path, args: argparse.Namespace, gpu: Any,
            env: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of ``variant``, measured in one child process (its rows, or each named failed with the process's
    last line); the child is stopped after a generous estimate of its time (a hung library never holds the kit)."""
    limit = 120 + len(combos) * (60 + 4 * args.blocks * args.block_seconds)
    try:
        return _measured(variant, combos, folder, args, gpu, env, limit)
    except subprocess.TimeoutExpired:
        return [{"variant": variant, "precision": p, "batch": b, "skipped": f"failed: stopped after {limit:.0f} s"}
                for p, b in combos]


def _measured(variant: str, combos: list[tuple[str, int]], folder: Path, args: argparse.Namespace, gpu: Any,
              env: dict[str, str], limit: float) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, __file__, "--child", variant, ",".join(f"{p}:{b}" for p, b in combos),
                           str(folder), "--model", args.model, "--resolution", str(args.resolution), "--blocks",
                           str(args.blocks), "--block-seconds", str(args.block_seconds)]
                          + (["--gpu-uuid", gpu.uuid] if gpu else []), env=env, capture_output=True, text=True,
                          timeout=limit)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    why = f"failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    return [{"variant": variant, "precision": p, "batch": b, "skipped": why} for p, b in combos]


def idle(label: str, device: str, seconds: float, out: Path) -> dict[str, Any]:
    """The idle device's power by inferbench's own baseline (settled, then its mean and standard error), written to
    ``out/idle-LABEL.json``; a device without a readable sensor is said, not read."""
    from harness_overhead import gpu_and_env

    from inferbench.measure.trackers.energy import idle_baseline

    gpu, _ = gpu_and_env(device, 1)
    sensor: Any = None
    if gpu:
        where = f"{gpu.name} ({gpu.uuid})"
        try:
            from inferbench.measure.trackers.nvml import NvmlSensor

            sensor, why = NvmlSensor(gpu.uuid), ""
        except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError
            why = f"NVML not readable: {type(exc).__name__}: {exc}"
    else:
        from inferbench.measure.trackers.rapl import RaplSensor

        where, (sensor, why) = "the CPU", RaplSensor.find()
    reading = idle_baseline(sensor, seconds=seconds) if sensor else {"idle_w": None, "not_read": why}
    found = {"label": label, "where": where, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **reading}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"idle-{label}.json").write_text(json.dumps(found, indent=1))
    watts = reading.get("idle_w")
    print(f"idle power {label}, {where}: " + (f"{watts:.1f} W over {reading['seconds']:.1f} s" if watts is not None
                                            else f"not read ({why or 'no reading'})"))
    return found


def main() -> None:
    args = parser().parse_args()
    if args.idle:
        idle(args.idle, args.device, args.idle_seconds, args.out)
        return
    from inferbench.base.device import default_threads

    threads = default_threads()
    if args.child:
        variant, combos, folder = args.child
        pairs = [(c.split(":")[0], int(c.split(":")[1])) for c in combos.split(",")]
        print(json.dumps(child(variant, pairs, folder, args.model, args.resolution, args.blocks, args.block_seconds,
                               threads, args.gpu_uuid)))
        return
    from harness_overhead import ensure_artifacts, gpu_and_env  # the same exports and children (benchmarks/)

    variants = args.variants
    gpu, env = gpu_and_env(args.device, threads)
    keys = sorted({VARIANTS[v][0] for v in variants})
    folder = ensure_artifacts(args.cache_dir, args.device, keys, args.model, args.resolution)
    env["KERAS_BACKEND"] = "jax"
    where = f"{args.model} {args.resolution} px on {gpu.name} ({gpu.uuid})" if gpu else \
        f"{args.model} {args.resolution} px on the CPU, {threads} threads"
    rows = []
    for variant in variants:
        combos = [(p, b) for p in args.precisions for b in args.batch_sizes]
        said = [{"variant": variant, "precision": p, "batch": b, "skipped": skipped(variant, p, args.device)}
                for p, b in combos if skipped(variant, p, args.device)]
        todo = [(p, b) for p, b in combos if not skipped(variant, p, args.device)]
        measured = measure(variant, todo, folder, args, gpu, env) if todo else []
        rows += measured + said
        for r in measured + said:
            print(table([r], where).splitlines()[-1], flush=True)
        args.out.mkdir(parents=True, exist_ok=True)  # written after each variant: a call cut short keeps its rows
        (args.out / "referee.json").write_text(json.dumps({"where": where, "rows": rows}, indent=1))
        (args.out / "referee.md").write_text(table(rows, where))
    print(f"wrote {args.out / 'referee.md'}")


if __name__ == "__main__":
    main()
