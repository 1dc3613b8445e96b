"""Loading records: result folders (searched recursively) or record files, from one machine or several, upgraded,
checked and flattened into one table (pandas) for the analysis, the report and compare."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import SCHEMA_VERSION
from ..base.codec import encode
from ..base.errors import UsageError
from ..base.reading import read_json
from ..base.text import excerpt
from ..measure.peak import REDUCED
from ..measure.training import STEP_FLOPS_FACTOR
from ..registry.scenarios import scenario
from .record import SUPPORTED_SCHEMAS, ImpossibleRecord, Record, kept_raw, parse
from .roofline import COLUMNS as ROOFLINE_COLUMNS
from .roofline import FP32_ROOF
from .table import RANKED_PARITY, display_name, roofs

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd



# --------------------------------------------------------------------------- reading
#: The most a record file may hold: one written today keeps at most RAW_KEPT_MAX raw latencies (about 2 MiB of JSON);
#: a larger file is named and skipped (a 40 MB one made compare run for minutes).
RECORD_BYTES = 16 * 2**20

#: The JSON files inferbench itself writes beside records: a sweep's plan, a run's answer, the zoo's exports, the
#: contention and calibration benchmarks' results (benchmarks/contention.py, benchmarks/aa_calibration.py).
OWN_FILES = ("sweep.json", "recommendation.json", "exports.json", "contention.json", "calibration.json",
             "invocation_spread.json", "ab.json", "pooled.json", "jobs.json")


def read_records(path: Path) -> tuple[list[tuple[Record, Path]], list[str]]:
    """Every inferbench record under ``path`` (a file or a folder, searched recursively), upgraded to the current
    schema, as typed records with the file each came from; and every file it skipped, with the reason."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"no such file or folder: {path}")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*.json")  # not LoadGen's logs beside one
                                                 if not any(part.endswith(".loadgen") for part in p.parts))
    records: list[tuple[Record, Path]] = []
    skipped: list[str] = []
    unsupported: dict[Any, list[str]] = {}
    for file in files:
        try:  # a regular file, bounded: a FIFO named like a record is named, never waited on
            data = read_json(file, RECORD_BYTES, "record")
        except ValueError as exc:
            skipped.append(f"{file}: not readable JSON ({excerpt(str(exc).replace(f'record {file}: ', ''), 200)})")
            continue
        if not (isinstance(data, dict) and "schema_version" in data and "framework" in data):
            if file.name not in OWN_FILES:  # inferbench's own files beside its records are no records, and no news
                skipped.append(f"{file}: not an inferbench record")
            continue
        version = data["schema_version"]
        if not isinstance(version, int) or isinstance(version, bool):
            skipped.append(f"{file}: schema_version {str(version)[:40]} is not a number")
            continue
        if version not in SUPPORTED_SCHEMAS:
            unsupported.setdefault(version, []).append(str(file))
            continue
        try:  # its raw latencies bounded as a record written today keeps them: a huge file reads in seconds
            records.append((parse(kept_raw(data), file.name), file.resolve()))
        except ImpossibleRecord as exc:
            skipped.append(f"{file}: impossible values, never ranked ({exc})")
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            skipped.append(f"{file}: incomplete or mistyped record ({str(exc)[:160]})")  # named, as resume sets aside
    if unsupported:
        found = "; ".join(f"schema_version {v!r} in {len(fs)} file(s), e.g. {fs[0]}" for v, fs in unsupported.items())
        newer = any(isinstance(v, int) and v > SCHEMA_VERSION for v in unsupported)
        hint = "upgrade inferbench" if newer else "these records come from another tool or a pre-release"
        raise UsageError(f"{path} mixes in records this inferbench cannot read ({found}; it reads "
                         f"{', '.join(map(str, sorted(SUPPORTED_SCHEMAS)))}): {hint}")
    return records, skipped


