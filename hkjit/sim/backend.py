"""The `sim:gfx942` / `sim:gfx950` runtime device: the interface every hkjit runtime backend
implements (alloc / free / copy_in / copy_out / load / launch), with host memory as device memory."""

import os

import numpy as np

from .. import targets
from .errors import SimError
from .loader import CodeObject
from .machine import Machine
from .memory import Memory


def checks_default():
    """Hazard checks are on unless HKJIT_SIM_CHECKS=0."""
    return os.environ.get("HKJIT_SIM_CHECKS", "1") not in ("0", "false", "no", "off")


class SimBuffer:
    __slots__ = ("ptr", "nbytes", "_alloc")

    def __init__(self, alloc):
        self._alloc = alloc
        self.ptr = alloc.base
        self.nbytes = alloc.nbytes

    def __repr__(self):
        return f"SimBuffer(ptr={self.ptr:#x}, nbytes={self.nbytes})"


class SimKernel:
    def __init__(self, device, kernel, checks):
        self.device = device
        self.name = kernel.name
        self.kernel = kernel
        self.machine = Machine(kernel, device.target.arch, device.memory, checks)

    @property
    def checks(self):
        return self.machine.checks

    @checks.setter
    def checks(self, on):
        self.machine.checks = bool(on)
        self.machine.blocks.clear()   # compiled blocks embed the choice

    @property
    def wave_instructions(self):
        """Wave-instructions executed by this kernel's launches so far."""
        return self.machine.winst

    def launch(self, grid, block, dynamic_smem=0, args=b"", stream=None):
        self.machine.launch(grid, block, dynamic_smem, bytes(args))


class SimDevice:
    """A simulated CDNA device. `SimDevice("gfx950")` or `SimDevice("sim:gfx942")`."""

    def __init__(self, target="gfx950", checks=None):
        if isinstance(target, str) and target.startswith("sim:"):
            target = target[4:]
        self.target = targets.parse(target)
        if self.target.arch not in ("gfx942", "gfx950"):
            raise SimError(f"the simulator runs gfx942 and gfx950 code, not {self.target.arch}")
        self.memory = Memory()
        self.checks = checks_default() if checks is None else bool(checks)

    @property
    def name(self):
        return f"sim:{self.target.arch}"

    def __repr__(self):
        return f"SimDevice({self.name!r})"

    def alloc(self, nbytes) -> SimBuffer:
        return SimBuffer(self.memory.alloc(int(nbytes)))

    def free(self, buf) -> None:
        self.memory.free(buf._alloc)

    def _bytes(self, buf, host, what):
        if buf._alloc.freed:
            raise SimError(f"{what} of a freed buffer")
        n = host.nbytes
        if n > buf.nbytes:
            raise SimError(f"{what} of {n} bytes into a {buf.nbytes}-byte buffer")
        return n

    def copy_in(self, buf, host) -> None:
        host = np.ascontiguousarray(host)
        n = self._bytes(buf, host, "copy_in")
        buf._alloc.u8[:n] = host.reshape(-1).view(np.uint8)

    def copy_out(self, buf, host) -> None:
        if not host.flags.c_contiguous:
            raise SimError("copy_out needs a C-contiguous host array")
        n = self._bytes(buf, host, "copy_out")
        host.reshape(-1).view(np.uint8)[:] = buf._alloc.u8[:n]

    def load(self, code: bytes, name: str) -> SimKernel:
        co = CodeObject(code)
        tgt = co.metadata.get("amdhsa.target", "")
        arch = tgt.rsplit("-", 1)[-1].split(":")[0] if tgt else ""
        if arch and arch != self.target.arch:
            raise SimError(f"code object is for {arch}, this device is {self.name}", kernel=name)
        return SimKernel(self, co.kernel(name), self.checks)


_DEVICES = {}


def device(name) -> SimDevice:
    """The process-wide simulated device of a name such as 'sim:gfx950' (one memory space each)."""
    key = name if name.startswith("sim:") else "sim:" + name
    if key not in _DEVICES:
        _DEVICES[key] = SimDevice(key)
    return _DEVICES[key]
