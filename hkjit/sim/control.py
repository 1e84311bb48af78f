"""Program control: SOPP (waits, barriers, branches, traps, hints) and the PC-writing SOP1/SOPK
instructions. Each compiler returns (fn, True) for a block terminator: fn(g) gives the next pc,
None at s_endpgm, "barrier", ("split", taken, pc if taken, pc if not) where waves of a group
branch differently, or ("multi", per-wave pcs)."""

import numpy as np

from .errors import SimError
from .salu import waitcnt_fields
from .state import VCC

U64, I64 = np.uint64, np.int64
HINTS = {"s_nop", "s_setprio", "s_sleep", "s_icache_inv", "s_incperflevel", "s_decperflevel", "s_ttracedata",
         "s_sendmsg", "s_sendmsghalt", "s_sethalt", "s_endpgm_saved", "s_wakeup", "s_barrier_nop"}
CONDITIONS = {
    "s_cbranch_scc0": lambda g: ~g.scc.astype(bool), "s_cbranch_scc1": lambda g: g.scc.astype(bool),
    "s_cbranch_vccz": lambda g: (g.S[:, VCC] | g.S[:, VCC + 1]) == 0,
    "s_cbranch_vccnz": lambda g: (g.S[:, VCC] | g.S[:, VCC + 1]) != 0,
    "s_cbranch_execz": lambda g: ~g.exec.any(1), "s_cbranch_execnz": lambda g: g.exec.any(1)}


def _target(inst):
    k = inst.f["simm16"]
    return inst.addr + 4 + 4 * (k - 0x10000 if k & 0x8000 else k)


def hint(o, inst, m):
    return lambda g: None


def waitcnt(o, inst, m):
    if not m.checks:                  # only the hazard checks model outstanding memory operations
        return lambda g: None
    vm, lgkm = waitcnt_fields(inst.f["simm16"])

    def wait(g):
        changed = False
        while len(g.vmq) > vm:
            _, _, tok = g.vmq.pop(0)
            if tok:
                m.lds.retire(tok)
            changed = True
        while len(g.lgkmq) > lgkm:
            g.lgkmq.pop(0)
            changed = True
        if changed:
            g.pend = set().union(*(e[0] for e in g.vmq), *(e[0] for e in g.lgkmq))
    return wait


def endpgm(o, inst, m):
    return (lambda g: None), True


def barrier(o, inst, m):
    return (lambda g: "barrier"), True


def branch(o, inst, m):
    tgt = _target(inst)
    return (lambda g: tgt), True


def cbranch(o, inst, m):
    tgt, nxt, cond = _target(inst), inst.addr + 4, CONDITIONS[inst.name]

    def run(g):
        t = cond(g)
        if t.all():
            return tgt
        if not t.any():
            return nxt
        return ("split", t, tgt, nxt)
    return run, True


def trap(o, inst, m):
    def run(g):
        raise SimError(f"s_trap {inst.f['simm16']} (a device-side assert or trap) executed", kernel=m.name,
                       pc=m.pcrel(inst.addr), wave=m.wave_desc(g), inst=inst.text())
    return run


def setpc(o, inst, m):
    f = inst.f
    src = o.ssrc(f["ssrc0"], True, f.get("literal"))
    ret = o.sdst(f["sdst"], True) if inst.name == "s_swappc_b64" else None
    retval = U64(m.entry_addr + inst.addr + 4)

    def run(g):
        t = np.broadcast_to(src(g), (g.n,)).astype(I64) - m.entry_addr
        if ret:
            ret(g, np.full(g.n, retval, U64))
        if (t == t[0]).all():
            return int(t[0])
        return ("multi", t)
    return run, True


def call(o, inst, m):
    w = o.sdst(inst.f["sdst"], True)
    tgt, retval = _target(inst), U64(m.entry_addr + inst.addr + 4)

    def run(g):
        w(g, np.full(g.n, retval, U64))
        return tgt
    return run, True


def compilers(names):
    table = {"s_waitcnt": waitcnt, "s_endpgm": endpgm, "s_barrier": barrier, "s_branch": branch, "s_trap": trap,
             "s_setpc_b64": setpc, "s_swappc_b64": setpc, "s_call_b64": call}
    table.update({n: hint for n in HINTS})
    table.update({n: cbranch for n in CONDITIONS})
    return {n: table[n] for n in names if n in table}
