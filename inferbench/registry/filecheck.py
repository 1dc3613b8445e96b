"""Files a user or a cache hands to inferbench, checked before anything reads them whole or runs them.

- A ``.keras`` file is a zip archive: its members' declared sizes and compression ratios are checked before
  one byte is inflated (a 1.5 MB file whose ``config.json`` inflates to 1.5 GiB is refused in milliseconds),
  and its ``config.json`` is read through a cap and must be a Keras model's configuration.
- A TF SavedModel's graph is read from ``saved_model.pb`` before TensorFlow loads it (loading runs its restore
  function, serving its signature's): an op that reads or writes files, calls back into Python or prints is refused
  (:func:`check_savedmodel`), whether the folder is the user's or an artifact cache's.
- An ``.onnx`` file is read without its external data and refused when inferbench could not time it honestly:
  several inputs, outputs sharing a name, an input that is not floating point, an operator outside ONNX's own domains (a
  custom op needs a library of its own), external data outside the model's folder.

Every refusal is a :class:`~inferbench.base.errors.UsageError`: one line, exit status 2, before any export.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from ..base import machine
from ..base.errors import UsageError
from .graphnms import plugin
from .sideinputs import ONNX_NAME, SideInput, looks_like_image, no_one_image, side_input, split

MiB = 2**20
CONFIG_CAP = 64 * MiB  # a config.json larger than this is no model configuration (ConvNeXt-XLarge's: 0.4 MiB)
MAX_RATIO = 100.0  # declared size over compressed size, for members over RATIO_FLOOR (weights: ~1; JSON: ~10)
RATIO_FLOOR = MiB
MAX_MEMBERS = 100_000
ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")  # what ONNX Runtime runs without a custom library


def _memory_bytes() -> float:
    gb = machine.memory_total_gb()
    return gb * 2**30 if gb else float("inf")


def check_archive(path: Path, what: str, kind: str = ".keras (zip) archive") -> list[zipfile.ZipInfo]:
    """The members of the zip archive ``path`` (a ``kind``) once their declared sizes are sane; UsageError otherwise.
    Python's zipfile never inflates a member past its declared size, so the declared sizes bound the reading."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise UsageError(f"{what} {path} is not a readable {kind}: {exc}") from None
    if len(infos) > MAX_MEMBERS:
        raise UsageError(f"{what} {path} holds {len(infos):,} files: not a {kind}")
    total = sum(i.file_size for i in infos)
    if total > _memory_bytes():
        raise UsageError(f"{what} {path} would inflate to {total / 2**30:.1f} GiB, more than this machine's memory")
    for info in infos:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > RATIO_FLOOR and ratio > MAX_RATIO:
            raise UsageError(f"{what} {path}: {info.filename} inflates {ratio:,.0f}x ({info.compress_size:,} -> "
                             f"{info.file_size:,} bytes); refused as a zip bomb")
    return infos


