"""VOP3P packed math: 16-bit pairs and f32 pairs with op_sel / op_sel_hi / neg_lo / neg_hi, the
mixed-precision FMAs, dot products; MFMA is in mfma.py."""

import numpy as np

from . import coverage, fp
from .valu import errstate, VIEW
from .valu_extra import _lanes, maximum, minimum
from .vspecial import _write

U16, U32, U64, I16, I32, I64 = np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64


_PK16 = {
    "v_pk_add_f16": ("f16", 2, lambda a, b: a + b), "v_pk_mul_f16": ("f16", 2, lambda a, b: a * b),
    "v_pk_fma_f16": ("f16", 3, lambda a, b, c: (a.astype(F64) * b + c.astype(F64)).astype(F16)),
    "v_pk_max_f16": ("f16", 2, np.fmax), "v_pk_min_f16": ("f16", 2, np.fmin),
    "v_pk_add_u16": ("u16", 2, lambda a, b: a + b), "v_pk_sub_u16": ("u16", 2, lambda a, b: a - b),
    "v_pk_add_i16": ("i16", 2, lambda a, b: a + b), "v_pk_sub_i16": ("i16", 2, lambda a, b: a - b),
    "v_pk_mul_lo_u16": ("u16", 2, lambda a, b: a * b),
    "v_pk_lshlrev_b16": ("u16", 2, lambda a, b: b << (a & U16(15))),
    "v_pk_lshrrev_b16": ("u16", 2, lambda a, b: b >> (a & U16(15))),
    "v_pk_ashrrev_i16": ("i16", 2, lambda a, b: b >> (a & I16(15))),
    "v_pk_max_i16": ("i16", 2, np.maximum), "v_pk_min_i16": ("i16", 2, np.minimum),
    "v_pk_max_u16": ("u16", 2, np.maximum), "v_pk_min_u16": ("u16", 2, np.minimum),
    "v_pk_mad_u16": ("u16", 3, lambda a, b, c: a * b + c), "v_pk_mad_i16": ("i16", 3, lambda a, b, c: a * b + c),
    "v_pk_minimum3_f16": ("f16", 3, lambda a, b, c: minimum(minimum(a, b), c)),
    "v_pk_maximum3_f16": ("f16", 3, lambda a, b, c: maximum(maximum(a, b), c)),
}
# integer dot products: name -> (bits per element, elements, signed)
_IDOT = {"v_dot2_i32_i16": (16, 2, True), "v_dot2_u32_u16": (16, 2, False), "v_dot4_i32_i8": (8, 4, True),
         "v_dot4_u32_u8": (8, 4, False), "v_dot8_i32_i4": (4, 8, True), "v_dot8_u32_u4": (4, 8, False)}
_PK32 = {
    "v_pk_fma_f32": (3, lambda a, b, c: (a.astype(F64) * b + c.astype(F64)).astype(F32)),
    "v_pk_mul_f32": (2, lambda a, b: a * b), "v_pk_add_f32": (2, lambda a, b: a + b),
    "v_pk_mov_b32": (2, None),
}


