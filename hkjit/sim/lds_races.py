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
        self.touched = np.zeros(ndwords, bool)       # read since the barrier
        self.log = []                                # reads not yet merged into R
        self.merged = False                          # R holds reads of this interval
        self.tok = np.zeros(ndwords, I32)
        self.tok_live = np.zeros(256, bool)
        self.ntok = 1

    # ------------------------------------------------------------ the dwords an access touches
    def _dwords(self, flat, size, rows):
        """(dword indices, byte masks, rows) flattened over lanes x dwords touched."""
        if size % 4 == 0 and not (flat & 3).any():          # whole dwords: byte masks None (all 4)
            d = ((flat >> 2)[:, None] + np.arange(size // 4)).reshape(-1)
            return d, None, np.repeat(rows, size // 4)
        if size < 4 and ((flat & 3) + size <= 4).all():          # within one dword (16/8-bit accesses)
            return flat >> 2, (((1 << size) - 1) << (flat & 3)).astype(U8), rows
        first = flat >> 2
        nd = int(((flat + size - 1) >> 2).max() - first.min()) + 1 if flat.size else 1
        nd = min(nd, size // 4 + 2)
        d = first[:, None] + np.arange(nd)
        lo = np.clip(flat[:, None] - 4 * d, 0, 4)
        hi = np.clip(flat[:, None] + size - 4 * d, 0, 4)
        m = ((1 << hi) - 1) & ~((1 << lo) - 1)
        keep = (m > 0).reshape(-1)
        return d.reshape(-1)[keep], m.reshape(-1)[keep].astype(U8), np.repeat(rows, nd)[keep]

    # ------------------------------------------------------------ checks
    def read(self, g, flat, size, rows, report):
        d, bm, rows = self._dwords(flat, size, rows)
        whole = bm is None
        wiw = (g.wave[rows] % self.wpg).astype(U32)
        me4 = (wiw + U32(1)) * REP8
        W = self.W[d]
        if not whole:
            W = W & W_MASK[bm]
            me4 &= W_MASK[bm]
        other = _nonzero_bytes(W) & _nonzero_bytes(W ^ me4)
        if other.any():
            j = int(np.argmax(other != 0))
            b = self._first(other[j])
            report(g, "lds-race", f"LDS race: wave {self._wave(g, rows[j], wiw[j])} reads LDS byte "
                                  f"{(int(d[j]) * 4 + b) % self.stride} written by wave "
                                  f"{self._wave(g, rows[j], (int(W[j]) >> (8 * b) & 0xFF) - 1)} of the same "
                                  f"workgroup with no s_barrier in between", int(rows[j]))
        if self.ntok > 1:
            live = self.tok_live[self.tok[d]]
            if live.any():
                report(g, "lds-dma-wait", "LDS is read before the s_waitcnt vmcnt covering the direct-to-LDS load "
                                          "that writes it", int(rows[int(np.argmax(live))]))
        if self.merged:
            self._merge(d, bm, wiw)
        else:
            self.touched[d] = True
            self.log.append((d, bm, wiw))

    def write(self, g, flat, size, rows, report):
        d, bm, rows = self._dwords(flat, size, rows)
        if bm is None:
            bm = np.full(d.size, 15, U8)
        wiw = (g.wave[rows] % self.wpg).astype(U32)
        me4 = (wiw + U32(1)) * REP8 & W_MASK[bm]
        W = self.W[d] & W_MASK[bm]
        other = _nonzero_bytes(W) & _nonzero_bytes(W ^ me4)
        if other.any():
            j = int(np.argmax(other != 0))
            self._race(g, rows[j], wiw[j], d[j], other[j], f"written by wave "
                       f"{self._wave(g, rows[j], (int(W[j]) >> (8 * self._first(other[j])) & 0xFF) - 1)}", report)
        if not self.merged and self.touched[d].any():           # build R: this write may hit a read
            for entry in self.log:
                self._merge(*entry)
            self.log, self.merged = [], True
        if self.merged:
            mine = (U64(1) << wiw.astype(U64)) * REP16
            others = self.R[d] & R_MASK[bm] & ~mine
            if others.any():
                j = int(np.argmax(others != 0))
                f = self._first16(others[j])
                readers = [i for i in range(16) if int(others[j]) >> (16 * f + i) & 1]
                self._race(g, rows[j], wiw[j], d[j], U32(0x80 << (8 * f)), f"read by wave "
                           f"{self._wave(g, rows[j], readers[0])}" + (f" and {len(readers) - 1} more" if len(readers) > 1
                                                                      else ""), report)
        if (bm == 15).all():                 # whole dwords: a wave's lanes write the same record
            self.W[d] = me4
        else:
            # lanes of one wave may write different bytes of a dword: one update per (dword, wave)
            # with the union of their bytes, wave by wave so that no wave's bytes are lost
            keys, inv = np.unique(d.astype(I64) * 16 + wiw, return_inverse=True)
            union = np.zeros(keys.size, U8)
            np.bitwise_or.at(union, inv, bm)
            kd, kw = keys // 16, (keys % 16).astype(U32)
            for b in np.unique(kw):
                s = kw == b
                m = W_MASK[union[s]]
                self.W[kd[s]] = (self.W[kd[s]] & ~m) | ((b + U32(1)) * REP8 & m)
        back = self.W[d] & W_MASK[bm]
        clash = back != me4
        if clash.any():                      # another wave wrote the same bytes in this instruction
            j = int(np.argmax(clash))
            f = self._first(_nonzero_bytes(back[j] ^ me4[j]))
            self._race(g, rows[j], wiw[j], d[j], U32(0x80 << (8 * f)), f"written by wave "
                       f"{self._wave(g, rows[j], (int(back[j]) >> (8 * f) & 0xFF) - 1)} in the same instruction",
                       report)

    def _merge(self, d, bm, wiw):
        """R |= the reads of waves wiw of the bytes bm (None: all 4) of dwords d, keeping every
        reader of a dword read by several waves, or by lanes of one wave at different bytes."""
        bits = (U64(1) << wiw.astype(U64)) * REP16
        if bm is not None:
            bits &= R_MASK[bm]
        keys, inv = np.unique(d.astype(I64) * 16 + wiw, return_inverse=True)
        union = np.zeros(keys.size, U64)
        np.bitwise_or.at(union, inv, bits)
        kd, kw = keys // 16, keys % 16
        for b in np.unique(kw):
            s = kw == b
            self.R[kd[s]] |= union[s]

    def barrier(self):
        self.W.fill(0)
        if self.merged:
            self.R.fill(0)
        if self.log or self.merged:
            self.touched.fill(False)
        self.log, self.merged = [], False

    # ------------------------------------------------------------ messages
    def _race(self, g, row, wiw, d, highbits, what, report):
        b = self._first(highbits)
        report(g, "lds-race", f"LDS race: wave {self._wave(g, row, wiw)} writes LDS byte "
                              f"{(int(d) * 4 + b) % self.stride} {what} of the same workgroup with no s_barrier in "
                              f"between", int(row))

    @staticmethod
    def _first(highbits):
        return next(i for i in range(4) if int(highbits) >> (8 * i + 7) & 1)

    @staticmethod
    def _first16(v):
        return next(i for i in range(4) if int(v) >> (16 * i) & 0xFFFF)

    def _wave(self, g, row, wiw):
        """Global number of wave `wiw` of the workgroup of g's wave in `row`."""
        w = int(g.wave[row])
        return w - w % self.wpg + int(wiw)

    # ------------------------------------------------------------ direct-to-LDS tokens
    def mark(self, flat, size):
        t = self.ntok
        self.ntok += 1
        if t >= len(self.tok_live):
            self.tok_live = np.concatenate([self.tok_live, np.zeros(len(self.tok_live), bool)])
        self.tok_live[t] = True
        self.tok[(flat[:, None] + np.arange(0, size, 4)) >> 2] = t
        return t

    def retire(self, token):
        self.tok_live[token] = False
