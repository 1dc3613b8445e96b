"""A record placed against its machine's two roofs: the compute roof (the peak rate at the record's precision, measured
once per machine: FP32's, or BF16's, FP16's, INT8's own) and the memory roof (its bandwidth, measured beside it:
:mod:`inferbench.measure.peak`).

Bytes moved per image are a range, from the model's graph (``model_stats``: its parameters, and every layer's
outputs per image): at least the weights once per batch plus the image in and the outputs out (perfect fusion),
at most that plus every intermediate tensor written once and read once (no fusion); a reduced precision moves its
weights and intermediates in 2 (FP16, BF16) or 1 (INT8) bytes a value. A row's limit is one word:

- ``compute`` when even the no-fusion bytes take less time at the memory roof than the FLOPs at the compute roof
  (or, between the two, when the row reaches a larger share of its compute roof than of its memory roof with
  perfect fusion);
- ``memory`` when even the perfect-fusion bytes take longer at the memory roof than the FLOPs take at the compute
  roof (or, between, when its share of the memory roof with perfect fusion is the larger);
- ``overhead`` when the row runs at less than a fifth of what the pessimistic roof allows (launch, dispatch, the
  framework's own time: neither roof explains it).

Where the runtime counts the bytes its compiled kernels move (XLA's cost analysis for ``jax``, inductor's kernel
count for ``torch-inductor``), that count is kept beside the range as the runtime's (``bytes_per_image_runtime``,
``bytes_runtime_by``) with its share of the memory roof: it says where in the range the compiler's fusion put the
row.

A share of the memory roof above 100% with no fusion says that the intermediates did not all go to memory (fused,
or held in the cache). ``cache_resident`` marks a row whose weights and one batch's images and outputs fit in the
last-level cache: its shares of the DRAM roof say little (the bytes may never leave the cache)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..base.size import hw
from ..registry.scenarios import scenario

#: Bytes a value, by precision (inputs and outputs stay float32: the runtimes are fed and give float32).
VALUE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1}
FP32_ROOF = ("fp32", "tf32")  # the precisions whose compute roof is the FP32 matrix product's (the others: their own)
OVERHEAD_SHARE = 0.2  # below this share of the pessimistic roof's rate, neither roof explains the time
COLUMNS = ("bytes_per_image_low", "bytes_per_image_high", "memory_roof_gbps", "memory_roof_pct_low",
           "memory_roof_pct_high", "compute_roof_pct", "limit", "cache_resident", "bytes_per_image_runtime",
           "memory_roof_pct_runtime", "bytes_runtime_by")


def bytes_per_image(record: Mapping[str, Any]) -> tuple[float, float] | None:
    """(perfect fusion, no fusion) bytes per image of ``record``'s cell, or None where the graph does not say."""
    stats = record.get("model_stats") or {}
    params, inner = stats.get("params"), stats.get("activations_per_image")
    size = VALUE_BYTES.get(record.get("precision") or "fp32")
    if not (params and inner and size):
        return None
    h, w = hw(record["resolution"])
    outputs = sum(math.prod(o.get("shape") or [0]) for o in record.get("outputs") or [])
    io = 4 * (h * w * 3 + outputs)
    low = size * params / record["batch_size"] + io
    return low, low + 2 * size * inner


def roofline(record: Mapping[str, Any], rate_gflops: float | None, peak_gflops: float | None) -> dict[str, Any]:
    """The record's place under its roofs: its bytes range, the memory roof and the shares of both roofs, the
    limit in one word and the cache mark (None where a figure is missing); ``rate_gflops``: its achieved FLOP rate,
    ``peak_gflops``: the usable compute roof at its precision (:func:`inferbench.records.table.usable_peak`)."""
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    if scenario(record.get("scenario")).trains:  # a training step's bytes are not the forward pass's
        return out
    memory = ((record.get("environment") or {}).get("peak_fp32") or {}).get("memory") or {}
    quiet = ((record.get("environment") or {}).get("peak_fp32") or {}).get("valid") is not False
    span, roof = bytes_per_image(record), memory.get("gbps") if quiet else None
    throughput = record.get("throughput_per_s")
    if span is None or not throughput:
        return out
    low, high = span
    out.update(bytes_per_image_low=low, bytes_per_image_high=high, memory_roof_gbps=roof)
    own = (record.get("runner") or {}).get("runtime_cost") or {}
    if own.get("bytes_per_image"):  # the runtime's own count of what its compiled kernels move, said as its
        out.update(bytes_per_image_runtime=own["bytes_per_image"], bytes_runtime_by=own.get("by"))
    if roof:
        out.update(memory_roof_pct_low=100 * throughput * low / 1e9 / roof,
                   memory_roof_pct_high=100 * throughput * high / 1e9 / roof)
        if out["bytes_per_image_runtime"]:
            out["memory_roof_pct_runtime"] = 100 * throughput * out["bytes_per_image_runtime"] / 1e9 / roof
        llc = memory.get("last_level_cache_mb")
        out["cache_resident"] = bool(llc) and low * record["batch_size"] <= float(llc or 0) * 2**20
    flops = (record.get("model_stats") or {}).get("flops_per_image")
    if peak_gflops and rate_gflops:
        out["compute_roof_pct"] = 100 * rate_gflops / peak_gflops
    if roof and peak_gflops and flops:
        out["limit"] = limit(flops / (peak_gflops * 1e9), low / (roof * 1e9), high / (roof * 1e9), 1 / throughput,
                             out["compute_roof_pct"] or 0.0, out["memory_roof_pct_low"])
    return out


def limit(compute_s: float, fused_s: float, unfused_s: float, took_s: float, compute_pct: float,
          memory_pct: float) -> str:
    """The one word for what bounds an image's time ``took_s``: the compute roof's time ``compute_s``, the memory
    roof's with perfect fusion ``fused_s`` and without ``unfused_s`` (seconds an image); between the two, the
    larger of the shares ``compute_pct`` and ``memory_pct`` (the memory roof's with perfect fusion)."""
    if took_s * OVERHEAD_SHARE > max(compute_s, unfused_s):
        return "overhead"
    if compute_s >= unfused_s:
        return "compute"
    if compute_s <= fused_s:
        return "memory"
    return "compute" if compute_pct >= memory_pct else "memory"
