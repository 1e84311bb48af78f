"""What the row-wise memory-bound ops (rms_norm and the fused norms, activations, softmax, rope,
topk) share: reading an array as rows of its last dimension, the alignment class of a call, and
checks of the row-tile overrides.

Arrays are read in place when their elements are contiguous within a row and the leading
dimensions collapse to one row stride (any view of rows of a dense tensor does); anything else is
refused with the fix (host arrays never get here: the launch path stages them as dense copies)."""

from ..errors import InvalidArgumentError

ROW_TILES = ("vec", "threads", "row_threads", "group_rows", "chunks", "blocks")


def cdiv(a, b):
    return -(-a // b)


def pow2_at_least(n):
    p = 1
    while p < n:
        p *= 2
    return p


def rows_of(op, name, arr):
    """(rows, row stride in elements) of `arr` read as rows of its last dimension."""
    shape, strides = arr.shape, arr.strides
    if shape[-1] > 1 and strides[-1] != 1:
        raise InvalidArgumentError(f"{op}: {name}'s last dimension is strided ({strides[-1]} elements); "
                                   f"rows must be contiguous: pass {name}.contiguous()")
    rows = 1
    for n in shape[:-1]:
        rows *= n
    lead = [(n, s) for n, s in zip(shape[:-1], strides[:-1]) if n > 1]
    for (_, s_outer), (n_inner, s_inner) in zip(lead, lead[1:]):
        if s_outer != s_inner * n_inner:
            raise InvalidArgumentError(f"{op}: {name} with shape {shape} and strides {strides} does not collapse "
                                       f"to rows of one stride; pass {name}.contiguous() or a 2-D view")
    row_stride = lead[-1][1] if lead else shape[-1]
    if rows > 1 and row_stride < shape[-1]:
        raise InvalidArgumentError(f"{op}: {name}'s rows overlap (row stride {row_stride} < {shape[-1]})")
    if rows >= 2 ** 31:
        raise InvalidArgumentError(f"{op}: {rows} rows; at most 2**31 - 1")
    return rows, row_stride


def alignment(itemsize, rows, *pointers_and_strides):
    """The largest power of two up to 16 dividing every (byte address, element row stride) pair's
    address and, when there are several rows, its row stride in bytes."""
    align = 16
    for ptr, stride in pointers_and_strides:
        v = ptr | (stride * itemsize if rows > 1 else 0)
        if v:
            align = min(align, v & -v)
    return max(align, itemsize)


SWITCHES = ("exact", "packed_wb", "direct")   # tile overrides that turn a kernel path off (0) or on (1)


def check_ints(op, tiles, accepted=ROW_TILES):
    unknown = sorted(set(tiles) - set(accepted))
    if unknown:
        raise InvalidArgumentError(f"{op}: unknown tile override(s) {', '.join(unknown)}; valid: {', '.join(accepted)}")
    for name, v in tiles.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidArgumentError(f"{op}: {name}={v!r}; tile overrides are ints")
        if name in SWITCHES and v not in (0, 1):
            raise InvalidArgumentError(f"{op}: {name}={v!r}; 0 or 1")
        if name not in SWITCHES and v < 1:
            raise InvalidArgumentError(f"{op}: {name}={v!r}; tile overrides are ints >= 1")


def vector_width(op, tiles, dtype, itemsize, align):
    """16 / itemsize elements per access where the alignment allows, or the checked override."""
    widest = max(1, min(16, align) // itemsize)
    vec = tiles.get("vec", widest)
    if vec not in (1, 2, 4, 8) or vec > widest:
        raise InvalidArgumentError(f"{op}: vec={vec}; valid: powers of two up to {widest} for {dtype} arrays "
                                   f"aligned to {align} bytes")
    return vec


def check_group(op, target, threads, row_threads):
    """A row group and a block the row tile accepts on `target`."""
    warp = target.wave_size
    if row_threads <= warp and row_threads & (row_threads - 1):
        raise InvalidArgumentError(f"{op}: row_threads={row_threads} must be a power of two when <= {warp}")
    if row_threads > warp and row_threads % warp:
        raise InvalidArgumentError(f"{op}: row_threads={row_threads}; a power of two up to {warp} or a multiple "
                                   f"of the {warp}-thread warp/wave")
    if threads % 64 or threads > target.max_threads or threads % row_threads:
        raise InvalidArgumentError(f"{op}: threads={threads}; a multiple of 64 (whole AMD waves, whole NVIDIA "
                                   f"warps), at most {target.max_threads}, a multiple of row_threads={row_threads}")
