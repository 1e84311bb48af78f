"""Arrays in, arrays out: what an input array is (pointer, shape, strides, dtype, device) and how
a result goes back to the caller as their own framework's type.

torch, CuPy, NumPy and JAX are read through their own attributes (a fraction of a µs; DLPack
export alone costs ~2.5 µs on torch); any other object is read through its DLPack capsule.
Frameworks are never imported by hkjit: an object is recognised by the module that made it.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from . import dtypes
from .dtypes import DType
from .errors import UnsupportedArrayError
from .values import Mutable

# DLPack device types
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_ROCM, DL_CUDA_MANAGED = 1, 2, 3, 10, 13
_DEVICE_KIND = {DL_CPU: "cpu", DL_CUDA_HOST: "cpu", DL_CUDA: "cuda", DL_CUDA_MANAGED: "cuda", DL_ROCM: "rocm"}


class Array(Mutable):
    """An array as hkjit reads it: `ptr` (the address of element [0, 0, ...], byte offset
    applied), `shape`, `strides` (in elements), `dtype`, `device` ("cpu", "cuda", "rocm") and its
    `index` (ordinal), `framework` ("torch", "cupy", "jax", "numpy", "dlpack") and `obj`, the
    caller's object (kept alive while in use; also the capsule for "dlpack")."""
    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "index", "framework", "obj")

    def __init__(self, ptr: int, shape: tuple, strides: tuple, dtype: DType, device: str, index: int,
                 framework: str, obj: Any):
        self.ptr, self.shape, self.strides, self.dtype = ptr, shape, strides, dtype
        self.device, self.index, self.framework, self.obj = device, index, framework, obj

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def caller_object(self):
        """The object the caller passed (for DLPack reads `obj` also holds the capsule)."""
        return self.obj[0] if self.framework == "dlpack" else self.obj


_dtype_memo: dict = {}


def _dtype_of(framework_dtype) -> DType:
    """Canonical dtype of a framework dtype object, memoised (str() of a dtype costs ~1 µs)."""
    d = _dtype_memo.get(framework_dtype)
    if d is None:
        d = _dtype_memo[framework_dtype] = dtypes.dtype(framework_dtype)
    return d


def _torch_array(t) -> Array:
    index = t.get_device()  # -1 on the CPU; cheaper than building a torch.device
    # Meta tensors (no storage: data_ptr() is 0), and tensors on devices hkjit cannot address (MPS,
    # XPU, ...) or without a strided layout (sparse), would otherwise be read as memory at a bogus
    # address.
    if not (t.is_cpu if index < 0 else t.is_cuda) or t.layout is not sys.modules["torch"].strided:
        raise UnsupportedArrayError(
            f"a torch tensor on {t.device} with layout {t.layout} has no memory hkjit can read or write"
            + (" (meta tensors carry no data)" if t.is_meta else "")
            + "; pass a dense (strided) tensor on the CPU or a CUDA/ROCm GPU")
    kind = "cpu" if index < 0 else _torch_gpu_kind()
    return Array(t.data_ptr(), tuple(t.shape), t.stride(), _dtype_of(t.dtype), kind, max(index, 0), "torch", t)


_gpu_kind = None


def _torch_gpu_kind() -> str:
    global _gpu_kind
    if _gpu_kind is None:
        _gpu_kind = "rocm" if getattr(sys.modules["torch"].version, "hip", None) else "cuda"
    return _gpu_kind


