"""hkjit.topk: the k largest elements of each row (last dimension) and their int64 indices, sorted.

Kernel: kernel_sources/topk.cuh, one source for gfx942, gfx950 and sm_90a: a radix select on the
order-preserving integer image of the values, composite with the column so ties go to the lower
index (as torch.topk), then a rank sort of the k <= 128 survivors. Compile-time: the dtype, the
vector width (from the alignment) and the schedule, which follows the row length n:

    pieces = ceil(n / vec)               vec-element pieces of a row (16 bytes each at best)
    register rows (n <= a warp's keys: 32 x 32 on sm_90a, 64 x 16 on CDNA): the row stays in
        registers, read once
        row_threads = a warp/wave (fewer for rows of fewer pieces); 256 threads, several rows a block
        (a block-wide row group, one row per block, is an override: row_threads = threads)
    block rows (n <= 16384): the row in one block's registers (sm_90a: 16 keys a thread, 32 for 16-bit
        types; CDNA: 16), read once; a threshold keeping at least k (proven from the lane maxima, or
        guessed from an earlier row), the candidates above it ranked; a digit-histogram search
        (radix bits a round) when too many pass. sm_90a: 8 rows a block in turn (fewer where that
        leaves less than a wave of blocks), the next row's loads ahead; 64 registers (min_blocks)
    streamed rows (longer): a row part per block (256 threads on sm_90a, 512 on CDNA), read twice (a
        histogram of the top key bits, then the survivors and the candidates of the boundary bin);
        rows are split into parts of about 64 KiB (up to 16; more for few rows, so that about 256
        blocks run) and the last part of a row to finish selects among the parts' survivors
    grid = (one block per step of rows, parts)

k is a run-time argument (any k <= 128 shares a kernel); run-time sizes and row strides too.
"""

import ctypes
import operator

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Config, Op, Param, Plan, check_tiles
from . import register
from ._rowwise import alignment, cdiv, pow2_at_least, rows_of

SOURCE = "topk.cuh"
DTYPES_IN = FLOAT_OUTPUTS           # bf16, fp16, fp32 values; indices are int64 (as torch.topk's)
TILES = ("vec", "threads", "row_threads", "chunks", "stream", "split", "radix", "rows_per_block", "min_blocks",
         "filter", "prefetch", "spread")
MAX_K = 128                         # the kernel's survivor buffer (topk.cuh MAX_K)
MAX_KEYS = 32                       # keys a thread holds in registers (one 32-bit register each);
MAX_KEYS_AMD = 16                   # (AMD: more overflow the scalar registers with their lane masks)
MAX_N = 2 ** 24                     # counts are summed as fp32 across threads: exact below 2**24
STATIC_SMEM = 48 << 10              # static shared memory a kernel may declare on every target
STREAM_CHUNKS = 2                   # streamed rows: 2 x 16 bytes in flight per thread and column block,
STREAM_THREADS = {"nvidia": 256, "amd": 512}   # and several blocks per SM / CU, so that while one
                                    # finishes a part others read (sm_90a: 72 registers, 3 blocks of 256)
MAX_SPLIT = 16                      # parts of a streamed row (their survivors meet in a 2048-entry buffer)
SPLIT_BLOCKS = 256                  # streamed rows are split so that at least about this many blocks run,
PART_BYTES = 64 << 10               # and into parts of about 64 KiB (re-read from L2 by the second pass)
RADIX_BITS = 11                     # block rows: digit bits a round (fp32 keys: 3 rounds, 16-bit: 2)
RADIX_KEYS = 16                     # block rows: keys a thread holds (AMD: up to 1024 x 16 = 16384 a row;
RADIX_KEYS_NV = {4: 16, 2: 32}      # NVIDIA, by element size (H100, 16384 x 8192 bf16: 46% -> 61% of copy with
RADIX_THREADS_NV = (64, 512)        # 32), threads from 64 (16-bit: 256: 32 keys on 128 threads spill at 64
                                    # registers) to 512, then more keys each: 512 x 32 = 16384 a row
RADIX_ROWS_PER_BLOCK = (8, 4, 2)    # rows a block takes in turn (the next one prefetched into L2, a threshold
                                    # guessed from an earlier one), the most that still fills a wave


