"""Vector instructions that do not fit the elementwise table: carries, lane-crossing reads and
writes, v_cndmask, 64-bit multiply-add, the division helpers, fp8 conversions, accumulation
register moves and VOP3P packed math."""

import numpy as np

from . import coverage, fp
from .state import VCC, EXEC, pack_mask, unpack_mask
from .valu import _typed, _bits, errstate, VIEW
from .valu_extra import _lanes, maximum, minimum

U16, U32, U64, I16, I32, I64 = np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64
LANES = np.arange(64)


def _write(g, d, val, mask=None):
    if mask is None and g.full:
        g.V[d] = val
    else:
        np.copyto(g.V[d], np.broadcast_to(val, g.V[d].shape), where=g.exec if mask is None else mask)


def _lane_mask_reader(o, v):
    s = o.sreg(v, 2)
    return lambda g: unpack_mask(g.S[:, s:s + 2])


# VOP1/VOP2 instructions of this module that have DPP or SDWA forms the simulator refuses
NOT_ELEMENTWISE = {"v_cndmask_b32", "v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32",
                   "v_subb_co_u32", "v_subbrev_co_u32", "v_readfirstlane_b32", "v_swap_b32", "v_accvgpr_read_b32",
                   "v_accvgpr_write_b32", "v_accvgpr_mov_b32", "v_permlane16_swap_b32", "v_permlane32_swap_b32",
                   "v_nop", "v_clrexcp"}


