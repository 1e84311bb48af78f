"""hkjit.rms_norm: y = x * rsqrt(mean(x², last dim) + eps) * weight, fp32 math.

Kernel: kernel_sources/rms_norm.cuh, one source for gfx942, gfx950 and sm_90a. Compile-time: the
dtype, the vector width (from the arrays' alignment) and the schedule, which follows the row length:

    chunks = ceil(hidden / vec)              vec-element pieces of a row (16 bytes each at best)
    row_threads = chunks / CHUNKS_TARGET     threads sharing a row (a power of two), so each
                                             thread holds about 4 pieces: 64 bytes in flight
      < warp: several rows per warp (short rows: about 2 pieces a thread, 256-thread blocks)
      = warp .. 1024: one row per warp or per group of warps; the row stays in registers
                       (x read once) while chunks * vec <= 64 elements per thread
    threads = max(128, row_threads) (short rows: 128 on sm_90a, 256 on CDNA); grid = one block
    per row block (H100: a persistent grid of a few blocks per SM was 1-6% slower at every shape
    of the benchmark; `blocks=` still asks for one, the kernel strides over row blocks).
    min_blocks (tile keyword): blocks an sm_90a SM must hold at once, a register cap; 1 for
    rms_norm, 1024 / threads for the fused norms.
    exact (tile keyword): hidden is exactly the tile's columns; the kernel then tests rows only
    and keeps the weight in registers (default on sm_90a for short rows).

Run-time: the number of rows, the row length, the row strides, eps. Rows may be strided
(elements contiguous within a row; leading dimensions must collapse to one row stride).
"""

import ctypes
import functools

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Config, Op, Param, Plan
from . import register
from ._rowwise import alignment, cdiv, check_ints, pow2_at_least, rows_of

SOURCE = "rms_norm.cuh"
DTYPES_IN = FLOAT_OUTPUTS           # bf16, fp16, fp32: x, weight and y share one
TILES = ("vec", "threads", "row_threads", "group_rows", "chunks", "blocks", "min_blocks", "exact")
EXACT_MAX_ELEMS = 16                # row elements a thread may hold on the exact path by default
MAX_SM_THREADS = 2048               # threads an SM holds (sm_90a): min_blocks * threads at most this
MAX_HIDDEN = 65536
CHUNKS_TARGET = 4                   # vector pieces per thread and row: bytes in flight
MAX_ELEMS = 64                      # elements a thread keeps in registers per row (2-byte dtypes;
                                    # fp32 on NVIDIA: 32, as 1024-thread blocks get 64 registers)