def compile_vop3p(o, inst, m):
    f, name = inst.f, inst.name
    opsel, opsel_hi, neg, neg_hi = f["op_sel"], f["op_sel_hi"], f["neg"], f["neg_hi"]
    clamp = f["clamp"]
    if name in _PK16:
        kind, nsrc, fn = _PK16[name]
        o.packed16 = True
        rds = [o.src32(f[f"src{i}"], "f16" if kind == "f16" else "b16") for i in range(nsrc)]
        d = o.vrow(f["vdst"], write=True)
        t = VIEW[kind]
        isf = kind == "f16"

        def half(x, h):
            return ((x >> U32(16)) if h else x).astype(U16).view(t)

        def run(g):
            xs = [r(g) for r in rds]
            lo = [half(x, (opsel >> i) & 1) for i, x in enumerate(xs)]
            hi = [half(x, (opsel_hi >> i) & 1) for i, x in enumerate(xs)]
            if isf:
                lo = [(-v if (neg >> i) & 1 else v) for i, v in enumerate(lo)]
                hi = [(-v if (neg_hi >> i) & 1 else v) for i, v in enumerate(hi)]
            with errstate:
                rl, rh = np.asarray(fn(*lo)).astype(t), np.asarray(fn(*hi)).astype(t)
            if clamp and isf:
                rl, rh = [np.where(np.isnan(v), t(0), np.clip(v, t(0), t(1))) for v in (rl, rh)]
            _write(g, d, rl.view(U16).astype(U32) | (rh.view(U16).astype(U32) << U32(16)))
        return run
    if name in _PK32:
        nsrc, fn = _PK32[name]
        rds = [o.src64(f[f"src{i}"], "b64") if f[f"src{i}"] >= 256 or f[f"src{i}"] < 128 else None
               for i in range(nsrc)]
        for i in range(nsrc):
            if rds[i] is None:
                c = o.src32(f[f"src{i}"], "f32")
                rds[i] = (lambda c: lambda g: c(g).astype(U64) * U64(0x100000001))(c)
        d = o.vrow(f["vdst"], count=2, write=True)

        def sel(x, h):
            return ((x >> U64(32)) if h else x & U64(0xFFFFFFFF)).astype(U32)

        def run(g):
            xs = [r(g) for r in rds]
            lo = [sel(x, (opsel >> i) & 1) for i, x in enumerate(xs)]
            hi = [sel(x, (opsel_hi >> i) & 1) for i, x in enumerate(xs)]
            if fn is None:   # v_pk_mov_b32: op_sel[0] picks src0's half for D.lo, op_sel[1] src1's for D.hi
                _write(g, d, lo[0])
                _write(g, d + 1, lo[1])
                return
            lo = [v.view(F32) for v in lo]
            hi = [v.view(F32) for v in hi]
            lo = [(-v if (neg >> i) & 1 else v) for i, v in enumerate(lo)]
            hi = [(-v if (neg_hi >> i) & 1 else v) for i, v in enumerate(hi)]
            with errstate:
                rl, rh = np.asarray(fn(*lo), F32), np.asarray(fn(*hi), F32)
            if clamp:
                rl, rh = [np.where(np.isnan(v), F32(0), np.clip(v, 0, 1)).astype(F32) for v in (rl, rh)]
            _write(g, d, rl.view(U32))
            _write(g, d + 1, rh.view(U32))
        return run
    if name in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        rds = [o.src32(f[f"src{i}"], "f32") for i in range(3)]
        ab = f["neg_hi"]  # in the mix instructions neg_hi holds abs
        d = o.vrow(f["vdst"], write=True)
        if name != "v_fma_mix_f32":
            o.vrow(f["vdst"])

        def run(g):
            xs = []
            for i, r in enumerate(rds):
                x = r(g)
                if (opsel_hi >> i) & 1:   # f16 source, op_sel picks the half
                    v = ((x >> U32(16)) if (opsel >> i) & 1 else x).astype(U16).view(F16).astype(F64)
                else:
                    v = x.view(F32).astype(F64)
                if (ab >> i) & 1:
                    v = np.abs(v)
                if (neg >> i) & 1:
                    v = -v
                xs.append(v)
            with errstate:
                r = xs[0] * xs[1] + xs[2]
                if name == "v_fma_mix_f32":
                    res = r.astype(F32)
                    if clamp:
                        res = np.clip(res, 0, 1)
                    _write(g, d, res.view(U32))
                else:
                    h = r.astype(F16)
                    if clamp:
                        h = np.clip(h, 0, 1).astype(F16)
                    hb = h.view(U16).astype(U32)
                    old = g.V[d]
                    _write(g, d, (old & U32(0xFFFF0000)) | hb if name.endswith("lo_f16") else (old & U32(0xFFFF)) | (hb << U32(16)))
        return run
    if name in _IDOT:
        width, count, signed = _IDOT[name]
        if clamp:
            raise o.err(coverage.limit("integer-clamp"))
        rds = [o.src32(f[f"src{i}"], "b32") for i in range(3)]
        d = o.vrow(f["vdst"], write=True)

        def run(g):
            a, b, c = [np.broadcast_to(r(g), (g.n, 64)) for r in rds]
            acc = c.view(I32).astype(I64) if signed else c.astype(I64)
            for x, y in zip(_lanes(a, width, count, signed), _lanes(b, width, count, signed)):
                acc = acc + x * y
            _write(g, d, (acc & 0xFFFFFFFF).astype(U32))
        return run
    if name in ("v_dot2_f32_f16", "v_dot2_f32_bf16"):
        rds = [o.src32(f[f"src{i}"], "b16" if i < 2 else "f32") for i in range(3)]
        d = o.vrow(f["vdst"], write=True)
        bf = name.endswith("bf16")

        def run(g):
            a, b, c = [r(g) for r in rds]
            def halves(x, i):
                lo_sel, hi_sel = (opsel >> i) & 1, (opsel_hi >> i) & 1
                l = ((x >> U32(16)) if lo_sel else x) & U32(0xFFFF)
                h = ((x >> U32(16)) if hi_sel else x) & U32(0xFFFF)
                if bf:
                    return fp.bf16_to_f32(l).astype(F64), fp.bf16_to_f32(h).astype(F64)
                return fp.f16_to_f32(l).astype(F64), fp.f16_to_f32(h).astype(F64)
            al, ah = halves(a, 0)
            bl, bh = halves(b, 1)
            r = (al * bl + ah * bh + c.view(F32).astype(F64)).astype(F32)
            _write(g, d, r.view(U32))
        return run
    return None


def compilers(names):
    handled = set(_PK16) | set(_PK32) | set(_IDOT) | {"v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16",
                                                      "v_dot2_f32_f16", "v_dot2_f32_bf16"}
    return {n: compile_vop3p for n in names if n in handled}
