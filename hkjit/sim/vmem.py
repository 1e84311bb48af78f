"""Vector memory: global / flat instructions (incl. atomics and direct-to-LDS loads) and LDS (DS)
instructions, with the hazard bookkeeping they need. Buffer instructions: buffer.py."""

import re

import numpy as np

from . import atomics, coverage
from .state import M0

U8, U16, U32, U64, I64 = np.uint8, np.uint16, np.uint32, np.uint64, np.int64
LANES = np.arange(64, dtype=I64)

# memory op suffix -> (bytes, sign-extend, d16 half: None / 'lo' / 'hi')
_SIZES = {"dword": (4, False, None), "dwordx2": (8, False, None), "dwordx3": (12, False, None),
          "dwordx4": (16, False, None), "ubyte": (1, False, None), "sbyte": (1, True, None),
          "ushort": (2, False, None), "sshort": (2, True, None), "byte": (1, False, None),
          "short": (2, False, None), "short_d16": (2, False, "lo"), "short_d16_hi": (2, False, "hi"),
          "ubyte_d16": (1, False, "lo"), "ubyte_d16_hi": (1, False, "hi"), "sbyte_d16": (1, True, "lo"),
          "sbyte_d16_hi": (1, True, "hi"), "byte_d16_hi": (1, False, "hi")}


def _scatter_rows(g, d, nd, data, mask):
    """data: (k, nd) uint32 for the active lanes (mask (n,64)), or (n*64, nd) when mask is None."""
    if mask is None:
        data = data.reshape(g.n, 64, nd)
        for i in range(nd):
            g.V[d + i] = data[:, :, i]
    else:
        for i in range(nd):
            g.V[d + i][mask] = data[:, i]


def _merge_d16(g, d, mask, v, d16):
    """A 16-bit load into one half of each lane's register ("lo" or "hi"), the other half kept."""
    old = (g.V[d] if mask is None else g.V[d][mask]).reshape(-1)
    if d16 == "lo":
        return (old & U32(0xFFFF0000)) | (v & U32(0xFFFF))
    return (old & U32(0xFFFF)) | (v << U32(16))


def _extend(raw_bytes, size, signed):
    """(k, size) uint8 -> (k,) uint32 zero/sign-extended."""
    if size == 1:
        v = raw_bytes[:, 0]
        return v.view(np.int8).astype(np.int32).view(U32) if signed else v.astype(U32)
    v = np.ascontiguousarray(raw_bytes[:, :2]).view(U16)[:, 0]
    return v.view(np.int16).astype(np.int32).view(U32) if signed else v.astype(U32)


def _issue(m, g, q, keys, addr, token=None):
    if m.checks:
        (g.vmq if q == "vm" else g.lgkmq).append((keys, addr, token))
        g.pend |= keys


