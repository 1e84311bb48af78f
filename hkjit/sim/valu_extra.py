"""More element-wise VALU instructions for valu.T: the forms with a constant K (v_fmamk_f32 & co.),
16-bit integer three-operand ops, sums of absolute differences, packing conversions, dot
products with accumulation into the destination (v_dot*c) and CDNA4's NaN-propagating min/max.
Semantics from the CDNA3/CDNA4 ISA documents; each is a NumPy function of typed sources."""

import numpy as np

from . import fp
from .valu import ACCUMULATE, K_LITERAL, T, op, _med3

U8, U16, U32, I8, I16, I32, I64 = np.uint8, np.uint16, np.uint32, np.int8, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64

# VOP2 instructions whose K operand is the literal that follows the instruction word:
# name -> which source position the literal takes (vsrc1 takes the remaining one)
K_LITERAL.update({"v_fmamk_f32": 1, "v_madmk_f16": 1, "v_fmaak_f32": 2, "v_madak_f16": 2})
# accumulate into the destination like v_fmac_f32: the destination is also the third source
ACCUMULATE.update({"v_dot2c_f32_f16", "v_dot2c_f32_bf16", "v_dot2c_i32_i16", "v_dot4c_i32_i8", "v_dot8c_i32_i4",
                   "v_pk_fmac_f16"})


def _fma(a, b, c, t):
    return (a.astype(F64) * b + c.astype(F64)).astype(t)


def _mad(a, b, c, t):
    return (a * b).astype(t) + c


op("v_fmamk_f32", "f32", ("f32",) * 3, lambda a, k, b: _fma(a, k, b, F32))
op("v_fmaak_f32", "f32", ("f32",) * 3, lambda a, b, k: _fma(a, b, k, F32))
op("v_madmk_f16", "f16", ("f16",) * 3, lambda a, k, b: _mad(a, k, b, F16))
op("v_madak_f16", "f16", ("f16",) * 3, lambda a, b, k: _mad(a, b, k, F16))

