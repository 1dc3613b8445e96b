"""Writes the two task models the committed detection and segmentation runs timed (benchmark_results/tasks-cpu-*),
made by the tests' own builders (tests/detectors.py: no one's detector code, seeded weights):

- ``yolo_layout_640.onnx``: an anchor-free detector whose one output is YOLOv8's raw head, ``[batch, 84, 8400]`` at
  640x640 (80 classes, strides 8/16/32), channels 4x the tests' (1.83 GFLOP an image, a fifth of YOLOv8n's 8.7), its
  class logits biased by -3.6 so that most anchors fall below the score threshold, as a trained detector's do (on
  seeded image-like inputs, 0 to 810 of the 8,400 anchors an image pass it, varying with the image; each record's
  ``postprocess.kept`` says how many boxes each image of the timed batch kept);
- ``yolo_layout_384x640.onnx``: the same detector (the same seed, so the same weights) at 384 x 640 (height x
  width: a landscape frame, as YOLO users run video), ``[batch, 84, 5040]``;
- ``segmenter_520.onnx``: a segmenter with torchvision's LR-ASPP's output, ``out`` ``[batch, 21, 520, 520]``;
- ``coco_384x640/``: a labelled set the tests' way (tests/detectors.py's ``coco_from_detections``): 24 seeded
  image-like images 640 wide, their boxes what the 384x640 detector finds in FP32 (those above one score floor for
  the set, 20 an image on average, cut to the image): FP32's mAP on it is 1 or near by construction; it judges what
  INT8 loses, not the detector;
- ``coco_640/``: the same for the 640x640 detector (24 images 640 wide, 640 + 8i high, resized whole to 640);
- ``coco_ssdlite_320/``: the same for ``torchvision:ssdlite320_mobilenet_v3_large`` at 320 (the run's own seeded,
  conditioned weights, torch in a process of its own): 24 images 640 wide and 480 + 8i high, their classes COCO's
  category ids as torchvision's are.

Usage: ``python benchmarks/detection_models.py DIR``, then (docs/measured.md has the runs):

    D=DIR/yolo_layout_640.onnx S=DIR/segmenter_520.onnx
    inferbench run --model $D --task detection --framework onnxrt,openvino,torch --batch-size 1,8
    inferbench run --model $D --task detection --framework onnxrt --precision int8 --batch-size 1,8
    W=DIR/yolo_layout_384x640.onnx   # the same two runs at 384x640, and its INT8 judged by mAP:
    inferbench run --model $W --task detection --framework onnxrt --precision int8 --batch-size 1,8 \
        --eval-dir DIR/coco_384x640
    inferbench run --model $D --task detection --framework onnxrt --precision int8 --batch-size 1 \
        --eval-dir DIR/coco_640
    inferbench run --model $S --task segmentation --framework onnxrt,openvino,torch --batch-size 1,8
    inferbench run --model torchvision:ssdlite320_mobilenet_v3_large --framework onnxrt,openvino,torch-inductor \
        --precision int8 --batch-size 1,8 --eval-dir DIR/coco_ssdlite_320
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from detectors import coco_from_detections, segmenter_onnx, torch_heads, yolo_layout_onnx  # noqa: E402

#: The labelled set of the 384x640 detector: images, each image's best boxes (what FP32 finds in it).
LABELLED_IMAGES, LABELLED_TOP = 24, 20


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    square = yolo_layout_onnx(out / "yolo_layout_640.onnx", size=640, classes=80, width=4, score_bias=-3.6)
    print(square)
    wide = yolo_layout_onnx(out / "yolo_layout_384x640.onnx", size=(384, 640), classes=80, width=4, score_bias=-3.6)
    print(wide)
    print(segmenter_onnx(out / "segmenter_520.onnx", size=520, classes=21))
    boxes = coco_from_detections(wide, out / "coco_384x640", size=(384, 640), images=LABELLED_IMAGES,
                                 categories=range(1, 81), top=LABELLED_TOP, width=640, height=360)
    print(f"{out / 'coco_384x640'}: {LABELLED_IMAGES} images, {boxes} boxes labelled by the FP32 detector itself")
    boxes = coco_from_detections(square, out / "coco_640", size=640, images=LABELLED_IMAGES,
                                 categories=range(1, 81), top=LABELLED_TOP, width=640, height=640)
    print(f"{out / 'coco_640'}: {LABELLED_IMAGES} images, {boxes} boxes labelled by the FP32 detector itself")
    boxes = coco_from_detections(None, out / "coco_ssdlite_320", size=320, images=LABELLED_IMAGES, top=LABELLED_TOP,
                                 width=640, height=480, spec="torchvision:ssdlite320_mobilenet_v3_large",
                                 heads=torch_heads(out, (320, 320)))
    print(f"{out / 'coco_ssdlite_320'}: {LABELLED_IMAGES} images, {boxes} boxes labelled by SSDlite's FP32 itself")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "task-models")
