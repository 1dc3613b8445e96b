"""Carry a model's exported artifacts to a machine that cannot export them (a GPU machine without TensorFlow).

Every artifact starts from the Keras export, made with TensorFlow. A lent GPU machine may have no TensorFlow,
and what travels there is size-limited; this packs only what it cannot make itself, and unpacks it into an
artifact cache that inferbench then finds as a cache *brought from elsewhere* (verified file by file against
the manifest, see ``inferbench.exporters.cache.brought``):

- packed: the Keras model, the reference logits of the 16 parity inputs and of every timed batch size, the
  model's FP32 spread, the ONNX export, its FP16 cast (TensorRT 11 builds FP16 engines from it), FP32's outputs on
  the agreement inputs that FP16 and BF16 cells are counted against (``--agreement-inputs``, 1,000 as a run's
  default), and the manifest;
- left out: the 16 parity inputs themselves (NumPy makes the same bytes from the seed on any machine: they are
  made again on unpacking, and their hash is checked against the manifest), the SavedModel (no GPU runner here
  needs it), and what the GPU machine makes itself (the ported weights need Keras alone, the torch export
  torch and onnx2torch). INT8 is not packed: on a GPU it is TensorRT's, whose QDQ model needs the run's calibration
  set, and TensorRT, which the lent machines lack.

    python benchmarks/gpu_bring.py pack   OUT.tar.xz [--model M] [--resolution R] [--batch-sizes 1,4,...]
                                          [--agreement-inputs N]
    python benchmarks/gpu_bring.py unpack OUT.tar.xz CACHE_DIR

Looks inside: the artifact cache's manifest and files, packed for a machine that cannot export them; the Python API
(inferbench.api) has no such piece, so this script imports the modules it studies.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

PACKED_KINDS = ("keras", "reference", "onnx", "onnx-fp16", "agreement")
REMADE = "reference/inputs.npy"  # made again from the seed on unpacking


def pack(out: Path, model: str, resolution: int, batch_sizes: tuple[int, ...], cache_dir: str,
         agreement_inputs: int = 1000) -> None:
    from inferbench.base.errors import UsageError
    from inferbench.execution.exports import ensure_exports
    from inferbench.execution.plan import build
    from inferbench.execution.progress import Progress
    from inferbench.options import with_defaults
    from inferbench.registry.frameworks import get_framework

    keys = ["onnxrt", "torch-native"]  # their artifacts: the ONNX export, and the Keras model with its reference
    values = with_defaults({"frameworks": keys, "models": [model], "resolutions": [resolution],
                            "batch_sizes": list(batch_sizes), "cache_dir": cache_dir, "device": "cpu"}, "run")
    config = build(values).config
    folder, failed = ensure_exports(config, model, resolution, [get_framework(k) for k in keys], batch_sizes,
                                    Progress(0, verbosity=0), agreement_inputs=agreement_inputs, also=("onnx-fp16",))
    if failed:
        raise UsageError(f"exports failed: {failed}")
    manifest = json.loads((folder / "manifest.json").read_text())
    kinds = [k for k in PACKED_KINDS if k in manifest["artifacts"]]  # agreement: none where --agreement-inputs 0
    files = sorted({rel for kind in kinds for rel in manifest["artifacts"][kind]["files"]} - {REMADE})
    with tarfile.open(out, "w:xz", preset=6) as tar:
        for rel in ["manifest.json", *files]:
            tar.add(folder / rel, arcname=f"{folder.name}/{rel}")
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB, {len(files)} files of {folder.name} "
          f"({', '.join(kinds)}; batch sizes {', '.join(map(str, batch_sizes))})")


def unpack(archive: Path, cache_dir: Path) -> None:
    from inferbench.exporters import cache
    from inferbench.exporters.reference import parity_inputs
    from inferbench.registry.models import get_model

    cache_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(cache_dir, filter="data")  # no links, nothing outside cache_dir
        (name,) = {Path(m.name).parts[0] for m in tar.getmembers()}
    folder = cache_dir / name
    manifest = json.loads((folder / "manifest.json").read_text())
    key = manifest["key_inputs"]
    inputs = parity_inputs(get_model(key["model"]), key["resolution"], key["seed"])
    buffer = io.BytesIO()
    np.save(buffer, inputs)
    (folder / REMADE).write_bytes(buffer.getvalue())
    intact = {kind: cache.cached(folder, kind) is not None for kind in PACKED_KINDS if kind in manifest["artifacts"]}
    if not all(intact.values()):
        sys.exit(f"unpacked {folder}, but not intact: {intact} (the parity inputs made here differ?)")
    print(f"{folder}: {', '.join(intact)} intact (parity inputs made again from seed {key['seed']}, "
          "hash as exported)")


def parser() -> argparse.ArgumentParser:
    """The script's flags (benchmarks/gpu_run.sh's calls are parsed by it in tests/test_gpu_kit.py)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("pack")
    a.add_argument("out", type=Path)
    a.add_argument("--model", default="mobilenet_v3_large")
    a.add_argument("--resolution", type=int, default=224)
    a.add_argument("--batch-sizes", default="1,4,8,16,64,256")
    a.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "inferbench-bring-cache"))
    a.add_argument("--agreement-inputs", type=int, default=1000)
    b = sub.add_parser("unpack")
    b.add_argument("archive", type=Path)
    b.add_argument("cache_dir", type=Path)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.what == "pack":
        pack(args.out, args.model, args.resolution, tuple(int(x) for x in args.batch_sizes.split(",")),
             args.cache_dir, args.agreement_inputs)
    else:
        unpack(args.archive, args.cache_dir)


if __name__ == "__main__":
    main()
