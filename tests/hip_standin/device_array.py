"""A row-major 2-D array in a hipMalloc'd buffer, handed to hkjit through DLPack with device type
kDLROCM: what a framework running on ROCm passes, built from hip-python calls alone (hip-python
is imported inside the functions: this module is imported where hip-python may be missing)."""

import ctypes

import numpy as np


def ok(result):
    """The value of a hip-python call that must succeed."""
    from hip import hip
    assert result[0] == hip.hipError_t.hipSuccess, f"HIP call failed: {result[0]}"
    return result[1] if len(result) == 2 else result[1:]


_DL_ROCM, _DL_FLOAT, _DL_BFLOAT = 10, 2, 4


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class HipArray:
    """`host`'s contents in a new buffer on `device`; the caller's current device is left as it was.
    `rows_allocated` < rows makes a buffer too small for the array it claims to be."""

    def __init__(self, host, device, rows_allocated=None):
        from hip import hip
        self.shape, self.dtype, self.device = host.shape, host.dtype, device
        nbytes = (host.nbytes if rows_allocated is None else rows_allocated * host.strides[0])
        caller = ok(hip.hipGetDevice())
        ok(hip.hipSetDevice(device))
        self.ptr = int(ok(hip.hipMalloc(nbytes)))
        ok(hip.hipMemcpy(self.ptr, host.ctypes.data, nbytes, hip.hipMemcpyKind.hipMemcpyHostToDevice))
        ok(hip.hipSetDevice(caller))
        self._shape = (ctypes.c_int64 * host.ndim)(*host.shape)
        code = _DL_BFLOAT if host.dtype.name == "bfloat16" else _DL_FLOAT
        self._managed = _DLManagedTensor(_DLTensor(self.ptr, _DL_ROCM, device, host.ndim, code, host.dtype.itemsize * 8, 1,
                                                   self._shape, None, 0))

    def __dlpack_device__(self):
        return (_DL_ROCM, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)

    def numpy(self):
        from hip import hip
        host = np.empty(self.shape, self.dtype)
        ok(hip.hipMemcpy(host.ctypes.data, self.ptr, host.nbytes, hip.hipMemcpyKind.hipMemcpyDeviceToHost))
        return host
