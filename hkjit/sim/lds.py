"""LDS of a batch of workgroups, with race checks exact to the byte.

Each workgroup owns `stride` bytes (its static + dynamic LDS, 8-byte aligned). With checks on,
the record since the last s_barrier says, per byte, which wave wrote it last and which waves read
it: a uint32 with the writer's wave-in-workgroup + 1 in bits 16-23 and a mask of reader waves in
bits 0-15 (a workgroup has at most 16 waves). Races, between waves of one workgroup with no
barrier in between: a read of bytes another wave wrote, a write over bytes another wave wrote or
read. Two waves writing different halves of one dword is not a race.

The record is kept per dword while a dword's 4 bytes share it (aligned accesses of whole dwords:
almost every access of a tiled kernel), and per byte for dwords marked split (bit 31) by an
access of part of them. A barrier releases every workgroup of the batch at once (the scheduler
runs until all live waves wait at one), so it clears the whole record. Direct-to-LDS loads also
mark their dwords with a token that stays live until the issuing wave's s_waitcnt vmcnt retires
the load; reading such a dword earlier is a hazard too."""

import numpy as np

from . import atomics

U8, U32, U64, I32, I64 = np.uint8, np.uint32, np.uint64, np.int32, np.int64
SPLIT = U32(1 << 31)
READERS = U32(0xFFFF)
WRITER = 16


