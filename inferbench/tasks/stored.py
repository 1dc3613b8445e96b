"""A task's post-processed results (one mapping an image: a detector's boxes, scores and classes, a segmenter's mask)
kept in one compressed ``.npz`` of plain arrays and read back as they were: what the FP32 reference gives on the
many agreement inputs, small where the raw outputs they come from are not (an SSD's heads: 1.2 MB an image). Read
without pickles; integers kept in the smallest type that holds them (a mask's classes: one byte a pixel, not the
eight of its argmax: 1,000 masks at 520 px are 270 MB, not 2.2 GB), from when they are made (:func:`compact`) to when
they are read back."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from ..base.files import atomic_write_bytes

COUNT = "images"


def _small(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind not in "iu" or not values.size:
        return values
    low, high = int(values.min()), int(values.max())
    return values.astype(np.result_type(np.min_scalar_type(low), np.min_scalar_type(high)))


def compact(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``results`` with each integer array in the smallest type that holds it (kept so while they are gathered: for
    comparing, never for arithmetic, which would wrap in a byte)."""
    return [{k: _small(v) if isinstance(v, np.ndarray) else v for k, v in r.items()} for r in results]


def nbytes(results: list[dict[str, Any]]) -> int:
    """What ``results``' arrays hold, in bytes."""
    return sum(v.nbytes for r in results for v in r.values() if isinstance(v, np.ndarray))


def save(path: Path, results: list[dict[str, Any]]) -> None:
    """``results`` (every image's mapping with the same keys: arrays, each image's stacked along its first axis, or
    plain numbers and flags) written to ``path``."""
    arrays: dict[str, Any] = {COUNT: np.asarray(len(results))}
    for key in results[0] if results else ():
        values = [r[key] for r in results]
        if isinstance(values[0], np.ndarray):
            arrays[f"{key}.values"] = _small(np.concatenate([np.asarray(v) for v in values]))
            arrays[f"{key}.lengths"] = np.asarray([len(v) for v in values], dtype=np.int64)
        else:
            arrays[f"{key}.each"] = np.asarray(values)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # plain arrays only: read back with allow_pickle=False
    atomic_write_bytes(path, buffer.getvalue())  # whole or not at all: a file there is kept as made


def load(path: Path) -> list[dict[str, Any]]:
    """The results :func:`save` wrote (integers in their small types)."""
    with np.load(path, allow_pickle=False) as data:
        out: list[dict[str, Any]] = [{} for _ in range(int(data[COUNT]))]
        for name in data.files:
            key, _, part = name.rpartition(".")
            if part == "each":
                for r, v in zip(out, data[name].tolist()):
                    r[key] = v
            elif part == "values":
                values = data[name]
                bounds = np.cumsum(data[f"{key}.lengths"])[:-1]
                for r, v in zip(out, np.split(values, bounds)):
                    r[key] = v
    return out
