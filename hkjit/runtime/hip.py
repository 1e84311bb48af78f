"""AMD backend: hip-python (ROCm, Linux only).

Written against hip-python's documented API and kept thin on purpose: no AMD GPU exists where
hkjit is developed, so this file has never been executed on AMD hardware. Everything it relies
on above the driver calls (specialisation, compilation, cache, argument packing) is shared with
the CUDA and simulator paths, which are tested.
"""

import ctypes
import threading

from ..errors import DeviceError, InvalidImageError, LaunchError
from .. import targets

_hip = None
_tls = threading.local()
# hip_runtime_api.h: HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE, _PARAM_END = 0x01, 0x02, 0x03


def _runtime():
    global _hip
    if _hip is None:
        try:
            from hip import hip
        except ImportError as e:
            raise DeviceError("the ROCm backend needs hip-python: pip install 'hkjit[rocm]'") from e
        _hip = hip
    return _hip


def _check(result, what, error=DeviceError):
    result = result if isinstance(result, tuple) else (result,)
    err = result[0]
    if err != _hip.hipError_t.hipSuccess:
        raise error(f"{what} failed: {getattr(err, 'name', err)}")
    return result[1] if len(result) == 2 else result[1:]


def device_count() -> int:
    try:
        hip = _runtime()
        return _check(hip.hipGetDeviceCount(), "hipGetDeviceCount")
    except DeviceError:
        return 0


class Kernel:
    __slots__ = ("device", "name", "function", "module")

    def __init__(self, device, module, function, name):
        self.device, self.module, self.function, self.name = device, module, function, name

    @staticmethod
    def pack(args):
        """The kernel's argument bytes (a ctypes.Structure) behind a HIP `extra` block
        (HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END), built once and reused per call."""
        size = ctypes.c_size_t(ctypes.sizeof(args))
        extra = (ctypes.c_void_p * 5)(_PARAM_BUFFER_POINTER, ctypes.addressof(args),
                                      _PARAM_BUFFER_SIZE, ctypes.addressof(size), _PARAM_END)
        return (args, size, extra, ctypes.addressof(extra))

    def launch_packed(self, grid, block, smem, packed, stream=0):
        self.device.make_current()
        _check(_hip.hipModuleLaunchKernel(self.function, *grid, *block, smem, stream, None, packed[3]),
               f"launch of {self.name} (grid {grid}, block {block})", LaunchError)

    def launch(self, grid, block, smem, args, stream=0):
        self.launch_packed(grid, block, smem, self.pack(args), stream)


class HipDevice:
    kind = "rocm"

    def __init__(self, index: int):
        hip = _runtime()
        n = device_count()
        if not 0 <= index < n:
            raise DeviceError(f"ROCm device {index} does not exist ({n} present)")
        self.index = index
        props = hip.hipDeviceProp_t()
        _check(hip.hipGetDeviceProperties(props, index), "hipGetDeviceProperties")
        self.name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
        arch = props.gcnArchName
        self.arch_name = arch.decode() if isinstance(arch, bytes) else str(arch)
        self.multiprocessors = props.multiProcessorCount
        self.target = targets.from_gcn_arch_name(self.arch_name)

    def __repr__(self):
        return f"rocm:{self.index} ({self.name}, {self.arch_name})"

    def make_current(self):
        if getattr(_tls, "device", None) != self.index:
            _check(_hip.hipSetDevice(self.index), "hipSetDevice")
            _tls.device = self.index

    def load(self, code: bytes, name: str, dynamic_smem: int = 0) -> Kernel:
        self.make_current()
        module = _check(_hip.hipModuleLoadData(code), f"loading the code object of {name}", InvalidImageError)
        function = _check(_hip.hipModuleGetFunction(module, name.encode()), f"finding {name}", InvalidImageError)
        return Kernel(self, module, function, name)

    def alloc(self, nbytes: int) -> int:
        self.make_current()
        return int(_check(_hip.hipMalloc(max(nbytes, 1)), f"allocating {nbytes} bytes"))

    def free(self, ptr: int):
        _check(_hip.hipFree(ptr), "hipFree")

    def copy_in(self, ptr: int, host_ptr: int, nbytes: int):
        _check(_hip.hipMemcpy(ptr, host_ptr, nbytes, _hip.hipMemcpyKind.hipMemcpyHostToDevice), "copy to device")

    def copy_out(self, host_ptr: int, ptr: int, nbytes: int):
        _check(_hip.hipMemcpy(host_ptr, ptr, nbytes, _hip.hipMemcpyKind.hipMemcpyDeviceToHost), "copy from device")

    def synchronize(self, stream=0):
        _check(_hip.hipStreamSynchronize(stream), "hipStreamSynchronize")
