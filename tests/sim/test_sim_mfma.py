"""Every MFMA shape hkjit uses, on both targets: lanes load raw A/B/C registers built from the
documented layouts (the CDNA3/CDNA4 ISA documents), run one MFMA, and D is checked against NumPy."""

import numpy as np
import pytest

from hkjit.sim import fp
from simutil import needs_clang, build, run, bf16

pytestmark = needs_clang

COMMON = [("mfma_bf16_16x16x16", 16, 16, "bf16", "bf16"), ("mfma_bf16_32x32x8", 32, 8, "bf16", "bf16"),
          ("mfma_f16_16x16x16", 16, 16, "f16", "f16"), ("mfma_f16_32x32x8", 32, 8, "f16", "f16"),
          ("mfma_fp8_fp8_16x16x32", 16, 32, "fp8", "fp8"), ("mfma_fp8_bf8_16x16x32", 16, 32, "fp8", "bf8"),
          ("mfma_bf8_fp8_16x16x32", 16, 32, "bf8", "fp8"), ("mfma_bf8_bf8_16x16x32", 16, 32, "bf8", "bf8"),
          ("mfma_fp8_fp8_32x32x16", 32, 16, "fp8", "fp8"), ("mfma_bf8_bf8_32x32x16", 32, 16, "bf8", "bf8")]
CDNA4 = [("mfma_bf16_16x16x32", 16, 32, "bf16", "bf16"), ("mfma_bf16_32x32x16", 32, 16, "bf16", "bf16"),
         ("mfma_f16_16x16x32", 16, 32, "f16", "f16"), ("mfma_f16_32x32x16", 32, 16, "f16", "f16")]
CASES = [("gfx942",) + c for c in COMMON] + [("gfx950",) + c for c in COMMON + CDNA4]


def operand(rng, shape, typ, arch):
    """(raw element bits, their values as float64)."""
    if typ == "bf16":
        bits, vals = bf16(rng.standard_normal(shape).astype(np.float32))
        return bits, vals.astype(np.float64)
    if typ == "f16":
        v = rng.standard_normal(shape).astype(np.float16)
        return v.view(np.uint16), v.astype(np.float64)
    fmt = fp.fp8_formats(arch)[0 if typ == "fp8" else 1]
    bits = rng.integers(0, 256, shape).astype(np.uint8)
    vals = fp.fp8_to_f32(bits, fmt)
    bits[~np.isfinite(vals)] = 0
    return bits, fp.fp8_to_f32(bits, fmt).astype(np.float64)


def lane_layout(M, K):
    """Documented layout: per lane, the K-indices of its A row / B column and the D (row, col) of
    each output register."""
    lanes = np.arange(64)
    kp, R = (K // 4, 4) if M == 16 else (K // 2, 16)
    row, kb = lanes % M, lanes // M
    ks = kb[:, None] * kp + np.arange(kp)
    if M == 16:
        dr = np.array([[4 * (l // 16) + r for r in range(R)] for l in lanes])
    else:
        dr = np.array([[8 * (r // 4) + 4 * (l // 32) + r % 4 for r in range(R)] for l in lanes])
    dc = np.repeat(row[:, None], R, 1)
    return row, ks, dr, dc


@pytest.mark.parametrize("arch,name,M,K,ta,tb", CASES, ids=[f"{c[0]}-{c[1][5:]}" for c in CASES])
def test_mfma_layout(arch, name, M, K, ta, tb):
    rng = np.random.default_rng(hash(name) & 0xFFFF)
    abits, A = operand(rng, (M, K), ta, arch)
    bbits, B = operand(rng, (K, M), tb, arch)
    C = rng.standard_normal((M, M)).astype(np.float32)
    row, ks, dr, dc = lane_layout(M, K)
    a_in = np.ascontiguousarray(abits[row[:, None], ks]).view(np.uint8).copy()
    b_in = np.ascontiguousarray(bbits[ks, row[:, None]]).view(np.uint8).copy()
    c_in = np.ascontiguousarray(C[dr, dc])
    _, _, _, d = run(build("mfma.hip", arch), name, arch, (1, 1, 1), (64, 1, 1),
                     [a_in, b_in, c_in, np.zeros_like(c_in)])
    D = np.zeros((M, M), np.float32)
    D[dr, dc] = d
    ref = (A @ B + C).astype(np.float32)
    np.testing.assert_allclose(D, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("name,M,K", [("mfma_scale_fp8_16x16x128", 16, 128), ("mfma_scale_fp8_32x32x64", 32, 64)])
def test_scaled_mfma_gfx950(name, M, K):
    arch = "gfx950"
    rng = np.random.default_rng(7)
    abits, A = operand(rng, (M, K), "fp8", arch)
    bbits, B = operand(rng, (K, M), "fp8", arch)
    C = rng.standard_normal((M, M)).astype(np.float32)
    row, ks, dr, dc = lane_layout(M, K)
    sa = rng.integers(120, 134, 64).astype(np.int32)   # E8M0 scale byte per lane
    sb = rng.integers(120, 134, 64).astype(np.int32)
    # each lane's scale covers the 32 K-elements it holds
    As = A * np.ldexp(1.0, (sa[(np.arange(M)[:, None] + M * (np.arange(K)[None, :] // 32))] - 127))
    Bs = B * np.ldexp(1.0, (sb[(np.arange(M)[None, :] + M * (np.arange(K)[:, None] // 32))] - 127))
    a_in = np.ascontiguousarray(abits[row[:, None], ks]).view(np.uint8).copy()
    b_in = np.ascontiguousarray(bbits[ks, row[:, None]]).view(np.uint8).copy()
    c_in = np.ascontiguousarray(C[dr, dc])
    _, _, _, d, _, _ = run(build("mfma.hip", arch), name, arch, (1, 1, 1), (64, 1, 1),
                           [a_in, b_in, c_in, np.zeros_like(c_in), sa, sb])
    D = np.zeros((M, M), np.float32)
    D[dr, dc] = d
    ref = (As @ Bs + C).astype(np.float32)
    np.testing.assert_allclose(D, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
