"""Vector compares (VOPC and their VOP3 forms, v_cmpx writing EXEC, v_cmp_class) with VOP3
modifiers and SDWA."""

import numpy as np

from . import coverage
from .state import EXEC, VCC, pack_mask
from .valu import VIEW, WIDTH, _float, _sdwa_sel, _typed, errstate

U16, U32, U64 = np.uint16, np.uint32, np.uint64
F16, F32 = np.float16, np.float32


_CMPF = {"f": lambda a, b: np.zeros(np.broadcast_shapes(a.shape, b.shape), bool),
         "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b),
         "ge": np.greater_equal, "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
         "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
         "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b),
         "nlt": lambda a, b: ~(a < b), "tru": lambda a, b: np.ones(np.broadcast_shapes(a.shape, b.shape), bool),
         "ne": np.not_equal, "t": lambda a, b: np.ones(np.broadcast_shapes(a.shape, b.shape), bool)}


def _cmp_class(x, mask):
    m = mask.astype(U32)
    isn = np.isnan(x)
    # signalling NaN: quiet bit clear
    if x.dtype == F32:
        quiet = (x.view(U32) >> U32(22)) & U32(1) == 1
    elif x.dtype == F16:
        quiet = (x.view(U16) >> U16(9)) & U16(1) == 1
    else:
        quiet = (x.view(U64) >> U64(51)) & U64(1) == 1
    neg = np.signbit(x)
    tiny = np.finfo(x.dtype).tiny
    ax = np.abs(x)
    sub = (ax < tiny) & (ax > 0)
    zero = ax == 0
    inf = np.isinf(x)
    normal = ~isn & ~inf & ~sub & ~zero
    classes = [isn & ~quiet, isn & quiet, inf & neg, normal & neg, sub & neg, zero & neg, zero & ~neg,
               sub & ~neg, normal & ~neg, inf & ~neg]
    out = np.zeros(np.broadcast_shapes(x.shape, m.shape), bool)
    for i, c in enumerate(classes):
        out |= c & ((m >> U32(i)) & U32(1) == 1)
    return out



def compile_vopc(o, inst, m):
    f = inst.f
    name = inst.name
    parts = name.split("_")  # v, cmp[x], op, type   | v_cmp[x]_class_f32
    if len(parts) != 4 or parts[1] not in ("cmp", "cmpx"):
        return None
    cmpx = parts[1] == "cmpx"
    opn, typ = parts[2], parts[3]
    if typ not in VIEW:
        return None
    e64 = inst.fam == "VOP3"
    lit = f.get("literal")
    is_class = opn == "class"
    kinds = (typ, "u32") if is_class else (typ, typ)
    srcs = [f["src0"], f["src1"] if e64 else f["vsrc1"] + (0 if f.get("src1_sgpr") else 256)]   # SDWA S1: an SGPR
    neg = f.get("neg", 0) if (e64 or inst.sub) else 0
    ab = f.get("abs", 0) if (e64 or inst.sub) else 0
    readers = []
    for i, (k, v) in enumerate(zip(kinds, srcs)):
        if inst.sub == "dpp":
            raise o.err(coverage.limit("dpp-compare"))
        if WIDTH[k] == 64:
            rd = o.src64(v, k if _float(k) else "b64", lit)
        else:
            rd = o.src32(v, k if k in ("f16", "f32") else ("b16" if WIDTH[k] == 16 else "b32"), lit)
            if inst.sub == "sdwa":
                sel = f["src0_sel"] if i == 0 else f["src1_sel"]
                sext = f["src0_sext"] if i == 0 else f["src1_sext"]
                if sel != 6 or sext:
                    rd = (lambda rd, sel, sext: lambda g: _sdwa_sel(rd(g), sel, sext))(rd, sel, sext)
        rd = (lambda rd, k: lambda g: _typed(rd(g), k))(rd, k)
        if _float(k) and ((neg >> i) & 1 or (ab >> i) & 1):
            n_, a_ = (neg >> i) & 1, (ab >> i) & 1
            rd = (lambda rd, n_, a_: lambda g: (-np.abs(rd(g)) if a_ else -rd(g)) if n_ else np.abs(rd(g)))(rd, n_, a_)
        readers.append(rd)
    cmpf = _cmp_class if is_class else _CMPF.get(opn)
    if cmpf is None:
        return None
    sd = f["sdst"] if e64 or inst.sub == "sdwa" else VCC
    if e64:
        sd = f["vdst"]
    o.sreg(sd, 2, write=True)
    if cmpx:
        o.sreg(EXEC, 2, write=True)
    a, b = readers

    def run(g):
        with errstate:
            r = cmpf(a(g), b(g))
        r = np.broadcast_to(r, (g.n, 64)) & g.exec
        packed = pack_mask(r)
        if cmpx:
            if not e64 or sd != EXEC:
                g.S[:, sd:sd + 2] = packed
            g.S[:, EXEC:EXEC + 2] = packed
            g.update_exec()
        else:
            g.S[:, sd:sd + 2] = packed
            if sd == EXEC:
                g.update_exec()
    return run


def compilers(names):
    out = {}
    for n in names:
        parts = n.split("_")
        if parts[0] == "v" and len(parts) == 4 and parts[1] in ("cmp", "cmpx") and parts[3] in VIEW and \
                (parts[2] in _CMPF or parts[2] == "class"):
            out[n] = compile_vopc
    return out
