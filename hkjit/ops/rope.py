"""hkjit.rope and hkjit.rope_qk: rotary position embeddings on (B, H, N, D) or (B, N, H, D) tensors.

Kernel: kernel_sources/rope.cuh, one source for gfx942, gfx950 and sm_90a. Compile-time: the dtypes
of x, of cos/sin and of positions, the convention (half rotation or interleaved), and the schedule:

    vec          16-byte accesses of x where the pointers, strides and the half-rotation offset
                 allow (and cos/sin accesses of at most 16 bytes: fp32 tables with 16-bit x give
                 8-byte x accesses in the half-rotation form, whose x and cos chunks pair one to one)
    row_threads  the power of two of threads, up to a warp, that covers a row's rotated half (or
                 its rotated columns, interleaved) at CHUNKS_MAX pieces a thread (at least
                 MIN_ROW_THREADS threads); blocks of several rows (THREADS: per target, measured)
Run-time: the shapes, strides, the table's rows. rope_qk rotates q and k in one launch (their
rows one after the other); they share cos, sin and positions and may differ in heads (GQA).
"""

import ctypes

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Config, Op, Param, Plan
from . import register
from ._rowwise import alignment, cdiv, check_group, check_ints, pow2_at_least

SOURCE = "rope.cuh"
DTYPES_IN = FLOAT_OUTPUTS
POSITION_DTYPES = ("none", "int32", "int64")
TILES = ("vec", "threads", "row_threads", "chunks", "blocks", "exact")
# Schedule per target. NVIDIA (H100 sweep over vec, row_threads, threads, chunks at (8, 32, 2048, 128)
# bf16, both layouts): 128-thread blocks and rows of at least 8 threads with 2 pieces a thread were
# best (92-96% of a same-size copy; 256-thread blocks 87-90%). CDNA: one piece a thread (2 spilled
# SGPRs on gfx942 with 16-bit tables), 256-thread blocks (not measured on hardware).
THREADS = {"nvidia": 128, "amd": 256}
CHUNKS_MAX = {"nvidia": 2, "amd": 1}
MIN_ROW_THREADS = {"nvidia": 8, "amd": 1}
LAYOUTS = {"bhnd": 2, "bnhd": 1}            # the dimension of x that is the position (sequence)


class Tensor(ctypes.Structure):
    """Mirror of rope<...>::tensor."""
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("xs0", ctypes.c_longlong), ("xs1", ctypes.c_longlong), ("xs2", ctypes.c_longlong),
                ("ys0", ctypes.c_longlong), ("ys1", ctypes.c_longlong), ("ys2", ctypes.c_longlong),
                ("d0", ctypes.c_int), ("d1", ctypes.c_int), ("d2", ctypes.c_int), ("n_axis", ctypes.c_int),
                ("rows", ctypes.c_int)]


class Args(ctypes.Structure):
    """Mirror of rope<...>::args."""
    _fields_ = [("t", Tensor * 2), ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p),
                ("positions", ctypes.c_void_p), ("cs_stride", ctypes.c_longlong), ("pos_stride", ctypes.c_longlong),
                ("table_rows", ctypes.c_int), ("d", ctypes.c_int), ("half", ctypes.c_int)]