def _cupy_array(a) -> Array:
    item = a.itemsize
    if any(s % item for s in a.strides):
        raise UnsupportedArrayError("CuPy array strides are not whole elements; make it contiguous")
    kind = "rocm" if getattr(sys.modules["cupy"].cuda.runtime, "is_hip", False) else "cuda"
    return Array(a.data.ptr, tuple(a.shape), tuple(s // item for s in a.strides), dtypes.dtype(a.dtype.name),
                 kind, a.device.id, "cupy", a)


def _numpy_array(a) -> Array:
    item = a.itemsize
    if any(s % item for s in a.strides):
        raise UnsupportedArrayError("NumPy array strides are not whole elements; use np.ascontiguousarray")
    return Array(a.ctypes.data, tuple(a.shape), tuple(s // item for s in a.strides), dtypes.dtype(a.dtype.name),
                 "cpu", 0, "numpy", a)


def _jax_array(a) -> Array:
    devices = list(a.devices())
    if len(devices) != 1:
        raise UnsupportedArrayError("JAX arrays sharded over several devices are not supported; pass one shard")
    dev = devices[0]
    a.block_until_ready()  # JAX work is asynchronous and on JAX's own streams
    if dev.platform == "cpu":
        return describe_dlpack(a, framework="jax")
    kind = "rocm" if dev.platform == "rocm" else "cuda"
    # JAX arrays are dense row-major buffers.
    shape = tuple(a.shape)
    return Array(a.unsafe_buffer_pointer(), shape, contiguous_strides(shape), dtypes.dtype(a.dtype.name),
                 kind, dev.local_hardware_id if dev.local_hardware_id is not None else dev.id, "jax", a)


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


_READERS = {"torch": _torch_array, "cupy": _cupy_array, "numpy": _numpy_array,
            "jaxlib": _jax_array, "jax": _jax_array}


def describe(obj) -> Array:
    """The Array behind any supported array object."""
    if isinstance(obj, Array):
        return obj
    root = type(obj).__module__.partition(".")[0]
    reader = _READERS.get(root)
    if reader is not None:
        return reader(obj)
    if hasattr(obj, "__dlpack__"):
        return describe_dlpack(obj)
    raise UnsupportedArrayError(f"{type(obj).__name__} is not an array hkjit can read: pass a torch tensor, "
                                "CuPy, JAX or NumPy array, or any object with __dlpack__/__dlpack_device__")


# --- DLPack capsules, read with ctypes ---------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _export(obj):
    """The object's capsule, asking for a versioned (DLPack >= 1.0) one where it is understood."""
    try:
        return obj.__dlpack__(max_version=(1, 0))
    except TypeError:
        return obj.__dlpack__()


def read_capsule(capsule) -> tuple[_DLTensor, bool]:
    """(DLTensor, read_only) of a capsule we do not consume: the producer's capsule destructor
    still owns the memory, so the capsule must be kept alive as long as the pointer is used."""
    if _capsule_valid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
        return managed.dl_tensor, bool(managed.flags & 1)
    if _capsule_valid(capsule, b"dltensor"):
        return _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor")), False
    raise UnsupportedArrayError("object's __dlpack__ returned no valid DLPack capsule (already consumed?)")


def describe_dlpack(obj, framework="dlpack") -> Array:
    capsule = obj if type(obj).__name__ == "PyCapsule" else _export(obj)
    t, _read_only = read_capsule(capsule)
    kind = _DEVICE_KIND.get(t.device.device_type)
    if kind is None:
        raise UnsupportedArrayError(f"DLPack device type {t.device.device_type} is not supported "
                                    "(hkjit reads CPU, CUDA and ROCm memory)")
    dt = dtypes.from_dlpack_code(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else contiguous_strides(shape)
    return Array((t.data or 0) + t.byte_offset, shape, strides, dt, kind, t.device.device_id, framework,
                 (obj, capsule))


# --- results in the caller's framework ----------------------------------------------------------
def numpy_dtype(dt: DType):
    import numpy as np
    if dt.numpy is not None:
        return np.dtype(dt.numpy)
    try:
        import ml_dtypes  # NumPy has no bfloat16; ml_dtypes (a JAX dependency) provides one
        return np.dtype(getattr(ml_dtypes, dt.name))
    except (ImportError, AttributeError):
        raise UnsupportedArrayError(f"NumPy has no {dt.name} dtype; pip install ml_dtypes, or ask for "
                                    "out_dtype='float32'") from None


def empty(template: Array, shape, dt: DType):
    """A new uninitialised array of `template`'s framework, on its device."""
    fw = template.framework
    if fw == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, dt.name), device=template.obj.device)
    if fw == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(template.index):
            return cupy.empty(shape, dtype=numpy_dtype(dt))
    if fw == "jax":
        jax = sys.modules["jax"]
        out = jax.numpy.empty(shape, dtype=numpy_dtype(dt), device=next(iter(template.obj.devices())))
        return out.block_until_ready()
    if fw == "numpy":
        import numpy as np
        return np.empty(shape, dtype=numpy_dtype(dt))
    torch = sys.modules.get("torch")
    gpu_torch = torch is not None and torch.cuda.is_available() and (
        bool(getattr(torch.version, "hip", None)) == (template.device == "rocm"))
    if gpu_torch and template.device in ("cuda", "rocm"):
        return torch.empty(shape, dtype=getattr(torch, dt.name), device=f"cuda:{template.index}")
    raise UnsupportedArrayError(f"hkjit cannot allocate a result for {type(template.obj[0]).__name__} arrays; "
                                "pass out= (any DLPack array) to receive the result")


def dense_host_copy(arr: Array, layout: str, pad_to: int = 1):
    """(keep-alive object, pointer, bytes, leading dimension) of a host copy of `arr` holding its
    elements densely in its own layout ('row' or 'col'), the leading dimension rounded up to a
    multiple of `pad_to` elements; no copy when `arr` already is so."""
    if arr.ndim == 1:
        pad_to = 1
    if arr.framework == "torch":
        t = arr.obj
        if t.ndim == 2 and layout == "col":
            dense, ld = _padded_rows(t.t(), pad_to)
            dense = dense.t()
        elif t.ndim == 2:
            dense, ld = _padded_rows(t, pad_to)
        else:
            dense, ld = t.contiguous(), 1
        return dense, dense.data_ptr(), _span_bytes(t.shape, ld, layout, t.element_size()), ld
    import numpy as np
    host = arr.obj if arr.framework == "numpy" else np.from_dlpack(arr.obj[0])
    if host.ndim == 2 and layout == "col":
        rows_major, ld = _padded_rows(host.T, pad_to)
        dense = rows_major.T
    elif host.ndim == 2:
        dense, ld = _padded_rows(host, pad_to)
    else:
        dense, ld = np.ascontiguousarray(host), 1
    return dense, dense.ctypes.data, _span_bytes(host.shape, ld, layout, host.itemsize), ld


def _span_bytes(shape, ld, layout, itemsize):
    """Bytes from the first to one past the last element of a dense (padded) 2-D layout, or of a
    dense array of any other rank."""
    if len(shape) != 2:
        n = 1
        for d in shape:
            n *= d
        return n * itemsize
    rows, cols = shape
    outer, inner = (cols, rows) if layout == "col" else (rows, cols)
    return ((outer - 1) * ld + inner) * itemsize


def _padded_rows(x, pad_to):
    """x (rows, cols) as a row-major array whose row stride is cols rounded up to pad_to: returns
    (a view of shape (rows, cols) into that storage, leading dimension)."""
    rows, cols = x.shape
    ld = -(-cols // pad_to) * pad_to
    if type(x).__module__.startswith("torch"):
        if x.stride() == (ld, 1) or (ld == cols and x.is_contiguous()):
            return x, ld
        torch = sys.modules["torch"]
        store = torch.zeros((rows, ld), dtype=x.dtype)
        store[:, :cols] = x
        return store[:, :cols], ld
    import numpy as np
    if x.flags.c_contiguous and ld == cols:
        return x, ld
    store = np.zeros((rows, ld), dtype=x.dtype)
    store[:, :cols] = x
    return store[:, :cols], ld


def aligned_copy(arr: Array):
    """A torch copy of `arr` in its own layout with 16-byte-aligned rows (for AMD operands whose
    strides direct-to-LDS loads cannot follow)."""
    t = arr.obj
    col = t.ndim == 2 and t.stride(0) == 1 and t.shape[1] > 1
    src = t.t() if col else t
    rows, cols = src.shape
    ld = -(-cols // 8) * 8
    store = sys.modules["torch"].empty((rows, ld), dtype=t.dtype, device=t.device)
    store[:, :cols] = src
    view = store[:, :cols]
    return view.t() if col else view


def empty_host(template: Array, shape, dt: DType):
    """(array, pointer, bytes) of a new dense host array of `template`'s kind (torch stays torch)."""
    if template.framework == "torch":
        torch = sys.modules["torch"]
        t = torch.empty(shape, dtype=getattr(torch, dt.name))
        return t, t.data_ptr(), t.numel() * t.element_size()
    import numpy as np
    a = np.empty(shape, dtype=numpy_dtype(dt))
    return a, a.ctypes.data, a.nbytes


class DeviceStaging:
    """Device buffers for one call on host inputs, freed on exit whatever happens."""

    def __init__(self, device):
        self.device, self.buffers = device, []

    def __enter__(self):
        return self

    def alloc(self, nbytes: int) -> int:
        ptr = self.device.alloc(nbytes)
        self.buffers.append(ptr)
        return ptr

    def upload(self, host_ptr: int, nbytes: int) -> int:
        ptr = self.alloc(nbytes)
        self.device.copy_in(ptr, host_ptr, nbytes)
        return ptr

    def download(self, host_ptr: int, ptr: int, nbytes: int):
        self.device.copy_out(host_ptr, ptr, nbytes)

    def __exit__(self, *exc):
        for ptr in self.buffers:
            self.device.free(ptr)
        return False


# --- host staging for the shared launch path ----------------------------------------------------
def dense_host_layout(arr: Array, keep_layout: bool = False):
    """(keep-alive host array, pointer, bytes, strides) of a dense host copy of `arr` as the device
    will see it: a 2-D array becomes row-major (or keeps a column-major layout, `keep_layout`) with
    rows padded to 16 bytes, any other rank becomes contiguous. No copy when `arr` already is so."""
    if arr.ndim == 2:
        col = keep_layout and arr.strides[0] == 1 and arr.strides[1] != 1 and min(arr.shape) > 1
        layout = "col" if col else "row"
        host, ptr, nbytes, ld = dense_host_copy(arr, layout, pad_to=max(1, 16 // arr.dtype.itemsize))
        return host, ptr, nbytes, ((1, ld) if col else (ld, 1))
    host, ptr, nbytes, _ = dense_host_copy(arr, "row")
    return host, ptr, nbytes, contiguous_strides(arr.shape)


def copy_back(arr: Array, host) -> None:
    """After a staged run: put `host` (the dense copy the device result was downloaded into) into
    the caller's array, unless it is that array."""
    obj = arr.obj if arr.framework != "dlpack" else None
    if host is obj:
        return
    if arr.framework == "torch":
        obj.copy_(host)
    elif arr.framework == "numpy":
        obj[...] = host
    else:
        raise UnsupportedArrayError("hkjit cannot write a result back into this host array; pass a NumPy "
                                    "array or a torch CPU tensor as out=")


def writable(arr: Array) -> bool:
    """False for arrays the producer marked read-only (NumPy's writeable flag, which np.memmap in
    mode 'r' clears too; DLPack's READ_ONLY flag where the capsule is versioned) and for JAX arrays,
    which are immutable: JAX may share one buffer between several arrays."""
    if arr.framework == "numpy":
        return bool(arr.obj.flags.writeable)
    if arr.framework == "jax":
        return False
    if arr.framework == "dlpack":
        return not read_capsule(arr.obj[1])[1]
    return True
