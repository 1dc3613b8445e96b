"""What a program file can do, read before anything runs it: nothing but compute. One policy for every format
inferbench loads — no file, network or process access, no custom code — checked on the file itself (a user's
model file, or an artifact of the cache, in the worker that loads it):

- a torch ``.pt2`` program (``torch.export``'s archive): every operator of its graphs from PyTorch's own computing
  namespaces (``aten``, ``prims``, ``quantized_decomposed``) and none that reads or writes a file (``from_file``
  creates one); no guard code beyond shape comparisons (``torch.export.load`` compiles it into Python); no custom
  object; no weight stored as a pickle;
- an ONNX model: operators from ONNX's own domains, Microsoft's contrib ops, or functions the model defines from
  those; external data only inside the model's folder (:func:`inferbench.registry.filecheck.check_onnx_program`);
- an OpenVINO IR (``.xml``): every layer from one of OpenVINO's own operation sets (``opsetN``), none from an
  extension (a custom layer needs a library of its own);
- a TensorRT engine: no plugin outside TensorRT's own (checked by :func:`check_engine` once deserialized, host code
  refused), written against TensorRT's documented inspector;
- a TF SavedModel: its ops read from ``saved_model.pb`` (:func:`inferbench.registry.filecheck.check_savedmodel`,
  in the process that loads TensorFlow).

A refusal is a :class:`~inferbench.base.errors.UsageError`: one line naming the file and the operator."""

from __future__ import annotations

import ast
import json
import re
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..base.reading import read_bounded
from ..base.text import excerpt, visible
from .filecheck import CONFIG_CAP, check_archive, check_onnx_program
from .outputs import Output
from .sideinputs import SideInput, side_input

#: The namespaces of ``torch.ops`` a program may call: PyTorch's own operators, its primitives, and PT2E's quantise
#: and dequantise; ``_operator`` is Python's own (``getitem`` of a node's several outputs).
TORCH_NAMESPACES = ("aten", "prims", "quantized_decomposed")
#: torchvision's operators a detector's program calls (computations only): its suppression and its RoI pooling.
VISION_OPS = ("nms", "roi_align")
#: Python's own operators a program's graph may hold: an item of a node's several outputs, arithmetic and
#: comparisons of sizes (a size the data decides is checked against its bounds).
PYTHON_OPS = ("getitem", "add", "sub", "mul", "floordiv", "truediv", "neg", "mod", "pow", "ge", "gt", "le", "lt",
              "eq", "ne")
