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


def _arith32(name, a, b, c):
    a64, b64 = a.astype(I64), b.astype(I64)
    ai, bi = _i(a, False).astype(I64), _i(b, False).astype(I64)
    if name == "s_add_u32":
        r = a64 + b64
        return r.astype(U32), r >> 32 != 0
    if name == "s_sub_u32":
        return (a64 - b64).astype(U32), b64 > a64
    if name == "s_addc_u32":
        r = a64 + b64 + c.astype(I64)
        return r.astype(U32), r >> 32 != 0
    if name == "s_subb_u32":
        r = a64 - b64 - c.astype(I64)
        return r.astype(U32), r < 0
    if name in ("s_add_i32", "s_sub_i32"):
        r = ai + bi if name == "s_add_i32" else ai - bi
        return r.astype(U32), (r > 0x7FFFFFFF) | (r < -0x80000000)
    if name == "s_mul_i32":
        return (ai * bi).astype(U32), None
    if name == "s_mul_hi_u32":
        return ((a64 * b64) >> 32).astype(U32), None
    if name == "s_mul_hi_i32":
        return ((ai * bi) >> 32).astype(U32), None
    if name == "s_min_i32":
        return np.where(ai < bi, a, b), ai < bi
    if name == "s_max_i32":
        return np.where(ai > bi, a, b), ai > bi
    if name == "s_min_u32":
        return np.where(a64 < b64, a, b), a64 < b64
    if name == "s_max_u32":
        return np.where(a64 > b64, a, b), a64 > b64
    if name == "s_absdiff_i32":
        r = np.abs(ai - bi)
        return r.astype(U32), r != 0
    if name.startswith("s_lshl") and name.endswith("_add_u32"):
        k = int(name[6])
        r = (a64 << k) + b64
        return r.astype(U32), r >> 32 != 0
    if name == "s_pack_ll_b32_b16":
        return (a & U32(0xFFFF)) | (b << U32(16)), None
    if name == "s_pack_lh_b32_b16":
        return (a & U32(0xFFFF)) | (b & U32(0xFFFF0000)), None
    if name == "s_pack_hh_b32_b16":
        return (a >> U32(16)) | (b & U32(0xFFFF0000)), None
    return None


_ARITH32 = {"s_add_u32", "s_sub_u32", "s_addc_u32", "s_subb_u32", "s_add_i32", "s_sub_i32", "s_mul_i32",
            "s_mul_hi_u32", "s_mul_hi_i32", "s_min_i32", "s_max_i32", "s_min_u32", "s_max_u32",
            "s_absdiff_i32", "s_lshl1_add_u32", "s_lshl2_add_u32", "s_lshl3_add_u32", "s_lshl4_add_u32",
            "s_pack_ll_b32_b16", "s_pack_lh_b32_b16", "s_pack_hh_b32_b16"}


def compile_sop2(o, inst):
    f, name = inst.f, inst.name
    lit = f.get("literal")
    if name in _ARITH32:
        a, b = o.ssrc(f["ssrc0"], False, lit), o.ssrc(f["ssrc1"], False, lit)
        w = o.sdst(f["sdst"])

        def run(g):
            av, bv = np.broadcast_to(a(g), (g.n,)), np.broadcast_to(b(g), (g.n,))
            r, c = _arith32(name, av, bv, g.scc)
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


def _popc(x, wide):
    x = np.asarray(x).astype(U64)
    return np.array([bin(int(v)).count("1") for v in np.atleast_1d(x)], U32)


