"""Does a busy machine change the answer without saying so? The default run, quiet and with busy processes beside it.

Runs ``inferbench run`` (the default: each runtime at its best-known setting, MobileNetV3-Large 224, batch 1) on
the machine as it is, then with one busy loop per core started beside it, and writes what each answered first:
the validity line, the recommendation and its margin, and each cell's median and the share of the machine other
work took. The goal: the busy run gives the same answer or says it is not valid — never a confident different
answer. Check the load (``uptime``) before the quiet run: on a shared machine "quiet" is a claim.

    python benchmarks/contention.py [--out DIR] [--busy N[,N...]] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run(out: Path, cache_dir: str, busy: int) -> dict:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(1.0 if busy else 0.0)
        load = os.getloadavg()[0]
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "inferbench", "run", "--output-dir", str(out), "--cache-dir",
                               cache_dir], capture_output=True, text=True)
        wall = time.monotonic() - start
    finally:
        for hog in hogs:
            hog.kill()
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    answer = json.loads((folder / "recommendation.json").read_text())
    cells = {}
    for path in folder.glob("mobilenet_*.json"):
        rec = json.loads(path.read_text())
        tuning = rec.get("tuning") or {}
        cells[rec["framework"]] = {"p50_ms": (rec.get("latency_ms") or {}).get("p50"),
                                   "valid": (rec.get("validity") or {}).get("valid"),
                                   "other_cores_max": (rec.get("machine_state") or {}).get("other_cores_max"),
                                   "tuned_to": tuning.get("chosen"), "tuning_reason": tuning.get("reason")}
    rec = answer["recommendations"][0]
    return {"busy_processes": busy, "load_avg_1m_at_start": load, "wall_s": round(wall, 1), "exit": proc.returncode,
            "first_line": proc.stdout.splitlines()[0] if proc.stdout else None, "validity": answer["validity"],
            "recommended": rec.get("recommended"), "runner_up": rec.get("runner_up"),
            "margin": rec.get("margin"), "cells": cells, "folder": str(folder)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="inferbench-results/contention", help="where the two runs go")
    p.add_argument("--busy", default=f"1,{os.cpu_count() or 2}",
                   help="busy processes beside each further run, comma-separated (default: 1 and one per core)")
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "inferbench" / "artifacts"))
    args = p.parse_args()
    out = Path(args.out)
    levels = [int(v) for v in args.busy.split(",") if v.strip()]
    results = [run(out / "quiet", args.cache_dir, 0)] + [run(out / f"busy-{n}", args.cache_dir, n) for n in levels]
    (out / "contention.json").write_text(json.dumps(results, indent=1))
    lines = []
    for r in results:
        lines.append(f"{r['busy_processes']} busy processes beside it (load {r['load_avg_1m_at_start']:.2f} at the "
                     f"start), {r['wall_s']} s: {r['first_line']}")
        lines.append(f"  recommended {r['recommended']} (runner-up {r['runner_up']}); cells: " + ", ".join(
            f"{k} {v['p50_ms']:.2f} ms (others {v['other_cores_max']:.2f} cores, valid {v['valid']}, tuned to "
            f"{v['tuned_to']})" for k, v in sorted(r["cells"].items()) if v["p50_ms"]))
    quiet = results[0]
    for r in results[1:]:
        same = quiet["recommended"] == r["recommended"]
        said = r["validity"]["valid"] is False
        verdict = "" if same else " and it said it is not valid" if said else " WITHOUT saying it is not valid"
        lines.append(f"with {r['busy_processes']} busy: {'the same answer' if same else 'another answer'}{verdict}")
    (out / "contention.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

if __name__ == "__main__":
    main()
