"""A model's outputs by name: what each is (its kind) and its shape per image, and the one flat form they travel in
between processes and are stored in beside the reference (every output of an image flattened and laid end to end, in
the model's declared order: one row an image).

Runners give their outputs as a mapping name -> array (or, for a model of one output, the array itself);
:func:`named` reads either, :func:`packed` lays them out flat by the declared order (never by the order a runtime
happens to return them in), :func:`unpacked` splits a flat batch back into named arrays. Classification keeps one
output, ``logits``: its flat form is the logits array it always was."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import UsageError

#: What an output can be, and how parity judges it (:func:`inferbench.measure.parity.compare_parts`).
KINDS = {
    "scores": "class scores or logits: relative error and cosine, top-1 flips away from near-ties",
    "boxes": "box coordinates in pixels: relative error and cosine, and an absolute error in pixels",
    "masks": "class scores a pixel, [classes, height, width]: relative error and cosine, and the pixels whose top "
             "class moved away from near-ties",
    "values": "numbers of no known meaning: relative error and cosine",
    "kept_scores": "the scores of the detections a graph kept itself (computed on its own region proposals, whose "
                   "rounding moves them): relative error and cosine, at FP32 to the widest FP32 gate",
}


@dataclass(frozen=True)
class Output:
    name: str
    shape: tuple[int, ...]  # per image (the batch dimension left out)
    kind: str = "values"  # key of KINDS

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"output kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def size(self) -> int:
        return int(prod(self.shape))

    def said(self) -> dict[str, Any]:
        """As records list it."""
        return {"name": self.name, "shape": list(self.shape), "kind": self.kind}


#: A classifier's one output (every registered model).
LOGITS = "logits"


def named(value: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """A runner's outputs (a mapping name -> array, a tuple or list in the model's order, or the one array of a model
    of one output) as host arrays by the declared ``names``; a ValueError naming what is missing or extra."""
    if isinstance(value, Mapping):
        if len(names) == 1 and len(value) == 1:  # one output: its name is the runtime's own business
            return {names[0]: np.asarray(next(iter(value.values())))}
        missing = [n for n in names if n not in value]
        if missing:
            raise ValueError(f"the runtime's outputs lack {', '.join(missing)} (it gave {', '.join(map(str, value))})")
        return {n: np.asarray(value[n]) for n in names}
    if isinstance(value, (tuple, list)):
        if len(value) != len(names):
            raise ValueError(f"the runtime gave {len(value)} outputs, the model declares {len(names)}")
        return {n: np.asarray(v) for n, v in zip(names, value)}
    if len(names) != 1:
        raise ValueError(f"the runtime gave one array, the model declares {len(names)} outputs")
    return {names[0]: np.asarray(value)}


def host(value: Any, convert: Any = np.asarray) -> Any:
    """A Keras or TensorFlow model's outputs (one array, a tuple or list, or a mapping name -> array) with ``convert``
    applied to each (a framework's tensor to a host array), in the same structure, a mapping's keys sorted (the order
    its outputs are declared in: tf.nest's): what :func:`named` and :func:`packed` read."""
    if isinstance(value, Mapping):
        return {k: convert(value[k]) for k in sorted(value)}
    if isinstance(value, (tuple, list)):
        return [convert(v) for v in value]
    return convert(value)


def natural(name: str) -> tuple[Any, ...]:
    """A sort key that puts ``output_2`` before ``output_10`` (TensorFlow's signatures name outputs so)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def packed(value: Any, names: Sequence[str] | None = None) -> np.ndarray:
    """A batch's outputs in their flat form: one row an image, each output flattened, in ``names``' order (None: the
    one output of a classifier, or the order the runtime gave them in)."""
    if names is None:
        names = list(value) if isinstance(value, Mapping) else [f"output{i}" for i in range(len(value))] \
            if isinstance(value, (tuple, list)) else [LOGITS]
    arrays = list(named(value, names).values())
    rows = len(arrays[0]) if arrays[0].ndim else 1
    return np.concatenate([np.asarray(a, dtype=np.float32).reshape(rows, -1) for a in arrays], axis=1)


def unpacked(flat: np.ndarray, outputs: Sequence[Output]) -> dict[str, np.ndarray]:
    """A flat batch split back into its named outputs, each in its own shape; a ValueError where the sizes differ."""
    flat = np.asarray(flat)
    total = sum(o.size for o in outputs)
    if flat.ndim != 2 or flat.shape[1] != total:
        raise ValueError(f"flat outputs of shape {flat.shape} do not hold {', '.join(o.name for o in outputs)} "
                         f"({total} numbers an image)")
    out, start = {}, 0
    for o in outputs:
        out[o.name] = flat[:, start:start + o.size].reshape(len(flat), *o.shape)
        start += o.size
    return out


def layout(arrays: Mapping[str, np.ndarray], kinds: Mapping[str, str] | None = None) -> list[Output]:
    """The outputs of one batch as declared: each name, its shape per image, its kind (``kinds``; else values)."""
    return [Output(n, tuple(int(d) for d in np.shape(a)[1:]), (kinds or {}).get(n, "values"))
            for n, a in arrays.items()]


def write_layout(path: Path, outputs: Sequence[Output]) -> None:
    path.write_text(json.dumps([o.said() for o in outputs], indent=1))


def read_layout(path: Path, classes: int | None = None) -> list[Output]:
    """The outputs declared beside a reference (``path``); where the file is absent (a cache from before outputs had
    names), the one ``logits`` output of ``classes`` numbers."""
    if not path.exists():
        return [Output(LOGITS, (int(classes or 0),), "scores")]
    try:
        entries = json.loads(path.read_text())
        return [Output(str(e["name"]), tuple(int(d) for d in e["shape"]), str(e["kind"])) for e in entries]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: not a list of outputs ({type(exc).__name__}); delete the cache folder to export "
                         "again") from None
