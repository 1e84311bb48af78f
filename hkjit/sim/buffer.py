"""Buffer (MUBUF) instructions: loads, stores, atomics and direct-to-LDS loads through a 128-bit
buffer resource, with raw, structured (strided, idxen / add_tid) and swizzled addressing and the
range checks of the CDNA3/CDNA4 ISA.

Resource (V#) fields used, GFX9 layout:
  word0-1 [47:0] base, [61:48] stride, [62] cache swizzle (cache banks only: no effect on the
  address), [63] swizzle enable; word2 num_records (bytes if stride is 0, else records);
  word3 [18:15] data format (with add_tid: stride bits [17:14]), [22:21] index stride (8 << n),
  [23] add_tid_enable (adds the lane id to the index).
Address of dword c of a lane, offset = inst offset + (offen ? vgpr offset : 0) + 4c, index =
(idxen ? vgpr index : 0) + (add_tid ? lane : 0), all 32-bit:
  linear:   base + soffset + index * stride + offset
  swizzled: base + soffset + (index / istride * stride + offset / 4 * 4) * istride
                  + index % istride * 4 + offset % 4          (element size 4 on GFX9)
Range check (out-of-range lanes read 0, their writes and atomics are dropped):
  stride 0:  offset + min(size, 4) > num_records (the SGPR offset is not part of it)
  otherwise: index >= num_records, or (idxen or add_tid) and offset >= stride."""

import re

import numpy as np

from . import atomics
from .vmem import _SIZES, _atomic_memory, _compile_load_lds, _extend, _issue, _merge_d16, _oob, _scatter_rows

U8, U32, I64 = np.uint8, np.uint32, np.int64
LANES = np.arange(64, dtype=I64)
M32 = 0xFFFFFFFF
HINT = (" (the lane is inside the buffer resource's range: num_records, and for a raw buffer the SGPR "
        "offset soffset, is not part of the check)")


