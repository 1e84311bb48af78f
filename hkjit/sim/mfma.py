"""MFMA: matrix fused multiply-add with the CDNA3/CDNA4 register layouts.

For a single-block M x N x K shape, lane l of the wave holds (AMD's CDNA3/CDNA4 ISA documents and matrix instruction calculator):
  16x16xK: A[l%16][(K/4)(l/16)+j], B[(K/4)(l/16)+j][l%16], D register r: D[4(l/16)+r][l%16]
  32x32xK: A[l%32][(K/2)(l/32)+j], B[(K/2)(l/32)+j][l%32], D register r: D[8(r/4)+4(l/32)+r%4][l%32]
Products are exact in float64 and the sum is rounded once to float32."""

import re

import numpy as np

from . import coverage, fp

U8, U16, U32 = np.uint8, np.uint16, np.uint32

_NAME = re.compile(r"v_mfma_(f32|i32)_(\d+)x(\d+)x(\d+)_(bf16|f16|fp8_fp8|fp8_bf8|bf8_fp8|bf8_bf8|f8f6f4|i8|f32)$")
# bits per element of each input type
_BITS = {"bf16": 16, "f16": 16, "fp8": 8, "bf8": 8, "i8": 8, "f32": 32}


def _shape(M, K):
    """(K-elements per lane, output registers) of a single-block M x M x K MFMA."""
    return (K // 4, 4) if M == 16 else (K // 2, 16)


_RAW = {8: U8, 16: U16, 32: U32}       # element bits -> the raw dtype of an element


def _decode(raw, typ, arch):
    """Raw element bits -> float64 values (int64 for i8)."""
    if typ == "bf16":
        return (raw.astype(U32) << U32(16)).view(np.float32).astype(np.float64)
    if typ == "f16":
        return raw.view(np.float16).astype(np.float64)
    if typ in ("fp8", "bf8"):
        fmt = fp.fp8_formats(arch)[0 if typ == "fp8" else 1]
        return fp.FP8_TABLES[fmt][raw].astype(np.float64)
    if typ == "i8":
        return raw.view(np.int8).astype(np.int64)
    if typ == "f32":
        return raw.view(np.float32).astype(np.float64)
    raise ValueError(typ)


def compile_mfma(o, inst, m):
    f, name = inst.f, inst.name
    mo = _NAME.match(name)
    if not mo:
        return None
    out_t, M, N, K, intype = mo.group(1), int(mo.group(2)), int(mo.group(3)), int(mo.group(4)), mo.group(5)
    if M != N or M not in (16, 32):
        return None
    scaled = intype == "f8f6f4"
    if scaled:
        fmts = {0: "fp8", 1: "bf8"}
        if f["cbsz"] not in fmts or f["blgp"] not in fmts:
            raise o.err(coverage.limit("mfma-fp6-fp4"))
        ta, tb = fmts[f["cbsz"]], fmts[f["blgp"]]
    else:
        if f["cbsz"] or f["abid"] or f["blgp"]:
            raise o.err(coverage.limit("mfma-broadcast"))
        if "_" in intype and intype not in ("f8f6f4",):
            ta, tb = intype.split("_")
        else:
            ta = tb = intype
    kp, R = _shape(M, K)
    if kp * _BITS[ta] % 32:
        return None
    na, nb = kp * _BITS[ta] // 32, kp * _BITS[tb] // 32
    acc_a, acc_b = bool(f["acc"] & 1), bool(f["acc"] & 2)
    a_row = o.vrow(f["src0"] - 256, acc=acc_a, count=na) if f["src0"] >= 256 else None
    b_row = o.vrow(f["src1"] - 256, acc=acc_b, count=nb) if f["src1"] >= 256 else None
    if a_row is None or b_row is None:
        raise o.err(coverage.limit("mfma-operand"))
    cd_acc = bool(f["acc_cd"])
    if f["src2"] >= 256:
        c_row = o.vrow(f["src2"] - 256, acc=cd_acc, count=R)
        c_const = None
    else:
        c_row = None
        c_const = o.const32(f["src2"], "f32", None) if out_t == "f32" else o.const32(f["src2"], "b32", None)
    d_row = o.vrow(f["vdst"], acc=cd_acc, count=R, write=True)
    arch = m.arch

    nkb = 64 // M
    etype_a, etype_b = _RAW[_BITS[ta]], _RAW[_BITS[tb]]

    def operand(g, row, nregs, etype, typ, scale):
        """(n, 64 lanes, kp elements) of raw bits -> the matrix as float64 (int64 for i8): lane
        l = i + M * kb holds K-elements kb * kp .. kb * kp + kp - 1 of row (A) or column (B) i.
        Rearranged while still raw (small), decoded once."""
        n = g.n
        # lane i + M * kb, register r -> [n, i, kb, r]: one copy of whole registers, whose
        # elements (low bits first) are then consecutive
        regs = g.V[row:row + nregs].reshape(nregs, n, nkb, M)
        raw = np.ascontiguousarray(regs.transpose(1, 3, 2, 0)).view(etype).reshape(n, M, nkb, -1)[..., :kp]
        x = _decode(raw, typ, arch).reshape(n, M, K)
        if scale is not None:         # each lane's E8M0 scale covers the kp elements it holds
            x = x * np.repeat(scale.reshape(n, nkb, M).transpose(0, 2, 1), kp, axis=2)
        return x

    def run(g):
        n = g.n
        sa = sb = None
        if scaled:
            if g.scale is not None:
                sa, sb = g.scale[0](g), g.scale[1](g)
            g.scale = None
        A = operand(g, a_row, na, etype_a, ta, sa)                      # (n, M, K)
        B = operand(g, b_row, nb, etype_b, tb, sb).transpose(0, 2, 1)    # (n, K, N)
        D = np.matmul(A, B)
        # register r of lane l: D[4(l/16) + r][l % 16] (16x16) / D[8(r/4) + 4(l/32) + r%4][l % 32]
        if M == 16:
            out = D.reshape(n, 4, 4, 16).transpose(2, 0, 1, 3).reshape(4, n, 64)
        else:
            out = D.reshape(n, 4, 2, 4, 32).transpose(1, 3, 0, 2, 4).reshape(16, n, 64)
        C = g.V[c_row:c_row + R] if c_row is not None else c_const.reshape(1, 1, 1)
        if out_t == "f32":
            res = (out + C.view(np.float32)).astype(np.float32).view(U32)
        else:
            res = (out.astype(np.int64) + C.view(np.int32)).astype(np.int32).view(U32)
        if g.full:
            g.V[d_row:d_row + R] = res
        else:
            for r in range(R):
                np.copyto(g.V[d_row + r], res[r], where=g.exec)
    return run


def compile_ld_scale(o, inst, m):
    """v_mfma_ld_scale_b32: the E8M0 scales of the next scaled MFMA; op_sel/op_sel_hi pick the
    byte of each lane's register (byte = op_sel[i] | op_sel_hi[i] << 1)."""
    f = inst.f
    ra = o.src32(f["src0"], "b32")
    rb = o.src32(f["src1"], "b32")
    bya = (f["op_sel"] & 1) | ((f["op_sel_hi"] & 1) << 1)
    byb = ((f["op_sel"] >> 1) & 1) | (((f["op_sel_hi"] >> 1) & 1) << 1)

    def sel(rd, by):
        return lambda g: fp.e8m0_to_f32((np.broadcast_to(rd(g), (g.n, 64)) >> U32(8 * by)) & U32(0xFF)).astype(np.float64)

    sa, sb = sel(ra, bya), sel(rb, byb)

    def run(g):
        a, b = sa(g), sb(g)
        g.scale = (lambda g, a=a: a, lambda g, b=b: b)
    return run


def compilers(names):
    out = {n: compile_mfma for n in names if _NAME.match(n)}
    out.update({n: compile_ld_scale for n in names if n == "v_mfma_ld_scale_b32"})
    return out
