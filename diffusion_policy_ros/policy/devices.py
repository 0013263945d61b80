"""Device and precision selection: cpu | cuda | npu through one code path.

Ascend NPUs are driven by ``torch_npu``, which registers the ``npu`` device
type, ``torch.npu`` (is_available, synchronize, ...) and autocast for it when
imported, mirroring ``torch.cuda``. So cuda and npu differ only in the
device-type string, and the policy code never branches on the backend.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable

import torch

from diffusion_policy_ros.errors import InputError

DEVICES = ("auto", "cpu", "cuda", "npu")
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class DeviceUnavailableError(RuntimeError, InputError):
    """The requested device (or precision on it) cannot be used in this process."""


def _npu_available() -> bool:
    try:
        importlib.import_module("torch_npu")
    except ImportError:
        return False
    return torch.npu.is_available()  # type: ignore[attr-defined]  # added by torch_npu


def resolve_device(name: str) -> torch.device:
    """``auto`` picks cuda, then npu, then cpu; an explicit device must be usable."""
    if name not in DEVICES:
        raise DeviceUnavailableError(f"device must be one of {list(DEVICES)}, got {name!r}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("npu" if _npu_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError("device 'cuda' requested but torch.cuda.is_available() is "
                                     f"False (torch {torch.__version__}, a CPU-only build?)")
    if name == "npu":
        try:
            importlib.import_module("torch_npu")
        except ImportError as exc:
            raise DeviceUnavailableError(
                "device 'npu' needs the Ascend adapter torch_npu (pip install torch-npu of the "
                f"release matching torch {torch.__version__}, plus the CANN toolkit); it is "
                f"not importable here: {exc}") from None
        if not torch.npu.is_available():  # type: ignore[attr-defined]  # added by torch_npu
            raise DeviceUnavailableError("torch_npu is installed but no NPU is visible "
                                         "(check the CANN driver and ASCEND_RT_VISIBLE_DEVICES)")
    return torch.device(name)


def device_synchronizer(device: torch.device) -> Callable[[], None]:
    """A function that waits for queued kernels on ``device`` (a no-op on the CPU)."""
    if device.type == "cpu":
        return lambda: None
    backend = getattr(torch, device.type)
    return lambda: backend.synchronize(device)


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Autocast to fp16 / bf16 on ``device``; fp32 runs without autocast."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return contextlib.nullcontext()
    if not torch.amp.is_autocast_available(device.type):
        raise DeviceUnavailableError(f"autocast is not available on '{device.type}'")
    return torch.autocast(device_type=device.type, dtype=PRECISIONS[precision])
