"""Instructions outside hkjit's own kernels (tests/sim/kernels/instructions.hip, one code object
holding every kernel), on sim:gfx942 and sim:gfx950, against NumPy references: the VOP2 forms with
a literal K, sums of absolute differences, packing conversions, 16-bit three-operand ops, dot
products, 64-bit scalar bit ops, EXEC writes, SGPR-relative moves, and LDS / global / buffer
atomics with colliding lanes."""

import numpy as np
import pytest

from simutil import ARCHS, build, needs_clang, run

pytestmark = needs_clang
rng = np.random.default_rng(11)
U32 = np.uint32


def code(arch):
    return build("instructions.hip", arch)


def lanes3(n=128, gen=None):
    x = (gen or (lambda: rng.integers(0, 2**32, n, dtype=np.uint64)))
    return np.stack([x(), x(), x()], 1).astype(U32)


def vop(arch, kernel, abc):
    n = abc.shape[0]
    _, out = run(code(arch), kernel, arch, (n // 64, 1, 1), (64, 1, 1), [abc.reshape(-1), np.zeros(n, U32)])
    return out


def f32(x):
    return np.asarray(x, U32).view(np.float32)


def f16(x, hi=False):
    return ((np.asarray(x, U32) >> (16 if hi else 0)) & 0xFFFF).astype(np.uint16).view(np.float16)


def fbits(v):
    return np.asarray(v, np.float32).view(U32)


def hbits(lo, hi=None):
    lo = np.asarray(lo, np.float16).view(np.uint16).astype(U32)
    return lo if hi is None else lo | np.asarray(hi, np.float16).view(np.uint16).astype(U32) << 16


def fields(x, width, count, signed=False):
    out = []
    for i in range(count):
        v = (np.asarray(x).astype(np.int64) >> (width * i)) & ((1 << width) - 1)
        out.append(np.where(v >> (width - 1) & 1, v - (1 << width), v) if signed else v)
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_vop2_with_literal_constant(arch):
    floats = lambda: fbits(rng.standard_normal(128).astype(np.float32) * 10)     # noqa: E731
    abc = lanes3(gen=floats)
    a, b = f32(abc[:, 0]).astype(np.float64), f32(abc[:, 1]).astype(np.float64)
    pi = np.float64(np.float32(np.pi))
    np.testing.assert_array_equal(f32(vop(arch, "fmamk", abc)), (a * pi + b).astype(np.float32))
    np.testing.assert_array_equal(f32(vop(arch, "fmaak", abc)), (a * b - pi).astype(np.float32))
    halves = lambda: hbits(rng.standard_normal(128) * 4)                          # noqa: E731
    abc = lanes3(gen=halves)
    a, b = f16(abc[:, 0]), f16(abc[:, 1])
    k = np.float16(3.140625)
    np.testing.assert_array_equal(f16(vop(arch, "madmk_f16", abc)), (a * k).astype(np.float16) + b)
    np.testing.assert_array_equal(f16(vop(arch, "madak_f16", abc)), (a * b).astype(np.float16) + k)


@pytest.mark.parametrize("arch", ARCHS)
def test_integer_vector_ops(arch):
    abc = lanes3()
    a, b, c = (abc[:, i].astype(np.int64) for i in range(3))
    sad8 = sum(np.abs(x - y) for x, y in zip(fields(a, 8, 4), fields(b, 8, 4)))
    sad16 = sum(np.abs(x - y) for x, y in zip(fields(a, 16, 2), fields(b, 16, 2)))
    want = {"sad_u8": sad8 + c, "sad_hi_u8": (sad8 << 16) + c, "sad_u16": sad16 + c,
            "sad_u32": np.abs(a - b) + c,
            "lerp_u8": sum(((x + y + (r & 1)) >> 1) << (8 * i) for i, (x, y, r) in
                           enumerate(zip(fields(a, 8, 4), fields(b, 8, 4), fields(c, 8, 4)))),
            "dot4_i32_i8": c + sum(x * y for x, y in zip(fields(a, 8, 4, True), fields(b, 8, 4, True))),
            "dot8_u32_u4": c + sum(x * y for x, y in zip(fields(a, 4, 8), fields(b, 4, 8))),
            "dot2_i32_i16": c + sum(x * y for x, y in zip(fields(a, 16, 2, True), fields(b, 16, 2, True))),
            "sat_pk_u8_i16": sum(np.clip(x, 0, 255) << (8 * i) for i, x in enumerate(fields(a, 16, 2, True))),
            "add_i16": (a + b) & 0xFFFF,        # VOP3 16-bit results zero the upper half
            "min3_i16": np.stack([fields(v, 16, 1, True)[0] for v in (a, b, c)]).min(0) & 0xFFFF,
            "med3_u16": np.sort(np.stack([v & 0xFFFF for v in (a, b, c)]), 0)[1],
            "cvt_off_f32_i4": fbits(fields(a, 4, 1, True)[0] / 16.0)}
    for kernel, ref in want.items():
        got = vop(arch, kernel, abc)
        np.testing.assert_array_equal(got, (np.asarray(ref) & 0xFFFFFFFF).astype(U32), err_msg=kernel)
    acc = vop(arch, "dot4c_i32_i8", abc)
    np.testing.assert_array_equal(acc, want["dot4_i32_i8"].astype(np.int64).astype(U32))


@pytest.mark.parametrize("arch", ARCHS)
def test_float_packing_and_dot(arch):
    abc = lanes3(gen=lambda: fbits(rng.standard_normal(128).astype(np.float32) * 300))
    a, s, d = f32(abc[:, 0]), abc[:, 1] & 3, abc[:, 2]
    pk = vop(arch, "cvt_pk_u8_f32", np.stack([abc[:, 0], s, d], 1).astype(U32))
    byte = np.clip(np.rint(a.astype(np.float64)), 0, 255).astype(U32)
    np.testing.assert_array_equal(pk, (d & ~(U32(0xFF) << (8 * s))) | (byte << (8 * s)))
    h = lanes3(gen=lambda: hbits(rng.uniform(-1.5, 1.5, 128), rng.uniform(-1.5, 1.5, 128)))
    x, y = f16(h[:, 0]).astype(np.float64), f16(h[:, 1]).astype(np.float64)
    snorm = lambda v: (np.rint(np.clip(v, -1, 1) * 32767).astype(np.int64) & 0xFFFF)   # noqa: E731
    np.testing.assert_array_equal(vop(arch, "cvt_pknorm_i16_f16", h), (snorm(x) | snorm(y) << 16).astype(U32))
    np.testing.assert_array_equal(vop(arch, "cvt_norm_u16_f16", h), np.rint(np.clip(x, 0, 1) * 65535).astype(U32))
    h[:, 2] = fbits(rng.standard_normal(128).astype(np.float32))
    dot = x * y + f16(h[:, 0], True).astype(np.float64) * f16(h[:, 1], True) + f32(h[:, 2])
    np.testing.assert_allclose(f32(vop(arch, "dot2c_f32_f16", h)), dot.astype(np.float32), rtol=1e-6)
    h[:, 2] = hbits(rng.standard_normal(128), rng.standard_normal(128))
    fma = [(f16(h[:, 0], hi).astype(np.float64) * f16(h[:, 1], hi) + f16(h[:, 2], hi)).astype(np.float16)
           for hi in (False, True)]
    np.testing.assert_array_equal(vop(arch, "pk_fmac_f16", h), hbits(*fma))


@pytest.mark.parametrize("arch", ARCHS)
def test_pk_mov_b32_selects_halves_by_op_sel(arch):
    x = rng.integers(0, 2**32, (64, 4), dtype=np.uint64).astype(U32)
    _, out = run(code(arch), "pk_mov_b32", arch, (1, 1, 1), (64, 1, 1), [x.reshape(-1), np.zeros(256, U32)])
    np.testing.assert_array_equal(out.reshape(64, 4), x[:, [1, 2, 0, 3]])


def test_cdna4_nan_propagating_min_max():
    arch = "gfx950"
    v = rng.standard_normal((128, 3)).astype(np.float32)
    v[::7, 1] = np.nan
    v[3::11, 0] = -0.0
    v[3::11, 1:] = 0.0
    abc = fbits(v)
    lo, hi = vop(arch, "minimum3_f32", abc), vop(arch, "maximum3_f32", abc)
    nan = np.isnan(v).any(1)
    assert np.isnan(f32(lo)[nan]).all() and np.isnan(f32(hi)[nan]).all()
    np.testing.assert_array_equal(f32(lo)[~nan], v[~nan].min(1))
    np.testing.assert_array_equal(f32(hi)[~nan], v[~nan].max(1))
    assert np.signbit(f32(lo)[3::11]).all() and not np.signbit(f32(hi)[3::11]).any()   # -0 < +0
    h = lanes3(gen=lambda: hbits(rng.standard_normal(128), rng.standard_normal(128)))
    got = vop(arch, "pk_minimum3_f16", h)
    for hi in (False, True):
        want = np.minimum(np.minimum(f16(h[:, 0], hi), f16(h[:, 1], hi)), f16(h[:, 2], hi))
        np.testing.assert_array_equal(f16(got, hi), want)


def _sop(arch, kernel, x, out_dtype):
    _, out = run(code(arch), kernel, arch, (len(x), 1, 1), (64, 1, 1), [x, np.zeros(len(x), out_dtype)])
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_scalar_bit_ops(arch):
    x64 = rng.integers(0, 2**63, 8, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    x64[0], x64[1] = 0, 2**64 - 1
    x32 = (x64 & np.uint64(0xFFFFFFFF)).astype(U32)
    bits64 = [[int(v) >> i & 1 for i in range(64)] for v in x64]
    bits32 = [[int(v) >> i & 1 for i in range(32)] for v in x32]
    first0 = lambda bs: next((i for i, b in enumerate(bs) if not b), 0xFFFFFFFF)      # noqa: E731

    def flbit(v, w):
        bs = [int(v) >> (w - 1 - i) & 1 for i in range(w)]
        return next((i for i, b in enumerate(bs) if b != bs[0]), 0xFFFFFFFF)

    def quads(bs, lanes):
        q = [int(any(bs[4 * i:4 * i + 4])) for i in range(8)]
        return sum(b << i for i, b in enumerate(q)) if lanes == 1 else \
            sum(q[i // 4] << i for i in range(32))
    checks = [("brev_b64", x64, np.uint64, [int(f"{int(v):064b}"[::-1], 2) for v in x64]),
              ("ff0_i32_b32", x32, U32, [first0(b) for b in bits32]),
              ("ff0_i32_b64", x64, U32, [first0(b) for b in bits64]),
              ("flbit_i32", x32, U32, [flbit(v, 32) for v in x32]),
              ("flbit_i32_i64", x64, U32, [flbit(v, 64) for v in x64]),
              ("bcnt0_i32_b64", x64, U32, [64 - sum(b) for b in bits64]),
              ("wqm_b32", x32, U32, [quads(b, 4) for b in bits32]),
              ("quadmask_b32", x32, U32, [quads(b, 1) for b in bits32]),
              ("bitreplicate", x32, np.uint64, [sum(b << (2 * i) | b << (2 * i + 1) for i, b in enumerate(bs))
                                                for bs in bits32]),
              ("bitset1_b64", x32, np.uint64, [0x10 | 1 << (int(v) & 63) for v in x32])]
    for kernel, x, dt, want in checks:
        np.testing.assert_array_equal(_sop(arch, kernel, x, dt), np.array(want, dt), err_msg=kernel)


@pytest.mark.parametrize("arch", ARCHS)
def test_sgpr_relative_move_and_exec_writes(arch):
    xy = rng.integers(0, 2**32, 12, dtype=np.uint64).astype(U32)
    _, out = run(code(arch), "movrels", arch, (6, 1, 1), (64, 1, 1), [xy, np.zeros(6, U32)])
    np.testing.assert_array_equal(out, xy.reshape(6, 2)[np.arange(6), np.arange(6) & 1])
    x = rng.integers(0, 2**63, 4, dtype=np.uint64)
    _, out = run(code(arch), "wrexec", arch, (4, 1, 1), (40, 1, 1), [x, np.zeros(8, np.uint64)])
    ex = np.uint64((1 << 40) - 1)                        # a partial wave: 40 lanes
    np.testing.assert_array_equal(out.reshape(4, 2), np.stack([~x & ex, x & ~ex], 1))


@pytest.mark.parametrize("arch", ARCHS)
def test_lds_atomics_with_colliding_lanes(arch):
    v = rng.integers(-10**6, 10**6, 256).astype(np.int32)
    _, out, out64 = run(code(arch), "lds_atomics_all", arch, (1, 1, 1), (256, 1, 1),
                        [v, np.zeros(512, np.int32), np.zeros(4, np.int64)])
    t = np.arange(256)
    mx = np.array([max(0, v[k::4].max()) for k in range(4)])
    np.testing.assert_array_equal(out[:256], mx[t & 3])
    cleared = [np.bitwise_or.reduce(1 << (t[k::4] & 31)) for k in range(4)]
    final = np.concatenate([np.array([0x0F0F0F0F & ~c for c in cleared]), mx])
    np.testing.assert_array_equal(out[256:], final.astype(np.int32)[t & 7])
    np.testing.assert_array_equal(out64, [int(v[k::4].astype(np.int64).sum()) << 20 for k in range(4)])


@pytest.mark.parametrize("arch", ARCHS)
def test_global_atomics_compare_and_swap_loops(arch):
    n = 200
    v = rng.integers(-1000, 1000, n).astype(np.int32)
    _, cnt, acc, out = run(code(arch), "global_atomics", arch, (4, 1, 1), (50, 1, 1),
                           [v, np.zeros(3, np.int32), np.array([5, -10**9], np.int64), np.zeros(n, np.int32)])
    assert cnt[0] == v.sum()
    assert acc[0] == 5 + int(v.astype(np.int64).sum()) * 1000003 and acc[1] == v.max()
    # the exchanges: every lane's old value was written by another lane of the same parity (or is 0)
    for p in (0, 1):
        seen = set(out[p::2].tolist()) | {int(cnt[1 + p])}
        assert seen == set(range(p, n, 2)) | {0}


@pytest.mark.parametrize("arch", ARCHS)
def test_buffer_atomics_drop_out_of_range_lanes(arch):
    x = rng.integers(0, 1000, 40).astype(np.int32)
    after, old = run(code(arch), "buffer_atomics", arch, (1, 1, 1), (64, 1, 1),
                        [x.copy(), np.zeros(64, np.int32), 30 * 4])
    t = np.arange(64)
    slot = t % 40
    want = x.copy()
    for lane in t:
        if slot[lane] < 30:
            want[slot[lane]] += lane + 1
    np.testing.assert_array_equal(after, want)
    first = np.where(t < 40, x[slot], x[slot] + (t - 40 + 1))   # lanes 40..63 hit a slot lane t-40 hit first
    np.testing.assert_array_equal(old, np.where(slot < 30, first, 0))


@pytest.mark.parametrize("arch", ARCHS)
def test_lds_reads_with_no_active_lane(arch):
    """ds_read_b32 / ds_read_b64 with EXEC = 0 read nothing and leave their destinations as they
    were (the simulator once failed on a read that selected no lane)."""
    x = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(U32)
    _, out = run(code(arch), "ds_read_no_lanes", arch, (1, 1, 1), (64, 1, 1), [x, np.zeros(192, U32)])
    np.testing.assert_array_equal(out[:64], x[128:192])
    np.testing.assert_array_equal(out[64:128], x[192:256])
    np.testing.assert_array_equal(out[128:], ~x[192:256])
