"""The environment a child process starts with: what inferbench controls (threads, device, backend, the variables
that change what a framework computes or how fast), what it drops from the shell and what the user passes on."""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import tempfile
from pathlib import Path

from ..registry.artifacts import keras_backend_here
from ..registry.frameworks import Framework
from ..spec import CellKey, RunConfig

#: Variables that change what a framework computes or how fast. A child never inherits them from the
#: shell: inferbench sets the ones it needs (threads, device, backend, logging) and drops the rest,
#: unless the user passes one on by name (``--pass-env``); the record's ``config.child_env`` holds them all.
CONTROLLED_NAMES = ("TF_XLA_FLAGS", "XLA_FLAGS", "KERAS_BACKEND", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                    "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "LD_PRELOAD", "NVIDIA_TF32_OVERRIDE",
                    "ATEN_CPU_CAPABILITY")


CONTROLLED_PREFIXES = ("TF_", "XLA_", "OMP_", "MKL_", "MKLDNN_", "KMP_", "GOMP_", "DNNL_", "ONEDNN_", "ORT_",
                       "OPENBLAS_", "TORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_", "TRITON_", "OV_",
                       "OPENVINO_", "JAX_", "MALLOC_")


#: Terraform's variables share TensorFlow's TF_ prefix and change nothing here.
TERRAFORM_PREFIXES = ("TF_CLI_", "TF_VAR_", "TF_LOG", "TF_IN_AUTOMATION", "TF_WORKSPACE", "TF_DATA_DIR",
                      "TF_PLUGIN_CACHE_DIR", "TF_INPUT", "TF_REGISTRY_", "TF_TOKEN_")


def controlled(name: str) -> bool:
    return (name in CONTROLLED_NAMES or name.startswith(CONTROLLED_PREFIXES)) and not name.startswith(
        TERRAFORM_PREFIXES)


def child_env(config: RunConfig, fw: Framework | None = None, cell: CellKey | None = None) -> dict[str, str]:
    """The whole environment a child process starts with: the parent's, minus every controlled variable
    (:func:`controlled`), plus what inferbench sets (the device it may see, the thread count, oneDNN on,
    the variables its framework takes from the cell's runner options) and, for a measured cell only, what
    ``--pass-env`` names (never an export: the artifact cache does not key on them; the cell's identity does,
    ``+env-<digest>``)."""
    env = {k: v for k, v in os.environ.items() if not controlled(k)}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "1", "KERAS_BACKEND": keras_backend_here(),
                "TORCHINDUCTOR_CACHE_DIR": str(private_cache("torchinductor")),
                **config.device.child_env(), **thread_env(config.threads)})
    if fw is not None and cell is not None:
        env.update(fw.child_env(cell.options))
        env.update(passed_env(config.pass_env))
    return env


def passed_env(names: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The shell variables ``--pass-env`` names that are set, as the measured children get them."""
    return {k: os.environ[k] for k in names if k in os.environ}


def env_digest(names: tuple[str, ...] | list[str]) -> str:
    """A short digest of the variables passed on (names and values): part of a cell's identity, so that cells
    measured under different environments are never pooled or compared ("" when nothing is passed)."""
    passed = passed_env(names)
    if not passed:
        return ""
    return hashlib.sha256("\n".join(f"{k}={v}" for k, v in sorted(passed.items())).encode()).hexdigest()[:8]


@functools.cache
def private_cache(name: str) -> Path:
    """A cache folder only this user can write (mode 0700, owned by this user), never in the artifact cache: what
    torch's inductor keeps there (pickled graphs, generated Python modules) is loaded and run, so a folder others
    can write to would let them run code in a benchmark. A folder that fails the check is not used: a fresh
    private temporary one is (its compiled programs then start cold)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inferbench" / "private"
    folder = base / name
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path in (base, folder):
            info = path.stat()
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise PermissionError(f"{path} is not this user's alone")
        return folder
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"inferbench-{name}-"))


def recorded_env(env: dict[str, str]) -> dict[str, str]:
    """The controlled part of a child's environment, as recorded with each result."""
    return {k: v for k, v in sorted(env.items()) if controlled(k)}


def ignored_shell_variables(config: RunConfig) -> list[str]:
    """Controlled variables set in this shell that the children will not see as they are (not passed on,
    and not what inferbench sets them to anyway)."""
    ours = child_env(config)
    return sorted(k for k, v in os.environ.items() if controlled(k) and k not in config.pass_env
                  and ours.get(k) != v)


def thread_env(threads: int) -> dict[str, str]:
    """Same intra-op thread count for every framework, set before the framework is imported."""
    n = str(threads)
    return {
        "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n,
        "TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": "1",
    }
