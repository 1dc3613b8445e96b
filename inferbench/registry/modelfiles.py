"""The files a user brings: a model file (``--model PATH``: a .keras archive, a TF SavedModel folder, an .onnx
file, a ``torch.export`` .pt2 program) recognised and checked without importing a framework, and a weights file
(``--weights``) checked before any export reads it."""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..base.digest import sha256_file, sha256_tree
from ..base.errors import UsageError
from ..base.size import Size, hw, size_of
from . import graphnms
from .filecheck import check_onnx, every_node, keras_config, keras_endpoints, keras_inputs
from .outputs import Output
from .programs import program_shapes, suppressions
from .sideinputs import SideInput
from .tasks import AUTO, guess, task_module
from .tasks import task as task_entry

#: What a model file can be (``--model PATH``), with how inferbench recognises it.
FILE_FORMATS = {"keras": "a .keras file", "savedmodel": "a TF SavedModel folder", "onnx": "an .onnx file",
                "pt2": "a torch.export .pt2 program"}


@dataclass(frozen=True)
class ModelFile:
    """A model the user brings as a file (``--model PATH``): where it is, its format, the input it takes."""

    name: str  # the file's stem and 8 hex digits of its content's hash: the model's name in records and file names
    path: str  # absolute
    format: str  # key of FILE_FORMATS
    resolution: Size  # images of this many pixels a side (square), or "HxW"
    layout: str = "NHWC"  # "NCHW" for channels-first models (ONNX files exported from PyTorch)
    batch_size: int | None = None  # a batch dimension fixed in the file (None: any batch size)
    task: str = "classification"  # key of registry.tasks.TASKS: what its outputs mean (--task, else guessed)
    graph_nms: str | None = None  # the suppression its own graph holds, in a phrase (registry/graphnms.py): timed as is
    side_inputs: tuple[str, ...] = ()  # its inputs beside the image, each with what fills it (registry/sideinputs.py)

    def __post_init__(self) -> None:
        if self.format not in FILE_FORMATS or self.layout not in ("NHWC", "NCHW"):
            raise ValueError(f"model file format {self.format!r} / layout {self.layout!r} is not one inferbench reads")


def open_model_file(text: str, input_shape: str | None = None, resolution: Size | None = None,
                    asked: str = AUTO) -> ModelFile:
    """Recognise and check a model file without importing a framework (an ONNX file needs the ``onnx``
    package); its input shape comes from the file, else from ``--input-shape`` (or ``--resolution``); its task from
    ``--task`` (``asked``), else from its outputs (one output of one dimension an image: a classifier's; else raw)."""
    path = Path(text).expanduser()
    try:
        exists = path.exists()
    except OSError as exc:  # ENAMETOOLONG
        raise UsageError(f"--model {text}: {exc.strerror or exc}") from None
    if not exists:
        raise UsageError(f"model file {text} does not exist")
    outputs: list[Output] = [Output("logits", (0,))]  # a SavedModel's: one output assumed (its signature needs TF)
    nms: str | None = None  # the suppression the graph holds (an ONNX file's, read)
    sides: tuple[str, ...] = ()  # its side inputs, each said with its fill (an ONNX file's, a .pt2 program's)
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise UsageError(f"{text} is a folder without saved_model.pb: not a TF SavedModel")
        fmt, shape = "savedmodel", None  # reading its signature would need TensorFlow in this process
    elif path.suffix == ".keras":
        fmt, (shape, names, found) = "keras", _keras_input_shape(path)
        outputs = [Output(n, (0,)) for n in names]  # their shapes are read from the reference's outputs at export
        sides = tuple(s.phrase() for s in found)
    elif path.suffix == ".onnx":
        fmt, (shape, outputs, nms, sides) = "onnx", _onnx_shapes(path)
    elif path.suffix == ".pt2":
        fmt, (shape, outputs, found) = "pt2", program_shapes(path, f"--model {text}")
        sides = tuple(s.phrase() for s in found)
        count = suppressions(path)
        nms = f"its own torchvision::nms ({count} such operator{'s' if count > 1 else ''}; at most as many " \
            "boxes as its outputs hold)" if count else None
    else:
        raise UsageError(f"--model {text}: inferbench reads {', '.join(FILE_FORMATS.values())}")
    given = _parse_shape(input_shape) if input_shape else None
    if given is not None:
        if shape is not None and any(a is not None and a != b for a, b in zip(shape, given)):
            raise UsageError(f"--input-shape {input_shape} does not match the input {_show(shape)} of {text}")
        shape = given
    if shape is None:
        if resolution is None:
            raise UsageError(f"inferbench cannot read the input shape of {FILE_FORMATS[fmt]}: pass --input-shape, "
                             "e.g. 224x224x3 (NHWC) or 3x224x224 (NCHW)")
        shape = (None, *hw(resolution), 3)
    batch, dims = shape[0], list(shape[1:])
    if len(dims) != 3 or 3 not in (dims[0], dims[2]):
        raise UsageError(f"{text} takes input {_show(shape)}: inferbench times RGB images, HxWx3 or 3xHxW")
    layout = "NHWC" if dims[2] == 3 else "NCHW"
    h, w = _sides(text, (dims[0], dims[1]) if layout == "NHWC" else (dims[1], dims[2]), resolution)
    name = path.name.removesuffix(path.suffix) if path.suffix else path.name
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "model"
    # the content's hash is part of the name, so of every cell's identity: two different networks saved under one
    # name never pool in a report or pair in compare, and the same file copied elsewhere still does
    chosen = guess(outputs, (h, w)) if asked == AUTO else asked
    task_entry(chosen)  # a name that is no task: one line
    if all(d > 0 for o in outputs for d in o.shape):  # shapes the file fixes: the task reads them now, else at export
        task_module(chosen).kinds(outputs, f"--model {text}")
    return ModelFile(f"{name}-{content_digest(path)}", str(path.resolve()), fmt, size_of(h, w), layout, batch, chosen,
                     nms, sides)