def compile_global(o, inst, m):
    f, name = inst.f, inst.name
    fam = inst.fam
    mo = re.match(r"(global|flat|scratch)_(load_lds|load|store|atomic)_(\w+)$", name)
    if not mo:
        return None
    kind, rest = mo.group(2), mo.group(3)
    if fam == "SCRATCH":
        return None   # no scratch in hkjit kernels (checked: private_segment_fixed_size == 0)
    report = m.reporter(inst)
    saddr = f["saddr"] if fam == "GLOBAL" else 0x7F
    off = f["offset"]
    if saddr != 0x7F and saddr != 0x7D:
        sb = o.sreg(saddr, 2)
        va = o.vrow(f["addr"])

        def address(g):
            base = g.S[:, sb].astype(I64) | g.S[:, sb + 1].astype(I64) << 32
            return base[:, None] + g.V[va].astype(I64) + off
    else:
        va = o.vrow(f["addr"], count=2)

        def address(g):
            return (g.V[va].astype(I64) | g.V[va + 1].astype(I64) << 32) + off
    acc = bool(f.get("acc"))

    def lanes(g):
        a = address(g)
        if g.full:
            return a.reshape(-1), None
        return a[g.exec], g.exec

    if kind == "atomic":
        return _compile_atomic(o, inst, m, lanes, report, acc)
    if rest not in _SIZES:
        return None
    size, signed, d16 = _SIZES[rest]
    iaddr = inst.addr
    if kind == "load_lds":
        return _compile_load_lds(o, inst, m, size, lanes, report)
    if kind == "load":
        nd = max(1, size // 4)
        d = o.vrow(f["vdst"], acc=acc, count=nd, write=True)
        if d16:
            o.vrow(f["vdst"], acc=acc)
        keys = frozenset(o.wk)

        def run(g):
            a, mask = lanes(g)
            if a.size:
                data = m.mem.load(a, size, _oob(report, g))
                if size < 4:
                    v = _extend(data, size, signed)
                    if d16:
                        v = _merge_d16(g, d, mask, v, d16)
                    data = v[:, None]
                _scatter_rows(g, d, nd, data, mask)
            _issue(m, g, "vm", keys, iaddr)
        return run
    # store
    nd = max(1, size // 4)
    s = o.vrow(f["data"], acc=acc, count=nd)
    keys = frozenset()

    def run(g):
        a, mask = lanes(g)
        if a.size:
            if mask is None:
                data = np.stack([g.V[s + i].reshape(-1) for i in range(nd)], 1)
            else:
                data = np.stack([g.V[s + i][mask] for i in range(nd)], 1)
            if size < 4:
                v = data[:, 0] >> U32(16) if d16 == "hi" else data[:, 0]
                data = np.ascontiguousarray(v).view(U8).reshape(-1, 4)[:, :size]
            m.mem.store(a, data, _oob(report, g))
        _issue(m, g, "vm", keys, iaddr)
    return run


def _oob(report, g, hint=""):
    """The memory layer's callback for out-of-bounds lanes of wave group g."""
    return lambda msg: report(g, "out-of-bounds", msg + hint)


def _atomic_memory(m, a, data, spec, report, g, hint=""):
    """Global atomic of spec (operation, type, bits) at byte addresses a (k,), data (k, words)
    uint32; -> old values (k, bits/32) uint32, lanes serialised like the hardware. Misaligned
    lanes are reported and left out."""
    opn, typ, width = spec
    nd = width // 32
    olds = np.zeros(a.size, U32 if width == 32 else U64)
    bad = a % (width // 8) != 0
    if bad.any():
        report(g, "misaligned", f"{width}-bit atomic at misaligned address {int(a[bad][0]):#x}")
    va = atomics.words_to_bits(data[:, :nd], width)
    vb = atomics.words_to_bits(data[:, nd:], width) if data.shape[1] > nd else None
    oob = _oob(report, g, hint)

    def apply(lanes):
        old = atomics.words_to_bits(m.mem.load(a[lanes], width // 8, oob), width)
        new = atomics.combine(opn, typ, width, old, va[lanes], None if vb is None else vb[lanes])
        m.mem.store(a[lanes], atomics.bits_to_words(new, width), oob)
        olds[lanes] = old
    todo = np.nonzero(~bad)[0]
    atomics.serialise(a[todo], lambda sel: apply(todo[sel]))
    return atomics.bits_to_words(olds, width)


def _atomic_operands(o, inst, spec, data_field, acc):
    """(first data register, number of data registers, number of returned registers)."""
    opn, _, width = spec
    nd = width // 32
    ndata = nd * (2 if opn == "cmpswap" else 1)
    return o.vrow(inst.f[data_field], acc=acc, count=ndata), ndata, nd


def _compile_atomic(o, inst, m, lanes, report, acc):
    f = inst.f
    spec = atomics.parse_memory(inst.name)
    if spec is None:
        return None
    s, ndata, nd = _atomic_operands(o, inst, spec, "data", acc)
    ret = bool(f["sc0"])
    d = o.vrow(f["vdst"], acc=acc, count=nd, write=True) if ret else None
    keys = frozenset(o.wk) if ret else frozenset()
    iaddr = inst.addr

    def run(g):
        a, mask = lanes(g)
        if a.size:
            data = np.stack([(g.V[s + i].reshape(-1) if mask is None else g.V[s + i][mask]) for i in range(ndata)], 1)
            olds = _atomic_memory(m, a, data, spec, report, g)
            if ret:
                _scatter_rows(g, d, nd, olds, mask)
        _issue(m, g, "vm", keys, iaddr)
    return run


def _compile_load_lds(o, inst, m, size, lanes_fn, report):
    """global_load_lds_* / buffer_load_* lds: LDS address = M0 + inst offset + lane * size."""
    off = inst.f["offset"]
    o.sreg(M0)
    iaddr = inst.addr
    if size not in (1, 2, 4) and not (m.arch == "gfx950" and size in (12, 16)):
        raise o.err(f"{coverage.limit('lds-dma-size')}: {size} bytes on {m.arch}")

    def run(g, data=None, mask=None):
        ldsaddr = (g.S[:, M0].astype(I64)[:, None] + off + LANES * size) & 0xFFFFFFFF
        tok = m.lds.write(g, mask, ldsaddr, size, data, report, dma=True) if data.shape[0] else None
        _issue(m, g, "vm", frozenset(), iaddr, tok)

    if inst.fam == "MUBUF":
        return run   # the buffer path computes the data and calls run(g, data, mask)

    def run_global(g):
        a, mask = lanes_fn(g)
        data = np.ascontiguousarray(m.mem.load(a, size, _oob(report, g))).view(U8).reshape(a.size, size) \
            if a.size else np.zeros((0, size), U8)
        run(g, data, mask)
    return run_global


# ---------------------------------------------------------------- LDS
_DS_READ = {"ds_read_b32": (4, 1), "ds_read_b64": (8, 1), "ds_read_b96": (12, 1), "ds_read_b128": (16, 1),
            "ds_read2_b32": (4, 2), "ds_read2_b64": (8, 2), "ds_read2st64_b32": (4, 2),
            "ds_read2st64_b64": (8, 2), "ds_read_u8": (1, 1), "ds_read_i8": (1, 1), "ds_read_u16": (2, 1),
            "ds_read_i16": (2, 1), "ds_read_u8_d16": (1, 1), "ds_read_u8_d16_hi": (1, 1),
            "ds_read_i8_d16": (1, 1), "ds_read_i8_d16_hi": (1, 1), "ds_read_u16_d16": (2, 1),
            "ds_read_u16_d16_hi": (2, 1), "ds_read_b64_tr_b16": (8, 1)}
_DS_WRITE = {"ds_write_b32": (4, 1), "ds_write_b64": (8, 1), "ds_write_b96": (12, 1), "ds_write_b128": (16, 1),
             "ds_write2_b32": (4, 2), "ds_write2_b64": (8, 2), "ds_write2st64_b32": (4, 2),
             "ds_write2st64_b64": (8, 2), "ds_write_b8": (1, 1), "ds_write_b16": (2, 1),
             "ds_write_b8_d16_hi": (1, 1), "ds_write_b16_d16_hi": (2, 1)}


def compile_ds(o, inst, m):
    f, name = inst.f, inst.name
    if f["gds"]:
        raise o.err(coverage.limit("gds"))
    report = m.reporter(inst)
    iaddr = inst.addr
    acc = bool(f.get("acc"))
    if name == "ds_nop":
        return lambda g: None
    if name in ("ds_bpermute_b32", "ds_permute_b32"):
        ad = o.vrow(f["addr"])
        s = o.vrow(f["data0"])
        d = o.vrow(f["vdst"], write=True)
        off = f["offset"]
        keys = frozenset(o.wk)
        bperm = name == "ds_bpermute_b32"

        def run(g):
            idx = ((g.V[ad].astype(I64) + off) >> 2) & 63
            src = g.V[s]
            rows = np.arange(g.n)[:, None]
            if bperm:
                # read from lane idx; inactive source lanes give 0
                val = np.where(g.exec[rows, idx], src[rows, idx], U32(0))
                np.copyto(g.V[d], val, where=g.exec)
            else:
                out = np.zeros_like(src)
                for w in range(g.n):
                    act = np.nonzero(g.exec[w])[0]
                    out[w, idx[w, act]] = src[w, act]
                np.copyto(g.V[d], out, where=g.exec)
            _issue(m, g, "lgkm", keys, iaddr)
        return run
    if name == "ds_swizzle_b32":
        ad = o.vrow(f["addr"])
        s = o.vrow(f["addr"])          # the data is in the address field (DS_1A)
        d = o.vrow(f["vdst"], write=True)
        off = f["offset"]
        keys = frozenset(o.wk)
        lane = np.arange(64)
        if off & 0x8000:  # quad permute mode
            sel = [(off >> (2 * k)) & 3 for k in range(4)]
            srcl = (lane & ~3) + np.array(sel)[lane & 3]
        else:  # bit mode within 32 lanes
            and_m, or_m, xor_m = off & 0x1F, (off >> 5) & 0x1F, (off >> 10) & 0x1F
            srcl = (lane & 32) | ((((lane & 31) & and_m) | or_m) ^ xor_m)

        def run(g):
            val = g.V[s][:, srcl]
            np.copyto(g.V[d], np.where(g.exec[:, srcl], val, U32(0)), where=g.exec)
            _issue(m, g, "lgkm", keys, iaddr)
        return run
    ad = o.vrow(f["addr"])
    if name in _DS_READ:
        size, cnt = _DS_READ[name]
        st = 64 if "st64" in name else 1
        offs = [f["offset0"] * size * st, f["offset1"] * size * st] if cnt == 2 else [f["offset"]]
        nd = max(1, size // 4) * cnt
        d = o.vrow(f["vdst"], acc=acc, count=nd, write=True)
        d16 = "d16" in name
        if d16:
            o.vrow(f["vdst"], acc=acc)
        signed = "_i8" in name or "_i16" in name
        tr = name.startswith("ds_read_b64_tr")
        if tr and m.arch != "gfx950":
            return None
        keys = frozenset(o.wk)

        def run(g):
            mask = None if g.full else g.exec
            base = g.V[ad].astype(I64)
            parts = []
            for oo in offs:
                a = (base + oo) & 0xFFFFFFFF
                parts.append(m.lds.read(g, mask, a, size, report))
            if tr:
                # in each 16 lanes, lane 4a + b gets element b of lanes a, a + 4, a + 8, a + 12
                if mask is None:
                    full = parts[0].view(U16).reshape(g.n, 4, 4, 4, 4)         # [n, group, e, a, b]
                else:
                    full = np.zeros((g.n, 64, 4), U16)
                    full[mask] = parts[0].view(U16).reshape(-1, 4)
                    full = full.reshape(g.n, 4, 4, 4, 4)
                dw = np.ascontiguousarray(full.transpose(0, 1, 3, 4, 2)).reshape(g.n, 64, 4).view(U32)
                for i in range(2):
                    if mask is None:
                        g.V[d + i] = dw[:, :, i]
                    else:
                        g.V[d + i][mask] = dw[:, :, i][mask]
            elif size >= 4:
                # (size // 4 dwords a lane, not -1: a read that selects no lane has no rows to infer from)
                data = np.concatenate([p.view(U32).reshape(p.shape[0], size // 4) for p in parts], 1)
                _scatter_rows(g, d, nd, data, mask)
            else:
                v = _extend(parts[0], size, signed)
                if d16:
                    old = g.V[d].reshape(-1) if mask is None else g.V[d][mask]
                    v = (old & U32(0xFFFF0000)) | (v & U32(0xFFFF)) if not name.endswith("_hi") else (old & U32(0xFFFF)) | (v << U32(16))
                _scatter_rows(g, d, 1, v[:, None], mask)
            _issue(m, g, "lgkm", keys, iaddr)
        return run
    if name in _DS_WRITE:
        size, cnt = _DS_WRITE[name]
        st = 64 if "st64" in name else 1
        offs = [f["offset0"] * size * st, f["offset1"] * size * st] if cnt == 2 else [f["offset"]]
        ndw = max(1, size // 4)
        srcs = [o.vrow(f["data0"], acc=acc, count=ndw)]
        if cnt == 2:
            srcs.append(o.vrow(f["data1"], acc=acc, count=ndw))
        hi = name.endswith("_d16_hi")

        def run(g):
            mask = None if g.full else g.exec
            base = g.V[ad].astype(I64)
            for oo, s in zip(offs, srcs):
                rows = [(g.V[s + i].reshape(-1) if mask is None else g.V[s + i][mask]) for i in range(ndw)]
                data = np.stack(rows, 1)
                if size < 4:
                    v = data[:, 0] >> U32(16) if hi else data[:, 0]
                    data = np.ascontiguousarray(v).view(U8).reshape(-1, 4)[:, :size]
                else:
                    data = np.ascontiguousarray(data).view(U8).reshape(-1, size)
                m.lds.write(g, mask, (base + oo) & 0xFFFFFFFF, size, data, report)
            _issue(m, g, "lgkm", frozenset(), iaddr)
        return run
    spec = atomics.parse_ds(name)
    if spec:
        opn, typ, width, rtn = spec
        nd = width // 32
        srcs = [o.vrow(f["data0"], acc=acc, count=nd)]
        if opn in ("cmpst", "mskor"):
            srcs.append(o.vrow(f["data1"], acc=acc, count=nd))
        d = o.vrow(f["vdst"], acc=acc, count=nd, write=True) if rtn else None
        keys = frozenset(o.wk)
        off = f["offset"]

        def run(g):
            mask = None if g.full else g.exec
            a = (g.V[ad].astype(I64) + off) & 0xFFFFFFFF
            data = np.stack([(g.V[s + i].reshape(-1) if mask is None else g.V[s + i][mask])
                             for s in srcs for i in range(nd)], 1)
            if data.shape[0]:
                olds = m.lds.atomic(g, mask, a, data, (opn, typ, width), report)
                if rtn:
                    _scatter_rows(g, d, nd, olds, mask)
            _issue(m, g, "lgkm", keys, iaddr)
        return run
    return None


_DS_OTHER = {"ds_nop", "ds_bpermute_b32", "ds_permute_b32", "ds_swizzle_b32"}


def compilers(names):
    out = {}
    for n in names:
        if n in _DS_READ or n in _DS_WRITE or n in _DS_OTHER or atomics.parse_ds(n):
            out[n] = compile_ds
        mo = re.match(r"(global|flat)_(load_lds|load|store|atomic)_(\w+)$", n)
        if mo and (mo.group(3) in _SIZES or atomics.parse_memory(n)):
            out[n] = compile_global
    return out
