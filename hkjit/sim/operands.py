"""Operand readers and writers, built once per instruction (closures over register numbers)."""

import struct

import numpy as np

from . import coverage
from .errors import SimUnsupportedInstruction
from .state import SGPR_KEY, EXEC

U32, U64 = np.uint32, np.uint64
F32_CONST = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
INV_2PI = {"f32": 0x3E22F983, "f16": 0x3118, "f64": 0x3FC45F306DC9C882}
SHARED_APERTURE_HI = 0x00010000    # src_shared_base: flat addresses of LDS are 0x00010000_xxxxxxxx
PRIVATE_APERTURE_HI = 0x00020000


def _fbits(x, kind):
    if kind == "f16":
        return int(np.float16(x).view(np.uint16))
    if kind == "f64":
        return struct.unpack("<Q", struct.pack("<d", x))[0]
    return struct.unpack("<I", struct.pack("<f", x))[0]


def inline_value(v, kind):
    """Value of an inline-constant source field for an operand of `kind` (f16/f32/f64/b16/b32/b64),
    or None if v is not an inline constant."""
    width = 16 if kind in ("f16", "b16") else 64 if kind in ("f64", "b64") else 32
    mask = (1 << width) - 1
    if 128 <= v <= 192:
        return v - 128
    if 193 <= v <= 208:
        return (192 - v) & mask
    fk = {"b16": "f16", "b32": "f32", "b64": "f64"}.get(kind, kind)
    if v in F32_CONST:
        return _fbits(F32_CONST[v], fk)
    if v == 248:
        return INV_2PI[fk]
    return None


class Ops:
    """Operand factory for one instruction of one kernel."""

    def __init__(self, m, inst):
        self.m, self.inst = m, inst
        self.rk, self.wk = set(), set()

    def err(self, msg):
        return SimUnsupportedInstruction(msg, kernel=self.m.name, pc=self.inst.addr, inst=self.inst.text())

    # ------------------------------------------------------------ register rows
    def vrow(self, r, acc=False, count=1, write=False):
        base = self.m.nva if acc else 0
        limit = self.m.nacc if acc else self.m.nva
        if r + count > limit:
            kind = "a" if acc else "v"
            raise self.err(f"register {kind}{r + count - 1} is beyond the kernel's allocation "
                           f"({limit} {'AGPRs' if acc else 'VGPRs'})")
        rows = range(base + r, base + r + count)
        (self.wk if write else self.rk).update(rows)
        return base + r

    def sreg(self, s, count=1, write=False):
        if s + count > 128:
            raise self.err(f"scalar register {s} out of range")
        (self.wk if write else self.rk).update(SGPR_KEY + s + i for i in range(count))
        return s

    # ------------------------------------------------------------ 32-bit sources
    def src32(self, v, kind="b32", literal=None):
        """Reader g -> uint32 array broadcastable to (n, 64)."""
        if v >= 256:
            r = self.vrow(v - 256)
            return lambda g: g.V[r]
        if v <= 127 and v != 125:
            s = self.sreg(v)
            return lambda g: g.S[:, s, None]
        if v == 253:
            return lambda g: g.scc[:, None].astype(U32)
        if v == 251:
            return lambda g: ((g.S[:, 106] | g.S[:, 107]) == 0)[:, None].astype(U32)
        if v == 252:
            return lambda g: ((g.S[:, 126] | g.S[:, 127]) == 0)[:, None].astype(U32)
        c = self.const32(v, kind, literal)
        return lambda g: c

    def const32(self, v, kind, literal):
        if v == 255:
            val = literal
        elif v in (235, 236):
            val = SHARED_APERTURE_HI
        elif v in (237, 238):
            val = PRIVATE_APERTURE_HI
        else:
            val = inline_value(v, kind)
            if val is not None and self.packed16 and kind in ("f16", "b16"):
                val = (val & 0xFFFF) * 0x10001   # packed 16-bit ops see the constant in both halves
        if val is None:
            raise self.err(f"{coverage.limit('vector-operand')} ({v})")
        return np.full((1, 1), val & 0xFFFFFFFF, U32)

    packed16 = False

    # ------------------------------------------------------------ 64-bit sources
    def src64(self, v, kind="b64", literal=None):
        """Reader g -> uint64 array broadcastable to (n, 64)."""
        if v >= 256:
            r = self.vrow(v - 256, count=2)
            return lambda g: g.V[r].astype(U64) | g.V[r + 1].astype(U64) << U64(32)
        if v <= 127:
            s = self.sreg(v, 2)
            return lambda g: (g.S[:, s].astype(U64) | g.S[:, s + 1].astype(U64) << U64(32))[:, None]
        if v == 255:
            val = literal << 32 if kind == "f64" else literal
        elif v == 253:
            return lambda g: g.scc[:, None].astype(U64)
        else:
            val = inline_value(v, kind)
            if val is None:
                raise self.err(f"{coverage.limit('vector-operand')} ({v}, 64-bit)")
        c = np.full((1, 1), val, U64)
        return lambda g: c

    # ------------------------------------------------------------ scalar sources (n,)
    def ssrc(self, v, wide=False, literal=None):
        """Reader g -> (n,) uint32 (or uint64 when wide) array, or a NumPy scalar."""
        if v <= 127 and v != 125:
            if wide:
                s = self.sreg(v, 2)
                return lambda g: g.S[:, s].astype(U64) | g.S[:, s + 1].astype(U64) << U64(32)
            s = self.sreg(v)
            return lambda g: g.S[:, s]
        if v == 253:
            return lambda g: g.scc.astype(U64 if wide else U32)
        if v == 255:
            c = (U64 if wide else U32)(literal)
            return lambda g: c
        if v in (251, 252):
            b = 106 if v == 251 else 126
            t = U64 if wide else U32
            return lambda g: ((g.S[:, b] | g.S[:, b + 1]) == 0).astype(t)
        if v in (235, 237):
            hi = SHARED_APERTURE_HI if v == 235 else PRIVATE_APERTURE_HI
            c = U64(hi << 32) if wide else U32(hi)
            return lambda g: c
        val = inline_value(v, "b64" if wide else "b32")
        if val is None:
            raise self.err(f"{coverage.limit('scalar-operand')} ({v})")
        c = (U64 if wide else U32)(val)
        return lambda g: c

    def sdst(self, d, wide=False):
        """Writer (g, (n,) array) for a scalar destination."""
        if d > 127 or d == 125:
            raise self.err(f"{coverage.limit('scalar-operand')} (destination {d})")
        self.sreg(d, 2 if wide else 1, write=True)
        touches_exec = d >= EXEC - (1 if wide else 0) and d <= EXEC + 1
        if wide:
            def w(g, val):
                val = np.asarray(val, U64)
                g.S[:, d] = (val & U64(0xFFFFFFFF)).astype(U32)
                g.S[:, d + 1] = (val >> U64(32)).astype(U32)
                if touches_exec:
                    g.update_exec()
        else:
            def w(g, val):
                g.S[:, d] = val
                if touches_exec:
                    g.update_exec()
        return w
