"""The user's labelled images (``--eval-dir``): found, bounded and read with Pillow, resized the way ImageNet models
are evaluated (the shorter side to the resolution / 0.875, the centre cropped) and prepared the model's own way
(:func:`inferbench.registry.inputs.preprocess`), for each cell's top-1 / top-5 accuracy
(:func:`inferbench.measure.parity.accuracy`).

Two layouts, the two users already have: a folder per class (torchvision's ImageFolder: classes numbered in the
sorted order of the folders' names, or by the names themselves where every one is a number), or a labels file
(``labels.txt`` / ``labels.csv`` in the folder, or the file itself named): one image per line, its path relative to the
file and its class number, separated by a space, a tab or a comma. Nothing here imports Pillow until an image is read.

The images INT8 cells are calibrated on (``--calib-dir``: any folder of images, labels not read) are found, bounded
and read the same way (:class:`Calibration`).

Read as data, never as anything else: regular files only (a FIFO, a device or a socket named like an image is named
and skipped, never opened blocking), a link whose target leaves the folder refused unless ``--follow-links`` asks for
it (a labels file linked to ``/proc/self/environ`` once printed the environment into an error line), one file
counted once by its real path, every file's size bounded before it is read (:mod:`inferbench.base.reading`), and
nothing of a file's content quoted but a short, visible excerpt.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import UsageError
from ..base.reading import kind_of, read_bounded, read_text
from ..base.size import Size, hw
from ..base.text import excerpt, visible
from . import coco, masks
from .inputs import agreement_inputs, preprocess
from .tasks import task

#: What is read as an image (torchvision's ImageFolder reads the same).
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".bmp", ".tif", ".tiff", ".webp")
LABEL_FILES = ("labels.txt", "labels.csv")
MAX_IMAGES = 50_000  # --eval-images' bound (ImageNet's validation set)
MAX_FILE_BYTES = 64 * 2**20  # one image file; larger ones are refused unread
#: Pixels in one image, read from its header before it is decoded: Pillow's own decompression-bomb bound
#: (PIL.Image.MAX_IMAGE_PIXELS, 89.5 million), refused here rather than warned about.
MAX_PIXELS = 89_478_485
CROP = 0.875  # the centre crop's share of the shorter side (224 of 256)
CHUNK = 32  # images read and prepared at a time
CALIBRATION_SEED = 7_000_000  # added to the run's seed: seeded calibration inputs, apart from the agreement's


@dataclass(frozen=True)
class EvalSet:
    """A labelled image set as a run uses it; the images themselves are listed again where they are read
    (:func:`items`), and must still be what the digest says."""

    path: str  # the folder, or the labels file, absolute
    layout: str  # "folders" (a folder per class), "labels" (a labels file), "coco" (a COCO instances file), "masks"
    # (images/ and masks/: a segmenter's) or "images" (unlabelled: a calibration)
    images: int  # how many are used
    found: int  # how many the folder or file names (more than used: a seeded sample)
    classes: int  # the largest label + 1
    digest: str  # 16 hex digits over the used images' paths, sizes, modification times and labels
    seed: int = 0  # the sample's seed, where found > images
    first_class: str | None = None  # a folder per class: the folders numbered 0 and last (sorted as text)
    last_class: str | None = None
    follow_links: bool = False  # --follow-links: links that leave the folder are read (else refused)
    skipped: tuple[str, ...] = ()  # files named like images that are not regular files (a FIFO...): not read

    def describe(self) -> str:
        sample = f" (a seeded sample of the {self.found:,})" if self.found > self.images else ""
        how = (f"a folder per class, numbered in sorted order as torchvision's ImageFolder numbers them: "
               f"{self.first_class}=0 ... {self.last_class}={self.classes - 1}") if self.layout == "folders" \
            else f"a COCO instances file, {self.classes} categories" if self.layout == "coco" \
            else "a mask a image: images/ and masks/, 255 not counted" if self.layout == "masks" \
            else f"a labels file, {self.classes} classes"
        skipped = f"; skipped {len(self.skipped)} that are not regular files: {', '.join(self.skipped[:3])}" \
            if self.skipped else ""
        return f"{self.images:,} labelled images{sample} in {self.path} ({how}{skipped})"


@dataclass(frozen=True)
class Calibration:
    """What INT8 cells are calibrated on: the user's images (``--calib-dir``, any folder of images, labels not read:
    ``set``) or, without them, seeded image-like inputs made as the reference inputs are — a timing configuration,
    not an accuracy claim; ``digest`` names the INT8 artifacts made from it (16 hex digits)."""

    images: int
    digest: str
    set: EvalSet | None = None

    @property
    def seeded(self) -> bool:
        return self.set is None

    def describe(self) -> str:
        if self.set is None:
            return (f"{self.images:,} seeded image-like inputs (no --calib-dir): a timing configuration, not an "
                    "accuracy claim — calibrate on your own images with --calib-dir")
        sample = f" (a seeded sample of the {self.set.found:,})" if self.set.found > self.images else ""
        return f"{self.images:,} images{sample} in {self.set.path}"


def calibration(text: str | None, count: int, seed: int, follow_links: bool = False) -> Calibration:
    """The calibration of a run's INT8 cells: ``count`` of the images in the folder ``text`` (every image in it and
    its subfolders, in sorted order; a seeded sample where there are more), each one's header read, or ``count``
    seeded inputs where ``text`` is None; one clear UsageError for a folder that holds no image."""
    if text is None:
        digest = hashlib.sha256(f"seeded image-like inputs: seed {seed}, {count}".encode()).hexdigest()[:16]
        return Calibration(images=count, digest=digest)
    root = Path(text).expanduser().resolve()
    if not root.is_dir():
        raise UsageError(f"--calib-dir {root}: no such folder")
    es = _opened_set(root, "images", count, seed, follow_links)
    return Calibration(images=es.images, digest=es.digest, set=es)


def calibration_inputs(spec: Any, cal: Calibration, resolution: Size, seed: int) -> Iterator[np.ndarray]:
    """The calibration's inputs, prepared as the model takes them, :data:`CHUNK` at a time: the user's images
    (:func:`inputs`), else seeded image-like inputs from a stream of their own (calibrating on the very inputs the
    agreement is counted on would flatter it)."""
    if cal.set is None:
        yield from agreement_inputs(spec, resolution, seed + CALIBRATION_SEED, cal.images)
    else:
        yield from inputs(spec, items(cal.set), resolution, task(spec.task).whole_image)


def rebatched(chunks: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """``chunks`` (batches of prepared inputs) regrouped into batches of exactly ``size`` (a model whose batch is fixed
    takes no other), the last filled up by repeating its own images."""
    held: list[np.ndarray] = []
    for chunk in chunks:
        held.extend(chunk)
        while len(held) >= size:
            yield np.stack(held[:size])
            held = held[size:]
    if held:
        yield np.stack([held[i % len(held)] for i in range(size)])


def open_eval_set(text: str, count: int, seed: int, follow_links: bool = False) -> EvalSet:
    """The labelled set at ``text``, of at most ``count`` images (a seeded sample where there are more), every one's
    header read (format and size, nothing decoded); one clear UsageError for anything that is not such a set."""
    given = Path(text).expanduser().absolute()
    if given.is_symlink() and not follow_links and given.resolve().parent != given.parent.resolve():
        raise UsageError(f"--eval-dir {given} is a link that leaves its folder (to {given.resolve()}): pass "
                         "--follow-links to read it")
    root, layout = _root(given.resolve(), follow_links)
    return _opened_set(root, layout, count, seed, follow_links)


def _opened_set(root: Path, layout: str, count: int, seed: int, follow_links: bool = False) -> EvalSet:
    """The set at ``root`` in ``layout``, ``count`` of its images (a seeded sample), every one's header read."""
    listed, skipped = _listed(root, layout, follow_links)
    found = _sample(listed, count, seed)
    for path, _ in found:
        with _opened(path) as im:
            if layout == "masks":
                _check_mask(path, im.size, root, follow_links)
    folders = _class_folders(root) if layout == "folders" else [None]
    classes = len(folders) if layout == "folders" else 0 if layout in ("images", "masks") else \
        len(coco.read(root)["categories"]) if layout == "coco" else max(lab for _, lab in found) + 1
    return EvalSet(path=str(root), layout=layout, images=len(found), found=len(listed), classes=classes,
                   digest=_digest(found, root, layout), seed=seed, first_class=folders[0], last_class=folders[-1],
                   follow_links=follow_links, skipped=tuple(skipped))


