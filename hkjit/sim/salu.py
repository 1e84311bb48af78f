"""Scalar ALU, scalar memory and program control (SOP1/SOP2/SOPC/SOPK/SOPP/SMEM).
Every scalar op is vectorised over the waves of a group: values are (n,) arrays."""

import numpy as np


from .state import EXEC

U32, U64, I32, I64 = np.uint32, np.uint64, np.int32, np.int64
M32, M64 = U32(0xFFFFFFFF), U64(0xFFFFFFFFFFFFFFFF)


def _i(x, wide):
    return np.asarray(x).astype(U64 if wide else U32).view(I64 if wide else I32)


def _shift(x, wide):
    return np.asarray(x).astype(U64 if wide else U32) & (U64(63) if wide else U32(31))


def _bfe(x, s, wide, signed):
    w = U64 if wide else U32
    bits = 64 if wide else 32
    s = np.asarray(s).astype(w)
    off = s & w(bits - 1)
    width = (s >> w(16)) & w(0x7F)
    x = np.asarray(x).astype(w)
    width = np.minimum(width, w(bits))
    val = np.where(width == 0, w(0), (x >> off) & ((w(1) << np.minimum(width, w(bits - 1))) - w(1)))
    val = np.where(width >= bits, x >> off, val)
    if signed:
        sh = (w(bits) - np.minimum(width, w(bits))).astype(w)
        sv = np.where(width == 0, 0, ((val << sh).view(I64 if wide else I32) >> sh.astype(I64 if wide else I32)))
        return np.asarray(sv).astype(I64 if wide else I32).view(w)
    return val


# SOP2: name -> (wide, fn(a, b, scc) -> (result, scc or None))
def _sop2():
    t = {}
    for wide, sfx in ((False, "32"), (True, "64")):
        w = U64 if wide else U32
        t[f"s_and_b{sfx}"] = (wide, lambda a, b, c: a & b)
        t[f"s_or_b{sfx}"] = (wide, lambda a, b, c: a | b)
        t[f"s_xor_b{sfx}"] = (wide, lambda a, b, c: a ^ b)
        t[f"s_andn2_b{sfx}"] = (wide, lambda a, b, c: a & ~b)
        t[f"s_orn2_b{sfx}"] = (wide, lambda a, b, c: a | ~b)
        t[f"s_nand_b{sfx}"] = (wide, lambda a, b, c: ~(a & b))
        t[f"s_nor_b{sfx}"] = (wide, lambda a, b, c: ~(a | b))
        t[f"s_xnor_b{sfx}"] = (wide, lambda a, b, c: ~(a ^ b))
        t[f"s_lshl_b{sfx}"] = (wide, lambda a, b, c, wide=wide: a << _shift(b, wide))
        t[f"s_lshr_b{sfx}"] = (wide, lambda a, b, c, wide=wide: a >> _shift(b, wide))
        t[f"s_ashr_i{sfx}"] = (wide, lambda a, b, c, wide=wide, w=w: (_i(a, wide) >> _shift(b, wide).astype(
            I64 if wide else I32)).view(w))
        t[f"s_bfm_b{sfx}"] = (wide, lambda a, b, c, wide=wide, w=w: (
            ((w(1) << _shift(a, wide)) - w(1)) << _shift(b, wide)))
        t[f"s_bfe_u{sfx}"] = (wide, lambda a, b, c, wide=wide: _bfe(a, b, wide, False))
        t[f"s_bfe_i{sfx}"] = (wide, lambda a, b, c, wide=wide: _bfe(a, b, wide, True))
        t[f"s_cselect_b{sfx}"] = (wide, lambda a, b, c: (np.where(c, a, b), None))
    return t


SOP2 = _sop2()
SOP2_NOSCC = {"s_bfm_b32", "s_bfm_b64", "s_cselect_b32", "s_cselect_b64", "s_mul_i32", "s_mul_hi_u32",
              "s_mul_hi_i32", "s_pack_ll_b32_b16", "s_pack_lh_b32_b16", "s_pack_hh_b32_b16"}


def _carry32(r):
    return r.astype(U32), r >> 32 != 0


def _overflow32(r):
    return r.astype(U32), (r > 0x7FFFFFFF) | (r < -0x80000000)


def _lshl_add(k):
    return lambda a, b, ai, bi, c: _carry32((a << k) + b)


