import pytest

from inferbench.base.device import Device, Gpu, resolve
from inferbench.base.errors import UsageError
from inferbench.scenarios.base import check_device

GPUS = [Gpu(0, "GPU-aaa", "NVIDIA A2", "00000000:17:00.0", 15000.0),
        Gpu(1, "GPU-bbb", "Tesla V100S", "00000000:65:00.0", 32000.0)]


def test_cpu_and_auto_without_gpu():
    assert resolve("cpu", None, gpus=GPUS).kind == "cpu"
    assert resolve("auto", None, gpus=[]).kind == "cpu"
    assert resolve("auto", None, gpus=GPUS).gpu == GPUS[0]


def test_gpu_id_picks_pci_order_and_child_sees_only_that_uuid():
    dev = resolve("auto", 1, gpus=GPUS)
    assert dev.gpu is not None and dev.gpu.uuid == "GPU-bbb"
    env = dev.child_env()
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "GPU-bbb",
                   "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert Device("cpu").child_env() == {"CUDA_VISIBLE_DEVICES": ""}


def test_gpu_errors_are_one_clear_line():
    with pytest.raises(UsageError, match="no NVIDIA GPU.*--device cpu"):
        resolve("auto", 0, gpus=[])
    with pytest.raises(UsageError, match="no NVIDIA GPU"):
        resolve("gpu", None, gpus=[])
    with pytest.raises(UsageError, match=r"--gpu-id 2 does not exist.*0: NVIDIA A2.*1: Tesla V100S"):
        resolve("gpu", 2, gpus=GPUS)
    with pytest.raises(UsageError, match="cannot be combined"):
        resolve("cpu", 0, gpus=GPUS)


class _Reports:
    """Stands for a runner: only the device UUID the framework says it runs on."""

    def __init__(self, uuid):
        self.uuid = uuid

    def device_uuid(self):
        return self.uuid


def test_the_framework_must_run_on_the_measured_gpu(monkeypatch):
    dev = resolve("gpu", 1, gpus=GPUS).as_dict()
    assert check_device(Device("cpu").as_dict(), _Reports(None)) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa")  # e.g. a parent's setting leaking through
    with pytest.raises(RuntimeError, match="CUDA_VISIBLE_DEVICES='GPU-aaa', not the measured GPU GPU-bbb"):
        check_device(dev, _Reports(None))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbb")
    with pytest.raises(RuntimeError, match="runs on GPU GPU-aaa, but power and memory are read from GPU-bbb"):
        check_device(dev, _Reports("GPU-aaa"))
    ok = check_device(dev, _Reports("gpu-BBB"))
    assert ok["framework_uuid"] == "gpu-BBB" and ok["nvml_uuid"] == "GPU-bbb"
    assert check_device(dev, _Reports(None))["method"] == "cuda_visible_devices"
