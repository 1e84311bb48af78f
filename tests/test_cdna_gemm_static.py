"""CDNA GEMM, static checks (no AMD GPU needed):

* every default configuration compiles for gfx942 and gfx950 with clang-22: 0 spills, LDS within
  the limit, MFMA instructions per K-step (main loop of the disassembly) = tile arithmetic, kernel
  symbol `hkjit_gemm`, kernarg size = ctypes Args, every direct-to-LDS load's soffset the constant 0;
* override validation errors;
* a NumPy model of the tile -> lane data path (direct-to-LDS chunk placement with the swizzles,
  fragment reads incl. ds_read_b64_tr_b16 semantics, MFMA operand/accumulator layouts, epilogue
  coordinates, ragged-K zeroing), checked against A @ B.
"""

import ctypes
import shutil

import numpy as np
import pytest

from hkjit.ops import _cdna_gemm_report as report
from hkjit.errors import InvalidArgumentError
from hkjit.ops import _cdna_gemm as G
from hkjit.targets import parse

from conftest import HAVE_CLANG

needs_clang = pytest.mark.skipif(not HAVE_CLANG or not shutil.which("llvm-objdump-22"),
                                 reason="clang-22 / llvm-objdump-22 not installed (apt-get install clang-22 llvm-22)")

_CONFIGS = report.cdna_gemm_default_configs() + [
    (a, f"dtype {i}->{o}", G.choose_config(8192, 8192, 8192, True, False, i, o, parse(a), {}))
    for a in ("gfx950", "gfx942") for i, o in (("float16", "float16"), ("float16", "float32"), ("bfloat16", "float32"))
] + [
    (a, f"mfma {m}", G.choose_config(8192, 8192, 8192, True, True, "bfloat16", "bfloat16", parse(a), {"mfma": m}))
    for a, m in (("gfx950", "32x32x16"), ("gfx942", "32x32x8"))
]


@needs_clang
@pytest.mark.parametrize("arch,label,cfg", _CONFIGS, ids=[f"{a}-{l}" for a, l, _ in _CONFIGS])
def test_default_config_compiles_clean(arch, label, cfg):
    r = report.cdna_gemm_static(arch, cfg)
    n, s = r["notes"], r["stats"]
    assert "hkjit_gemm" in n["symbols"]
    assert n["vgpr_spill_count"] == 0 and n["sgpr_spill_count"] == 0
    assert n["private_segment_fixed_size"] == 0 and s["scratch"] == 0
    assert n["group_segment_fixed_size"] == G.lds_bytes(cfg) <= parse(arch).smem_per_block
    assert n["vgpr_count"] + n.get("agpr_count", 0) <= (256 if cfg["waves"] == 8 else 512)
    if cfg["waves"] == 8:
        assert r["occupancy"] >= 2  # one 8-wave block per CU at least
    # MFMAs in the main loop: one K-step per wave; x waves = block arithmetic
    assert r["mfma_per_kstep_block"] == r["mfma_expected"], (r["stats"], cfg)
    assert all(op.startswith(f"v_mfma_f32_{cfg['mfma_m']}x{cfg['mfma_m']}x{cfg['mfma_k']}") for op in s["mfma_ops"])
    # every A and B byte of a K-step arrives by direct-to-LDS loads
    per_wave = (cfg["block_m"] + cfg["block_n"]) * cfg["block_k"] * 2 // (64 * cfg["load_bytes"] * cfg["waves"])
    assert s["lds_dma_loop"] == per_wave
    # no direct-to-LDS load carries an address part in soffset (outside the buffer range check)
    assert s["lds_dma_total"] > 0 and s["lds_dma_soffset"] == 0
    assert n["args_size"] == ctypes.sizeof(G.Args) == 128


