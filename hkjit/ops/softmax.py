"""hkjit.softmax: softmax over the last dimension, with an optional scale, fp32 math.

Kernel: kernel_sources/softmax.cuh, one source for gfx942, gfx950 and sm_90a. The schedule follows
the row length as rms_norm's does (rows of the same length cost the same there):

    pieces = ceil(hidden / vec)            vec-element pieces of a row (16 bytes each at best)
    short rows (pieces <= 2 warps): a row group narrower than a warp, 2 pieces a thread,
      256-thread blocks (several rows per warp)
    longer rows: 4 pieces a thread, one row per warp or group of warps, the block as wide as the
      row group (at most 1024 threads)
    the row is held in fp32 registers, at most 64 elements a thread (32 on sm_90a at 1024
    threads, which get 64 registers): rows up to that are read once; longer rows (bf16 rows
    beyond 32768 on sm_90a) are read twice (online max and sum, then the output)

    exact: 1 when hidden is exactly the tile's columns (row_threads * vec * chunks): the one-pass
    path alone, no column tests; the same results. Default 1 for such short rows on sm_90a, else 0

Run-time: rows, hidden, row strides and scale * log2(e) (inputs are pre-scaled for exp2).
"""

import ctypes
import functools

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Config, Op, Param, Plan
from . import register
from ._rowwise import ROW_TILES, alignment, cdiv, check_group, check_ints, pow2_at_least, rows_of, vector_width

SOURCE = "softmax.cuh"
DTYPES_IN = FLOAT_OUTPUTS
MAX_HIDDEN = 65536
LOG2E = 1.4426950408889634
FLOAT32_MAX = 3.4028234663852886e38
TILES = ROW_TILES + ("exact",)


class Args(ctypes.Structure):
    """Mirror of softmax<...>::args."""
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("x_row_stride", ctypes.c_longlong),
                ("y_row_stride", ctypes.c_longlong), ("rows", ctypes.c_int), ("hidden", ctypes.c_int),
                ("scale_log2e", ctypes.c_float)]


