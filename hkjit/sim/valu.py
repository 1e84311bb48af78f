"""Element-wise vector ALU instructions (VOP1, VOP2, VOP3) from one table, T, with VOP3 modifiers
(abs, neg, clamp, omod, op_sel), DPP and SDWA. Compares: vopc.py; the others: vspecial.py,
vop3p.py, mfma.py."""

import contextlib

import numpy as np

from . import coverage, fp

U16, U32, U64, I16, I32, I64 = np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64
VIEW = {"u32": U32, "i32": I32, "f32": F32, "b32": U32, "u16": U16, "i16": I16, "f16": F16, "b16": U16,
        "u64": U64, "i64": I64, "f64": F64, "b64": U64}
WIDTH = {k: (16 if k[1:] == "16" else 64 if k[1:] == "64" else 32) for k in VIEW}
errstate = contextlib.nullcontext()   # floating-point warnings are silenced for a whole launch


def _cvt_f2i(x, lo, hi, t):
    x = np.asarray(x, F64)
    r = np.where(np.isnan(x), 0, np.clip(np.trunc(x), lo, hi))
    return r.astype(t)


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _fmed3(a, b, c):
    return np.fmax(np.fmin(a, b), np.fmin(np.fmax(a, b), c))


def _bfe(x, off, width, signed):
    off = off.astype(U32) & U32(31)
    width = width.astype(U32) & U32(31)
    x = x.astype(U64)
    v = (x >> off.astype(U64)) & ((U64(1) << width.astype(U64)) - U64(1))
    if signed:
        sh = (U64(64) - width.astype(U64))
        v = np.where(width == 0, U64(0), ((v << sh).view(I64) >> sh.astype(I64)).view(U64))
    return v.astype(U32)


def _perm(a, b, sel):
    """v_perm_b32: byte i of the result is picked by byte i of sel from the 8 bytes {src0, src1}
    (src1 low): 0-7 a byte, 8-11 the sign of byte 1/3/5/7 replicated, 12 zero, 13-15 0xFF."""
    if sel.size == 1 or (sel.shape[-1] == 1 and (sel == sel.reshape(-1)[0]).all()):
        # one selector for all lanes (a constant or an SGPR, the usual case): shifts and masks
        return _perm_const(a, b, int(sel.reshape(-1)[0]))
    a, b, sel = np.broadcast_arrays(a.astype(U32), b.astype(U32), sel.astype(U32))
    data = np.stack([b, a], -1).view(np.uint8)                            # (..., 8) bytes
    sign = np.where(data[..., 1::2] >> 7, np.uint8(0xFF), np.uint8(0))     # (..., 4)
    consts = np.broadcast_to(np.array([0, 0xFF, 0xFF, 0xFF], np.uint8), data.shape[:-1] + (4,))
    table = np.concatenate([data, sign, consts], -1)                       # (..., 16)
    pick = np.minimum(np.ascontiguousarray(sel).view(np.uint8).reshape(sel.shape + (4,)), 15)
    return np.ascontiguousarray(np.take_along_axis(table, pick.astype(np.intp), -1)).view(U32)[..., 0]


def _perm_const(a, b, sel):
    data = a.astype(U64) << U64(32) | b.astype(U64)
    out = None
    for i in range(4):
        s = sel >> (8 * i) & 0xFF
        if s < 8:
            byte = (data >> U64(8 * s)) & U64(0xFF)
        elif s < 12:
            byte = np.where(data >> U64(8 * (2 * (s - 8) + 1) + 7) & U64(1), U64(0xFF), U64(0))
        else:
            byte = U64(0 if s == 12 else 0xFF)
        out = byte << U64(8 * i) if out is None else out | byte << U64(8 * i)
    return np.broadcast_to(out, np.broadcast_shapes(a.shape, b.shape)).astype(U32)


def _frexp_exp(x):
    m, e = np.frexp(x)
    return np.where(np.isfinite(x), e, 0).astype(I32)


def _frexp_mant(x):
    m, e = np.frexp(x)
    return np.where(np.isfinite(x), m, x)


def _clz(x, bits):
    x = x.astype(U64)
    out = np.full(x.shape, 0xFFFFFFFF, U64)
    for b in range(bits - 1, -1, -1):
        out = np.where((out == 0xFFFFFFFF) & ((x >> U64(b)) & U64(1) == 1), U64(bits - 1 - b), out)
    return out.astype(U32)


