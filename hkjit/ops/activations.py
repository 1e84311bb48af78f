"""hkjit.silu / gelu / gelu_tanh / relu / tanh and hkjit.silu_and_mul / gelu_and_mul: element-wise
activations and gated activations, fp32 math, one rounding to the input's dtype.

Kernel: kernel_sources/eltwise.cuh (the activation a template parameter; the functions in
include/hk/common/activations.hpp), one source for gfx942, gfx950 and sm_90a. Each public function
is its own registered op (its own name in manifests, `hkjit inspect`, `hkjit bench`).

Schedule (compile-time; every choice a keyword override):
    vec        16 bytes per access where pointers, row strides (and the gate half) allow
    flat       unary ops on contiguous arrays read one long row (rows = 1, cols = every element):
               no row ends inside the array, so every access but the last is a full vector
    per thread vector loads in flight, as ROWS x CHUNKS: sm_90a 2 (unary) or 2 of each half
               (gated); CDNA 4 (gated: 2 of each half)
    row group  the power of two of threads that covers a row (of cols) at that, up to the
               256-thread block; longer rows are cut into column blocks, one tile per block
    min_blocks (sm_90a) blocks an SM must hold at once, which caps registers: unary 6 blocks of
               256 threads (40 registers), gated gelu forms 4 (64 registers), gated silu no cap
    fast_erf   (gelu and gelu_and_mul with approximate="none", bf16/fp16 only) 1: a shorter erfc
               (6 coefficients instead of 10; relative error about 2.5e-5 in fp32, far below the
               output's rounding), four FFMA an element fewer. Default 0: not yet timed on a GPU
               (at the H200's copy rate gelu needs 91% of the issue slots: docs/notes/activations_softmax.md)
    exact      1 when a row is exactly the tile's columns (cols = row_threads * vec *
               chunks): no column tests and no division of the tile index; the same
               results to 1-2 ULPs (the compiler may contract the activation's
               multiply-adds differently). Default 1 (in 128-thread blocks) for sm_90a
               gated rows that fit a tile narrower than a warp, else 0
Run-time: rows, cols, row strides. A grid of one block per tile (at most 2**20 blocks; the
kernel strides over the rest).

Why (H100 sweep, docs/notes/activations_softmax.md): a memory-bound tile needs about 48-64 KiB
of loads in flight per SM. With 4 loads a thread, gelu took 120 registers (2 blocks per SM:
16 KiB of loads, 88% of copy); 2 loads a thread at 40 registers keep 6 blocks (48 KiB) and reach
the copy's rate for every activation.
"""

import ctypes
import functools

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Config, Op, Param, Plan
from . import register
from ._rowwise import ROW_TILES, alignment, cdiv, check_group, check_ints, pow2_at_least, rows_of, vector_width

SOURCE = "eltwise.cuh"
DTYPES_IN = FLOAT_OUTPUTS
THREADS = 256
SHORT_EXACT_THREADS = 128                # sm_90a gated rows of one short tile (below)
LOADS_IN_FLIGHT = {"nvidia": 2, "amd": 4}    # unary: vector loads per thread and tile
GATED_LOADS = 2                     # gated: vector loads of each half per thread and tile
# sm_90a: threads an SM must hold at once (min_blocks = this // threads): the register cap. The
# gelu forms are the costly activations (120 registers at 4 loads a thread without a cap).
SM_THREADS_UNARY = 1536
SM_THREADS_GATED = {"gelu": 1024, "gelu_tanh": 1024}
MAX_ELEMS = 64                      # elements per thread and half in registers (override bound)
MAX_GRID = 1 << 20
TILES = ROW_TILES + ("min_blocks", "exact")
MAX_SM_THREADS = 2048               # threads an SM holds (sm_90a): min_blocks * threads at most this
FAST_ERF = {"gelu": "gelu_short"}   # fast_erf=1: the activation with the shorter erfc (16-bit outputs)


class Args(ctypes.Structure):
    """Mirror of eltwise<...>::args."""
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("x_row_stride", ctypes.c_longlong),
                ("y_row_stride", ctypes.c_longlong), ("rows", ctypes.c_int), ("cols", ctypes.c_int)]


