"""Reduced-precision exports made wrong on purpose, for tests/test_precision_real.py (run as a child process: torch
never shares a process with TensorFlow): the torchvision twin of a cached model, built from its ported Keras weights
as inferbench's torch runners build it, computed in FP16 or BF16 on the model's 16 reference inputs, with one defect.

    python tests/precision_defects.py FOLDER OTHER_FOLDER DEFECT,fp16|bf16,OUT.npy,reference|agreement:N ...

(every export named, one after another in one process: each its own process took 14 s of the suite's time)

DEFECT: ``none`` (a correct export); ``perturbed:F`` (one middle layer's weights off by F: each weight times
1 + F z); ``wrong-cast`` (the logits layer computed from its FP32-range input scaled by 1e4, the result scaled back:
exact in FP32, overflowing in FP16); ``other-model`` (OTHER_FOLDER's model on the same inputs). On the 16 reference
inputs (and then each stage's error against the same module in FP64 beside OUT, ``OUT.blocks.json``), or on the N
agreement inputs (``inferbench.registry.inputs.agreement_inputs``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

PERTURBED_LAYER = "expanded_conv_4_project/kernel"  # MobileNetV3-Large's block 4 projection, a middle layer


def twin(folder: Path, dtype, perturb: float = 0.0):
    import json

    from inferbench.registry.ports import build_torchvision

    name = json.loads((folder / "manifest.json").read_text())["key_inputs"]["model"]
    with np.load(folder / "ported" / "keras_weights.npz") as arrays:
        weights = {k: arrays[k] for k in arrays.files}
    if perturb:
        w = weights[PERTURBED_LAYER]
        weights[PERTURBED_LAYER] = (w * (1 + perturb * np.random.default_rng(0).standard_normal(w.shape))).astype(
            w.dtype)
    return build_torchvision(name, weights).to(dtype).eval()


def main(folder: str, other: str, *jobs: str) -> None:
    for job in jobs:
        made(folder, *job.split(","), other=other)


def made(folder: str, defect: str, precision: str, out: str, which: str, other: str) -> None:
    import json

    import torch

    from inferbench.registry.inputs import agreement_inputs
    from inferbench.registry.models import get_model

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    if which == "reference":
        nhwc = np.load(Path(folder) / "reference" / "inputs.npy")
    else:
        key = json.loads((Path(folder) / "manifest.json").read_text())["key_inputs"]
        nhwc = np.concatenate(list(agreement_inputs(get_model(key["model"]), key["resolution"], key["seed"],
                                                    int(which.split(":")[1]))))
    inputs = torch.from_numpy(nhwc.transpose(0, 3, 1, 2).copy())
    source = Path(other if defect == "other-model" else folder)
    module = twin(source, dtype, float(defect.split(":")[1]) if defect.startswith("perturbed:") else 0.0)
    if defect == "wrong-cast":
        class Scaled(torch.nn.Module):
            def __init__(self, head):
                super().__init__()
                self.head = head  # a submodule: copied, and cast, with the module

            def forward(self, x):
                return self.head(x * 1e4) / 1e4

        module.net.classifier[-1] = Scaled(module.net.classifier[-1])
    with torch.no_grad():
        np.save(out, module(inputs.to(dtype)).float().numpy())
    if which == "reference":  # where it goes wrong, as a torch cell's failed parity check reads it
        import copy

        from inferbench.runners.torch_stages import stage_errors

        blocks = stage_errors(torch, module, copy.deepcopy(module).double(), inputs.to(dtype), inputs.double())
        Path(out + ".blocks.json").write_text(json.dumps(blocks))


if __name__ == "__main__":
    main(*sys.argv[1:])
