"""Array descriptions from NumPy, CPU torch and raw DLPack capsules."""
import numpy as np
import pytest

from hkjit import interop
from hkjit.errors import DTypeError, UnsupportedArrayError


def test_numpy_contiguous_and_views():
    rng = np.random.default_rng()
    a = rng.standard_normal((5, 7)).astype(np.float32)
    d = interop.describe(a)
    assert (d.shape, d.strides, d.dtype.name, d.device, d.framework) == ((5, 7), (7, 1), "float32", "cpu", "numpy")
    assert d.ptr == a.ctypes.data
    t = interop.describe(a.T)
    assert t.shape == (7, 5) and t.strides == (1, 7) and t.ptr == a.ctypes.data
    s = interop.describe(a[1:, 2:])
    assert s.ptr == a.ctypes.data + (7 + 2) * 4 and s.strides == (7, 1)


def test_numpy_via_dlpack_matches_direct():
    a = np.random.default_rng().standard_normal((3, 4)).astype(np.float16)[:, 1:]
    direct, viadl = interop.describe(a), interop.describe_dlpack(a)
    assert (direct.ptr, direct.shape, direct.strides, direct.dtype) == (viadl.ptr, viadl.shape, viadl.strides, viadl.dtype)


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    x = torch.randn(6, 10, dtype=torch.bfloat16)
    d = interop.describe(x)
    assert (d.shape, d.strides, d.dtype.name, d.device, d.framework) == ((6, 10), (10, 1), "bfloat16", "cpu", "torch")
    assert d.ptr == x.data_ptr()
    v = x[2:, 3:].t()
    dv = interop.describe(v)
    assert dv.shape == (7, 4) and dv.strides == (1, 10) and dv.ptr == x.data_ptr() + (2 * 10 + 3) * 2


def test_torch_capsule_byte_offset_and_dtype():
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 8, dtype=torch.float16)
    view = x[3:, 5:]
    d = interop.describe_dlpack(view)
    assert d.ptr == view.data_ptr()
    assert d.shape == (5, 3) and d.strides == (8, 1) and d.dtype.name == "float16"
    b = interop.describe_dlpack(torch.zeros(4, dtype=torch.bfloat16))
    assert b.dtype.name == "bfloat16" and b.shape == (4,) and b.strides == (1,)


class _OnlyDLPack:
    """An array known only through the DLPack protocol."""
    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kw):
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_generic_dlpack_object():
    a = np.random.default_rng().standard_normal((4, 3)).astype(np.float32)
    d = interop.describe(_OnlyDLPack(a))
    assert d.framework == "dlpack" and d.shape == (4, 3) and d.ptr == a.ctypes.data


def test_unsupported_objects_and_dtypes():
    with pytest.raises(UnsupportedArrayError, match="not an array hkjit can read"):
        interop.describe([[1.0, 2.0]])
    with pytest.raises(DTypeError, match="hkjit knows"):
        interop.describe(np.zeros(3, dtype=np.complex64))
    assert isinstance(UnsupportedArrayError("x"), TypeError)


def test_dense_host_copy_keeps_layout():
    a = np.random.default_rng().standard_normal((5, 3)).astype(np.float32)
    col = interop.describe(a.T)  # (3, 5), column-major
    dense, ptr, nbytes, ld = interop.dense_host_copy(col, "col")
    assert ld == 3 and dense.flags.f_contiguous and np.array_equal(dense, a.T)
    assert ptr == a.ctypes.data and nbytes == a.nbytes  # already dense: no copy
    row, _, nbytes2, ld2 = interop.dense_host_copy(interop.describe(a[:, :2]), "row")
    assert ld2 == 2 and nbytes2 == 5 * 2 * 4 and row.flags.c_contiguous and np.array_equal(row, a[:, :2])


def test_dense_host_copy_of_torch_bf16():
    torch = pytest.importorskip("torch")
    x = torch.randn(6, 4, dtype=torch.bfloat16)
    dense, ptr, nbytes, ld = interop.dense_host_copy(interop.describe(x.t()), "col")
    assert ld == 4 and nbytes == 48 and torch.equal(dense, x.t()) and dense.stride() == (1, 4)


@pytest.mark.parametrize("transposed", [False, True])
def test_aligned_copy_keeps_values_and_layout_with_16_byte_rows(transposed):
    """The AMD path for operands direct-to-LDS loads cannot follow (odd bf16 leading dimensions)."""
    torch = pytest.importorskip("torch")
    base = torch.randn(7, 13, dtype=torch.bfloat16)
    x = base.t() if transposed else base
    copy = interop.aligned_copy(interop.describe(x))
    assert torch.equal(copy, x)
    ld = copy.stride(1) if transposed else copy.stride(0)
    assert (copy.stride(0) == 1) == transposed and ld % 8 == 0 and copy.data_ptr() % 16 == 0
