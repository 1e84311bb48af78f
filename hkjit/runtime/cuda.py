"""NVIDIA backend: the CUDA driver API (libcuda) through ctypes.

Modules load into each device's primary context, the one torch, CuPy and JAX use, so pointers
and streams from those frameworks are valid here. Launches pass one pre-packed argument struct.

Why ctypes and not cuda-bindings: the driver module of cuda-bindings takes ~34 ms to import, most
of a warm start, and the dozen calls made here need nothing it adds. cuda-bindings is still what
NVRTC comes from (hkjit/compiler.py), so a cold compile imports it; a run from the cache does not.
The native repeat-call path (hkjit/native) calls the same libcuda functions, by address.
"""

from __future__ import annotations

import ctypes
import os

from ..errors import DeviceError, InvalidArgumentError, InvalidImageError, LaunchError
from .. import targets

_lib = None
_P = ctypes.c_void_p
_u32, _u64, _i32 = ctypes.c_uint, ctypes.c_uint64, ctypes.c_int

# CUresult and enum values from cuda.h (stable ABI since CUDA 12.0; tests compare them with
# cuda-bindings' enums where both are present).
CUDA_SUCCESS = 0
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_CC_MAJOR, ATTR_CC_MINOR = 75, 76
ATTR_MAX_SMEM_OPTIN = 97
FUNC_ATTR_MAX_DYNAMIC_SMEM = 8
TMAP_FLOAT16, TMAP_BFLOAT16 = 6, 9
TMAP_L2_PROMOTION_256B = 3

# (name in libcuda, argument types). Names with _v2 are what cuda.h's macros map the plain names
# to; the unsuffixed symbols are the 32-bit-size ABI kept for old binaries.
_SIGNATURES = {
    "cuInit": (_u32,),
    "cuDeviceGetCount": (ctypes.POINTER(_i32),),
    "cuDeviceGet": (ctypes.POINTER(_i32), _i32),
    "cuDeviceGetAttribute": (ctypes.POINTER(_i32), _i32, _i32),
    "cuDeviceGetName": (ctypes.c_char_p, _i32, _i32),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(_P), _i32),
    "cuCtxGetCurrent": (ctypes.POINTER(_P),),
    "cuCtxSetCurrent": (_P,),
    "cuModuleLoadData": (ctypes.POINTER(_P), ctypes.c_char_p),
    "cuModuleGetFunction": (ctypes.POINTER(_P), _P, ctypes.c_char_p),
    "cuFuncSetAttribute": (_P, _i32, _i32),
    "cuLaunchKernel": (_P, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _P, _P, _P),
    "cuMemAlloc_v2": (ctypes.POINTER(_u64), ctypes.c_size_t),
    "cuMemFree_v2": (_u64,),
    "cuMemcpyHtoD_v2": (_u64, _P, ctypes.c_size_t),
    "cuMemcpyDtoH_v2": (_P, _u64, ctypes.c_size_t),
    "cuStreamSynchronize": (_P,),
    "cuGetErrorName": (_i32, ctypes.POINTER(ctypes.c_char_p)),
    "cuGetErrorString": (_i32, ctypes.POINTER(ctypes.c_char_p)),
    "cuTensorMapEncodeTiled": (_P, _i32, _u32, _P, ctypes.POINTER(_u64), ctypes.POINTER(_u64),
                               ctypes.POINTER(_u32), ctypes.POINTER(_u32), _i32, _i32, _i32, _i32),
    "cuTensorMapReplaceAddress": (_P, _P),
    "cuStreamIsCapturing": (_P, ctypes.POINTER(_i32)),
    "cuMemsetD8Async": (_u64, ctypes.c_ubyte, ctypes.c_size_t, _P),
}


def _load():
    name = "nvcuda.dll" if os.name == "nt" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        raise DeviceError(f"no NVIDIA driver here ({name}: {e}); install the NVIDIA driver, or run on another "
                          "device (device='sim:gfx950', HKJIT_DEVICE)") from None
    for fn, argtypes in _SIGNATURES.items():
        f = getattr(lib, fn, None)
        if f is None:
            if fn.startswith("cuTensorMap"):
                continue           # drivers before CUDA 12 have none; only TMA kernels need them
            raise DeviceError(f"{name} has no {fn}: the NVIDIA driver is too old for hkjit (CUDA 12 or newer)")
        f.argtypes, f.restype = argtypes, _i32
    return lib