def _ctz(x):
    x = x.astype(U64)
    out = np.full(x.shape, 0xFFFFFFFF, U64)
    for b in range(31, -1, -1):
        out = np.where((x >> U64(b)) & U64(1) == 1, U64(b), out)
    return out.astype(U32)


def _popcount32(x):
    x = np.asarray(x, U32)
    b = np.unpackbits(x[..., None].view(np.uint8), axis=-1)
    return b.sum(-1, dtype=U32)


def _div_fixup(q, d, n):
    # q: quotient estimate, d: denominator, n: numerator (IEEE special cases)
    with errstate:
        exact = n / d
    special = ~np.isfinite(n) | ~np.isfinite(d) | (d == 0) | (n == 0) | np.isnan(q)
    return np.where(special, exact.astype(q.dtype), q)


# name -> (dst kind, (src kinds...), fn); more in valu_extra.py
T = {}
K_LITERAL = {}       # VOP2 with a constant K from the trailing literal: name -> K's source position
ACCUMULATE = set()   # ops whose third source is the destination (like v_fmac_f32)


def op(name, dk, sks, fn):
    T[name] = (dk, sks, fn)


for s, t in (("f32", F32), ("f16", F16)):
    op(f"v_add_{s}", s, (s, s), lambda a, b: a + b)
    op(f"v_sub_{s}", s, (s, s), lambda a, b: a - b)
    op(f"v_subrev_{s}", s, (s, s), lambda a, b: b - a)
    op(f"v_mul_{s}", s, (s, s), lambda a, b: a * b)
    op(f"v_min_{s}", s, (s, s), np.fmin)
    op(f"v_max_{s}", s, (s, s), np.fmax)
    op(f"v_min3_{s}", s, (s, s, s), lambda a, b, c: np.fmin(np.fmin(a, b), c))
    op(f"v_max3_{s}", s, (s, s, s), lambda a, b, c: np.fmax(np.fmax(a, b), c))
    op(f"v_med3_{s}", s, (s, s, s), _fmed3)
    op(f"v_fma_{s}", s, (s, s, s), lambda a, b, c, t=t: (a.astype(F64) * b + c.astype(F64)).astype(t))
    op(f"v_mad_{s}", s, (s, s, s), lambda a, b, c, t=t: (a * b).astype(t) + c)
    op(f"v_fmac_{s}", s, (s, s, s), lambda a, b, c, t=t: (a.astype(F64) * b + c.astype(F64)).astype(t))
    op(f"v_mac_{s}", s, (s, s, s), lambda a, b, c, t=t: (a * b).astype(t) + c)
    op(f"v_rcp_{s}", s, (s,), lambda a, t=t: (t(1) / a.astype(F64)).astype(t))
    op(f"v_rsq_{s}", s, (s,), lambda a, t=t: (1 / np.sqrt(a.astype(F64))).astype(t))
    op(f"v_sqrt_{s}", s, (s,), lambda a, t=t: np.sqrt(a.astype(F64)).astype(t))
    op(f"v_exp_{s}", s, (s,), lambda a, t=t: np.exp2(a.astype(F64)).astype(t))
    op(f"v_log_{s}", s, (s,), lambda a, t=t: np.log2(a.astype(F64)).astype(t))
    op(f"v_sin_{s}", s, (s,), lambda a, t=t: np.sin(a.astype(F64) * 2 * np.pi).astype(t))
    op(f"v_cos_{s}", s, (s,), lambda a, t=t: np.cos(a.astype(F64) * 2 * np.pi).astype(t))
    op(f"v_floor_{s}", s, (s,), np.floor)
    op(f"v_ceil_{s}", s, (s,), np.ceil)
    op(f"v_trunc_{s}", s, (s,), np.trunc)
    op(f"v_rndne_{s}", s, (s,), np.rint)
    op(f"v_fract_{s}", s, (s,), lambda a, t=t: np.where(np.isfinite(a), np.minimum(a - np.floor(a), t(1) - np.finfo(t).epsneg), a))
    op(f"v_frexp_mant_{s}", s, (s,), _frexp_mant)
    op(f"v_div_fixup_{s}", s, (s, s, s), _div_fixup)
