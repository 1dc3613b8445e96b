"""A model's stats read from its ONNX graph (a PyTorch program's export, the user's ONNX file: no Keras graph to
count them), on small graphs whose counts are worked out by hand from each operation's definition."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from inferbench.execution.exports import model_stats as stats_of_folder
from inferbench.exporters import cache
from inferbench.exporters.onnx_stats import FLOPS_METHOD, model_stats


def _weights(name, *shape):
    return numpy_helper.from_array(np.zeros(shape, np.float32), name)


def _graph(tmp_path, nodes, initializers, output, name="m.onnx"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(model, path)
    return path


def test_conv_gemm_and_matmul_are_counted_as_their_definitions_say(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),  # [1,4,8,8], 3x3 over 3 channels
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "dw"], ["c2"], pads=[1, 1, 1, 1], group=4),  # depthwise 3x3
             helper.make_node("Conv", ["c2", "gw"], ["c3"], group=2),  # grouped 1x1, 2 inputs a group
             helper.make_node("Flatten", ["c3"], ["f"]),  # [1, 256]
             helper.make_node("Gemm", ["f", "fc", "fb"], ["g"]),  # [1, 10]
             helper.make_node("MatMul", ["g", "mm"], ["y"])]  # [1, 5]
    inits = [_weights("w1", 4, 3, 3, 3), _weights("dw", 4, 1, 3, 3), _weights("gw", 4, 2, 1, 1),
             _weights("fc", 256, 10), _weights("fb", 10), _weights("mm", 10, 5)]
    stats = model_stats(_graph(tmp_path, nodes, inits, "y"), 8)
    flops = 2 * (4 * 8 * 8 * 3 * 3 * 3 + 4 * 8 * 8 * 1 * 3 * 3 + 4 * 8 * 8 * 2 + 10 * 256 + 5 * 10)
    assert stats["flops_per_image"] == flops == 24_676 and stats["flops_method"] == FLOPS_METHOD
    assert stats["params"] == 108 + 36 + 8 + 2560 + 10 + 50
    assert stats["activations_per_image"] == 5 * 256 + 10 + 5  # every node's output at batch 1
    assert stats["grouped_convolutions"] == 1 and "why" not in stats  # the depthwise one is not a grouped one


def test_shapes_it_cannot_infer_leave_flops_and_intermediates_unknown_and_say_why(tmp_path):
    nodes = [helper.make_node("Mystery", ["x"], ["m"], domain="vendor"),  # no schema: its output's shape unknown
             helper.make_node("Conv", ["m", "w1"], ["y"])]
    graph = _graph(tmp_path, nodes, [_weights("w1", 4, 3, 3, 3)], "y")
    model = onnx.load(graph)
    model.opset_import.append(helper.make_opsetid("vendor", 1))
    onnx.save(model, graph)
    stats = model_stats(graph, 8)
    assert stats["flops_per_image"] is None and stats["activations_per_image"] is None and stats["params"] == 108
    assert "operation(s) of unknown shapes" in stats["why"] and "value(s) of unknown shape" in stats["why"]


def test_a_cell_without_a_keras_export_takes_its_stats_from_the_onnx_one(tmp_path):
    """What each record's model_stats comes from: the Keras export's count where there is one, else the ONNX
    export's (a torchvision model's had none before: no FLOPs, no roofline)."""
    cache.record(tmp_path, "onnx", {"files": {}, "model_stats": {"params": 7, "flops_per_image": 9,
                                                                  "flops_method": FLOPS_METHOD}}, {"model": "m"})
    assert stats_of_folder(tmp_path)["flops_method"] == FLOPS_METHOD
    cache.record(tmp_path, "keras", {"files": {}, "model_stats": {"params": 8, "flops_per_image": 10,
                                                                   "flops_method": "tf-profiler"}}, {"model": "m"})
    assert stats_of_folder(tmp_path)["params"] == 8