def _driver():
    global _lib
    if _lib is None:
        lib = _load()
        err = lib.cuInit(0)
        if err != CUDA_SUCCESS:
            raise DeviceError(f"cuInit failed ({error_name(err, lib)}): no usable NVIDIA driver or GPU")
        _lib = lib
    return _lib


def error_name(err: int, lib=None) -> str:
    s = ctypes.c_char_p()
    if (lib or _lib).cuGetErrorName(err, ctypes.byref(s)) != CUDA_SUCCESS or not s.value:
        return f"CUresult {err}"
    return s.value.decode()


def _error_text(err: int) -> str:
    s = ctypes.c_char_p()
    if _lib.cuGetErrorString(err, ctypes.byref(s)) != CUDA_SUCCESS or not s.value:
        return "no description"
    return s.value.decode()


def _check(err: int, what: str, error=DeviceError) -> None:
    if err != CUDA_SUCCESS:
        raise error(f"{what} failed: {error_name(err)} ({_error_text(err)})")


def device_count() -> int:
    try:
        lib = _driver()
    except DeviceError:
        return 0
    n = _i32()
    _check(lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    return n.value


def function_addresses() -> dict:
    """Addresses of the driver functions the native repeat path calls (the same library, so the
    same contexts and modules as this backend)."""
    lib = _driver()
    return {name: ctypes.cast(getattr(lib, name), _P).value
            for name in ("cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent", "cuGetErrorName",
                         "cuGetErrorString", "cuTensorMapReplaceAddress", "cuMemsetD8Async") if hasattr(lib, name)}


def encode_tensor_map(data_type: int, ptr: int, dims: tuple, strides_bytes: tuple, box: tuple,
                      swizzle: int) -> bytes:
    """The 128-byte CUtensorMap of a tiled view (dims and box innermost first, strides of the
    outer dimensions in bytes; element strides 1, no interleave, 256-byte L2 promotion, no OOB fill)."""
    lib = _driver()
    if not hasattr(lib, "cuTensorMapEncodeTiled"):
        raise DeviceError("this NVIDIA driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 or newer)")
    rank = len(dims)
    tmap = (ctypes.c_uint64 * 16)()
    err = lib.cuTensorMapEncodeTiled(tmap, data_type, rank, ptr, (_u64 * rank)(*dims),
                                     (_u64 * max(1, rank - 1))(*strides_bytes), (_u32 * rank)(*box),
                                     (_u32 * rank)(*([1] * rank)), 0, swizzle, TMAP_L2_PROMOTION_256B, 0)
    if err != CUDA_SUCCESS:
        raise InvalidArgumentError(f"cuTensorMapEncodeTiled failed ({error_name(err)}) for dims={dims} "
                                   f"strides={strides_bytes} box={box}")
    return bytes(tmap)


def replace_tensor_map_address(blob: bytearray, offset: int, ptr: int) -> None:
    """Point the CUtensorMap at `blob[offset:offset + 128]` at `ptr` (cuTensorMapReplaceAddress)."""
    lib = _driver()
    scratch = (ctypes.c_uint64 * 24)()                  # a CUtensorMap is 64-byte aligned
    at = (ctypes.addressof(scratch) + 63) & ~63
    ctypes.memmove(at, bytes(blob[offset:offset + 128]), 128)
    _check(lib.cuTensorMapReplaceAddress(at, ptr), "cuTensorMapReplaceAddress", InvalidArgumentError)
    blob[offset:offset + 128] = ctypes.string_at(at, 128)


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
        self.device.make_current()
        err = _lib.cuLaunchKernel(self.function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                  smem, stream, packed[2], None)
        if err != CUDA_SUCCESS:
            _check(err, f"launch of {self.name} (grid {grid}, block {block}, {smem} B shared)", LaunchError)

    def launch(self, grid, block, smem, args, stream=0):
        self.launch_packed(grid, block, smem, self.pack(args), stream)


class CudaDevice:
    kind = "cuda"

    def __init__(self, index: int):
        lib = _driver()
        n = device_count()
        if not 0 <= index < n:
            raise DeviceError(f"CUDA device {index} does not exist ({n} present)")
        self.index = index
        handle = _i32()
        _check(lib.cuDeviceGet(ctypes.byref(handle), index), "cuDeviceGet")
        self.handle = handle.value
        ctx = _P()
        _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.handle), "cuDevicePrimaryCtxRetain")
        self.context = ctx.value
        self.capability = (self._attribute(ATTR_CC_MAJOR), self._attribute(ATTR_CC_MINOR))
        self.multiprocessors = self._attribute(ATTR_MULTIPROCESSOR_COUNT)
        self.max_smem_optin = self._attribute(ATTR_MAX_SMEM_OPTIN)
        name = ctypes.create_string_buffer(256)
        _check(lib.cuDeviceGetName(name, 256, self.handle), "cuDeviceGetName")
        self.name = name.value.decode()
        self._target = None

    def _attribute(self, attr: int) -> int:
        v = _i32()
        _check(_lib.cuDeviceGetAttribute(ctypes.byref(v), attr, self.handle), "cuDeviceGetAttribute")
        return v.value

    @property
    def target(self):
        if self._target is None:
            self._target = targets.from_compute_capability(*self.capability)
        return self._target

    def __repr__(self):
        return f"cuda:{self.index} ({self.name}, sm_{self.capability[0]}{self.capability[1]})"

    def make_current(self):
        # The driver is asked every time (a few ns there): torch, other libraries and hkjit's native
        # path all switch contexts on this thread, so a memo of our own would go stale.
        cur = _P()
        _lib.cuCtxGetCurrent(ctypes.byref(cur))
        if cur.value != self.context:
            _check(_lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def load(self, code: bytes, name: str, dynamic_smem: int = 0) -> Kernel:
        self.make_current()
        module, function = _P(), _P()
        _check(_lib.cuModuleLoadData(ctypes.byref(module), code), f"loading the code object of {name}",
               InvalidImageError)
        _check(_lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()), f"finding {name}",
               InvalidImageError)
        if dynamic_smem > 48 * 1024:
            if dynamic_smem > self.max_smem_optin:
                raise LaunchError(f"{name} needs {dynamic_smem} B of shared memory; {self!r} allows "
                                  f"{self.max_smem_optin} B per block")
            _check(_lib.cuFuncSetAttribute(function, FUNC_ATTR_MAX_DYNAMIC_SMEM, dynamic_smem),
                   "raising the dynamic shared memory limit")
        return Kernel(self, module.value, function.value, name)

    # --- memory, for host (NumPy) inputs -------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.make_current()
        ptr = _u64()
        _check(_lib.cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 1)), f"allocating {nbytes} bytes")
        return ptr.value

    def free(self, ptr: int):
        self.make_current()
        _check(_lib.cuMemFree_v2(ptr), "cuMemFree")

    def copy_in(self, ptr: int, host_ptr: int, nbytes: int):
        self.make_current()
        _check(_lib.cuMemcpyHtoD_v2(ptr, host_ptr, nbytes), "copy to device")

    def copy_out(self, host_ptr: int, ptr: int, nbytes: int):
        self.make_current()
        _check(_lib.cuMemcpyDtoH_v2(host_ptr, ptr, nbytes), "copy from device")

    def synchronize(self, stream=0):
        self.make_current()
        _check(_lib.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def is_capturing(self, stream) -> bool:
        """Whether `stream` is capturing a CUDA graph (cuStreamIsCapturing; stream 0 is the legacy
        default stream, which capture never records)."""
        if not stream:
            return False
        self.make_current()
        status = _i32()
        _check(_lib.cuStreamIsCapturing(stream, ctypes.byref(status)), "cuStreamIsCapturing")
        return status.value != 0
