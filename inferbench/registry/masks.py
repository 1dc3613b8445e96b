"""A segmenter's labelled images (``--eval-dir`` holding ``images/`` and ``masks/``): each image's mask beside it
under the same name, a ``.png`` whose every pixel is its class number (Pascal VOC's convention: 255 marks a pixel
not counted, a border or a void), of its image's size; checked from their headers before any is decoded (a missing
mask, a mask of another size, a colour mask: one line naming it), and the masks a run uses, resized whole to the
model's input as the images are (nearest neighbour: classes are never blended), for
:func:`inferbench.tasks.segmentation.accuracy`. Files are opened by :mod:`.images`' bounded reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..base.size import Size, hw
from ..base.text import visible

IMAGES, MASKS = "images", "masks"
#: A mask's pixel that is not counted (VOC's border and void label).
IGNORE = 255
#: Pillow's modes that hold one class number a pixel: 8 bits, a palette's indices, 16 bits.
MODES = ("L", "P", "I;16", "I")


def find(folder: Path) -> bool:
    """Does ``folder`` hold a segmenter's labelled images: an ``images/`` and a ``masks/`` folder?"""
    return (folder / IMAGES).is_dir() and (folder / MASKS).is_dir()


def mask_of(image: Path, root: Path) -> Path:
    """The mask of ``image`` (found under ``root/images``): the same path under ``root/masks``, as a ``.png``."""
    return (root / MASKS / image.relative_to(root / IMAGES)).with_suffix(".png")


def check_present(found: list[tuple[Path, int]], root: Path) -> None:
    """Every image of ``found`` has its mask; one UsageError naming the first that has not."""
    missing = [p for p, _ in found if not mask_of(p, root).is_file()]
    if missing:
        raise UsageError(f"--eval-dir {root}: {len(missing)} of its {len(found)} images have no mask in {MASKS}/, "
                         f"e.g. {visible(str(mask_of(missing[0], root)))}")


def check_header(mask: Path, mode: str, size: tuple[int, int], image: Path, image_size: tuple[int, int]) -> None:
    """A mask read from its header: one class number a pixel, its image's size; one UsageError naming it otherwise."""
    if mode not in MODES:
        raise UsageError(f"{visible(str(mask))}: a mask holds one class number a pixel (modes {', '.join(MODES)}); "
                         f"this one is {mode} (a colour mask: save its class indices)")
    if size != image_size:
        raise UsageError(f"{visible(str(mask))} is {size[0]}x{size[1]} pixels, its image {visible(str(image))} "
                         f"{image_size[0]}x{image_size[1]}: a mask has its image's size")


def classes_of(mask: Any, resolution: Size) -> np.ndarray:
    """A mask (opened by Pillow) resized whole to ``resolution`` (nearest neighbour) as class numbers, height x
    width."""
    from PIL import Image

    h, w = hw(resolution)
    return np.asarray(mask.resize((w, h), Image.Resampling.NEAREST), dtype=np.int32)
