"""Every bad input to hkjit.gemm / hkjit.build raises a documented HKJitError before anything is
compiled or launched."""
import numpy as np
import pytest

import hkjit
from hkjit import jit
from hkjit.errors import (CompilerNotFoundError, DTypeError, DeviceError, HKJitError, InvalidArgumentError,
                          TargetError, UnsupportedArrayError)

rng = np.random.default_rng()


def _h(*shape, dtype=np.float16):
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(autouse=True)
def no_compiles(monkeypatch):
    """Any compile or launch attempted by these tests is itself a failure."""
    def forbidden(*a, **k):
        raise AssertionError("a bad input reached the compile/launch stage")
    monkeypatch.setattr(jit, "build_spec", forbidden)
    monkeypatch.setattr(jit, "load_spec", forbidden)


def test_wrong_dtypes():
    with pytest.raises(DTypeError, match="bfloat16, float16") as e:
        hkjit.gemm(_h(4, 4, dtype=np.float32), _h(4, 4, dtype=np.float32))
    assert isinstance(e.value, TypeError) and isinstance(e.value, HKJitError)
    with pytest.raises(DTypeError, match="convert one"):
        import ml_dtypes
        hkjit.gemm(_h(4, 4), _h(4, 4).astype(ml_dtypes.bfloat16))
    with pytest.raises(DTypeError, match="out_dtype=int8; it must be one of"):
        hkjit.gemm(_h(4, 4), _h(4, 4), out_dtype="int8")


def test_shapes():
    with pytest.raises(InvalidArgumentError, match="inner dimensions differ") as e:
        hkjit.gemm(_h(4, 5), _h(6, 3))
    assert isinstance(e.value, ValueError)
    with pytest.raises(InvalidArgumentError, match="2-D"):
        hkjit.gemm(_h(2, 4, 5), _h(5, 3))
    with pytest.raises(InvalidArgumentError, match="2-D"):
        hkjit.gemm(_h(5), _h(5, 3))
    with pytest.raises(InvalidArgumentError, match="empty"):
        hkjit.gemm(_h(0, 5), _h(5, 3))


def test_unsupported_strides():
    a = _h(8, 16)[:, ::2]      # column stride 2: neither row-major nor transposed
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        hkjit.gemm(a, _h(8, 4))


def test_bad_epilogue_arguments():
    with pytest.raises(InvalidArgumentError, match="bias"):
        hkjit.gemm(_h(4, 8), _h(8, 6), bias=_h(5))
    with pytest.raises(InvalidArgumentError, match="row-major"):
        hkjit.gemm(_h(4, 8), _h(8, 6), out=np.empty((6, 4), np.float16))
    with pytest.raises(DTypeError, match="out has dtype"):
        hkjit.gemm(_h(4, 8), _h(8, 6), out=np.empty((4, 6), np.float16), out_dtype="float32")


def test_not_an_array():
    with pytest.raises(UnsupportedArrayError):
        hkjit.gemm([[1, 2]], _h(2, 2))


def test_host_arrays_without_gpu_name_the_simulator(monkeypatch):
    from hkjit import runtime
    monkeypatch.delenv("HKJIT_DEVICE", raising=False)
    monkeypatch.setattr(runtime, "gpu_count", lambda kind: 0)
    with pytest.raises(DeviceError, match="sim:gfx950") as e:
        hkjit.gemm(_h(4, 8), _h(8, 6))
    assert isinstance(e.value, RuntimeError)


def test_bad_device_strings():
    with pytest.raises(InvalidArgumentError, match="unknown device"):
        hkjit.gemm(_h(4, 8), _h(8, 6), device="tpu:0")
    with pytest.raises(InvalidArgumentError, match="sim:gfx942"):
        hkjit.gemm(_h(4, 8), _h(8, 6), device="sim:gfx90a")


def test_mixed_host_and_device_arrays_are_refused():
    from hkjit import interop
    a = interop.describe(_h(4, 8))
    fake_gpu = interop.Array(0x10000, (8, 6), (6, 1), a.dtype, "cuda", 0, "dlpack", None)
    with pytest.raises(DeviceError, match="host memory"):
        hkjit.gemm(a, fake_gpu)
    other = interop.Array(0x20000, (4, 8), (8, 1), a.dtype, "cuda", 1, "dlpack", None)
    with pytest.raises(DeviceError, match="different devices"):
        hkjit.gemm(other, fake_gpu)


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "sm_90a"])
@pytest.mark.parametrize("override,match", [
    ({"block_m": 100}, "block_m"),
    ({"block_k": 7}, "block_k"),
    ({"stages": 0}, "stages"),
    ({"tile_q": 3}, "unknown keyword"),
    ({"block_m": 1 << 14, "block_n": 1 << 14}, "block_"),
])
def test_invalid_tile_overrides_fail_before_compiling(target, override, match):
    with pytest.raises(InvalidArgumentError, match=match):
        hkjit.build("gemm", target=target, m=1024, n=1024, k=1024, **override)


def test_build_argument_errors():
    with pytest.raises(TargetError, match="supported targets"):
        hkjit.build("gemm", target="gfx1100", m=8, n=8, k=8)
    with pytest.raises(InvalidArgumentError, match="unknown op"):
        hkjit.build("conv3d", target="gfx950")
    with pytest.raises(InvalidArgumentError, match="sizes must be"):
        hkjit.build("gemm", target="gfx950", m=0, n=8, k=8)
    with pytest.raises(InvalidArgumentError, match="a_layout"):
        hkjit.build("gemm", target="gfx950", m=8, n=8, k=8, a_layout="diagonal")
    with pytest.raises(DTypeError):
        hkjit.build("gemm", target="gfx950", m=8, n=8, k=8, dtype="float32")


def test_missing_compiler_is_reported(monkeypatch):
    monkeypatch.undo()  # this one must reach compiler selection
    from hkjit import compiler
    monkeypatch.setenv("HKJIT_COMPILER", "hipcc")
    monkeypatch.setitem(compiler._FINDERS, "hipcc", lambda: None)
    hkjit.reset_state()
    try:
        with pytest.raises(CompilerNotFoundError, match="hipcc") as e:
            hkjit.build("gemm", target="gfx950", m=64, n=64, k=64)
        assert isinstance(e.value, RuntimeError)
    finally:
        hkjit.reset_state()