def compile_special(o, inst, m):
    f, name = inst.f, inst.name
    e64 = inst.fam == "VOP3"
    lit = f.get("literal")
    if inst.sub and name not in ("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8"):
        if name in NOT_ELEMENTWISE:
            raise o.err(coverage.limit("dpp-sdwa"))
        return None
    if name == "v_nop" or name == "v_clrexcp":
        return lambda g: None
    if name == "v_cndmask_b32":
        if inst.sub:
            return None
        a = o.src32(f["src0"], "b32", lit)
        b = o.src32(f["src1"] if e64 else f["vsrc1"] + 256, "b32", lit)
        sel = _lane_mask_reader(o, f["src2"] if e64 else VCC)
        neg, ab = (f.get("neg", 0), f.get("abs", 0)) if e64 else (0, 0)
        def mod(rd, i):
            if not ((neg >> i) & 1 or (ab >> i) & 1):
                return rd
            return lambda g: ((rd(g) & U32(0x7FFFFFFF)) if (ab >> i) & 1 else rd(g)) ^ (U32(0x80000000) if (neg >> i) & 1 else U32(0))
        a, b = mod(a, 0), mod(b, 1)
        d = o.vrow(f["vdst"], write=True)
        return lambda g: _write(g, d, np.where(sel(g), b(g), a(g)))
    if name in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32",
                "v_subbrev_co_u32"):
        a = o.src32(f["src0"], "b32", lit)
        b = o.src32(f["src1"] if e64 else f["vsrc1"] + 256, "b32", lit)
        carry_in = None
        if name in ("v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32"):
            carry_in = _lane_mask_reader(o, f["src2"] if e64 else VCC)
        sd = f["sdst"] if e64 else VCC
        o.sreg(sd, 2, write=True)
        d = o.vrow(f["vdst"], write=True)
        if f.get("clamp") and e64:
            raise o.err(coverage.limit("integer-clamp"))

        def run(g):
            x, y = a(g).astype(I64), b(g).astype(I64)
            c = carry_in(g).astype(I64) if carry_in else 0
            if name.startswith("v_add"):
                r = x + y + c
                co = r > 0xFFFFFFFF
            elif name.startswith("v_subrev") or name.startswith("v_subbrev"):
                r = y - x - c
                co = r < 0
            else:
                r = x - y - c
                co = r < 0
            _write(g, d, r.astype(U32))
            g.S[:, sd:sd + 2] = pack_mask(np.broadcast_to(co, (g.n, 64)) & g.exec)
            if sd == EXEC:
                g.update_exec()
        return run
    if name in ("v_mad_u64_u32", "v_mad_i64_i32"):
        signed = name == "v_mad_i64_i32"
        a = o.src32(f["src0"], "b32")
        b = o.src32(f["src1"], "b32")
        c = o.src64(f["src2"], "b64")
        sd = f["sdst"]
        o.sreg(sd, 2, write=True)
        d = o.vrow(f["vdst"], count=2, write=True)

        def run(g):
            if signed:
                x, y = a(g).view(I32).astype(I64), b(g).view(I32).astype(I64)
                prod = x * y  # fits in int64
                cc = c(g).view(I64)
                r = prod + cc
                co = ((prod > 0) & (cc > 0) & (r < 0)) | ((prod < 0) & (cc < 0) & (r >= 0))
                r = r.view(U64)
            else:
                x, y = a(g).astype(U64), b(g).astype(U64)
                prod = x * y
                cc = c(g)
                r = prod + cc
                co = r < prod
            _write(g, d, (r & U64(0xFFFFFFFF)).astype(U32))
            _write(g, d + 1, (r >> U64(32)).astype(U32))
            g.S[:, sd:sd + 2] = pack_mask(np.broadcast_to(co, (g.n, 64)) & g.exec)
        return run
    if name == "v_readfirstlane_b32":
        if f["src0"] < 256:
            src = o.src32(f["src0"], "b32", lit)
            sd = o.sdst(f["vdst"])
            return lambda g: sd(g, np.broadcast_to(src(g), (g.n, 1))[:, 0])
        r = o.vrow(f["src0"] - 256)
        w = o.sdst(f["vdst"])

        def run(g):
            first = np.where(g.exec.any(1), g.exec.argmax(1), 0)
            w(g, g.V[r][np.arange(g.n), first])
        return run
    if name == "v_readlane_b32":
        r = o.vrow(f["src0"] - 256) if f["src0"] >= 256 else None
        if r is None:
            return None
        lane = o.ssrc(f["src1"], False)
        w = o.sdst(f["vdst"])
        return lambda g: w(g, g.V[r][np.arange(g.n), np.broadcast_to(lane(g), (g.n,)).astype(np.int64) & 63])
    if name == "v_writelane_b32":
        val = o.ssrc(f["src0"], False, lit)
        lane = o.ssrc(f["src1"], False)
        d = o.vrow(f["vdst"], write=True)
        o.vrow(f["vdst"])

        def run(g):
            g.V[d][np.arange(g.n), np.broadcast_to(lane(g), (g.n,)).astype(np.int64) & 63] = np.broadcast_to(val(g), (g.n,))
        return run
    if name in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
        a = o.src32(f["src0"], "b32")
        b = o.src32(f["src1"], "b32")
        d = o.vrow(f["vdst"], write=True)
        lo = name == "v_mbcnt_lo_u32_b32"
        lanes = LANES if lo else LANES - 32
        below = (np.arange(32)[None, :] < np.clip(lanes, 0, 32)[:, None])  # (64, 32)

        def run(g):
            mask = np.broadcast_to(a(g), (g.n, 64))  # per-lane 32-bit mask
            bits = ((mask[..., None] >> np.arange(32, dtype=U32)) & U32(1)).astype(bool)
            cnt = (bits & below[None]).sum(-1).astype(U32)
            _write(g, d, cnt + b(g))
        return run
    if name == "v_swap_b32":
        x = o.vrow(f["vdst"], write=True)
        y = o.vrow(f["src0"] - 256, write=True)
        o.vrow(f["vdst"]), o.vrow(f["src0"] - 256)

        def run(g):
            a, b = g.V[x].copy(), g.V[y].copy()
            _write(g, x, b)
            _write(g, y, a)
        return run
    if name in ("v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_accvgpr_mov_b32"):
        if name == "v_accvgpr_read_b32":
            s = o.vrow(f["src0"] - 256, acc=True)
            src = lambda g: g.V[s]
            d = o.vrow(f["vdst"], write=True)
        elif name == "v_accvgpr_write_b32":
            src = o.src32(f["src0"], "b32", lit)
            d = o.vrow(f["vdst"], acc=True, write=True)
        else:
            s = o.vrow(f["src0"] - 256, acc=True)
            src = lambda g: g.V[s]
            d = o.vrow(f["vdst"], acc=True, write=True)
        return lambda g: _write(g, d, src(g))
    if name in ("v_div_scale_f32", "v_div_scale_f64"):
        wide = name.endswith("f64")
        k = "f64" if wide else "f32"
        rd = (o.src64 if wide else o.src32)(f["src0"], k)
        neg = f.get("neg", 0)
        d = o.vrow(f["vdst"], count=2 if wide else 1, write=True)
        sd = f["sdst"]
        o.sreg(sd, 2, write=True)
        for v in (f["src1"], f["src2"]):
            (o.src64 if wide else o.src32)(v, k)

        def run(g):
            # scaling is needed only for operands near the ends of the exponent range; within it
            # the result is the selected operand unchanged and VCC is clear
            x = rd(g)
            if neg & 1:
                x = x ^ (U64(1 << 63) if wide else U32(0x80000000))
            if wide:
                _write(g, d, (x & U64(0xFFFFFFFF)).astype(U32))
                _write(g, d + 1, (x >> U64(32)).astype(U32))
            else:
                _write(g, d, x)
            g.S[:, sd:sd + 2] = 0
        return run
    if name in ("v_div_fmas_f32", "v_div_fmas_f64"):
        wide = name.endswith("f64")
        k = "f64" if wide else "f32"
        rds = [(o.src64 if wide else o.src32)(f[s], k) for s in ("src0", "src1", "src2")]
        neg = f.get("neg", 0)
        o.sreg(VCC, 2)
        d = o.vrow(f["vdst"], count=2 if wide else 1, write=True)

        def run(g):
            a, b, c = [_typed(r(g), k) for r in rds]
            a, b, c = [(-x if (neg >> i) & 1 else x) for i, x in enumerate((a, b, c))]
            with errstate:
                r = a.astype(F64) * b + c   # VCC is never set by the simulated v_div_scale: no rescale
            bits = _bits(r, k)
            if wide:
                _write(g, d, (bits & U64(0xFFFFFFFF)).astype(U32))
                _write(g, d + 1, (bits >> U64(32)).astype(U32))
            else:
                _write(g, d, bits)
        return run
    if name in ("v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32"):
        fmt = fp.fp8_formats(m.arch)[0 if "fp8" in name else 1]
        a, b = o.src32(f["src0"], "f32"), o.src32(f["src1"], "f32")
        d = o.vrow(f["vdst"], write=True)
        o.vrow(f["vdst"])
        hi = (f.get("op_sel", 0) >> 3) & 1
        neg, ab = f.get("neg", 0), f.get("abs", 0)
        sat = bool(f.get("clamp", 0))

        def run(g):
            x = [r(g).view(F32) for r in (a, b)]
            x = [(np.abs(v) if (ab >> i) & 1 else v) for i, v in enumerate(x)]
            x = [(-v if (neg >> i) & 1 else v) for i, v in enumerate(x)]
            lo8 = fp.f32_to_fp8(x[0], fmt, sat).astype(U32)
            hi8 = fp.f32_to_fp8(x[1], fmt, sat).astype(U32)
            word = lo8 | (hi8 << U32(8))
            old = g.V[d]
            val = (old & U32(0x0000FFFF)) | (word << U32(16)) if hi else (old & U32(0xFFFF0000)) | word
            _write(g, d, val)
        return run
    if name in ("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8"):
        fmt = fp.fp8_formats(m.arch)[0 if "fp8" in name else 1]
        pk = "_pk_" in name
        if inst.sub == "sdwa":
            sel = f["src0_sel"]
            byte = sel if sel <= 3 else 2 * (sel - 4)
        else:
            opsel = f.get("op_sel", 0) if e64 else 0
            byte = (opsel & 3) if not pk else 2 * (opsel & 1)
        a = o.src32(f["src0"], "b32", lit)
        d = o.vrow(f["vdst"], count=2 if pk else 1, write=True)

        def run(g):
            x = a(g)
            v0 = fp.fp8_to_f32((x >> U32(8 * byte)) & U32(0xFF), fmt)
            _write(g, d, v0.view(U32))
            if pk:
                v1 = fp.fp8_to_f32((x >> U32(8 * byte + 8)) & U32(0xFF), fmt)
                _write(g, d + 1, v1.view(U32))
        return run
    if name in ("v_bitop3_b32", "v_bitop3_b16"):
        # truth table: bits 0-2 in neg, 3-5 in abs, 6-7 in omod; index = s0 << 2 | s1 << 1 | s2
        table = f["neg"] | f["abs"] << 3 | f["omod"] << 6
        rds = [o.src32(f[s], "b32") for s in ("src0", "src1", "src2")]
        d = o.vrow(f["vdst"], write=True)
        b16 = name.endswith("b16")
        if b16:
            o.vrow(f["vdst"])

        def run(g):
            a, b, c = [r(g) for r in rds]
            out = U32(0)
            for idx in range(8):
                if table >> idx & 1:
                    out = out | ((a if idx & 4 else ~a) & (b if idx & 2 else ~b) & (c if idx & 1 else ~c))
            out = np.broadcast_to(out, (g.n, 64))
            if b16:
                if f["op_sel"] & 8:
                    out = (g.V[d] & U32(0xFFFF)) | (out << U32(16))
                else:
                    out = out & U32(0xFFFF)
            _write(g, d, out)
        return run
    if name == "v_permlane32_swap_b32" or name == "v_permlane16_swap_b32":
        x = o.vrow(f["vdst"], write=True)
        y = o.vrow(f["src0"] - 256, write=True)
        o.vrow(f["vdst"]), o.vrow(f["src0"] - 256)
        half = 32 if name.startswith("v_permlane32") else 16

        def run(g):
            a, b = g.V[x].copy(), g.V[y].copy()
            if half == 32:
                na = np.concatenate([a[:, :32], b[:, :32]], 1)
                nb = np.concatenate([a[:, 32:], b[:, 32:]], 1)
            else:
                na, nb = a.copy(), b.copy()
                for r in (1, 3):
                    na[:, r * 16:(r + 1) * 16] = b[:, (r - 1) * 16:r * 16]
                    nb[:, (r - 1) * 16:r * 16] = a[:, r * 16:(r + 1) * 16]
            _write(g, x, na)
            _write(g, y, nb)
        return run
    return None


# ---------------------------------------------------------------- VOP3P packed math
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
            if fn is None:
                _write(g, d, lo[0])
                _write(g, d + 1, hi[1])
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