def compile_sop1(o, inst, m):
    f, name = inst.f, inst.name
    lit = f.get("literal")
    if name.endswith("saveexec_b64"):
        op = name[2:-len("_saveexec_b64")]
        fns = {"and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
               "andn2": lambda s, e: s & ~e, "orn2": lambda s, e: s | ~e, "nand": lambda s, e: ~(s & e),
               "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
               "andn1": lambda s, e: ~s & e, "orn1": lambda s, e: ~s | e}
        if op not in fns:
            return None
        fn = fns[op]
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
    if name in ("s_mov_b32", "s_mov_b64", "s_cmov_b32", "s_cmov_b64", "s_not_b32", "s_not_b64", "s_brev_b32",
                "s_sext_i32_i8", "s_sext_i32_i16", "s_abs_i32", "s_bcnt1_i32_b32", "s_bcnt1_i32_b64",
                "s_bcnt0_i32_b32", "s_ff1_i32_b32", "s_ff1_i32_b64", "s_flbit_i32_b32", "s_flbit_i32_b64",
                "s_bitset0_b32", "s_bitset1_b32", "s_wqm_b64", "s_quadmask_b64"):
        wide_src = name.endswith("64")
        wide_dst = name in ("s_mov_b64", "s_cmov_b64", "s_not_b64", "s_wqm_b64", "s_quadmask_b64")
        a = o.ssrc(f["ssrc0"], wide_src, lit)
        if name.startswith("s_bitset"):
            o.sreg(f["sdst"])
        w = o.sdst(f["sdst"], wide_dst)
        d = f["sdst"]

        def run(g):
            x = np.broadcast_to(a(g), (g.n,))
            scc = None
            if name in ("s_mov_b32", "s_mov_b64"):
                r = x
            elif name.startswith("s_cmov"):
                if wide_dst:
                    old = g.S[:, d].astype(U64) | g.S[:, d + 1].astype(U64) << U64(32)
                else:
                    old = g.S[:, d]
                r = np.where(g.scc, x, old)
            elif name.startswith("s_not"):
                r = ~x
                scc = r != 0
            elif name == "s_brev_b32":
                r = np.array([int(f"{int(v):032b}"[::-1], 2) for v in x], U32)
            elif name == "s_sext_i32_i8":
                r = x.astype(np.int8).astype(I32).view(U32)
            elif name == "s_sext_i32_i16":
                r = x.astype(np.int16).astype(I32).view(U32)
            elif name == "s_abs_i32":
                r = np.abs(_i(x, False)).view(U32)
                scc = r != 0
            elif name.startswith("s_bcnt1"):
                r = _popc(x, wide_src)
                scc = r != 0
            elif name.startswith("s_bcnt0"):
                r = (64 if wide_src else 32) - _popc(x, wide_src)
                scc = r != 0
            elif name.startswith("s_ff1"):
                xx = x.astype(U64)
                r = np.array([(int(v) & -int(v)).bit_length() - 1 if v else 0xFFFFFFFF for v in xx], U32)
            elif name.startswith("s_flbit"):
                bits = 64 if wide_src else 32
                r = np.array([bits - int(v).bit_length() if v else 0xFFFFFFFF for v in x.astype(U64)], U32)
            elif name.startswith("s_bitset"):
                bit = U32(1) << (x.astype(U32) & U32(31))
                r = g.S[:, d] | bit if name == "s_bitset1_b32" else g.S[:, d] & ~bit
            elif name == "s_wqm_b64":
                q = np.zeros_like(x.astype(U64))
                for i in range(16):
                    nib = (x.astype(U64) >> U64(4 * i)) & U64(0xF)
                    q |= np.where(nib != 0, U64(0xF) << U64(4 * i), U64(0))
                r = q
                scc = r != 0
            else:  # s_quadmask_b64
                q = np.zeros(x.shape, U64)
                for i in range(16):
                    nib = (x.astype(U64) >> U64(4 * i)) & U64(0xF)
                    q |= np.where(nib != 0, U64(1) << U64(i), U64(0))
                r = q
                scc = r != 0
            w(g, np.asarray(r).astype(U64 if wide_dst else U32))
            if scc is not None:
                g.scc = np.asarray(scc, bool)
        return run
    if name == "s_getpc_b64":
        w = o.sdst(f["sdst"], True)
        val = U64(m.entry_addr + inst.addr + 4)
        return lambda g: w(g, np.full(g.n, val, U64))
    return None


def compile_sopk(o, inst, m):
    f, name = inst.f, inst.name
    k = f["simm16"]
    ks = k - 0x10000 if k & 0x8000 else k
    d = f["sdst"]
    if name == "s_movk_i32":
        w = o.sdst(d)
        v = U32(ks & 0xFFFFFFFF)
        return lambda g: w(g, np.full(g.n, v, U32))
    if name == "s_cmovk_i32":
        w = o.sdst(d)
        o.sreg(d)
        v = U32(ks & 0xFFFFFFFF)
        return lambda g: w(g, np.where(g.scc, v, g.S[:, d]))
    if name in ("s_addk_i32", "s_mulk_i32"):
        o.sreg(d)
        w = o.sdst(d)

        def run(g):
            x = _i(g.S[:, d], False).astype(I64)
            r = x + ks if name == "s_addk_i32" else x * ks
            w(g, r.astype(U32))
            if name == "s_addk_i32":
                g.scc = (r > 0x7FFFFFFF) | (r < -0x80000000)
        return run
    if name.startswith("s_cmpk_"):
        _, _, op, typ = name.split("_")
        o.sreg(d)
        cmpf = _SOPC[op]

        def run(g):
            x = g.S[:, d]
            if typ == "i32":
                g.scc = cmpf(_i(x, False), ks)
            else:
                g.scc = cmpf(x, U32(k))
        return run
    if name in ("s_getreg_b32",):
        w = o.sdst(d)
        hw = k & 0x3F
        val = {4: 0, 1: 0xF0}.get(hw, 0)   # HW_REG_TRAPSTS / MODE and the rest read as constants
        return lambda g: w(g, np.full(g.n, U32(val)))
    if name in ("s_setreg_b32", "s_setreg_imm32_b32"):
        return lambda g: None    # MODE changes (rounding, denormals) are not simulated
    return None


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
    if name in ("s_dcache_wb", "s_dcache_inv", "s_dcache_wb_vol", "s_dcache_inv_vol", "s_dcache_discard",
                "s_dcache_discard_x2", "s_atc_probe", "s_atc_probe_buffer"):     # cache and TLB hints
        return lambda g: None
    if name == "s_memtime" or name == "s_memrealtime":
        w = o.sdst(f["sdata"], True)
        return lambda g: w(g, np.full(g.n, U64(m.clock())))
    return None
