"""LDS of a batch of workgroups: storage, addressing with bounds checks, accesses and atomics.
Each workgroup owns `stride` bytes (its static + dynamic LDS, 8-byte aligned). The race checks
(with checks on) are in lds_races.py."""

import numpy as np

from . import atomics
from .lds_races import Races

U8, U32, U64, I32, I64 = np.uint8, np.uint32, np.uint64, np.int32, np.int64


class Lds:
    def __init__(self, nb, size, checks, wpg):
        self.size = size                                  # bytes a workgroup may use
        self.stride = (max(size, 8) + 7) // 8 * 8         # bytes a workgroup occupies here
        self.data = np.zeros(nb * self.stride, U8)
        self.u32 = self.data.view(U32)
        self.races = Races(nb * self.stride // 4, self.stride, wpg) if checks else None

    # ------------------------------------------------------------ addressing
    def lanes(self, g, mask, a, size, report, what):
        """Active lanes' flat byte addresses (k,), `keep` (None, or which lanes are inside the
        workgroup's LDS: the others are reported) and the row of each lane's wave in the group
        (None when every lane of the group is active: lane i is then in row i // 64)."""
        n = g.n
        if mask is None:
            bad = (a < 0) | (a + size > self.size)
            if not bad.any():
                return (g.wgi[:, None].astype(I64) * self.stride + a).reshape(-1), None, None
            a, rows = a.reshape(-1), np.repeat(np.arange(n), 64)
        else:
            a = a[mask]
            rows = np.broadcast_to(np.arange(n)[:, None], (n, 64))[mask]
        bad = (a < 0) | (a + size > self.size)
        keep = None
        if bad.any():
            j = int(np.argmax(bad))
            report(g, "lds-out-of-bounds", f"out-of-bounds LDS {what} of {size} bytes at address {int(a[j])}; the "
                                           f"workgroup has {self.size} bytes of LDS (static + dynamic)", int(rows[j]))
            keep = ~bad
            a = np.where(keep, a, 0)
        return g.wgi[rows].astype(I64) * self.stride + a, keep, rows

    # ------------------------------------------------------------ access
    def read(self, g, mask, a, size, report):
        """What each active lane reads (0 for lanes out of bounds): (k, size / 4) uint32 words
        when every lane reads whole aligned dwords, else (k, size) uint8."""
        flat, keep, rows = self.lanes(g, mask, a, size, report, "read")
        didx = None
        if size % 4 == 0 and not (flat & 3).any():
            didx = (flat >> 2)[:, None] + np.arange(size // 4)
            data = self.u32[didx]
        elif size == 2 and not (flat & 1).any():
            data = self.data.view(np.uint16)[flat >> 1].view(U8).reshape(-1, 2)
        else:
            data = self.data[flat[:, None] + np.arange(size)]
        if keep is not None:
            data[~keep] = 0
            flat, rows, didx = flat[keep], rows[keep], None
        if self.races is not None and flat.size:
            self.races.read(g, flat, size, rows, report, didx)
        return data

    def write(self, g, mask, a, size, data, report, dma=False):
        """Write data (k, size) uint8; -> the token of a direct-to-LDS write (dma) or None."""
        flat, keep, rows = self.lanes(g, mask, a, size, report, "write")
        if keep is not None:
            flat, rows, data = flat[keep], rows[keep], data[keep]
        if not flat.size:
            return None
        didx = (flat >> 2)[:, None] + np.arange(size // 4) if size % 4 == 0 and not (flat & 3).any() else None
        if self.races is not None:
            self.races.write(g, flat, size, rows, report, didx)
        if didx is not None:
            self.u32[didx] = np.ascontiguousarray(data).view(U32).reshape(-1, size // 4)
        else:
            self.data[flat[:, None] + np.arange(size)] = data
        if dma and self.races is not None:
            return self.races.mark(flat, size)
        return None

    def atomic(self, g, mask, a, data, spec, report):
        """LDS atomic of spec (operation, type, bits) on the active lanes, data (k, words) uint32;
        -> the old values (k, bits/32) uint32, lanes serialised in order. Atomics of different
        waves on the same bytes are not races."""
        opn, typ, width = spec
        nb = width // 8
        flat, keep, rows = self.lanes(g, mask, a, nb, report, "atomic")
        bad = flat % nb != 0
        if bad.any():
            j = int(np.argmax(bad))
            report(g, "misaligned", f"LDS atomic of {nb} bytes at misaligned address {int(flat[j] % self.stride)}",
                   int(rows[j]) if rows is not None else j // 64)
        keep = ~bad if keep is None else keep & ~bad
        mem = self.u32 if width == 32 else self.data.view(U64)
        idx = flat // nb
        nd = width // 32
        va = atomics.words_to_bits(data[:, :nd], width)
        vb = atomics.words_to_bits(data[:, nd:], width) if data.shape[1] > nd else None
        olds = np.zeros(idx.size, mem.dtype)

        def apply(lanes):
            old = mem[idx[lanes]]
            mem[idx[lanes]] = atomics.combine(opn, typ, width, old, va[lanes], None if vb is None else vb[lanes])
            olds[lanes] = old
        todo = np.nonzero(keep)[0]
        atomics.serialise(idx[todo], lambda sel: apply(todo[sel]))
        return atomics.bits_to_words(olds, width)

    def barrier(self):
        """All waves of every workgroup of the batch passed an s_barrier: earlier accesses are
        ordered before later ones."""
        if self.races is not None:
            self.races.barrier()

    def retire(self, token):
        """The s_waitcnt vmcnt that completes a direct-to-LDS load."""
        self.races.retire(token)