#: Operators of those namespaces that reach outside the computation: a file (``from_file`` makes one when asked to
#: share it), standard output, a tensor's storage from elsewhere.
TORCH_DENIED = re.compile(r"file|save|load|print|_assert_async|set_\b|record_stream|_cudnn_init_dropout_state")
#: What a shape guard may be made of (``L['x'].size()[0] >= 2``): comparisons of sizes, strides and numbers.
GUARD_NODES = (ast.Expression, ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
               ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Constant, ast.Subscript, ast.Slice,
               ast.Attribute, ast.Call, ast.Name, ast.Load, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
GUARD_ATTRIBUTES = ("size", "shape", "stride", "dim", "storage_offset", "numel")
#: The most an IR's XML may hold (MobileNetV3's: 0.3 MiB; its weights are in the .bin beside it).
IR_BYTES = 256 * 2**20


def check_program(path: Path, what: str = "artifact") -> None:
    """``path`` checked by its format (:mod:`this module's docstring <inferbench.registry.programs>`); a format with
    nothing to run (weights, arrays) passes as it is."""
    path = Path(path)
    if path.suffix == ".pt2":
        check_pt2(path, what)
    elif path.suffix == ".onnx":
        check_onnx_file(path, what)
    elif path.suffix == ".xml":
        check_ir(path, what)


def _refuse(path: Path, what: str, found: str, why: str) -> UsageError:
    return UsageError(f"{what} {visible(str(path))}: {excerpt(found, 120)} {why}: refused (a file inferbench loads "
                      "may compute, nothing else)")


def check_pt2(path: Path, what: str = "program") -> None:
    """A ``torch.export`` archive: its graphs' operators, guards, custom objects and weights (see the module)."""
    infos = check_archive(path, what, kind="torch.export (.pt2) archive")
    with zipfile.ZipFile(path) as archive:
        for info in infos:
            name = info.filename
            if not name.endswith(".json"):
                continue
            if info.file_size > CONFIG_CAP:
                raise UsageError(f"{what} {path}: {excerpt(name, 80)} declares {info.file_size:,} bytes, too large")
            try:
                data = json.loads(archive.read(info), parse_constant=_no_constant)
            except (ValueError, RecursionError) as exc:
                raise UsageError(f"{what} {path}: {excerpt(name, 80)} is not JSON ({excerpt(exc, 80)})") from None
            _check_program_json(path, what, name, data)


def program_shapes(path: Path, what: str) -> tuple[tuple[int | None, ...], list[Output], list[SideInput]]:
    """A ``.pt2`` program's image input shape (a dynamic dimension None), its outputs (names: a dict's keys, else
    ``output`` / ``output0``...; shapes an image, a dynamic dimension 0) and its side inputs (:mod:`.sideinputs`),
    read from its archive once :func:`check_pt2` passed it, without torch; one line where it takes other than one
    image and side inputs that say what they hold."""
    check_pt2(path, what)
    with zipfile.ZipFile(path) as archive:
        found = [n for n in archive.namelist() if n.endswith("models/model.json")]
        if len(found) != 1:
            raise UsageError(f"{what}: a .pt2 archive of one program is read; this one holds {len(found)}")
        data = json.loads(archive.read(found[0]), parse_constant=_no_constant)  # its size checked by check_pt2
    try:
        module = data["graph_module"]
        values, signature = module["graph"]["tensor_values"], module["signature"]
        args = [s["user_input"]["arg"] for s in signature["input_specs"] if "user_input" in s]
        results = [s["user_output"]["arg"]["as_tensor"]["name"] for s in signature["output_specs"]
                   if "user_output" in s]
        spec = json.loads(module["module_call_graph"][0]["signature"]["out_spec"])[1]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise UsageError(f"{what}: not a torch.export program inferbench reads (no {excerpt(exc, 60)})") from None
    if not args or any("as_tensor" not in a for a in args):
        raise UsageError(f"{what} takes {len(args)} inputs, not all of them tensors; inferbench times programs of "
                         "one image input (and side inputs that say what they hold)")
    image, sides = _inputs(path, [(a["as_tensor"]["name"], values[a["as_tensor"]["name"]]) for a in args], what)
    keys = json.loads(spec["context"]) if spec.get("type") in ("builtins.dict", "collections.OrderedDict") else None
    names = keys if isinstance(keys, list) and len(keys) == len(results) else \
        (["output"] if len(results) == 1 else [f"output{i}" for i in range(len(results))])
    shape = tuple(_dim(d) for d in image["sizes"])
    outputs = [Output(str(n), tuple(_dim(d) or 0 for d in values[r]["sizes"][1:])) for n, r in zip(names, results)]
    return shape, outputs, sides


#: torch's serialised tensor types (``torch._export.serde.schema.ScalarType``) by ONNX's names for them.
SCALAR_TYPES = {7: "FLOAT", 6: "FLOAT16", 8: "DOUBLE", 5: "INT64", 4: "INT32"}


def _inputs(path: Path, tensors: list[tuple[str, dict[str, Any]]], what: str) -> tuple[dict[str, Any],
                                                                                     list[SideInput]]:
    """A program's image input (float, four dimensions, 3 channels first or last) and its side inputs, each with its
    fill (:mod:`.sideinputs`); one line where there is no one image."""
    def image(value: dict[str, Any]) -> bool:
        dims = [_dim(d) for d in value["sizes"]]
        return value.get("dtype") in (6, 7) and len(dims) == 4 and 3 in (dims[1], dims[3])

    images = [v for _, v in tensors if image(v)]
    if len(tensors) == 1:
        return tensors[0][1], []  # the one input: the file's shape check says what is wrong with it, if anything
    if len(images) != 1:
        raise UsageError(f"{what} takes {len(tensors)} inputs ({', '.join(n[:40] for n, _ in tensors)}) and "
                         f"{len(images) or 'no'} image inputs (float, four dimensions, 3 channels first or last): "
                         "inferbench times programs of one image input")
    sides = [side_input(n, [_dim(d) for d in v["sizes"]], SCALAR_TYPES.get(int(v.get("dtype") or 0), "an unknown type"),
                        path) for n, v in tensors if v is not images[0]]
    return images[0], sides


def _dim(size: dict[str, Any]) -> int | None:
    """A size of a program's tensor: a number, or None where it is a symbol (a dynamic dimension)."""
    return int(size["as_int"]) if isinstance(size, dict) and "as_int" in size else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} where a number is")


def _check_program_json(path: Path, what: str, name: str, data: Any) -> None:
    for key, value in _items(data):
        if key == "target" and isinstance(value, str) and not _computes(value):
            raise _refuse(path, what, f"the operator {value}", "reads, writes or runs outside the computation")
        if key == "use_pickle" and value is True:
            raise _refuse(path, what, f"{name}: a weight", "is stored as a pickle (weights only are read: nothing is "
                          "unpickled)")
        if key == "custom_obj_values" and value:
            raise _refuse(path, what, f"{name}: a custom object", "(a class of its own, with code)")
        if key == "guards_code" and isinstance(value, list):
            for guard in value:
                if not _shape_guard(guard):
                    raise _refuse(path, what, f"the guard {guard!r}", "is more than a comparison of shapes (it is "
                                  "compiled into Python when the program loads)")


