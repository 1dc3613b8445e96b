"""TensorRT runners (``tensorrt-fp32``, ``tensorrt-fp16``, ``tensorrt-int8``): a strongly typed engine from the ONNX
export (FP16: from its FP16 cast; INT8: from its symmetric QDQ model, explicit quantisation), executed on a CUDA
stream with device buffers (torch tensors), synchronised with the stream; every output bound by the ONNX export's
name, each in its own type.

NOT RUN in this project's CI or on its development machines (building or running an engine needs an NVIDIA GPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import MissingDependency
from ..exporters.tensorrt import build_engine, engine_path, engine_tag
from ..registry.artifacts import ExportContext
from ..registry.programs import check_engine
from .base import LoadContext, Runner
from .torch import cuda_uuid


class TensorRTRunner(Runner):
    name = "tensorrt"

    def load(self, ctx: LoadContext) -> None:
        try:
            import tensorrt as trt
        except ImportError:
            raise MissingDependency("tensorrt", "tensorrt", "tensorrt-fp32/fp16/int8") from None
        import torch

        if ctx.device != "gpu" or not torch.cuda.is_available():
            raise RuntimeError("TensorRT needs an NVIDIA GPU")
        precision = ctx.precision
        batch_sizes = ctx.batch_sizes
        ectx = ExportContext(ctx.folder, ctx.model.name, ctx.resolution, "n/a", ctx.seed, batch_sizes)
        gpu_name = torch.cuda.get_device_name(0)

        # the ONNX model whose types the engine takes: FP16's cast, INT8's symmetric QDQ model (per calibration set)
        source = ctx.artifact if precision in ("fp16", "int8") else None
        path = engine_path(ectx, engine_tag(precision, source), gpu_name, trt.__version__)
        self.build_info = {"engine": str(path), "cached": path.exists()}
        if not path.exists():
            self.build_info.update(build_engine(ectx, precision, gpu_name, source))
        self.torch, self.trt = torch, trt
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))  # must outlive the engine
        self.runtime.engine_host_code_allowed = False  # an engine's own host code (a plugin library in it) never runs
        self.engine = self.runtime.deserialize_cuda_engine(path.read_bytes())
        if self.engine is None:
            raise RuntimeError(f"TensorRT could not load the engine {path} (built by another TensorRT?)")
        inspector = self.engine.create_engine_inspector()
        check_engine(self.engine, path, lambda i: inspector.get_layer_information(i, trt.LayerInformationFormat.JSON))
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_name = next(n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
        # every output by the ONNX export's own name, a buffer of its own type each (a detector's boxes, scores and
        # labels: float32, float32, int64)
        self.output_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self.output_types = {n: _torch_dtype(torch, self.engine.get_tensor_dtype(n)) for n in self.output_names}
        self.stream = torch.cuda.Stream()
        self.precision = precision

    def prepare(self, batch: np.ndarray) -> Any:
        return self._bound(self.resident(batch))

    def resident(self, samples: np.ndarray) -> Any:
        return self.torch.from_numpy(samples).cuda()

    def gather(self, resident: Any, indices: np.ndarray) -> Any:
        return self._bound(resident.index_select(0, self.torch.as_tensor(indices, device=resident.device)))

    def placement(self) -> dict[str, Any]:
        return {"resident": True, "placement": "torch CUDA tensor (NHWC, float32); each batch an index_select there"}

    def serving_concurrency(self) -> int:
        return 1  # one execution context: its shapes and addresses are set per call

    def _bound(self, x: Any) -> Any:
        """A device input with a buffer for each output, the engine's shapes set for it."""
        torch = self.torch
        if not self.context.set_input_shape(self.input_name, tuple(x.shape)):
            raise RuntimeError(f"input shape {tuple(x.shape)} is outside the engine's optimisation profile")
        ys = {}
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            if min(shape, default=0) < 0:  # a shape known only after the run (NonZero, a dynamic NMS)
                raise RuntimeError(f"TensorRT gives the output {name} a shape known only after each call ({shape}); "
                                   "inferbench binds fixed buffers: run this model on onnxrt or openvino")
            ys[name] = torch.empty(shape, dtype=self.output_types[name], device="cuda")
        # the copy and allocation ran on torch's stream; TensorRT's stream must not start before them
        self.stream.wait_stream(torch.cuda.current_stream())
        return (x, ys)

    def call(self, prepared: Any) -> Any:
        # shape and addresses belong to this input (the context is shared by every prepared input);
        # setting them is host-side bookkeeping, far below the engine's run time
        x, ys = prepared
        self.context.set_input_shape(self.input_name, tuple(x.shape))
        self.context.set_tensor_address(self.input_name, x.data_ptr())
        for name, y in ys.items():
            self.context.set_tensor_address(name, y.data_ptr())
        self.context.execute_async_v3(self.stream.cuda_stream)
        return ys

    def synchronize(self, outputs: Any) -> None:
        self.stream.synchronize()

    def to_numpy(self, outputs: Any) -> Any:
        self.stream.synchronize()  # the outputs are written on TensorRT's stream, not torch's
        arrays = {name: y.cpu().numpy() for name, y in outputs.items()}
        return next(iter(arrays.values())) if len(arrays) == 1 else arrays

    def device_uuid(self) -> str | None:
        return cuda_uuid(self.torch)

    def details(self) -> dict[str, Any]:
        return {"sync": "cuda-stream.synchronize", "precision": self.precision, "tf32": False, **self.build_info}


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    """The torch type of a TensorRT tensor type (by the enum's name: FLOAT, HALF, BF16, INT8, UINT8, INT32, INT64,
    BOOL); one line for a type inferbench cannot bind (FP8, FP4, INT4)."""
    types = {"FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16, "INT8": torch.int8,
             "UINT8": torch.uint8, "INT32": torch.int32, "INT64": torch.int64, "BOOL": torch.bool}
    name = getattr(dtype, "name", str(dtype).rsplit(".", 1)[-1])
    if name not in types:
        raise RuntimeError(f"a TensorRT output of type {name}: inferbench binds {', '.join(types)}")
    return types[name]
