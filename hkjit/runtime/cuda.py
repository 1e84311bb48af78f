"""NVIDIA backend: cuda-python's driver API (cuda.bindings.driver).

Modules load into each device's primary context, the one torch, CuPy and JAX use, so pointers
and streams from those frameworks are valid here. Launches pass one pre-packed argument struct.
"""

import ctypes
import threading

from ..errors import DeviceError, InvalidImageError, LaunchError
from .. import targets

_cu = None
_SUCCESS = None
_tls = threading.local()


def _driver():
    global _cu
    if _cu is None:
        try:
            from cuda.bindings import driver
        except ImportError as e:
            raise DeviceError("the CUDA backend needs cuda-python: pip install 'hkjit[cuda]'") from e
        try:
            err, = driver.cuInit(0)
        except Exception as e:   # cuda-python opens libcuda.so at the first call (pathfinder's own error types)
            raise DeviceError(f"no NVIDIA driver here ({type(e).__name__}: {e}); install the NVIDIA driver, "
                              "or run on another device (device='sim:gfx950', HKJIT_DEVICE)") from None
        if err != driver.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"cuInit failed ({err.name}): no usable NVIDIA driver or GPU")
        _cu = driver
        global _SUCCESS
        _SUCCESS = driver.CUresult.CUDA_SUCCESS
    return _cu


def _check(result, what, error=DeviceError):
    err = result[0]
    if err != _cu.CUresult.CUDA_SUCCESS:
        _, text = _cu.cuGetErrorString(err)
        raise error(f"{what} failed: {err.name} ({text.decode() if text else 'no description'})")
    return result[1] if len(result) == 2 else result[1:]


def device_count() -> int:
    try:
        cu = _driver()
    except DeviceError:
        return 0
    return _check(cu.cuDeviceGetCount(), "cuDeviceGetCount")


class Kernel:
    __slots__ = ("device", "name", "function", "module")

    def __init__(self, device, module, function, name):
        self.device, self.module, self.function, self.name = device, module, function, name

    @staticmethod
    def pack(args):
        """A reusable launch block for `args` (a ctypes.Structure mirroring the kernel's single
        `args` parameter): the struct, the void*[1] pointing at it, and that array's address."""
        params = (ctypes.c_void_p * 1)(ctypes.addressof(args))
        return (args, params, ctypes.addressof(params))

    def launch_packed(self, grid, block, smem, packed, stream=0):
        if _tls.__dict__.get("context") is not self.device.context:
            self.device.make_current()
        err, = _cu.cuLaunchKernel(self.function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                  smem, stream, packed[2], 0)
        if err != _SUCCESS:
            _check((err,), f"launch of {self.name} (grid {grid}, block {block}, {smem} B shared)", LaunchError)

    def launch(self, grid, block, smem, args, stream=0):
        self.launch_packed(grid, block, smem, self.pack(args), stream)


class CudaDevice:
    kind = "cuda"

    def __init__(self, index: int):
        cu = _driver()
        n = device_count()
        if not 0 <= index < n:
            raise DeviceError(f"CUDA device {index} does not exist ({n} present)")
        self.index = index
        self.handle = _check(cu.cuDeviceGet(index), "cuDeviceGet")
        self.context = _check(cu.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        attr = cu.CUdevice_attribute
        get = lambda a: _check(cu.cuDeviceGetAttribute(a, self.handle), "cuDeviceGetAttribute")
        self.capability = (get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                           get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.multiprocessors = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_smem_optin = get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.name = _check(cu.cuDeviceGetName(256, self.handle), "cuDeviceGetName").split(b"\0")[0].decode()
        self._target = None

    @property
    def target(self):
        if self._target is None:
            self._target = targets.from_compute_capability(*self.capability)
        return self._target

    def __repr__(self):
        return f"cuda:{self.index} ({self.name}, sm_{self.capability[0]}{self.capability[1]})"

    def make_current(self):
        if getattr(_tls, "context", None) is not self.context:
            _check(_cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            _tls.context = self.context

    def load(self, code: bytes, name: str, dynamic_smem: int = 0) -> Kernel:
        self.make_current()
        module = _check(_cu.cuModuleLoadData(code), f"loading the code object of {name}", InvalidImageError)
        function = _check(_cu.cuModuleGetFunction(module, name.encode()), f"finding {name}", InvalidImageError)
        if dynamic_smem > 48 * 1024:
            if dynamic_smem > self.max_smem_optin:
                raise LaunchError(f"{name} needs {dynamic_smem} B of shared memory; {self!r} allows "
                                  f"{self.max_smem_optin} B per block")
            _check(_cu.cuFuncSetAttribute(
                function, _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_smem),
                "raising the dynamic shared memory limit")
        return Kernel(self, module, function, name)

    # --- memory, for host (NumPy) inputs -------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.make_current()
        return int(_check(_cu.cuMemAlloc(max(nbytes, 1)), f"allocating {nbytes} bytes"))

    def free(self, ptr: int):
        self.make_current()
        _check(_cu.cuMemFree(ptr), "cuMemFree")

    def copy_in(self, ptr: int, host_ptr: int, nbytes: int):
        self.make_current()
        _check(_cu.cuMemcpyHtoD(ptr, host_ptr, nbytes), "copy to device")

    def copy_out(self, host_ptr: int, ptr: int, nbytes: int):
        self.make_current()
        _check(_cu.cuMemcpyDtoH(host_ptr, ptr, nbytes), "copy from device")

    def synchronize(self, stream=0):
        self.make_current()
        _check(_cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