def test_default_table():
    g950, g942 = parse("gfx950"), parse("gfx942")
    c = G.choose_config(8192, 8192, 8192, True, True, "bf16", "bf16", g950, {})
    assert (c["block_m"], c["block_n"], c["block_k"], c["waves"], c["stages"], c["mfma_k"]) == (256, 256, 64, 8, 2, 32)
    assert c["pingpong"] and c["lds_bytes"] == 128 * 1024 and c["load_bytes"] == 16
    c = G.choose_config(8192, 8192, 8192, True, True, "bf16", "bf16", g942, {})
    assert (c["block_m"], c["block_n"], c["block_k"], c["mfma_k"], c["lds_bytes"], c["load_bytes"]) == (256, 256, 32, 16, 65536, 4)
    assert G.choose_config(2048, 2048, 2048, True, True, "bf16", "bf16", g950, {})["block_m"] == 128
    assert G.choose_config(1, 1, 1, True, True, "bf16", "bf16", g950, {})["block_m"] == 64
    assert G.choose_config(8192, 8192, 64, True, True, "bf16", "bf16", g950, {}, alignment=8)["load_bytes"] == 4
    c = G.choose_config(100, 200, 300, False, True, "float16", "float32", "gfx950", {"block_k": 32, "group_m": 4})
    assert G.template_args(c) == "hk::half, float, 64, 64, 32, 4, 2, 4, false, true, 16, 32, 16"
    assert G.grid(100, 200, 300, c) == (2 * 4, 1, 1) and G.threads(c) == 256 and G.dynamic_smem(c) == 0


@pytest.mark.parametrize("arch,ov,needle", [
    ("gfx950", {"tile": 3}, "unknown tile override"),
    ("gfx950", {"block_m": 256, "block_n": 256, "block_k": 128}, "LDS limit"),
    ("gfx942", {"block_k": 64}, "65536-byte LDS"),
    ("gfx942", {"mfma": "16x16x32"}, "valid choices: 16x16x16, 32x32x8"),
    ("gfx950", {"mfma": "8x8x4"}, "valid choices"),
    ("gfx950", {"waves": 6}, "valid choices: 4, 8"),
    ("gfx950", {"stages": 3}, "valid choices: 1, 2"),
    ("gfx950", {"block_m": 96}, "block_m=96"),
    ("gfx950", {"block_n": 48}, "block_n=48"),
    ("gfx950", {"block_k": 48}, "block_k"),
    ("gfx950", {"block_m": 512, "block_n": 512, "block_k": 32}, "VGPR budget"),
    ("gfx950", {"group_m": 0}, "group_m must be >= 1"),
    ("gfx950", {"block_m": True}, "must be an int"),
])
def test_override_validation(arch, ov, needle):
    with pytest.raises(InvalidArgumentError, match=needle):
        G.choose_config(8192, 8192, 8192, True, True, "bfloat16", "bfloat16", parse(arch), ov)


def test_argument_validation():
    t = parse("gfx950")
    with pytest.raises(InvalidArgumentError, match="M must be"):
        G.choose_config(0, 1, 1, True, True, "bfloat16", "bfloat16", t, {})
    with pytest.raises(InvalidArgumentError, match="in_dtype"):
        G.choose_config(1, 1, 1, True, True, "float32", "bfloat16", t, {})
    with pytest.raises(InvalidArgumentError, match="gfx942 and gfx950"):
        G.choose_config(1, 1, 1, True, True, "bfloat16", "bfloat16", parse("sm_90a"), {})
    with pytest.raises(InvalidArgumentError, match="alignment"):
        G.choose_config(1, 1, 1, True, True, "bfloat16", "bfloat16", t, {}, alignment=2)
    c = G.choose_config(300, 300, 300, True, True, "bfloat16", "bfloat16", t, {})
    a = G.make_args(c, 4096, (304, 1), 8192, (1, 304), 1 << 20, (300, 1), 300, 300, 300, alpha=2.0)
    assert (a.M, a.N, a.K, a.a_stride_m, a.b_stride_n, a.alpha, a.beta, a.bias) == (300, 300, 300, 304, 304, 2.0, 0.0, None)
    with pytest.raises(InvalidArgumentError, match="aligned to 16"):
        G.make_args(c, 4096, (300, 1), 8192, (1, 304), 0, (300, 1), 300, 300, 300)   # 600-byte rows
    with pytest.raises(InvalidArgumentError, match="unit stride"):
        G.make_args(c, 4096, (1, 304), 8192, (1, 304), 0, (300, 1), 300, 300, 300)