def is_flat(p, gated) -> bool:
    """Whether the call reads its arrays as one long row (contiguous unary, int-sized)."""
    return not gated and not p["strided"] and p["rows"] * p["cols"] < 2 ** 31


def configure(name, target, p, tiles, gated, act) -> Config:
    check_ints(name, tiles, TILES)
    itemsize = DTYPES[p["dtype"]].itemsize
    vec = vector_width(name, tiles, p["dtype"], itemsize, p["align"])
    rows, cols = (1, p["rows"] * p["cols"]) if is_flat(p, gated) else (p["rows"], p["cols"])
    pieces = cdiv(cols, vec)
    vendor = "nvidia" if target.is_nvidia else "amd"
    per_thread = GATED_LOADS if gated else LOADS_IN_FLIGHT[vendor]
    row_threads = tiles.get("row_threads", min(THREADS, pow2_at_least(cdiv(pieces, per_thread))))
    chunks = tiles.get("chunks", min(per_thread, cdiv(pieces, row_threads)))
    group_rows = tiles.get("group_rows", max(1, per_thread // chunks))
    fits = cols == row_threads * vec * chunks          # rows of exactly the tile's columns
    # sm_90a, short gated rows that fit the tile: the exact path (no tail code, no run-time division) in
    # 128-thread blocks, measured on H100 at x 4096x256 6.9 -> 6.1-6.9 us, 16384x256 10.2 -> 9.3-9.4 us
    # (tools/rowwise_sweep.py SWEEP_SET=short, docs/notes/activations_softmax.md)
    short_exact = gated and target.is_nvidia and fits and row_threads < target.wave_size
    threads = tiles.get("threads", SHORT_EXACT_THREADS if short_exact else max(THREADS, row_threads))
    if row_threads & (row_threads - 1):
        raise InvalidArgumentError(f"{name}: row_threads={row_threads} must be a power of two")
    check_group(name, target, threads, row_threads)
    if vec * chunks * group_rows > MAX_ELEMS:
        raise InvalidArgumentError(f"{name}: vec*chunks*group_rows = {vec * chunks * group_rows} elements per thread; "
                                   f"at most {MAX_ELEMS} (registers)")
    rows_per_block = threads // row_threads * group_rows
    tiles_n = cdiv(rows, rows_per_block) * cdiv(cols, row_threads * vec * chunks)
    if tiles_n >= 2 ** 31:
        raise InvalidArgumentError(f"{name}: {tiles_n} tiles of {rows_per_block} rows x {row_threads * vec * chunks} "
                                   "columns; at most 2**31 - 1: give larger tiles (chunks=, group_rows=)")
    blocks = tiles.get("blocks", min(tiles_n, MAX_GRID))
    sm_threads = (SM_THREADS_GATED.get(act, 0) if gated else SM_THREADS_UNARY) if target.is_nvidia else 0
    min_blocks = tiles.get("min_blocks", max(1, sm_threads // threads))
    if min_blocks * threads > MAX_SM_THREADS:
        raise InvalidArgumentError(f"{name}: min_blocks={min_blocks} blocks of {threads} threads; at most "
                                   f"{MAX_SM_THREADS} threads fit on an SM")
    exact = tiles.get("exact", int(short_exact))
    if exact and not fits:   # (cols: all elements when read as one long row)
        raise InvalidArgumentError(f"{name}: exact=1 needs rows of exactly the tile's columns (row_threads * vec * "
                                   f"chunks = {row_threads * vec * chunks}, the row: {cols}); pass exact=0")
    return Config(dtype=p["dtype"], vec=vec, threads=threads, row_threads=row_threads, group_rows=group_rows,
                  chunks=chunks, blocks=blocks, min_blocks=min_blocks, flat=rows == 1 and p["rows"] > 1, exact=exact)


class ActivationOp(Op):
    """One activation (unary or gated). `acts`: the C++ activation type per `approximate` option."""
    shape_params = ("rows", "cols")
    default_shape = {"rows": 16384, "cols": 4096}
    tile_keywords = TILES + ("fast_erf",)
    array_names = ("x", "out")
    output_names = ("out",)

    def __init__(self, name, acts, gated, eager, doc):
        self.name, self.acts, self.gated, self.eager = name, acts, gated, eager
        params = [
            Param("rows", "size", doc="rows (the product of x's leading dimensions)"),
            Param("cols", "size", doc="the output's last dimension (x's is twice that when gated)"),
            Param("dtype", "dtype", "bfloat16", DTYPES_IN, "x and the output"),
            Param("align", "choice", 16, (2, 4, 8, 16), "byte alignment of the pointers and row strides"),
        ]
        if not gated:   # contiguous unary calls read one long row (see is_flat)
            params.append(Param("strided", "bool", False, doc="rows of x or out are not back to back"))
        if len(acts) > 1:
            params.append(Param("approximate", "choice", "none", tuple(acts), "the activation's form"))
        self.params = tuple(params)
        self.__doc__ = doc

    def plan_for(self, target, p, tiles) -> Plan:
        if p["align"] < DTYPES[p["dtype"]].itemsize:
            raise InvalidArgumentError(f"{self.name}: align={p['align']} is below the {p['dtype']} element size")
        base = self.acts[p.get("approximate", "none")]
        tiles = dict(tiles)
        act = FAST_ERF[base] if self._fast_erf(tiles.pop("fast_erf", 0), base, p["dtype"]) else base
        cfg = configure(self.name, target, p, tiles, self.gated, base)     # (the schedule: the activation's own)
        kernel_type = (f"eltwise<{DTYPES[cfg['dtype']].cpp}, hk::act::{act}, {str(self.gated).lower()}, {cfg['vec']}, "
                       f"{cfg['threads']}, {cfg['row_threads']}, {cfg['group_rows']}, {cfg['chunks']}, "
                       f"{cfg['min_blocks']}{', true' if cfg['exact'] else ''}>")
        params = {k: cfg[k] for k in ("dtype", "vec", "threads", "row_threads", "group_rows", "chunks", "min_blocks")}
        if cfg["exact"]:     # (left out when 0: the keys of the general path stay as they were)
            params["exact"] = 1
        spec = spec_mod.Specialization(self.name, target, SOURCE, kernel_type, "hkjit_eltwise",
                                       spec_mod.make_params({**params, "act": act, "gated": self.gated}),
                                       (("threads", cfg["threads"]), ("dynamic_smem", 0)))
        return Plan(spec, cfg, cfg["threads"], 0, (cfg["blocks"], 1, 1), Args, functools.partial(_fill, cfg))

    def _fast_erf(self, value, act, dtype) -> bool:
        """The `fast_erf` override, checked: 0 or 1, and 1 only where an erf is computed for a 16-bit output."""
        if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
            raise InvalidArgumentError(f"{self.name}: fast_erf={value!r}; 0 or 1")
        if value and act not in FAST_ERF:
            raise InvalidArgumentError(f"{self.name}: fast_erf=1 shortens erf, which only gelu with approximate='none' "
                                       "computes; pass fast_erf=0")
        if value and DTYPES[dtype].itemsize != 2:
            raise InvalidArgumentError(f"{self.name}: fast_erf=1 with {dtype}: its error (about 2.5e-5 relative) is "
                                       "below a 16-bit output's rounding, not a float32 one's; pass fast_erf=0")
        return bool(value)

    def bind(self, arrays, options, device) -> Binding:
        X, O = arrays["x"], arrays["out"]
        name = self.name
        if X.ndim < 1 or 0 in X.shape:
            raise InvalidArgumentError(f"{name}: x must have at least one element, got shape {X.shape}")
        dtype = X.dtype.name
        if dtype not in DTYPES_IN:
            raise DTypeError(f"{name}: x has dtype {dtype}; it must be one of {', '.join(DTYPES_IN)}")
        approximate = options.get("approximate", "none")
        if approximate not in self.acts:
            raise InvalidArgumentError(f"{name}: approximate={approximate!r}; valid: "
                                       + ", ".join(repr(a) for a in self.acts))
        cols = X.shape[-1]
        if self.gated:
            if cols % 2:
                raise InvalidArgumentError(f"{name}: x's last dimension ({cols}) must be even: [x | gate] halves")
            cols //= 2
        out_shape = X.shape[:-1] + (cols,)
        rows, x_stride = rows_of(name, "x", X)
        y_stride = cols if rows > 1 else x_stride
        if O is not None:
            if O.shape != out_shape:
                raise InvalidArgumentError(f"{name}: out has shape {O.shape}; it must be {out_shape}")
            if O.dtype.name != dtype:
                raise DTypeError(f"{name}: out has dtype {O.dtype.name}; it must be x's, {dtype}")
            y_stride = rows_of(name, "out", O)[1]
        if device is None:
            return None
        itemsize = X.dtype.itemsize
        gate = (X.ptr + cols * itemsize, x_stride) if self.gated else (0, 0)
        align = alignment(itemsize, rows, (X.ptr, x_stride), (O.ptr if O is not None else 0, y_stride), gate)
        request = dict(rows=rows, cols=cols, dtype=dtype, align=align)
        if not self.gated:
            request["strided"] = rows > 1 and (x_stride != cols or y_stride != cols)
        if len(self.acts) > 1:
            request["approximate"] = approximate
        flat = is_flat(request, self.gated)

        def args(ptrs, scalars):
            if flat:
                return dict(x=ptrs["x"], y=ptrs["out"], x_row_stride=rows * cols, y_row_stride=rows * cols,
                            rows=1, cols=rows * cols)
            return dict(x=ptrs["x"], y=ptrs["out"], x_row_stride=x_stride, y_row_stride=y_stride, rows=rows,
                        cols=cols)
        outputs = {} if O is not None else {"out": (out_shape, X.dtype)}
        return Binding(request, outputs, args)

    # --- `hkjit bench <name>` (hkjit/bench/memory_bound.py) -----------------------------------
    def bench_cases(self, quick):
        if self.gated:   # x's shape (rows, 2 d): the kernel set's silu_and_mul shapes, LLM MLPs (d = 4096, 8192)
            kernel_set = [(4096, 256), (16384, 256), (65536, 256), (131072, 256)] if self.name == "silu_and_mul" else []
            shapes = [(4096, 16384), (16384, 8192)] if quick else [
                *kernel_set, (4096, 16384), (16384, 8192), (16384, 16384)]
        else:
            shapes = [(16384, 4096)] if quick else [(16384, 4096), (16384, 8192)]
        width = "x_cols" if self.gated else "cols"      # gated: x's last dimension, 2 d
        return [{"rows": r, width: c, "dtype": "bfloat16"} for r, c in shapes]

    def bench_inputs(self, case, torch):
        x = torch.randn(case["rows"], case.get("x_cols") or case["cols"], device="cuda",
                        dtype=getattr(torch, case["dtype"])) * 2
        return (x,), {}

    def bench_peers(self, torch):
        fn = self.eager(torch)
        if self.gated:
            def written_out(x):   # what a model writes: split, activation, multiply
                d = x.shape[-1] // 2
                return fn(x[..., :d]) * x[..., d:]
        else:
            written_out = fn
        return {"torch eager": written_out, "torch.compile": torch.compile(written_out, dynamic=False)}

    def bench_bytes(self, case):
        n = case["rows"] * (case.get("x_cols") or case["cols"]) * DTYPES[case["dtype"]].itemsize
        return n * 3 // 2 if self.gated else 2 * n           # gated: x read, half of it written

    def bench_tolerance(self, case):
        return {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]


def _fill(cfg, *, x, y, x_row_stride, y_row_stride, rows, cols, workspace=0) -> Args:
    return Args(x, y, x_row_stride, y_row_stride, rows, cols)


def _fn(name, **kw):
    """torch's function `name` (torch.relu, torch.nn.functional.silu, ...) bound to `kw`, looked up
    when a benchmark runs (torch is not imported otherwise)."""
    def get(torch):
        f = getattr(torch, name, None) or getattr(torch.nn.functional, name)
        return functools.partial(f, **kw) if kw else f
    return get


SILU = register(ActivationOp("silu", {"none": "silu"}, False, _fn("silu"), "x * sigmoid(x)"))
GELU = register(ActivationOp("gelu", {"none": "gelu"}, False, _fn("gelu"), "0.5 x (1 + erf(x / sqrt 2))"))
GELU_TANH = register(ActivationOp("gelu_tanh", {"none": "gelu_tanh"}, False, _fn("gelu", approximate="tanh"),
                                  "gelu, tanh form"))
RELU = register(ActivationOp("relu", {"none": "relu"}, False, _fn("relu"), "max(x, 0)"))
TANH = register(ActivationOp("tanh", {"none": "tanh"}, False, _fn("tanh"), "tanh(x)"))
SILU_AND_MUL = register(ActivationOp("silu_and_mul", {"none": "silu"}, True, _fn("silu"), "SwiGLU"))
GELU_AND_MUL = register(ActivationOp("gelu_and_mul", {"none": "gelu", "tanh": "gelu_tanh"}, True, _fn("gelu"),
                                     "GeGLU"))


def _unary(op, x, out, device, compiler, tiles):
    return launch.call(op, (x, out), (), (), device, compiler, tiles)


_ARGS = """
    x: any shape, bf16 / fp16 / fp32, elements contiguous within the last dimension (a row stride
    is allowed; other layouts of device arrays: pass x.contiguous()). fp32 math, one rounding to
    x's dtype. out: optional array of x's shape and dtype (x itself for in place). Tile
    overrides: vec, threads, row_threads, group_rows, chunks, blocks, min_blocks
    (sm_90a register cap: blocks an SM must hold), exact (1: rows of exactly the tile's columns)."""


def silu(x, *, out=None, device=None, compiler=None, **tile_overrides):
    return _unary(SILU, x, out, device, compiler, tile_overrides)


def gelu(x, *, out=None, device=None, compiler=None, **tile_overrides):
    return _unary(GELU, x, out, device, compiler, tile_overrides)


def gelu_tanh(x, *, out=None, device=None, compiler=None, **tile_overrides):
    return _unary(GELU_TANH, x, out, device, compiler, tile_overrides)


def relu(x, *, out=None, device=None, compiler=None, **tile_overrides):
    return _unary(RELU, x, out, device, compiler, tile_overrides)


def tanh(x, *, out=None, device=None, compiler=None, **tile_overrides):
    return _unary(TANH, x, out, device, compiler, tile_overrides)


silu.__doc__ = "SiLU (swish): x * sigmoid(x), element-wise." + _ARGS
gelu.__doc__ = "GELU, exact form (torch's approximate='none'): 0.5 x (1 + erf(x / sqrt 2)), element-wise." + _ARGS
gelu_tanh.__doc__ = ("GELU, tanh form (torch's approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."
                     + _ARGS)
relu.__doc__ = "ReLU: max(x, 0), element-wise; NaN stays NaN (as torch.relu)." + _ARGS
tanh.__doc__ = "tanh(x), element-wise." + _ARGS


def silu_and_mul(x, *, out=None, device=None, compiler=None, **tile_overrides):
    """SwiGLU: silu(x[..., :d]) * x[..., d:] for x of shape (..., 2 d); returns (..., d).

    The activation applies to the FIRST half of the last dimension and the second half is the
    multiplier, as vLLM's SiluAndMul and FlashInfer's silu_and_mul. x: bf16 / fp16 / fp32, rows
    contiguous (a row stride is allowed); fp32 math, one rounding. out: optional (..., d) array of
    x's dtype. Tile overrides: vec, threads, row_threads, group_rows, chunks, blocks, min_blocks,
    exact (1: rows of exactly the tile's columns, no column tests; the same results to 1-2 ULPs).
    """
    return launch.call(SILU_AND_MUL, (x, out), (), (), device, compiler, tile_overrides)


def gelu_and_mul(x, approximate="none", *, out=None, device=None, compiler=None, **tile_overrides):
    """GeGLU: gelu(x[..., :d], approximate) * x[..., d:] for x of shape (..., 2 d); returns (..., d).

    The activation applies to the FIRST half (vLLM's GeluAndMul, FlashInfer's gelu_and_mul /
    gelu_tanh_and_mul). approximate: "none" (erf form) or "tanh". Otherwise as silu_and_mul.
    """
    return launch.call(GELU_AND_MUL, (x, out), (), (("approximate", approximate),), device, compiler,
                       tile_overrides)
