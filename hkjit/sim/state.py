"""Execution state: a *group* is a set of waves (possibly from many workgroups) that share a
program counter and run in lock-step, each instruction one NumPy operation over (waves, 64)."""

import numpy as np

VCC, M0, EXEC = 106, 124, 126
SGPR_KEY = 100000   # hazard keys: VGPR rows are 0.., SGPRs are SGPR_KEY + n
_LANE_BITS = np.arange(64, dtype=np.uint64)


def pack_mask(b):
    """(n, 64) bool -> (n, 2) uint32 (lo, hi) lane masks."""
    return np.packbits(b, axis=1, bitorder="little").view(np.uint32)


def unpack_mask(pair):
    """(n, 2) uint32 -> (n, 64) bool."""
    return np.unpackbits(np.ascontiguousarray(pair).view(np.uint8), axis=1, bitorder="little").astype(bool)


class Group:
    __slots__ = ("V", "S", "scc", "exec", "full", "pc", "wave", "wgi", "pend", "vmq", "lgkmq",
                 "scale", "n")

    def __init__(self, V, S, scc, wave, wgi, pc=0):
        self.V, self.S, self.scc = V, S, scc
        self.wave, self.wgi = wave, wgi
        self.pc = pc
        self.n = S.shape[0]
        self.pend = set()        # hazard keys written by loads not yet waited for
        self.vmq = []            # outstanding vector-memory ops: (keys, inst addr, lds token)
        self.lgkmq = []          # outstanding LDS / scalar-memory ops: (keys, inst addr, None)
        self.scale = None        # pending v_mfma_ld_scale_b32 operands
        self.update_exec()

    def update_exec(self):
        self.exec = unpack_mask(self.S[:, EXEC:EXEC + 2])
        self.full = bool(self.exec.all())

    def take(self, m):
        """A new group of the waves selected by bool mask m (copies)."""
        g = Group(self.V[:, m], self.S[m], self.scc[m], self.wave[m], self.wgi[m], self.pc)
        g.pend, g.vmq, g.lgkmq, g.scale = set(self.pend), list(self.vmq), list(self.lgkmq), self.scale
        return g

    def same_state(self, o):
        return self.vmq == o.vmq and self.lgkmq == o.lgkmq and self.scale == o.scale

    @staticmethod
    def merge(groups):
        f = groups[0]
        g = Group(np.concatenate([x.V for x in groups], axis=1), np.concatenate([x.S for x in groups]),
                  np.concatenate([x.scc for x in groups]), np.concatenate([x.wave for x in groups]),
                  np.concatenate([x.wgi for x in groups]), f.pc)
        g.pend, g.vmq, g.lgkmq, g.scale = set(f.pend), list(f.vmq), list(f.lgkmq), f.scale
        return g
