import pytest

from inferbench.device import Device, Gpu, resolve
from inferbench.errors import UsageError

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
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "GPU-bbb"}
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
