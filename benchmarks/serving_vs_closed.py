"""Does serving under LoadGen measure the runtime? Offline samples per second over the closed loop's, same runtime,
same batch size, side by side in one process.

For each runtime and batch size, one child process loads the runner once and alternates short blocks of
(a) inferbench's closed loop (``call`` + ``synchronize`` on a batch placed before the window: samples per second =
batch x calls / window) and (b) one LoadGen Offline test through serving's own system under test (the query samples
resident where the runtime computes, each batch gathered there: ``scenarios.serve.loadgen.Sut``), concurrency 1
and no batching delay as the closed loop has one caller. Each adjacent pair gives a ratio; their geometric mean
with a paired t 95% interval (as a run's comparisons) is the answer. Target: at least 0.9 for every CPU runtime
(docs/serving.md). ``--include-transfer`` measures the host path instead (each batch gathered on the host and
prepared inside the test), what serving measured before the samples were made resident.

    python benchmarks/serving_vs_closed.py [--models mobilenet_v3_small:96,mobilenet_v3_large:224]
        [--batch-sizes 1,8,32] [--frameworks onnxrt,openvino,...] [--pairs 5] [--block-seconds 1]
        [--include-transfer] [--cache-dir DIR] [--out FILE.json]

Looks inside: serving's system under test against the closed loop, on the same loaded runtime; the Python API
(inferbench.api) has no such piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT_FRAMEWORKS = "onnxrt,openvino,torch,torch-native,jax,tf,tfxla,keras-eager,keras,kerasxla"


def offline_test(lg, sut, samples: int, expected_qps: float, block_s: float, seed: int, logs: Path) -> float:
    from inferbench.scenarios.serve.loadgen import MIN_QUERIES, parse_detail, whole_batches

    settings = lg.TestSettings()
    settings.scenario, settings.mode = lg.TestScenario.Offline, lg.TestMode.PerformanceOnly
    settings.min_duration_ms = int(block_s * 1e3)
    settings.min_query_count = MIN_QUERIES["offline"]
    settings.offline_expected_qps = whole_batches(expected_qps, sut.batch, block_s, settings.min_query_count)
    settings.schedule_rng_seed = settings.sample_index_rng_seed = seed
    log = lg.LogSettings()
    log.log_output.outdir = str(logs)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    qsl = lg.ConstructQSL(samples, samples, lambda idx: None, lambda idx: None)
    try:
        sut.serve(lambda: lg.StartTestWithLogSettings(sut.handle, qsl, settings, log, str(logs / "no-audit.config")))
    finally:
        lg.DestroyQSL(qsl)
    return float(parse_detail(logs / "mlperf_log_detail.txt")["result_samples_per_second"])


def child(framework: str, folder: str, model: str, resolution: int, batch: int, pairs: int, block_s: float,
          threads: int, include_transfer: bool) -> dict:
    import mlperf_loadgen as lg

    from inferbench.measure.stats import paired_blocks
    from inferbench.measure.timing import run_block
    from inferbench.registry.artifacts import EXPORTERS, REFERENCE_INPUTS
    from inferbench.registry.frameworks import get_framework, load_runner
    from inferbench.registry.inputs import make_inputs
    from inferbench.registry.models import get_model
    from inferbench.runners.base import LoadContext
    from inferbench.scenarios.serve.loadgen import Knobs, Sut
    from inferbench.scenarios.serve.session import place
    from inferbench.spec import RunnerOptions, TimingConfig

    fw, spec, base = get_framework(framework), get_model(model), Path(folder)
    kind = fw.artifact_for(spec)
    artifact = None if kind == "none" else base / EXPORTERS[kind].path
    runner = load_runner(fw)()
    runner.load(LoadContext(base, artifact, spec, resolution, "cpu", threads, 0, "fp32", RunnerOptions(),
                            batch, (batch,)))
    prepared = runner.prepare(make_inputs(spec, batch, resolution, 3))
    samples = np.load(base / REFERENCE_INPUTS).astype(np.float32)
    gather, placement = place(runner, samples, include_transfer)
    cfg = TimingConfig(warmup_iterations=0, warmup_seconds=0.0, min_duration_s=block_s, min_iterations=3, rounds=1)
    logs = Path(tempfile.mkdtemp(prefix="serving-vs-closed-"))
    closed, served = [], []
    for i in range(pairs):
        block = run_block(lambda: runner.call(prepared), runner.synchronize, cfg, i)
        closed.append(batch * len(block.latencies_s) / block.window_s)
        sut = Sut(lg, runner.serving_calls(1, batch), gather, batch, Knobs(1, 0.0))
        try:
            served.append(offline_test(lg, sut, len(samples), closed[-1], block_s, i, logs))
        finally:
            sut.close()
        if sut.errors:
            raise RuntimeError(sut.errors[0])
    ratio = paired_blocks(served, closed)  # served over closed, paired by block
    return {"framework": framework, "model": model, "resolution": resolution, "batch": batch,
            "closed_samples_s": float(np.median(closed)), "offline_samples_s": float(np.median(served)),
            "ratio": ratio["ratio"], "ratio_ci95": ratio["ci95"], "pairs": pairs,
            "placement": placement}


def ensure_artifacts(cache_dir: str, model: str, resolution: int, frameworks: str, batches: str) -> Path:
    from inferbench.exporters import cache, key_inputs
    from inferbench.run import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["--model", model, "--resolution", str(resolution), "--framework", frameworks,
                     "--batch-sizes", batches, "--duration", "0", "--min-iterations", "1", "--warmup", "0",
                     "--rounds", "1", "--warmup-seconds", "0", "--processes", "1", "--tune", "off",
                     "--output-dir", tempfile.mkdtemp(), "--cache-dir", cache_dir])
    if code not in (0, 1):
        sys.exit(f"could not export {model} at {resolution}")
    return cache.artifact_dir(Path(cache_dir), key_inputs(model, resolution, "random", 0))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mobilenet_v3_small:96,mobilenet_v3_large:224", help="MODEL:RESOLUTION,...")
    p.add_argument("--batch-sizes", default="1,8,32")
    p.add_argument("--frameworks", default=DEFAULT_FRAMEWORKS)
    p.add_argument("--pairs", type=int, default=5, help="pairs of alternating blocks (default: %(default)s)")
    p.add_argument("--block-seconds", type=float, default=1.0, help="seconds per block (default: %(default)s)")
    p.add_argument("--include-transfer", action="store_true", help="serve from the host, as before residency")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bench-cache"))
    p.add_argument("--out", help="write the rows as JSON here too")
    p.add_argument("--child", nargs=5, metavar=("FRAMEWORK", "FOLDER", "MODEL", "RESOLUTION", "BATCH"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    from inferbench.base.device import default_threads
    from inferbench.execution.childenv import thread_env

    threads = default_threads()
    if args.child:
        fw, folder, model, res, batch = args.child
        print(json.dumps(child(fw, folder, model, int(res), int(batch), args.pairs, args.block_seconds, threads,
                               args.include_transfer)))
        return
    load = os.getloadavg()[0]
    print(f"offline / closed loop, samples per second, {threads} threads, {args.pairs} pairs of "
          f"{args.block_seconds:g} s blocks; load average {load:.2f} at the start")
    rows = []
    env = {**os.environ, **thread_env(threads)}
    for entry in args.models.split(","):
        model, _, res = entry.partition(":")
        folder = ensure_artifacts(args.cache_dir, model, int(res), args.frameworks, args.batch_sizes)
        for fw in args.frameworks.split(","):
            for batch in args.batch_sizes.split(","):
                cmd = [sys.executable, __file__, "--pairs", str(args.pairs), "--block-seconds",
                       str(args.block_seconds), "--child", fw, str(folder), model, res, batch]
                done = subprocess.run(cmd + (["--include-transfer"] if args.include_transfer else []), env=env,
                                      capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    print(f"{model} {res} {fw} bs{batch}: failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(r)
                lo, hi = r["ratio_ci95"]
                print(f"{model:20s} {res:>4s} {fw:13s} bs{batch:>3s}  closed {r['closed_samples_s']:8.1f}/s  "
                      f"offline {r['offline_samples_s']:8.1f}/s  ratio {r['ratio']:.3f} [{lo:.3f}-{hi:.3f}]",
                      flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end; at {time.strftime('%Y-%m-%d %H:%M')}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "threads": threads, "include_transfer":
                                              args.include_transfer, "load_start": load}, indent=1))


if __name__ == "__main__":
    main()