def items(es: EvalSet) -> list[tuple[Path, int]]:
    """The set's images and labels, listed again; a UsageError where they changed since the run began."""
    found = _sample(_listed(Path(es.path), es.layout, es.follow_links)[0], es.images, es.seed)
    if _digest(found, Path(es.path), es.layout) != es.digest:
        which = "calibration images" if es.layout == "images" else "labelled images"
        raise UsageError(f"the {which} in {es.path} changed while inferbench was using them")
    return found


def labels(es: EvalSet, listed: list[tuple[Path, int]], resolution: Size) -> Any:
    """What the images of ``listed`` are labelled with: their class numbers, or a COCO set's ground truth (its boxes,
    :func:`inferbench.registry.coco.truth`, with ``input_hw``: the model's input, height and width, which the boxes
    scale from), or each image's mask at the input's size."""
    if es.layout == "coco":
        return {**coco.truth(Path(es.path), [i for _, i in listed]), "input_hw": hw(resolution)}
    if es.layout == "masks":
        out = np.empty((len(listed), *hw(resolution)), dtype=np.int32)
        for i, (image, _) in enumerate(listed):
            with _opened(masks.mask_of(image, Path(es.path))) as mask:
                out[i] = masks.classes_of(mask, resolution)
        return out
    return np.array([label for _, label in listed], dtype=np.int64)


