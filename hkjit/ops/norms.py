"""hkjit.add_rms_norm, hkjit.layer_norm, hkjit.dropout_add_layer_norm: the fused norms.

Kernel: kernel_sources/norm.cuh, one source for gfx942, gfx950 and sm_90a; the schedule is
rms_norm's (hkjit/ops/rms_norm.py: vector width from the alignment, row groups by row length),
with the row capped as fp32 (the kernel keeps the sum s in fp32 registers); on sm_90a the loads
in flight count x and the residual, and registers are capped at 64 (docs/notes/norms.md). Compile-time: the
dtype, which of weight / bias are given, the schedule; run-time: rows, the row length, strides,
eps, p and the seed.

The residual sum is rounded to the input dtype and that rounded sum is what is normalised and
returned (as the fused kernels of vLLM, FlashInfer and FlashAttention's layer norm do), so
`normed, s = add_rms_norm(x, r, w)` equals `rms_norm(s, w)` exactly.
"""

import ctypes

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Op, Param, Plan
from . import register
from ._rowwise import alignment, check_ints, rows_of
from .rms_norm import MAX_HIDDEN, TILES, configure

SOURCE = "norm.cuh"
DTYPES_IN = FLOAT_OUTPUTS
SM_THREADS = 1024                   # sm_90a: threads an SM must hold at once (64-register cap)
# packed_wb (override only, default 0): on the exact path, weight and bias kept as the dtype (half
# the registers for 16-bit dtypes) and converted per row instead of held as fp32; the same bits.
NORM_TILES = TILES + ("packed_wb",)