def _sides(text: str, sides: tuple[int | None, int | None], resolution: Size | None) -> tuple[int, int]:
    """Height and width of the images a file takes: as it fixes them (a ``--resolution`` that differs is refused
    later, with the registry's other sizes), else as ``--resolution`` gives them (a file whose one side is dynamic and
    the other fixed takes square images of that side unless told); one line where a side cannot be known or the
    given size contradicts the side the file fixes."""
    given = hw(resolution) if resolution is not None else None
    h, w = sides
    if h is not None and w is not None:
        return h, w
    if given is None:
        side = h if h is not None else w
        if side is None:
            raise UsageError(f"{text} takes images of any size: pass --resolution (224, or HxW as 384x640) or "
                             "--input-shape")
        return side, side
    filled = (h if h is not None else given[0], w if w is not None else given[1])
    if filled != given:
        raise UsageError(f"{text} takes {filled[0]}x{filled[1]} images (height x width, read from the file): "
                         f"--resolution {resolution} does not apply")
    return given


def content_digest(path: Path) -> str:
    """8 hex digits of the sha256 of a model file (of every file of a SavedModel folder, with their paths)."""
    return (sha256_file(path) if path.is_file() else sha256_tree(path))[:8]


def _show(shape: tuple[int | None, ...]) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def _parse_shape(text: str) -> tuple[int | None, ...]:
    parts = re.split(r"[x,]", text.strip().lower())
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) not in (3, 4) or min(dims) < 1:
        raise UsageError(f"--input-shape {text!r} is not HxWxC, CxHxW or NxHxWxC (positive integers, e.g. 224x224x3)")
    return tuple(dims) if len(dims) == 4 else (None, *dims)


def _keras_input_shape(path: Path) -> tuple[tuple[int | None, ...] | None, tuple[str, ...], list[SideInput]]:
    """The image input shape a .keras archive declares in its config.json (read without Keras), its outputs' names
    and its side inputs."""
    config = keras_config(path)
    shape, sides = keras_inputs(config, path)
    return shape, keras_endpoints(config, path), sides


def _onnx_shapes(path: Path) -> tuple[tuple[int | None, ...], list[Output], str | None, tuple[str, ...]]:
    """The ONNX file's image input shape, its outputs (an unknown dimension read as 0: their shapes are read from the
    reference's outputs at export), the suppression its graph holds, in a phrase (None: none), and its side inputs,
    each said with what fills it."""
    try:
        import onnx
    except ImportError:
        raise UsageError("reading an .onnx model needs the onnx package: pip install -e \".[onnxruntime]\"") from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and others for a file that is not a model
        raise UsageError(f"{path} is not a readable ONNX model: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from None

    first, sides = check_onnx(model, path)
    outputs = [Output(o.name, tuple(d.dim_value for d in o.type.tensor_type.shape.dim[1:])
                      if o.type.tensor_type.HasField("shape") else (0,)) for o in model.graph.output]  # (0,): unknown
    nms = graphnms.read(model, list(every_node(model.graph)))
    if nms is not None:
        graphnms.check_outputs(nms, model.graph, first, path)
    return tuple(d.dim_value or None for d in first.type.tensor_type.shape.dim), outputs, \
        graphnms.said(nms) if nms else None, tuple(s.phrase() for s in sides)


# --------------------------------------------------------------------------- weights
def describe_weights(weights: str) -> str:
    """Validate ``--weights`` without importing anything heavy: random, imagenet or a readable file."""
    if weights in ("random", "imagenet"):
        return weights
    path = Path(weights)
    if not (path.name.endswith(".keras") or path.name.endswith(".weights.h5") or path.suffix == ".h5"):
        raise UsageError(
            f"--weights must be 'random', 'imagenet' or a .keras / .weights.h5 file, got {weights!r}"
        )
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise UsageError(f"cannot read weights file {weights}: {exc.strerror or exc}") from None
    # a .keras file is a zip archive, a .h5 file HDF5: catch a wrong or empty file before any export
    kind, magic = ("a .keras (zip) archive", b"PK\x03\x04") if path.name.endswith(".keras") \
        else ("an HDF5 file", b"\x89HDF\r\n\x1a\n")
    if not head.startswith(magic):
        raise UsageError(f"weights file {weights} is not {kind}" + (" (it is empty)" if not head else ""))
    if path.name.endswith(".keras"):
        try:
            with zipfile.ZipFile(path) as archive:
                archive.namelist()
        except zipfile.BadZipFile as exc:
            raise UsageError(f"weights file {weights} is not a complete .keras archive (truncated?): {exc}") from None

        keras_endpoints(keras_config(path, "weights file"), path)
    return str(path.resolve())
