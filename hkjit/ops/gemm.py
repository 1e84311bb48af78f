"""hkjit.gemm: C = alpha · A @ B (+ beta · C_in) (+ bias), bf16/fp16 in, fp32 accumulation.

Compile-time (specialised): dtypes, the layouts of A and B (row-major or transposed), the operands'
alignment classes, tile sizes, whether bias / C_in are present, the target. Run-time (kernel
arguments): M, N, K, leading dimensions, pointers, alpha, beta; so a new batch size reuses the
kernel on CDNA, and on Hopper wherever the tile rule picks the same tiles.

Per-arch modules (`_hopper_gemm`, `_cdna_gemm`) implement one interface: `TILES`, `SOURCE`,
`configure(target, params, tiles) -> Config`, `template_params`, `kernel_type`, `threads`,
`dynamic_smem`, `checks` (resource formulas the C++ type must agree with), `launch_grid`,
`workspace` ((workspace bytes, of them zeroed, scratch bytes): hkjit/op.py Plan), `Args` and
`fill(cfg, **kernel arguments)` (with `workspace` and `scratch` pointers).
"""

import functools

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, FLOAT_OUTPUTS, MMA_INPUTS
from ..errors import DTypeError, InvalidArgumentError
from ..op import Binding, Op, Param, Plan, dtype_of
from . import register

IN_DTYPES = MMA_INPUTS
OUT_DTYPES = FLOAT_OUTPUTS


def alignment(ptr: int, ld: int, itemsize: int = 2) -> int:
    """Largest power of two up to 16 dividing both the base address and the leading dimension in
    bytes: decides TMA (sm_90a) and the direct-to-LDS load width (CDNA)."""
    x = ptr | (ld * itemsize)
    return 16 if x == 0 else min(16, x & -x)


def _layout(name, shape, strides):
    """('row' | 'col', leading dimension) of a 2-D operand read in place, or an error."""
    rows, cols = shape
    sr, sc = strides
    if cols == 1 or rows == 1:
        # A vector: either layout reads it; call it row-major with a dense leading dimension.
        if (cols == 1 or sc == 1) and (rows == 1 or sr >= cols):
            return "row", (sr if rows > 1 else max(sr, cols))   # one row: any stride >= cols reads it
        if rows == 1 and sc >= 1:
            return "col", max(sc, rows) if cols > 1 else 1
    if sc == 1 and sr >= cols:
        return "row", sr
    if sr == 1 and sc >= rows:
        return "col", sc
    raise InvalidArgumentError(
        f"gemm: {name} with shape {tuple(shape)} and strides {tuple(strides)} (in elements) is neither "
        f"row-major nor transposed; pass {name}.contiguous() (torch) or a contiguous copy")


def _row_major_2d(name, arr, M, N):
    if arr.shape != (M, N) or arr.strides[1] != 1 or arr.strides[0] < N:
        raise InvalidArgumentError(f"gemm: {name} must be a row-major ({M}, {N}) array, got shape {arr.shape} "
                                   f"strides {arr.strides}")


def _half(nvidia: bool):
    """The per-arch half, imported on first use: a call on one vendor's device never loads the
    other vendor's half."""
    if nvidia:
        from . import _hopper_gemm as half
    else:
        from . import _cdna_gemm as half
    return half


