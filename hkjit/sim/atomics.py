"""Atomic read-modify-write: the operations of global/flat/buffer and LDS atomics on 32- and 64-bit
values, applied to all active lanes of a group as the hardware serialises them (lanes that hit
the same address take effect in lane order, each seeing the previous one's result)."""

import re

import numpy as np

U16, U32, U64, I32, I64 = np.uint16, np.uint32, np.uint64, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64

_MEM_OPS = r"swap|cmpswap|add|sub|smin|umin|smax|umax|and|or|xor|inc|dec|add_f32|add_f64|min_f64|max_f64|pk_add_f16|pk_add_bf16"
_MEM = re.compile(rf"(?:global|flat|buffer)_atomic_({_MEM_OPS})(_x2)?$")
_DS = re.compile(r"ds_(add|sub|rsub|inc|dec|min|max|and|or|xor|mskor|wrxchg|cmpst|pk_add)(_rtn)?_(u32|i32|f32|b32|u64|i64|f64|b64|f16|bf16)$")


def parse_memory(name):
    """global/flat/buffer atomic -> (operation, type, bits) or None. Types: 'u', 'i', 'f', 'f16x2',
    'bf16x2'; cmpswap's data is {source, compare}."""
    m = _MEM.match(name)
    if not m:
        return None
    opn, wide = m.group(1), bool(m.group(2))
    if opn.startswith("pk_add_"):
        return "add", opn[7:] + "x2", 32
    if opn in ("add_f32", "add_f64", "min_f64", "max_f64"):
        return opn[:3], "f", int(opn[-2:])
    typ = "i" if opn in ("smin", "smax") else "u"
    return {"smin": "min", "umin": "min", "smax": "max", "umax": "max"}.get(opn, opn), typ, 64 if wide else 32


def parse_ds(name):
    """LDS atomic -> (operation, type, bits, returns) or None. cmpst's data0 is the compare value,
    data1 the source; mskor's data0 the mask, data1 the bits to set."""
    m = _DS.match(name)
    if not m:
        return None
    opn, rtn, t = m.groups()
    if opn == "pk_add":
        return "add", t + "x2", 32, bool(rtn)
    return opn, "u" if t[0] == "b" else t[0], int(t[1:]), bool(rtn)


def _typed(bits, typ, width):
    if typ == "f":
        return bits.view(F64 if width == 64 else F32)
    if typ == "i":
        return bits.view(I64 if width == 64 else I32)
    return bits


def _pk(old, a, typ):
    out = np.zeros_like(old)
    for sh in (0, 16):
        x, y = (old >> U32(sh)) & U32(0xFFFF), (a >> U32(sh)) & U32(0xFFFF)
        if typ == "f16x2":
            r = (x.astype(U16).view(F16) + y.astype(U16).view(F16)).astype(F16).view(U16).astype(U32)
        else:
            from .fp import bf16_to_f32, f32_to_bf16
            r = f32_to_bf16(bf16_to_f32(x) + bf16_to_f32(y)).astype(U32)
        out |= r << U32(sh)
    return out


def combine(opn, typ, width, old, a, b=None):
    """New memory bits from old bits and the data bits a (and b). All uint32 or uint64 arrays."""
    if typ.endswith("x2"):
        return _pk(old, a, typ)
    if opn in ("swap", "wrxchg"):
        return a
    if opn in ("cmpswap", "cmpst"):     # cmpswap: a = source, b = compare; cmpst: a = compare, b = source
        src, cmp = (a, b) if opn == "cmpswap" else (b, a)
        eq = _typed(old, typ, width) == _typed(cmp, typ, width)
        return np.where(eq, src, old)
    if opn == "mskor":
        return (old & ~a) | b
    if opn in ("and", "or", "xor"):
        return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[opn](old, a)
    if opn == "inc":
        return np.where(old >= a, 0, old + 1).astype(old.dtype)
    if opn == "dec":
        return np.where((old == 0) | (old > a), a, old - 1).astype(old.dtype)
    x, y = _typed(old, typ, width), _typed(a, typ, width)
    with np.errstate(all="ignore"):
        if opn == "add":
            r = x + y
        elif opn == "sub":
            r = x - y
        elif opn == "rsub":
            r = y - x
        elif opn == "min":
            r = np.fmin(x, y) if typ == "f" else np.minimum(x, y)
        elif opn == "max":
            r = np.fmax(x, y) if typ == "f" else np.maximum(x, y)
        else:
            raise ValueError(opn)
    return np.asarray(r).astype(x.dtype).view(old.dtype)


def serialise(addr, apply):
    """Run apply(lane indices) over the lanes in rounds in which no address repeats, keeping the
    lane order of every address (apply reads memory, combines and writes back)."""
    todo = np.arange(addr.size)
    while todo.size:
        _, first = np.unique(addr[todo], return_index=True)
        now = todo[np.sort(first)]
        apply(now)
        todo = np.setdiff1d(todo, now, assume_unique=True)


def words_to_bits(words, width):
    """(k, width/32) uint32 -> (k,) uint32 or uint64."""
    if width == 32:
        return words[:, 0].astype(U32)
    return words[:, 0].astype(U64) | words[:, 1].astype(U64) << U64(32)


def bits_to_words(bits, width):
    if width == 32:
        return bits.astype(U32)[:, None]
    return np.stack([(bits & U64(0xFFFFFFFF)).astype(U32), (bits >> U64(32)).astype(U32)], 1)
