"""The seed's VGG16 training table, in its shape, on this machine: ``inferbench run --scenario train`` for VGG16
without batch norm, then VGG16-BN with batch norm from the batch's statistics, frozen, and by TensorFlow's fused
kernel, each over every framework that trains here; Keras on its torch backend beside its TensorFlow one. Writes
each run's records and ``table.md``: ms per step with its interval, samples per second, training parity.

The seed (tdeboissiere/DeepLearningBenchmarks, 2017) timed batch 16 at 224 px on a Maxwell Titan X; on a 2-core CPU a
VGG16 step at 224 px takes seconds, so the default here is 112 px (said in the table). Check the load (``uptime``)
before you run it: on a shared machine "quiet" is a claim.

    python benchmarks/train_table.py [--out DIR] [--resolution PX] [--batch-size N] [--cache-dir DIR] [--quick]
                                     [--runs NAME[,NAME...]]

``--runs`` runs only those rows again (a run spoiled by other work on the machine: its records say NOT VALID), and
the table is written from every run's latest folder, each run's line kept in ``runs.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: (name, what the seed's row was, extra arguments): one inferbench run each.
RUNS = [
    ("no-bn", "VGG16, no batch norm", ["--model", "vgg16"]),
    ("no-bn-keras-torch", "VGG16, Keras on its torch backend (the seed's second backend was Theano)",
     ["--model", "vgg16", "--framework", "keras,kerasxla", "--keras-backend", "torch"]),
    ("bn", "VGG16-BN, batch statistics (the seed's BN mode 0)", ["--model", "vgg16_bn"]),
    ("bn-frozen", "VGG16-BN, frozen statistics", ["--model", "vgg16_bn", "--bn-mode", "frozen"]),
    ("bn-fused", "VGG16-BN, TensorFlow's fused kernel", ["--model", "vgg16_bn", "--fused-batch-norm",
                                                          "--framework", "keras,kerasxla,tf,tfxla"]),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="inferbench-results/train-table")
    p.add_argument("--resolution", default="112")
    p.add_argument("--batch-size", default="16")
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "inferbench" / "artifacts"))
    p.add_argument("--quick", action="store_true", help="inferbench's --quick (fewer, shorter rounds)")
    p.add_argument("--runs", default=",".join(name for name, _, _ in RUNS), help="the runs to run (again)")
    args = p.parse_args()
    out = Path(args.out)
    chosen = args.runs.split(",")
    unknown = sorted(set(chosen) - {name for name, _, _ in RUNS})
    if unknown:
        p.error(f"unknown run(s) {', '.join(unknown)}; the runs: {', '.join(name for name, _, _ in RUNS)}")
    out.mkdir(parents=True, exist_ok=True)
    notes_file = out / "runs.md"  # a line per run: "- <name> (...)"; not .json, which `report` would read
    notes = {line.split()[1]: line for line in notes_file.read_text().splitlines() if line.startswith("- ")} \
        if notes_file.exists() else {}
    for name, what, extra in RUNS:
        if name not in chosen:
            continue
        load = os.getloadavg()[0]
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "inferbench", "run", "--scenario", "train", "--resolution",
                               args.resolution, "--batch-size", args.batch_size, *extra, *(["--quick"] * args.quick),
                               "--output-dir", str(out / name), "--cache-dir", args.cache_dir],
                              capture_output=True, text=True)
        wall = time.monotonic() - start
        notes[name] = (f"- {name} ({what}): exit {proc.returncode}, {wall:.0f} s, load {load:.2f} at the start; "
                       + (proc.stdout.splitlines()[0] if proc.stdout else proc.stderr.strip().splitlines()[-1]))
        notes_file.write_text("".join(notes[n] + "\n" for n, _, _ in RUNS if n in notes))
    rows = []
    for name, what, _ in RUNS:
        folders = sorted(p for p in (out / name).iterdir() if p.is_dir()) if (out / name).is_dir() else []
        for folder in folders[-1:]:  # the latest run of each
            for path in sorted(folder.glob("vgg*.json")):
                rec = json.loads(path.read_text())
                lat, train = rec.get("latency_ms") or {}, rec.get("training") or {}
                ci = lat.get("p50_ci95")
                rows.append(f"| {what} | {rec['framework']}{'+' + rec['variant'] if rec['variant'] else ''} "
                            f"| {train.get('layout', '-')} | {train.get('batch_norm_kernel') or '-'} "
                            f"| {lat['p50']:.0f} [{ci[0]:.0f}, {ci[1]:.0f}] | {rec['throughput_per_s']:.1f} "
                            f"| {rec['parity']['status']} | {_valid(rec)} |" if rec["status"] == "ok" and ci else
                            f"| {what} | {rec['framework']} | - | - | {rec.get('error') or 'no interval'} | - "
                            f"| {rec['parity']['status']} | {_valid(rec)} |")
    head = (f"VGG16 training step, batch {args.batch_size}, {args.resolution} px, fp32, SGD (momentum 0.9), on "
            f"{_cpu()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}; median ms per step [95% interval "
            "between rounds and processes]")
    table = [head, "", "| run | framework | layout | batch norm | ms/step | samples/s | parity | valid |",
             "|---|---|---|---|---|---|---|---|", *rows, "", *(notes[name] for name, _, _ in RUNS if name in notes)]
    (out / "table.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


def _valid(rec: dict) -> str:
    """The machine's verdict on the cell: yes, NO (other work took more than allowed), or unknown."""
    return {True: "yes", False: "NO"}.get((rec.get("validity") or {}).get("valid"), "unknown")


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "this CPU"


if __name__ == "__main__":
    main()
