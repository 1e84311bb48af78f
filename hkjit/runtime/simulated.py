"""`sim:gfx942` / `sim:gfx950`: hkjit's CDNA simulator (hkjit/sim) behind the device interface
every backend offers, so ops run on it exactly as on a GPU: same code objects, same argument
structs, same grids."""

import ctypes

import numpy as np

from .. import targets


class _SimKernelAdapter:
    __slots__ = ("kernel", "name")

    def __init__(self, kernel, name):
        self.kernel, self.name = kernel, name

    @staticmethod
    def pack(args):
        return bytes(args)

    def launch_packed(self, grid, block, smem, packed, stream=0):
        self.kernel.launch(tuple(grid), tuple(block), smem, packed, stream)

    def launch(self, grid, block, smem, args, stream=0):
        self.launch_packed(grid, block, smem, self.pack(args), stream)


def _host_view(host_ptr: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(host_ptr))


class SimulatedDevice:
    kind = "sim"

    def __init__(self, arch: str):
        from ..sim.backend import SimDevice
        self._sim = SimDevice(arch)
        self.index = arch
        self.target = targets.parse(arch)
        self.name = f"hkjit CDNA simulator ({arch})"
        self.multiprocessors = self.target.compute_units
        self._buffers = {}

    def __repr__(self):
        return f"sim:{self.index}"

    def load(self, code: bytes, name: str, dynamic_smem: int = 0):
        return _SimKernelAdapter(self._sim.load(code, name), name)

    def alloc(self, nbytes: int) -> int:
        buf = self._sim.alloc(nbytes)
        self._buffers[buf.ptr] = buf
        return buf.ptr

    def free(self, ptr: int):
        self._sim.free(self._buffers.pop(ptr))

    def copy_in(self, ptr: int, host_ptr: int, nbytes: int):
        self._sim.copy_in(self._buffers[ptr], _host_view(host_ptr, nbytes))

    def copy_out(self, host_ptr: int, ptr: int, nbytes: int):
        self._sim.copy_out(self._buffers[ptr], _host_view(host_ptr, nbytes))

    def synchronize(self, stream=0):
        pass  # the simulator runs each launch to completion
