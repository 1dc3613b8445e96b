"""Writes the labelled set of docs/measured.md's segmenter run: a segmentation set (``images/``, ``masks/``) whose
masks are what the FP32 model itself finds (tests/detectors.py's ``masks_from_segmenter``), so that a reduced
precision is judged by mean IoU against FP32's own masks: FP32's mean IoU on it is 1 by construction, and the set
judges what INT8 loses, not the (seeded) model.

Usage: ``python benchmarks/segmentation_labels.py MODEL.onnx DIR [REGISTERED_NAME]``: MODEL.onnx is the segmenter's
FP32 ONNX export as inferbench made it (``<cache>/<model>_520_*/onnx/model.onnx`` after an FP32 run of
``torchvision:lraspp_mobilenet_v3_large``), REGISTERED_NAME the model whose preparation its images take; then:

    inferbench run --model torchvision:lraspp_mobilenet_v3_large --framework onnxrt --precision int8 \
        --batch-size 1,8 --eval-dir DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from detectors import masks_from_segmenter  # noqa: E402


def main(model: str, folder: str, name: str = "torchvision:lraspp_mobilenet_v3_large") -> None:
    classes = masks_from_segmenter(model, folder, name)
    print(f"{folder}: 16 images and their masks (520 px), {classes} classes, labelled by the FP32 model itself")


if __name__ == "__main__":
    main(*sys.argv[1:])
