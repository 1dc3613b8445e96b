"""Facts about this machine that need no registry: its CPU, its memory, what a job would need of it (a base
module: it imports nothing of inferbench's)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flag_set() -> set[str]:
    """Every instruction-set flag of this machine's CPU (x86 ``flags``, Arm ``Features`` in /proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_flags() -> list[str]:
    return sorted(f for f in cpu_flag_set() if f.startswith(("avx", "amx", "fma", "sse4")))


#: The CPU instructions that compute a reduced precision natively (x86: AVX-512 and AMX; Arm: BF16, half-precision
#: SIMD, dot products). Without them a runtime emulates it (torch widens to FP32 around each operation; OpenVINO
#: quietly runs f32; INT8 without VNNI goes through 16-bit multiplies, where ONNX Runtime's u8 x s8 products can
#: saturate): the timing would be the emulation's.
NATIVE_PRECISION = {"bf16": ("avx512_bf16", "amx_bf16", "bf16"), "fp16": ("avx512_fp16", "amx_fp16", "asimdhp"),
                    "int8": ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp")}


def native_instructions(precision: str, flags: set[str] | None = None) -> list[str]:
    """The instructions of this CPU that compute ``precision`` natively (:data:`NATIVE_PRECISION`), as records say
    what a reduced-precision cell used."""
    flags = cpu_flag_set() if flags is None else flags
    return sorted(set(NATIVE_PRECISION.get(precision, ())) & flags)


def cpu_precision_refusal(precision: str, flags: set[str] | None = None) -> str | None:
    """Why this CPU cannot run ``precision`` natively (one line), or None (FP32; or its instructions are there)."""
    if precision == "tf32":
        return "--precision tf32: TF32 is the tensor-core format of NVIDIA GPUs; a CPU computes FP32 (--precision fp32)"
    wanted = NATIVE_PRECISION.get(precision)
    flags = cpu_flag_set() if flags is None else flags
    if wanted is None or flags & set(wanted):
        return None
    x86 = [f for f in wanted if "_" in f]
    seen = ", ".join(sorted(f for f in flags if f.startswith(("avx512", "amx")))) or "none"
    return (f"--precision {precision}: this CPU has no {precision.upper()} instructions ({' or '.join(x86)}; its "
            f"AVX-512/AMX flags: {seen}): a runtime would emulate {precision.upper()} and time the emulation")


def memory_total_gb(field: str = "MemTotal") -> float | None:
    """The machine's memory in GB (``field="MemAvailable"``: what can be used now without swapping)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024**2, 2)
    except OSError:
        pass
    return None


def memory_shortfall(params: int | None, base_gb: float, weight_copies: float, count: int = 1,
                     own_gb: float = 0.0) -> tuple[float, float, float] | None:
    """``(need, weights, available)`` in GB when ``count`` processes, each holding ~``base_gb`` plus
    ``weight_copies`` copies of ``params`` float32 weights, would take more than 90% of the memory available
    now (plus ``own_gb``, what the asking process holds already); None when they fit or a size is unknown. The
    one estimate behind every memory refusal (a group's workers, an ONNX conversion)."""
    available = memory_total_gb("MemAvailable")
    if not params or not available or count < 1:
        return None
    available += own_gb
    weights = params * 4 / 2**30
    need = count * (base_gb + weight_copies * weights)
    return None if need <= 0.9 * available else (need, weights, available)


#: What a worker holds, estimated from the model's weights (fitted on the zoo's records, rounded up: TF workers
#: 0.7-1.0 GB plus 1.7-2.5 copies of the weights, ONNX Runtime 0.1 GB plus 1.7, OpenVINO 0.1 GB plus 2.9).
WORKER_BASE_GB, WEIGHT_COPIES = 1.0, 3.0
#: A training worker holds besides: the gradients and the optimizer's state (a copy of the weights each: SGD's
#: momentum, Adam's two moments), and per image ACTIVATION_COPIES times every layer's outputs (kept for the backward
#: pass, their gradients, the framework's workspace).
ACTIVATION_COPIES = 3.0


def training_memory(stats: dict | None, batch_size: int, optimizer: str) -> tuple[float, float]:
    """A training process's estimate as (GB beside the weights, copies of the weights) for :func:`memory_shortfall`,
    from the model's ``model_stats`` (its parameters and every layer's outputs per image)."""
    activations = (stats or {}).get("activations_per_image") or 0
    return (WORKER_BASE_GB + activations * batch_size * 4 * ACTIVATION_COPIES / 2**30,
            WEIGHT_COPIES + 1 + (1 if optimizer == "sgd" else 2))


def training_refusal(stats: dict | None, batch_size: int, optimizer: str, processes: int = 1,
                     own_gb: float = 0.0) -> str | None:
    """Why ``processes`` processes training ``batch_size`` images a step would not fit the memory available now, with
    the batch size to try (None: they fit, or the model's size is unknown)."""
    params = (stats or {}).get("params")
    short = memory_shortfall(params, *training_memory(stats, batch_size, optimizer), processes, own_gb)
    if short is None:
        return None
    need, weights_gb, available = short
    smaller = next((b for b in (batch_size // 2 ** k for k in range(1, 17)) if b >= 1 and memory_shortfall(
        params, *training_memory(stats, b, optimizer), processes, own_gb) is None), None)
    advice = f"try --batch-size {smaller}" if smaller else "this model does not train on this machine"
    return (f"training {batch_size} images a step would hold about {need:.0f} GB in {processes} "
            f"process{'es' if processes > 1 else ''} ({weights_gb:.1f} GB of weights, the gradients, the optimizer's "
            f"state and the activations), more than 90% of the {available:.0f} GB available: {advice}"
            + (" (or --processes 1)" if processes > 1 else ""))