def inputs(spec: Any, listed: list[tuple[Path, int]], resolution: Size, whole: bool = False) -> Iterator[np.ndarray]:
    """The images of ``listed`` (:func:`items`) as model inputs (float32, the model's preparation and layout),
    :data:`CHUNK` at a time; ``whole``: each image resized whole (a COCO set's: its boxes stay in the frame)."""
    for start in range(0, len(listed), CHUNK):
        batch = preprocess(spec, np.stack([read(p, resolution, whole) for p, _ in listed[start:start + CHUNK]]))
        yield np.ascontiguousarray(batch.transpose(0, 3, 1, 2)) if spec.layout == "NCHW" else batch


def read(path: Path, resolution: Size, whole: bool = False) -> np.ndarray:
    """One image as RGB float32 in [0, 255] at ``resolution`` (pixels a side, or height x width): turned upright (its
    EXIF orientation), the centre of ``CROP`` of it in the input's aspect (a square: of its shorter side) resized
    (bilinear) to the resolution, as resizing the shorter side to ``resolution / CROP`` and cropping the centre would,
    without ever making the larger image (``whole``: the whole image resized, its aspect not kept: a detector's boxes
    scale back by width and height); 16-bit images scaled to 8 bits; a UsageError naming the file where it cannot be
    read, or holds 32-bit integers or floats (no scale)."""
    from PIL import Image, ImageOps

    with _opened(path) as im:
        rh, rw = hw(resolution)
        side = max(rh, rw, round(max(rh, rw) / CROP))
        im.draft("RGB", (side, side))  # a large JPEG decoded at a fraction of its size, as the resize would
        if im.mode in ("I", "F"):
            raise UsageError(f"{path}: {'32-bit integer' if im.mode == 'I' else 'floating-point'} pixels (mode "
                             f"{im.mode}), whose scale inferbench cannot know: save it with 8 or 16 bits a channel")
        im = ImageOps.exif_transpose(im)
        if im.mode.startswith("I;16"):
            im = Image.fromarray((np.asarray(im, dtype=np.float32) / 257.0).round().astype(np.uint8))
        rgb = im.convert("RGB")
    w, h = rgb.size
    fit = min(w / rw, h / rh) * min(1.0, max(rh, rw) / side)  # the input's aspect, CROP of the image's fitting side
    cw, ch = rw * fit, rh * fit
    box = (0, 0, w, h) if whole else ((w - cw) / 2, (h - ch) / 2, (w + cw) / 2, (h + ch) / 2)
    return np.asarray(rgb.resize((rw, rh), Image.Resampling.BILINEAR, box=box), dtype=np.float32)


def _root(path: Path, follow_links: bool = False) -> tuple[Path, str]:
    """The labels file named, or the folder: its labels file where it lists images ('path label' lines), else its
    class folders (a labels.txt of class names beside them, as Keras and TFLite ship, is not a list of images)."""
    if path.is_file():
        return path, "coco" if path.suffix == ".json" else "labels"
    if not path.is_dir():
        raise UsageError(f"--eval-dir {path}: no such folder or labels file")
    instances = coco.find(path)
    if instances is not None:  # a detector's labelled images: boxes, not classes
        return instances, "coco"
    if masks.find(path):  # a segmenter's: a mask an image
        return path, "masks"
    named = [path / f for f in LABEL_FILES if (path / f).is_file()]
    if named and _class_folders(path):
        try:
            lists = bool(_from_labels(named[0], follow_links))
        except UsageError:
            lists = False
        if not lists:
            return path, "folders"
    return (named[0], "labels") if named else (path, "folders")


