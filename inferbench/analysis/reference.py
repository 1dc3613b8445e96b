"""Published figures from other projects, as a clearly labelled *external* dataset.

They are never merged into our own records: every row has ``source`` starting with "external:" and
a ``caveat``; plots draw them with their own markers under an "external" label. Provenance and
caveats: ``reference_data/README.md`` (a copy of the team's shared/reference folder).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..base.errors import UsageError

REFERENCE_DIR = Path(__file__).parent / "reference_data"

_PERFACCT_FRAMEWORKS = {  # their label -> the closest inferbench key, with what differs
    "Tf": ("keras-eager", "their 'Tf' is the Keras model called eagerly"),
    "Keras": ("keras-eager", "their 'Keras' is the Keras model called eagerly"),
    "Tfxla": ("tfxla", "XLA by auto-clustering, not jit_compile"),
    "Kerasxla": ("kerasxla", "XLA by auto-clustering, not jit_compile"),
    "Onnxrt": ("onnxrt", "CUDA provider with NumPy in/out (host copies timed)"),
    "Tftrtfp32": ("tensorrt-fp32", "TF-TRT, not native TensorRT"),
    "Tftrtfp16": ("tensorrt-fp16", "TF-TRT, not native TensorRT"),
    "Torch": ("torch", "onnx2torch without inference_mode, H/W swapped input"),
}
PERFACCT_CAVEAT = ("external: 10 timed passes over 512 images, time.time(), host<->device copies and an NVML "
                   "query per batch inside the timed region, no spread reported")


def _perfacct(folder: Path) -> pd.DataFrame:
    frames = [pd.read_csv(f) for f in sorted(folder.glob("*.csv"))]
    raw = pd.concat(frames, ignore_index=True)
    mapped = raw["framework"].map(lambda f: _PERFACCT_FRAMEWORKS.get(f, (f.lower(), "")))
    energy_j = raw["energy"] * 1e-6  # µJ over the 512-image region
    return pd.DataFrame({
        "source": "external: perfacct (dhepeyuvi/Perfacct_Internship@067ac8b)",
        "device_name": raw["gpu_name"].astype(str),
        "model": "mobilenet_v3_large",
        "resolution": 224,
        "batch_size": raw["batch_size"].astype(int),
        "framework_published": raw["framework"],
        "framework": mapped.str[0],
        "framework_note": mapped.str[1],
        "throughput": raw["Throughput"].astype(float),
        "mean_power_w": raw["power_watts"].astype(float),
        # computed from their 512-image energy, not their derived ratios (one of which used 128 images)
        "inferences_per_joule": 512.0 / energy_j,
        "caveat": PERFACCT_CAVEAT,
    })


#: keras-xla-benchmarks' model labels -> inferbench's registry names (their "regnetx_016" is RegNetX002 in
#: their code, see reference_data/README.md).
_XLA_KERAS_MODELS = {"mobilenet_v1": "mobilenet", "regnetx_016": "regnetx_002", "xception": "xception",
                     "inception_v3": "inception_v3", "nasnet_large": "nasnet_large",
                     **{f"efficient_b{i}": f"efficientnet_b{i}" for i in range(8)},
                     **{f"efficient_{v}_v2": f"efficientnet_v2_{v}" for v in ("b0", "b1", "b2", "b3", "s", "m", "l")}}


def _xla_keras(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    return pd.DataFrame({
        "source": "external: keras-xla-benchmarks (sayakpaul/keras-xla-benchmarks@2a15c02)",
        "device_name": raw["gpu"].astype(str),
        "model": raw["model_variant"].map(lambda m: _XLA_KERAS_MODELS.get(m, m)),
        "gflops": raw["gflops"].astype(float),  # their FLOPs column: giga multiply-adds
        "params_million": raw["params_million"].astype(float),
        "resolution": raw["resolution"].astype(int),
        "batch_size": raw["batch_size"].astype(int),
        "framework_published": "tf.function(jit_compile=True)",
        "framework": "tfxla",
        "framework_note": "their 'XLA off' baseline was eager execution",
        "throughput": raw["throughput_samples_per_s"].astype(float),
        "mean_power_w": float("nan"),
        "inferences_per_joule": float("nan"),
        "caveat": "external: README table, batch 4, FP32; no spread reported",
    })


def load_reference(folder: str | Path | None = None) -> pd.DataFrame:
    """Both published datasets as one frame, every row labelled external with its caveat."""
    root = Path(folder) if folder else REFERENCE_DIR
    parts = []
    if (root / "perfacct").is_dir():
        parts.append(_perfacct(root / "perfacct"))
    if (root / "xla_keras_benchmarks.csv").is_file():
        parts.append(_xla_keras(root / "xla_keras_benchmarks.csv"))
    if not parts:
        raise UsageError(f"no reference data found in {root}")
    out = pd.concat(parts, ignore_index=True)
    out["external"] = True
    return out
