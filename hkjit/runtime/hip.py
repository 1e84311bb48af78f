"""AMD backend: hip-python (ROCm, Linux only).

Supported: hip-python 7.2 (ROCm 7.2) and 10.0 (ROCm 10, HIP 7.15), the `rocm` extra's range. Both
are exercised by tests/test_rocm_path.py against tests/hip_standin: stand-ins for libamdhip64.so
and libhiprtc.so with ROCm's ABI, served by hkjit's CDNA simulator. This file has not run on AMD
hardware.

Every call that needs a device makes it current for the call and gives the caller's current
device back afterwards, as torch and CuPy do: code objects belong to the device they were loaded
on, and the null stream is the current device's.
"""

import ctypes
import threading

from ..errors import DeviceError, InvalidImageError, LaunchError
from .. import targets

_hip = None
_SUCCESS = None
_lock = threading.Lock()
# hip_runtime_api.h: HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE, _PARAM_END = 0x01, 0x02, 0x03


def _runtime():
    global _hip, _SUCCESS
    if _hip is None:
        with _lock:
            if _hip is None:
                try:
                    from hip import hip
                except ImportError as e:
                    raise DeviceError("the ROCm backend needs hip-python: pip install 'hkjit[rocm]'") from e
                # hip-python opens libamdhip64.so at its first call, not at import.
                try:
                    hip.hipGetDeviceCount()
                except Exception as e:   # RuntimeError, OSError: whatever hip-python's loader raises
                    raise DeviceError(f"hip-python is installed but the HIP runtime is not ({e}); install ROCm, "
                                      "or point ROCM_PATH (hip-python >= 10) or LD_LIBRARY_PATH at its lib folder"
                                      ) from None
                _SUCCESS = hip.hipError_t.hipSuccess
                _hip = hip
    return _hip


def _text(s) -> str:
    return "" if s is None else s.decode() if hasattr(s, "decode") else str(s)


_HINTS = {"hipErrorOutOfMemory": "; the device is out of memory: free arrays or use smaller shapes",
          "hipErrorNoBinaryForGpu": "; the code object was built for another chip"}


def _check(result, what, error=DeviceError):
    result = result if isinstance(result, tuple) else (result,)
    err = result[0]
    if err != _SUCCESS:
        name = getattr(err, "name", str(err))
        text = _text(_hip.hipGetErrorString(err)[1])
        raise error(f"{what} failed: {name} ({text}){_HINTS.get(name, '')}")
    return result[1] if len(result) == 2 else result[1:]


def _count(hip) -> int:
    err, n = hip.hipGetDeviceCount()
    if err == hip.hipError_t.hipErrorNoDevice:
        return 0
    return _check((err, n), "hipGetDeviceCount")


def device_count() -> int:
    try:
        return _count(_runtime())
    except DeviceError:
        return 0


def _properties(hip, index):
    """hipGetDeviceProperties: hip-python >= 10 returns the struct, 7.x fills one it is given."""
    try:
        return _check(hip.hipGetDeviceProperties(index), "hipGetDeviceProperties")
    except TypeError:
        props = hip.hipDeviceProp_t()
        _check(hip.hipGetDeviceProperties(props, index), "hipGetDeviceProperties")
        return props


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
        dev = self.device
        caller = dev.enter()
        try:
            err, = _hip.hipModuleLaunchKernel(self.function, *grid, *block, smem, stream, None, packed[3])
        finally:
            dev.leave(caller)
        if err != _SUCCESS:
            _check((err,), f"launch of {self.name} on rocm:{dev.index} (grid {grid}, block {block}, {smem} B LDS)",
                   LaunchError)

    def launch(self, grid, block, smem, args, stream=0):
        self.launch_packed(grid, block, smem, self.pack(args), stream)


class HipDevice:
    kind = "rocm"

    def __init__(self, index: int):
        hip = _runtime()
        n = _count(hip)
        if not 0 <= index < n:
            raise DeviceError(f"ROCm device {index} does not exist ({n} present)")
        self.index = index
        props = _properties(hip, index)
        self.name = _text(props.name)
        self.arch_name = _text(props.gcnArchName)
        self.multiprocessors = props.multiProcessorCount
        self.target = targets.from_gcn_arch_name(self.arch_name)

    def __repr__(self):
        return f"rocm:{self.index} ({self.name}, {self.arch_name})"

    def enter(self) -> int:
        """Make this device current; returns the caller's current device, for `leave`."""
        caller = _check(_hip.hipGetDevice(), "hipGetDevice")
        if caller != self.index:
            _check(_hip.hipSetDevice(self.index), "hipSetDevice")
        return caller

    def leave(self, caller: int):
        if caller != self.index:
            _check(_hip.hipSetDevice(caller), "hipSetDevice")

    def load(self, code: bytes, name: str, dynamic_smem: int = 0) -> Kernel:
        caller = self.enter()
        try:
            module = _check(_hip.hipModuleLoadData(code), f"loading the code object of {name} on {self!r}",
                            InvalidImageError)
            function = _check(_hip.hipModuleGetFunction(module, name.encode()), f"finding {name} in its code object",
                              InvalidImageError)
        finally:
            self.leave(caller)
        return Kernel(self, module, function, name)

    def alloc(self, nbytes: int) -> int:
        caller = self.enter()
        try:
            return int(_check(_hip.hipMalloc(max(nbytes, 1)), f"allocating {nbytes} bytes on {self!r}"))
        finally:
            self.leave(caller)

    def free(self, ptr: int):
        caller = self.enter()
        try:
            _check(_hip.hipFree(ptr), "hipFree")
        finally:
            self.leave(caller)

    def copy_in(self, ptr: int, host_ptr: int, nbytes: int):
        caller = self.enter()
        try:
            _check(_hip.hipMemcpy(ptr, host_ptr, nbytes, _hip.hipMemcpyKind.hipMemcpyHostToDevice),
                   f"copy to {self!r}")
        finally:
            self.leave(caller)

    def copy_out(self, host_ptr: int, ptr: int, nbytes: int):
        caller = self.enter()
        try:
            _check(_hip.hipMemcpy(host_ptr, ptr, nbytes, _hip.hipMemcpyKind.hipMemcpyDeviceToHost),
                   f"copy from {self!r}")
        finally:
            self.leave(caller)

    def synchronize(self, stream=0):
        """Wait for the stream; a kernel that failed since the last wait raises LaunchError here."""
        caller = self.enter()
        try:
            _check(_hip.hipStreamSynchronize(stream), f"a kernel launched earlier on {self!r}", LaunchError)
        finally:
            self.leave(caller)
