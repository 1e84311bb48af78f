"""Devices: which one a call runs on, and its stream.

A device is `cuda:N`, `rocm:N` or `sim:gfx942` / `sim:gfx950` (hkjit's CDNA simulator). Arrays
already on a GPU decide the device; host (NumPy) arrays go to the `device=` keyword, else
HKJIT_DEVICE, else the first GPU found.
"""

import os
import sys

from ..errors import DeviceError, InvalidArgumentError

_devices: dict = {}


def parse(spec: str) -> tuple[str, str]:
    kind, _, rest = str(spec).partition(":")
    if kind in ("cuda", "rocm", "hip"):
        if rest and not rest.isdigit():
            raise InvalidArgumentError(f"device {spec!r}: expected '{kind}:N' with N a device number")
        return ("rocm" if kind == "hip" else kind), (rest or "0")
    if kind == "sim":
        if rest not in ("gfx942", "gfx950"):
            raise InvalidArgumentError(f"device {spec!r}: the simulator runs 'sim:gfx942' or 'sim:gfx950'")
        return "sim", rest
    raise InvalidArgumentError(f"unknown device {spec!r}; use 'cuda:N', 'rocm:N', 'sim:gfx942' or 'sim:gfx950'")


def get(kind: str, index) -> object:
    slot = (kind, str(index))
    dev = _devices.get(slot)
    if dev is None:
        if kind == "cuda":
            from .cuda import CudaDevice
            dev = CudaDevice(int(index))
        elif kind == "rocm":
            from .hip import HipDevice
            dev = HipDevice(int(index))
        elif kind == "sim":
            from .simulated import SimulatedDevice
            dev = SimulatedDevice(str(index))
        else:
            raise DeviceError(f"no backend for device kind {kind!r}")
        _devices[slot] = dev
    return dev


def from_string(spec: str):
    return get(*parse(spec))


def gpu_count(kind: str) -> int:
    try:
        if kind == "cuda":
            from .cuda import device_count
        else:
            from .hip import device_count
        return device_count()
    except Exception:
        return 0


def default_device():
    spec = os.environ.get("HKJIT_DEVICE")
    if spec:
        return from_string(spec)
    for kind in ("cuda", "rocm"):
        if gpu_count(kind):
            return get(kind, 0)
    raise DeviceError("no GPU found (no CUDA or ROCm device is usable here). Pass device='sim:gfx950' "
                      "(or set HKJIT_DEVICE=sim:gfx950) to run on hkjit's CDNA simulator, or use "
                      "hkjit.build(...) to compile without running")


def stream_for(device, framework: str, obj=None) -> int:
    """The caller's current stream: torch's for torch tensors, CuPy's for CuPy arrays, the default
    stream otherwise."""
    if device.kind == "sim":
        return 0
    if framework == "torch":
        return sys.modules["torch"]._C._cuda_getCurrentRawStream(device.index)
    if framework == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0
