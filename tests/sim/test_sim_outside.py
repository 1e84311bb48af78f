"""Kernels written the way code outside hkjit is written, on sim:gfx942 and sim:gfx950, against
NumPy: clang's accurate math (v_fmamk/v_fmaak), DPP and ds_swizzle/ds_bpermute reductions and
scans, v_permlane swaps, inline buffer/LDS assembly with hand-placed waits, partial waves,
several kernels of one code object sharing device memory, a flash-attention forward with MFMA
builtins at ragged lengths, and a kernel built against HIP's own headers."""

import numpy as np
import pytest

from hkjit.sim import SimDevice
from attention_util import run_attention
from simutil import ARCHS, build, build_hip, needs_clang, needs_hip_headers, run

pytestmark = needs_clang
rng = np.random.default_rng(23)


def code(arch):
    return build("outside.hip", arch)


def ulps(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float64).astype(np.float32)
    return np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))


@pytest.mark.parametrize("arch", ARCHS)
def test_accurate_math_builtins(arch):
    n = 300
    x = np.concatenate([rng.uniform(1e-3, 50, n - 4), [1e-30, 1.0, 3e38, 2.0**-126]]).astype(np.float32)
    _, o = run(code(arch), "math_fns", arch, ((n + 63) // 64, 1, 1), (64, 1, 1), [x, np.zeros(5 * n, np.float32), n])
    o = o.reshape(n, 5)
    x64 = x.astype(np.float64)
    assert ulps(o[:, 0], np.log(x64)).max() <= 1
    with np.errstate(over="ignore"):                    # exp(3e38 / 16) is inf in both
        assert ulps(o[:, 1], np.exp(x64 * 0.0625)).max() <= 1
    np.testing.assert_allclose(o[:, 2], np.log2(x64) + np.exp2(-x64 * 0.125), rtol=1e-6, atol=1e-6)
    assert ulps(o[:, 3], np.sqrt(x64)).max() <= 1
    assert ulps(o[:, 4], 1 / x64).max() <= 1


@pytest.mark.parametrize("arch", ARCHS)
def test_dpp_and_lane_permute_reductions(arch):
    waves = 5
    x = rng.integers(-1000, 1000, 64 * waves).astype(np.int32)
    f = rng.standard_normal(64 * waves).astype(np.float32)
    _, _, sums, scans, maxes = run(code(arch), "reductions", arch, (waves, 1, 1), (64, 1, 1),
                                   [x, f, np.zeros(waves, np.int32), np.zeros(64 * waves, np.int32),
                                    np.zeros(waves, np.float32)])
    np.testing.assert_array_equal(sums, x.reshape(waves, 64).sum(1))
    np.testing.assert_array_equal(scans, np.cumsum(x.reshape(waves, 64), 1).reshape(-1))
    np.testing.assert_array_equal(maxes, f.reshape(waves, 64).max(1))


@pytest.mark.parametrize("arch", ARCHS)
def test_permlane_swaps(arch):
    a = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    _, _, o = run(code(arch), "swap_halves", arch, (2, 1, 1), (64, 1, 1), [a, b, np.zeros(512, np.uint32)])
    o = o.reshape(2, 64, 4)
    A, B = a.reshape(2, 64), b.reshape(2, 64)
    np.testing.assert_array_equal(o[:, :, 0], np.concatenate([A[:, :32], B[:, :32]], 1))
    np.testing.assert_array_equal(o[:, :, 1], np.concatenate([A[:, 32:], B[:, 32:]], 1))
    rows = lambda v: v.reshape(2, 4, 16)                                     # noqa: E731
    want16x = rows(A).copy()
    want16x[:, [1, 3]] = rows(B)[:, [0, 2]]
    want16y = rows(B).copy()
    want16y[:, [0, 2]] = rows(A)[:, [1, 3]]
    np.testing.assert_array_equal(o[:, :, 2], want16x.reshape(2, 64))
    np.testing.assert_array_equal(o[:, :, 3], want16y.reshape(2, 64))


@pytest.mark.parametrize("arch", ARCHS)
def test_inline_asm_tile_transpose_with_hand_placed_waits(arch):
    x = rng.integers(-10**6, 10**6, 3 * 1024).astype(np.int32)
    _, o = run(code(arch), "asm_tile_transpose", arch, (3, 1, 1), (256, 1, 1), [x, np.zeros_like(x), x.nbytes])
    np.testing.assert_array_equal(o.reshape(3, 32, 32), x.reshape(3, 32, 32).transpose(0, 2, 1))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("block", [40, 100, 130])
def test_partial_waves(arch, block):
    nb = 3
    x = rng.integers(0, 1000, nb * block).astype(np.int32)
    _, o, sums = run(code(arch), "partial_waves", arch, (nb, 1, 1), (block, 1, 1),
                     [x, np.zeros(3 * nb * block, np.int32), np.zeros(nb, np.int32)])
    o = o.reshape(nb, block, 3)
    t = np.arange(block)
    wave, lane = t // 64, t % 64
    active = np.minimum(block - 64 * wave, 64)
    np.testing.assert_array_equal(o[:, :, 0], np.broadcast_to(active, (nb, block)))
    X = x.reshape(nb, block)
    odd_below = np.array([[((X[b, 64 * wave[i]:i] & 1) == 1).sum() for i in t] for b in range(nb)])
    np.testing.assert_array_equal(o[:, :, 1], odd_below)
    np.testing.assert_array_equal(o[:, :, 2], X[:, 64 * wave])
    np.testing.assert_array_equal(sums, X.sum(1))
    assert (lane < 64).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_kernels_of_one_code_object_share_memory(arch):
    """One code object, one device: a reduction kernel's output is the next kernel's input."""
    blob = code(arch)
    dev = SimDevice(arch)
    scan, trans = dev.load(blob, "reductions"), dev.load(blob, "asm_tile_transpose")
    x = rng.integers(-100, 100, 1024).astype(np.int32)
    bufs = [dev.alloc(n) for n in (4096, 4096, 64, 4096, 64, 4096)]
    bx, bf, bs, bscan, bm, bt = bufs
    dev.copy_in(bx, x)
    dev.copy_in(bf, x.astype(np.float32))
    scan.launch((16, 1, 1), (64, 1, 1), 0, np.array([b.ptr for b in (bx, bf, bs, bscan, bm)], np.uint64).tobytes())
    trans.launch((1, 1, 1), (256, 1, 1), 0, np.array([bscan.ptr, bt.ptr], np.uint64).tobytes()
                 + np.array([4096, 0], np.int32).tobytes())
    out = np.empty(1024, np.int32)
    dev.copy_out(bt, out)
    np.testing.assert_array_equal(out.reshape(32, 32), np.cumsum(x.reshape(16, 64), 1).reshape(32, 32).T)
    for b in bufs:
        dev.free(b)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("heads,n", [(2, 16), (3, 72), (1, 130)])
def test_flash_attention_forward(arch, heads, n):
    out, ref, _ = run_attention(arch, heads, n, seed=heads * 1000 + n)
    np.testing.assert_allclose(out, ref, rtol=2e-2, atol=2e-2)


@needs_hip_headers
@pytest.mark.parametrize("arch", ARCHS)
def test_kernel_built_with_hip_headers(arch):
    rows, cols = 6, 300
    x = rng.uniform(-20, 20, (rows, cols)).astype(np.float32)
    _, y, sums = run(build_hip("hip_headers.hip", arch), "softplus_rows", arch, (rows, 1, 1), (256, 1, 1),
                     [x, np.full_like(x, np.nan), np.zeros(2, np.float32), cols])
    want = np.where(x > 15, x, np.log1p(np.exp(x.astype(np.float64))))
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(sums, [want[0::2].sum(), want[1::2].sum()], rtol=1e-5)