op("v_ldexp_f32", "f32", ("f32", "i32"), lambda a, b: np.ldexp(a, np.clip(b, -300, 300)).astype(F32))
op("v_ldexp_f16", "f16", ("f16", "i16"), lambda a, b: np.ldexp(a, np.clip(b, -300, 300)).astype(F16))
op("v_mul_legacy_f32", "f32", ("f32", "f32"), lambda a, b: np.where((a == 0) | (b == 0), F32(0), a * b))
op("v_rcp_iflag_f32", "f32", ("f32",), lambda a: (1 / a.astype(F64)).astype(F32))
op("v_exp_legacy_f32", "f32", ("f32",), lambda a: np.exp2(a.astype(F64)).astype(F32))
op("v_log_legacy_f32", "f32", ("f32",), lambda a: np.log2(a.astype(F64)).astype(F32))
op("v_frexp_exp_i32_f32", "i32", ("f32",), _frexp_exp)
op("v_frexp_exp_i16_f16", "i16", ("f16",), lambda a: _frexp_exp(a).astype(I16))
op("v_mov_b32", "b32", ("b32",), lambda a: a)
op("v_not_b32", "b32", ("b32",), lambda a: ~a)
op("v_bfrev_b32", "b32", ("b32",), lambda a: _bitrev(a))
op("v_ffbh_u32", "b32", ("b32",), lambda a: _clz(a, 32))
op("v_ffbl_b32", "b32", ("b32",), _ctz)
op("v_ffbh_i32", "b32", ("i32",), lambda a: np.where((a == 0) | (a == -1), U32(0xFFFFFFFF), _clz(np.where(a < 0, ~a, a).view(U32), 32) - U32(1)))
op("v_cvt_f32_i32", "f32", ("i32",), lambda a: a.astype(F32))
op("v_cvt_f32_u32", "f32", ("u32",), lambda a: a.astype(F32))
op("v_cvt_i32_f32", "i32", ("f32",), lambda a: _cvt_f2i(a, -2**31, 2**31 - 1, I32))
op("v_cvt_u32_f32", "u32", ("f32",), lambda a: _cvt_f2i(a, 0, 2**32 - 1, U32))
op("v_cvt_rpi_i32_f32", "i32", ("f32",), lambda a: _cvt_f2i(np.floor(a.astype(F64) + 0.5), -2**31, 2**31 - 1, I32))
op("v_cvt_flr_i32_f32", "i32", ("f32",), lambda a: _cvt_f2i(np.floor(a), -2**31, 2**31 - 1, I32))
op("v_cvt_f16_f32", "f16", ("f32",), lambda a: a.astype(F16))
op("v_cvt_f32_f16", "f32", ("f16",), lambda a: a.astype(F32))
op("v_cvt_f32_bf16", "f32", ("b16",), lambda a: fp.bf16_to_f32(a))
op("v_cvt_f16_u16", "f16", ("u16",), lambda a: a.astype(F16))
op("v_cvt_f16_i16", "f16", ("i16",), lambda a: a.astype(F16))
op("v_cvt_u16_f16", "u16", ("f16",), lambda a: _cvt_f2i(a, 0, 65535, U16))
op("v_cvt_i16_f16", "i16", ("f16",), lambda a: _cvt_f2i(a, -32768, 32767, I16))
op("v_cvt_f64_f32", "f64", ("f32",), lambda a: a.astype(F64))
op("v_cvt_f32_f64", "f32", ("f64",), lambda a: a.astype(F32))
op("v_cvt_f64_i32", "f64", ("i32",), lambda a: a.astype(F64))
op("v_cvt_f64_u32", "f64", ("u32",), lambda a: a.astype(F64))
op("v_cvt_i32_f64", "i32", ("f64",), lambda a: _cvt_f2i(a, -2**31, 2**31 - 1, I32))
op("v_cvt_u32_f64", "u32", ("f64",), lambda a: _cvt_f2i(a, 0, 2**32 - 1, U32))
for i in range(4):
    op(f"v_cvt_f32_ubyte{i}", "f32", ("u32",), lambda a, i=i: ((a >> U32(8 * i)) & U32(0xFF)).astype(F32))