def addressing(o, inst, size):
    """-> fn(g) -> (addr (n, 64, ncomp) int64, in range (n, 64, ncomp) bool, whether the components
    of every lane are consecutive dwords), component c being dword c of the access (one component
    for accesses under 4 bytes)."""
    f = inst.f
    rs = o.sreg(f["srsrc"], 4)
    soff = o.ssrc(f["soffset"], False)
    idxen, offen = f["idxen"], f["offen"]
    vi = o.vrow(f["vaddr"]) if idxen else None
    vo = o.vrow(f["vaddr"] + idxen) if offen else None
    comp = np.arange(0, size, 4, dtype=I64) if size >= 4 else np.zeros(1, I64)
    inst_off = f["offset"]
    unit = min(size, 4)

    def run(g):
        R = g.S[:, rs:rs + 4].astype(I64)
        base = R[:, 0] | (R[:, 1] & 0xFFFF) << 32
        add_tid = (R[:, 3] >> 23 & 1).astype(bool)
        stride = (R[:, 1] >> 16 & 0x3FFF) | np.where(add_tid, (R[:, 3] >> 15 & 0xF) << 14, 0)
        swizzle = (R[:, 1] >> 31 & 1).astype(bool) & (stride != 0)
        istride = 8 << (R[:, 3] >> 21 & 3)
        nrec = R[:, 2]
        col = (slice(None), None, None)
        voff = g.V[vo].astype(I64) if offen else np.zeros((g.n, 64), I64)
        offset = ((voff + inst_off) & M32)[..., None] + comp                                # (n, 64, ncomp)
        so = np.broadcast_to(np.asarray(soff(g)).astype(I64), (g.n,))
        start = (base + so)[col]
        if not (stride.any() or add_tid.any()):              # raw buffers: the common case
            return start + offset, offset + unit <= nrec[col], True
        index = (g.V[vi].astype(I64) if idxen else np.zeros((g.n, 64), I64)) + np.where(add_tid[:, None], LANES, 0)
        ix = (index & M32)[..., None]
        boff = ix * stride[col] + offset
        if swizzle.any():
            swz = (ix // istride[col] * stride[col] + offset // 4 * 4) * istride[col] + ix % istride[col] * 4 + offset % 4
            boff = np.where(swizzle[col], swz, boff)
        raw = offset + unit <= nrec[col]
        checked_offset = (add_tid[col] | bool(idxen)) & (offset >= stride[col])
        structured = (ix < nrec[col]) & ~checked_offset
        return start + (boff & M32), np.where((stride == 0)[col], raw, structured), not swizzle.any()
    return run


def _lanes(g, addr, ok):
    """Active lanes' (addr (k, ncomp), in range (k, ncomp)) and the mask that selected them."""
    mask = None if g.full else g.exec
    if mask is None:
        return addr.reshape(-1, addr.shape[-1]), ok.reshape(-1, ok.shape[-1]), None
    return addr[mask], ok[mask], mask


def _contiguous(a):
    """True when every lane's components are consecutive dwords (then one access per lane)."""
    return a.shape[1] == 1 or bool((np.diff(a, axis=1) == 4).all())


def _load_words(m, a, ok, report, linear):
    """(k, ncomp) dwords at a where ok, 0 elsewhere."""
    data = np.zeros(a.shape, U32)
    if ok.all() and (linear or _contiguous(a)):
        return m.mem.load(a[:, 0], 4 * a.shape[1], report).reshape(a.shape)
    for c in range(a.shape[1]):
        sel = ok[:, c]
        if sel.any():
            data[sel, c] = m.mem.load(a[sel, c], 4, report)[:, 0]
    return data


def _store_words(m, a, ok, data, report, linear):
    if ok.all() and (linear or _contiguous(a)):
        m.mem.store(a[:, 0], data, report)
        return
    for c in range(a.shape[1]):
        sel = ok[:, c]
        if sel.any():
            m.mem.store(a[sel, c], data[sel, c:c + 1], report)


def compile_mubuf(o, inst, m):
    f, name = inst.f, inst.name
    if name in ("buffer_wbl2", "buffer_inv"):      # cache write-back / invalidate: memory is coherent here
        return lambda g: None
    spec = atomics.parse_memory(name)
    mo = re.match(r"buffer_(load|store)_(\w+)$", name)
    if not spec and not (mo and mo.group(2) in _SIZES):
        return None
    hazard = m.reporter(inst)
    acc = bool(f.get("acc"))
    iaddr = inst.addr

    def report(g):
        return _oob(hazard, g, HINT)

    if spec:
        return _compile_atomic(o, inst, m, spec, acc, hazard)
    kind = mo.group(1)
    size, signed, d16 = _SIZES[mo.group(2)]
    where = addressing(o, inst, size)
    nd = max(1, size // 4)

    if f["lds"]:
        to_lds = _compile_load_lds(o, inst, m, size, None, hazard)

        def run(g):
            addr, ok, linear = where(g)
            a, ok, mask = _lanes(g, addr, ok)
            if size >= 4:
                data = _load_words(m, a, ok, report(g), linear).view(U8).reshape(-1, size)
            else:
                data = np.zeros((a.shape[0], size), U8)
                sel = ok[:, 0]
                if sel.any():
                    data[sel] = np.ascontiguousarray(m.mem.load(a[sel, 0], size, report(g))).view(U8).reshape(-1, size)
            to_lds(g, data, mask)
        return run

    if kind == "load":
        d = o.vrow(f["vdata"], acc=acc, count=nd, write=True)
        if d16:
            o.vrow(f["vdata"], acc=acc)
        keys = frozenset(o.wk)

        def run(g):
            addr, ok, linear = where(g)
            a, ok, mask = _lanes(g, addr, ok)
            if a.shape[0]:
                if size >= 4:
                    data = _load_words(m, a, ok, report(g), linear)
                else:
                    v = np.zeros(a.shape[0], U32)
                    sel = ok[:, 0]
                    if sel.any():
                        v[sel] = _extend(m.mem.load(a[sel, 0], size, report(g)), size, signed)
                    if d16:
                        v = _merge_d16(g, d, mask, v, d16)
                    data = v[:, None]
                _scatter_rows(g, d, nd, data, mask)
            _issue(m, g, "vm", keys, iaddr)
        return run

    s = o.vrow(f["vdata"], acc=acc, count=nd)

    def run(g):
        addr, ok, linear = where(g)
        a, ok, mask = _lanes(g, addr, ok)
        data = np.stack([(g.V[s + i].reshape(-1) if mask is None else g.V[s + i][mask]) for i in range(nd)], 1)
        if size < 4:
            v = data[:, 0] >> U32(16) if d16 == "hi" else data[:, 0]
            data = np.ascontiguousarray(v).view(U8).reshape(-1, 4)[:, :size]
            sel = ok[:, 0]
            if sel.any():
                m.mem.store(a[sel, 0], data[sel], report(g))
        elif a.shape[0]:
            _store_words(m, a, ok, data, report(g), linear)
        _issue(m, g, "vm", frozenset(), iaddr)
    return run


def _compile_atomic(o, inst, m, spec, acc, hazard):
    """buffer_atomic_*: the data registers (vdata) also receive the old value when sc0 (glc) is set;
    out-of-range lanes do nothing and return 0."""
    f = inst.f
    _, _, width = spec
    nd = width // 32
    ndata = nd * (2 if spec[0] == "cmpswap" else 1)
    s = o.vrow(f["vdata"], acc=acc, count=ndata)
    ret = bool(f["sc0"])
    if ret:
        o.vrow(f["vdata"], acc=acc, count=nd, write=True)
    keys = frozenset(o.wk) if ret else frozenset()
    where = addressing(o, inst, width // 8)

    def run(g):
        addr, ok, linear = where(g)
        a, ok, mask = _lanes(g, addr, ok)
        sel = ok.all(1)
        olds = np.zeros((a.shape[0], nd), U32)
        if sel.any():
            data = np.stack([(g.V[s + i].reshape(-1) if mask is None else g.V[s + i][mask]) for i in range(ndata)], 1)
            olds[sel] = _atomic_memory(m, a[sel, 0], data[sel], spec, hazard, g, HINT)
        if ret and a.shape[0]:
            _scatter_rows(g, s, nd, olds, mask)
        _issue(m, g, "vm", keys, inst.addr)
    return run


def compilers(names):
    out = {}
    for n in names:
        mo = re.match(r"buffer_(load|store)_(\w+)$", n)
        if n in ("buffer_wbl2", "buffer_inv") or (n.startswith("buffer_") and atomics.parse_memory(n)) or \
                (mo and mo.group(2) in _SIZES):
            out[n] = compile_mubuf
    return out
