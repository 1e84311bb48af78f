"""hk::from_float_unchecked<bf16> (include/hk/cdna/base.hpp), the CDNA attention kernels' conversion of
probabilities and score gradients into MFMA operands: on both simulated targets the same bits as clang's
NaN-safe float -> bf16 conversion (round to nearest even) for finite values of every scale, the halfway
ties of both parities, subnormals, signed zeros and infinities, and NaN kept NaN where its low 16 bits
are 0 (every NaN computed from 16-bit inputs); the integer form on gfx942 (no conversion instruction),
the instruction on gfx950."""
import ctypes
from pathlib import Path

import numpy as np
import pytest

from hkjit import jit, runtime, spec as spec_mod, targets

from conftest import needs_clang

KERNELS = Path(__file__).parent / "kernels"
THREADS = 256


class Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("fast", ctypes.c_void_p), ("safe", ctypes.c_void_p), ("n", ctypes.c_int)]


def _inputs(rng):
    bits = [rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32)]        # any pattern: NaNs too
    finite = rng.standard_normal(2000) * 10.0 ** rng.integers(-40, 39, 2000)
    bits.append(finite.astype(np.float32).view(np.uint32))
    base = rng.integers(0, 2 ** 16, 500, dtype=np.uint64).astype(np.uint32) << 16
    bits += [base | 0x8000, base | 0x7FFF, base | 0x8001]                              # ties, either side
    bits.append(np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 1, 0x807FFFFF, 0x7F7FFFFF, 0x7F7F8000,
                          0x7FC00000, 0xFFC00000, 0x7F810000, 0x7FFF0000], np.uint32))
    return np.concatenate(bits)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_unchecked_conversion_rounds_as_the_safe_one(monkeypatch, cache_dir, arch):
    monkeypatch.setattr(spec_mod, "kernel_sources_dir", lambda: KERNELS)
    spec = spec_mod.Specialization("bf16_unchecked", targets.parse(arch), "bf16_unchecked.hip",
                                   f"bf16_unchecked<{THREADS}>", "hkjit_bf16_unchecked", spec_mod.make_params({}))
    device = runtime.get("sim", arch)
    kernel = jit.load_spec(spec, device)
    x = _inputs(np.random.default_rng()).view(np.float32)
    fast, safe = (np.full(x.size, 0xDEAD, np.uint16) for _ in range(2))
    ptrs = [device.alloc(a.nbytes) for a in (x, fast, safe)]
    try:
        for p, a in zip(ptrs, (x, fast, safe)):
            device.copy_in(p, a.ctypes.data, a.nbytes)
        kernel.launch((-(-x.size // THREADS), 1, 1), (THREADS, 1, 1), 0, Args(*ptrs, x.size), 0)
        device.synchronize(0)
        for p, a in zip(ptrs[1:], (fast, safe)):
            device.copy_out(a.ctypes.data, p, a.nbytes)
    finally:
        for p in ptrs:
            device.free(p)
    u = x.view(np.uint32)
    nan = np.isnan(x)
    rne = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)   # round to nearest even
    assert np.array_equal(safe[~nan], rne[~nan]) and np.array_equal(fast[~nan], safe[~nan])
    as_bf16 = lambda h: (h.astype(np.uint32) << 16).view(np.float32)                     # noqa: E731
    assert np.isnan(as_bf16(safe[nan])).all()
    payload_free = nan & (u & 0xFFFF == 0)                        # the NaNs a 16-bit input or the default has
    assert payload_free.sum() >= 3 and np.isnan(as_bf16(fast[payload_free])).all()