class GemmOp(Op):
    name = "gemm"
    params = (
        Param("m", "size", doc="rows of A and C"), Param("n", "size", doc="columns of B and C"),
        Param("k", "size", doc="the inner dimension"),
        Param("dtype", "dtype", "bfloat16", IN_DTYPES, "A and B"),
        Param("out_dtype", "dtype", None, OUT_DTYPES, "C (default: dtype)"),
        Param("a_layout", "choice", "row", ("row", "col"), "row-major A or a transposed view"),
        Param("b_layout", "choice", "row", ("row", "col"), "row-major B or a transposed view (A @ B.T)"),
        Param("bias", "bool", False), Param("c", "bool", False, doc="beta * C_in is added"),
        Param("num_sms", "int", None, doc="SMs/CUs the tile rule fills (default: the target's)"),
        Param("a_align", "choice", 16, (2, 4, 8, 16), "byte alignment of A's base and leading dimension"),
        Param("b_align", "choice", 16, (2, 4, 8, 16)), Param("c_align", "choice", 16, (2, 4, 8, 16)),
        Param("specialize_shapes", "bool", False, doc="key the kernel on M, N, K too"),
    )
    shape_params = ("m", "n", "k")
    default_shape = {"m": 8192, "n": 8192, "k": 8192}
    stages_transposed = True           # transposed operands are read in place: stage them as they are
    array_names = ("a", "b", "out", "bias", "c")
    output_names = ("out",)
    scalar_names = ("alpha", "beta")

    @property
    def tile_keywords(self) -> tuple:
        """The union over both per-arch halves (each rejects what it lacks)."""
        return tuple(dict.fromkeys(_half(nvidia=True).TILES + _half(nvidia=False).TILES))

    @staticmethod
    def arch(target):
        return _half(target.is_nvidia)

    def plan_for(self, target, p, tiles) -> Plan:
        p = dict(p, out_dtype=p["out_dtype"] or p["dtype"], num_sms=p["num_sms"] or target.compute_units)
        mod = self.arch(target)
        cfg = mod.configure(target, p, tiles)
        params = mod.template_params(cfg)
        if p["specialize_shapes"]:
            params.update(m=p["m"], n=p["n"], k=p["k"])
        threads, smem = mod.threads(cfg), mod.dynamic_smem(cfg)
        checks = (("threads", threads), ("dynamic_smem", smem)) + mod.checks(cfg)
        spec = spec_mod.Specialization("gemm", target, mod.SOURCE, mod.kernel_type(cfg), "hkjit_gemm",
                                       spec_mod.make_params(params), checks)
        return Plan(spec, cfg, threads, smem, mod.launch_grid(cfg, p), mod.Args, functools.partial(mod.fill, cfg),
                    *mod.workspace(cfg, p))

    def bind(self, arrays, options, device) -> Binding:
        A, B, O, Bias, C = (arrays[n] for n in self.array_names)
        if A.ndim != 2 or B.ndim != 2:
            raise InvalidArgumentError(f"gemm: a and b must be 2-D, got shapes {A.shape} and {B.shape}")
        (M, K), (K2, N) = A.shape, B.shape
        if K != K2:
            raise InvalidArgumentError(f"gemm: inner dimensions differ: a is {M}×{K}, b is {K2}×{N}")
        if min(M, N, K) < 1:
            raise InvalidArgumentError(f"gemm: empty operand ({M}×{K} @ {K2}×{N}); sizes must be >= 1")
        in_dtype = dtype_of("gemm", "a", A.dtype, IN_DTYPES)
        if B.dtype.name != in_dtype:
            raise DTypeError(f"gemm: a is {in_dtype} but b is {B.dtype.name}; convert one so both match")
        out_dtype = options.get("out_dtype")
        out_dtype = DTYPES[GEMM_OUT.check("gemm", out_dtype)] if out_dtype is not None else None
        if O is not None:
            if out_dtype is not None and out_dtype != O.dtype:
                raise DTypeError(f"gemm: out has dtype {O.dtype.name} but out_dtype={out_dtype.name!r}")
            out_dtype = O.dtype
            _row_major_2d("out", O, M, N)
        out_dtype = dtype_of("gemm", "out", out_dtype or A.dtype, OUT_DTYPES)
        if Bias is not None and (Bias.shape != (N,) or (N > 1 and Bias.strides[0] != 1)):
            raise InvalidArgumentError(f"gemm: bias must be a contiguous ({N},) vector, got shape {Bias.shape}")
        if C is not None:
            _row_major_2d("c", C, M, N)
        for name, arr in (("bias", Bias), ("c", C)):
            if arr is not None and arr.dtype.name != out_dtype:
                raise DTypeError(f"gemm: {name} has dtype {arr.dtype.name}; it must have the output dtype "
                                 f"({out_dtype}); convert it first")
        a_layout, lda = _layout("a", A.shape, A.strides)
        b_layout, ldb = _layout("b", B.shape, B.strides)
        out_size = DTYPES[out_dtype].itemsize
        ldc = O.strides[0] if O is not None else N
        a_align, b_align = alignment(A.ptr, lda), alignment(B.ptr, ldb)
        c_align = alignment(O.ptr if O is not None else 0, ldc, out_size)
        if device is None:
            return None
        if device.target.is_amd and min(a_align, b_align) < 4:
            return Binding({}, {}, None, aligned_copies=("a", "b"))
        request = dict(m=M, n=N, k=K, dtype=in_dtype, out_dtype=out_dtype, a_layout=a_layout, b_layout=b_layout,
                       bias=Bias is not None, c=C is not None, num_sms=getattr(device, "multiprocessors", None),
                       a_align=a_align, b_align=b_align, c_align=c_align)
        a_strides = (lda, 1) if a_layout == "row" else (1, lda)
        b_strides = (ldb, 1) if b_layout == "row" else (1, ldb)
        ldc_in = C.strides[0] if C is not None else 0

        def args(p, scalars):
            return dict(a=p["a"], b=p["b"], out=p["out"], bias=p["bias"], c=p["c"], a_strides=a_strides,
                        b_strides=b_strides, ldc=ldc, ldc_in=ldc_in, m=M, n=N, k=K, alpha=float(scalars[0]),
                        beta=float(scalars[1]), workspace=p["workspace"], scratch=p["scratch"])
        outputs = {} if O is not None else {"out": ((M, N), DTYPES[out_dtype])}
        return Binding(request, outputs, args)

    def static_figures(self, plan, report) -> None:
        cfg, mix = plan.config, report.get("instruction_mix")
        if plan.spec.target.is_amd and mix:
            per_wave = mix["main_loop"].get("mfma", 0)
            expected = cfg["block_m"] * cfg["block_n"] * cfg["block_k"] // (cfg["mfma_m"] ** 2 * cfg["mfma_k"])
            report["mfma_per_k_step"] = {"per_wave": per_wave, "per_block": per_wave * cfg["waves"],
                                         "tile_arithmetic": expected}


GEMM = register(GemmOp())
GEMM_OUT = next(p for p in GEMM.params if p.name == "out_dtype")


def gemm(a, b, *, out=None, out_dtype=None, bias=None, c=None, alpha=1.0, beta=0.0, device=None,
         compiler=None, **tile_overrides):
    """C = alpha · (A @ B) + beta · c + bias, with fp32 accumulation.

    a: (M, K), b: (K, N), bf16 or fp16 (both the same), row-major or transposed views.
    out: optional (M, N) row-major array to write into; out_dtype: bfloat16 (default: the input
    dtype), float16 or float32. bias: optional (N,) vector; c: optional (M, N) array scaled by beta.
    device: for host (NumPy) inputs, 'cuda:N', 'rocm:N' or 'sim:gfx950'; GPU arrays decide it.
    Tile overrides: block_m, block_n, block_k, warps/waves, stages, group_m, ...
    """
    return launch.call(GEMM, (a, b, out, bias, c), (alpha, beta),
                       (("out_dtype", out_dtype),) if out_dtype is not None else (), device, compiler, tile_overrides)
