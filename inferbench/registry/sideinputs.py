"""A model file's inputs beside its image (an ONNX file's, a ``.pt2`` program's): found when the file is read, each
filled as it declares itself, and bound into the imported graph so that every runtime is fed the image alone (its
runner unchanged) and computes from the same values. A detector exported with the size of its images as a second
input (RT-DETR's ``orig_target_sizes [batch, 2]``, PaddleDetection's ``im_shape`` and ``scale_factor``) is the case
this serves.

The rule is declared, never guessed from values: a side input of two numbers an image (``[batch, 2]`` or ``[2]``)
whose name says what it holds: ``...size...`` or ``...shape...`` is the image's height and width, ``...scale...`` is
1 on both axes (the image fed at the model's own size). Any other input is refused in one line that names it. A side
input bound into the graph is a constant there: a runtime may fold what it feeds, as it could not where each image
comes at its own size (the record says which inputs were bound, and to what)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import UsageError

#: What a side input holds, by the words its name holds (first match wins), and how it is said.
FILLS = (("scale", "scale", "1 on both axes (the image at the model's own size)"),
         ("size", "size", "the image's height and width"),
         ("shape", "size", "the image's height and width"))
#: The element types a side input may have: ONNX's TensorProto codes by name.
DTYPES = {"FLOAT": "float32", "FLOAT16": "float16", "DOUBLE": "float64", "INT64": "int64", "INT32": "int32"}
#: The same by NumPy's names (a Keras input's dtype, TensorFlow's).
ONNX_NAME = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True)
class SideInput:
    name: str
    batched: bool  # [batch, 2] (else [2])
    dtype: str  # a NumPy dtype's name (DTYPES)
    fill: str  # "size" (height, width) or "scale" (1, 1)
    said: str  # what it is filled with, in words

    def value(self, height: int, width: int) -> list[float]:
        return [float(height), float(width)] if self.fill == "size" else [1.0, 1.0]

    def phrase(self) -> str:
        shape = "[batch, 2]" if self.batched else "[2]"
        return f"{self.name} {shape} {self.dtype}: {self.said}, bound into the graph"


def is_image(value_info: Any) -> bool:
    """A float input of four dimensions, three of them channels first or last: the image."""
    dims = value_info.type.tensor_type.shape.dim
    return value_info.type.tensor_type.elem_type in (1, 10) and len(dims) == 4 and 3 in (dims[1].dim_value,
                                                                                          dims[3].dim_value)


def looks_like_image(dims: list[Any], dtype: str) -> bool:
    """An input of four dimensions, 3 channels first or last, of a float type (NumPy's name): the image (a Keras
    file's or a SavedModel's inputs, read from their shapes)."""
    return len(dims) == 4 and 3 in (dims[1], dims[3]) and dtype.startswith("float")


def no_one_image(path: Path, names: list[str], images: int) -> UsageError:
    """The one line for a model whose inputs ``names`` (none where they cannot be read) hold ``images`` images, not
    one (an ONNX file's, a .keras file's, a SavedModel's)."""
    listed = f" ({', '.join(n[:40] for n in names)})" if names else ""
    return UsageError(f"{path} has {len(names) or 'several'} inputs{listed} and {images or 'no'} image inputs (float, "
                      "four dimensions, 3 channels first or last): inferbench times models with one image input")


def split(inputs: list[Any], path: Path) -> tuple[Any, list[SideInput]]:
    """The image input of a graph's ``inputs`` (its initializers left out) and its side inputs, each with its fill; one
    line where there is no one image or a side input's meaning cannot be read from its name and shape."""
    from onnx import TensorProto

    images = [i for i in inputs if is_image(i)]
    if len(inputs) == 1:
        return inputs[0], []  # the one input: the file check says what is wrong with it, if anything is
    if len(images) != 1:
        raise no_one_image(path, [i.name for i in inputs], len(images))
    sides = [side_input(i.name, [d.dim_value or None for d in i.type.tensor_type.shape.dim],
                        TensorProto.DataType.Name(i.type.tensor_type.elem_type), path)
             for i in inputs if i is not images[0]]
    return images[0], sides


def side_input(name: str, dims: list[int | None], kind: str, path: Path) -> SideInput:
    """The input ``name`` of ``dims`` (None: dynamic) and element type ``kind`` (ONNX's name: FLOAT, INT64...) as a
    side input with its fill, read from its name and shape (an ONNX file's or a .pt2 program's); one line where they
    do not say what it holds."""
    fill = next(((f, said) for word, f, said in FILLS if word in name.lower()), None)
    if dims[-1:] != [2] or len(dims) not in (1, 2) or kind not in DTYPES or fill is None:
        shape = ", ".join("?" if d is None else str(d) for d in dims)
        raise UsageError(f"{path}: input {name[:60]} [{shape}] {kind.lower()} is not the image, and inferbench "
                         "fills a side input only where its name and shape say what it holds: two numbers an "
                         "image ([batch, 2] or [2]) named ...size... or ...shape... (the image's height and "
                         "width) or ...scale... (1 on both axes)")
    return SideInput(name, len(dims) == 2, DTYPES[kind], *fill)


def bind(path: Path, sides: tuple[SideInput, ...], height: int, width: int) -> None:
    """Rewrite the ONNX file at ``path`` with each side input computed in its graph: the constant [1, 2] of its fill,
    expanded to the image input's batch where it is batched."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    (image,) = [i for i in graph.input if i.name not in initializers and is_image(i)]
    nodes: list[Any] = []
    for side in sides:
        value = np.array([side.value(height, width)], dtype=side.dtype)  # [1, 2]
        tag = f"inferbench_side_{len(nodes)}"
        if not side.batched:
            nodes.append(helper.make_node("Constant", [], [side.name], value=numpy_helper.from_array(value[0])))
            continue
        nodes += [helper.make_node("Constant", [], [f"{tag}_value"], value=numpy_helper.from_array(value)),
                  helper.make_node("Shape", [image.name], [f"{tag}_shape"]),
                  helper.make_node("Constant", [], [f"{tag}_first"],
                                   value=numpy_helper.from_array(np.array([0], dtype=np.int64))),
                  helper.make_node("Gather", [f"{tag}_shape", f"{tag}_first"], [f"{tag}_batch"], axis=0),
                  helper.make_node("Constant", [], [f"{tag}_two"],
                                   value=numpy_helper.from_array(np.array([2], dtype=np.int64))),
                  helper.make_node("Concat", [f"{tag}_batch", f"{tag}_two"], [f"{tag}_target"], axis=0),
                  helper.make_node("Expand", [f"{tag}_value", f"{tag}_target"], [side.name])]
    bound = {s.name for s in sides}
    kept = [i for i in graph.input if i.name not in bound]
    del graph.input[:]
    graph.input.extend(kept)
    for node in reversed(nodes):
        graph.node.insert(0, node)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def bind_keras(model: Any, sides: list[SideInput], height: int, width: int) -> Any:
    """A Keras model of an image and ``sides`` as a model of its image alone, at the run's ``height`` and
    ``width``: each side input the constant of its fill, made by standard layers only (a .keras file loads in safe
    mode, which refuses a Lambda's code): the image's first pixel (cropped: no pass over the image), into a Dense
    layer of a zero kernel whose bias is the fill (exactly the fill: 0 times a finite number is 0), frozen; its 8
    numbers are counted in the model's parameters."""
    import keras

    by_name = {t._keras_history.operation.name: t for t in model.inputs}
    given = {s.name for s in sides}
    (image,) = [t for n, t in by_name.items() if n not in given]
    first = "channels_first" if image.shape[1] == 3 else "channels_last"
    shape = (3, height, width) if first == "channels_first" else (height, width, 3)  # the run's size: a fixed one
    x = keras.Input(shape, name=image._keras_history.operation.name, dtype=image.dtype)
    pixel = keras.layers.Cropping2D(((0, height - 1), (0, width - 1)), data_format=first,  # the run's image size
                                    name="inferbench_pixel")(x)
    pooled = keras.layers.Flatten(name="inferbench_flat")(pixel)
    fed = {n: x for n in by_name if n not in given}
    for i, side in enumerate(sides):
        fed[side.name] = keras.layers.Dense(2, kernel_initializer="zeros", trainable=False, dtype=side.dtype,
                                            bias_initializer=keras.initializers.Constant(side.value(height, width)),
                                            name=f"inferbench_side_{i}")(pooled)
    inputs = model.input
    call = {k: fed[t._keras_history.operation.name] for k, t in inputs.items()} if isinstance(inputs, dict) \
        else [fed[n] for n in by_name]
    out = model(call)
    if isinstance(out, (list, tuple)):  # each output by its own layer's name, not the wrapped model's
        out = [keras.layers.Identity(name=n)(t) for n, t in zip(model.output_names, out)]
    return keras.Model(x, out, name=f"{model.name}_bound")