# 32-bit arithmetic SOP2: name -> fn(a, b as int64 of the unsigned value, ai, bi as int64 of the
# signed value, scc) -> (uint32 result, new SCC or None to keep it)
ARITH32 = {
    "s_add_u32": lambda a, b, ai, bi, c: _carry32(a + b),
    "s_sub_u32": lambda a, b, ai, bi, c: ((a - b).astype(U32), b > a),
    "s_addc_u32": lambda a, b, ai, bi, c: _carry32(a + b + c),
    "s_subb_u32": lambda a, b, ai, bi, c: ((a - b - c).astype(U32), a - b - c < 0),
    "s_add_i32": lambda a, b, ai, bi, c: _overflow32(ai + bi),
    "s_sub_i32": lambda a, b, ai, bi, c: _overflow32(ai - bi),
    "s_mul_i32": lambda a, b, ai, bi, c: ((ai * bi).astype(U32), None),
    "s_mul_hi_u32": lambda a, b, ai, bi, c: (((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32), None),
    "s_mul_hi_i32": lambda a, b, ai, bi, c: (((ai * bi) >> 32).astype(U32), None),
    "s_min_i32": lambda a, b, ai, bi, c: (np.where(ai < bi, a, b).astype(U32), ai < bi),
    "s_max_i32": lambda a, b, ai, bi, c: (np.where(ai > bi, a, b).astype(U32), ai > bi),
    "s_min_u32": lambda a, b, ai, bi, c: (np.where(a < b, a, b).astype(U32), a < b),
    "s_max_u32": lambda a, b, ai, bi, c: (np.where(a > b, a, b).astype(U32), a > b),
    "s_absdiff_i32": lambda a, b, ai, bi, c: (np.abs(ai - bi).astype(U32), ai != bi),
    "s_lshl1_add_u32": _lshl_add(1), "s_lshl2_add_u32": _lshl_add(2), "s_lshl3_add_u32": _lshl_add(3),
    "s_lshl4_add_u32": _lshl_add(4),
    "s_pack_ll_b32_b16": lambda a, b, ai, bi, c: (((a & 0xFFFF) | (b << 16)).astype(U32), None),
    "s_pack_lh_b32_b16": lambda a, b, ai, bi, c: (((a & 0xFFFF) | (b & 0xFFFF0000)).astype(U32), None),
    "s_pack_hh_b32_b16": lambda a, b, ai, bi, c: (((a >> 16) | (b & 0xFFFF0000)).astype(U32), None),
}
_ARITH32 = set(ARITH32)


def compile_sop2(o, inst):
    f, name = inst.f, inst.name
    lit = f.get("literal")
    if name in ARITH32:
        fn = ARITH32[name]
        a, b = o.ssrc(f["ssrc0"], False, lit), o.ssrc(f["ssrc1"], False, lit)
        w = o.sdst(f["sdst"])

        def run(g):
            av, bv = np.broadcast_to(a(g), (g.n,)), np.broadcast_to(b(g), (g.n,))
            r, c = fn(av.astype(I64), bv.astype(I64), _i(av, False).astype(I64), _i(bv, False).astype(I64),
                      g.scc.astype(I64))
            w(g, r)
            if c is not None:
                g.scc = np.asarray(c, bool)
        return run
    if name not in SOP2:
        return None
    wide, fn = SOP2[name]
    shift_b = name.startswith(("s_lshl_", "s_lshr_", "s_ashr_", "s_bfe_")) or name.startswith("s_bfm")
    a = o.ssrc(f["ssrc0"], wide and not name.startswith("s_bfm"), lit)
    b = o.ssrc(f["ssrc1"], wide and not shift_b, lit)
    w = o.sdst(f["sdst"], wide)
    setscc = name not in SOP2_NOSCC
    zero = U64(0) if wide else U32(0)

    def run(g):
        av, bv = np.broadcast_to(a(g), (g.n,)), np.broadcast_to(b(g), (g.n,))
        r = fn(av, bv, g.scc)
        if isinstance(r, tuple):
            r = r[0]
        r = np.asarray(r).astype(U64 if wide else U32)
        w(g, r)
        if setscc:
            g.scc = r != zero
    return run


_SOPC = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less,
         "le": np.less_equal}