def test_block_remap_is_bijective():
    def xcd_remap(b, n, x=8):
        if n < x:
            return b
        per = -(-n // x)
        tall = n - (per - 1) * x
        xc, loc = b % x, b // x
        return xc * per + loc if xc < tall else tall * per + (xc - tall) * (per - 1) + loc

    def group_m(pid, tm, tn, gm):
        ing = gm * tn
        first = pid // ing * gm
        size = min(tm - first, gm)
        return first + pid % ing % size, pid % ing // size

    for tm, tn in ((1, 1), (3, 5), (8, 8), (17, 9), (32, 32), (5, 40)):
        n = tm * tn
        ids = [xcd_remap(b, n) for b in range(n)]
        assert sorted(ids) == list(range(n))
        # consecutive ids of one XCD (b, b+8, ...) are consecutive logical ids
        if n >= 16:
            assert ids[8] == ids[0] + 1
        tiles = {group_m(p, tm, tn, 8) for p in ids}
        assert tiles == {(i, j) for i in range(tm) for j in range(tn)}


# ---------------------------------------------------------------------------------------------
# NumPy model of the data path (mirrors include/hk/cdna/types.hpp, memory.hpp, mfma.hpp and the
# kernel's wave/tile arithmetic).
_UNIT = {"k16": 16, "k8": 8, "mn_tr": 16, "mn_u16": 32}


def _f(kind, r, units):
    if kind == "k16":
        return ((r ^ (r >> 3)) & 7) if units == 8 else (r // (1 if units >= 16 else 16 // units)) & (units - 1)
    if kind == "k8":
        return (r // (1 if units >= 16 else 16 // units)) & (units - 1)
    if kind == "mn_tr":
        return 2 * ((r & 3) | ((r >> 1) & 4))
    return (r >> 2) & 3


class Tile:
    def __init__(self, kind, rows, cols):
        self.kind, self.rows, self.cols = kind, rows, cols
        self.rb, self.u = cols * 2, _UNIT[kind]
        self.units = self.rb // self.u
        self.mem = np.full(rows * cols, np.nan)   # 16-bit elements, by byte offset / 2

    def offset(self, r, c):
        b = c * 2
        return r * self.rb + (((b // self.u) ^ (_f(self.kind, r, self.units) & (self.units - 1))) * self.u) + b % self.u

    def col_of(self, r, b):
        return ((((b // self.u) ^ (_f(self.kind, r, self.units) & (self.units - 1))) * self.u) + b % self.u) // 2


def _load_tile(tile, src, nw, ch):
    """Direct-to-LDS: instruction (i*nw+w) of wave w writes LDS bytes [.., +64*ch); lane l fetches
    the global chunk whose logical (r, c) the swizzle puts at its LDS position. src is the
    matrix region with zeros beyond the matrix (what buffer num_records gives)."""
    ib = 64 * ch
    ni = tile.rows * tile.rb // ib
    assert ni % nw == 0
    for g in range(ni):
        for l in range(64):
            p = g * ib + l * ch
            r, b = divmod(p, tile.rb)
            c = tile.col_of(r, b)
            tile.mem[p // 2: p // 2 + ch // 2] = src[r, c: c + ch // 2]


def _read_row(tile, r0, c0, mn, kd, mi, mk):
    """row_l fragment: frag[i][k][l] = E elements."""
    g_, e = 64 // mi, mk // (64 // mi)
    out = np.zeros((mn // mi, kd // mk, 64, e))
    for i in range(mn // mi):
        for k in range(kd // mk):
            for l in range(64):
                r, kk = r0 + i * mi + l % mi, k * mk + e * (l // mi)
                o = tile.offset(r, c0 + kk) // 2
                out[i, k, l] = tile.mem[o: o + e]
    return out


def _read_col(tile, r0, c0, mn, kd, mi, mk, tr):
    e = mk // (64 // mi)
    out = np.zeros((mn // mi, kd // mk, 64, e))
    for i in range(mn // mi):
        for k in range(kd // mk):
            if tr:  # ds_read_b64_tr_b16 per the ISA note: dst[l][n] = src[(l&~15)+((l>>2)&3)+4n][l&3]
                for h in range(e // 4):
                    src = np.zeros((64, 4))
                    for l in range(64):
                        s, kk = l & 15, k * mk + e * (l // mi)
                        col = c0 + i * mi + ((l % mi) & ~15) + 4 * (s & 3)
                        o = tile.offset(r0 + kk + 4 * h + (s >> 2), col) // 2
                        src[l] = tile.mem[o: o + 4]
                    for l in range(64):
                        for n in range(4):
                            out[i, k, l, 4 * h + n] = src[(l & ~15) + ((l >> 2) & 3) + 4 * n][l & 3]
            else:
                for l in range(64):
                    kk = k * mk + e * (l // mi)
                    for j in range(e):
                        out[i, k, l, j] = tile.mem[tile.offset(r0 + kk + j, c0 + i * mi + l % mi) // 2]
    return out


def _mfma(a, b, mi, mk):
    """One MFMA from per-lane operands (the ISA references' layouts); returns acc[l][v]."""
    e = mk // (64 // mi)
    A, B = np.zeros((mi, mk)), np.zeros((mk, mi))
    for l in range(64):
        for j in range(e):
            A[l % mi, e * (l // mi) + j] = a[l, j]
            B[e * (l // mi) + j, l % mi] = b[l, j]
    D = A @ B
    g_ = 64 // mi
    acc = np.zeros((64, mi * mi // 64))
    for l in range(64):
        for v in range(mi * mi // 64):
            acc[l, v] = D[4 * g_ * (v // 4) + 4 * (l // mi) + v % 4, l % mi]
    return acc


def _model_gemm(A, B, bm, bn, bk, waves, mi, mk, ch, a_km, b_km, kinds):
    """C for block (0, 0) of A @ B through the modelled data path."""
    M, K = A.shape
    N = B.shape[1]
    wm, wn = 2, waves // 2
    wtm, wtn = bm // wm, bn // wn
    half = wtm // 2
    Ap = np.zeros((bm, -(-K // bk) * bk + 64))
    Ap[:min(M, bm), :K] = A[:bm]
    Bp = np.zeros((-(-K // bk) * bk + 64, bn))
    Bp[:K, :min(N, bn)] = B[:, :bn]
    # garbage beyond K that only the tail zeroing removes (K-major rows wrap into the next row)
    Ap[:, K:] = 7.0
    Bp[K:, :] = 5.0
    C = np.zeros((bm, bn))
    T = -(-K // bk)
    for t in range(T):
        kl = K - t * bk
        ta = Tile(kinds[0] if a_km else kinds[1], bm if a_km else bk, bk if a_km else bm)
        tb = Tile(kinds[0] if b_km else kinds[1], bn if b_km else bk, bk if b_km else bn)
        asrc = Ap[:, t * bk:(t + 1) * bk + 64]
        bsrc = Bp[t * bk:(t + 1) * bk + 64, :]
        _load_tile(ta, asrc if a_km else np.ascontiguousarray(asrc.T), waves, ch)
        _load_tile(tb, np.ascontiguousarray(bsrc.T) if b_km else bsrc, waves, ch)
        if kl < bk:  # tail zeroing (hk::zero_region)
            for tile, km, ext in ((ta, a_km, bm), (tb, b_km, bn)):
                for x in range(ext):
                    for k in range(kl, bk):
                        o = tile.offset(x, k) if km else tile.offset(k, x)
                        tile.mem[o // 2] = 0.0
        assert not np.isnan(ta.mem).any() and not np.isnan(tb.mem).any()
        for w in range(waves):
            wr, wc = w // wn, w % wn
            arow, bcol = wr * wtm, wc * wtn
            fb = _read_row(tb, bcol, 0, wtn, bk, mi, mk) if b_km else _read_col(tb, 0, bcol, wtn, bk, mi, mk, kinds[1] == "mn_tr")
            for h in range(2):
                r0 = arow + h * half
                fa = _read_row(ta, r0, 0, half, bk, mi, mk) if a_km else _read_col(ta, 0, r0, half, bk, mi, mk, kinds[1] == "mn_tr")
                for i in range(half // mi):
                    for j in range(wtn // mi):
                        acc = sum(_mfma(fa[i, k], fb[j, k], mi, mk) for k in range(bk // mk))
                        for l in range(64):
                            for v in range(mi * mi // 64):
                                m = r0 + i * mi + 4 * (64 // mi) * (v // 4) + 4 * (l // mi) + v % 4
                                C[m, bcol + j * mi + l % mi] += acc[l, v]
    return C


@pytest.mark.parametrize("arch,mi,mk", [("gfx950", 16, 32), ("gfx950", 32, 16), ("gfx942", 16, 16), ("gfx942", 32, 8)])
@pytest.mark.parametrize("a_km,b_km", [(True, True), (True, False), (False, True), (False, False)])
def test_numpy_model_of_data_path(arch, mi, mk, a_km, b_km):
    rng = np.random.default_rng(0)
    bm, bn, bk, waves = 128, 128, 64, 4
    M, N, K = 128, 128, 100     # two K-steps, the second ragged
    kinds = ("k16", "mn_tr") if arch == "gfx950" else ("k8", "mn_u16")
    ch = 16 if arch == "gfx950" else 4
    A = rng.integers(-3, 4, (M, K)).astype(float)
    B = rng.integers(-3, 4, (K, N)).astype(float)
    C = _model_gemm(A, B, bm, bn, bk, waves, mi, mk, ch, a_km, b_km, kinds)
    np.testing.assert_array_equal(C, A @ B)


@pytest.mark.parametrize("kind,rows,cols", [("k16", 64, 64), ("k16", 16, 32), ("k8", 32, 32), ("k8", 16, 64),
                                            ("mn_tr", 64, 256), ("mn_tr", 64, 64), ("mn_u16", 32, 256)])
def test_swizzle_is_a_bijection_per_row(kind, rows, cols):
    t = Tile(kind, rows, cols)
    for r in range(rows):
        offs = sorted(t.offset(r, c) for c in range(cols))
        assert offs == list(range(r * cols * 2, (r + 1) * cols * 2, 2))
        for c in range(cols):
            o = t.offset(r, c)
            assert t.col_of(r, o - r * cols * 2) == c


def _conflicts(addrs_bytes, nbytes, banks, phase):
    """Max bank conflict degree over phases of `phase` lanes (distinct words in one bank)."""
    worst = 1
    for p0 in range(0, 64, phase):
        per_bank = {}
        for a in addrs_bytes[p0:p0 + phase]:
            for w in range(a // 4, (a + nbytes) // 4):
                per_bank.setdefault(w % banks, set()).add(w)
        worst = max(worst, max(len(s) for s in per_bank.values()))
    return worst


def test_kmajor_fragment_reads_are_bank_conflict_free():
    # gfx950: ds_read_b128, 64 banks, 16-lane phases (and 32 banks, 8-lane phases) on 128-byte rows
    t = Tile("k16", 256, 64)
    for kc in range(0, 64, 32):
        addrs = [t.offset(l % 16, kc + 8 * (l // 16)) for l in range(64)]
        assert _conflicts(addrs, 16, 64, 16) == 1
        assert _conflicts(addrs, 16, 32, 8) == 1
    # gfx942: ds_read_b64, 32 banks, 16-lane phases on 64-byte rows
    t = Tile("k8", 256, 32)
    for kc in range(0, 32, 16):
        addrs = [t.offset(l % 16, kc + 4 * (l // 16)) for l in range(64)]
        assert _conflicts(addrs, 8, 32, 16) == 1