def configure(target, p, tiles) -> Config:
    check_ints("softmax", tiles, TILES)
    itemsize = DTYPES[p["dtype"]].itemsize
    warp = target.wave_size
    vec = vector_width("softmax", tiles, p["dtype"], itemsize, p["align"])
    pieces = cdiv(p["hidden"], vec)
    short = pieces <= 2 * warp
    row_threads = tiles.get("row_threads", min(1024, pow2_at_least(cdiv(pieces, 2 if short else 4))))
    threads = tiles.get("threads", 256 if row_threads < warp else max(128, row_threads))
    check_group("softmax", target, threads, row_threads)
    max_elems = 32 if target.is_nvidia and threads > 512 else 64     # fp32 registers per thread for the row
    chunks = tiles.get("chunks", max(1, min(cdiv(pieces, row_threads), max_elems // vec)))
    group_rows = tiles.get("group_rows", 1)
    if vec * chunks * group_rows > 4 * 64:
        raise InvalidArgumentError(f"softmax: vec*chunks*group_rows = {vec * chunks * group_rows} elements per "
                                   "thread; at most 256 (registers)")
    rows_per_block = threads // row_threads * group_rows
    blocks = tiles.get("blocks", cdiv(p["rows"], rows_per_block))
    # sm_90a short rows (a row's pieces <= 2 a lane of a warp) of exactly the tile's columns: the exact
    # path (the two-pass code and per-element tail checks gone: 47 -> 32 registers), measured on H100 at
    # 4096x128 6.6 -> 5.6 us (tools/rowwise_sweep.py SWEEP_SET=short, docs/notes/activations_softmax.md)
    exact = tiles.get("exact", int(target.is_nvidia and short and p["hidden"] == row_threads * vec * chunks))
    if exact and p["hidden"] != row_threads * vec * chunks:
        raise InvalidArgumentError(f"softmax: exact=1 needs hidden ({p['hidden']}) equal to row_threads * vec * "
                                   f"chunks ({row_threads * vec * chunks}); pass exact=0")
    return Config(dtype=p["dtype"], vec=vec, threads=threads, row_threads=row_threads, group_rows=group_rows,
                  chunks=chunks, blocks=blocks, one_pass=p["hidden"] <= row_threads * vec * chunks, exact=exact)


class SoftmaxOp(Op):
    name = "softmax"
    params = (
        Param("rows", "size", doc="rows (the product of x's leading dimensions)"),
        Param("hidden", "size", doc="the softmax (last) dimension"),
        Param("dtype", "dtype", "bfloat16", DTYPES_IN, "x and the output"),
        Param("align", "choice", 16, (2, 4, 8, 16), "byte alignment of the pointers and row strides"),
    )
    shape_params = ("rows", "hidden")
    default_shape = {"rows": 16384, "hidden": 4096}
    tile_keywords = TILES
    array_names = ("x", "out")
    output_names = ("out",)
    scalar_names = ("scale",)

    def plan_for(self, target, p, tiles) -> Plan:
        if p["hidden"] > MAX_HIDDEN:
            raise InvalidArgumentError(f"softmax: hidden={p['hidden']}; at most {MAX_HIDDEN}")
        if p["align"] < DTYPES[p["dtype"]].itemsize:
            raise InvalidArgumentError(f"softmax: align={p['align']} is below the {p['dtype']} element size")
        cfg = configure(target, p, tiles)
        kernel_type = (f"softmax<{DTYPES[cfg['dtype']].cpp}, {cfg['vec']}, {cfg['threads']}, {cfg['row_threads']}, "
                       f"{cfg['group_rows']}, {cfg['chunks']}{', true' if cfg['exact'] else ''}>")
        params = {k: cfg[k] for k in ("dtype", "vec", "threads", "row_threads", "group_rows", "chunks")}
        if cfg["exact"]:     # (left out when 0: the keys of the general path stay as they were)
            params["exact"] = 1
        spec = spec_mod.Specialization("softmax", target, SOURCE, kernel_type, "hkjit_softmax",
                                       spec_mod.make_params(params), (("threads", cfg["threads"]),
                                                                      ("dynamic_smem", 0)))
        return Plan(spec, cfg, cfg["threads"], 0, (cfg["blocks"], 1, 1), Args, functools.partial(_fill, cfg))

    def bind(self, arrays, options, device) -> Binding:
        X, O = arrays["x"], arrays["out"]
        if X.ndim < 1 or 0 in X.shape:
            raise InvalidArgumentError(f"softmax: x must have at least one element, got shape {X.shape}")
        dtype = X.dtype.name
        if dtype not in DTYPES_IN:
            raise DTypeError(f"softmax: x has dtype {dtype}; it must be one of {', '.join(DTYPES_IN)}")
        hidden = X.shape[-1]
        rows, x_stride = rows_of("softmax", "x", X)
        y_stride = hidden
        if O is not None:
            if O.shape != X.shape:
                raise InvalidArgumentError(f"softmax: out has shape {O.shape}; it must be x's, {X.shape}")
            if O.dtype.name != dtype:
                raise DTypeError(f"softmax: out has dtype {O.dtype.name}; it must be x's, {dtype}")
            y_stride = rows_of("softmax", "out", O)[1]
        if hidden > MAX_HIDDEN:
            raise InvalidArgumentError(f"softmax: hidden size {hidden} (x's last dimension); at most {MAX_HIDDEN}")
        if device is None:
            return None
        align = alignment(X.dtype.itemsize, rows, (X.ptr, x_stride), (O.ptr if O is not None else 0, y_stride))
        request = dict(rows=rows, hidden=hidden, dtype=dtype, align=align)

        def args(ptrs, scalars):
            k = float(scalars[0]) * LOG2E
            if not abs(k) <= FLOAT32_MAX:
                raise InvalidArgumentError(f"softmax: scale={scalars[0]!r} overflows once multiplied by log2(e)")
            return dict(x=ptrs["x"], y=ptrs["out"], x_row_stride=x_stride, y_row_stride=y_stride, rows=rows,
                        hidden=hidden, scale_log2e=k)
        outputs = {} if O is not None else {"out": (X.shape, X.dtype)}
        return Binding(request, outputs, args)

    # --- `hkjit bench softmax` (hkjit/bench/memory_bound.py) -----------------------------------
    def bench_cases(self, quick):
        shapes = [(65536, 128), (16384, 4096)] if quick else [
            (128, 128), (4096, 128), (16384, 128), (65536, 128), (16384, 4096), (16384, 8192)]
        return [dict(rows=r, hidden=h, dtype="bfloat16") for r, h in shapes]

    def bench_inputs(self, case, torch):
        x = torch.randn(case["rows"], case["hidden"], device="cuda", dtype=getattr(torch, case["dtype"])) * 3
        return (x,), {}

    def bench_peers(self, torch):
        def eager(x):
            return torch.softmax(x, dim=-1)

        def written_out(x):   # what a model writes for fp32 math; torch.compile fuses it into one kernel
            return torch.softmax(x.float(), dim=-1).to(x.dtype)
        return {"torch eager": eager, "torch.compile": torch.compile(written_out, dynamic=False)}

    def bench_bytes(self, case):
        return 2 * case["rows"] * case["hidden"] * DTYPES[case["dtype"]].itemsize

    def bench_tolerance(self, case):
        return {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]


def _fill(cfg, *, x, y, x_row_stride, y_row_stride, rows, hidden, scale_log2e, workspace=0) -> Args:
    return Args(x, y, x_row_stride, y_row_stride, rows, hidden, scale_log2e)


SOFTMAX = register(SoftmaxOp())


def softmax(x, *, scale=None, out=None, device=None, compiler=None, **tile_overrides):
    """softmax(scale * x) over the last dimension, computed in fp32 (exp2 of pre-scaled inputs).

    x: (..., hidden) bf16 / fp16 / fp32, hidden up to 65536, rows contiguous (a row stride is
    allowed). scale: a finite number (default 1). out: optional array of x's shape and dtype (x
    itself for in place). Numerically safe: a row of only -inf gives zeros (torch gives NaN
    there); a NaN or +inf in a row makes that row NaN, as torch. Tile overrides: vec, threads,
    row_threads, group_rows, chunks, blocks, exact (1: hidden is exactly row_threads * vec *
    chunks; no column tests, the same results).
    """
    return launch.call(SOFTMAX, (x, out), (1.0 if scale is None else scale,), (), device, compiler, tile_overrides)