def compile_sopc(o, inst):
    f, name = inst.f, inst.name
    lit = f.get("literal")
    parts = name.split("_")
    if parts[1] == "cmp" and len(parts) == 4:
        cmpf, typ = _SOPC[parts[2]], parts[3]
        wide = typ == "u64"
        a, b = o.ssrc(f["ssrc0"], wide, lit), o.ssrc(f["ssrc1"], wide, lit)
        signed = typ == "i32"

        def run(g):
            av, bv = np.broadcast_to(a(g), (g.n,)), np.broadcast_to(b(g), (g.n,))
            if signed:
                av, bv = _i(av, False), _i(bv, False)
            g.scc = cmpf(av, bv)
        return run
    if parts[1] in ("bitcmp0", "bitcmp1"):
        wide = parts[2] == "b64"
        a, b = o.ssrc(f["ssrc0"], wide, lit), o.ssrc(f["ssrc1"], False, lit)
        want = 1 if parts[1] == "bitcmp1" else 0
        w = U64 if wide else U32

        def run(g):
            bit = (np.asarray(a(g)).astype(w) >> (np.asarray(b(g)).astype(w) & w(63 if wide else 31))) & w(1)
            g.scc = np.broadcast_to(bit == want, (g.n,)).copy()
        return run
    return None


def _popc(x):
    x = np.asarray(x).astype(U64)
    return np.unpackbits(x[:, None].view(np.uint8), axis=1).sum(1).astype(U32)


def _bit_reverse32(x):
    b = np.unpackbits(np.asarray(x).astype(U32)[:, None].view(np.uint8), axis=1, bitorder="little")
    return np.packbits(b[:, ::-1], axis=1, bitorder="little").view(U32)[:, 0]


def _first_set(x, bits):
    """Index of the lowest set bit, or -1 (0xFFFFFFFF)."""
    x = np.asarray(x).astype(U64)
    b = np.unpackbits(x[:, None].view(np.uint8), axis=1, bitorder="little")[:, :bits].astype(bool)
    return np.where(b.any(1), b.argmax(1), 0xFFFFFFFF).astype(U32)


def _leading_zeros(x, bits):
    """Count of leading zeros, or -1 for 0."""
    x = np.asarray(x).astype(U64)
    b = np.unpackbits(x[:, None].view(np.uint8), axis=1, bitorder="little")[:, :bits][:, ::-1].astype(bool)
    return np.where(b.any(1), b.argmax(1), 0xFFFFFFFF).astype(U32)


