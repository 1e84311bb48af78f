"""hkjit.causal_conv1d and hkjit.causal_conv1d_update: the depthwise causal convolution of Mamba
blocks (the contract of Dao-AILab's causal-conv1d package: causal_conv1d_fn without initial states
or sequence indices, and causal_conv1d_update without a circular buffer).

Kernel: kernel_sources/causal_conv1d.cuh (both ops), one source for gfx942, gfx950 and sm_90a.
Compile-time: the dtypes of x and of weight/bias, the width W, the activation, the layout, and the
schedule (every choice a keyword override; docs/notes/causal_conv1d.md has the measurements):

    L-major x    (x.stride(2) == 1) a row group of row_threads lanes (4 up to a warp) walks a row,
                 chunks 16-byte vectors a lane and step; the W - 1 halo of a chunk comes from the
                 lane before by rotation, and from the step before through registers (carry).
                 Large problems: CHUNKS_MAX chunks a lane; small ones fewer, so more threads share
                 the work. stages=2 loads the next step while computing this one (not faster on
                 an H200 at these register counts: 1 by default).
    channel-last x   (x.stride(1) == 1: a (B, L, D) tensor viewed as (B, D, L), Mamba's layout)
                 row_threads threads cover row_threads * vec channels (4 bytes each: per-channel
                 taps and halo stay few registers) and walk the time steps, chunks at a time, the
                 next chunks' loads issued before this step's math; min_blocks caps registers.
                 direct=1 (the default on NVIDIA, measured faster on an H100) reads and writes whole
                 steps through a pointer walked by the time stride, without the tile path's
                 per-access checks.
    segments     rows (channel blocks) too few to fill the device are cut into segments along L;
                 a segment re-reads only the W - 1 elements before it.
Run-time: shapes and strides, the segment length, the bias pointer (null: none).
The update: one thread per (batch, channel), any strides; the state moves bit for bit.
"""

import ctypes
import functools

from .. import interop, launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Config, Op, Param, Plan
from . import register
from ._rowwise import alignment, cdiv, check_ints, pow2_at_least

SOURCE = "causal_conv1d.cuh"
DTYPES_IN = FLOAT_OUTPUTS
WIDTHS = (2, 3, 4)
ACTIVATIONS = {None: "none", "silu": "silu", "swish": "silu"}
LAYOUTS = ("bdl", "bld")          # x's memory order: L contiguous, or channels contiguous (B, L, D)
TILES = ("vec", "threads", "row_threads", "chunks", "seg_len", "stages", "min_blocks", "blocks", "direct")
# Schedule per target and layout (NVIDIA: from an H200 sweep, tools/causal_conv1d_sweep.py and
# docs/notes/causal_conv1d.md; CDNA: not measured on hardware, the same shape of schedule with
# 256-thread blocks). L-major: a thread's registers hold its chunks twice over (the step computed
# and the one loading), so few chunks and small blocks keep more threads resident.
THREADS = {"bdl": {"nvidia": 128, "amd": 256}, "bld": {"nvidia": 256, "amd": 256}}
CHUNKS_MAX = {"nvidia": 2, "amd": 4}          # L-major: vector loads a lane and step
STAGES = {"bdl": 1, "bld": 2}                 # 2: the next step's loads issued before this step's math
CL_VEC_BYTES = 4                              # channel-last: bytes of channels a thread holds
CL_CHUNKS = 8                                 # channel-last: time steps a step (loads in flight)
CL_MIN_BLOCKS = {"nvidia": 4, "amd": 1}       # channel-last: 64 registers at 256 threads (NVIDIA)
# channel-last: 1 walks a pointer for whole steps (no per-access checks). NVIDIA: measured on an H100
# 8x4096x2048 2340 -> 2450 GB/s, 4x8192x4096 2531 -> 2610 (docs/notes/causal_conv1d.md); CDNA: it
# doubles the VGPRs (static), so 0 there.
CL_DIRECT = {"nvidia": 1, "amd": 0}
# Threads that keep the device's memory busy (H100/H200: 132 SMs x ~1000; MI300X: 304 CUs x ~430):
# fewer rows than that are cut into segments, small problems get fewer chunks per lane.
TARGET_THREADS = 1 << 17
MIN_SEG_STEPS = 16                # channel-last segments: at least this many steps
MAX_GRID = 1 << 20
UPDATE_THREADS = 256