class Args(ctypes.Structure):
    """Mirror of rms_norm<...>::args."""
    _fields_ = [("x", ctypes.c_void_p), ("weight", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("x_row_stride", ctypes.c_longlong), ("y_row_stride", ctypes.c_longlong),
                ("rows", ctypes.c_int), ("hidden", ctypes.c_int), ("eps", ctypes.c_float)]


def configure(target, p, tiles, op="rms_norm", max_elems=None, inputs=1, sm_threads=0, warp_row_elems=None) -> Config:
    """The schedule for `p` (validated params) on `target`, with validated overrides. Also the
    fused norms' (hkjit/ops/norms.py: `op` names them in errors; `max_elems` caps the row
    elements a thread keeps in registers: they keep fp32 rows and more per element; `inputs`, the
    arrays read per element (2 with a residual): on sm_90a the vector loads a thread has in
    flight count them all; `sm_threads`: on sm_90a the threads an SM must hold at once, which
    caps registers through min_blocks = sm_threads // threads; `warp_row_elems`: on sm_90a, the
    most row elements a thread of a row group no wider than a warp keeps by default, the group
    widening instead)."""
    check_ints(op, tiles, TILES)
    exact_override = tiles.get("exact")
    itemsize = DTYPES[p["dtype"]].itemsize
    warp = target.wave_size
    max_vec = max(1, min(16, p["align"]) // itemsize)
    vec = tiles.get("vec", max_vec)
    if vec not in (1, 2, 4, 8) or vec > max_vec:
        raise InvalidArgumentError(f"{op}: vec={vec}; valid: powers of two up to {max_vec} for {p['dtype']} "
                                   f"arrays aligned to {p['align']} bytes")
    chunks_needed = cdiv(p["hidden"], vec)
    # Short rows (a row group narrower than a warp) do best with 2 pieces a thread and 256-thread
    # blocks; longer rows with 4 pieces and a block as wide as the row group (H100 sweeps).
    short = chunks_needed <= 2 * warp
    per_thread = 2 if short else CHUNKS_TARGET
    if target.is_nvidia:                # loads in flight per thread, every input counted (H100 sweep)
        per_thread = max(1, per_thread // inputs)
    # Few short rows on sm_90a (fewer 128-thread row blocks than SMs: a launch-bound single wave):
    # one piece a thread in 64-thread blocks (H100 sweep at 128 rows of 128: 4.5-4.9 µs against
    # 4.7-5.3 for the 128-thread schedule; docs/notes/norms.md).
    few = target.is_nvidia and short and cdiv(p["rows"] * pow2_at_least(cdiv(chunks_needed, per_thread)),
                                                 128) < target.compute_units
    if few:
        per_thread = 1
    row_threads = tiles.get("row_threads", min(1024, pow2_at_least(cdiv(chunks_needed, per_thread))))
    if target.is_nvidia and warp_row_elems and not {"row_threads", "chunks"} & set(tiles):
        while row_threads <= warp and cdiv(chunks_needed, row_threads) * vec > warp_row_elems:
            row_threads *= 2
    if row_threads > warp and row_threads % warp:
        raise InvalidArgumentError(f"{op}: row_threads={row_threads}; a power of two up to {warp} or a "
                                   f"multiple of the {warp}-thread warp/wave")
    if row_threads <= warp and row_threads & (row_threads - 1):
        raise InvalidArgumentError(f"{op}: row_threads={row_threads} must be a power of two when <= {warp}")
    if max_elems is None:
        max_elems = MAX_ELEMS // 2 if itemsize == 4 and target.is_nvidia else MAX_ELEMS
    default_chunks = min(cdiv(chunks_needed, row_threads), max(1, max_elems // vec))
    if target.is_nvidia and inputs > 1:  # rows past 1024 threads: more column blocks, not more
        default_chunks = min(default_chunks, per_thread)   # registers (a residual row spilled at 4)
    chunks = tiles.get("chunks", default_chunks)
    rows = tiles.get("group_rows", 1)
    # Short rows: 128-thread blocks on sm_90a (H100 sweep: equal or faster than 256 at 4K-64K rows
    # of 128), 256 on CDNA.
    threads = tiles.get("threads", (64 if few else 128 if target.is_nvidia else 256) if row_threads < warp
                        else max(128, row_threads))
    if threads % 64 or threads > target.max_threads or threads % row_threads:
        raise InvalidArgumentError(f"{op}: threads={threads}; a multiple of 64 (whole AMD waves, whole "
                                   f"NVIDIA warps), at most {target.max_threads}, a multiple of "
                                   f"row_threads={row_threads}")
    if vec * chunks * rows > 4 * MAX_ELEMS:
        raise InvalidArgumentError(f"{op}: vec*chunks*group_rows = {vec * chunks * rows} elements per thread; at "
                                   f"most {4 * MAX_ELEMS} (registers)")
    rows_per_block = threads // row_threads * rows
    row_blocks = cdiv(p["rows"], rows_per_block)
    blocks = tiles.get("blocks", row_blocks)
    min_blocks = tiles.get("min_blocks", max(1, sm_threads // threads) if target.is_nvidia else 1)
    if min_blocks * threads > MAX_SM_THREADS:
        raise InvalidArgumentError(f"{op}: min_blocks={min_blocks} blocks of {threads} threads; at most "
                                   f"{MAX_SM_THREADS} threads fit on an SM")
    # exact: the row is exactly the tile's columns, so the kernel tests rows only and keeps the
    # weight in registers across rows (kernel_sources/rms_norm.cuh, EXACT). Default on sm_90a for
    # rows shorter than a warp's worth of pieces, where the per-row instructions, not the bytes,
    # set the time (H100: docs/notes/rms_norm.md); CDNA keeps the general path (not measured).
    # Not past 16 elements a thread: the weight (and bias) it keeps as fp32 doubles (triples) what
    # a thread holds, and LayerNorm at 1024 columns (32 a thread) spilled 980 bytes under its
    # register cap; rms_norm 4096 x 1024 also measured faster on the general path (H100, 10.5 against
    # 10.9 µs; docs/notes/rms_norm.md).
    fits = p["hidden"] == row_threads * vec * chunks
    exact = (int(fits and target.is_nvidia and row_threads <= warp and vec * chunks <= EXACT_MAX_ELEMS)
             if exact_override is None else exact_override)
    if exact and not fits:
        raise InvalidArgumentError(f"{op}: exact={exact}; 0, or 1 when hidden ({p['hidden']}) equals "
                                   f"row_threads * vec * chunks ({row_threads * vec * chunks})")
    return Config(dtype=p["dtype"], vec=vec, threads=threads, row_threads=row_threads, group_rows=rows,
                  chunks=chunks, blocks=blocks, rows_per_block=rows_per_block, min_blocks=min_blocks,
                  exact=exact)


class RmsNormOp(Op):
    name = "rms_norm"
    params = (
        Param("rows", "size", doc="rows (the product of x's leading dimensions)"),
        Param("hidden", "size", doc="the normalised (last) dimension"),
        Param("dtype", "dtype", "bfloat16", DTYPES_IN, "x, weight and the output"),
        Param("align", "choice", 16, (2, 4, 8, 16), "byte alignment of the pointers and row strides"),
    )
    shape_params = ("rows", "hidden")
    default_shape = {"rows": 16384, "hidden": 4096}
    tile_keywords = TILES + ("weight_regs",)
    array_names = ("x", "weight", "out")
    output_names = ("out",)
    scalar_names = ("eps",)

    # --- `hkjit bench rms_norm` (hkjit/bench/memory_bound.py) ---------------------------------
    def bench_cases(self, quick):
        rows, hidden = ((16384, 65536), (128, 4096)) if quick else ((4096, 16384, 65536), (128, 1024, 4096, 8192))
        return [dict(rows=r, hidden=h, dtype="bfloat16") for r in rows for h in hidden]

    def bench_inputs(self, case, torch):
        dt = getattr(torch, case["dtype"])
        x = torch.randn(case["rows"], case["hidden"], device="cuda", dtype=dt)
        w = torch.rand(case["hidden"], device="cuda", dtype=dt) + 0.5
        return (x, w), {"eps": 1e-6}

    def bench_peers(self, torch):
        def eager(x, w, eps):
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)

        def written_out(x, w, eps):   # what a model writes; torch.compile fuses it into one kernel
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
        return {"torch eager": eager, "torch.compile": torch.compile(written_out, dynamic=False)}

    def bench_bytes(self, case):
        return (2 * case["rows"] + 1) * case["hidden"] * DTYPES[case["dtype"]].itemsize

    def bench_tolerance(self, case):
        return {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]

    def plan_for(self, target, p, tiles) -> Plan:
        tiles = dict(tiles)
        weight_regs = tiles.pop("weight_regs", 1)
        if not isinstance(weight_regs, int) or isinstance(weight_regs, bool) or weight_regs not in (0, 1):
            raise InvalidArgumentError(f"rms_norm: weight_regs={weight_regs!r}; 0 or 1")
        if p["hidden"] > MAX_HIDDEN:
            raise InvalidArgumentError(f"rms_norm: hidden={p['hidden']}; at most {MAX_HIDDEN}")
        if p["align"] < DTYPES[p["dtype"]].itemsize:
            raise InvalidArgumentError(f"rms_norm: align={p['align']} is below the {p['dtype']} element size")
        cfg = configure(target, p, tiles)
        if not weight_regs and not cfg["exact"]:
            raise InvalidArgumentError("rms_norm: weight_regs=0 is a choice of the exact path (rows of exactly the "
                                       "tile's columns, exact=1); the general path always reads the weight per row")
        cfg["weight_regs"] = weight_regs
        ttype = DTYPES[cfg["dtype"]].cpp
        kernel_type = (f"rms_norm<{ttype}, {cfg['vec']}, {cfg['threads']}, {cfg['row_threads']}, "
                       f"{cfg['group_rows']}, {cfg['chunks']}, {cfg['min_blocks']}, {str(bool(cfg['exact'])).lower()}"
                       # weight_regs=1 named by omission: the existing kernels' types stay as they were
                       + (">" if weight_regs else ", false>"))
        params = {k: cfg[k] for k in ("dtype", "vec", "threads", "row_threads", "group_rows", "chunks", "min_blocks",
                                      "exact") + (() if weight_regs else ("weight_regs",))}
        spec = spec_mod.Specialization("rms_norm", target, SOURCE, kernel_type, "hkjit_rms_norm",
                                       spec_mod.make_params(params), (("threads", cfg["threads"]),
                                                                      ("dynamic_smem", 0)))
        return Plan(spec, cfg, cfg["threads"], 0, (cfg["blocks"], 1, 1), Args, functools.partial(_fill, cfg))

    def bind(self, arrays, options, device) -> Binding:
        X, W, O = arrays["x"], arrays["weight"], arrays["out"]
        if X.ndim < 1 or 0 in X.shape:
            raise InvalidArgumentError(f"rms_norm: x must have at least one element, got shape {X.shape}")
        dtype = X.dtype.name
        if dtype not in DTYPES_IN:
            raise DTypeError(f"rms_norm: x has dtype {dtype}; it must be one of {', '.join(DTYPES_IN)}")
        hidden = X.shape[-1]
        rows, x_stride = rows_of("rms_norm", "x", X)
        if W.shape != (hidden,) or (hidden > 1 and W.strides[0] != 1):
            raise InvalidArgumentError(f"rms_norm: weight must be a contiguous ({hidden},) vector, got shape "
                                       f"{W.shape} strides {W.strides}")
        if W.dtype.name != dtype:
            raise DTypeError(f"rms_norm: weight has dtype {W.dtype.name} but x has {dtype}; convert one")
        if O is not None:
            if O.shape != X.shape:
                raise InvalidArgumentError(f"rms_norm: out has shape {O.shape}; it must be x's, {X.shape}")
            if O.dtype.name != dtype:
                raise DTypeError(f"rms_norm: out has dtype {O.dtype.name}; it must be x's, {dtype}")
            y_stride = rows_of("rms_norm", "out", O)[1]
        else:
            y_stride = hidden
        if hidden > MAX_HIDDEN:
            raise InvalidArgumentError(f"rms_norm: hidden size {hidden} (x's last dimension); at most {MAX_HIDDEN}")
        if device is None:
            return None
        align = alignment(X.dtype.itemsize, rows, (X.ptr, x_stride), (O.ptr if O is not None else 0, y_stride),
                          (W.ptr, 0))
        request = dict(rows=rows, hidden=hidden, dtype=dtype, align=align)

        def args(ptrs, scalars):
            eps = float(scalars[0])
            if eps < 0:
                raise InvalidArgumentError(f"rms_norm: eps={eps}; it must be >= 0")
            return dict(x=ptrs["x"], weight=ptrs["weight"], y=ptrs["out"], x_row_stride=x_stride,
                        y_row_stride=y_stride, rows=rows, hidden=hidden, eps=eps)
        outputs = {} if O is not None else {"out": (X.shape, X.dtype)}
        return Binding(request, outputs, args)


def _fill(cfg, *, x, weight, y, x_row_stride, y_row_stride, rows, hidden, eps, workspace=0) -> Args:
    return Args(x, weight, y, x_row_stride, y_row_stride, rows, hidden, eps)


RMS_NORM = register(RmsNormOp())


def rms_norm(x, weight, eps=1e-6, *, out=None, device=None, compiler=None, **tile_overrides):
    """RMSNorm over the last dimension: x * rsqrt(mean(x², -1) + eps) * weight, computed in fp32.

    x: (..., hidden) bf16 / fp16 / fp32, rows contiguous (a row stride is allowed); weight:
    (hidden,) of x's dtype; hidden up to 65536. out: optional array of x's shape and dtype (may be
    x itself). Tile overrides: vec, threads, row_threads, group_rows, chunks, blocks, min_blocks,
    exact (1: hidden == row_threads * vec * chunks, rows tested only, weight kept in registers),
    weight_regs (with exact=1; 0: the weight read per row instead of held in registers).
    """
    return launch.call(RMS_NORM, (x, weight, out), (eps,), (), device, compiler, tile_overrides)