def _class_folders(root: Path) -> list[str]:
    """The class folders, in the order that numbers them: their names sorted as text (torchvision's ImageFolder)."""
    return sorted(d for d in os.listdir(root) if not d.startswith(".") and (root / d).is_dir())


def _listed(root: Path, layout: str, follow_links: bool = False) -> tuple[list[tuple[Path, int]], list[str]]:
    """The images and labels at ``root`` (:func:`_root`'s: the labels file or the folder) in its ``layout`` (``images``:
    every image in the folder and below, labelled -1: a calibration set), and the files named like images that are
    not regular files (skipped, with what they are)."""
    skipped: list[str] = []
    if layout == "images":  # a segmenter's labelled folder: its images/ only (its masks are no images to calibrate on)
        top = root / masks.IMAGES if masks.find(root) else root
        found = [(p, -1) for p in _walk(top, set(), root, follow_links, skipped)]
        if not found:
            raise UsageError(f"--calib-dir {root}: no images ({', '.join(EXTENSIONS)}) in it or its subfolders")
        return found, skipped
    if layout == "masks":
        found = [(p, -1) for p in _walk(root / masks.IMAGES, set(), root, follow_links, skipped)]
        if not found:
            raise UsageError(f"--eval-dir {root}: no images ({', '.join(EXTENSIONS)}) in {masks.IMAGES}/")
        masks.check_present(found, root)
        return found, skipped
    if layout == "coco":
        inside(root, root.parent, follow_links)
        found = [(inside(p, root.parent, follow_links), i) for p, i in coco.images(root, coco.read(root))]
        return found, skipped
    found = _from_labels(root, follow_links) if layout == "labels" else _from_folders(root, follow_links, skipped)
    if not found:
        raise UsageError(f"--eval-dir {root}: no images ({', '.join(EXTENSIONS)}) found: a folder per class, or a "
                         f"labels file ({' or '.join(LABEL_FILES)}: 'path label' per line)")
    return found, skipped


def _is_image(name: str) -> bool:
    return name.lower().endswith(EXTENSIONS) and not name.startswith(".")


def _from_folders(root: Path, follow_links: bool, skipped: list[str]) -> list[tuple[Path, int]]:
    folders = _class_folders(root)
    if not folders:
        loose = [f for f in os.listdir(root) if _is_image(f)]
        raise UsageError(f"--eval-dir {root}: " + (f"{len(loose)} images but no class folders and no labels file "
                                                    f"({' or '.join(LABEL_FILES)})" if loose else
                                                    "no class folders and no labels file"))
    found: list[tuple[Path, int]] = []
    seen: set[str] = set()  # folders and files by their real path: each walked, each counted, once
    for label, d in enumerate(folders):
        found += [(p, label) for p in _walk(root / d, seen, root, follow_links, skipped)]
    return found


def _walk(top: Path, seen: set[str], root: Path, follow_links: bool, skipped: list[str]) -> list[Path]:
    """The images in ``top`` and its subfolders, in sorted order, following links that stay within ``root`` (all of
    them with ``follow_links``); a folder or file whose real path is in ``seen`` is taken once (a link back up, two
    links to one image); a file named like an image that is not a regular file is added to ``skipped``, unread."""
    found: list[Path] = []
    for here, dirs, files in os.walk(top, followlinks=True):
        real = os.path.realpath(here)
        if real in seen:
            dirs[:] = []
            continue
        inside(Path(here), root, follow_links)
        seen.add(real)
        dirs.sort()
        for name in sorted(f for f in files if _is_image(f)):
            path = Path(here) / name
            whole = inside(path, root, follow_links)
            try:
                mode = os.stat(whole).st_mode
            except OSError:
                mode = 0
            if not stat.S_ISREG(mode):
                skipped.append(f"{visible(str(path))} ({kind_of(mode) if mode else 'a broken link'})")
            elif str(whole) not in seen:
                seen.add(str(whole))
                found.append(path)
    return found


