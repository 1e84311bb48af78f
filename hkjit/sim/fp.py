"""Number formats: bf16, fp8 (OCP e4m3fn / e5m2 on gfx950, FNUZ e4m3fnuz / e5m2fnuz on gfx942),
and conversions with round-to-nearest-even, all on NumPy arrays of raw bits."""

import numpy as np


def bf16_to_f32(bits):
    """uint16 (or the low 16 bits of wider ints) -> float32."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 -> uint16 bf16 bits, round to nearest even; NaN stays (quiet) NaN."""
    u = np.asarray(x, np.float32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, (u >> 16) | np.uint32(0x40), r).astype(np.uint16)


def f16_to_f32(bits):
    return np.asarray(bits).astype(np.uint16).view(np.float16).astype(np.float32)


def f32_to_f16(x):
    return np.asarray(x, np.float32).astype(np.float16).view(np.uint16)


# ---------------------------------------------------------------- fp8
# (exponent bits, mantissa bits, bias, fnuz); fnuz formats have no -0/inf: 0x80 is the only NaN
FP8 = {
    "e4m3fn": (4, 3, 7, False),     # OCP (gfx950): no inf, S.1111.111 is NaN, max 448
    "e5m2": (5, 2, 15, False),      # OCP (gfx950): IEEE-like, inf and NaN
    "e4m3fnuz": (4, 3, 8, True),    # gfx942: max 240
    "e5m2fnuz": (5, 2, 16, True),   # gfx942: max 57344
}


def _fp8_table(fmt):
    e_bits, m_bits, bias, fnuz = FP8[fmt]
    v = np.arange(256)
    s = v >> 7
    e = (v >> m_bits) & ((1 << e_bits) - 1)
    m = v & ((1 << m_bits) - 1)
    mag = np.where(e == 0, m / (1 << m_bits) * 2.0 ** (1 - bias),
                   (1 + m / (1 << m_bits)) * 2.0 ** (e.astype(np.float64) - bias))
    out = np.where(s == 1, -mag, mag)
    if fnuz:
        out[0x80] = np.nan
    elif fmt == "e4m3fn":
        out[0x7F] = out[0xFF] = np.nan
    else:  # e5m2: exponent all ones -> inf / nan
        top = e == (1 << e_bits) - 1
        out = np.where(top & (m == 0), np.where(s == 1, -np.inf, np.inf), out)
        out = np.where(top & (m != 0), np.nan, out)
    return out.astype(np.float32)


FP8_TABLES = {fmt: _fp8_table(fmt) for fmt in FP8}


def fp8_formats(arch):
    """(fp8, bf8) format names the MFMAs and conversions of a target use."""
    return ("e4m3fnuz", "e5m2fnuz") if arch == "gfx942" else ("e4m3fn", "e5m2")


def fp8_to_f32(bits, fmt):
    return FP8_TABLES[fmt][np.asarray(bits).astype(np.uint8)]


def _fp8_encode_tables(fmt):
    t = FP8_TABLES[fmt]
    codes = np.array([c for c in range(128) if np.isfinite(t[c])], np.int64)
    vals = t[codes].astype(np.float64)
    order = np.argsort(vals, kind="stable")
    return vals[order], codes[order]


_ENC = {fmt: _fp8_encode_tables(fmt) for fmt in FP8}


def f32_to_fp8(x, fmt, saturate=True):
    """float -> fp8 bits, round to nearest even. Out-of-range values saturate to the largest finite
    value when `saturate` (the clamp bit of the conversion instructions), else become NaN/inf."""
    e_bits, m_bits, bias, fnuz = FP8[fmt]
    x = np.asarray(x, np.float64)
    vals, codes = _ENC[fmt]
    a = np.abs(x)
    i = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo, hi = vals[i - 1], vals[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (codes[i] % 2 == 0))
    code = np.where(pick_hi, codes[i], codes[i - 1])
    maxv = vals[-1]
    # beyond the largest finite value: round-to-nearest may still land on it (below max + half ulp)
    half_ulp = (vals[-1] - vals[-2]) / 2
    over = a >= maxv + half_ulp
    code = np.where(a > maxv, codes[-1], code)
    sign = np.where(np.signbit(x), 0x80, 0)
    code = code | sign
    if fnuz:
        code = np.where((code & 0x7F) == 0, 0, code)  # FNUZ has no negative zero
    if not saturate:   # overflow: NaN (no inf in e4m3fn / FNUZ formats), inf for e5m2
        ovf = 0x80 if fnuz else (0x7F if fmt == "e4m3fn" else 0x7C)
        code = np.where(over, np.where(fnuz, ovf, ovf | sign), code)
    nan_code = 0x80 if fnuz else (0x7F if fmt == "e4m3fn" else 0x7E)
    code = np.where(np.isnan(x), nan_code, code)
    return code.astype(np.uint8)


def e8m0_to_f32(bits):
    """MX scale bytes: 2^(e-127); 0xFF is NaN."""
    e = np.asarray(bits).astype(np.int32)
    out = np.ldexp(np.float32(1.0), e - 127).astype(np.float32)
    return np.where(e == 255, np.float32(np.nan), out)
