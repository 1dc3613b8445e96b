"""A small labelled image set the tests make (never downloaded), and a model that classifies it: three classes, each
image a smooth random colour field whose class's channel is the brightest, saved as PNG and JPEG files of several
sizes; the model (a .keras file) takes the channels' means as its class scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

CLASSES = ("blue", "green", "red")  # sorted, as the folders are numbered: red's channel is 0 (RGB), so class 2


def colour_image(rng: np.random.Generator, channel: int, size: tuple[int, int]) -> np.ndarray:
    """A smooth random field (uint8, HxWx3) whose ``channel`` is the brightest on average."""
    small = rng.uniform(0, 120, size=(4, 4, 3))
    small[..., channel] += 110
    rows = np.linspace(0, 3, size[0])
    cols = np.linspace(0, 3, size[1])
    r0, c0 = np.floor(rows).astype(int).clip(0, 2), np.floor(cols).astype(int).clip(0, 2)
    fr, fc = (rows - r0)[:, None, None], (cols - c0)[None, :, None]
    img = (small[r0][:, c0] * (1 - fr) * (1 - fc) + small[r0 + 1][:, c0] * fr * (1 - fc)
           + small[r0][:, c0 + 1] * (1 - fr) * fc + small[r0 + 1][:, c0 + 1] * fr * fc)
    return img.clip(0, 255).astype(np.uint8)


def colour_classes(root: Path, per_class: int = 12, seed: int = 0) -> Path:
    """A folder per class (blue/, green/, red/), ``per_class`` images each, PNG and JPEG of several sizes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    channel = {"red": 0, "green": 1, "blue": 2}
    for name in CLASSES:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            size = (int(rng.integers(36, 80)), int(rng.integers(36, 80)))
            ext = ".png" if i % 2 else ".jpg"
            Image.fromarray(colour_image(rng, channel[name], size)).save(root / name / f"{i:03d}{ext}", quality=95)
    return root


def colour_model(path: Path, resolution: int = 32) -> Path:
    """A .keras model scoring each class by its channel's mean (its classes in the folders' sorted order)."""
    import keras

    inputs = keras.Input((resolution, resolution, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(inputs)
    dense = keras.layers.Dense(3)
    model = keras.Model(inputs, dense(pooled))
    kernel = np.zeros((3, 3), dtype=np.float32)
    for k, name in enumerate(CLASSES):
        kernel[{"red": 0, "green": 1, "blue": 2}[name], k] = 0.05
    dense.set_weights([kernel, np.zeros(3, dtype=np.float32)])
    model.save(path)
    return path
