"""The runner contract. Runners load, place inputs, call and synchronise; they never time themselves."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..base.errors import UsageError
from ..base.size import Size
from ..exporters.cache import read_manifest
from ..registry.models import ModelSpec
from ..registry.outputs import packed
from ..registry.programs import check_program
from ..spec import RunnerOptions


@dataclass(frozen=True)
class LoadContext:
    folder: Path  # artifact cache folder
    artifact: Path | None  # the artifact this framework loads (None for torch-native)
    model: ModelSpec
    resolution: Size
    device: str  # "cpu" | "gpu" (a GPU child sees exactly one GPU: index 0)
    threads: int
    seed: int
    precision: str = "fp32"
    options: RunnerOptions = field(default_factory=RunnerOptions)
    batch_size: int = 1  # the batch size this cell times (a static-shape runtime compiles for it)
    batch_sizes: tuple[int, ...] = (1,)  # every batch size of this model and resolution in the run
    setting: dict[str, Any] = field(default_factory=dict)  # load-time settings being tuned (see Runner.tuning_grid)
    private: str | None = None  # --trust-cache: a folder of this worker's own the artifact is copied into first

    @property
    def path(self) -> Path:
        """The artifact this runtime loads (a runner that loads one: every runner but torch-native's own weights),
        checked for what it can do before anything reads it (:func:`inferbench.registry.programs.check_program`: a
        program may compute, nothing else). From a cache shared on purpose (``--trust-cache``), what is loaded is a
        private copy whose hash was checked against the manifest: nothing another user writes between the check and
        the runtime's read reaches the runtime."""
        if self.artifact is None:
            raise RuntimeError(f"{self.model.name}: no artifact to load for this framework")
        path = self.artifact if self.private is None else private_copy(self.folder, self.artifact, Path(self.private))
        check_program(path)
        return path


def private_copy(folder: Path, artifact: Path, into: Path) -> Path:
    """``artifact`` (a file, or a folder of files, of the cache folder ``folder``) copied into ``into``, each file's
    bytes hashed as they are copied and held to the manifest's digest; a UsageError naming a file that differs."""
    digests: dict[str, str] = {}
    for entry in read_manifest(folder).get("artifacts", {}).values():
        if isinstance(entry, dict) and isinstance(entry.get("files"), dict):
            digests.update(entry["files"])
    target = into / artifact.name
    sources = [artifact] if artifact.is_file() else sorted(p for p in artifact.rglob("*") if p.is_file())
    for source in sources:
        rel = source.relative_to(folder).as_posix()
        out = target if source == artifact else target / source.relative_to(artifact)
        out.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        with open(source, "rb") as src, open(out, "wb") as dst:
            for chunk in iter(lambda: src.read(2**20), b""):
                h.update(chunk)
                dst.write(chunk)
        if digests.get(rel) != h.hexdigest():
            raise UsageError(f"{source}: its bytes are not what the cache's manifest recorded (changed since it was "
                             "exported?): refused")
    return target


class Runner:
    name: ClassVar[str]

    @classmethod
    def tuning_grid(cls, threads: int, device: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The settings worth trying on this machine (docs/frameworks.md), inferbench's own first in each list:
        load-time ones (read from ``LoadContext.setting`` at load: a worker of their own each) and live ones
        (switched by :meth:`apply` in a loaded runner). ``[{}], [{}]``: nothing to tune."""
        return [{}], [{}]

    def apply(self, setting: dict[str, Any]) -> None:
        """Switch to a live setting of :meth:`tuning_grid` (an empty one: as loaded)."""
        if setting:
            raise NotImplementedError(f"{self.name} has no live settings to switch")

    def check(self, ctx: LoadContext) -> None:
        """Read what the artifact holds before anything of it runs (a refusal: one line). Not part of the cold start
        :meth:`load` times: a deployment does not pay inferbench's own checks (OpenVINO's read of a SavedModel's ops
        imported TensorFlow, 9-12 s of a 1-3 s load on a 2-core Xeon)."""

    def load(self, ctx: LoadContext) -> None:
        raise NotImplementedError

    def serving_calls(self, n: int, batch: int) -> list[Any]:
        """``n`` callables for serving threads, each a gathered batch in (:meth:`gather`), host outputs out
        (synchronised; LoadGen's response is a host buffer): what LoadGen's system under test calls. Runtimes whose
        ``call`` is safe from several threads share it; one that keeps per-request state (OpenVINO's infer request)
        gives each thread its own."""
        def serve(prepared: Any) -> np.ndarray:
            out = self.call(prepared)
            self.synchronize(out)
            return packed(self.to_numpy(out))

        return [serve] * n

    def prepare(self, batch: np.ndarray) -> Any:
        """Host NHWC float32 array -> what ``call`` takes (device-resident on a GPU)."""
        return batch

    def resident(self, samples: np.ndarray) -> Any:
        """The serving sample set (host NHWC float32), placed once before any test where ``call`` reads its inputs,
        in the layout and dtype it reads them (a device tensor on a GPU): the load-samples step of MLPerf's harnesses.
        The default keeps the host array: what ONNX Runtime and OpenVINO read on the CPU."""
        return samples

    def gather(self, resident: Any, indices: np.ndarray) -> Any:
        """The samples at ``indices`` of :meth:`resident`'s set, as ``call`` takes them: an index select where they
        lie. The default gathers host rows and calls :meth:`prepare`: a host copy per batch, what a runner that
        cannot do better pays (on a GPU, a transfer too)."""
        return self.prepare(np.take(resident, indices, axis=0))

    def placement(self) -> dict[str, Any]:
        """Where :meth:`resident` keeps the serving samples, for the record (``serving.samples``): ``resident`` (where
        the runtime reads its inputs) and ``placement`` (in words)."""
        return {"resident": True, "placement": "host array (where this runtime reads its inputs); each batch gathered "
                "on the host"}

    def serving_concurrency(self) -> int:
        """The most serving threads that may call this runner at once (2; 1 where calls share one captured CUDA graph
        or one execution context: their buffers would mix)."""
        return 2

    def call(self, prepared: Any) -> Any:
        """One inference; may return before the device has finished."""
        raise NotImplementedError

    def synchronize(self, outputs: Any) -> None:
        """Return only when the device work of ``call`` is finished."""

    def to_numpy(self, outputs: Any) -> Any:
        """Outputs as host arrays, for the parity gate (never inside the timed loop): a mapping name -> array by the
        model's own output names, or, for a model of one output, the array itself
        (:func:`inferbench.registry.outputs.named` reads either)."""
        return np.asarray(outputs)

    def peak_device_memory_mb(self) -> float | None:
        """Peak device memory of this run from the framework's allocator (None on the CPU or if unknown)."""
        return None

    def reset_peak_device_memory(self) -> None:
        """Start the peak-memory count afresh (called just before the timed window, after parity)."""

    def device_uuid(self) -> str | None:
        """UUID of the GPU the framework really runs on, where the framework can tell (else None)."""
        return None

    def block_errors(self, inputs: np.ndarray) -> dict[str, list[Any]] | None:
        """Where parity failed, where it went wrong: each block's output on ``inputs`` against the same program in
        FP64, in network order (``names``, ``errors``: relative L2; :func:`inferbench.measure.parity.divergence`
        names the first past the gate). None where the runtime's intermediate outputs cannot be read."""
        return None

    def details(self) -> dict[str, Any]:
        """Facts recorded with the result (``runner``): ``sync`` (a code, see docs/results-schema.md), threads,
        providers, compile flags..."""
        return {}


class Trainer(Runner):
    """A runner that trains (``--scenario train``): one :meth:`step` is forward, loss, backward and the optimizer's
    update on a prepared batch of inputs and labels. Like runners, trainers never time themselves.

    For training parity (:mod:`inferbench.measure.training`) a trainer also gives step 1's gradients without
    updating (:meth:`gradients`), its trainable weights (:meth:`weights`), and the reference's arrays in its own
    naming and layout (:meth:`own`: the Keras names as they are; torch ports them as its weights were ported)."""

    classes: int = 0  # the model's output classes (the labels' range)

    def prepare_batch(self, inputs: np.ndarray, labels: np.ndarray) -> Any:
        """Host NHWC float32 inputs and int32 labels -> what :meth:`step` takes (device-resident on a GPU)."""
        raise NotImplementedError

    def step(self, prepared: Any) -> Any:
        """One training step; returns its loss, which may not be synchronised yet."""
        raise NotImplementedError

    def set_learning_rate(self, rate: float) -> None:
        """Train with ``rate`` from now on (the reference's, before the first step)."""
        raise NotImplementedError

    def loss_value(self, loss: Any) -> float:
        """The loss as a number (waits for the step to finish)."""
        return float(np.asarray(loss))

    def gradients(self, prepared: Any) -> tuple[float, dict[str, np.ndarray]]:
        """The loss and every trainable variable's gradient at the current weights; the weights stay as they are."""
        raise NotImplementedError

    def weights(self) -> dict[str, np.ndarray]:
        """Every trainable variable's value, by name."""
        raise NotImplementedError

    def own(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The reference's per-variable ``arrays`` (Keras names) in this trainer's names and layout."""
        return dict(arrays)

    def training_details(self) -> dict[str, Any]:
        """What the record's ``training`` block says of this trainer (layout, batch-norm kernel, compiler)."""
        return {}
