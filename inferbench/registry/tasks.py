"""The tasks a model can do: one entry each, declaring what the rest of the code asks of it (its module, what its
outputs are, what its labelled images would give, what runs after the call). Code outside ``inferbench/tasks/`` asks
the entry or the module, never the name; nothing is imported until a worker or an export needs the module.

A task's module (a :class:`TaskModule`) names its outputs' kinds, splits a batch's outputs into the parts parity
judges, runs the post-processing every runtime shares, and measures the agreement of two runtimes after it."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..base.errors import UsageError, did_you_mean
from .outputs import Output


@runtime_checkable
class TaskModule(Protocol):
    def claims(self, outputs: Sequence[Output], size: tuple[int, int]) -> bool:
        """Whether outputs of these shapes (an image's, the batch left out) from images of ``size`` (height, width)
        are this task's beyond doubt: --task auto takes the first task in :data:`TASKS` that claims them."""

    def kinds(self, outputs: Sequence[Output], where: str) -> list[Output]:
        """The model's outputs with their kinds; a UsageError (one line, naming ``where``) where this task cannot
        read them."""

    def align(self, reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
              outputs: Sequence[Output]) -> tuple[dict[str, np.ndarray], ...]:
        """Both sides' outputs (by name) with the same results in the same rows, before parity compares them
        (detections a graph kept, whose order may differ: paired); as they are where rows cannot move."""

    def parts(self, arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> dict[str, tuple[np.ndarray, str]]:
        """What parity judges, by name: each an array (one row an image) and its kind."""

    def postprocess(self, arrays: dict[str, np.ndarray], outputs: Sequence[Output]) -> list[Any] | None:
        """The shared post-processing's result per image (None: the task has none)."""

    def agreement(self, reference: list[Any], candidate: list[Any]) -> dict[str, Any]:
        """How far two post-processed results agree (the reference's and a runtime's, on the same inputs)."""

    def accuracy(self, labels: Any, candidate: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                 outputs: Sequence[Output], precision: str) -> dict[str, Any]:
        """A cell's accuracy on labelled images beside FP32's (the source's ``reference`` outputs on the same images),
        and for a reduced precision the gate (MLPerf's 99% of FP32's); ``labels``: what the images are labelled with
        (:func:`inferbench.registry.images.labels`)."""

    def broken(self, agreement: dict[str, Any]) -> bool:
        """Whether :meth:`agreement`'s result is so far from FP32's that no correct quantisation comes near (below
        :data:`inferbench.measure.parity.INT8_GROSS_FLOOR`)."""

    def said(self, agreement: dict[str, Any], inputs: str = "reference inputs") -> str:
        """:meth:`agreement`'s result as the answer says it, in a phrase ("" where the task has none), over the
        ``inputs`` it was measured on."""


@dataclass(frozen=True)
class Task:
    module: str  # "inferbench.tasks.detection": a TaskModule
    outputs: str  # what its outputs are, in words
    accuracy: str = ""  # what labelled images give it ("": none; --eval-dir is refused in one line)
    classifier: bool = False  # its reference must name several top classes (parity.check_reference)
    postprocess: str = ""  # what runs after the call, the same code for every runtime ("": nothing)
    labels: str = ""  # what its labelled images are labelled with: "classes", "boxes" (a COCO file), "masks"; "": none
    float_outputs: bool = False  # INT8 leaves the operators writing its outputs in FP32 (outputs of mixed ranges)
    whole_image: bool = False  # the user's images (labelled, calibration) resized whole, never centre-cropped
    headline: str = ""  # the accuracy block's metric that decides (parity.accuracy.KEY: its value and FP32's)

    @property
    def agrees_over_many(self) -> bool:
        """Is a reduced precision's agreement with FP32 counted over ``--agreement-inputs``: a classifier's top
        classes, or the results after a post-processing (none for outputs of no known meaning)?"""
        return self.classifier or bool(self.postprocess)


#: What a labelled set's layout (registry/images.py's EvalSet.layout) labels its images with.
LABELS_OF_LAYOUT = {"coco": "boxes", "folders": "classes", "labels": "classes", "masks": "masks"}


TASKS: dict[str, Task] = {
    "classification": Task("inferbench.tasks.classification", "one array of class scores (logits) an image",
                           "top-1 and top-5 accuracy", classifier=True, labels="classes", headline="top1"),
    "detection": Task("inferbench.tasks.detection", "raw detection heads: YOLOv8's anchor-free [4 + classes, "
                      "anchors] an image (box centre, width and height in pixels, then each class's score), or SSD's "
                      "(bbox_regression, cls_logits, anchors, image_size: torchvision's SSDlite cut before its NMS), "
                      "or the detections a graph kept itself (boxes, scores, labels padded to a cap: torchvision's "
                      "Faster R-CNN, its suppression in the graph)",
                      accuracy="COCO mAP@[.5:.95] and mAP@.5 (faster-coco-eval), on a COCO instances file",
                      labels="boxes", float_outputs=True, whole_image=True, headline="map",
                      postprocess="boxes decoded, class-aware non-maximum suppression (inferbench.tasks.nms; none "
                      "where the graph holds its own: timed inside the call)"),
    "segmentation": Task("inferbench.tasks.segmentation", "class scores a pixel, [classes, height, width] an image "
                         "(torchvision's LR-ASPP and DeepLabV3: out, and aux where it has one)",
                         accuracy="mean IoU and pixel accuracy, on images with their masks (images/, masks/)",
                         labels="masks", headline="miou",
                         postprocess="each pixel's top class (inferbench.tasks.segmentation)", whole_image=True),
    "raw": Task("inferbench.tasks.raw", "outputs of no known meaning, each compared as numbers"),
}
#: A model file's task unless --task names one: the first task whose module claims its outputs (one output of one
#: dimension an image is a classifier's; YOLOv8's head of as many anchors as strides 8, 16 and 32 give the image, or
#: SSD's named heads, a detector's; class scores a pixel at the image's own size a segmenter's), anything else raw
#: (what inferbench cannot know the meaning of).
AUTO = "auto"


def task(name: str | None) -> Task:
    """The entry of task ``name`` (None: classification's, as a record from before tasks)."""
    key = name or "classification"
    if key not in TASKS:
        raise UsageError(f"unknown task {key!r}{did_you_mean(key, TASKS)}; tasks: {', '.join(TASKS)}")
    return TASKS[key]


def task_module(name: str | None) -> TaskModule:
    module = importlib.import_module(task(name).module)
    if not isinstance(module, TaskModule):
        raise TypeError(f"{module.__name__} lacks kinds, parts, postprocess or agreement (registry/tasks.TaskModule)")
    return module


def class_scores(output: Output) -> bool:
    """Is ``output`` one array of class scores an image: one dimension, or one that is not 1 among dimensions of 1
    (``[1000, 1, 1]`` or ``[1, 1000]``, as some exports keep a convolutional classifier's)?"""
    return len([d for d in output.shape if d != 1]) == 1 or output.shape in ((0,), ())


def guess(outputs: Sequence[Output], size: tuple[int, int]) -> str:
    """The task a model file's outputs suggest when --task is auto: the first in :data:`TASKS` whose module claims
    them (raw claims anything)."""
    return next(name for name in TASKS if task_module(name).claims(outputs, size))
