"""Arrays hkjit must refuse before anything is compiled or launched (issue 12, items 8 and 9):
read-only outputs through every protocol hkjit reads, and torch tensors without addressable memory."""

import ml_dtypes
import numpy as np
import pytest

import hkjit
from hkjit import interop
from hkjit.errors import InvalidArgumentError, UnsupportedArrayError

torch = pytest.importorskip("torch")
BF16 = ml_dtypes.bfloat16


def _operands():
    rng = np.random.default_rng()
    return rng.standard_normal((40, 24)).astype(BF16), rng.standard_normal((24, 56)).astype(BF16)


class _OnlyDLPack:
    """An array known only through the DLPack protocol."""
    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kw):
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def _entries(cache_dir):
    return sorted(p.name for p in cache_dir.rglob("*") if p.is_file()) if cache_dir.exists() else []


def _refused(cache_dir, error, match, *arrays, **kw):
    before = _entries(cache_dir)
    with pytest.raises(error, match=match):
        hkjit.gemm(*arrays, device="sim:gfx950", out_dtype="float32", **kw)
    assert _entries(cache_dir) == before, "nothing may be compiled for a refused call"


def test_read_only_memmap_out_is_refused(cache_dir, tmp_path):
    a, b = _operands()
    path = tmp_path / "out.bin"
    poison = np.full((40, 56), np.nan, np.float32)
    poison.tofile(path)
    out = np.memmap(path, dtype=np.float32, mode="r", shape=(40, 56))
    _refused(cache_dir, InvalidArgumentError, "out is read-only", a, b, out=out)
    assert np.isnan(np.fromfile(path, dtype=np.float32)).all()


def test_numpy_and_dlpack_read_only_out_is_refused(cache_dir):
    a, b = _operands()
    out = np.full((40, 56), np.nan, np.float32)
    out.flags.writeable = False
    _refused(cache_dir, InvalidArgumentError, "out is read-only", a, b, out=out)
    d = interop.describe(_OnlyDLPack(out))            # NumPy >= 2.1 exports DLPack 1.0's READ_ONLY flag
    assert d.framework == "dlpack" and not interop.writable(d)
    _refused(cache_dir, InvalidArgumentError, "out is read-only", a, b, out=_OnlyDLPack(out))
    assert np.isnan(out).all()


def test_meta_tensors_give_meta_results_and_mixed_devices_are_refused(cache_dir):
    """Meta tensors have no memory to read: interop refuses them, and a call with only meta tensors
    gives meta results through hkjit::gemm's fake implementation (issue 14: shape inference), with
    nothing compiled. Meta beside real tensors is refused as arrays on two devices are."""
    from hkjit.errors import DeviceError
    a, b = (torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16) for x in _operands())
    meta = torch.empty(40, 24, dtype=torch.bfloat16, device="meta")
    with pytest.raises(UnsupportedArrayError, match="meta tensors carry no data"):
        interop.describe(meta)
    before = _entries(cache_dir)
    out = hkjit.gemm(meta, b.to("meta"), out_dtype="float32")
    assert out.device.type == "meta" and out.shape == (40, 56) and out.dtype == torch.float32
    assert _entries(cache_dir) == before, "shape inference compiles nothing"
    _refused(cache_dir, DeviceError, "devices", meta, b)
    _refused(cache_dir, DeviceError, "devices", a, b, out=torch.empty(40, 56, device="meta"))


def test_sparse_tensors_are_refused(cache_dir):
    a, b = (torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16) for x in _operands())
    _refused(cache_dir, UnsupportedArrayError, "layout", a.to_sparse(), b)