def keras_config(path: Path, what: str = "model file") -> dict[str, Any]:
    """The ``config.json`` of the .keras archive ``path``, bounded and checked to be a model's configuration."""
    infos = {i.filename: i for i in check_archive(path, what)}
    info = infos.get("config.json")
    if info is None:
        raise UsageError(f"{what} {path} has no config.json: not a .keras archive")
    if info.file_size > CONFIG_CAP:
        raise UsageError(f"{what} {path}: its config.json is {info.file_size / MiB:,.0f} MiB (at most "
                         f"{CONFIG_CAP // MiB} MiB); not a model configuration")
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read(info))
    except (OSError, zipfile.BadZipFile, ValueError, RecursionError) as exc:
        raise UsageError(f"{what} {path}: its config.json cannot be read ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None
    if not isinstance(config, dict) or not isinstance(config.get("config", {}), dict):
        raise UsageError(f"{what} {path}: its config.json is not a Keras model's configuration")
    return config


def _endpoints(value: Any, path: Path, key: str) -> int:
    """How many inputs or outputs a functional model's ``input_layers``/``output_layers`` names: one
    ``[name, i, j]``, a list of them, or (Keras 3) a dict of them."""
    if not value:
        return 0
    if isinstance(value, dict):
        return len(value)
    if isinstance(value, list):
        return len(value) if isinstance(value[0], (list, dict)) else 1
    raise UsageError(f"{path}: its config.json's {key} is {type(value).__name__}, not a Keras model's list of layers")


def keras_endpoints(config: dict[str, Any], path: Path) -> tuple[str, ...]:
    """The names of a .keras model's outputs, as :func:`~inferbench.registry.keras_models.output_names` reads them
    from the model (a list's layers in order, a mapping's keys sorted; one output: ``logits``), read from its
    config; outputs that share a name are refused."""
    inner = config.get("config") or {}
    value: Any = inner.get("output_layers")
    if _endpoints(value, path, "output_layers") <= 1:
        return ("logits",)
    names = tuple(sorted(map(str, value))) if isinstance(value, dict) else \
        tuple(str(v[0]) if isinstance(v, list) and v else str(v) for v in value)
    if len(set(names)) != len(names):
        raise UsageError(f"{path}: its outputs share names ({', '.join(names)[:200]}); inferbench compares each "
                         "output by its name")
    return names


def keras_input_shape(config: dict[str, Any], path: Path) -> tuple[int | None, ...] | None:
    """The input shape a .keras archive's config declares (its build config, else its InputLayer), or None; any
    shape that is not a list of sizes is bad input."""
    build = config.get("build_config")
    shape = build.get("input_shape") if isinstance(build, dict) else None
    if build is not None and not isinstance(build, dict):
        raise UsageError(f"{path}: its config.json's build_config is {type(build).__name__}, not a Keras build config")
    if shape is None:
        layers = (config.get("config") or {}).get("layers") or []
        if not isinstance(layers, list):
            raise UsageError(f"{path}: its config.json's layers are {type(layers).__name__}, not a list")
        shape = next((lay["config"].get("batch_shape") for lay in layers if isinstance(lay, dict)
                      and lay.get("class_name") == "InputLayer" and isinstance(lay.get("config"), dict)), None)
    if isinstance(shape, dict) or (isinstance(shape, list) and shape and isinstance(shape[0], list)):
        shape = None  # several inputs: read from their InputLayers (keras_inputs)
    if shape is not None and not (isinstance(shape, list) and all(d is None or (isinstance(d, int) and d > 0)
                                                                  for d in shape)):
        raise UsageError(f"{path}: its config.json gives no readable input shape ({str(shape)[:80]})")
    return tuple(shape) if shape else None


def keras_inputs(config: dict[str, Any], path: Path) -> tuple[tuple[int | None, ...] | None, list[SideInput]]:
    """A .keras archive's image input shape (:func:`keras_input_shape`) and its side inputs (registry/sideinputs.py:
    each read from its InputLayer's name, shape and dtype); one line where several inputs hold no one image, or a
    side input is not a float one (inferbench binds it as a constant layer's bias, a float)."""
    inner = config.get("config") or {}
    if _endpoints(inner.get("input_layers"), path, "input_layers") <= 1:
        return keras_input_shape(config, path), []
    layers = [lay["config"] for lay in inner.get("layers") or [] if isinstance(lay, dict)
              and lay.get("class_name") == "InputLayer" and isinstance(lay.get("config"), dict)]
    shapes = [(str(c.get("name")), c.get("batch_shape"), str(c.get("dtype"))) for c in layers]
    images = [s for s in shapes if isinstance(s[1], list) and looks_like_image(s[1], s[2])]
    if len(images) != 1 or len(shapes) < 2:
        raise no_one_image(path, [s[0] for s in shapes], len(images))
    sides = [side_input(name, list(dims) if isinstance(dims, list) else [], ONNX_NAME.get(dtype, dtype.upper()),
                        path) for name, dims, dtype in shapes if (name, dims, dtype) != images[0]]
    for side in sides:
        if not side.dtype.startswith("float") or not side.batched:
            raise UsageError(f"{path}: side input {side.name[:60]} is {side.dtype} [{'batch, ' * side.batched}2]; "
                             "inferbench binds a .keras file's side input as a float constant a batch (a layer's "
                             "bias): a float input of [batch, 2] only")
    return tuple(images[0][1]), sides


def check_onnx(model: Any, path: Path) -> tuple[Any, list[SideInput]]:
    """An ONNX model inferbench can time honestly: one float32 image input (and side inputs that say what they hold:
    registry/sideinputs.py), standard operators, external data inside the model's folder (``model``:
    ``onnx.load(path, load_external_data=False)``); its outputs, one or several, are compared by name. Returns the
    image input and the side inputs."""
    from onnx import TensorProto

    graph = model.graph

    inits = {i.name for i in graph.initializer}
    image, sides = split([i for i in graph.input if i.name not in inits], path)  # side inputs: filled as declared
    if not graph.output or len({o.name for o in graph.output}) != len(graph.output):
        raise UsageError(f"{path} has {'no outputs' if not graph.output else 'two outputs of one name'}: "
                         "inferbench compares each output by its name")
    elem = image.type.tensor_type.elem_type
    if elem != TensorProto.FLOAT:
        kind = TensorProto.DataType.Name(elem).lower() if elem in TensorProto.DataType.values() else str(elem)
        raise UsageError(f"{path} takes {kind} input; inferbench feeds float32 images (a quantised model with a "
                         "float32 input is fine)")
    check_onnx_program(model, path)
    return image, sides


def every_node(graph: Any) -> Any:
    """Every node of ``graph`` and of the subgraphs its nodes hold (If's branches, Loop's and Scan's bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from every_node(sub)


def check_onnx_program(model: Any, path: Path, what: str = "ONNX model") -> None:
    """What an ONNX model can do (``model``: read with ``load_external_data=False``): every operator, in its graph,
    its subgraphs and the functions it defines, from ONNX's own domains or Microsoft's contrib ops and no TensorRT
    plugin (a call of a function the model defines is its operators'; :func:`check_operators`); every external data
    file inside the model's folder."""
    from onnx import TensorProto
    from onnx.external_data_helper import _get_all_tensors

    check_operators(model, path, what)
    folder = path.resolve().parent
    for tensor in _get_all_tensors(model):  # initializers, Constant nodes and subgraphs alike
        if tensor.data_location == TensorProto.EXTERNAL:
            where = {e.key: e.value for e in tensor.external_data}.get("location", "")
            target = (folder / where).resolve()
            if not target.is_relative_to(folder):
                raise UsageError(f"{path}: initializer {tensor.name[:80]} reads external data from {where[:120]!r}, "
                                 "outside the model's folder; refused")


def check_operators(model: Any, path: Path, what: str) -> None:
    """Refuse, in one line, an operator no runtime inferbench loads here runs: a TensorRT plugin (a suppression's box
    cap and thresholds said), or one of another domain than ONNX's own (a custom-op library's). An operator of ONNX's
    domains that ``onnx`` no longer defines is let through: ONNX Runtime still runs the experimental ones ONNX dropped
    (``ImageScaler``, ``Crop``: old model zoo files)."""
    local = {(f.domain, f.name) for f in model.functions}
    nodes = [n for n in (*every_node(model.graph), *(n for f in model.functions for n in f.node))
             if (n.domain, n.op_type) not in local]
    trt = plugin(nodes)
    if trt:
        raise UsageError(f"{what} {path}: its graph holds {trt}, which only TensorRT runs: no runtime here computes "
                         "the reference its exports are checked against (ONNX Runtime's CPU and OpenVINO cannot load "
                         "it); export the graph without it (a YOLOv8-layout head: inferbench runs one suppression "
                         "after every runtime, TensorRT's too) or with ONNX's NonMaxSuppression padded to its cap")
    custom = sorted({f"{n.domain}:{n.op_type}" for n in nodes if n.domain not in ONNX_DOMAINS})
    if custom:
        raise UsageError(f"{what} {path} uses operators outside ONNX's own domains ({', '.join(custom)[:200]}): "
                         "they need a custom-op library that inferbench does not load; refused")


#: TensorFlow ops a SavedModel's inference path has no business running: file, checkpoint and summary I/O, Python
#: callbacks, printing, readers and datasets (files again), debugging hooks. Any op whose name starts with one of
#: DENIED_PREFIXES (WriteFile, SaveV2, RestoreV2, PyFuncStateless, ...) or ends with one of DENIED_SUFFIXES is
#: refused too.
DENIED_OPS = frozenset({
    "ReadFile", "MatchingFiles", "DeleteFile", "ImmutableConst", "LoadAndRemapMatrix", "Print", "PrintV2", "Sleep",
    "MergeV2Checkpoints", "ShardedFilename", "ShardedFilespec", "CreateSummaryFileWriter", "CreateSummaryDbWriter",
    "ImportEvent", "TryRpc", "DatasetToTFRecord"})
DENIED_PREFIXES = ("Write", "Save", "Restore", "Debug", "Summary", "Rpc", "Experimental", "PyFunc", "EagerPyFunc")
DENIED_SUFFIXES = ("Reader", "ReaderV2", "Dataset", "DatasetV2", "DatasetV3", "SummaryWriter")
#: What the checkpoint functions the SavedModel's saver names (and nothing else) may hold: loading restores the
#: variables through them.
CHECKPOINT_OPS = frozenset({"SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename", "StringJoin"})


def _denied(op: str) -> bool:
    return op in DENIED_OPS or op.startswith(DENIED_PREFIXES) or op.endswith(DENIED_SUFFIXES)


def _called(nodes: Any) -> set[str]:
    """The functions a graph's or a function's nodes call (``f`` of a call, branches and bodies of control flow)."""
    names = set()
    for node in nodes:
        for value in node.attr.values():
            if value.func.name:
                names.add(value.func.name)
            names.update(f.name for f in value.list.func)
    return names


def _closure(roots: set[str], functions: dict[str, Any]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        todo += _called(functions[name].node_def)
    return seen


def check_savedmodel(folder: Path, what: str = "SavedModel") -> None:
    """Refuse (UsageError: one line naming the op) a SavedModel whose graph could do more than compute: every op of
    its graph and of its functions is read from ``saved_model.pb`` before TensorFlow loads it (loading runs the
    restore function; serving runs the signature's). The checkpoint ops are allowed only in the functions the saver
    names and nothing else calls. Needs TensorFlow's protobuf classes (callers are processes that load TensorFlow)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString((Path(folder) / "saved_model.pb").read_bytes())
    except (OSError, ValueError) as exc:  # protobuf's DecodeError is a ValueError
        raise UsageError(f"{what} {folder}: saved_model.pb cannot be read ({type(exc).__name__})") from None
    for meta in saved.meta_graphs:
        graph = meta.graph_def
        functions = {f.signature.name: f for f in graph.library.function}
        saver_nodes = {meta.saver_def.save_tensor_name.split(":")[0].lstrip("^"),
                       meta.saver_def.restore_op_name.split(":")[0].lstrip("^")} - {""}
        serving = _closure(_called(n for n in graph.node if n.name not in saver_nodes)
                           | set(meta.object_graph_def.concrete_functions.keys()), functions)
        checkpoint = _closure(_called(n for n in graph.node if n.name in saver_nodes), functions) - serving
        places = [("graph", n.op, n.name not in saver_nodes) for n in graph.node]
        for name, function in functions.items():  # a function neither path reaches counts as serving: it is loaded
            places += [(f"function {name}", n.op, name not in checkpoint) for n in function.node_def]
        for where, op, serves in places:
            if _denied(op) and (serves or op not in CHECKPOINT_OPS):
                raise UsageError(f"{what} {folder}: its {where} holds the op {op}, which reads or writes files or "
                                 "runs code outside the model: refused (inferbench runs inference ops only)")


def check_savedmodel_apart(folder: Path, what: str = "SavedModel") -> None:
    """:func:`check_savedmodel` in a child process, for a process that does not load TensorFlow (OpenVINO converts a
    SavedModel without it): importing TensorFlow's protobuf classes there would put TensorFlow's time and memory
    (9-12 s, ~0.8 GB on a 2-core Xeon) into that runtime's cold start and footprint. Its refusal, the same line."""
    import subprocess
    import sys

    script = ("import sys; from pathlib import Path; from inferbench.base.errors import UsageError; "
              "from inferbench.registry.filecheck import check_savedmodel\n"
              "try: check_savedmodel(Path(sys.argv[1]), sys.argv[2])\n"
              "except UsageError as exc: print(exc, file=sys.stderr); sys.exit(2)")
    done = subprocess.run([sys.executable, "-c", script, str(folder), what], capture_output=True, text=True,
                          check=False)
    if done.returncode == 2:
        raise UsageError(done.stderr.strip().splitlines()[-1])
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"reading the ops of {what} {folder} failed: {tail}")
