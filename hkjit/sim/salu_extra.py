"""More SOP1 instructions: 64-bit bit ops, find-first-zero, signed find-last-bit, the 32-bit
whole-quad and quad-mask forms (added to salu.SOP1), EXEC writes of s_andn{1,2}_wrexec_b64 and
the SGPR-relative moves s_movrels / s_movreld (SGPR index = operand + M0). Values are (n,)
arrays, one per wave."""

import numpy as np

from .salu import SOP1
from .state import EXEC, M0

U32, U64, I64 = np.uint32, np.uint64, np.int64


def _bits(x, width):
    """(n,) -> (n, width) bool, bit i in column i."""
    x = np.asarray(x).astype(U64)
    return ((x[:, None] >> np.arange(width, dtype=U64)) & U64(1)).astype(bool)


def _from_bits(b):
    return (b.astype(U64) << np.arange(b.shape[1], dtype=U64)).sum(1, dtype=U64)


def _first(b, fill=0xFFFFFFFF):
    """Index of the first True per row, or fill."""
    return np.where(b.any(1), b.argmax(1), fill).astype(U32)


def _flbit_signed(x, width):
    b = _bits(x, width)[:, ::-1]                      # MSB first
    diff = b != b[:, :1]
    return _first(diff)                              # -1 (all bits equal the sign) -> 0xFFFFFFFF


def _quads(x, width, lanes_per_bit):
    q = _bits(x, width).reshape(-1, width // 4, 4).any(2)
    return np.repeat(q, 4, axis=1) if lanes_per_bit == 4 else q


SOP1.update({        # joins salu.SOP1: name -> (64-bit source, 64-bit destination, fn(x, old, scc), sets SCC)
    "s_bitset0_b64": (False, True, lambda x, d, c: d & ~(U64(1) << (x.astype(U64) & U64(63))), False),
    "s_bitset1_b64": (False, True, lambda x, d, c: d | (U64(1) << (x.astype(U64) & U64(63))), False),
    "s_brev_b64": (True, True, lambda x, d, c: _from_bits(_bits(x, 64)[:, ::-1]), False),
    "s_bcnt0_i32_b64": (True, False, lambda x, d, c: (64 - _bits(x, 64).sum(1)).astype(U32), True),
    "s_ff0_i32_b32": (False, False, lambda x, d, c: _first(~_bits(x, 32)), False),
    "s_ff0_i32_b64": (True, False, lambda x, d, c: _first(~_bits(x, 64)), False),
    "s_flbit_i32": (False, False, lambda x, d, c: _flbit_signed(x, 32), False),
    "s_flbit_i32_i64": (True, False, lambda x, d, c: _flbit_signed(x, 64), False),
    "s_wqm_b32": (False, False, lambda x, d, c: _from_bits(_quads(x, 32, 4)).astype(U32), True),
    "s_quadmask_b32": (False, False, lambda x, d, c: _from_bits(_quads(x, 32, 1)).astype(U32), True),
    "s_bitreplicate_b64_b32": (False, True, lambda x, d, c: _from_bits(np.repeat(_bits(x, 32), 2, axis=1)), False),
})


def compilers(names):
    return {n: compile_sop1 for n in names if n in ("s_andn1_wrexec_b64", "s_andn2_wrexec_b64")
            or n.startswith(("s_movrels_", "s_movreld_"))}


def compile_sop1(o, inst, m):
    f, name = inst.f, inst.name
    lit = f.get("literal")
    if name in ("s_andn1_wrexec_b64", "s_andn2_wrexec_b64"):
        a = o.ssrc(f["ssrc0"], True, lit)
        w = o.sdst(f["sdst"], True)
        o.sreg(EXEC, 2)
        o.sreg(EXEC, 2, write=True)
        n1 = name == "s_andn1_wrexec_b64"

        def run(g):
            e = g.S[:, EXEC].astype(U64) | g.S[:, EXEC + 1].astype(U64) << U64(32)
            s = np.broadcast_to(a(g), (g.n,)).astype(U64)
            ne = (~s & e) if n1 else (s & ~e)
            g.S[:, EXEC] = (ne & U64(0xFFFFFFFF)).astype(U32)
            g.S[:, EXEC + 1] = (ne >> U64(32)).astype(U32)
            g.update_exec()
            w(g, ne)
            g.scc = ne != 0
        return run
    if name.startswith(("s_movrels_", "s_movreld_")):
        count = 2 if name.endswith("b64") else 1
        rel_src = name.startswith("s_movrels")
        fixed = f["ssrc0"] if rel_src else f["sdst"]
        if fixed > 101:
            return None
        o.sreg(M0)
        # any SGPR may be read or written: every SGPR is a hazard key of this instruction
        o.sreg(0, 102, write=not rel_src)
        o.sreg(0, 102)
        other = o.sdst(f["sdst"], count == 2) if rel_src else o.ssrc(f["ssrc0"], count == 2, lit)
        rows = np.arange(count)
        report = m.reporter(inst)

        def run(g):
            idx = (fixed + g.S[:, M0].astype(I64))[:, None] + rows     # (n, count)
            if (idx > 101).any():
                report(g, "sgpr-index", f"{name}: SGPR index {int(idx.max())} (operand + M0) is past s101; "
                                        f"the move is dropped")
                return
            waves = np.arange(g.n)[:, None]
            if rel_src:
                v = g.S[waves, idx]
                other(g, v[:, 0] if count == 1 else v[:, 0].astype(U64) | v[:, 1].astype(U64) << U64(32))
            else:
                v = np.broadcast_to(other(g), (g.n,)).astype(U64)
                g.S[waves, idx] = np.stack([v & U64(0xFFFFFFFF), v >> U64(32)], 1)[:, :count].astype(U32)
        return run
    return None