class Args(ctypes.Structure):
    """Mirror of fused_norm<...>::args."""
    _fields_ = [("x", ctypes.c_void_p), ("residual", ctypes.c_void_p), ("weight", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("y", ctypes.c_void_p), ("residual_out", ctypes.c_void_p),
                ("x_stride", ctypes.c_longlong), ("r_stride", ctypes.c_longlong), ("y_stride", ctypes.c_longlong),
                ("ro_stride", ctypes.c_longlong), ("seed", ctypes.c_ulonglong), ("rows", ctypes.c_int),
                ("cols", ctypes.c_int), ("eps", ctypes.c_float), ("p", ctypes.c_float), ("keep_scale", ctypes.c_float)]


class NormOp(Op):
    shape_params = ("rows", "hidden")
    default_shape = {"rows": 16384, "hidden": 4096}
    tile_keywords = NORM_TILES

    def __init__(self, name, layer, residual, dropout, arrays, scalars):
        self.name, self.layer, self.residual, self.dropout = name, layer, residual, dropout
        self.array_names = arrays
        self.output_names = ("out", "residual_out") if residual else ("out",)
        self.scalar_names = scalars
        self.params = (
            Param("rows", "size", doc="rows (the product of x's leading dimensions)"),
            Param("hidden", "size", doc="the normalised (last) dimension"),
            Param("dtype", "dtype", "bfloat16", DTYPES_IN, "every array"),
            Param("align", "choice", 16, (2, 4, 8, 16), "byte alignment of the pointers and row strides"),
            Param("weight", "bool", True, doc="a weight is given"),
        ) + ((Param("bias", "bool", True, doc="a bias is given"),) if layer else ())

    def plan_for(self, target, p, tiles) -> Plan:
        if p["hidden"] > MAX_HIDDEN:
            raise InvalidArgumentError(f"{self.name}: hidden={p['hidden']}; at most {MAX_HIDDEN}")
        if p["align"] < DTYPES[p["dtype"]].itemsize:
            raise InvalidArgumentError(f"{self.name}: align={p['align']} is below the {p['dtype']} element size")
        # Row elements a thread keeps: the fp32 sum (32), and with dropout 16, as the mask's hashes
        # took 142 registers on sm_90a at 32 (one 256-thread block per SM: 61% of copy). On sm_90a
        # x and the residual both count as loads in flight, and the registers are capped so that
        # 1024 threads (64 registers each) fit on an SM (H100 sweep, docs/notes/norms.md). LayerNorm
        # also holds the squared deviations: under that cap, 32 elements a thread in a row group of a
        # warp (1024 bf16 columns) spilled 32 bytes (NVRTC 13), 24 none; the group widens instead.
        check_ints(self.name, tiles, NORM_TILES)
        packed_wb = tiles.get("packed_wb", 0)
        tiles = {k: v for k, v in tiles.items() if k != "packed_wb"}
        cfg = configure(target, p, tiles, op=self.name, max_elems=16 if self.dropout else 32,
                        inputs=2 if self.residual else 1, sm_threads=SM_THREADS,
                        warp_row_elems=24 if self.layer and not self.residual else None)
        bias = p.get("bias", False)
        if packed_wb and not cfg["exact"]:
            raise InvalidArgumentError(f"{self.name}: packed_wb=1 is a choice of the exact path (rows of exactly the "
                                       "tile's columns, exact=1); pass packed_wb=0")
        flags = ", ".join(str(v).lower() for v in (self.layer, self.residual, self.dropout, p["weight"], bias))
        kernel_type = (f"fused_norm<{DTYPES[cfg['dtype']].cpp}, {flags}, {cfg['vec']}, {cfg['threads']}, "
                       f"{cfg['row_threads']}, {cfg['group_rows']}, {cfg['chunks']}, {cfg['min_blocks']}, "
                       f"{str(bool(cfg['exact'])).lower()}{', true' if packed_wb else ''}>")
        params = {k: cfg[k] for k in ("dtype", "vec", "threads", "row_threads", "group_rows", "chunks", "min_blocks",
                                      "exact")}
        if packed_wb:        # (left out when 0: the keys of the other schedules stay as they were)
            params["packed_wb"] = 1
        spec = spec_mod.Specialization(self.name, target, SOURCE, kernel_type, "hkjit_norm",
                                       spec_mod.make_params({**params, "weight": p["weight"], "bias": bias}),
                                       (("threads", cfg["threads"]), ("dynamic_smem", 0)))
        return Plan(spec, cfg, cfg["threads"], 0, (cfg["blocks"], 1, 1), Args, _fill)

    def bind(self, arrays, options, device) -> Binding:
        name, X = self.name, arrays["x"]
        if X.ndim < 1 or 0 in X.shape:
            raise InvalidArgumentError(f"{name}: x must have at least one element, got shape {X.shape}")
        dtype = X.dtype.name
        if dtype not in DTYPES_IN:
            raise DTypeError(f"{name}: x has dtype {dtype}; it must be one of {', '.join(DTYPES_IN)}")
        hidden = X.shape[-1]
        if hidden > MAX_HIDDEN:
            raise InvalidArgumentError(f"{name}: hidden size {hidden} (x's last dimension); at most {MAX_HIDDEN}")
        rows, x_stride = rows_of(name, "x", X)
        strides = {"x": x_stride}
        for n in ("residual", "out", "residual_out"):
            A = arrays.get(n)
            if A is None:
                continue
            if A.shape != X.shape:
                raise InvalidArgumentError(f"{name}: {n} has shape {A.shape}; it must be x's, {X.shape}")
            if A.dtype.name != dtype:
                raise DTypeError(f"{name}: {n} has dtype {A.dtype.name}; it must be x's, {dtype}")
            strides[n] = rows_of(name, n, A)[1]
        for n in ("weight", "bias"):
            A = arrays.get(n)
            if A is None:
                continue
            if A.shape != (hidden,) or (hidden > 1 and A.strides[0] != 1):
                raise InvalidArgumentError(f"{name}: {n} must be a contiguous ({hidden},) vector, got shape {A.shape} "
                                           f"strides {A.strides}")
            if A.dtype.name != dtype:
                raise DTypeError(f"{name}: {n} has dtype {A.dtype.name} but x has {dtype}; convert one")
        if self.residual and arrays["residual"] is None:
            raise InvalidArgumentError(f"{name}: residual is required")
        if device is None:
            return None
        for n in ("out", "residual_out"):
            strides.setdefault(n, hidden)
        strides.setdefault("residual", hidden)
        ptr = {n: (arrays[n].ptr if arrays.get(n) is not None else 0) for n in strides}
        align = alignment(X.dtype.itemsize, rows, *((ptr[n], strides[n]) for n in strides),
                          *((arrays[n].ptr, 0) for n in ("weight", "bias") if arrays.get(n) is not None))
        request = dict(rows=rows, hidden=hidden, dtype=dtype, align=align, weight=arrays["weight"] is not None)
        if self.layer:
            request["bias"] = arrays["bias"] is not None
        dropout = self.dropout

        def args(ptrs, scalars):
            values = dict(zip(self.scalar_names, scalars))
            eps, p, seed = float(values["eps"]), float(values.get("p", 0.0)), values.get("seed", 0)
            if eps < 0:
                raise InvalidArgumentError(f"{name}: eps={eps}; it must be >= 0")
            if dropout:
                if not 0.0 <= p < 1.0:
                    raise InvalidArgumentError(f"{name}: p={p}; the drop probability must be in [0, 1)")
                if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
                    raise InvalidArgumentError(f"{name}: seed={seed!r}; give an int in [0, 2**64)")
            return dict(x=ptrs["x"], residual=ptrs.get("residual", 0), weight=ptrs["weight"],
                        bias=ptrs.get("bias", 0), y=ptrs["out"], residual_out=ptrs.get("residual_out", 0),
                        x_stride=x_stride, r_stride=strides["residual"], y_stride=strides["out"],
                        ro_stride=strides["residual_out"], seed=seed, rows=rows, cols=hidden, eps=eps, p=p,
                        keep_scale=1.0 / (1.0 - p))
        outputs = {n: (X.shape, X.dtype) for n in self.output_names if arrays.get(n) is None}
        return Binding(request, outputs, args, returns=self.output_names)

    # --- `hkjit bench <name>` (hkjit/bench/memory_bound.py) ---------------------------------------
    def bench_cases(self, quick):
        rows, hidden = ((16384,), (128, 4096)) if quick else ((128, 4096, 16384, 65536), (128,))
        cases = [dict(rows=r, hidden=h, dtype="bfloat16") for r in rows for h in hidden]
        if not quick:
            cases += [dict(rows=16384, hidden=h, dtype="bfloat16") for h in (4096, 8192)]
        return cases

    def bench_inputs(self, case, torch):
        dt = getattr(torch, case["dtype"])
        rows, hidden = case["rows"], case["hidden"]
        x = torch.randn(rows, hidden, device="cuda", dtype=dt)
        w = torch.rand(hidden, device="cuda", dtype=dt) + 0.5
        if self.name == "add_rms_norm":
            return (x, torch.randn_like(x), w), {"eps": 1e-6}
        b = torch.randn(hidden, device="cuda", dtype=dt)
        if self.name == "layer_norm":
            return (x, w, b), {"eps": 1e-5}
        return (x, torch.randn_like(x), w, b, 0.0), {"eps": 1e-5, "seed": 1}

    def bench_peers(self, torch):
        F = torch.nn.functional
        if self.name == "add_rms_norm":
            def written_out(x, residual, w, eps):
                s = x + residual
                return F.rms_norm(s, (s.shape[-1],), w, eps), s
        elif self.name == "layer_norm":
            def written_out(x, w, b, eps):
                return F.layer_norm(x, (x.shape[-1],), w, b, eps)
        else:
            def written_out(x, residual, w, b, p, eps, seed):   # p = 0 in the benchmark: the same result
                s = F.dropout(x, p) + residual
                return F.layer_norm(s, (s.shape[-1],), w, b, eps), s
        return {"torch eager": written_out, "torch.compile": torch.compile(written_out, dynamic=False)}

    def bench_bytes(self, case):
        n = case["rows"] * case["hidden"] * DTYPES[case["dtype"]].itemsize
        return n * (4 if self.residual else 2)

    def bench_tolerance(self, case):
        return {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]


def _fill(*, workspace=0, **fields) -> Args:
    return Args(**fields)


ADD_RMS_NORM = register(NormOp("add_rms_norm", False, True, False,
                               ("x", "residual", "weight", "out", "residual_out"), ("eps",)))
LAYER_NORM = register(NormOp("layer_norm", True, False, False, ("x", "weight", "bias", "out"), ("eps",)))
DROPOUT_ADD_LAYER_NORM = register(NormOp("dropout_add_layer_norm", True, True, True,
                                         ("x", "residual", "weight", "bias", "out", "residual_out"),
                                         ("p", "eps", "seed")))


def add_rms_norm(x, residual, weight, eps=1e-6, *, out=None, residual_out=None, device=None, compiler=None,
                 **tile_overrides):
    """(rms_norm(s, weight, eps), s) with s = x + residual rounded to x's dtype, in one pass over
    memory. x, residual: (..., hidden) bf16 / fp16 / fp32 (rows may be strided); weight: (hidden,).
    out may be x and residual_out may be residual (in place). Tile overrides as rms_norm's, and
    packed_wb (1: on the exact path, the weight kept as the dtype and converted per row)."""
    return launch.call(ADD_RMS_NORM, (x, residual, weight, out, residual_out), (eps,), (), device, compiler,
                       tile_overrides)


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, out=None, device=None, compiler=None, **tile_overrides):
    """LayerNorm over the last dimension as torch.nn.functional.layer_norm: (x - mean) / sqrt(var +
    eps) (biased variance) [* weight] [+ bias], fp32 statistics (mean first, then squared
    deviations: no cancellation for rows with a large mean). weight and bias: (hidden,) or None."""
    return launch.call(LAYER_NORM, (x, weight, bias, out), (eps,), (), device, compiler, tile_overrides)


def dropout_add_layer_norm(x, residual, weight, bias, p, eps=1e-5, *, seed, out=None, residual_out=None,
                           device=None, compiler=None, **tile_overrides):
    """(layer_norm(s, weight, bias, eps), s) with s = dropout(x, p) + residual, rounded to x's
    dtype, in one pass. The mask depends only on `seed` (an int in [0, 2**64)) and each element's
    index in the (rows, hidden) view (see kernel_sources/norm.cuh): the same seed gives the same
    result on every target and schedule; kept elements are scaled by 1 / (1 - p); p = 0 is add +
    layer_norm exactly."""
    return launch.call(DROPOUT_ADD_LAYER_NORM, (x, residual, weight, bias, out, residual_out), (p, eps, seed), (),
                       device, compiler, tile_overrides)

