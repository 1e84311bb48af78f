"""Race records of the LDS of a batch of workgroups, exact to the byte, kept per dword.

Since the last s_barrier, each dword records per byte the wave (of its workgroup) that wrote it
last, `W`: 4 x 8 bits holding wave-in-workgroup + 1, and the waves that read it, `R`: 4 x 16-bit
masks (a workgroup has at most 16 waves). Races, between waves of one workgroup with no barrier
in between: a read of bytes another wave wrote, a write over bytes another wave wrote or read.
Two waves touching different bytes of one dword do not race.

Reads are logged rather than merged into R: most barrier intervals of a tiled kernel read one
buffer and write another, so R is only built (from the log) when a write lands on a dword read
since the barrier (`touched`). A barrier releases every workgroup of the batch at once (the
scheduler runs until all live waves wait at one), so it clears every record. Direct-to-LDS loads
also mark their dwords with a token that stays live until the issuing wave's s_waitcnt vmcnt
retires the load; reading such a dword earlier is a hazard too."""

import numpy as np

U8, U32, U64, I32, I64 = np.uint8, np.uint32, np.uint64, np.int32, np.int64
HIGH = U32(0x80808080)
LOW7 = U32(0x7F7F7F7F)
# byte mask (4 bits) -> the writer field mask (0xFF per byte) / the reader field mask (0xFFFF per byte)
W_MASK = np.array([sum(0xFF << (8 * i) for i in range(4) if m >> i & 1) for m in range(16)], U32)
R_MASK = np.array([sum(0xFFFF << (16 * i) for i in range(4) if m >> i & 1) for m in range(16)], U64)
REP8, REP16 = U32(0x01010101), U64(0x0001000100010001)


def _nonzero_bytes(v):
    """The high bit of each byte of v that is not zero."""
    return (((v & LOW7) + LOW7) | v) & HIGH


