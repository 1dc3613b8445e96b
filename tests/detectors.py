"""Small models of the layouts detection users bring, made by the tests (no one's detector code): an anchor-free
detector whose one output is YOLOv8's raw head, ``[batch, 4 + classes, anchors]`` (box centre, width and height in
input pixels, then each class's probability), at strides 8, 16 and 32; and the same graph with a planted fault (a
box decode off by a pixel row, the head's rows swapped) or a second output."""

from __future__ import annotations

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


def _save(path, name, nodes, outputs, inits, size):
    """The graph of ``nodes`` with one NCHW float32 image input of ``size`` px a side (or (height, width)), checked
    and written to ``path``."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(
        "images", TensorProto.FLOAT, ["batch", 3, *((size, size) if isinstance(size, int) else size)])], outputs,
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