def _wqm(x, wide, per_quad):
    w = U64 if wide else U32
    bits = 64 if wide else 32
    q = np.zeros(x.shape, U64)
    xx = x.astype(U64)
    for i in range(bits // 4):
        on = (xx >> U64(4 * i)) & U64(0xF) != 0
        q |= np.where(on, U64(0xF) << U64(4 * i) if per_quad else U64(1) << U64(i), U64(0))
    return q.astype(w)


# unary SOP1: name -> (source is 64-bit, destination is 64-bit, fn(x, old destination, scc) ->
# result, whether SCC = result != 0). Those reading the old destination name it in OLD_DST.
SOP1 = {
    "s_mov_b32": (False, False, lambda x, d, c: x, False),
    "s_mov_b64": (True, True, lambda x, d, c: x, False),
    "s_cmov_b32": (False, False, lambda x, d, c: np.where(c, x, d), False),
    "s_cmov_b64": (True, True, lambda x, d, c: np.where(c, x, d), False),
    "s_not_b32": (False, False, lambda x, d, c: ~x, True),
    "s_not_b64": (True, True, lambda x, d, c: ~x, True),
    "s_brev_b32": (False, False, lambda x, d, c: _bit_reverse32(x), False),
    "s_sext_i32_i8": (False, False, lambda x, d, c: x.astype(np.int8).astype(I32).view(U32), False),
    "s_sext_i32_i16": (False, False, lambda x, d, c: x.astype(np.int16).astype(I32).view(U32), False),
    "s_abs_i32": (False, False, lambda x, d, c: np.abs(_i(x, False)).view(U32), True),
    "s_bcnt1_i32_b32": (False, False, lambda x, d, c: _popc(x), True),
    "s_bcnt1_i32_b64": (True, False, lambda x, d, c: _popc(x), True),
    "s_bcnt0_i32_b32": (False, False, lambda x, d, c: U32(32) - _popc(x), True),
    "s_ff1_i32_b32": (False, False, lambda x, d, c: _first_set(x, 32), False),
    "s_ff1_i32_b64": (True, False, lambda x, d, c: _first_set(x, 64), False),
    "s_flbit_i32_b32": (False, False, lambda x, d, c: _leading_zeros(x, 32), False),
    "s_flbit_i32_b64": (True, False, lambda x, d, c: _leading_zeros(x, 64), False),
    "s_bitset0_b32": (False, False, lambda x, d, c: d & ~(U32(1) << (x.astype(U32) & U32(31))), False),
    "s_bitset1_b32": (False, False, lambda x, d, c: d | (U32(1) << (x.astype(U32) & U32(31))), False),
    "s_wqm_b64": (True, True, lambda x, d, c: _wqm(x, True, True), True),
    "s_quadmask_b64": (True, True, lambda x, d, c: _wqm(x, True, False), True),
}
OLD_DST = {"s_cmov_b32", "s_cmov_b64", "s_bitset0_b32", "s_bitset1_b32", "s_bitset0_b64", "s_bitset1_b64"}
SAVEEXEC = {"and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
            "andn2": lambda s, e: s & ~e, "orn2": lambda s, e: s | ~e, "nand": lambda s, e: ~(s & e),
            "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e), "andn1": lambda s, e: ~s & e,
            "orn1": lambda s, e: ~s | e}


def compile_sop1(o, inst, m):
    f, name = inst.f, inst.name
    lit = f.get("literal")
    if name.endswith("_saveexec_b64"):
        fn = SAVEEXEC[name[2:-len("_saveexec_b64")]]
        a = o.ssrc(f["ssrc0"], True, lit)
        w = o.sdst(f["sdst"], True)
        o.sreg(EXEC, 2)
        o.sreg(EXEC, 2, write=True)

        def run(g):
            e = g.S[:, EXEC].astype(U64) | g.S[:, EXEC + 1].astype(U64) << U64(32)
            s = np.broadcast_to(a(g), (g.n,))
            ne = fn(s, e).astype(U64)
            w(g, e)
            g.S[:, EXEC] = (ne & U64(0xFFFFFFFF)).astype(U32)
            g.S[:, EXEC + 1] = (ne >> U64(32)).astype(U32)
            g.update_exec()
            g.scc = ne != 0
        return run
    if name == "s_getpc_b64":
        w = o.sdst(f["sdst"], True)
        val = U64(m.entry_addr + inst.addr + 4)
        return lambda g: w(g, np.full(g.n, val, U64))
    wide_src, wide_dst, fn, set_scc = SOP1[name]
    a = o.ssrc(f["ssrc0"], wide_src, lit)
    d = f["sdst"]
    old = o.ssrc(d, wide_dst) if name in OLD_DST else None
    w = o.sdst(d, wide_dst)
    t = U64 if wide_dst else U32

    def run(g):
        r = np.asarray(fn(np.broadcast_to(a(g), (g.n,)), old(g) if old else None, g.scc)).astype(t)
        w(g, r)
        if set_scc:
            g.scc = r != 0
    return run


def compilers(names):
    """The instructions of this module, by name."""
    out = {}
    for n in names:
        if n in SOP2 or n in _ARITH32:
            out[n] = lambda o, inst, m: compile_sop2(o, inst)
        elif (n.startswith("s_cmp_") and len(n.split("_")) == 4 and n.split("_")[2] in _SOPC
              and n.split("_")[3] in ("i32", "u32", "u64")) or n.startswith(("s_bitcmp0_", "s_bitcmp1_")):
            out[n] = lambda o, inst, m: compile_sopc(o, inst)
        elif n in SOP1 or n.endswith("_saveexec_b64") and n[2:-13] in SAVEEXEC or n == "s_getpc_b64":
            out[n] = compile_sop1
        elif n in SOPK:
            out[n] = compile_sopk
        elif n in SMEM_NAMES or n.startswith(("s_load_dword", "s_buffer_load_dword")):
            out[n] = compile_smem
    return out


SMEM_NAMES = {"s_dcache_wb", "s_dcache_inv", "s_dcache_wb_vol", "s_dcache_inv_vol", "s_dcache_discard",
              "s_dcache_discard_x2", "s_atc_probe", "s_atc_probe_buffer", "s_memtime", "s_memrealtime"}


def _sopk_value(o, inst, m, d, ks, k):
    w = o.sdst(d)
    v = U32(ks & 0xFFFFFFFF)
    if inst.name == "s_movk_i32":
        return lambda g: w(g, np.full(g.n, v, U32))
    o.sreg(d)
    return lambda g: w(g, np.where(g.scc, v, g.S[:, d]))          # s_cmovk_i32


def _sopk_arith(o, inst, m, d, ks, k):
    o.sreg(d)
    w = o.sdst(d)
    add = inst.name == "s_addk_i32"

    def run(g):
        x = _i(g.S[:, d], False).astype(I64)
        r = x + ks if add else x * ks
        w(g, r.astype(U32))
        if add:
            g.scc = (r > 0x7FFFFFFF) | (r < -0x80000000)
    return run


def _sopk_compare(o, inst, m, d, ks, k):
    _, _, op, typ = inst.name.split("_")
    o.sreg(d)
    cmpf = _SOPC[op]
    if typ == "i32":
        return lambda g: setattr(g, "scc", cmpf(_i(g.S[:, d], False), ks))
    return lambda g: setattr(g, "scc", cmpf(g.S[:, d], U32(k)))


def _getreg(o, inst, m, d, ks, k):
    w = o.sdst(d)
    val = U32({4: 0, 1: 0xF0}.get(k & 0x3F, 0))     # HW_REG_TRAPSTS / MODE and the rest read as constants
    return lambda g: w(g, np.full(g.n, val))


def _setreg(o, inst, m, d, ks, k):
    return lambda g: None              # MODE changes (rounding, denormals) are not simulated


SOPK = {"s_movk_i32": _sopk_value, "s_cmovk_i32": _sopk_value, "s_addk_i32": _sopk_arith,
        "s_mulk_i32": _sopk_arith, "s_getreg_b32": _getreg, "s_setreg_b32": _setreg, "s_setreg_imm32_b32": _setreg}
SOPK.update({f"s_cmpk_{op}_{t}": _sopk_compare for op in ("eq", "lg", "gt", "ge", "lt", "le") for t in ("i32", "u32")})


def compile_sopk(o, inst, m):
    k = inst.f["simm16"]
    return SOPK[inst.name](o, inst, m, inst.f["sdst"], k - 0x10000 if k & 0x8000 else k, k)


def waitcnt_fields(simm):
    vm = (simm & 0xF) | (simm >> 14 & 3) << 4
    lgkm = simm >> 8 & 0xF
    return vm, lgkm


def compile_smem(o, inst, m):
    f, name = inst.f, inst.name
    if name.startswith("s_load_dword") or name.startswith("s_buffer_load_dword"):
        n = {"": 1, "x2": 2, "x4": 4, "x8": 8, "x16": 16}[name.split("dword")[1]]
        buffer = name.startswith("s_buffer")
        base = o.sreg(f["sbase"], 4 if buffer else 2)
        soff = o.ssrc(f["soffset"], False) if "soffset" in f else None
        off = f["offset"]
        d = o.sreg(f["sdata"], n, write=True)
        keys = frozenset(o.wk)
        addr_inst = inst.addr
        report = m.reporter(inst)

        def run(g):
            a = g.S[:, base].astype(I64) | (g.S[:, base + 1].astype(I64) & (0xFFFF if buffer else 0xFFFFFFFF)) << 32
            a = a + off
            if soff is not None:
                a = a + np.asarray(soff(g)).astype(I64)
            a &= ~3
            data = m.mem.load(a, 4 * n, lambda msg: report(g, "out-of-bounds", msg))
            g.S[:, d:d + n] = data
            if m.checks:
                g.lgkmq.append((keys, addr_inst, None))
                g.pend |= keys
            if d <= EXEC + 1 < d + n or d <= EXEC < d + n:
                g.update_exec()
        return run
    if name in SMEM_NAMES and not name.startswith("s_mem"):     # cache and TLB hints
        return lambda g: None
    if name == "s_memtime" or name == "s_memrealtime":
        w = o.sdst(f["sdata"], True)
        return lambda g: w(g, np.full(g.n, U64(m.clock())))
    return None
