"""Seeded, image-like inputs in each model's own preparation: the reference, timed and agreement inputs every
runtime is given (never zeros, never i.i.d. noise: docs/method.md says why)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..base.size import Size, hw

if TYPE_CHECKING:  # pragma: no cover
    from .models import ModelSpec


#: ImageNet channel means in BGR order, as Keras' "caffe" preprocessing subtracts them.
_CAFFE_MEAN_BGR = np.array([103.939, 116.779, 123.68], dtype=np.float32)

#: ImageNet channel means and standard deviations (RGB, on [0, 1]), as Keras' "torch" preprocessing uses them.
_TORCH_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)

_TORCH_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


# --------------------------------------------------------------------------- inputs
def _cubic_resize_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Matrix M (n_out x n_in) so that M @ v resizes v with cubic convolution (a = -0.5)."""
    a = -0.5
    m = np.zeros((n_out, n_in), dtype=np.float64)
    for j in range(n_out):
        src = (j + 0.5) * n_in / n_out - 0.5
        base = int(np.floor(src))
        for k in range(base - 1, base + 3):
            d = abs(src - k)
            if d <= 1:
                w = (a + 2) * d**3 - (a + 3) * d**2 + 1
            elif d < 2:
                w = a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
            else:
                w = 0.0
            m[j, min(max(k, 0), n_in - 1)] += w
    return m


def make_images(n: int, resolution: Size, seed: int, grid: int = 4) -> np.ndarray:
    """Seeded, image-like inputs: smooth random colour fields in [0, 255], shape (n, height, width, 3).

    Each image is a ``grid`` x ``grid`` random colour grid resized bicubically and stretched to the
    full 0-255 range. I.i.d. pixel noise is not used on purpose: every noise image pools to the same
    features (and the same top-1 class), which hides broken exports. Zeros are never used.
    """
    rng = np.random.default_rng(seed)
    small = rng.uniform(0.0, 1.0, size=(n, grid, grid, 3))
    h, w = hw(resolution)
    img = np.einsum("ij,njkc,lk->nilc", _cubic_resize_matrix(grid, h), small, _cubic_resize_matrix(grid, w))
    lo = img.min(axis=(1, 2, 3), keepdims=True)
    hi = img.max(axis=(1, 2, 3), keepdims=True)
    img = (img - lo) / np.maximum(hi - lo, 1e-12) * 255.0
    return img.astype(np.float32)


def preprocess(spec: ModelSpec, images: np.ndarray) -> np.ndarray:
    """Apply the model's input preparation (in NumPy, outside any timed region)."""
    if spec.preprocessing == "included":
        out = images
    elif spec.preprocessing == "unit":
        out = images / 255.0
    elif spec.preprocessing == "tf":
        out = images / 127.5 - 1.0
    elif spec.preprocessing == "caffe":
        out = images[..., ::-1] - _CAFFE_MEAN_BGR
    elif spec.preprocessing == "torch":
        out = (images / 255.0 - _TORCH_MEAN) / _TORCH_STD
    else:  # pragma: no cover - registry is static
        raise ValueError(spec.preprocessing)
    return np.ascontiguousarray(out, dtype=np.float32)


def make_inputs(spec: ModelSpec, batch: int, resolution: Size, seed: int) -> np.ndarray:
    """A model-ready batch of seeded image-like inputs (float32, in the model's layout: NHWC, or NCHW)."""
    out = preprocess(spec, make_images(batch, resolution, seed))
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)) if spec.layout == "NCHW" else out

#: The agreement inputs (:func:`agreement_inputs`) come in chunks of this many, each from its own seed: the first N of
#: a larger count are the same N.
AGREEMENT_CHUNK = 32

AGREEMENT_SEED = 1_000_000  # added to the run's seed: a stream apart from the reference (+2) and timed (+3) inputs


def agreement_inputs(spec: ModelSpec, resolution: Size, seed: int, count: int) -> Iterator[np.ndarray]:
    """``count`` seeded image-like inputs, made as the 16 reference inputs are, for the agreement of a reduced
    precision with FP32 over many images (:func:`inferbench.measure.parity.agreement`), in chunks (1,000 at 224 px
    take 600 MB)."""
    for start in range(0, count, AGREEMENT_CHUNK):
        yield make_inputs(spec, min(AGREEMENT_CHUNK, count - start), resolution,
                          seed + AGREEMENT_SEED + start // AGREEMENT_CHUNK)