# 16-bit integer
op("v_add_i16", "i16", ("i16", "i16"), lambda a, b: a + b)
op("v_sub_i16", "i16", ("i16", "i16"), lambda a, b: a - b)
op("v_mad_i16", "i16", ("i16",) * 3, lambda a, b, c: a * b + c)
for _t in ("i16", "u16"):
    op(f"v_min3_{_t}", _t, (_t,) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
    op(f"v_max3_{_t}", _t, (_t,) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
    op(f"v_med3_{_t}", _t, (_t,) * 3, _med3)


def _lanes(x, width, count, signed=False):
    """(..., ) uint32 -> list of `count` fields of `width` bits, as int64 (sign-extended if signed)."""
    out = []
    for i in range(count):
        v = (x.astype(I64) >> (width * i)) & ((1 << width) - 1)
        if signed:
            v = np.where(v >> (width - 1) & 1, v - (1 << width), v)
        out.append(v)
    return out


def _sad(a, b, width, count):
    return sum(np.abs(x - y) for x, y in zip(_lanes(a, width, count), _lanes(b, width, count)))


op("v_sad_u8", "u32", ("u32",) * 3, lambda a, b, c: (_sad(a, b, 8, 4) + c).astype(U32))
op("v_sad_hi_u8", "u32", ("u32",) * 3, lambda a, b, c: ((_sad(a, b, 8, 4) << 16) + c).astype(U32))
op("v_sad_u16", "u32", ("u32",) * 3, lambda a, b, c: (_sad(a, b, 16, 2) + c).astype(U32))
op("v_sad_u32", "u32", ("u32",) * 3, lambda a, b, c: (np.abs(a.astype(I64) - b) + c).astype(U32))
op("v_lerp_u8", "u32", ("u32",) * 3, lambda a, b, c: sum(
    ((x + y + (r & 1)) >> 1) << (8 * i) for i, (x, y, r) in
    enumerate(zip(_lanes(a, 8, 4), _lanes(b, 8, 4), _lanes(c, 8, 4)))).astype(U32))


def _sat_u8(x):
    return np.clip(np.rint(np.nan_to_num(x.astype(F64))), 0, 255).astype(U32)


def _norm(x, signed):
    x = np.nan_to_num(np.asarray(x, F64))
    if signed:
        return np.rint(np.clip(x, -1, 1) * 32767).astype(I32).astype(U32) & U32(0xFFFF)
    return np.rint(np.clip(x, 0, 1) * 65535).astype(U32)


op("v_cvt_pk_u8_f32", "b32", ("f32", "u32", "u32"), lambda a, s, d: (
    (d & ~(U32(0xFF) << ((s & U32(3)) * U32(8)))) | (_sat_u8(a) << ((s & U32(3)) * U32(8)))))
op("v_cvt_pknorm_i16_f16", "b32", ("f16", "f16"), lambda a, b: _norm(a, True) | (_norm(b, True) << U32(16)))
op("v_cvt_pknorm_u16_f16", "b32", ("f16", "f16"), lambda a, b: _norm(a, False) | (_norm(b, False) << U32(16)))
op("v_cvt_norm_i16_f16", "i16", ("f16",), lambda a: _norm(a, True).astype(U16).view(I16))
op("v_cvt_norm_u16_f16", "u16", ("f16",), lambda a: _norm(a, False).astype(U16))
op("v_cvt_off_f32_i4", "f32", ("u32",), lambda a: _lanes(a, 4, 1, True)[0].astype(F32) / F32(16))
op("v_sat_pk_u8_i16", "b32", ("u32",), lambda a: sum(
    np.clip(x, 0, 255) << (8 * i) for i, x in enumerate(_lanes(a, 16, 2, True))).astype(U32))


# dot products accumulating into the destination
def _halves_f(x, bf):
    lo, hi = x & U32(0xFFFF), x >> U32(16)
    cvt = fp.bf16_to_f32 if bf else fp.f16_to_f32
    return cvt(lo).astype(F64), cvt(hi).astype(F64)


def _dot2f(a, b, c, bf):
    (a0, a1), (b0, b1) = _halves_f(a, bf), _halves_f(b, bf)
    return (a0 * b0 + a1 * b1 + c.astype(F64)).astype(F32)


def _idot(a, b, c, width, count, signed):
    acc = c.astype(I64)
    for x, y in zip(_lanes(a, width, count, signed), _lanes(b, width, count, signed)):
        acc = acc + x * y
    return (acc & 0xFFFFFFFF).astype(U32).view(I32)


op("v_dot2c_f32_f16", "f32", ("u32", "u32", "f32"), lambda a, b, c: _dot2f(a, b, c, False))
op("v_dot2c_f32_bf16", "f32", ("u32", "u32", "f32"), lambda a, b, c: _dot2f(a, b, c, True))
op("v_dot2c_i32_i16", "i32", ("u32", "u32", "i32"), lambda a, b, c: _idot(a, b, c, 16, 2, True))
op("v_dot4c_i32_i8", "i32", ("u32", "u32", "i32"), lambda a, b, c: _idot(a, b, c, 8, 4, True))
op("v_dot8c_i32_i4", "i32", ("u32", "u32", "i32"), lambda a, b, c: _idot(a, b, c, 4, 8, True))


def _pk_fma16(a, b, c):
    out = U32(0)
    for sh in (0, 16):
        x, y, z = [((v >> U32(sh)) & U32(0xFFFF)).astype(U16).view(F16) for v in (a, b, c)]
        r = (x.astype(F64) * y + z.astype(F64)).astype(F16)
        out = out | (r.view(U16).astype(U32) << U32(sh))
    return out


op("v_pk_fmac_f16", "b32", ("b32",) * 3, _pk_fma16)


# CDNA4: IEEE 754-2019 minimum / maximum: NaN in, NaN out; -0 < +0
def minimum(a, b):
    r = np.where(a < b, a, b)
    r = np.where((a == b) & np.signbit(a), a, r)
    return np.where(np.isnan(a) | np.isnan(b), a + b, r)


def maximum(a, b):
    r = np.where(a > b, a, b)
    r = np.where((a == b) & ~np.signbit(a), a, r)
    return np.where(np.isnan(a) | np.isnan(b), a + b, r)


op("v_minimum3_f32", "f32", ("f32",) * 3, lambda a, b, c: minimum(minimum(a, b), c))
op("v_maximum3_f32", "f32", ("f32",) * 3, lambda a, b, c: maximum(maximum(a, b), c))

assert set(K_LITERAL) | ACCUMULATE <= set(T)
