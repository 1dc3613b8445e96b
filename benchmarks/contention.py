"""Does a busy machine change the answer without saying so? The default run, quiet and with busy processes beside it.

Runs ``inferbench run`` (the default: each runtime at its best-known setting, MobileNetV3-Large 224, batch 1) on
the machine as it is, then with one busy loop per core started beside it, and writes what each answered first:
the validity line, the recommendation and its margin, and each cell's median and the share of the machine other
work took. The goal: the busy run gives the same answer or says it is not valid — never a confident different
answer. Check the load (``uptime``) before the quiet run: on a shared machine "quiet" is a claim.

    python benchmarks/contention.py [--out DIR] [--busy N] [--cache-dir DIR]
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
        cells[rec["framework"]] = {"p50_ms": (rec.get("latency_ms") or {}).get("p50"),
                                   "valid": (rec.get("validity") or {}).get("valid"),
                                   "other_cores_max": (rec.get("machine_state") or {}).get("other_cores_max")}
    rec = answer["recommendations"][0]
    return {"busy_processes": busy, "load_avg_1m_at_start": load, "wall_s": round(wall, 1), "exit": proc.returncode,
            "first_line": proc.stdout.splitlines()[0] if proc.stdout else None, "validity": answer["validity"],
            "recommended": rec.get("recommended"), "runner_up": rec.get("runner_up"),
            "margin": rec.get("margin"), "cells": cells, "folder": str(folder)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="inferbench-results/contention", help="where the two runs go")
    p.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="busy processes beside the second run")
    p.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "inferbench" / "artifacts"))
    args = p.parse_args()
    out = Path(args.out)
    results = [run(out / "quiet", args.cache_dir, 0), run(out / "busy", args.cache_dir, args.busy)]
    (out / "contention.json").write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"{r['busy_processes']} busy processes beside it (load {r['load_avg_1m_at_start']:.2f} at the start), "
              f"{r['wall_s']} s: {r['first_line']}")
        print(f"  recommended {r['recommended']} (runner-up {r['runner_up']}); cells: "
              + ", ".join(f"{k} {v['p50_ms']:.2f} ms (others {v['other_cores_max']:.2f} cores, valid {v['valid']})"
                          for k, v in sorted(r["cells"].items()) if v["p50_ms"]))
    same = results[0]["recommended"] == results[1]["recommended"]
    said = results[1]["validity"]["valid"] is False
    print(f"\nthe busy run {'gave the same answer' if same else 'gave another answer'}"
          f"{'' if same else (' and said it is not valid' if said else ' WITHOUT saying it is not valid')}")


if __name__ == "__main__":
    main()
