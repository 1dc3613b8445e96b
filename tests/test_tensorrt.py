"""TensorRT 11: engines built strongly typed, their precision from the ONNX model's types (FP16 from an FP16 cast of
the export, INT8 from the symmetric QDQ model), TF32 cleared. Building an engine needs a GPU and TensorRT's libraries
(NVIDIA's own server, which these machines cannot reach). So the build and the runner run here on TensorRT 11.4's
real Python bindings (``tensorrt-cu13-bindings``, from PyPI) with their libraries' nine factory functions stood in
for (tests/trt_surface.py): every class, method, argument, property and enum inferbench touches is the real one's;
what a call returns is a value of its declared type. The logic of a build is also checked on a small stand-in module
(what was asked for); the FP16 cast itself is real (onnxconverter-common, run in ONNX Runtime)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from inferbench.registry.artifacts import ExportContext

ROOT = Path(__file__).resolve().parents[1]

#: TensorRT 11's removed Python APIs (NVIDIA: "Removed Python APIs and Replacements", TensorRT 11.4 migration guide).
REMOVED = ("BuilderFlag.FP16", "BuilderFlag.INT8", "BuilderFlag.BF16", "BuilderFlag.FP8", "BuilderFlag.INT4",
           "BuilderFlag.FP4", "BuilderFlag.OBEY_PRECISION_CONSTRAINTS", "BuilderFlag.PREFER_PRECISION_CONSTRAINTS",
           "int8_calibrator", "set_calibration_profile", "get_calibration_profile",
           "set_quantization_flag", "get_quantization_flag", "quantization_flags", "clear_quantization_flag",
           "platform_has_fast_fp16", "platform_has_fast_int8", "device_memory_size_for_profile")


def _stand_in(calls: dict) -> types.ModuleType:
    """A ``tensorrt`` module with TensorRT 11's builder surface (what build_engine may touch), recording the calls."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "11.4.0.106"
    trt.NetworkDefinitionCreationFlag = types.SimpleNamespace(STRONGLY_TYPED=1)
    trt.BuilderFlag = types.SimpleNamespace(TF32=7, DEBUG=0, SPARSE_WEIGHTS=6, REFIT=5)  # no precision flags in 11
    trt.MemoryPoolType = types.SimpleNamespace(WORKSPACE=0)

    class Logger:
        WARNING = 2

        def __init__(self, level: int) -> None:
            pass

    class Config:
        def set_memory_pool_limit(self, pool: int, size: int) -> None:
            pass

        def set_flag(self, flag: int) -> None:
            calls["set"].append(flag)

        def clear_flag(self, flag: int) -> None:
            calls["cleared"].append(flag)

        def create_timing_cache(self, data: bytes) -> object:
            return object()

        def set_timing_cache(self, cache: object, ignore_mismatch: bool) -> bool:
            return True

        def get_timing_cache(self) -> object:
            return types.SimpleNamespace(serialize=lambda: b"cache")

        def add_optimization_profile(self, profile: object) -> None:
            pass

    class Profile:
        def set_shape(self, name: str, lo: tuple, opt: tuple, hi: tuple) -> None:
            calls["profile"] = (lo, opt, hi)

    class Builder:
        def __init__(self, logger: Logger) -> None:
            pass

        def create_network(self, flags: int) -> object:
            calls["network_flags"] = flags
            return types.SimpleNamespace(get_input=lambda i: types.SimpleNamespace(name="images"))

        def create_builder_config(self) -> Config:
            return Config()

        def create_optimization_profile(self) -> Profile:
            return Profile()

        def build_serialized_network(self, network: object, config: Config) -> bytes:
            return b"plan"

    class OnnxParser:
        num_errors = 0

        def __init__(self, network: object, logger: Logger) -> None:
            pass

        def parse_from_file(self, path: str) -> bool:
            calls["parsed"] = path
            return True

    trt.Logger, trt.Builder, trt.OnnxParser = Logger, Builder, OnnxParser
    return trt


@pytest.mark.parametrize("precision, model", [("fp32", None), ("fp16", "onnx-fp16/model.onnx"),
                                              ("int8", "onnx-int8-sym/0123abcd.onnx")])
