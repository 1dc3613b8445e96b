"""Small models of the layouts detection users bring, made by the tests (no one's detector code): an anchor-free
detector whose one output is YOLOv8's raw head, ``[batch, 4 + classes, anchors]`` (box centre, width and height in
input pixels, then each class's probability), at strides 8, 16 and 32; and the same graph with a planted fault (a
box decode off by a pixel row, the head's rows swapped) or a second output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

STRIDES = (8, 16, 32)


def yolo_layout_onnx(path, size=64, classes=3, seed=0, fault=None, extra_output=False, width=1, score_bias=0.0):
    """Write the detector to ``path`` (an NCHW float32 input of ``size`` px a side, or (height, width), RGB in
    [0, 255]); ``fault``: None,
    "box-shift" (every box's centre y one pixel off: a wrong decode), "swapped" (box rows after the scores);
    ``width`` multiplies its channels, ``score_bias`` is added to every class's logit (below 0: few boxes pass the
    score threshold, as with a trained detector's)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    height, width_px = (size, size) if isinstance(size, int) else size

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    def conv(x, cin, cout, stride, name, k=3, relu=True, bias=None):
        w = rng.normal(0, (2 / (cin * k * k)) ** 0.5, (cout, cin, k, k))
        b = rng.normal(0, 0.1, cout) + (0 if bias is None else bias)
        nodes.append(helper.make_node("Conv", [x, const(f"{name}.w", w), const(f"{name}.b", b)],
                                      [f"{name}.y"], strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return f"{name}.y"
        nodes.append(helper.make_node("Relu", [f"{name}.y"], [f"{name}.r"]))
        return f"{name}.r"

    nodes.append(helper.make_node("Mul", ["images", const("scale", 1 / 255)], ["x"]))
    c1, c2 = 8 * width, 16 * width
    x = conv(conv(conv("x", 3, c1, 2, "s2"), c1, c2, 2, "s4"), c2, c2, 2, "p8")
    levels, grids, strides = [], [], []
    for stride in STRIDES:
        if stride > 8:
            x = conv(x, c2, c2, 2, f"p{stride}")
        head = conv(x, c2, 4 + classes, 1, f"head{stride}", k=1, relu=False,
                    bias=np.r_[np.zeros(4), np.full(classes, score_bias)])
        nodes.append(helper.make_node("Reshape", [head, f"shape{stride}"], [f"flat{stride}"]))
        inits.append(numpy_helper.from_array(np.array([0, 4 + classes, -1], dtype=np.int64), f"shape{stride}"))
        levels.append(f"flat{stride}")
        ny, nx = height // stride, width_px // stride
        gy, gx = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
        grids.append(np.stack([gx.ravel(), gy.ravel()]))
        strides.append(np.full(ny * nx, stride))
    nodes.append(helper.make_node("Concat", levels, ["raw"], axis=2))
    split = [const_i for const_i in ("split",)]
    inits.append(numpy_helper.from_array(np.array([2, 2, classes], dtype=np.int64), "split"))
    nodes.append(helper.make_node("Split", ["raw", split[0]], ["txy", "twh", "tcls"], axis=1))
    grid, stride_row = const("grid", np.concatenate(grids, axis=1)[None] + 0.5), const(
        "stride", np.concatenate(strides)[None, None])
    nodes += [helper.make_node("Sigmoid", ["txy"], ["sxy"]),
              helper.make_node("Sub", ["sxy", const("half", 0.5)], ["dxy"]),
              helper.make_node("Add", ["dxy", grid], ["gxy"]),
              helper.make_node("Mul", ["gxy", stride_row], ["xy0"]),
              helper.make_node("Clip", ["twh", const("lo", -3.0), const("hi", 3.0)], ["cwh"]),
              helper.make_node("Exp", ["cwh"], ["ewh"]),
              helper.make_node("Mul", ["ewh", stride_row], ["wh1"]),
              helper.make_node("Mul", ["wh1", const("two", 2.0)], ["wh"]),
              helper.make_node("Sigmoid", ["tcls"], ["scores"])]
    if fault == "box-shift":
        nodes.append(helper.make_node("Add", ["xy0", const("shift", [[[0.0], [1.0]]])], ["xy"]))
    else:
        nodes.append(helper.make_node("Identity", ["xy0"], ["xy"]))
    parts = ["scores", "xy", "wh"] if fault == "swapped" else ["xy", "wh", "scores"]
    nodes.append(helper.make_node("Concat", parts, ["output0"], axis=1))
    anchors = sum((height // s) * (width_px // s) for s in STRIDES)
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 4 + classes, anchors])]
    if extra_output:
        nodes.append(helper.make_node("GlobalAveragePool", [x], ["features"]))
        outputs.append(helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", c2, 1, 1]))
    return _save(path, "yolo-layout", nodes, outputs, inits, (height, width_px))


def segmenter_onnx(path, size=64, classes=4, seed=0, fault=None, aux=False):
    """A small semantic segmenter as torchvision's LR-ASPP gives its outputs: ``out``, class scores a pixel
    ``[batch, classes, size, size]`` (features at stride 8, scored, resized back), and with ``aux`` a second head.
    ``fault``: "row-shift" (the mask one pixel row down: a wrong resize)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, array, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    x = "x"
    nodes.append(helper.make_node("Mul", ["images", const("scale", 1 / 255)], [x]))
    for i, (cin, cout) in enumerate(((3, 8), (8, 16), (16, 16))):
        w = rng.normal(0, (2 / (cin * 9)) ** 0.5, (cout, cin, 3, 3))
        nodes += [helper.make_node("Conv", [x, const(f"w{i}", w), const(f"b{i}", rng.normal(0, 0.1, cout))],
                                   [f"c{i}"], strides=[2, 2], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    nodes += [helper.make_node("Conv", [x, const("wc", rng.normal(0, 0.5, (classes, 16, 1, 1))),
                                        const("bc", rng.normal(0, 0.5, classes))], ["low"]),
              helper.make_node("Resize", ["low", "", const("up", [1, 1, 8, 8])], ["full"], mode="linear")]
    if fault == "row-shift":
        nodes += [helper.make_node("Slice", ["full", const("s0", [0], np.int64), const("s1", [size - 1], np.int64),
                                             const("ax", [2], np.int64)], ["cut"]),
                  helper.make_node("Pad", ["cut", const("pads", [0, 0, 1, 0, 0, 0, 0, 0], np.int64)], ["out"],
                                   mode="edge")]
    else:
        nodes.append(helper.make_node("Identity", ["full"], ["out"]))
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", classes, size, size])]
    if aux:
        nodes.append(helper.make_node("Sigmoid", ["full"], ["aux"]))
        outputs.append(helper.make_tensor_value_info("aux", TensorProto.FLOAT, ["batch", classes, size, size]))
    return _save(path, "segmenter", nodes, outputs, inits, size)


def _save(path, name, nodes, outputs, inits, size, batch="batch", extra_inputs=()):
    """The graph of ``nodes`` with one NCHW float32 image input of ``size`` px a side (or (height, width)) and
    ``batch`` images (a dimension's name, or a number), and ``extra_inputs`` after it, checked and written to
    ``path``."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(
        "images", TensorProto.FLOAT, [batch, 3, *((size, size) if isinstance(size, int) else size)]), *extra_inputs],
        outputs,
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


#: The detections an image the mAP's evaluation keeps (inferbench.tasks.detection.EVALUATION.max_boxes; a test holds
#: the two equal): no labelled set labels more in an image.
EVALUATED = 100


def labelled_floor(scores, top, most=EVALUATED):
    """One score floor for a whole labelled set (``scores``: each image's): the ``top`` x images-th highest score of
    all, raised until no image holds more than ``most`` above it (COCO's mAP reads 100 detections an image). mAP ranks
    detections across the images, so a floor per image (each image's 20 best) ranks one image's 21st box above
    another's labelled ones, and FP32's own mAP on its labels read 0.23-0.29."""
    pooled = np.sort(np.concatenate([np.ravel(s) for s in scores] or [np.zeros(0)]))[::-1]
    if not len(pooled):
        return np.inf
    floor = pooled[min(top * len(scores), len(pooled)) - 1]
    return max([floor] + [np.sort(np.ravel(s))[::-1][most - 1] for s in scores if np.size(s) > most])


def coco_from_detections(model, folder, size=64, images=6, categories=(9, 5, 6), top=20, width=96, height=64,
                         spec=None, heads=None):
    """A COCO instances file (``folder/instances.json``, the images beside it) whose boxes are what ``model`` (an
    ONNX file of YOLOv8's layout) finds in FP32, ONNX Runtime, on seeded image-like images ``width`` wide and
    ``height`` + 8 * i high, read as inferbench reads them (resized whole to ``size``: pixels a side, or (height,
    width)): its boxes above one score floor for the whole set, ``top`` an image on average (:func:`labelled_floor`),
    cut to the image as inferbench clips boxes before it scores them (a box cut to a sliver is left out and counts
    against FP32: its mAP is 1 or near); the model's class ``i`` is the ``i``-th category by id. Or another
    detector's (``spec``, a registered model or its name, and ``heads``: its raw outputs by name on a batch of
    prepared inputs), whose classes may be category ids themselves (torchvision's).
    A labelled set the tests make: it judges what a reduced precision loses, not the model. Returns the number of
    boxes labelled."""
    import json
    from pathlib import Path

    import onnxruntime as ort
    from PIL import Image

    from inferbench.base.size import size_of
    from inferbench.registry import images as labelled
    from inferbench.registry.inputs import make_images
    from inferbench.registry.modelfiles import open_model_file
    from inferbench.registry.models import get_model, register
    from inferbench.registry.outputs import Output
    from inferbench.tasks import detection

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    listed, said = [], []
    for i in range(images):
        w, h = width, height + 8 * i
        Image.fromarray(make_images(1, 256, i)[0].astype(np.uint8)).resize((w, h)).save(folder / f"{i}.png")
        listed.append((folder / f"{i}.png", i))
        said.append({"id": 100 + i, "file_name": f"{i}.png", "width": w, "height": h})
    if isinstance(spec, str):  # a registered model's name
        spec = get_model(spec)
    if spec is None:
        found = open_model_file(str(model), asked="detection")
        register(found)
        spec = get_model(found.name)
    ih, iw = (size, size) if isinstance(size, int) else size
    x = np.concatenate(list(labelled.inputs(spec, listed, size_of(ih, iw), whole=True)))
    if heads is None:
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        arrays = {"output0": session.run(None, {"images": x})[0]}
    else:
        arrays = heads(x)
    ids, annotations = sorted(categories), []
    outputs = [Output(name, a.shape[1:]) for name, a in arrays.items()]
    found = detection.postprocess(arrays, outputs)
    floor = labelled_floor([np.asarray(d["scores"]) for d in found], top)
    for im, d in zip(said, found):
        sx, sy = im["width"] / iw, im["height"] / ih
        ranked = np.argsort(-np.asarray(d["scores"]), kind="stable")[:EVALUATED]  # ties at the floor: by rank
        best = ranked[np.asarray(d["scores"])[ranked] >= floor]  # its boxes above the set's one score floor
        for b, c in zip(np.asarray(d["boxes"])[best], np.asarray(d["classes"])[best]):
            x1, y1 = max(0.0, b[0] * sx), max(0.0, b[1] * sy)
            x2, y2 = min(im["width"], b[2] * sx), min(im["height"], b[3] * sy)
            if x2 - x1 > 1 and y2 - y1 > 1:
                annotations.append({"id": len(annotations) + 1, "image_id": im["id"], "bbox": [
                    float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                    "category_id": int(c) if d.get("category_ids") else ids[int(c)]})
    named = sorted({a["category_id"] for a in annotations} | set(ids)) if heads is not None else ids
    (folder / "instances.json").write_text(json.dumps({"images": said, "annotations": annotations, "categories": [
        {"id": c, "name": f"c{c}"} for c in named]}))
    return len(annotations)


SOURCE_OUTPUTS = """
import sys, numpy as np, torch
from inferbench.base.size import size_of
from inferbench.exporters.torch_source import source_module
from inferbench.registry.models import get_model
spec = get_model(sys.argv[4])
module = source_module(torch, spec, "random", size_of(int(sys.argv[2]), int(sys.argv[3])), 0)  # the seed a run takes
with torch.no_grad():
    out = module(torch.from_numpy(np.load(sys.argv[1])))
np.savez(sys.argv[1] + ".npz", **{k: v.numpy() for k, v in out.items()})
"""


def torch_heads(folder, size, name="torchvision:ssdlite320_mobilenet_v3_large"):
    """A PyTorch detector's outputs by name (SSDlite's raw heads, Faster R-CNN's detections) on a batch of prepared
    inputs, as the run's source computes them (seeded, conditioned weights; torch in a process of its own)."""
    def heads(x):
        scratch = folder / "x.npy"  # the batch and its outputs, removed once read (never left in the user's folder)
        try:
            np.save(scratch, x)
            subprocess.run([sys.executable, "-c", SOURCE_OUTPUTS, str(scratch), *map(str, size), name], check=True,
                           timeout=600)
            with np.load(f"{scratch}.npz") as out:
                return dict(out)
        finally:
            scratch.unlink(missing_ok=True)
            Path(f"{scratch}.npz").unlink(missing_ok=True)
    return heads


def nms_onnx(path, size=64, cap=20, padded=True, seed=0):
    """A detector whose graph ends in its own ONNX NonMaxSuppression (one class, at most ``cap`` boxes, IoU 0.5,
    score 0.2), RetinaNet-style: with ``padded`` its boxes and scores gathered and padded to the cap, one row an image
    (``boxes [1, cap, 4]``, ``scores [1, cap]``); else ONNX's own ``selected_indices [boxes, 3]``."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    cells = (size // 8) ** 2
    inits = []

    def const(name, array, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    i64 = np.int64
    nodes = [helper.make_node("Mul", ["images", const("scale", 1 / 255)], ["x"]),
             helper.make_node("Conv", ["x", const("w", rng.normal(0, 0.3, (5, 3, 8, 8)))], ["c"], strides=[8, 8]),
             helper.make_node("Reshape", ["c", const("flat", [1, 5, cells], i64)], ["f"]),
             helper.make_node("Split", ["f", const("split", [4, 1], i64)], ["t4", "t1"], axis=1),
             helper.make_node("Sigmoid", ["t4"], ["s4"]),
             helper.make_node("Mul", ["s4", const("px", float(size))], ["p4"]),
             helper.make_node("Transpose", ["p4"], ["corners"], perm=[0, 2, 1]),  # [1, cells, 4]
             helper.make_node("Add", ["t1", const("bias", 1.5)], ["b1"]),  # most cells over the score floor
             helper.make_node("Sigmoid", ["b1"], ["score_rows"]),  # [1, 1, cells]
             helper.make_node("NonMaxSuppression", ["corners", "score_rows", const("cap", [cap], i64),
                                                    const("iou", [0.5]), const("floor", [0.2])], ["selected"])]
    if not padded:
        outputs = [helper.make_tensor_value_info("selected", TensorProto.INT64, ["boxes", 3])]
    else:
        nodes += [helper.make_node("Gather", ["selected", const("col", 2, i64)], ["keep"], axis=1),  # [n]
                  helper.make_node("Squeeze", ["corners", const("ax0", [0], i64)], ["all_boxes"]),
                  helper.make_node("Gather", ["all_boxes", "keep"], ["kept_boxes"], axis=0),  # [n, 4]
                  helper.make_node("Reshape", ["score_rows", const("row", [-1], i64)], ["all_scores"]),
                  helper.make_node("Gather", ["all_scores", "keep"], ["kept_scores"], axis=0),  # [n]
                  helper.make_node("Shape", ["keep"], ["n"]),
                  helper.make_node("Sub", [const("capv", [cap], i64), "n"], ["short"]),
                  helper.make_node("Concat", [const("z1", [0], i64), const("z2", [0], i64), "short",
                                              const("z3", [0], i64)], ["pads2"], axis=0),
                  helper.make_node("Pad", ["kept_boxes", "pads2"], ["pb"]),
                  helper.make_node("Concat", [const("z4", [0], i64), "short"], ["pads1"], axis=0),
                  helper.make_node("Pad", ["kept_scores", "pads1"], ["ps"]),
                  helper.make_node("Reshape", ["pb", const("bshape", [1, cap, 4], i64)], ["boxes"]),
                  helper.make_node("Reshape", ["ps", const("sshape", [1, cap], i64)], ["scores"])]
        outputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, cap, 4]),
                   helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, cap])]
    return _save(path, "nms-in-graph", nodes, outputs, inits, (size, size), batch=1)


def sized_onnx(path, size=64, side="orig_target_sizes", dtype="int64", batched=True, seed=0):
    """A detector that takes the size of its images as a second input, as RT-DETR's export does: its points
    ``[batch, cells, 2]`` are a sigmoid's fractions times the input ``side`` (``[batch, 2]`` or ``[2]``, height then
    width, of ``dtype``), so what fills it shows in every output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    cells = (size // 8) ** 2
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (2, 3, 8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 2, cells], dtype=np.int64), "flat"),
             numpy_helper.from_array(np.array([1 / 255], dtype=np.float32), "scale"),
             numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1")]
    nodes = [helper.make_node("Mul", ["images", "scale"], ["x"]),
             helper.make_node("Conv", ["x", "w"], ["c"], strides=[8, 8]),
             helper.make_node("Reshape", ["c", "flat"], ["f"]),
             helper.make_node("Sigmoid", ["f"], ["s"]),
             helper.make_node("Transpose", ["s"], ["fractions"], perm=[0, 2, 1]),  # [batch, cells, 2]
             helper.make_node("Cast", [side], ["sizes"], to=TensorProto.FLOAT)]
    if batched:
        nodes.append(helper.make_node("Unsqueeze", ["sizes", "axis1"], ["per_image"]))  # [batch, 1, 2]
    else:
        nodes.append(helper.make_node("Identity", ["sizes"], ["per_image"]))  # [2], broadcast
    nodes.append(helper.make_node("Mul", ["fractions", "per_image"], ["points"]))
    outputs = [helper.make_tensor_value_info("points", TensorProto.FLOAT, ["batch", cells, 2])]
    code = {"int64": TensorProto.INT64, "float32": TensorProto.FLOAT, "int32": TensorProto.INT32}[dtype]
    extra = [helper.make_tensor_value_info(side, code, ["batch", 2] if batched else [2])]
    return _save(path, "sized", nodes, outputs, inits, (size, size), extra_inputs=extra)


def masks_from_segmenter(model, folder, spec_name, size=520, images=16):
    """A segmentation set (``folder/images/`` and ``folder/masks/``, VOC-style class-index PNGs) whose masks are what
    ``model`` (an ONNX segmenter giving class scores a pixel first among its outputs) finds in FP32, ONNX Runtime, on
    seeded image-like images of ``size`` px a side, prepared as the registered model ``spec_name`` prepares its
    images. A labelled set the tests make: FP32's mean IoU on it is 1 by construction; it judges what a reduced
    precision loses, not the model. Returns the classes the masks use."""
    from pathlib import Path

    import onnxruntime as ort
    from PIL import Image

    from inferbench.registry import images as labelled
    from inferbench.registry.inputs import make_images
    from inferbench.registry.models import get_model

    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "masks").mkdir(exist_ok=True)
    listed = []
    for i in range(images):
        Image.fromarray(make_images(1, size, 1000 + i)[0].astype(np.uint8)).save(folder / "images" / f"{i}.png")
        listed.append((folder / "images" / f"{i}.png", i))
    x = np.concatenate(list(labelled.inputs(get_model(spec_name), listed, size, whole=True)))
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    scores = np.concatenate([session.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])
    used = set()
    for i, s in enumerate(scores):
        mask = s.argmax(axis=0).astype(np.uint8)
        used |= set(np.unique(mask).tolist())
        Image.fromarray(mask, "L").save(folder / "masks" / f"{i}.png")
    return len(used)
