"""A detector's labelled images (``--eval-dir`` holding a COCO instances file, or the file itself): the file read
through a size cap, every image and annotation checked before any is used (a missing image, a malformed box, an
unknown image or category: one line naming it), and the ground truth of the images a run uses, as the COCO
evaluator reads it (:func:`inferbench.tasks.detection.accuracy`).

Images are found beside the file or in an ``images/`` folder beside it (COCO's ``file_name`` is relative to its
images folder). A model's class ``i`` is the ``i``-th category in the order of their ids (YOLO's 80 classes against
COCO's 90 ids read so)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from ..base.reading import Unreadable, read_json
from ..base.text import excerpt

#: An instances file's size at most (COCO's val2017 file is 25 MB, train2017's 448 MB: give a subset of that); it is
#: read whole, as Python objects several times its size.
MAX_BYTES = 64 * 2**20
#: The names an instances file has in a folder (the first found is read).
NAMES = ("instances.json", "annotations.json")


def find(folder: Path) -> Path | None:
    """The instances file in ``folder``: one of :data:`NAMES`, else the one ``instances*.json``."""
    for name in NAMES:
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.glob("instances*.json"))
    return found[0] if len(found) == 1 else None


def read(file: Path) -> dict[str, Any]:
    """The instances file, checked: images with unique ids and file names, categories, and annotations whose image and
    category exist and whose box ``[x, y, width, height]`` is four finite numbers, of positive size, inside its image
    (a pixel's slack)."""
    try:
        data = read_json(file, MAX_BYTES, "COCO instances file")
    except Unreadable as exc:
        raise UsageError(f"--eval-dir: {excerpt(exc, 200)}") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations",
                                                                                       "categories")):
        raise UsageError(f"--eval-dir {file}: not a COCO instances file (it needs lists of images, annotations and "
                         "categories)")
    sizes: dict[int, tuple[float, float]] = {}
    names: set[str] = set()
    for i, im in enumerate(data["images"]):
        if not isinstance(im, dict) or not _id(im.get("id")) or not isinstance(im.get("file_name"), str) \
                or not all(_number(im.get(k)) and im[k] > 0 for k in ("width", "height")):
            raise UsageError(f"{file}: images[{i}] is not an image (an integer id, file_name, width and height)")
        if im["id"] in sizes or im["file_name"] in names:
            raise UsageError(f"{file}: images[{i}] ({excerpt(im['file_name'], 60)}, id {im['id']}) is listed twice")
        sizes[im["id"]] = (float(im["width"]), float(im["height"]))
        names.add(im["file_name"])
    ids = [c.get("id") if isinstance(c, dict) else None for c in data["categories"]]
    if not ids or not all(_id(c) for c in ids) or len(set(ids)) != len(ids):
        raise UsageError(f"{file}: its categories need integer ids, each once")
    categories = set(ids)
    for i, a in enumerate(data["annotations"]):
        _check(file, i, a, sizes, categories)
    return data


def _check(file: Path, i: int, a: Any, sizes: dict[int, tuple[float, float]], categories: set[Any]) -> None:
    where = f"{file}: annotations[{i}]"
    if not isinstance(a, dict) or not _id(a.get("image_id")) or a["image_id"] not in sizes:
        raise UsageError(f"{where} names no image of the file")
    if not _id(a.get("category_id")) or a["category_id"] not in categories:
        raise UsageError(f"{where} has category {excerpt(a.get('category_id'), 40)}, which is not among its "
                         "categories")
    box = a.get("bbox")
    if not isinstance(box, list) or len(box) != 4 or not all(_number(v) for v in box):
        raise UsageError(f"{where}: its bbox {excerpt(box, 60)} is not [x, y, width, height]")
    x, y, w, h = box
    width, height = sizes[a["image_id"]]
    if w <= 0 or h <= 0 or x < -1 or y < -1 or x + w > width + 1 or y + h > height + 1:
        raise UsageError(f"{where}: its bbox {box} does not lie inside its {width:g}x{height:g} image with a "
                         "positive size")
    if not all(_number(a[k]) for k in ("area", "iscrowd") if a.get(k) is not None):
        raise UsageError(f"{where}: its area or iscrowd is not a number")


def _id(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def images(file: Path, data: dict[str, Any]) -> list[tuple[Path, int]]:
    """Each image's path and its index in the file; a UsageError naming the first that is missing."""
    folder = file.parent
    found = []
    for index, im in enumerate(data["images"]):
        path = folder / im["file_name"]
        if not path.is_file() and (folder / "images" / im["file_name"]).is_file():
            path = folder / "images" / im["file_name"]
        found.append((path, index))
    missing = [p for p, _ in found if not p.is_file()]
    if missing:
        raise UsageError(f"{file}: {len(missing)} of its {len(found)} images are missing, e.g. {missing[0]}")
    return found


def truth(file: Path, used: list[int]) -> dict[str, Any]:
    """The ground truth of the images at indices ``used`` (in that order), as the COCO evaluator reads it, with
    ``categories`` sorted by id (a model's class ``i`` is the ``i``-th)."""
    data = read(file)
    chosen = [data["images"][i] for i in used]
    ids = {im["id"] for im in chosen}
    annotations = [{**a, "id": n + 1, "iscrowd": int(a.get("iscrowd", 0)),
                    "area": float(a.get("area") or a["bbox"][2] * a["bbox"][3])}
                   for n, a in enumerate(x for x in data["annotations"] if x["image_id"] in ids)]
    return {"images": chosen, "annotations": annotations,
            "categories": sorted((c for c in data["categories"] if isinstance(c, dict)), key=lambda c: c["id"])}
