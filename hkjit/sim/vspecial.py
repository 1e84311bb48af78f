"""Vector instructions that do not fit the elementwise table: carries, lane-crossing reads and
writes, v_cndmask, 64-bit multiply-add, the division helpers, fp8 conversions, accumulation
register moves. One compiler per instruction, by name (SPECIAL); VOP3P packed math: vop3p.py."""

import numpy as np

from . import coverage, fp
from .state import VCC, EXEC, pack_mask, unpack_mask
from .valu import _typed, _bits, errstate

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


# name -> compiler(o, inst, m, f, name, e64, lit) of the instructions of this module
SPECIAL = {}


def _special(*names):
    def register(fn):
        for n in names:
            SPECIAL[n] = fn
        return fn
    return register


@_special("v_nop", "v_clrexcp")
def _nop(o, inst, m, f, name, e64, lit):
    return lambda g: None


@_special("v_cndmask_b32")
def _cndmask_b32(o, inst, m, f, name, e64, lit):
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


@_special("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32")
def _add_co_u32(o, inst, m, f, name, e64, lit):
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

    # result and carry/borrow out of (x, y, carry in)
    if name.startswith("v_add"):
        op = lambda x, y, c: (x + y + c, x + y + c > 0xFFFFFFFF)      # noqa: E731
    elif name.startswith(("v_subrev", "v_subbrev")):
        op = lambda x, y, c: (y - x - c, y - x - c < 0)                # noqa: E731
    else:
        op = lambda x, y, c: (x - y - c, x - y - c < 0)                # noqa: E731

    def run(g):
        r, co = op(a(g).astype(I64), b(g).astype(I64), carry_in(g).astype(I64) if carry_in else 0)
        _write(g, d, r.astype(U32))
        g.S[:, sd:sd + 2] = pack_mask(np.broadcast_to(co, (g.n, 64)) & g.exec)
        if sd == EXEC:
            g.update_exec()
    return run


@_special("v_mad_u64_u32", "v_mad_i64_i32")
def _mad_u64_u32(o, inst, m, f, name, e64, lit):
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


@_special("v_readfirstlane_b32")
def _readfirstlane_b32(o, inst, m, f, name, e64, lit):
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


@_special("v_readlane_b32")
def _readlane_b32(o, inst, m, f, name, e64, lit):
    r = o.vrow(f["src0"] - 256) if f["src0"] >= 256 else None
    if r is None:
        return None
    lane = o.ssrc(f["src1"], False)
    w = o.sdst(f["vdst"])
    return lambda g: w(g, g.V[r][np.arange(g.n), np.broadcast_to(lane(g), (g.n,)).astype(np.int64) & 63])


@_special("v_writelane_b32")
def _writelane_b32(o, inst, m, f, name, e64, lit):
    val = o.ssrc(f["src0"], False, lit)
    lane = o.ssrc(f["src1"], False)
    d = o.vrow(f["vdst"], write=True)
    o.vrow(f["vdst"])

    def run(g):
        g.V[d][np.arange(g.n), np.broadcast_to(lane(g), (g.n,)).astype(np.int64) & 63] = np.broadcast_to(val(g), (g.n,))
    return run


@_special("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32")
def _mbcnt_lo_u32_b32(o, inst, m, f, name, e64, lit):
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


@_special("v_swap_b32")
def _swap_b32(o, inst, m, f, name, e64, lit):
    x = o.vrow(f["vdst"], write=True)
    y = o.vrow(f["src0"] - 256, write=True)
    o.vrow(f["vdst"]), o.vrow(f["src0"] - 256)

    def run(g):
        a, b = g.V[x].copy(), g.V[y].copy()
        _write(g, x, b)
        _write(g, y, a)
    return run


@_special("v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_accvgpr_mov_b32")
def _accvgpr_read_b32(o, inst, m, f, name, e64, lit):
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


@_special("v_div_scale_f32", "v_div_scale_f64")
def _div_scale_f32(o, inst, m, f, name, e64, lit):
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


@_special("v_div_fmas_f32", "v_div_fmas_f64")
def _div_fmas_f32(o, inst, m, f, name, e64, lit):
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


@_special("v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32")
def _cvt_pk_fp8_f32(o, inst, m, f, name, e64, lit):
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


@_special("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")
def _cvt_f32_fp8(o, inst, m, f, name, e64, lit):
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


@_special("v_bitop3_b32", "v_bitop3_b16")
def _bitop3_b32(o, inst, m, f, name, e64, lit):
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


@_special("v_permlane32_swap_b32", "v_permlane16_swap_b32")
def _permlane32_swap_b32(o, inst, m, f, name, e64, lit):
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


def compile_special(o, inst, m):
    f, name = inst.f, inst.name
    if inst.sub and name not in ("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8"):
        raise o.err(coverage.limit("dpp-sdwa"))
    return SPECIAL[name](o, inst, m, f, name, inst.fam == "VOP3", f.get("literal"))


def compilers(names):
    return {n: compile_special for n in names if n in SPECIAL}