class Args(ctypes.Structure):
    """Mirror of topk<...>::args."""
    _fields_ = [("x", ctypes.c_void_p), ("values", ctypes.c_void_p), ("indices", ctypes.c_void_p),
                ("workspace", ctypes.c_void_p), ("scratch", ctypes.c_void_p),
                ("x_row_stride", ctypes.c_longlong),
                ("values_row_stride", ctypes.c_longlong), ("indices_row_stride", ctypes.c_longlong),
                ("rows", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int)]


def configure(target, p, tiles) -> Config:
    """The schedule for `p` (validated params) on `target`, with validated overrides."""
    check_tiles(f"topk ({target.arch})", tiles, TILES)
    for name, v in tiles.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name in ("stream", "radix", "filter", "prefetch",
                                                                             "spread") else 1):
            raise InvalidArgumentError(f"topk: {name}={v!r}; tile overrides are ints >= 1 (stream: 0 or 1; "
                                       "radix: 0 or 4 to 11)")
    n, itemsize, warp = p["n"], DTYPES[p["dtype"]].itemsize, target.wave_size
    max_vec = max(1, min(16, p["align"]) // itemsize)
    vec = tiles.get("vec", max_vec)
    if vec not in (1, 2, 4, 8) or vec > max_vec:
        raise InvalidArgumentError(f"topk: vec={vec}; valid: powers of two up to {max_vec} for {p['dtype']} "
                                   f"arrays aligned to {p['align']} bytes")
    pieces = cdiv(n, vec)
    max_keys = MAX_KEYS if target.is_nvidia else MAX_KEYS_AMD
    # Rows a warp holds: in its registers, searched bit by bit. Longer rows up to what a block holds
    # (RADIX_KEYS a thread): in the block's registers, searched by digit histograms (radix). Longer
    # still: streamed (read twice, in parts).
    block_row = warp * max_keys < n <= target.max_threads * RADIX_KEYS
    if tiles.get("stream", 0) > 1:
        raise InvalidArgumentError(f"topk: stream={tiles['stream']}; give 0 (row in registers) or 1 (streamed)")
    if "radix" in tiles and tiles["radix"] and not 4 <= tiles["radix"] <= 11:
        raise InvalidArgumentError(f"topk: radix={tiles['radix']}; digit bits from 4 to 11, or 0 (no digit search)")
    radix = tiles.get("radix", RADIX_BITS if block_row and "stream" not in tiles else 0)
    stream = bool(tiles.get("stream", n > warp * max_keys and not radix))
    if radix and stream:
        raise InvalidArgumentError("topk: radix= searches a row held in registers; give stream=0 (or radix=0)")
    if radix:
        if target.is_nvidia:
            keys, least, most = RADIX_KEYS_NV[itemsize], RADIX_THREADS_NV[0] * (4 // itemsize) ** 2, RADIX_THREADS_NV[1]
        else:
            keys, least, most = RADIX_KEYS, 64, target.max_threads
        threads = tiles.get("threads", min(most, max(least, pow2_at_least(cdiv(n, keys)))))
        row_threads = tiles.get("row_threads", threads)
        chunks = tiles.get("chunks", cdiv(pieces, threads))
        if row_threads != threads:
            raise InvalidArgumentError(f"topk: row_threads={row_threads}; radix rows take the whole block "
                                       f"(row_threads = threads = {threads})")
        if threads * vec * chunks < n:
            raise InvalidArgumentError(f"topk: threads*vec*chunks = {threads * vec * chunks} < n={n}: a row held "
                                       "in registers must fit (or pass stream=1)")
    elif stream:
        threads = tiles.get("threads", STREAM_THREADS["nvidia" if target.is_nvidia else "amd"])
        row_threads = tiles.get("row_threads", threads)
        chunks = tiles.get("chunks", STREAM_CHUNKS)
        if row_threads != threads:
            raise InvalidArgumentError(f"topk: row_threads={row_threads}; streamed rows take the whole block "
                                       f"(row_threads = threads = {threads})")
    else:
        default_rt = max(min(warp, pow2_at_least(pieces)), pow2_at_least(cdiv(n, max_keys)))
        row_threads = tiles.get("row_threads", default_rt)
        threads = tiles.get("threads", 256 if row_threads <= warp else row_threads)
        chunks = tiles.get("chunks", cdiv(pieces, row_threads))
        if row_threads <= warp and row_threads & (row_threads - 1):
            raise InvalidArgumentError(f"topk: row_threads={row_threads} must be a power of two when <= {warp}")
        if row_threads > warp and row_threads != threads:
            raise InvalidArgumentError(f"topk: row_threads={row_threads}; a power of two up to the {warp}-thread "
                                       f"warp/wave, or the whole block (threads={threads})")
        if row_threads * vec * chunks < n:
            raise InvalidArgumentError(f"topk: row_threads*vec*chunks = {row_threads * vec * chunks} < n={n}: "
                                       "a row held in registers must fit (or pass stream=1)")
    if threads % 64 or threads > target.max_threads or threads % row_threads:
        raise InvalidArgumentError(f"topk: threads={threads}; a multiple of 64 (whole AMD waves, whole NVIDIA "
                                   f"warps), at most {target.max_threads}, a multiple of row_threads={row_threads}")
    if vec * chunks > 2 * MAX_KEYS:
        raise InvalidArgumentError(f"topk: vec*chunks = {vec * chunks} keys per thread; at most {2 * MAX_KEYS} "
                                   "(registers)")
    cols = threads * vec * chunks if stream else row_threads * vec * chunks
    if not stream and (threads // row_threads) * (min(MAX_K, cols) * 8 + 4) > STATIC_SMEM:
        raise InvalidArgumentError(f"topk: threads={threads} with row_threads={row_threads}: the row groups' "
                                   f"survivor buffers exceed {STATIC_SMEM} bytes of static shared memory; "
                                   "use fewer threads or wider row groups")
    # radix rows: 64 registers a thread on NVIDIA (min_blocks caps them there; measured on an H100,
    # 16384 x 4096 fp32: 3 blocks an SM at 69 registers 64% of copy, 4 at 64 73%), and as many rows a
    # block as still leave a wave of blocks (16384 x 4096: 8 rows, 73% -> 80%)
    wave = max(1, 1024 // threads) * target.compute_units if radix else 0
    rows_per_block = tiles.get("rows_per_block", next((r for r in RADIX_ROWS_PER_BLOCK   # (CDNA: its loop spills
                                                       if radix and target.is_nvidia           # scalar registers)
                                                       and cdiv(p["rows"], r) >= wave), 1))
    min_blocks = tiles.get("min_blocks", max(1, 1024 // threads) if radix and target.is_nvidia else 1)
    filtered = tiles.get("filter", 1 if radix else 0)
    if filtered > 1:
        raise InvalidArgumentError(f"topk: filter={filtered}; give 0 or 1")
    if (rows_per_block > 1 or min_blocks > 1 or filtered) and not radix:
        raise InvalidArgumentError("topk: rows_per_block=, min_blocks= and filter= are for rows a block holds "
                                   "(radix= from 4 to 11)")
    if rows_per_block > 64 or min_blocks * threads > 2048:
        raise InvalidArgumentError(f"topk: rows_per_block={rows_per_block} (at most 64), min_blocks={min_blocks} "
                                   f"(at most {2048 // threads} blocks of {threads} threads)")
    # the next row's loads into registers where 64 hold them with the row's 16 keys (H100: 16384 x 4096
    # fp32 80% -> 82%, x 8192 87% -> 89%; with 32 keys they spill)
    prefetch = tiles.get("prefetch", int(target.is_nvidia and rows_per_block > 1 and vec * chunks <= 16))
    if prefetch > 1 or (prefetch and rows_per_block == 1):
        raise InvalidArgumentError(f"topk: prefetch={prefetch}; 0 (the next row into L2), or 1 (its loads into "
                                   "registers) with rows_per_block > 1")
    spread = tiles.get("spread", 0)
    if spread > 1 or (spread and not filtered):
        raise InvalidArgumentError(f"topk: spread={spread}; 0, or 1 (each candidate ranked by several lanes) with "
                                   "filter=1 (rows a block holds, filtered)")
    if radix and vec * chunks > max_keys:
        raise InvalidArgumentError(f"topk: vec*chunks = {vec * chunks} keys per thread with radix; at most "
                                   f"{max_keys} on {target.arch}")
    steps = cdiv(p["rows"], threads // row_threads * rows_per_block)
    if "split" in tiles and not stream:
        raise InvalidArgumentError("topk: split= is for streamed rows (stream=1)")
    parts = max(cdiv(SPLIT_BLOCKS, p["rows"]), cdiv(n * itemsize, PART_BYTES))
    split = tiles.get("split", max(1, min(MAX_SPLIT, parts, cdiv(n, cols))) if stream else 1)
    if split > MAX_SPLIT or split > cdiv(n, cols):
        raise InvalidArgumentError(f"topk: split={split}; at most {MAX_SPLIT} and at most the {cdiv(n, cols)} "
                                   f"column blocks of {cols} in a row")
    return Config(dtype=p["dtype"], vec=vec, threads=threads, row_threads=row_threads, chunks=chunks,
                  stream=stream, split=split, radix=radix, rows_per_block=rows_per_block,
                  min_blocks=min_blocks, filter=bool(filtered), prefetch=bool(prefetch), spread=bool(spread),
                  blocks=steps)


class TopkOp(Op):
    name = "topk"
    params = (
        Param("rows", "size", doc="rows (the product of x's leading dimensions)"),
        Param("n", "size", doc="the row (last dimension) length"),
        Param("dtype", "dtype", "bfloat16", DTYPES_IN, "x and the values"),
        Param("align", "choice", 16, (2, 4, 8, 16), "byte alignment of x and its row stride"),
    )
    shape_params = ("rows", "n")
    default_shape = {"rows": 128, "n": 128256}
    tile_keywords = TILES
    array_names = ("x", "values", "indices")
    output_names = ("values", "indices")

    # --- `hkjit bench topk` (hkjit/bench/memory_bound.py) ---------------------------------------
    def bench_cases(self, quick):
        shapes = ((1024, 256, 10), (128, 128256, 50)) if quick else \
            ((1024, 256, 10), (4096, 1024, 32), (128, 128256, 50), (16, 128256, 50), (16384, 4096, 32),
             (16384, 8192, 32))
        # float32: random fp32 rows have (almost surely) no ties, so indices compare exactly with torch's
        return [dict(rows=r, n=n, k=k, dtype="float32") for r, n, k in shapes]

    def bench_inputs(self, case, torch):
        x = torch.randn(case["rows"], case["n"], device="cuda", dtype=getattr(torch, case["dtype"]))
        return (x, case["k"]), {}

    def bench_peers(self, torch):
        def eager(x, k):
            return tuple(torch.topk(x, k))
        return {"torch eager": eager, "torch.compile": torch.compile(eager, dynamic=False)}

    def bench_bytes(self, case):
        return case["rows"] * (case["n"] * DTYPES[case["dtype"]].itemsize
                               + case["k"] * (DTYPES[case["dtype"]].itemsize + 8))

    def bench_tolerance(self, case):
        # Values must match exactly; of the indices, a few may differ where the row has equal
        # values: torch.topk on CUDA does not specify which of tied elements it returns (hkjit takes
        # the lower index; the GPU test checks that rule on rows made of ties). randn fp32 rows of
        # 1024-4096 values tie about once in 10^5 picks on an H100 run.
        return 1e-4

    def plan_for(self, target, p, tiles) -> Plan:
        if p["n"] > MAX_N:
            raise InvalidArgumentError(f"topk: n={p['n']}; at most {MAX_N}")
        if p["align"] < DTYPES[p["dtype"]].itemsize:
            raise InvalidArgumentError(f"topk: align={p['align']} is below the {p['dtype']} element size")
        cfg = configure(target, p, tiles)
        b = lambda v: "true" if v else "false"  # noqa: E731
        tail = (f", {b(cfg['prefetch'])}, true" if cfg["spread"] else ", true" if cfg["prefetch"] else "")
        radix = (f", {cfg['radix']}, {cfg['rows_per_block']}, {cfg['min_blocks']}, "
                 f"{b(cfg['filter'])}{tail}") if cfg["radix"] else ""
        #                                                   (the types without radix are as they were)
        kernel_type = (f"topk<{DTYPES[cfg['dtype']].cpp}, {cfg['vec']}, {cfg['threads']}, {cfg['row_threads']}, "
                       f"{cfg['chunks']}, {'true' if cfg['stream'] else 'false'}, {cfg['split']}{radix}>")
        params = {k: cfg[k] for k in ("dtype", "vec", "threads", "row_threads", "chunks", "stream", "split", "radix",
                                                  "rows_per_block", "min_blocks", "filter", "prefetch")
                  + (("spread",) if cfg["spread"] else ())}
        spec = spec_mod.Specialization("topk", target, SOURCE, kernel_type, "hkjit_topk",
                                       spec_mod.make_params(params), (("threads", cfg["threads"]),
                                                                      ("dynamic_smem", 0)))
        # split rows: a counter per row (zero between launches: the kept workspace) and each part's
        # survivors (written before they are read: per-call scratch)
        counters = 4 * p["rows"] if cfg["split"] > 1 else 0
        lists = p["rows"] * cfg["split"] * 2 * MAX_K * 4 if cfg["split"] > 1 else 0
        return Plan(spec, cfg, cfg["threads"], 0, (cfg["blocks"], cfg["split"], 1), Args, _fill,
                    counters, counters, lists)

    def bind(self, arrays, options, device) -> Binding:
        X, V, I = arrays["x"], arrays["values"], arrays["indices"]
        k = options.get("k")
        if X.ndim < 1 or 0 in X.shape:
            raise InvalidArgumentError(f"topk: x must have at least one element, got shape {X.shape}")
        dtype = X.dtype.name
        if dtype not in DTYPES_IN:
            raise DTypeError(f"topk: x has dtype {dtype}; it must be one of {', '.join(DTYPES_IN)}")
        n = X.shape[-1]
        if not isinstance(k, bool) and hasattr(k, "__index__"):
            k = operator.index(k)          # NumPy and other integer types, as Python's int
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= min(n, MAX_K):
            raise InvalidArgumentError(f"topk: k={k!r}; an int from 1 to min(n, {MAX_K}) = {min(n, MAX_K)} "
                                       f"(n = {n}, x's last dimension)")
        if n > MAX_N:
            raise InvalidArgumentError(f"topk: row length {n} (x's last dimension); at most {MAX_N}")
        rows, x_stride = rows_of("topk", "x", X)
        out_shape = X.shape[:-1] + (k,)
        strides = {}
        for name, arr, want in (("values", V, dtype), ("indices", I, "int64")):
            if arr is None:
                strides[name] = k
                continue
            if arr.shape != out_shape:
                raise InvalidArgumentError(f"topk: out_{name} has shape {arr.shape}; it must be {out_shape}")
            if arr.dtype.name != want:
                raise DTypeError(f"topk: out_{name} has dtype {arr.dtype.name}; it must be {want}")
            strides[name] = rows_of("topk", f"out_{name}", arr)[1]
        if device is None:
            return None
        request = dict(rows=rows, n=n, dtype=dtype, align=alignment(X.dtype.itemsize, rows, (X.ptr, x_stride)))

        def args(ptrs, scalars):
            return dict(x=ptrs["x"], values=ptrs["values"], indices=ptrs["indices"], workspace=ptrs["workspace"],
                        scratch=ptrs["scratch"], x_row_stride=x_stride,
                        values_row_stride=strides["values"], indices_row_stride=strides["indices"], rows=rows,
                        n=n, k=k)
        outputs = {}
        if V is None:
            outputs["values"] = (out_shape, X.dtype)
        if I is None:
            outputs["indices"] = (out_shape, DTYPES["int64"])
        return Binding(request, outputs, args, returns=("values", "indices"))


def _fill(*, x, values, indices, workspace, scratch, x_row_stride, values_row_stride, indices_row_stride, rows, n,
          k) -> Args:
    return Args(x, values, indices, workspace, scratch, x_row_stride, values_row_stride, indices_row_stride, rows, n,
                k)


TOPK = register(TopkOp())


def topk(x, k, *, out_values=None, out_indices=None, device=None, compiler=None, **tile_overrides):
    """The k largest elements of each row of x (its last dimension) and their indices: (values,
    indices), sorted descending, as torch.topk(x, k) (largest=True, sorted=True).

    x: (..., n) bf16 / fp16 / fp32, rows contiguous (a row stride is allowed), n up to 2**24; k an
    int from 1 to min(n, 128). values: (..., k) of x's dtype; indices: (..., k) int64 (as torch).
    Equal values go to the lower index first; NaN ranks above +inf (all NaNs equal) and -0.0 just
    below +0.0, as torch.topk on CUDA. out_values / out_indices: optional arrays to write.
    Tile overrides: vec, threads, row_threads, chunks, stream (0/1), split; for rows a block holds
    radix (digit bits, 4-11; 0: not this schedule), rows_per_block, min_blocks, filter (0/1),
    prefetch (0/1), spread (0/1: with filter=1, each candidate ranked by a group of lanes).
    """
    return launch.call(TOPK, (x, out_values, out_indices), (), (("k", k),), device, compiler, tile_overrides)
