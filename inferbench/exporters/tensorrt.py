"""TensorRT engines (FP32 / FP16 / INT8) built from an ONNX model with TensorRT's own Python API, strongly typed: the
ONNX model's own types decide each layer's (FP32: the ONNX export; FP16: the export cast to FP16,
:mod:`inferbench.exporters.onnx_fp16`; INT8: its symmetric QDQ model, :mod:`inferbench.exporters.quantize_onnx_sym`).

TensorRT 11 builds strongly typed networks only: ``BuilderFlag.FP16``/``INT8``/``BF16`` and the precision
constraints are gone, and a precision comes from the model's types. Setting ``STRONGLY_TYPED`` at network creation is
what TensorRT 10.12+ asks for the same behaviour and is accepted (and ignored) by TensorRT 11, so one build serves both.
TF32 stays a builder setting: cleared for every engine here, so an FP32 engine's convolutions and matrix products are
FP32 (as inferbench turns TF32 off for torch's and JAX's FP32 cells); the record says so (``runner.tf32``).

Called by the TensorRT runner on the target GPU (engines are specific to it).

TensorFlow 2.18+ no longer ships TF-TRT, so engines come from ONNX. The engine has one optimisation
profile covering the requested batch sizes and uses a timing cache kept beside it. Engines are
specific to the GPU model and TensorRT version; both are in the file name.

NOT RUN in this project's CI or on its development machines: building an engine needs an NVIDIA GPU, and TensorRT's
libraries (``tensorrt-cu13-libs``) download from NVIDIA's own server, which those machines cannot reach. The calls
below are TensorRT 11's documented Python API; tests/test_tensorrt.py holds them to TensorRT 11.4's real Python
bindings (its libraries' factories stood in for: every class, method, argument type and enum is the real one's).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..base.errors import MissingDependency
from ..registry.artifacts import PARITY_INPUTS, ExportContext
from ..registry.models import get_model


def _trt() -> Any:
    try:
        import tensorrt as trt
    except ImportError:
        raise MissingDependency("tensorrt", "tensorrt", "TensorRT engines") from None
    return trt


def profile_range(batch_sizes: tuple[int, ...]) -> tuple[int, int]:
    """Batch range of the engine's optimisation profile: the requested sizes and the parity batch."""
    return min(batch_sizes), max(*batch_sizes, PARITY_INPUTS)


def engine_tag(precision: str, onnx_file: Any = None) -> str:
    """What names an engine's precision: INT8 with its calibration set's digest (the QDQ file's name); "typed" for
    the strongly typed FP32 and FP16 engines (an engine of TensorRT 10's FP16 flag is not reused)."""
    return f"int8-{Path(onnx_file).stem}" if precision == "int8" and onnx_file else f"{precision}-typed"


def engine_path(ctx: ExportContext, precision: str, gpu_name: str, trt_version: str) -> Any:
    """The engine's file, per GPU model, TensorRT version, ``precision`` (for INT8 with the calibration set's digest:
    ``int8-<digest>``) and batch range."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu_name).strip("-").lower()
    lo, hi = profile_range(ctx.batch_sizes)
    return ctx.folder / "tensorrt" / f"{slug}_trt{trt_version}_{precision}_b{lo}-{hi}.plan"


def build_engine(ctx: ExportContext, precision: str, gpu_name: str, onnx_file: Any = None) -> dict[str, Any]:
    """An engine of the ONNX export (``onnx_file``: another ONNX model — the FP16 cast of an FP16 cell, the symmetric
    QDQ model of an INT8 cell) in a strongly typed network: the model's types are the engine's, no precision flag."""
    trt = _trt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_file or ctx.path("onnx"))):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse the ONNX model: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 2 << 30)
    config.clear_flag(trt.BuilderFlag.TF32)  # on by default: FP32 layers would round their inputs to 10 bits
    # timing caches are specific to the GPU and the TensorRT version, like engines
    cache_file = engine_path(ctx, "timing", gpu_name, trt.__version__).with_suffix(".cache")
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache = config.create_timing_cache(cache_file.read_bytes() if cache_file.exists() else b"")
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        cache = config.create_timing_cache(b"")  # a stale cache: start a fresh one
        config.set_timing_cache(cache, ignore_mismatch=False)
    inp = network.get_input(0)
    lo, hi = profile_range(ctx.batch_sizes)
    shape = get_model(ctx.model).input_shape  # NHWC, or NCHW for a channels-first ONNX file
    profile = builder.create_optimization_profile()
    # optimised for the largest requested batch; the range also covers the parity gate's batch
    profile.set_shape(inp.name, shape(lo, ctx.resolution), shape(max(ctx.batch_sizes), ctx.resolution),
                      shape(hi, ctx.resolution))
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT failed to build the engine (see the log above)")
    out = engine_path(ctx, engine_tag(precision, onnx_file), gpu_name, trt.__version__)
    out.write_bytes(bytes(serialized))
    cache_file.write_bytes(bytes(config.get_timing_cache().serialize()))
    return {"engine": str(out.relative_to(ctx.folder)), "profile": [lo, max(ctx.batch_sizes), hi],
            "trt_version": trt.__version__, "strongly_typed": True, "tf32": False,
            "built_from": _said(Path(onnx_file or ctx.path("onnx")), ctx.folder)}


def _said(path: Path, folder: Path) -> str:
    """An ONNX model's path as a record says it: inside the cache folder, relative to it."""
    return path.relative_to(folder).as_posix() if path.is_relative_to(folder) else str(path)