class Args(ctypes.Structure):
    """Mirror of causal_conv1d<...>::args."""
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("weight", ctypes.c_void_p),
                ("bias", ctypes.c_void_p)] + [
        (n, ctypes.c_longlong) for n in ("xs0", "xs1", "xs2", "ys0", "ys1", "ys2", "ws0", "ws1", "bs")] + [
        (n, ctypes.c_int) for n in ("batch", "dim", "len", "seg_len", "segs")]


class UpdateArgs(ctypes.Structure):
    """Mirror of causal_conv1d_update<...>::args."""
    _fields_ = [(n, ctypes.c_void_p) for n in ("x", "y", "state", "weight", "bias")] + [
        (n, ctypes.c_longlong) for n in ("xs0", "xs1", "ys0", "ys1", "ss0", "ss1", "ss2", "ws0", "ws1", "bs")] + [
        (n, ctypes.c_int) for n in ("batch", "dim", "state_len")]


def _common_params():
    return (Param("width", "choice", 4, WIDTHS, "the kernel width W (weight.shape[1])"),
            Param("dtype", "dtype", "bfloat16", DTYPES_IN, "x, the output (and the state)"),
            Param("weight_dtype", "dtype", None, DTYPES_IN, "weight and bias: x's dtype (default) or float32"),
            Param("activation", "choice", "none", ("none", "silu"), "applied after the bias"))


def _weight_cpp(name, p):
    wdt = p["weight_dtype"] or p["dtype"]
    if wdt not in (p["dtype"], "float32"):
        raise DTypeError(f"{name}: weight_dtype={wdt}; weight and bias are x's dtype ({p['dtype']}) or float32")
    return DTYPES[wdt].cpp