def test_every_engine_is_strongly_typed_from_the_onnx_model_of_its_precision_with_tf32_off(
        tmp_path, monkeypatch, precision, model):
    from inferbench.exporters import tensorrt as exporter

    calls: dict = {"set": [], "cleared": []}
    trt = _stand_in(calls)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    ctx = ExportContext(tmp_path, "mobilenet_v3_small", 96, "random", 0, (1, 8))
    source = tmp_path / model if model else None
    info = exporter.build_engine(ctx, precision, "NVIDIA H200", source)
    assert calls["network_flags"] == 1 << trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED
    assert calls["set"] == [] and calls["cleared"] == [trt.BuilderFlag.TF32]  # no precision flag; TF32 off
    assert calls["parsed"] == str(source or ctx.path("onnx"))  # the model whose types the engine takes
    assert calls["profile"] == ((1, 96, 96, 3), (8, 96, 96, 3), (16, 96, 96, 3))  # the parity batch of 16 too
    assert (info["strongly_typed"], info["tf32"], info["built_from"]) == (True, False, model or "onnx/model.onnx")
    engine = tmp_path / info["engine"]
    assert engine.read_bytes() == b"plan" and precision in engine.name
    # the runner finds the engine where the build put it
    tag = exporter.engine_tag(precision, source)
    assert exporter.engine_path(ctx, tag, "NVIDIA H200", trt.__version__) == engine


def test_no_tensorrt_api_that_tensorrt_11_removed_is_named_anywhere_in_inferbench():
    said = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "inferbench").rglob("*.py")}
    found = [f"{path}: {api}" for path, text in said.items() for api in REMOVED
             if re.search(rf"\.{re.escape(api)}\b", text)]
    assert not found, found


def test_the_fp16_artifact_is_what_tensorrt_fp16_builds_from():
    from inferbench.registry import artifacts
    from inferbench.registry.frameworks import FRAMEWORKS
    from inferbench.registry.models import get_model

    spec = get_model("mobilenet_v3_large")
    assert FRAMEWORKS["tensorrt-fp16"].artifact_for(spec) == "onnx-fp16"
    assert artifacts.export_order(["onnx-fp16"], spec)[-2:] == ["onnx", "onnx-fp16"]
    assert artifacts.route("onnx-fp16", spec).startswith("onnxconverter-common's FP16 cast")