def inside(path: Path, root: Path, follow_links: bool) -> Path:
    """``path``'s real path, where it lies within ``root`` (its folder) or links may be followed; a UsageError naming
    a link that leaves it."""
    whole = Path(os.path.realpath(path))
    base = Path(os.path.realpath(root))
    if not follow_links and whole != base and base not in whole.parents:
        raise UsageError(f"{visible(str(path))} leads out of {visible(str(root))} (to {visible(str(whole))}): a "
                         "link that leaves the folder is not read; pass --follow-links to read it")
    return whole


def _from_labels(file: Path, follow_links: bool = False) -> list[tuple[Path, int]]:
    folder = file.parent
    inside(file, folder, follow_links)
    try:
        lines = read_text(file, MAX_FILE_BYTES, "labels file").splitlines()
    except ValueError as exc:
        raise UsageError(f"not a readable labels file: {excerpt(exc, 200)}") from None
    found: list[tuple[Path, int]] = []
    seen: set[str] = set()
    first = True
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = [p.strip() for p in re.split(r"\s*[,\t]\s*|\s+(?=\S+$)", text)]
        header, first = first and len(parts) == 2 and not (file.parent / parts[0]).is_file(), False
        if len(parts) != 2 or not re.fullmatch(r"\d{1,6}", parts[1]):
            if header:
                continue  # a header ("path,label"): its first field names no image
            raise UsageError(f"{file}, line {number}: {excerpt(text, 60)!r} is not 'path label' (a class number)")
        if parts[0] in seen:
            raise UsageError(f"{file}, line {number}: {excerpt(parts[0], 60)} is listed twice")
        seen.add(parts[0])
        inside(folder / parts[0], folder, follow_links)
        found.append((folder / parts[0], int(parts[1])))
    missing = [p for p, _ in found if not p.is_file()]
    if missing:
        raise UsageError(f"{file}: {len(missing)} of its {len(found)} images are missing, e.g. {missing[0]}")
    return found


def _sample(found: list[tuple[Path, int]], count: int, seed: int) -> list[tuple[Path, int]]:
    """``count`` of ``found`` (a seeded sample, in listed order), or all where there are no more."""
    if count >= len(found):
        return found
    return [found[i] for i in np.sort(np.random.default_rng(seed).choice(len(found), count, replace=False))]


def _check_mask(image: Path, size: tuple[int, int], root: Path, follow_links: bool) -> None:
    """The mask of ``image`` (of ``size``), its header read: one class number a pixel, its image's size."""
    mask = inside(masks.mask_of(image, root), root, follow_links)
    with _opened(mask) as m:
        masks.check_header(mask, m.mode, m.size, image, size)


def _digest(found: list[tuple[Path, int]], root: Path, layout: str = "") -> str:
    """Over how images become inputs (Pillow's version, the crop) and the images' paths (relative to the set: a set
    moved whole keeps its digest), sizes, modification times and labels (a segmenter's: its masks' too): a set changed
    in any of them is another."""
    import PIL

    if layout == "masks":
        found = found + [(masks.mask_of(p, root), -2) for p, _ in found]
    base = root.parent if root.is_file() else root
    h = hashlib.sha256(f"pillow {PIL.__version__}, crop {CROP}\n".encode())  # how the images become inputs
    for path, label in found:
        st = path.stat()
        h.update(f"{os.path.relpath(path, base)}\t{st.st_size}\t{st.st_mtime_ns}\t{label}\n".encode())
    return h.hexdigest()[:16]


@contextmanager
def _opened(path: Path) -> Iterator[Any]:
    """The image at ``path`` opened by Pillow, its size checked from its header before anything is decoded; a
    UsageError naming the file for whatever Pillow cannot read, in the body too (a truncated file decodes there)."""
    from PIL import Image, UnidentifiedImageError

    try:  # a regular file, its size bounded before it is read, never opened blocking
        data = read_bounded(path, MAX_FILE_BYTES, "image")
    except ValueError as exc:
        raise UsageError(excerpt(exc, 300)) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, in one line
            with Image.open(io.BytesIO(data)) as im:
                if im.size[0] * im.size[1] > MAX_PIXELS:
                    raise UsageError(f"{path}: {im.size[0]}x{im.size[1]} pixels, over the {MAX_PIXELS / 1e6:.1f} "
                                     "million an image may have (a decompression bomb?)")
                yield im
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise UsageError(f"{visible(str(path))}: not an image Pillow can read ({excerpt(exc, 120)})") from None