def configure(name, target, p, tiles) -> Config:
    """The schedule of a forward call of shape (batch, dim, len)."""
    check_ints(name, tiles, TILES)
    itemsize = DTYPES[p["dtype"]].itemsize
    vendor = "nvidia" if target.is_nvidia else "amd"
    layout = p["layout"]
    widest = max(1, min(16, p["align"]) // itemsize)
    vec = tiles.get("vec", widest if layout == "bdl" else min(widest, max(1, CL_VEC_BYTES // itemsize)))
    if vec not in (1, 2, 4, 8) or vec > widest:
        raise InvalidArgumentError(f"{name}: vec={vec}; valid: powers of two up to {widest} for {p['dtype']} arrays "
                                   f"aligned to {p['align']} bytes")
    threads = tiles.get("threads", THREADS[layout][vendor])
    if threads % 64 or threads > min(1024, target.max_threads):
        raise InvalidArgumentError(f"{name}: threads={threads}; a multiple of 64 (whole AMD waves, whole NVIDIA "
                                   f"warps), at most {min(1024, target.max_threads)}")
    batch, dim, length = p["batch"], p["dim"], p["len"]
    if layout == "bdl":
        rows, warp = batch * dim, target.wave_size
        pieces = cdiv(length, vec)
        chunks = tiles.get("chunks", max(1, min(CHUNKS_MAX[vendor], rows * pieces // TARGET_THREADS, pieces)))
        row_threads = tiles.get("row_threads", min(warp, max(4, pow2_at_least(cdiv(pieces, chunks)))))
        if row_threads & (row_threads - 1) or not 4 <= row_threads <= warp:
            raise InvalidArgumentError(f"{name}: row_threads={row_threads}; a power of two from 4 to the {warp}-lane "
                                       "warp/wave for L-major x")
        if "chunks" not in tiles:
            chunks = min(chunks, cdiv(pieces, row_threads))
        step = row_threads * vec * chunks                      # columns a step
        parallel = rows * row_threads                          # threads without segments
        units = rows
    else:
        pieces = cdiv(dim, vec)
        row_threads = tiles.get("row_threads", min(threads, pow2_at_least(pieces)))
        if row_threads & (row_threads - 1) or row_threads > threads:
            raise InvalidArgumentError(f"{name}: row_threads={row_threads}; a power of two up to threads={threads}")
        chunks = tiles.get("chunks", CL_CHUNKS)
        step = chunks                                          # time steps a step
        units = batch * cdiv(dim, row_threads * vec)
        parallel = units * row_threads
    if chunks > 8:
        raise InvalidArgumentError(f"{name}: chunks={chunks}; at most 8 (registers)")
    if threads % row_threads:
        raise InvalidArgumentError(f"{name}: threads={threads} must be a multiple of row_threads={row_threads}")
    steps_total = cdiv(length, step)
    if "seg_len" in tiles:
        seg_len = tiles["seg_len"]
        if seg_len % step:
            raise InvalidArgumentError(f"{name}: seg_len={seg_len}; a multiple of the step, {step} "
                                       f"{'columns' if layout == 'bdl' else 'time steps'}")
    else:   # cut rows into segments only where the rows alone leave the device idle
        min_steps = 1 if layout == "bdl" else MIN_SEG_STEPS
        segs = max(1, min(cdiv(TARGET_THREADS, parallel), steps_total // min_steps))
        seg_len = cdiv(steps_total, segs) * step
    segs = cdiv(length, seg_len)
    if segs * seg_len >= 2 ** 31:
        raise InvalidArgumentError(f"{name}: segments of {seg_len} reach past 2**31 - 1 columns")
    groups = threads // row_threads
    block_steps = cdiv(units * segs, groups)
    blocks = tiles.get("blocks", min(block_steps, MAX_GRID))
    stages = tiles.get("stages", STAGES[layout])
    if stages not in (1, 2):
        raise InvalidArgumentError(f"{name}: stages={stages}; 2 (load the next step while computing this one) or 1")
    min_blocks = tiles.get("min_blocks", CL_MIN_BLOCKS[vendor] if layout == "bld" and threads == 256 else 1)
    if min_blocks * threads > 2048:
        raise InvalidArgumentError(f"{name}: min_blocks={min_blocks}; at most {2048 // threads} blocks of {threads} "
                                   "threads fit a multiprocessor")
    direct = tiles.get("direct", CL_DIRECT[vendor] if layout == "bld" else 0)
    if direct not in (0, 1) or (direct and layout != "bld"):
        raise InvalidArgumentError(f"{name}: direct={direct}; 1 (channel-last x: whole steps through a walked "
                                   "pointer) or 0 (the tile path); L-major x takes 0")
    return Config(dtype=p["dtype"], vec=vec, threads=threads, row_threads=row_threads, chunks=chunks,
                  seg_len=seg_len, segs=segs, stages=stages, min_blocks=min_blocks, blocks=blocks, direct=direct)


class CausalConv1dOp(Op):
    name = "causal_conv1d"
    params = (Param("batch", "size", doc="B"), Param("dim", "size", doc="D, the channels"),
              Param("len", "size", doc="L, the sequence length"), *_common_params(),
              Param("layout", "choice", "bdl", LAYOUTS, "x's memory order: 'bdl' (L contiguous) or 'bld' "
                    "(channels contiguous: a (B, L, D) tensor viewed as (B, D, L))"),
              Param("align", "choice", 16, (2, 4, 8, 16), "byte alignment of x's and the output's rows"))
    shape_params = ("batch", "dim", "len")
    default_shape = {"batch": 8, "dim": 4096, "len": 2048}
    tile_keywords = TILES
    array_names = ("x", "weight", "bias", "out")
    output_names = ("out",)

    def plan_for(self, target, p, tiles) -> Plan:
        if p["align"] < DTYPES[p["dtype"]].itemsize:
            raise InvalidArgumentError(f"{self.name}: align={p['align']} is below the {p['dtype']} element size")
        if p["batch"] * p["dim"] >= 2 ** 31:
            raise InvalidArgumentError(f"{self.name}: batch * dim = {p['batch'] * p['dim']}; at most 2**31 - 1")
        tw = _weight_cpp(self.name, p)
        cfg = configure(self.name, target, p, tiles)
        cfg.update(weight_dtype=p["weight_dtype"] or p["dtype"], width=p["width"], activation=p["activation"],
                   layout=p["layout"])
        kernel_type = (f"causal_conv1d<{DTYPES[p['dtype']].cpp}, {tw}, {p['width']}, "
                       f"{str(p['activation'] == 'silu').lower()}, {str(p['layout'] == 'bld').lower()}, {cfg['vec']}, "
                       f"{cfg['threads']}, {cfg['row_threads']}, {cfg['chunks']}, {str(cfg['stages'] == 2).lower()}, "
                       f"{cfg['min_blocks']}, {str(cfg['direct'] == 1).lower()}>")
        params = {k: cfg[k] for k in ("dtype", "weight_dtype", "width", "activation", "layout", "vec", "threads",
                                      "row_threads", "chunks", "stages", "min_blocks", "direct")}
        spec = spec_mod.Specialization(self.name, target, SOURCE, kernel_type, "hkjit_causal_conv1d",
                                       spec_mod.make_params(params),
                                       (("threads", cfg["threads"]), ("dynamic_smem", 0)))
        return Plan(spec, cfg, cfg["threads"], 0, (cfg["blocks"], 1, 1), Args, functools.partial(_fill, cfg))

    def bind(self, arrays, options, device) -> Binding:
        name = self.name
        X, O = arrays["x"], arrays["out"]
        act = _check_activation(name, options)
        if X.ndim != 3 or 0 in X.shape:
            raise InvalidArgumentError(f"{name}: x must be a non-empty 3-D (batch, dim, seqlen) array, got shape "
                                       f"{X.shape}")
        dtype = _check_dtype(name, "x", X)
        batch, dim, length = X.shape
        wdt, width = _check_weights(name, arrays, dim, dtype)
        layout = _layout(name, X)
        if O is not None:
            if O.shape != X.shape or O.dtype.name != dtype:
                raise InvalidArgumentError(f"{name}: out must have x's shape {X.shape} and dtype {dtype}, got "
                                           f"{O.shape} {O.dtype.name}")
            if not _fits(O, layout):
                raise InvalidArgumentError(f"{name}: out (strides {O.strides}) must be laid out like x ("
                                           + ("seqlen contiguous" if layout == "bdl" else "channels contiguous, a "
                                              "(B, L, D) tensor viewed as (B, D, L)") + ")")
        elif layout == "bld" and X.shape[1] > 1 and length > 1:   # a new out is contiguous (B, D, L)
            raise InvalidArgumentError(f"{name}: channel-last x needs a channel-last out: pass out= (e.g. "
                                       "torch.empty(B, L, D).transpose(1, 2)) or x.contiguous()")
        if batch * dim >= 2 ** 31:
            raise InvalidArgumentError(f"{name}: batch * dim = {batch * dim}; at most 2**31 - 1")
        if device is None:
            return None
        ys = O.strides if O is not None else interop.contiguous_strides(X.shape)
        itemsize = X.dtype.itemsize
        row = 1 if layout == "bdl" else 2              # the dimension whose stride a vector step crosses
        pairs = [(X.ptr, _stride(X.shape, X.strides, 0)), (0, _stride(X.shape, X.strides, row)),
                 (O.ptr if O is not None else 0, _stride(X.shape, ys, 0)), (0, _stride(X.shape, ys, row))]
        align = alignment(itemsize, 2, *pairs)
        request = dict(batch=batch, dim=dim, len=length, width=width, dtype=dtype, weight_dtype=wdt,
                       activation=act, layout=layout, align=align)
        W, B = arrays["weight"], arrays["bias"]

        def args(ptrs, scalars):
            return dict(x=ptrs["x"], y=ptrs["out"], weight=ptrs["weight"], bias=ptrs["bias"], xs=X.strides, ys=ys,
                        ws=W.strides, bs=B.strides[0] if B is not None else 0, shape=X.shape)
        outputs = {} if O is not None else {"out": (X.shape, X.dtype)}
        return Binding(request, outputs, args)

    # --- `hkjit bench causal_conv1d` (hkjit/bench/memory_bound.py) ------------------------------
    def bench_cases(self, quick):
        shapes = [(8, 4096, 2048)] if quick else [(8, 4096, 2048), (4, 8192, 4096), (64, 2048, 512), (1, 2048, 128)]
        cases = [dict(batch=b, dim=d, len=n, width=4, layout="bdl", dtype="bfloat16") for b, d, n in shapes]
        if not quick:   # Mamba's own layout: channels contiguous
            cases.append(dict(batch=8, dim=4096, len=2048, width=4, layout="bld", dtype="bfloat16"))
        return cases

    def bench_inputs(self, case, torch):
        dt = getattr(torch, case["dtype"])
        b, d, n, w = case["batch"], case["dim"], case["len"], case["width"]
        x = torch.randn(b, d, n, device="cuda", dtype=dt) if case["layout"] == "bdl" else \
            torch.randn(b, n, d, device="cuda", dtype=dt).transpose(1, 2)
        weight = torch.randn(d, w, device="cuda", dtype=dt) / w
        bias = torch.randn(d, device="cuda", dtype=dt)
        return (x, weight, bias), {"activation": "silu"}

    def bench_peers(self, torch):
        F = torch.nn.functional

        def written_out(x, weight, bias=None, activation=None):   # causal-conv1d's reference function
            y = F.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[1] - 1, groups=weight.shape[0])
            y = y[..., :x.shape[-1]]
            return F.silu(y) if activation in ("silu", "swish") else y
        return {"torch eager": written_out, "torch.compile": torch.compile(written_out, dynamic=False)}

    def bench_bytes(self, case):
        size = DTYPES[case["dtype"]].itemsize
        return size * (2 * case["batch"] * case["dim"] * case["len"] + case["dim"] * (case["width"] + 1))

    def bench_tolerance(self, case):
        return {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]


def _fill(cfg, *, x, y, weight, bias, xs, ys, ws, bs, shape, workspace=0) -> Args:
    return Args(x, y, weight, bias, *xs, *ys, *ws, bs, *shape, cfg["seg_len"], cfg["segs"])


class CausalConv1dUpdateOp(Op):
    name = "causal_conv1d_update"
    params = (Param("batch", "size", doc="B"), Param("dim", "size", doc="D, the channels"),
              Param("state_len", "size", doc="conv_state.shape[2] (>= width - 1)"), *_common_params())
    shape_params = ("batch", "dim", "state_len")
    default_shape = {"batch": 64, "dim": 4096, "state_len": 3}
    tile_keywords = ("threads", "blocks")
    array_names = ("x", "conv_state", "weight", "bias", "out")
    output_names = ("out", "conv_state")
    inplace_names = ("conv_state",)

    def returns_for(self, options: dict) -> tuple:
        return ("out",)          # conv_state is updated in place, not returned

    def plan_for(self, target, p, tiles) -> Plan:
        check_ints(self.name, tiles, self.tile_keywords)
        if p["state_len"] < p["width"] - 1:
            raise InvalidArgumentError(f"{self.name}: state_len={p['state_len']}; at least width - 1 = "
                                       f"{p['width'] - 1}")
        if p["batch"] * p["dim"] >= 2 ** 31:
            raise InvalidArgumentError(f"{self.name}: batch * dim = {p['batch'] * p['dim']}; at most 2**31 - 1")
        tw = _weight_cpp(self.name, p)
        threads = tiles.get("threads", UPDATE_THREADS)
        if threads % 64 or threads > min(1024, target.max_threads):
            raise InvalidArgumentError(f"{self.name}: threads={threads}; a multiple of 64, at most "
                                       f"{min(1024, target.max_threads)}")
        blocks = tiles.get("blocks", min(cdiv(p["batch"] * p["dim"], threads), MAX_GRID))
        cfg = Config(dtype=p["dtype"], weight_dtype=p["weight_dtype"] or p["dtype"], width=p["width"],
                     activation=p["activation"], threads=threads, blocks=blocks)
        kernel_type = (f"causal_conv1d_update<{DTYPES[p['dtype']].cpp}, {tw}, {p['width']}, "
                       f"{str(p['activation'] == 'silu').lower()}, {threads}>")
        params = {k: cfg[k] for k in ("dtype", "weight_dtype", "width", "activation", "threads")}
        spec = spec_mod.Specialization(self.name, target, SOURCE, kernel_type, "hkjit_causal_conv1d_update",
                                       spec_mod.make_params(params),
                                       (("threads", threads), ("dynamic_smem", 0)))
        return Plan(spec, cfg, threads, 0, (blocks, 1, 1), UpdateArgs, _fill_update)

    def bind(self, arrays, options, device) -> Binding:
        name = self.name
        X, S, O = arrays["x"], arrays["conv_state"], arrays["out"]
        act = _check_activation(name, options)
        if X.ndim not in (2, 3) or 0 in X.shape or (X.ndim == 3 and X.shape[2] != 1):
            raise InvalidArgumentError(f"{name}: x must be (batch, dim) or (batch, dim, 1) (one step), got shape "
                                       f"{X.shape}; for a whole sequence call causal_conv1d")
        dtype = _check_dtype(name, "x", X)
        batch, dim = X.shape[:2]
        wdt, width = _check_weights(name, arrays, dim, dtype)
        if S is None:
            raise InvalidArgumentError(f"{name}: conv_state is required: a (batch, dim, state_len >= width - 1) "
                                       "array, updated in place")
        if S.ndim != 3 or S.shape[:2] != (batch, dim):
            raise InvalidArgumentError(f"{name}: conv_state must be ({batch}, {dim}, state_len), got shape {S.shape}")
        if S.shape[2] < width - 1:
            raise InvalidArgumentError(f"{name}: conv_state holds {S.shape[2]} steps; width {width} needs at least "
                                       f"{width - 1}: allocate (batch, dim, {width - 1})")
        if S.dtype.name != dtype:
            raise DTypeError(f"{name}: conv_state has dtype {S.dtype.name}; it must be x's, {dtype}")
        _check_distinct(name, "conv_state", S)
        if O is not None:
            if O.shape != X.shape or O.dtype.name != dtype:
                raise InvalidArgumentError(f"{name}: out must have x's shape {X.shape} and dtype {dtype}, got "
                                           f"{O.shape} {O.dtype.name}")
            _check_distinct(name, "out", O)
        if batch * dim >= 2 ** 31:
            raise InvalidArgumentError(f"{name}: batch * dim = {batch * dim}; at most 2**31 - 1")
        if device is None:
            return None
        request = dict(batch=batch, dim=dim, state_len=S.shape[2], width=width, dtype=dtype, weight_dtype=wdt,
                       activation=act)
        W, B = arrays["weight"], arrays["bias"]
        ys = O.strides if O is not None else interop.contiguous_strides(X.shape)

        def args(ptrs, scalars):
            return dict(x=ptrs["x"], y=ptrs["out"], state=ptrs["conv_state"], weight=ptrs["weight"],
                        bias=ptrs["bias"], strides=(*X.strides[:2], *ys[:2], *S.strides, *W.strides,
                                                    B.strides[0] if B is not None else 0),
                        sizes=(batch, dim, S.shape[2]))
        outputs = {} if O is not None else {"out": (X.shape, X.dtype)}
        return Binding(request, outputs, args)

    # --- `hkjit bench causal_conv1d_update` -------------------------------------------------------
    def bench_cases(self, quick):
        shapes = [(64, 4096)] if quick else [(b, d) for d in (4096, 8192) for b in (1, 64, 256)]
        return [dict(batch=b, dim=d, width=4, state_len=3, dtype="bfloat16") for b, d in shapes]

    def bench_inputs(self, case, torch):
        dt = getattr(torch, case["dtype"])
        b, d, w = case["batch"], case["dim"], case["width"]
        x = torch.randn(b, d, device="cuda", dtype=dt)
        state = torch.randn(b, d, case["state_len"], device="cuda", dtype=dt)
        weight = torch.randn(d, w, device="cuda", dtype=dt) / w
        bias = torch.randn(d, device="cuda", dtype=dt)
        return (x, state, weight, bias), {"activation": "silu"}

    def bench_peers(self, torch):
        F = torch.nn.functional

        def written_out(x, conv_state, weight, bias=None, activation=None):   # causal-conv1d's reference
            x_new = torch.cat([conv_state, x.unsqueeze(-1)], dim=-1)
            conv_state.copy_(x_new[..., 1:])
            y = F.conv1d(x_new[..., -weight.shape[1]:].to(weight.dtype), weight.unsqueeze(1), bias,
                         groups=weight.shape[0]).squeeze(-1)
            return (F.silu(y) if activation in ("silu", "swish") else y).to(x.dtype)
        return {"torch eager": written_out, "torch.compile": torch.compile(written_out, dynamic=False)}

    def bench_bytes(self, case):
        b, d, w = case["batch"], case["dim"], case["width"]
        return DTYPES[case["dtype"]].itemsize * (2 * b * d + 2 * b * d * case["state_len"] + d * (w + 1))

    def bench_tolerance(self, case):
        return {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]


def _fill_update(*, x, y, state, weight, bias, strides, sizes, workspace=0) -> UpdateArgs:
    return UpdateArgs(x, y, state, weight, bias, *strides, *sizes)


# --- checks shared by both ops ----------------------------------------------------------------------
def _check_activation(name, options):
    act = options.get("activation")
    try:
        return ACTIVATIONS[act]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"{name}: activation={act!r}; give None, 'silu' or 'swish'") from None


def _check_dtype(name, what, A):
    if A.dtype.name not in DTYPES_IN:
        raise DTypeError(f"{name}: {what} has dtype {A.dtype.name}; it must be one of {', '.join(DTYPES_IN)}")
    return A.dtype.name


def _check_weights(name, arrays, dim, dtype):
    """(weight dtype, width) of a valid (dim, W) weight and optional (dim,) bias."""
    Wt, B = arrays["weight"], arrays["bias"]
    if Wt is None:
        raise InvalidArgumentError(f"{name}: weight is required: a (dim, width) array")
    if Wt.ndim == 3 and Wt.shape[1] == 1:
        raise InvalidArgumentError(f"{name}: weight has shape {Wt.shape} (a Conv1d weight); pass weight[:, 0] "
                                   "(shape (dim, width))")
    if Wt.ndim != 2 or Wt.shape[0] != dim:
        raise InvalidArgumentError(f"{name}: weight must be ({dim}, width) for x's {dim} channels, got shape "
                                   f"{Wt.shape}")
    width = Wt.shape[1]
    if width not in WIDTHS:
        raise InvalidArgumentError(f"{name}: weight has width {width}; the kernel widths are 2, 3 and 4 (Mamba uses "
                                   "4): pass weight of shape (dim, 2..4)")
    wdt = Wt.dtype.name
    if wdt not in (dtype, "float32"):
        raise DTypeError(f"{name}: weight has dtype {wdt}; it must be x's ({dtype}) or float32: pass "
                         f"weight.to(x.dtype)")
    if B is not None:
        if B.shape != (dim,):
            raise InvalidArgumentError(f"{name}: bias must be ({dim},), got shape {B.shape}")
        if B.dtype.name != wdt:
            raise DTypeError(f"{name}: bias has dtype {B.dtype.name}; it must be weight's, {wdt}")
    return wdt, width


def _check_distinct(name, what, A):
    """An array the kernel writes element by element: no two elements at one address."""
    if any(n > 1 and s == 0 for n, s in zip(A.shape, A.strides)):
        raise InvalidArgumentError(f"{name}: {what} has a zero stride (strides {A.strides}): its elements overlap; "
                                   f"pass {what}.contiguous()")


def _stride(shape, strides, i):
    return strides[i] if shape[i] > 1 else 0


def _fits(A, layout) -> bool:
    """Whether A can be read in `layout`: its seqlen (bdl) or channel (bld) stride is 1."""
    axis = 2 if layout == "bdl" else 1
    return A.shape[axis] == 1 or A.strides[axis] == 1


def _layout(name, X) -> str:
    """L-major where x's seqlen is contiguous; channel-last where its channels are (a length-1
    sequence with contiguous channels reads better channel-last)."""
    if _fits(X, "bld") and (X.shape[2] == 1 and X.shape[1] > 1 or not _fits(X, "bdl")):
        return "bld"
    if _fits(X, "bdl"):
        return "bdl"
    raise InvalidArgumentError(f"{name}: x (shape {X.shape}, strides {X.strides}) has neither its seqlen nor its "
                               "channels contiguous; pass x.contiguous()")


def _channel_last_out(x):
    """For a channel-last GPU x (torch or CuPy), a new output laid out like it; else None (the
    launch path allocates a contiguous one)."""
    stride = getattr(x, "stride", None)
    if callable(stride) and hasattr(x, "new_empty"):     # a torch tensor: no description needed
        shape = tuple(x.shape)
        if len(shape) != 3 or x.device.type == "cpu" or 0 in shape:
            return None
        s = stride()
        if shape[1] == 1 or s[1] != 1 or s[2] == 1:
            return None
        return x.new_empty((shape[0], shape[2], shape[1])).transpose(1, 2)
    try:
        a = interop.describe(x)
    except Exception:                  # the launch path says what is wrong with x
        return None
    if a.device == "cpu" or a.framework not in ("torch", "cupy") or a.ndim != 3 or 0 in a.shape:
        return None
    if a.shape[1] == 1 or a.strides[1] != 1 or a.strides[2] == 1:
        return None
    b, d, n = a.shape
    return interop.empty(a, (b, n, d), a.dtype).swapaxes(1, 2)


CAUSAL_CONV1D = register(CausalConv1dOp())
CAUSAL_CONV1D_UPDATE = register(CausalConv1dUpdateOp())


def _act_option(name, activation):
    if not isinstance(activation, (str, type(None))) or activation not in ACTIVATIONS:
        raise InvalidArgumentError(f"{name}: activation={activation!r}; give None, 'silu' or 'swish'")
    return (("activation", activation),)


def causal_conv1d(x, weight, bias=None, *, activation=None, out=None, device=None, compiler=None, **tile_overrides):
    """Depthwise causal 1-D convolution (Mamba's conv1d), as causal-conv1d's causal_conv1d_fn:
    out[b, d, t] = act(bias[d] + sum_{k < W} weight[d, k] * x[b, d, t - (W - 1) + k]), x = 0 before t = 0.

    x: (batch, dim, seqlen), bf16 / fp16 / fp32, with seqlen contiguous (any batch and channel
    strides) or channels contiguous (a (batch, seqlen, dim) tensor viewed as (batch, dim, seqlen),
    any batch and time strides: Mamba's layout). weight: (dim, W), W in 2..4, x's dtype or float32,
    any strides; bias: optional (dim,) of weight's dtype. activation: None, 'silu' or 'swish'.
    fp32 math, one rounding. out: optional array of x's shape, dtype and layout; a new one (laid
    out like x) otherwise. Tile overrides: vec, threads, row_threads, chunks, seg_len, stages,
    min_blocks, blocks, direct (channel-last: 1 walks a pointer through whole steps).
    """
    options = _act_option(CAUSAL_CONV1D.name, activation)
    if out is None:
        out = _channel_last_out(x)
    return launch.call(CAUSAL_CONV1D, (x, weight, bias, out), (), options, device, compiler, tile_overrides)


def causal_conv1d_update(x, conv_state, weight, bias=None, *, activation=None, out=None, device=None, compiler=None,
                         **tile_overrides):
    """One decode step of causal_conv1d, as causal-conv1d's causal_conv1d_update: with
    window = [conv_state[b, d, -(W - 1):], x[b, d]], out[b, d] = act(bias[d] + sum_k weight[d, k]
    window[k]), and conv_state[b, d] shifted left by one with x as its newest entry (in place).

    x: (batch, dim) or (batch, dim, 1), bf16 / fp16 / fp32; conv_state: (batch, dim, state_len >=
    W - 1) of x's dtype, writable, any strides; weight (dim, W), bias (dim,) as causal_conv1d.
    Returns out, of x's shape (out= to pass one). Tile overrides: threads, blocks.
    """
    return launch.call(CAUSAL_CONV1D_UPDATE, (x, conv_state, weight, bias, out), (), _act_option(CAUSAL_CONV1D_UPDATE.name, activation),
                       device, compiler, tile_overrides)