def _small_onnx(path: Path) -> None:
    """A convolution, a hard swish, a global mean, a dense layer and a softmax: NHWC in, class scores out."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.normal(0, 0.3, (8, 5)).astype(np.float32), "fc")
    perm = [0, 3, 1, 2]
    nodes = [helper.make_node("Transpose", ["images"], ["x"], perm=perm),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c"], ["h"]),
             helper.make_node("GlobalAveragePool", ["h"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["m"]),
             helper.make_node("Softmax", ["m"], ["logits"], axis=1)]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                           ["batch", 16, 16, 3])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5])], [w, fc])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


@pytest.mark.slow  # ONNX Runtime and onnxconverter-common: the full install
def test_the_fp16_cast_keeps_fp32_buffers_and_range_sensitive_nodes_and_computes_the_same(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto

    from inferbench.exporters import onnx_fp16

    ctx = ExportContext(tmp_path, "mobilenet_v3_small", 16, "random", 0)
    _small_onnx(ctx.path("onnx"))
    info = onnx_fp16.export(ctx)
    half = onnx.load(str(ctx.path("onnx-fp16")))
    assert [i.type.tensor_type.elem_type for i in (*half.graph.input, *half.graph.output)] == [TensorProto.FLOAT] * 2
    assert {i.name: i.data_type for i in half.graph.initializer if i.name in ("w", "fc")} == \
        {"w": TensorProto.FLOAT16, "fc": TensorProto.FLOAT16}  # the weights are FP16
    assert info["kept_fp32"] == ["logits (Softmax)"]  # the softmax's exponentials stay in FP32, said by name
    assert "onnxconverter-common" in info["converter"]
    x = np.random.default_rng(1).uniform(0, 1, (4, 16, 16, 3)).astype(np.float32)
    run = {k: ort.InferenceSession(str(ctx.path(k)), providers=["CPUExecutionProvider"]) for k in ("onnx", "onnx-fp16")}
    fp32, fp16 = (run[k].run(None, {"images": x})[0] for k in ("onnx", "onnx-fp16"))
    assert fp16.dtype == np.float32 and fp16.shape == (4, 5)
    assert np.abs(fp16 - fp32).max() < 5e-3 and not np.array_equal(fp16, fp32)  # FP16 arithmetic, close to FP32


def test_an_output_left_in_fp16_that_other_nodes_read_is_given_in_fp32_and_still_feeds_them_fp16():
    """The converter's fix-up, on a graph that holds the case (an FP16 output that a later node reads as well)."""
    import onnx
    from onnx import TensorProto, helper

    from inferbench.exporters.onnx_fp16 import outputs_in_fp32

    f16 = TensorProto.FLOAT16
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"])]
    value = lambda name: helper.make_tensor_value_info(name, f16, [2])  # noqa: E731
    graph = helper.make_graph(nodes, "g", [value("x")], [value("a"), value("b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    outputs_in_fp32(model, {"a"})
    onnx.checker.check_model(model, full_check=True)  # types agree: Neg still reads an FP16 tensor
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [TensorProto.FLOAT, f16]
    assert [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == [
        ("Relu", ["x"], ["a_fp16"]), ("Neg", ["a_fp16"], ["b"]), ("Cast", ["a_fp16"], ["a"])]


@pytest.fixture(scope="module")
def real_trt(tmp_path_factory):
    """TensorRT 11.4's real Python bindings, their libraries stood in for (tests/trt_surface.py)."""
    from trt_surface import bindings

    return bindings(tmp_path_factory.mktemp("trt-libs"))


def test_the_real_tensorrt_11_bindings_load_here_and_lack_every_api_that_inferbench_treats_as_removed(real_trt):
    from trt_surface import Checked

    assert real_trt.__version__.startswith("11.")
    classes = [c for c in vars(real_trt).values() if isinstance(c, type)]
    still = [api for api in REMOVED if ("." in api and hasattr(getattr(real_trt, api.split(".")[0]), api.split(".")[1]))
             or ("." not in api and any(api in vars(c) for c in classes))]
    assert not still, still
    # what the build and the runner rely on is there, and the stand-ins for the libraries stop a real build at once
    assert {"STRONGLY_TYPED"} <= set(real_trt.NetworkDefinitionCreationFlag.__members__)
    assert {"TF32"} <= set(real_trt.BuilderFlag.__members__) and "FP16" not in real_trt.BuilderFlag.__members__
    with pytest.raises(TypeError, match="nullptr"):
        real_trt.Builder(real_trt.Logger(real_trt.Logger.WARNING))
    # the checking object refuses what the class does not have, and a call the bindings would refuse
    config = Checked(real_trt, real_trt.IBuilderConfig, {}, [])
    with pytest.raises(AttributeError, match="has no int8_calibrator"):
        config.int8_calibrator = None
    with pytest.raises(TypeError, match="no overload of IBuilderConfig.set_flag"):
        config.set_flag(1)  # an int where the bindings take a BuilderFlag
    with pytest.raises(TypeError, match="no overload of IBuilderConfig.set_memory_pool_limit"):
        config.set_memory_pool_limit(real_trt.MemoryPoolType.WORKSPACE)  # its size missing


def _answers(trt, outputs: dict[str, str]) -> dict:
    """What the engine and its parts say when asked: an input ``images`` and ``outputs`` (name → TensorRT type)."""
    names = ["images", *outputs]
    return {"OnnxParser.parse_from_file": True, "ITensor.name": "images",
            "Builder.build_serialized_network": b"plan", "ITimingCache.serialize": b"cache",
            "ICudaEngine.num_io_tensors": len(names), "ICudaEngine.num_layers": 2,
            "ICudaEngine.get_tensor_name": lambda i: names[i],
            "ICudaEngine.get_tensor_mode": lambda n: getattr(trt.TensorIOMode, "INPUT" if n == "images" else "OUTPUT"),
            "ICudaEngine.get_tensor_dtype": lambda n: getattr(trt.DataType, outputs[n]),
            "EngineInspector.get_layer_information": lambda i, f: '{"LayerType": "Convolution"}',
            "IExecutionContext.get_tensor_shape": lambda n: (2, 5)}


class _Tensor:
    """A CUDA tensor's surface as the TensorRT runner uses it (no CUDA here)."""

    def __init__(self, shape: tuple, dtype: str = "float32") -> None:
        self.shape, self.dtype, self.device = tuple(shape), dtype, "cuda"

    def cuda(self) -> _Tensor:
        return self

    def index_select(self, dim: int, indices) -> _Tensor:
        return _Tensor((len(indices), *self.shape[1:]), self.dtype)

    def data_ptr(self) -> int:
        return 1 << 20

    def cpu(self) -> _Tensor:
        return self

    def numpy(self) -> np.ndarray:
        return np.zeros(self.shape, self.dtype)


def _cuda_torch() -> types.SimpleNamespace:
    """torch as the TensorRT runner sees it on a GPU: CUDA streams, device tensors, dtypes by name."""
    stream = types.SimpleNamespace(wait_stream=lambda s: None, synchronize=lambda: None, cuda_stream=7)
    cuda = types.SimpleNamespace(is_available=lambda: True, get_device_name=lambda i: "NVIDIA H200",
                                 Stream=lambda: stream, current_stream=lambda: stream,
                                 get_device_properties=lambda i: types.SimpleNamespace(uuid="0123"))
    dtypes = {n: n for n in ("float32", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool")}
    return types.SimpleNamespace(cuda=cuda, from_numpy=lambda a: _Tensor(a.shape), as_tensor=lambda a, device: a,
                                 empty=lambda shape, dtype, device: _Tensor(shape, dtype), **dtypes)


@pytest.mark.parametrize("precision, model", [("fp32", None), ("fp16", "onnx-fp16/model.onnx"),
                                              ("int8", "onnx-int8-sym/0123abcd.onnx")])
def test_the_build_and_the_runner_call_tensorrt_11_as_its_real_bindings_declare(
        real_trt, tmp_path, monkeypatch, precision, model):
    from trt_surface import Module

    from inferbench.runners.base import LoadContext
    from inferbench.runners.tensorrt import TensorRTRunner

    answers = _answers(real_trt, {"boxes": "FLOAT", "labels": "INT64"})
    trt = Module(real_trt, ("Builder", "OnnxParser", "Runtime"), answers, [])
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "torch", _cuda_torch())
    spec = __import__("inferbench.registry.models", fromlist=["get_model"]).get_model("mobilenet_v3_small")
    source = tmp_path / model if model else None
    runner = TensorRTRunner()
    runner.load(LoadContext(tmp_path, source, spec, 96, "gpu", 1, 0, precision, batch_sizes=(1, 8)))
    outputs = runner.call(runner.gather(runner.resident(np.zeros((4, 96, 96, 3), np.float32)), np.arange(2)))
    assert {n: (y.shape, y.dtype) for n, y in outputs.items()} == {"boxes": ((2, 5), "float32"),
                                                                   "labels": ((2, 5), "int64")}
    assert set(runner.to_numpy(outputs)) == {"boxes", "labels"}
    # the calls that matter were made, each through the real bindings' signature
    made = set(trt.calls)
    assert {"Builder.create_network", "IBuilderConfig.clear_flag", "IOptimizationProfile.set_shape",
            "Builder.build_serialized_network", "Runtime.engine_host_code_allowed=", "Runtime.deserialize_cuda_engine",
            "EngineInspector.get_layer_information", "IExecutionContext.set_tensor_address",
            "IExecutionContext.execute_async_v3"} <= made, made
    assert "IBuilderConfig.set_flag" not in made  # no precision flag: the ONNX model's types decide
    assert set(answers) <= made  # every answer was asked for: a method the bindings name otherwise would fail here
    assert runner.details()["engine"].endswith(".plan") and (tmp_path / "tensorrt").is_dir()
