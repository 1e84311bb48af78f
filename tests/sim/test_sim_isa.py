"""Per-family instruction tests: small HIP kernels (tests/sim/kernels/isa.hip) run on
sim:gfx942 and sim:gfx950 and compared with NumPy."""

import numpy as np
import pytest

from hkjit.sim import SimUnsupportedInstruction, fp
from simutil import ARCHS, needs_clang, build, run

pytestmark = needs_clang
rng = np.random.default_rng(1)


def code(arch):
    return build("isa.hip", arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_alu(arch):
    n = 200
    x = (rng.standard_normal(n) * 50).astype(np.float32)
    y = rng.integers(-300, 300, n).astype(np.int32)
    fo, io, ho = np.zeros(8 * n, np.float32), np.zeros(4 * n, np.int32), np.zeros(n, np.uint16)
    _, _, fo, io, ho = run(code(arch), "alu", arch, (4, 1, 1), (64, 1, 1), [x, y, fo, io, ho, n])
    fo, io = fo.reshape(n, 8), io.reshape(n, 4)
    np.testing.assert_array_equal(fo[:, 0], (x.astype(np.float64) * 3 - 1.5).astype(np.float32))
    np.testing.assert_array_equal(fo[:, 1], x / (y | 1).astype(np.float32))
    np.testing.assert_allclose(fo[:, 2], np.sqrt(np.abs(x)), rtol=1e-6)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(fo[:, 3], np.exp2(x.astype(np.float64)).astype(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(fo[:, 4], y.astype(np.float32) * np.float32(0.25))
    np.testing.assert_array_equal(fo[:, 5], np.fmin(x, y.astype(np.float32)) + np.fmax(x, np.float32(1)))
    np.testing.assert_array_equal(fo[:, 6], x.astype(np.float16).astype(np.float32))
    acc = np.zeros(n, np.float32)
    for k in range(7):
        acc = np.where((y & 7) > k, (x.astype(np.float64) * k + acc).astype(np.float32), acc)  # contracted to fma
    np.testing.assert_array_equal(fo[:, 7], acc)
    y64 = y.astype(np.int64)
    np.testing.assert_array_equal(io[:, 0], ((y64 * 7 + 3) ^ (y64 >> 2)).astype(np.int32))
    np.testing.assert_array_equal(io[:, 1], ((y.view(np.uint32) >> 3).astype(np.int64) + (y64 << 5)).astype(np.int32))
    np.testing.assert_array_equal(io[:, 2], np.where(y > 100, np.trunc(y / 3), np.fmod(y, 5)).astype(np.int32))
    np.testing.assert_array_equal(io[:, 3], np.trunc(x).astype(np.int32))
    np.testing.assert_array_equal(ho, fp.f32_to_bf16(x))


@pytest.mark.parametrize("arch", ARCHS)
def test_wide(arch):
    n = 64
    x = rng.integers(-2**40, 2**40, n).astype(np.int64)
    d = rng.standard_normal(n)
    _, _, xo, do = run(code(arch), "wide", arch, (1, 1, 1), (64, 1, 1), [x, d, np.zeros(2 * n, np.int64),
                                                                            np.zeros(n), n])
    np.testing.assert_array_equal(xo[0::2], x * 3 + (x >> 7))
    np.testing.assert_array_equal(xo[1::2], (x.view(np.uint64) >> np.uint64(11)).view(np.int64) ^ (x << 3))
    np.testing.assert_array_equal(do, d * 1.5 - 0.25)


@pytest.mark.parametrize("arch", ARCHS)
def test_dpp_alias(arch):
    """v_add_f32_dpp v, v, v row_shr:1: every lane adds its row neighbour's *old* value."""
    x = rng.standard_normal(128).astype(np.float32)
    _, o = run(code(arch), "dpp_alias", arch, (1, 1, 1), (128, 1, 1), [x, np.zeros(128, np.float32)])
    prev = np.where(np.arange(128) % 16 == 0, 0, np.roll(x, 1)).astype(np.float32)
    np.testing.assert_array_equal(o, x + prev)


@pytest.mark.parametrize("arch", ARCHS)
def test_dpp_lane_ops(arch):
    x = rng.integers(-1000, 1000, 128).astype(np.int32)
    _, o = run(code(arch), "dpp_ops", arch, (1, 1, 1), (128, 1, 1), [x, np.zeros(8 * 128, np.int32)])
    o = o.reshape(128, 8)
    lane = np.arange(128)
    row0 = lane & ~15
    np.testing.assert_array_equal(o[:, 0], x[(lane & ~3) + 3 - (lane & 3)])
    np.testing.assert_array_equal(o[:, 1], np.where(lane % 16 >= 2, x[np.maximum(lane - 2, 0)], -1))
    np.testing.assert_array_equal(o[:, 2], x[row0 + (lane - 4) % 16])
    np.testing.assert_array_equal(o[:, 3], x[row0 + 15 - lane % 16])
    np.testing.assert_array_equal(o[:, 4], x[(lane & ~63) + 63 - (lane & 63)])
    np.testing.assert_array_equal(o[:, 5], np.repeat(x[::64] + 1, 64))
    np.testing.assert_array_equal(o[:, 6], lane % 64)
    np.testing.assert_array_equal(o[:, 7], np.repeat(x.reshape(2, 64).sum(1), 64))


@pytest.mark.parametrize("arch", ARCHS)
def test_sdwa(arch):
    x = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    _, _, o = run(code(arch), "sdwa", arch, (1, 1, 1), (64, 1, 1), [x, y, np.zeros(64, np.uint32)])
    np.testing.assert_array_equal(o, (x & 0xFFFF0000) | (y & 0xFFFF))


@pytest.mark.parametrize("arch", ARCHS)
def test_sdwa_sgpr_operand(arch):
    """SDWA's S1 bit: the second operand is an SGPR, not the VGPR of the same number."""
    x = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    s = np.uint32(0x8000)
    _, _, o = run(code(arch), "sdwa_sgpr", arch, (1, 1, 1), (64, 1, 1), [x, y, int(s), np.zeros(128, np.uint32)])
    np.testing.assert_array_equal(o[0::2], ((x & 0xFFFF) < s).astype(np.uint32))
    np.testing.assert_array_equal(o[1::2], ((y >> 16) + s).astype(np.uint32))


@pytest.mark.parametrize("arch", ARCHS)
def test_packed(arch):
    a, b = rng.standard_normal((64, 2)).astype(np.float32), rng.standard_normal((64, 2)).astype(np.float32)
    h = rng.standard_normal((64, 2)).astype(np.float16)
    _, _, _, o, ho = run(code(arch), "packed", arch, (1, 1, 1), (64, 1, 1),
                         [a, b, h, np.zeros((128, 2), np.float32), np.zeros((64, 2), np.float16)])
    fma = (a.astype(np.float64) * b + a).astype(np.float32)
    np.testing.assert_array_equal(o[0::2], fma)
    np.testing.assert_array_equal(o[1::2], a * b)
    ref = (h.astype(np.float64) * h + np.array([1.0, -2.0])).astype(np.float16)
    np.testing.assert_array_equal(ho, ref)


@pytest.mark.parametrize("arch", ARCHS)
def test_lds_transpose_barrier(arch):
    x = rng.standard_normal(3 * 1024).astype(np.float32)
    _, o = run(code(arch), "lds_transpose", arch, (3, 1, 1), (256, 1, 1), [x, np.zeros_like(x)])
    np.testing.assert_array_equal(o.reshape(3, 32, 32), x.reshape(3, 32, 32).transpose(0, 2, 1))


@pytest.mark.parametrize("arch", ARCHS)
def test_lds_atomics(arch):
    x = rng.integers(-100, 100, 256).astype(np.int32)
    _, o = run(code(arch), "lds_atomics", arch, (1, 1, 1), (256, 1, 1), [x, np.zeros(256, np.int32)])
    sums = np.array([x[k::4].sum() for k in range(4)])
    np.testing.assert_array_equal(o, x[::-1] + sums[np.arange(256) & 3])


@pytest.mark.parametrize("arch", ARCHS)
def test_buffer_out_of_range_lanes_read_zero(arch):
    x = rng.integers(1, 1000, 64).astype(np.int32)
    _, o = run(code(arch), "buffer_oob", arch, (1, 1, 1), (64, 1, 1), [x, np.zeros(64, np.int32), 37 * 4])
    np.testing.assert_array_equal(o, np.where(np.arange(64) < 37, x, 0))


@pytest.mark.parametrize("arch", ARCHS)
def test_buffer_load_lds(arch):
    x = rng.integers(1, 1000, 64).astype(np.int32)
    _, o = run(code(arch), "buffer_lds", arch, (1, 1, 1), (64, 1, 1), [x, np.zeros(64, np.int32), 50 * 4])
    np.testing.assert_array_equal(o, np.where(np.arange(64) < 50, x, 0)[::-1])


@pytest.mark.parametrize("arch", ARCHS)
def test_fp8_conversions(arch):
    fmt = fp.fp8_formats(arch)[0]
    x = np.concatenate([rng.standard_normal(100) * 30, [300.0, -1000.0, 0.0, 1e-4, 240.0, 448.0]]).astype(np.float32)
    x = np.concatenate([x, np.zeros(128 - len(x), np.float32)])
    _, packed, back = run(code(arch), "fp8_cvt", arch, (1, 1, 1), (64, 1, 1),
                          [x, np.zeros(64, np.uint32), np.zeros(128, np.float32)])
    codes = np.stack([packed & 0xFF, (packed >> 8) & 0xFF], 1).reshape(-1)
    # without the clamp bit, values past the format's range become NaN
    np.testing.assert_array_equal(codes, fp.f32_to_fp8(x, fmt, saturate=False))
    np.testing.assert_array_equal(back, fp.fp8_to_f32(codes, fmt))
    assert np.nanmax(back) == (240.0 if arch == "gfx942" else 448.0)   # FNUZ vs OCP e4m3 range
    assert np.isnan(back[101]) and np.isnan(back[100]) == np.isnan(back[105]) == (arch == "gfx942")


def test_ds_read_b64_tr_b16():
    arch = "gfx950"
    x = rng.integers(0, 65535, 256).astype(np.uint16)
    _, o = run(code(arch), "ds_tr16", arch, (1, 1, 1), (64, 1, 1), [x, np.zeros(256, np.uint16)])
    src = x.reshape(64, 4)
    lane = np.arange(64)
    want = np.stack([src[(lane & ~15) + ((lane >> 2) & 3) + 4 * k, lane & 3] for k in range(4)], 1)
    np.testing.assert_array_equal(o.reshape(64, 4), want)


@pytest.mark.parametrize("arch", ARCHS)
def test_unknown_instruction_stops_with_its_name(arch):
    with pytest.raises(SimUnsupportedInstruction) as e:
        run(code(arch), "unknown_inst", arch, (1, 1, 1), (64, 1, 1), [np.ones(4, np.float32)])
    msg = str(e.value)
    assert "v_cubeid_f32" in msg and "unknown_inst" in msg and "wave" in msg