for s in ("f64",):
    op("v_add_f64", s, (s, s), lambda a, b: a + b)
    op("v_mul_f64", s, (s, s), lambda a, b: a * b)
    op("v_min_f64", s, (s, s), np.fmin)
    op("v_max_f64", s, (s, s), np.fmax)
    op("v_fma_f64", s, (s, s, s), lambda a, b, c: a * b + c)
    op("v_fmac_f64", s, (s, s, s), lambda a, b, c: a * b + c)
    op("v_rcp_f64", s, (s,), lambda a: 1 / a)
    op("v_rsq_f64", s, (s,), lambda a: 1 / np.sqrt(a))
    op("v_sqrt_f64", s, (s,), np.sqrt)
    op("v_floor_f64", s, (s,), np.floor)
    op("v_ceil_f64", s, (s,), np.ceil)
    op("v_trunc_f64", s, (s,), np.trunc)
    op("v_rndne_f64", s, (s,), np.rint)
    op("v_fract_f64", s, (s,), lambda a: np.where(np.isfinite(a), np.minimum(a - np.floor(a), 1 - 2.0**-53), a))
    op("v_ldexp_f64", s, (s, "i32"), lambda a, b: np.ldexp(a, np.clip(b, -3000, 3000)))
    op("v_frexp_mant_f64", s, (s,), _frexp_mant)
    op("v_frexp_exp_i32_f64", "i32", (s,), _frexp_exp)
    op("v_div_fixup_f64", s, (s, s, s), _div_fixup)