def _items(data: Any) -> Any:
    """Every (key, value) pair of a JSON document, depth first."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                yield k, v
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)


def _computes(target: str) -> bool:
    """Is ``target`` (a graph node's) one of the operators a program may call?"""
    if target.startswith("_operator."):
        return target.count(".") == 1 and target.split(".")[1] in PYTHON_OPS
    parts = target.split(".")
    if len(parts) >= 4 and parts[:3] == ["torch", "ops", "torchvision"]:
        return parts[3] in VISION_OPS
    return (len(parts) >= 4 and parts[:2] == ["torch", "ops"] and parts[2] in TORCH_NAMESPACES
            and not TORCH_DENIED.search(parts[3]))


def suppressions(path: Path) -> int:
    """How many of torchvision's suppressions (``torchvision::nms``) a checked ``.pt2`` program's graph calls."""
    with zipfile.ZipFile(path) as archive:
        found = [n for n in archive.namelist() if n.endswith("models/model.json")]
        text = archive.read(found[0]).decode("utf-8", "replace") if len(found) == 1 else ""  # checked: bounded
    return text.count('"torch.ops.torchvision.nms.default"')


def _shape_guard(guard: Any) -> bool:
    """Is ``guard`` a comparison of input shapes (``L['x'].size()[0] <= 65536``) and nothing more?"""
    if not isinstance(guard, str) or len(guard) > 1000:
        return False
    try:
        tree = ast.parse(guard, mode="eval")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, GUARD_NODES):
            return False
        if isinstance(node, ast.Name) and node.id != "L":
            return False
        if isinstance(node, ast.Attribute) and node.attr not in GUARD_ATTRIBUTES:
            return False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Attribute) and not node.keywords
                                               and all(isinstance(a, ast.Constant) for a in node.args)):
            return False
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool)):
            return False
    return True


def check_onnx_file(path: Path, what: str = "ONNX model") -> None:
    """An ONNX file read without its external data (the ``onnx`` package's reader), then checked for what it can do
    (:func:`~inferbench.registry.filecheck.check_onnx_program`)."""
    try:
        import onnx
    except ImportError:
        raise UsageError(f"checking {path} needs the onnx package: pip install -e \".[onnxruntime]\"") from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - onnx raises DecodeError and others for a file that is not a model
        raise UsageError(f"{what} {visible(str(path))} is not a readable ONNX model ({excerpt(exc, 120)})") from None
    check_onnx_program(model, path, what)


def check_ir(path: Path, what: str = "OpenVINO IR") -> None:
    """An OpenVINO IR's layers, each from one of OpenVINO's own operation sets (``version="opsetN"``); the XML read
    bounded, without entities (Python's expat refuses their expansion past its limits)."""
    try:
        root = ElementTree.fromstring(read_bounded(path, IR_BYTES, what))
    except (ValueError, ElementTree.ParseError) as exc:
        raise UsageError(f"{what} {visible(str(path))} is not an IR inferbench reads ({excerpt(exc, 120)})") from None
    for layer in root.iter("layer"):
        version, kind = layer.get("version", ""), layer.get("type", "")
        if not re.fullmatch(r"opset\d{1,3}", version):
            raise _refuse(path, what, f"the layer {kind} (version {version or 'none'})", "is not from one of "
                          "OpenVINO's own operation sets (a custom layer needs an extension library)")


#: TensorRT's own plugins (``trt.get_plugin_registry()`` of TensorRT 10 and 11 without extra libraries) an engine
#: may hold; any other needs a library of its own, which inferbench does not load.
TENSORRT_PLUGINS = frozenset({"EfficientNMS_TRT", "BatchedNMS_TRT", "BatchedNMSDynamic_TRT", "NMS_TRT",
                              "ROIAlign_TRT", "ResizeNearest_TRT", "InstanceNormalization_TRT", "GroupNorm",
                              "LayerNorm", "ScatterND", "GridAnchor_TRT", "MultilevelCropAndResize_TRT"})


def check_engine(engine: Any, path: Path, layer_json: Any) -> None:
    """A deserialized TensorRT engine's layers (``layer_json(i)``: the engine inspector's
    ``get_layer_information(i, LayerInformationFormat.JSON)``), none a plugin outside :data:`TENSORRT_PLUGINS`. The
    engine is deserialized with host code refused (``runtime.engine_host_code_allowed = False``)."""
    for i in range(int(engine.num_layers)):
        try:
            info = json.loads(layer_json(i))
        except (TypeError, ValueError):
            continue  # an engine built without detailed information names no plugin: its layers are TensorRT's own
        kind = str(info.get("LayerType", "")) if isinstance(info, dict) else ""
        plugin = str(info.get("PluginType") or info.get("Plugin") or "") if isinstance(info, dict) else ""
        if kind.lower().startswith("plugin") and plugin not in TENSORRT_PLUGINS:
            raise _refuse(path, "TensorRT engine", f"the plugin layer {plugin or kind}",
                          "needs a plugin library of its own")
