"""Global memory of a simulated device: host memory in NumPy arrays at made-up device addresses.
Every access is checked against the live allocations; one outside all of them is an error."""

import bisect

import numpy as np


BASE = 0x7F00_0000_0000      # first device address handed out
ALIGN = 1 << 16              # allocations are 64 KiB aligned, with at least 64 KiB unmapped between


class Allocation:
    __slots__ = ("base", "nbytes", "u8", "u32", "ptr", "freed")

    def __init__(self, base, nbytes):
        self.base, self.nbytes = base, nbytes
        padded = (nbytes + 15) & ~15
        self.u8 = np.zeros(max(padded, 16), np.uint8)
        self.u32 = self.u8.view(np.uint32)
        self.ptr = base
        self.freed = False


class Memory:
    def __init__(self):
        self.allocs = []      # sorted by base
        self.bases = []
        self.next = BASE

    def alloc(self, nbytes) -> Allocation:
        a = Allocation(self.next, int(nbytes))
        self.next += ((max(int(nbytes), 1) + ALIGN - 1) // ALIGN + 1) * ALIGN
        self.allocs.append(a)
        self.bases.append(a.base)
        return a

    def free(self, a):
        i = bisect.bisect_left(self.bases, a.base)
        if i < len(self.bases) and self.allocs[i] is a:
            del self.allocs[i], self.bases[i]
        a.freed = True

    def find(self, addr):
        i = bisect.bisect_right(self.bases, addr) - 1
        if i >= 0:
            a = self.allocs[i]
            if addr < a.base + a.nbytes:
                return a
        return None

    def describe(self, addr):
        i = bisect.bisect_right(self.bases, addr) - 1
        if i >= 0:
            a = self.allocs[i]
            return (f"{addr:#x} is {addr - a.base} bytes from the start of a {a.nbytes}-byte allocation at "
                    f"{a.base:#x}")
        return f"{addr:#x} is below every allocation"

    # ---------------------------------------------------------------- vectorised access
    # `report(message)` records an out-of-bounds access as a hazard; the lanes concerned read 0
    # and their writes are dropped, so that a launch can go on and report everything it finds.
    def _locate(self, addr, nbytes, what, report):
        """addr: int64 array of active lanes' addresses, each touching nbytes. -> [(alloc, lane
        mask or None for all)] covering the lanes that are inside an allocation."""
        lo, hi = int(addr.min()), int(addr.max())
        a = self.find(lo)
        if a is not None and hi + nbytes <= a.base + a.nbytes:
            return [(a, None)]
        out = []
        pos = np.searchsorted(np.asarray(self.bases, np.int64), addr, side="right") - 1
        ok = pos >= 0
        for i in np.unique(pos[ok]):
            al = self.allocs[i]
            m = pos == i
            m &= addr + nbytes <= al.base + al.nbytes
            ok &= (pos != i) | m
            if m.any():
                out.append((al, m))
        if not ok.all():
            bad = int(addr[~ok][0])
            report(f"out-of-bounds global {what} of {nbytes} bytes: {self.describe(bad)}"
                   + (f" (and {int((~ok).sum()) - 1} more lanes)" if (~ok).sum() > 1 else ""))
        return out

    def load(self, addr, nbytes, report):
        """addr: int64 array (k,) -> uint32 (k, nbytes // 4) when nbytes is a multiple of 4 and
        every address aligned, else uint8 (k, nbytes); out-of-bounds lanes read 0."""
        aligned = nbytes % 4 == 0 and not (addr & 3).any()
        out = np.zeros((addr.shape[0], nbytes // 4 if aligned else nbytes), np.uint32 if aligned else np.uint8)
        for a, m in self._locate(addr, nbytes, "load", report):
            off = (addr if m is None else addr[m]) - a.base
            if aligned:
                rows = a.u32[(off >> 2)[:, None] + np.arange(nbytes // 4)]
            elif nbytes == 2 and not (off & 1).any():
                rows = a.u8.view(np.uint16)[off >> 1].view(np.uint8).reshape(-1, 2)
            elif nbytes == 1:
                rows = a.u8[off][:, None]
            else:
                rows = a.u8[off[:, None] + np.arange(nbytes)]
            if m is None:
                out = rows
            else:
                out[m] = rows
        if nbytes % 4 == 0 and not aligned:
            return np.ascontiguousarray(out).view(np.uint32)
        return out

    def store(self, addr, data, report):
        """addr: int64 (k,); data: uint32 (k, n) or uint8 (k, nbytes); out-of-bounds lanes are dropped."""
        nbytes = data.shape[1] * data.itemsize
        aligned = data.dtype == np.uint32 and not (addr & 3).any()
        for a, m in self._locate(addr, nbytes, "store", report):
            ad = addr if m is None else addr[m]
            d = data if m is None else data[m]
            if aligned:
                a.u32[((ad - a.base) >> 2)[:, None] + np.arange(d.shape[1])] = d
            else:
                d8 = np.ascontiguousarray(d).view(np.uint8).reshape(len(ad), nbytes)
                a.u8[(ad - a.base)[:, None] + np.arange(nbytes)] = d8