op("v_mov_b64", "b64", ("b64",), lambda a: a)
op("v_lshlrev_b64", "b64", ("u32", "b64"), lambda a, b: b << (a & U32(63)).astype(U64))
op("v_lshrrev_b64", "b64", ("u32", "b64"), lambda a, b: b >> (a & U32(63)).astype(U64))
op("v_ashrrev_i64", "i64", ("u32", "i64"), lambda a, b: b >> (a & U32(63)).astype(I64))
op("v_lshl_add_u64", "u64", ("u64", "u32", "u64"), lambda a, s, c: (a << (s & U32(7)).astype(U64)) + c)
# 32-bit integer
op("v_add_u32", "u32", ("u32", "u32"), lambda a, b: a + b)
op("v_sub_u32", "u32", ("u32", "u32"), lambda a, b: a - b)
op("v_subrev_u32", "u32", ("u32", "u32"), lambda a, b: b - a)
op("v_add_i32", "i32", ("i32", "i32"), lambda a, b: a + b)
op("v_sub_i32", "i32", ("i32", "i32"), lambda a, b: a - b)
op("v_mul_lo_u32", "u32", ("u32", "u32"), lambda a, b: a * b)
op("v_mul_hi_u32", "u32", ("u32", "u32"), lambda a, b: ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32))
op("v_mul_hi_i32", "i32", ("i32", "i32"), lambda a, b: ((a.astype(I64) * b.astype(I64)) >> 32).astype(I32))
op("v_mul_u32_u24", "u32", ("u32", "u32"), lambda a, b: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)))
op("v_mul_hi_u32_u24", "u32", ("u32", "u32"), lambda a, b: (((a & U32(0xFFFFFF)).astype(U64) * (b & U32(0xFFFFFF)).astype(U64)) >> U64(32)).astype(U32))
_s24 = lambda a: ((a.astype(U32) << U32(8)).view(I32) >> 8).astype(I64)
op("v_mul_i32_i24", "i32", ("u32", "u32"), lambda a, b: (_s24(a) * _s24(b)).astype(I32))
op("v_mul_hi_i32_i24", "i32", ("u32", "u32"), lambda a, b: ((_s24(a) * _s24(b)) >> 32).astype(I32))
op("v_mad_u32_u24", "u32", ("u32", "u32", "u32"), lambda a, b, c: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)) + c)
op("v_mad_i32_i24", "i32", ("u32", "u32", "i32"), lambda a, b, c: (_s24(a) * _s24(b) + c).astype(I32))
op("v_and_b32", "b32", ("b32", "b32"), lambda a, b: a & b)
op("v_or_b32", "b32", ("b32", "b32"), lambda a, b: a | b)
op("v_xor_b32", "b32", ("b32", "b32"), lambda a, b: a ^ b)
op("v_xnor_b32", "b32", ("b32", "b32"), lambda a, b: ~(a ^ b))
op("v_lshlrev_b32", "b32", ("b32", "b32"), lambda a, b: b << (a & U32(31)))
op("v_lshrrev_b32", "b32", ("b32", "b32"), lambda a, b: b >> (a & U32(31)))
op("v_ashrrev_i32", "i32", ("u32", "i32"), lambda a, b: b >> (a & U32(31)).astype(I32))
op("v_min_i32", "i32", ("i32", "i32"), np.minimum)
op("v_max_i32", "i32", ("i32", "i32"), np.maximum)
op("v_min_u32", "u32", ("u32", "u32"), np.minimum)
op("v_max_u32", "u32", ("u32", "u32"), np.maximum)
op("v_min3_i32", "i32", ("i32",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_i32", "i32", ("i32",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_min3_u32", "u32", ("u32",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_u32", "u32", ("u32",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_med3_i32", "i32", ("i32",) * 3, _med3)
op("v_med3_u32", "u32", ("u32",) * 3, _med3)
op("v_bfe_u32", "u32", ("u32",) * 3, lambda a, b, c: _bfe(a, b, c, False))
op("v_bfe_i32", "u32", ("u32",) * 3, lambda a, b, c: _bfe(a, b, c, True))
op("v_bfi_b32", "b32", ("b32",) * 3, lambda a, b, c: (a & b) | (~a & c))
op("v_bfm_b32", "b32", ("b32", "b32"), lambda a, b: ((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31)))
op("v_alignbit_b32", "b32", ("b32",) * 3, lambda a, b, c: (((a.astype(U64) << U64(32)) | b.astype(U64)) >> (c & U32(31)).astype(U64)).astype(U32))
op("v_alignbyte_b32", "b32", ("b32",) * 3, lambda a, b, c: (((a.astype(U64) << U64(32)) | b.astype(U64)) >> ((c & U32(3)) * U32(8)).astype(U64)).astype(U32))
op("v_perm_b32", "b32", ("b32",) * 3, _perm)
op("v_lshl_add_u32", "u32", ("u32",) * 3, lambda a, b, c: (a << (b & U32(31))) + c)
op("v_add_lshl_u32", "u32", ("u32",) * 3, lambda a, b, c: (a + b) << (c & U32(31)))
op("v_add3_u32", "u32", ("u32",) * 3, lambda a, b, c: a + b + c)
op("v_lshl_or_b32", "b32", ("b32",) * 3, lambda a, b, c: (a << (b & U32(31))) | c)
op("v_and_or_b32", "b32", ("b32",) * 3, lambda a, b, c: (a & b) | c)
op("v_or3_b32", "b32", ("b32",) * 3, lambda a, b, c: a | b | c)
op("v_xad_u32", "u32", ("u32",) * 3, lambda a, b, c: (a ^ b) + c)
op("v_bcnt_u32_b32", "u32", ("u32", "u32"), lambda a, b: _popcount32(a) + b)
op("v_cvt_pk_u16_u32", "b32", ("u32", "u32"), lambda a, b: (np.minimum(a, U32(0xFFFF))) | (np.minimum(b, U32(0xFFFF)) << U32(16)))
op("v_cvt_pk_i16_i32", "b32", ("i32", "i32"), lambda a, b: (np.clip(a, -32768, 32767).astype(U32) & U32(0xFFFF)) | (np.clip(b, -32768, 32767).astype(U32) << U32(16)))
op("v_cvt_pkrtz_f16_f32", "b32", ("f32", "f32"), lambda a, b: _f16_rtz(a) | (_f16_rtz(b) << U32(16)))
op("v_cvt_pk_f16_f32", "b32", ("f32", "f32"), lambda a, b: fp.f32_to_f16(a).astype(U32) | (fp.f32_to_f16(b).astype(U32) << U32(16)))
op("v_cvt_pk_bf16_f32", "b32", ("f32", "f32"), lambda a, b: fp.f32_to_bf16(a).astype(U32) | (fp.f32_to_bf16(b).astype(U32) << U32(16)))
op("v_pack_b32_f16", "b32", ("b16", "b16"), lambda a, b: a.astype(U32) | (b.astype(U32) << U32(16)))
op("v_cvt_pknorm_i16_f32", "b32", ("f32", "f32"), lambda a, b: _norm16(a, True) | (_norm16(b, True) << U32(16)))
op("v_cvt_pknorm_u16_f32", "b32", ("f32", "f32"), lambda a, b: _norm16(a, False) | (_norm16(b, False) << U32(16)))
# 16-bit integer
op("v_add_u16", "u16", ("u16", "u16"), lambda a, b: a + b)
op("v_sub_u16", "u16", ("u16", "u16"), lambda a, b: a - b)
op("v_subrev_u16", "u16", ("u16", "u16"), lambda a, b: b - a)
op("v_mul_lo_u16", "u16", ("u16", "u16"), lambda a, b: a * b)
op("v_lshlrev_b16", "u16", ("u16", "u16"), lambda a, b: b << (a & U16(15)))
op("v_lshrrev_b16", "u16", ("u16", "u16"), lambda a, b: b >> (a & U16(15)))
op("v_ashrrev_i16", "i16", ("u16", "i16"), lambda a, b: b >> (a & U16(15)).astype(I16))
op("v_max_u16", "u16", ("u16", "u16"), np.maximum)
op("v_min_u16", "u16", ("u16", "u16"), np.minimum)
op("v_max_i16", "i16", ("i16", "i16"), np.maximum)
op("v_min_i16", "i16", ("i16", "i16"), np.minimum)
op("v_mad_u16", "u16", ("u16",) * 3, lambda a, b, c: a * b + c)
op("v_mad_u32_u16", "u32", ("u16", "u16", "u32"), lambda a, b, c: a.astype(U32) * b.astype(U32) + c)
op("v_mad_i32_i16", "i32", ("i16", "i16", "i32"), lambda a, b, c: a.astype(I32) * b.astype(I32) + c)


def _bitrev(a):
    a = a.astype(U32)
    r = np.zeros(a.shape, U32)
    for i in range(32):
        r |= ((a >> U32(i)) & U32(1)) << U32(31 - i)
    return r


def _f16_rtz(x):
    x = np.asarray(x, F32)
    h = x.astype(F16)
    # round toward zero: step back one ulp when rounding went away from zero
    away = np.abs(h.astype(F64)) > np.abs(x.astype(F64))
    hb = h.view(U16)
    hb = np.where(away & np.isfinite(x) & (hb & U16(0x7FFF) != 0), hb - U16(1), hb)
    hb = np.where(np.isinf(h) & np.isfinite(x), np.where(x < 0, U16(0xFBFF), U16(0x7BFF)), hb)
    return hb.astype(U32)


def _norm16(x, signed):
    x = np.asarray(x, F64)
    if signed:
        return (np.rint(np.clip(x, -1, 1) * 32767).astype(I32).astype(U32) & U32(0xFFFF))
    return np.rint(np.clip(x, 0, 1) * 65535).astype(U32)


# ---------------------------------------------------------------- operand plumbing
def _typed(raw, kind, hi=False):
    """uint32 raw (or uint64 for 64-bit kinds) -> typed array."""
    w = WIDTH[kind]
    if w == 16:
        x = (raw >> U32(16)) if hi else raw
        return x.astype(U16).view(VIEW[kind])
    return raw.view(VIEW[kind]) if raw.dtype.itemsize * 8 == w else raw.astype(VIEW[kind])


def _bits(val, kind):
    """typed result -> uint32 (32/16-bit kinds, 16-bit zero-extended) or uint64 (64-bit kinds)."""
    t = VIEW[kind]
    w = WIDTH[kind]
    v = np.asarray(val)
    if v.dtype != t:
        v = v.astype(t)
    if w == 16:
        return v.view(U16).astype(U32)
    if w == 64:
        return v.view(U64)
    return v.view(U32)


def _float(kind):
    return kind in ("f16", "f32", "f64")


def _apply_omod_clamp(res, kind, omod, clamp):
    if not _float(kind):
        return res
    if omod:
        res = res * VIEW[kind]((2.0, 4.0, 0.5)[omod - 1])
    if clamp:
        res = np.where(np.isnan(res), VIEW[kind](0), np.clip(res, VIEW[kind](0), VIEW[kind](1)))
    return res


# ---------------------------------------------------------------- DPP
def dpp_source_lanes(ctrl):
    """Per destination lane: the source lane, or -1 when the source is out of range."""
    lane = np.arange(64)
    row, col = lane // 16, lane % 16
    if ctrl <= 0xFF:
        sel = [(ctrl >> (2 * k)) & 3 for k in range(4)]
        return (lane & ~3) + np.array(sel)[lane & 3]
    if 0x101 <= ctrl <= 0x10F:
        n = ctrl - 0x100
        return np.where(col + n < 16, lane + n, -1)
    if 0x111 <= ctrl <= 0x11F:
        n = ctrl - 0x110
        return np.where(col - n >= 0, lane - n, -1)
    if 0x121 <= ctrl <= 0x12F:
        n = ctrl - 0x120
        return row * 16 + (col - n) % 16
    if ctrl == 0x130:
        return np.where(lane + 1 < 64, lane + 1, -1)
    if ctrl == 0x134:
        return (lane + 1) % 64
    if ctrl == 0x138:
        return np.where(lane - 1 >= 0, lane - 1, -1)
    if ctrl == 0x13C:
        return (lane - 1) % 64
    if ctrl == 0x140:
        return row * 16 + 15 - col
    if ctrl == 0x141:
        return (lane & ~7) + 7 - (lane & 7)
    if ctrl == 0x142:
        return np.where(row >= 1, row * 16 - 1, -1)
    if ctrl == 0x143:
        return np.where(row >= 2, 31, -1)
    if 0x150 <= ctrl <= 0x15F:   # row_newbcast (gfx90a+): lane n of each row to the whole row
        return row * 16 + (ctrl - 0x150)
    return None


def _dpp_reader(o, inst, kind):
    f = inst.f
    src = dpp_source_lanes(f["dpp_ctrl"])
    if src is None:
        raise o.err(f"{coverage.limit('dpp-control')} ({f['dpp_ctrl']:#x})")
    r = o.vrow(f["src0"] - 256)
    valid = src >= 0
    srcc = np.where(valid, src, 0)
    bound0 = bool(f["bound_ctrl"])
    rowmask = np.array([(f["row_mask"] >> (l // 16)) & 1 for l in range(64)], bool)
    bankmask = np.array([(f["bank_mask"] >> ((l % 16) // 4)) & 1 for l in range(64)], bool)
    wmask = rowmask & bankmask

    def read(g):
        # gathers a copy first: correct also when the destination is the source
        x = g.V[r][:, srcc]
        ok = valid[None, :] & g.exec[:, srcc]
        if bound0:
            x = np.where(ok, x, U32(0))
            return x, wmask[None, :]
        return x, ok & wmask[None, :]
    return read


# ---------------------------------------------------------------- SDWA
def _sdwa_sel(x, sel, sext):
    if sel == 6:
        return x
    if sel <= 3:
        v = (x >> U32(8 * sel)) & U32(0xFF)
        return v.astype(np.uint8).view(np.int8).astype(I32).view(U32) if sext else v
    v = (x >> U32(16 * (sel - 4))) & U32(0xFFFF)
    return v.astype(U16).view(I16).astype(I32).view(U32) if sext else v


def _compile_move(o, inst, kind):
    """v_mov_b32 / v_mov_b64 without modifiers: a copy of register rows."""
    f = inst.f
    count = 2 if kind == "b64" else 1
    d = o.vrow(f["vdst"], count=count, write=True)
    if f["src0"] >= 256:
        s = o.vrow(f["src0"] - 256, count=count)
        src = lambda g: g.V[s:s + count]                                      # noqa: E731
    elif count == 1:
        r = o.src32(f["src0"], "b32", f.get("literal"))
        src = lambda g: r(g)[None]                                            # noqa: E731
    else:
        r = o.src64(f["src0"], "b64", f.get("literal"))
        src = lambda g: np.stack(np.broadcast_arrays(*[((r(g) >> U64(32 * i)) & U64(0xFFFFFFFF)).astype(U32)
                                                       for i in range(2)]))   # noqa: E731

    def run(g):
        v = src(g)
        if g.full:
            g.V[d:d + count] = v
        else:
            for i in range(count):
                np.copyto(g.V[d + i], np.broadcast_to(v[i], g.V[d + i].shape), where=g.exec)
    return run


def compile_valu(o, inst, m):
    f = inst.f
    name = inst.name
    if name not in T:
        return None
    dk, sks, fn = T[name]
    nsrc = len(sks)
    fam = inst.fam
    if name in ("v_mov_b32", "v_mov_b64") and not inst.sub and not any(f.get(k) for k in ("abs", "neg", "clamp", "omod")):
        return _compile_move(o, inst, dk)
    e64 = fam == "VOP3"
    lit = f.get("literal")
    vsrc1 = f.get("vsrc1", 0) + (0 if f.get("src1_sgpr") else 256)    # SDWA's S1 bit names an SGPR
    srcs = [f["src0"], vsrc1 if fam == "VOP2" else f.get("src1"), f.get("src2")]
    if name.startswith(("v_fmac_", "v_mac_")) or name in ACCUMULATE:
        srcs[2] = f["vdst"] + 256          # accumulates into the destination
    if name in K_LITERAL:                  # v_fmamk_f32 / v_fmaak_f32 ...: K is the trailing literal
        k = K_LITERAL[name]
        srcs[k], srcs[3 - k] = 255, f["vsrc1"] + 256
    opsel = f.get("op_sel", 0) if e64 else 0
    neg = f.get("neg", 0) if (e64 or inst.sub) else 0
    ab = f.get("abs", 0) if (e64 or inst.sub) else 0
    readers = []
    dpp = None
    for i in range(nsrc):
        k = sks[i]
        v = srcs[i]
        if inst.sub == "dpp" and i == 0:
            dpp = _dpp_reader(o, inst, k)
            readers.append(None)
            continue
        if WIDTH[k] == 64:
            rd = o.src64(v, k if _float(k) else "b64", lit)
        else:
            rd = o.src32(v, k if k in ("f16", "f32") else ("b16" if WIDTH[k] == 16 else "b32"), lit)
            if inst.sub == "sdwa" and i < 2:
                sel = f["src0_sel"] if i == 0 else f["src1_sel"]
                sext = f["src0_sext"] if i == 0 else f["src1_sext"]
                if sel != 6 or sext:
                    rd = (lambda rd, sel, sext: lambda g: _sdwa_sel(rd(g), sel, sext))(rd, sel, sext)
        hi = bool(opsel >> i & 1) and WIDTH[k] == 16
        rd = (lambda rd, k, hi: lambda g: _typed(rd(g), k, hi))(rd, k, hi)
        # modifiers act on typed values for floats
        if _float(k) and ((neg >> i) & 1 or (ab >> i) & 1):
            n_, a_ = (neg >> i) & 1, (ab >> i) & 1
            rd = (lambda rd, n_, a_: lambda g: (-np.abs(rd(g)) if a_ else -rd(g)) if n_ else np.abs(rd(g)))(rd, n_, a_)
        readers.append(rd)
    if dpp is not None:
        k0 = sks[0]
        n0, a0 = neg & 1, ab & 1
    wd = WIDTH[dk]
    vdst = f["vdst"]
    d = o.vrow(vdst, count=2 if wd == 64 else 1, write=True)
    omod = f.get("omod", 0) if (e64 or inst.sub == "sdwa") else 0
    clamp = f.get("clamp", 0) if (e64 or inst.sub == "sdwa") else 0
    if clamp and not _float(dk):
        raise o.err(coverage.limit("integer-clamp" if dk not in ("b32",) else "packed-clamp"))
    hi_dst = e64 and wd == 16 and (opsel >> 3) & 1
    sdwa_dst = inst.sub == "sdwa" and fam != "VOPC" and (f["dst_sel"] != 6)
    if sdwa_dst:
        dsel, dunused = f["dst_sel"], f["dst_unused"]

    def run(g):
        with errstate:
            if dpp is not None:
                x, wmask = dpp(g)
                x = _typed(x, k0)
                if a0:
                    x = np.abs(x)
                if n0:
                    x = -x
                args = [x] + [rd(g) for rd in readers[1:]]
            else:
                wmask = None
                args = [rd(g) for rd in readers]
            res = fn(*args)
            res = _apply_omod_clamp(res, dk, omod, clamp)
            bits = _bits(res, dk)
        if wd == 64:
            lo = (bits & U64(0xFFFFFFFF)).astype(U32)
            hi = (bits >> U64(32)).astype(U32)
            mask = g.exec if wmask is None else (g.exec & wmask)
            if g.full and wmask is None:
                g.V[d] = lo
                g.V[d + 1] = hi
            else:
                np.copyto(g.V[d], np.broadcast_to(lo, g.V[d].shape), where=mask)
                np.copyto(g.V[d + 1], np.broadcast_to(hi, g.V[d].shape), where=mask)
            return
        if hi_dst:
            bits = (g.V[d] & U32(0xFFFF)) | (bits << U32(16))
        elif sdwa_dst:
            old = g.V[d]
            if dsel <= 3:
                width, sh = 8, 8 * dsel
            else:
                width, sh = 16, 16 * (dsel - 4)
            fmask = U32(((1 << width) - 1) << sh)
            val = (bits << U32(sh)) & fmask
            if dunused == 2:
                bits = (old & ~fmask) | val
            elif dunused == 1:
                sign = (val >> U32(sh + width - 1)) & U32(1)
                upper = U32((0xFFFFFFFF << (sh + width)) & 0xFFFFFFFF)
                bits = val | np.where(sign == 1, upper, U32(0))
            else:
                bits = val
        if wmask is None and g.full:
            g.V[d] = bits
        else:
            mask = g.exec if wmask is None else (g.exec & wmask)
            np.copyto(g.V[d], np.broadcast_to(bits, g.V[d].shape), where=mask)
    return run


def compilers(names):
    """The element-wise VALU instructions (valu.T), by name."""
    return {n: compile_valu for n in names if n in T}