def configure(name, target, p, tiles) -> Config:
    check_ints(name, tiles, TILES)
    exact_override = tiles.get("exact")
    itemsize, cos_size = DTYPES[p["dtype"]].itemsize, DTYPES[p["cos_dtype"]].itemsize
    half = p["rot"] // 2
    vendor = "nvidia" if target.is_nvidia else "amd"
    widest = max(1, min(16, p["align"]) // itemsize)
    default = widest
    if not p["interleaved"]:        # cos/sin chunks match x chunks: 16 bytes of them by default; 32
        default = min(widest, 16 // cos_size)   # (two loads) allowed on sm_90a, slower in the H100 sweep
        widest = min(widest, (32 if target.is_nvidia else 16) // cos_size)
    vec = tiles.get("vec", default)
    if vec not in (1, 2, 4, 8) or vec > widest or (p["interleaved"] and vec < 2):
        raise InvalidArgumentError(f"{name}: vec={vec}; valid: powers of two {'from 2 ' if p['interleaved'] else ''}"
                                   f"up to {widest} for these arrays")
    pieces = cdiv(p["rot"] if p["interleaved"] else half, vec)
    warp = target.wave_size
    by_chunks = pow2_at_least(cdiv(pieces, CHUNKS_MAX[vendor]))
    row_threads = tiles.get("row_threads", min(warp, max(by_chunks, min(MIN_ROW_THREADS[vendor], pow2_at_least(pieces)))))
    if row_threads > warp:
        raise InvalidArgumentError(f"{name}: row_threads={row_threads}; at most the {warp}-thread warp/wave")
    chunks = tiles.get("chunks", min(CHUNKS_MAX[vendor], cdiv(pieces, row_threads)))
    if chunks > 8:
        raise InvalidArgumentError(f"{name}: chunks={chunks}; at most 8 (registers)")
    threads = tiles.get("threads", THREADS[vendor])
    check_group(name, target, threads, row_threads)
    row_blocks = cdiv(p["rows"], threads // row_threads)
    blocks = tiles.get("blocks", row_blocks)
    # exact: a row is one step (rot == d, the rotated half -- interleaved: the rotated columns --
    # exactly row_threads * vec * chunks): no column loop, tests or tail copy in the kernel.
    # Default on sm_90a (H100: docs/notes/rope.md); CDNA keeps the general path (not measured).
    fits = p["rot"] == p["d"] and (p["rot"] if p["interleaved"] else half) == row_threads * vec * chunks
    exact = int(fits and target.is_nvidia) if exact_override is None else exact_override
    if exact and not fits:
        raise InvalidArgumentError(f"{name}: exact=1 needs rot == d and the rotated "
                                   f"{'columns' if p['interleaved'] else 'half'} equal to row_threads * vec * "
                                   f"chunks ({row_threads * vec * chunks}); rot={p['rot']}, d={p['d']}")
    return Config(dtype=p["dtype"], cos_dtype=p["cos_dtype"], positions=p["positions"],
                  interleaved=p["interleaved"], vec=vec, threads=threads, row_threads=row_threads, chunks=chunks,
                  blocks=blocks, exact=exact)


class RopeOp(Op):
    params = (
        Param("rows", "size", doc="rows of D elements to rotate (q's and k's together for rope_qk)"),
        Param("d", "size", doc="the head dimension D"),
        Param("rot", "size", doc="rotated columns (2 * cos.shape[1]), even, <= d"),
        Param("dtype", "dtype", "bfloat16", DTYPES_IN, "x and the output"),
        Param("cos_dtype", "dtype", "float32", DTYPES_IN, "cos and sin"),
        Param("positions", "choice", "none", POSITION_DTYPES, "the positions' dtype, or none"),
        Param("interleaved", "bool", False, doc="GPT-J pairs (2i, 2i+1) instead of (i, i + rot/2)"),
        Param("align", "choice", 16, (2, 4, 8, 16), "byte alignment of x's rows (and the rotated half)"),
    )
    shape_params = ("rows", "d", "rot")
    default_shape = {"rows": 8 * 32 * 2048, "d": 128, "rot": 128}
    tile_keywords = TILES
    scalar_names = ()

    def __init__(self, name, pairs):
        self.name, self.pairs = name, pairs          # pairs: (input, output) array names
        self.array_names = tuple(n for pair in pairs for n in pair[:1]) + ("cos", "sin", "positions") \
            + tuple(pair[1] for pair in pairs)
        self.output_names = tuple(pair[1] for pair in pairs)

    def plan_for(self, target, p, tiles) -> Plan:
        if p["rot"] % 2 or p["rot"] > p["d"]:
            raise InvalidArgumentError(f"{self.name}: rot={p['rot']}; an even number of columns, at most d={p['d']}")
        if p["align"] < DTYPES[p["dtype"]].itemsize:
            raise InvalidArgumentError(f"{self.name}: align={p['align']} is below the {p['dtype']} element size")
        cfg = configure(self.name, target, p, tiles)
        pos = {"none": "int", "int32": "int", "int64": "long long"}[p["positions"]]
        kernel_type = (f"rope<{DTYPES[cfg['dtype']].cpp}, {DTYPES[cfg['cos_dtype']].cpp}, {pos}, "
                       f"{str(cfg['interleaved']).lower()}, {cfg['vec']}, {cfg['threads']}, {cfg['row_threads']}, "
                       f"{cfg['chunks']}, {str(bool(cfg['exact'])).lower()}>")
        params = {k: cfg[k] for k in ("dtype", "cos_dtype", "positions", "interleaved", "vec", "threads",
                                      "row_threads", "chunks", "exact")}
        spec = spec_mod.Specialization(self.name, target, SOURCE, kernel_type, "hkjit_rope",
                                       spec_mod.make_params(params),
                                       (("threads", cfg["threads"]), ("dynamic_smem", 0)))
        return Plan(spec, cfg, cfg["threads"], 0, (cfg["blocks"], 1, 1), Args, _fill)

    def bind(self, arrays, options, device) -> Binding:
        name = self.name
        layout = options.get("layout", "bhnd")
        if layout not in LAYOUTS:
            raise InvalidArgumentError(f"{name}: layout={layout!r}; give 'bhnd' (B, H, N, D) or 'bnhd' (B, N, H, D)")
        interleaved = options.get("interleaved", False)
        if not isinstance(interleaved, bool):
            raise InvalidArgumentError(f"{name}: interleaved={interleaved!r}; give True or False")
        n_axis = LAYOUTS[layout]
        xs = [arrays[i] for i, _ in self.pairs]
        X = xs[0]
        for (i, _), A in zip(self.pairs, xs):
            if A.ndim != 4 or 0 in A.shape:
                raise InvalidArgumentError(f"{name}: {i} must be a non-empty 4-D ({layout.upper()}) array, got "
                                           f"shape {A.shape}")
            if A.dtype.name not in DTYPES_IN:
                raise DTypeError(f"{name}: {i} has dtype {A.dtype.name}; it must be one of {', '.join(DTYPES_IN)}")
            if A.dtype.name != X.dtype.name:
                raise DTypeError(f"{name}: q has dtype {X.dtype.name} but {i} has {A.dtype.name}; convert one")
            b, n, d = A.shape[0], A.shape[n_axis], A.shape[3]
            if (b, n, d) != (X.shape[0], X.shape[n_axis], X.shape[3]):
                raise InvalidArgumentError(f"{name}: q {X.shape} and {i} {A.shape} differ in batch, positions or head "
                                           f"dimension (layout {layout!r}); only the heads may differ")
            _check_rows(name, i, A)
        batch, seq, d = X.shape[0], X.shape[n_axis], X.shape[3]
        C, S, P = arrays["cos"], arrays["sin"], arrays["positions"]
        if C.ndim != 2 or S.shape != C.shape or C.shape[1] == 0 or C.shape[0] == 0:
            raise InvalidArgumentError(f"{name}: cos and sin must be 2-D (positions, rot/2) arrays of one shape, got "
                                       f"{C.shape} and {S.shape}")
        if C.dtype.name not in DTYPES_IN or S.dtype.name != C.dtype.name:
            raise DTypeError(f"{name}: cos and sin must share a float dtype (float32, or x's), got {C.dtype.name} and "
                             f"{S.dtype.name}")
        if (C.shape[1] > 1 and (C.strides[1] != 1 or S.strides[1] != 1)) or (
                C.shape[0] > 1 and C.strides[0] != S.strides[0]):
            raise InvalidArgumentError(f"{name}: cos and sin must be row-major with one row stride (strides "
                                       f"{C.strides} and {S.strides}); pass cos.contiguous(), sin.contiguous()")
        half = C.shape[1]
        rot = 2 * half
        if rot > d:
            raise InvalidArgumentError(f"{name}: cos has {half} columns, so {rot} rotated columns, more than the head "
                                       f"dimension {d}; pass cos[:, :{d // 2}]")
        if P is None:
            if C.shape[0] < seq:
                raise InvalidArgumentError(f"{name}: cos has {C.shape[0]} rows but the sequence has {seq} positions; "
                                           "give a longer table or positions=")
            pos_stride = 0
        else:
            if P.dtype.name not in ("int32", "int64"):
                raise DTypeError(f"{name}: positions has dtype {P.dtype.name}; give int32 or int64")
            if P.shape not in ((seq,), (batch, seq)) or (seq > 1 and P.strides[-1] != 1):
                raise InvalidArgumentError(f"{name}: positions must be contiguous ({seq},) or ({batch}, {seq}), got "
                                           f"shape {P.shape} strides {P.strides}")
            pos_stride = P.strides[0] if P.ndim == 2 and batch > 1 else 0
        for (i, o), A in zip(self.pairs, xs):
            O = arrays[o]
            if O is not None:
                if O.shape != A.shape or O.dtype.name != A.dtype.name:
                    raise InvalidArgumentError(f"{name}: {o} must have {i}'s shape {A.shape} and dtype "
                                               f"{A.dtype.name}, got {O.shape} {O.dtype.name}")
                _check_rows(name, o, O)
        rows = sum(A.shape[0] * A.shape[1] * A.shape[2] for A in xs)
        if rows >= 2 ** 31:
            raise InvalidArgumentError(f"{name}: {rows} rows of D elements; at most 2**31 - 1 per launch")
        if device is None:
            return None
        itemsize = X.dtype.itemsize
        outs = [arrays[o] for _, o in self.pairs]
        out_strides = [O.strides[:3] if O is not None else _dense(A.shape) for A, O in zip(xs, outs)]
        pairs = [(A.ptr, s) for A in xs for s in A.strides[:3]]
        pairs += [(O.ptr if O is not None else 0, s) for O, st in zip(outs, out_strides) for s in st]
        pairs.append((0, half if not interleaved else rot))            # the second half / the copied tail
        align = alignment(itemsize, 2, *pairs)
        cos_align = alignment(C.dtype.itemsize, 2, (C.ptr, C.strides[0]), (S.ptr, 0))
        # cos/sin chunks are vec (half rotation) or vec / 2 (interleaved) elements: cap x's alignment
        # so those accesses stay aligned too.
        scale = 1 if not interleaved else 2
        align = min(align, max(itemsize, cos_align // C.dtype.itemsize * scale * itemsize))
        request = dict(rows=rows, d=d, rot=rot, dtype=X.dtype.name, cos_dtype=C.dtype.name,
                       positions="none" if P is None else P.dtype.name, interleaved=interleaved, align=align)
        table_rows = C.shape[0]
        if table_rows >= 2 ** 31:
            raise InvalidArgumentError(f"{name}: cos has {table_rows} rows; at most 2**31 - 1")

        def args(ptrs, scalars):
            ts = []
            for (i, o), A, st in zip(self.pairs, xs, out_strides):
                ts.append(dict(x=ptrs[i], y=ptrs[o], xs=A.strides[:3], ys=st, dims=A.shape[:3], n_axis=n_axis))
            return dict(tensors=ts, cos=ptrs["cos"], sin=ptrs["sin"], positions=ptrs["positions"],
                        cs_stride=C.strides[0] if table_rows > 1 else half, pos_stride=pos_stride,
                        table_rows=table_rows, d=d, half=half)
        outputs = {o: (A.shape, A.dtype) for (_, o), A, O in zip(self.pairs, xs, outs) if O is None}
        return Binding(request, outputs, args, returns=self.output_names)

    # --- `hkjit bench rope` (hkjit/bench/memory_bound.py) ---------------------------------------
    def bench_cases(self, quick):
        shapes = [(8, 32, 2048, 128)] if quick else [(4, 32, 1024, 128), (8, 32, 2048, 128), (16, 32, 4096, 128)]
        if self.name == "rope_qk":
            return [dict(b=b, n=n, heads=h, kv_heads=8, d=d, layout="bnhd", dtype="bfloat16") for b, h, n, d in shapes]
        return [dict(b=b, heads=h, n=n, d=d, layout=lay, dtype="bfloat16") for b, h, n, d in shapes
                for lay in ("bhnd", "bnhd")]

    def bench_inputs(self, case, torch):
        dt = getattr(torch, case["dtype"])
        b, n, d = case["b"], case["n"], case["d"]

        def make(h):
            shape = (b, h, n, d) if case["layout"] == "bhnd" else (b, n, h, d)
            return torch.randn(shape, device="cuda", dtype=dt)
        angles = torch.outer(torch.arange(n, device="cuda", dtype=torch.float32),
                             1e4 ** (-torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
        cos, sin = angles.cos(), angles.sin()
        xs = (make(case["heads"]),) + ((make(case["kv_heads"]),) if self.name == "rope_qk" else ())
        return (*xs, cos, sin), {"layout": case["layout"]}

    def bench_peers(self, torch):
        def one(x, cos, sin, layout):   # what a Llama model writes (half rotation)
            shape = (1, 1, *cos.shape) if layout == "bhnd" else (1, cos.shape[0], 1, cos.shape[1])
            c, s = cos.view(shape), sin.view(shape)
            h = x.shape[-1] // 2
            x1, x2 = x[..., :h].float(), x[..., h:].float()
            return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1).to(x.dtype)
        if self.name == "rope_qk":
            def written_out(q, k, cos, sin, layout):
                return one(q, cos, sin, layout), one(k, cos, sin, layout)
        else:
            written_out = one
        return {"torch eager": written_out, "torch.compile": torch.compile(written_out, dynamic=False)}

    def bench_bytes(self, case):
        heads = case["heads"] + (case["kv_heads"] if self.name == "rope_qk" else 0)
        return 2 * case["b"] * heads * case["n"] * case["d"] * DTYPES[case["dtype"]].itemsize

    def bench_tolerance(self, case):
        return {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]


def _check_rows(op, name, arr):
    if arr.shape[3] > 1 and arr.strides[3] != 1:
        raise InvalidArgumentError(f"{op}: {name}'s head dimension is strided ({arr.strides[3]} elements); it must be "
                                   f"contiguous: pass {name}.contiguous()")


def _dense(shape):
    return (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3])


def _fill(*, tensors, cos, sin, positions, cs_stride, pos_stride, table_rows, d, half, workspace=0) -> Args:
    ts = (Tensor * 2)()
    for t, v in zip(ts, tensors):
        d0, d1, d2 = v["dims"]
        t.x, t.y = v["x"], v["y"]
        t.xs0, t.xs1, t.xs2 = v["xs"]
        t.ys0, t.ys1, t.ys2 = v["ys"]
        t.d0, t.d1, t.d2, t.n_axis, t.rows = d0, d1, d2, v["n_axis"], d0 * d1 * d2
    if len(tensors) == 1:
        ts[1].d0 = ts[1].d1 = ts[1].d2 = 1           # no second tensor: rows = 0
    return Args(ts, cos, sin, positions, cs_stride, pos_stride, table_rows, d, half)


ROPE = register(RopeOp("rope", (("x", "out"),)))
ROPE_QK = register(RopeOp("rope_qk", (("q", "q_out"), ("k", "k_out"))))


def _options(layout, interleaved):
    return (("layout", layout), ("interleaved", interleaved))


def rope(x, cos, sin, *, interleaved=False, positions=None, layout="bhnd", out=None, device=None, compiler=None,
         **tile_overrides):
    """Rotary position embeddings: rotate the first rot = 2 * cos.shape[1] columns of each head
    vector of x by the angles of its position; the other columns are copied.

    x: (B, H, N, D) for layout="bhnd" or (B, N, H, D) for "bnhd", bf16 / fp16 / fp32, head vectors
    contiguous (other strides allowed). cos, sin: (P, rot / 2) tables (float32 or x's dtype) of
    cos(angle) and sin(angle) per position; row n serves sequence index n unless `positions` (int32
    or int64, (N,) or (B, N)) names the row. interleaved=False rotates pairs (i, i + rot / 2) (NeoX,
    Llama); True rotates pairs (2i, 2i + 1) (GPT-J). A position outside [0, P) gives NaN rows (no
    read outside the table). fp32 math, one rounding. out: optional array of x's shape and dtype
    (x itself for in place). Tile overrides: vec, threads, row_threads, chunks, blocks.
    """
    return launch.call(ROPE, (x, cos, sin, positions, out), (), _options(layout, interleaved), device, compiler,
                       tile_overrides)


def rope_qk(q, k, cos, sin, *, interleaved=False, positions=None, layout="bhnd", q_out=None, k_out=None,
            device=None, compiler=None, **tile_overrides):
    """rope applied to q and k in one launch; returns (q_out, k_out). q and k share the layout, the
    batch, the sequence and the head dimension, and may differ in heads (GQA). Otherwise as rope."""
    return launch.call(ROPE_QK, (q, k, cos, sin, positions, q_out, k_out), (), _options(layout, interleaved),
                       device, compiler, tile_overrides)