def iter_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`read_records` as dicts (with ``_source``, the file each came from), for the table."""
    records, skipped = read_records(path)
    return [{**encode(record), "_source": str(source)} for record, source in records], skipped


ENERGY_J_PER_INF = "energy.joules_per_inference"  # written by GPU (NVML) and RAPL runs


def load(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """The one loader: result folders (searched recursively) or record files, from one machine or several,
    as one DataFrame with a row per record, at the current schema — what every function of
    :mod:`inferbench.analysis`, the report and ``compare`` take.

    Nested blocks are flattened with dots (``latency_ms.p50``, ``parity.status``,
    ``environment.cpu.model``); raw latencies and their rounds stay list columns (``raw_latencies_ms``,
    ``raw_rounds``); :func:`tidy` adds the columns the analysis uses (``device_name``, ``p50_ms``,
    ``ranked``, ...). A file given twice (a folder and its sub-folder) counts once.
    """
    import pandas as pd

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise UsageError("no result folders given")
    records: list[dict[str, Any]] = []
    for path in paths:
        found, skipped = iter_records(Path(path))
        if not found:
            also = f" ({len(skipped)} file(s) skipped, e.g. {skipped[0]})" if skipped else ""
            raise UsageError(f"no inferbench result records found under {path}{also}")
        for line in skipped:  # every file left out is named, with the reason
            print(f"inferbench: skipped {line}", file=sys.stderr)
        records += found
    records = list({r["_source"]: r for r in records}.values())
    raw = ("raw_latencies_ms", "raw_rounds")
    flat = pd.json_normalize([{k: v for k, v in r.items() if k not in raw} for r in records])
    for key in raw:
        flat[key] = [r.get(key) for r in records]
    flat["serving.answer"] = [(r.get("serving") or {}).get("answer") for r in records]  # one object, as written
    placed = [roofs(r) for r in records]
    for key in ROOFLINE_COLUMNS:  # each row against its machine's roofs (inferbench.records.roofline)
        flat[key] = [x[key] for x in placed]
    return tidy(flat)


#: Columns the analysis and the report read that a valid record may not have (filled with None).
OPTIONAL_COLUMNS = ("validity.valid", "validity.reason", "config.threads", "environment.inferbench.commit",
                    "environment.hostname", "parity.reason",
                    "latency_ms.p50_ci95", "latency_ms.stability.verdict", "energy.reason", "latency_ms.n",
                    "latency_ms.p99", "config.device.gpu.name", "environment.cpu.model")


def tidy(df: pd.DataFrame) -> pd.DataFrame:
    """Add the columns every analysis uses: device name, p50/p99, throughput, ranked (parity ok + status ok)."""
    import pandas as pd


    out = df.copy()
    for column in OPTIONAL_COLUMNS:  # a record may lack a block (an old schema, a minimal writer): never a KeyError
        if column not in out:
            out[column] = None
    # torch at bf16, or compiled, is a different contender from plain torch: name it so (framework_key keeps
    # the key); records of schema 2 carry precision and variant at the top level
    out["framework_key"] = out["framework"]
    out["framework"] = [display_name(f, p, v) for f, p, v in zip(out["framework"], out["precision"], out["variant"])]
    gpu_name = out["config.device.gpu.name"] if "config.device.gpu.name" in out else pd.Series(None, index=out.index)
    cpu_name = out.get("environment.cpu.model", pd.Series("unknown CPU", index=out.index))
    out["device_name"] = gpu_name.where(gpu_name.notna(), cpu_name)
    out["host"] = out.get("environment.hostname", pd.Series("?", index=out.index)).fillna("?")
    for named in ("environment.ray.machine", "environment.slurm.machine"):  # a machine a sweep named (--machines:
        if named in out:  # simulated nodes share a host name)
            out["host"] = out[named].where(out[named].notna(), out["host"])
    out["threads"] = out.get("config.threads", pd.Series(0, index=out.index)).fillna(0).astype(int)
    # two machines with the same GPU (or CPU) model are two machines: name them apart
    shared = out.groupby("device_name")["host"].transform("nunique") > 1
    out.loc[shared, "device_name"] = out.loc[shared, "device_name"] + " @ " + out.loc[shared, "host"].astype(str)
    out["p50_ms"] = out.get("latency_ms.p50")
    out["p99_ms"] = out.get("latency_ms.p99")
    out["throughput"] = out.get("throughput_per_s")
    out["parity_ok"] = out["parity.status"].isin(list(RANKED_PARITY))
    out["ranked"] = (out["status"] == "ok") & out["parity_ok"]
    out["cell"] = out["model"] + "@" + out["resolution"].astype(str)
    flops = out.get("model_stats.flops_per_image", pd.Series(None, index=out.index, dtype=float)).astype(float)
    if "scenario" in out:  # a training step's: 3 x the forward's (inferbench.measure.training)

        trains = out["scenario"].map(lambda s: scenario(s).trains).astype(bool)
        flops = flops.where(~trains, flops * STEP_FLOPS_FACTOR)
    out["gflop_per_image"] = flops / 1e9
    out["gflop_per_s"] = out["throughput"].astype(float) * out["gflop_per_image"]
    peak = out.get("environment.peak_fp32.gflops", pd.Series(None, index=out.index, dtype=float)).astype(float)
    precision = out.get("precision", pd.Series("fp32", index=out.index)).fillna("fp32")
    peak = peak.where(precision.isin(FP32_ROOF))  # a reduced precision's roof is its own (none before it was kept)
    for p in REDUCED:
        own = out.get(f"environment.peak_fp32.by_precision.{p}.gflops")
        if own is not None:
            peak = peak.where(precision != p, own.astype(float))
    if "environment.peak_fp32.valid" in out:  # a peak measured while the machine was busy is none
        peak = peak.where(out["environment.peak_fp32.valid"].astype(str) != "False")
    out["peak_gflops"] = peak  # the device's peak where it is one (load's columns: one rule for every figure)
    share = out["gflop_per_s"] / peak
    out["fraction_of_peak"] = share.where(share <= 1.0)  # a "peak" below an achieved rate was measured wrong
    if ENERGY_J_PER_INF in out:
        out["inferences_per_joule"] = 1.0 / out[ENERGY_J_PER_INF]
    return out