class Races:
    def __init__(self, ndwords, stride, wpg):
        self.stride, self.wpg = stride, wpg
        self.W = np.zeros(ndwords, U32)
        self.R = np.zeros(ndwords, U64)
        self.touched = np.zeros(ndwords, bool)       # read since the barrier (built when first needed)
        self.touched_built = False
        self.log = []                                # reads not yet merged into R
        self.merged = False                          # R holds the reads of this interval
        self.pending = np.zeros(ndwords, bool)       # written by a direct-to-LDS load not yet waited for
        self.tokens = {}                              # token -> the dwords of its load
        self.ntok, self.live = 1, 0

    # ------------------------------------------------------------ the dwords an access touches
    def _dwords(self, g, flat, size, rows, didx=None):
        """(dword indices, byte masks (None: all 4 bytes), rows of their waves). With rows None
        (all lanes of the group active) the arrays are (n, 64 x dwords per lane), one row per wave.
        didx: the (k, size / 4) dword indices of an aligned access, if the caller has them."""
        if didx is not None:
            per, d, bm = size // 4, didx, None
        elif size % 4 == 0 and not (flat & 3).any():
            per, d, bm = size // 4, (flat >> 2)[:, None] + np.arange(size // 4), None
        elif size < 4 and ((flat & 3) + size <= 4).all():          # within one dword (16/8-bit accesses)
            per, d, bm = 1, (flat >> 2)[:, None], (((1 << size) - 1) << (flat & 3)).astype(U8)[:, None]
        else:                                                      # unaligned: lanes may touch more dwords
            if rows is None:
                rows = np.repeat(np.arange(g.n), 64)
            first = flat >> 2
            nd = min(int(((flat + size - 1) >> 2).max() - first.min()) + 1, size // 4 + 2)
            d = first[:, None] + np.arange(nd)
            lo = np.clip(flat[:, None] - 4 * d, 0, 4)
            hi = np.clip(flat[:, None] + size - 4 * d, 0, 4)
            m = ((1 << hi) - 1) & ~((1 << lo) - 1)
            keep = (m > 0).reshape(-1)
            return d.reshape(-1)[keep], m.reshape(-1)[keep].astype(U8), np.repeat(rows, nd)[keep]
        if rows is None:
            return d.reshape(g.n, -1), None if bm is None else bm.reshape(g.n, -1), None
        return d.reshape(-1), None if bm is None else bm.reshape(-1), np.repeat(rows, per)

    def _wiw(self, g, rows):
        """Wave-in-workgroup of each element (broadcastable to the dword array)."""
        w = (g.wave % self.wpg).astype(U32)
        return w[:, None] if rows is None else w[rows]

    @staticmethod
    def _row(d, rows, j):
        return j // d.shape[1] if rows is None else int(rows[j])

    # ------------------------------------------------------------ checks
    def read(self, g, flat, size, rows, report, didx=None):
        d, bm, rows = self._dwords(g, flat, size, rows, didx)
        W = self.W[d]
        if W.any():                          # most reads come after a barrier: nothing written yet
            wiw = self._wiw(g, rows)
            me4 = (wiw + U32(1)) * REP8
            if bm is not None:
                m = W_MASK[bm]
                W, me4 = W & m, me4 & m
            other = _nonzero_bytes(W) & _nonzero_bytes(W ^ me4)
            if other.any():
                j = int(np.argmax(other.reshape(-1) != 0))
                r, wj, oj = self._row(d, rows, j), W.reshape(-1)[j], other.reshape(-1)[j]
                b = self._first(oj)
                report(g, "lds-race", f"LDS race: wave {self._wave(g, r, int(g.wave[r]) % self.wpg)} reads LDS "
                                      f"byte {(int(d.reshape(-1)[j]) * 4 + b) % self.stride} written by wave "
                                      f"{self._wave(g, r, (int(wj) >> (8 * b) & 0xFF) - 1)} of the same "
                                      f"workgroup with no s_barrier in between", r)
        if self.live:
            live = self.pending[d]
            if live.any():
                report(g, "lds-dma-wait", "LDS is read before the s_waitcnt vmcnt covering the direct-to-LDS load "
                                          "that writes it", self._row(d, rows, int(np.argmax(live.reshape(-1)))))
        entry = (d, bm, self._wiw(g, rows))
        if self.merged:
            self._merge(*entry)
        else:
            self.log.append(entry)
            if self.touched_built:
                self.touched[d] = True

    def write(self, g, flat, size, rows, report, didx=None):
        d, bm, rows = self._dwords(g, flat, size, rows, didx)
        wiw = self._wiw(g, rows)
        me4 = (wiw + U32(1)) * REP8
        W = self.W[d]
        if bm is not None:
            m = W_MASK[bm]
            W, me4 = W & m, me4 & m
        if W.any():
            other = _nonzero_bytes(W) & _nonzero_bytes(W ^ me4)
            if other.any():
                j = int(np.argmax(other.reshape(-1) != 0))
                b = self._first(other.reshape(-1)[j])
                self._race(g, d, rows, j, b, f"written by wave "
                           f"{self._wave(g, self._row(d, rows, j), (int(W.reshape(-1)[j]) >> (8 * b) & 0xFF) - 1)}",
                           report)
        if self.log and not self.merged:
            if not self.touched_built:
                for e in self.log:
                    self.touched[e[0]] = True
                self.touched_built = True
            if self.touched[d].any():          # this write may land on a read: build R
                for e in self.log:
                    self._merge(*e)
                self.log, self.merged = [], True
        if self.merged:
            mine = (U64(1) << wiw.astype(U64)) * REP16
            others = self.R[d] & ~mine
            if bm is not None:
                others &= R_MASK[bm]
            if others.any():
                j = int(np.argmax(others.reshape(-1) != 0))
                o = int(others.reshape(-1)[j])
                f = next(i for i in range(4) if o >> (16 * i) & 0xFFFF)
                readers = [i for i in range(16) if o >> (16 * f + i) & 1]
                more = f" and {len(readers) - 1} more" if len(readers) > 1 else ""
                self._race(g, d, rows, j, f, f"read by wave {self._wave(g, self._row(d, rows, j), readers[0])}{more}",
                           report)
        if bm is None:                       # whole dwords: a wave's lanes write the same record
            self.W[d] = np.broadcast_to(me4, d.shape)
        else:
            # lanes of one wave may write different bytes of a dword: one update per (dword, wave)
            # with the union of their bytes, wave by wave so that no wave's bytes are lost
            dd, ww = d.reshape(-1), np.broadcast_to(wiw, d.shape).reshape(-1)
            keys, inv = np.unique(dd.astype(I64) * 16 + ww, return_inverse=True)
            union = np.zeros(keys.size, U8)
            np.bitwise_or.at(union, inv, bm.reshape(-1))
            kd, kw = keys // 16, (keys % 16).astype(U32)
            for b in np.unique(kw):
                s = kw == b
                m = W_MASK[union[s]]
                self.W[kd[s]] = (self.W[kd[s]] & ~m) | ((b + U32(1)) * REP8 & m)
        if g.n > 1:                          # another wave wrote the same bytes in this instruction
            back = self.W[d] if bm is None else self.W[d] & W_MASK[bm]
            clash = back != me4
            if clash.any():
                j = int(np.argmax(clash.reshape(-1)))
                bj, mj = int(back.reshape(-1)[j]), int(np.broadcast_to(me4, d.shape).reshape(-1)[j])
                b = self._first(_nonzero_bytes(U32(bj ^ mj)))
                self._race(g, d, rows, j, b, f"written by wave {self._wave(g, self._row(d, rows, j), (bj >> (8 * b) & 0xFF) - 1)}"
                                             f" in the same instruction", report)

    def _merge(self, d, bm, wiw):
        """R |= the reads of waves wiw of the bytes bm (None: all 4) of dwords d, keeping every
        reader of a dword read by several waves, or by lanes of one wave at different bytes."""
        bits = np.broadcast_to((U64(1) << wiw.astype(U64)) * REP16, d.shape)
        if bm is not None:
            bits = bits & R_MASK[bm]
        keys, inv = np.unique(d.reshape(-1).astype(I64) * 16 + np.broadcast_to(wiw, d.shape).reshape(-1),
                              return_inverse=True)
        union = np.zeros(keys.size, U64)
        np.bitwise_or.at(union, inv, bits.reshape(-1))
        kd, kw = keys // 16, keys % 16
        for b in np.unique(kw):
            s = kw == b
            self.R[kd[s]] |= union[s]

    def barrier(self):
        self.W.fill(0)
        if self.merged:
            self.R.fill(0)
        if self.touched_built:
            self.touched.fill(False)
        self.log, self.merged, self.touched_built = [], False, False

    # ------------------------------------------------------------ messages
    def _race(self, g, d, rows, j, b, what, report):
        r = self._row(d, rows, j)
        report(g, "lds-race", f"LDS race: wave {self._wave(g, r, int(g.wave[r]) % self.wpg)} writes LDS byte "
                              f"{(int(d.reshape(-1)[j]) * 4 + b) % self.stride} {what} of the same workgroup with "
                              f"no s_barrier in between", r)

    @staticmethod
    def _first(highbits):
        """The first byte whose high bit is set."""
        return next(i for i in range(4) if int(highbits) >> (8 * i + 7) & 1)

    def _wave(self, g, row, wiw):
        """Global number of wave `wiw` of the workgroup of g's wave in `row`."""
        w = int(g.wave[row])
        return w - w % self.wpg + int(wiw)

    # ------------------------------------------------------------ direct-to-LDS tokens
    def mark(self, flat, size):
        """A direct-to-LDS load wrote these dwords: -> its token, retired by the s_waitcnt vmcnt
        that covers the load."""
        t = self.ntok
        self.ntok += 1
        d = ((flat[:, None] + np.arange(0, size, 4)) >> 2).reshape(-1)
        self.tokens[t] = d
        self.pending[d] = True
        self.live += 1
        return t

    def retire(self, token):
        d = self.tokens.pop(token, None)
        if d is not None:
            self.live -= 1
            self.pending[d] = False
            for other in self.tokens.values():        # dwords another outstanding load also writes
                self.pending[other] = True
