"""PyTorch runners: ``torch`` (the ONNX-converted module, identical weights) and ``torch-native``
(torchvision's implementation of the same architecture, its own seeded weights)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import LoadContext, Runner


class TorchRunner(Runner):
    name = "torch"
    channels_first = False  # the converted module takes NHWC, as the ONNX graph does

    def load(self, ctx: LoadContext) -> None:
        import torch

        self.torch = torch
        torch.set_num_threads(ctx.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set in this process
            pass
        self.dev = torch.device("cuda:0" if ctx.device == "gpu" else "cpu")
        if ctx.device == "gpu" and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device (is a CUDA build of torch installed?)")
        self.module = self.build(ctx).to(self.dev).eval()

    def build(self, ctx: LoadContext) -> Any:
        return self.torch.load(ctx.artifact, weights_only=False)

    def prepare(self, batch: np.ndarray) -> Any:
        if self.channels_first:
            batch = np.ascontiguousarray(batch.transpose(0, 3, 1, 2))
        return self.torch.from_numpy(batch).to(self.dev)

    def call(self, prepared: Any) -> Any:
        with self.torch.inference_mode():
            return self.module(prepared)

    def synchronize(self, outputs: Any) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def to_numpy(self, outputs: Any) -> np.ndarray:
        return outputs.float().cpu().numpy()

    def details(self) -> dict[str, Any]:
        return {
            "sync": "torch.cuda.synchronize()" if self.dev.type == "cuda"
            else "none needed: CPU ops finish before the call returns",
            "inference_mode": True,
            "intra_op_threads": self.torch.get_num_threads(),
            "inter_op_threads": self.torch.get_num_interop_threads(),
            "input_layout": "NCHW" if self.channels_first else "NHWC",
        }


class TorchNativeRunner(TorchRunner):
    name = "torch-native"
    channels_first = True

    def build(self, ctx: LoadContext) -> Any:
        import torchvision

        if ctx.model.torchvision_builder is None:
            raise RuntimeError(f"torchvision has no implementation of {ctx.model.name}")
        self.torch.manual_seed(ctx.seed)
        return getattr(torchvision.models, ctx.model.torchvision_builder)(weights=None)