class Lds:
    def __init__(self, nb, size, checks, wpg):
        self.size = size                                  # bytes a workgroup may use
        self.stride = (max(size, 8) + 7) // 8 * 8         # bytes a workgroup occupies here
        self.data = np.zeros(nb * self.stride, U8)
        self.u32 = self.data.view(U32)
        self.checks = checks
        self.wpg = wpg
        if checks:
            self.dword = np.zeros(nb * self.stride // 4, U32)
            self.byte = np.zeros(nb * self.stride, U32)
            self.tok = np.zeros(nb * self.stride // 4, I32)
            self.tok_live = np.zeros(256, bool)
            self.ntok = 1

    # ------------------------------------------------------------ addressing
    def lanes(self, g, mask, a, size, report, what):
        """Active lanes' flat byte addresses (k,) and the row of each lane's wave in the group;
        lanes outside the workgroup's LDS are reported, and `keep` (or None) leaves them out."""
        n = g.n
        if mask is None:
            a = a.reshape(-1)
            rows = np.repeat(np.arange(n), 64)
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
        """(k, size) uint8: the bytes each active lane reads (0 for lanes out of bounds)."""
        flat, keep, rows = self.lanes(g, mask, a, size, report, "read")
        if size % 4 == 0 and not (flat & 3).any():
            data = self.u32[(flat >> 2)[:, None] + np.arange(size // 4)].view(U8).reshape(-1, size)
        else:
            data = self.data[flat[:, None] + np.arange(size)]
        if keep is not None:
            data[~keep] = 0
            flat, rows = flat[keep], rows[keep]
        if self.checks and flat.size:
            self._check(g, flat, size, rows, report, write=False)
        return data

    def write(self, g, mask, a, size, data, report, dma=False):
        """Write data (k, size) uint8; -> the token of a direct-to-LDS write (dma) or None."""
        flat, keep, rows = self.lanes(g, mask, a, size, report, "write")
        if keep is not None:
            flat, rows, data = flat[keep], rows[keep], data[keep]
        if not flat.size:
            return None
        if self.checks:
            self._check(g, flat, size, rows, report, write=True)
        if size % 4 == 0 and not (flat & 3).any():
            self.u32[(flat >> 2)[:, None] + np.arange(size // 4)] = np.ascontiguousarray(data).view(U32).reshape(-1, size // 4)
        else:
            self.data[flat[:, None] + np.arange(size)] = data
        if dma and self.checks:
            token = self._new_token()
            self.tok[(flat[:, None] + np.arange(0, size, 4)) >> 2] = token
            return token
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
            report(g, "misaligned", f"LDS atomic of {nb} bytes at misaligned address {int(flat[bad][0] % self.stride)}",
                   int(rows[bad][0]))
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

    # ------------------------------------------------------------ race checks
    def _check(self, g, flat, size, rows, report, write):
        whole = size % 4 == 0 and not (flat & 3).any()
        didx = ((flat[:, None] + np.arange(0, size, 4 if whole else 1)) >> 2)       # dwords touched
        split = (self.dword[didx] & SPLIT) != 0
        if whole and not split.any():
            arr, idx, unit = self.dword, didx, 4          # the common case: whole dwords, one record each
        else:
            self._split(didx[~split])
            arr, idx, unit = self.byte, flat[:, None] + np.arange(size), 1
        wiw = (g.wave[rows] % self.wpg).astype(U32)[:, None]      # wave in workgroup
        me = wiw + U32(1)
        s = arr[idx]
        w = (s >> WRITER) & U32(0xFF)
        mine = U32(1) << wiw
        other_writer = (w != 0) & (w != me)
        if write:
            other_reader = (s & READERS & ~mine) != 0
            for bad, kind in ((other_writer, "written"), (other_reader, "read")):
                if bad.any():
                    j, b = np.argwhere(bad)[0]
                    report(g, "lds-race", f"LDS race: wave {self._wave(g, rows[j], wiw[j, 0])} writes LDS byte "
                                          f"{self._byte(idx[j, b], unit)} {kind} by "
                                          f"{self._who(g, rows[j], s[j, b], kind)} of the same workgroup with no "
                                          f"s_barrier in between", int(rows[j]))
            arr[idx] = (s & (READERS | SPLIT)) | me << WRITER
            if g.n > 1:    # two waves of this instruction writing one byte
                back = (arr[idx] >> WRITER) & U32(0xFF)
                clash = back != me
                if clash.any():
                    j, b = np.argwhere(clash)[0]
                    report(g, "lds-race", f"LDS race: waves {self._wave(g, rows[j], wiw[j, 0])} and "
                                          f"{self._wave(g, rows[j], back[j, b] - 1)} of the same workgroup write LDS "
                                          f"byte {self._byte(idx[j, b], unit)} in one instruction", int(rows[j]))
            return
        if other_writer.any():
            j, b = np.argwhere(other_writer)[0]
            report(g, "lds-race", f"LDS race: wave {self._wave(g, rows[j], wiw[j, 0])} reads LDS byte "
                                  f"{self._byte(idx[j, b], unit)} written by wave {self._wave(g, rows[j], w[j, b] - 1)} "
                                  f"of the same workgroup with no s_barrier in between", int(rows[j]))
        if self.ntok > 1:
            live = self.tok_live[self.tok[didx]]
            if live.any():
                j = int(np.argwhere(live)[0][0])
                report(g, "lds-dma-wait", "LDS is read before the s_waitcnt vmcnt covering the direct-to-LDS load "
                                          "that writes it", int(rows[j]))
        # record the reader; a byte read by several waves of this instruction gets each wave's
        # bit in turn (a wave's lanes repeat only its own bit, so no update is lost)
        missing = (s & mine) == 0
        if missing.any():
            lanes = np.nonzero(missing.any(1))[0]
            for b in np.unique(wiw[lanes, 0]):
                sel = lanes[wiw[lanes, 0] == b]
                ii = idx[sel]
                arr[ii] = arr[ii] | U32(1 << int(b))

    def _split(self, didx):
        """Give dwords kept as one record a record per byte."""
        d = np.unique(didx)
        d = d[(self.dword[d] & SPLIT) == 0]
        if d.size:
            self.byte[(d[:, None] * 4 + np.arange(4)).reshape(-1)] = np.repeat(self.dword[d], 4)
            self.dword[d] |= SPLIT

    def _byte(self, i, unit):
        return int(i) * unit % self.stride

    def _wave(self, g, row, wiw):
        """Global number of wave `wiw` of the workgroup of g's wave in `row`."""
        return int(g.wave[row]) - int(g.wave[row]) % self.wpg + int(wiw)

    def _who(self, g, row, rec, kind):
        if kind == "written":
            return f"wave {self._wave(g, row, ((int(rec) >> WRITER) & 0xFF) - 1)}"
        readers = [i for i in range(16) if int(rec) >> i & 1 and i != int(g.wave[row]) % self.wpg]
        return f"wave {self._wave(g, row, readers[0])}" + (f" and {len(readers) - 1} more" if len(readers) > 1 else "")

    def barrier(self):
        """All waves of every workgroup of the batch passed an s_barrier: earlier accesses are
        ordered before later ones."""
        if self.checks:
            self.dword.fill(0)

    # ------------------------------------------------------------ direct-to-LDS tokens
    def _new_token(self):
        t = self.ntok
        self.ntok += 1
        if t >= len(self.tok_live):
            self.tok_live = np.concatenate([self.tok_live, np.zeros(len(self.tok_live), bool)])
        self.tok_live[t] = True
        return t

    def retire(self, token):
        self.tok_live[token] = False
