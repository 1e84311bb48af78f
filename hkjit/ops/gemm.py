"""hkjit.gemm: C = alpha · A @ B (+ beta · C_in) (+ bias), bf16/fp16 in, fp32 accumulation.

Compile-time (specialised): dtypes, the layouts of A and B (row-major or transposed), tile sizes,
whether bias / C_in are present, the target. Run-time (kernel arguments): M, N, K, leading
dimensions, pointers, alpha, beta; so a new batch size or sequence length reuses the kernel.
Tile sizes follow the arch module's table for the shape class and can be overridden by keyword.
"""

from .. import interop, jit, runtime, spec as spec_mod, targets
from ..dtypes import DTYPES, dtype as to_dtype
from ..errors import DTypeError, DeviceError, InvalidArgumentError, UnsupportedArrayError
from . import register

IN_DTYPES = ("bfloat16", "float16")
OUT_DTYPES = ("bfloat16", "float16", "float32")


def _arch_module(target):
    if target.is_nvidia:
        from . import _hopper_gemm as mod
    else:
        from . import _cdna_gemm as mod
    return mod


def _check_dtype(name, value, allowed):
    d = to_dtype(value)
    if d.name not in allowed:
        raise DTypeError(f"gemm: {name} has dtype {d.name}; it must be one of {', '.join(allowed)}")
    return d.name


def _layout(name, shape, strides):
    """('row' | 'col', leading dimension) of a 2-D operand read in place, or an error."""
    rows, cols = shape
    sr, sc = strides
    if cols == 1 or rows == 1:
        # A vector: either layout reads it; call it row-major with a dense leading dimension.
        if (cols == 1 or sc == 1) and (rows == 1 or sr >= cols):
            return "row", (sr if rows > 1 else cols)
        if rows == 1 and sc >= 1:
            return "col", max(sc, rows) if cols > 1 else 1
    if sc == 1 and sr >= cols:
        return "row", sr
    if sr == 1 and sc >= rows:
        return "col", sc
    raise InvalidArgumentError(
        f"gemm: {name} with shape {tuple(shape)} and strides {tuple(strides)} (in elements) is neither "
        f"row-major nor transposed; pass {name}.contiguous() (torch) or a contiguous copy")


class GemmOp:
    name = "gemm"
    tile_keywords = ("block_m", "block_n", "block_k", "warps", "waves", "consumers", "stages", "group_m",
                     "split_k")

    def specialize(self, target, *, m, n, k, dtype="bfloat16", out_dtype=None, a_layout="row",
                   b_layout="row", bias=False, c=False, num_sms=None, specialize_shapes=False, **overrides):
        target = targets.parse(target)
        in_dtype = _check_dtype("A/B", dtype, IN_DTYPES)
        out_dtype = _check_dtype("out", out_dtype or in_dtype, OUT_DTYPES)
        for dim, v in (("m", m), ("n", n), ("k", k)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidArgumentError(f"gemm: {dim}={v!r}; sizes must be ints >= 1")
        for lname, lv in (("a_layout", a_layout), ("b_layout", b_layout)):
            if lv not in ("row", "col"):
                raise InvalidArgumentError(f"gemm: {lname}={lv!r}; use 'row' (row-major) or 'col' (transposed)")
        unknown = set(overrides) - set(self.tile_keywords)
        if unknown:
            raise InvalidArgumentError(f"gemm: unknown keyword(s) {', '.join(sorted(unknown))}; tile overrides "
                                       f"are {', '.join(self.tile_keywords)}")
        mod = _arch_module(target)
        cfg = mod.choose_config(m, n, k, a_kmajor=(a_layout == "row"), b_kmajor=(b_layout == "col"),
                                in_dtype=in_dtype, out_dtype=out_dtype, bias=bool(bias), c=bool(c),
                                target=target, num_sms=num_sms or target.compute_units,
                                overrides=overrides)
        params = dict(cfg.params)
        if specialize_shapes:
            params.update(m=m, n=n, k=k)
        spec = spec_mod.Specialization("gemm", target, mod.SOURCE, mod.kernel_type(cfg), "hkjit_gemm",
                                       spec_mod.make_params(params))
        return spec, cfg


GEMM = register(GemmOp())


class _Launcher:
    """Everything a repeat call with the same signature needs: no dict of options, no key hashing."""
    __slots__ = ("kernel", "cfg", "mod", "grid", "block", "smem", "device")

    def __init__(self, kernel, cfg, mod, grid, device):
        self.kernel, self.cfg, self.mod, self.grid, self.device = kernel, cfg, mod, grid, device
        self.block = (mod.threads(cfg), 1, 1)
        self.smem = mod.dynamic_smem(cfg)


_launchers: dict = {}


def _device_for(arrays, device):
    gpu = [x for x in arrays if x is not None and x.device != "cpu"]
    if gpu:
        kinds = {(x.device, x.index) for x in gpu}
        if len(kinds) > 1:
            raise DeviceError("gemm: arrays are on different devices " + ", ".join(f"{k}:{i}" for k, i in sorted(kinds))
                              + "; move them to one device first")
        kind, index = kinds.pop()
        if len(gpu) != len([x for x in arrays if x is not None]):
            raise DeviceError(f"gemm: some arrays are on {kind}:{index} and some in host memory; "
                              "move them to one device first")
        if device is not None and runtime.parse(device) != (kind, str(index)):
            raise DeviceError(f"gemm: device={device!r} but the arrays are on {kind}:{index}")
        return runtime.get(kind, index)
    return runtime.from_string(device) if device is not None else runtime.default_device()


def gemm(a, b, *, out=None, out_dtype=None, bias=None, c=None, alpha=1.0, beta=0.0, device=None,
         compiler=None, **tile_overrides):
    """C = alpha · (A @ B) + beta · c + bias, with fp32 accumulation.

    a: (M, K), b: (K, N), bf16 or fp16 (both the same), row-major or transposed views.
    out: optional (M, N) row-major array to write into; out_dtype: bfloat16 (default: the input
    dtype), float16 or float32. bias: optional (N,) vector; c: optional (M, N) array scaled by beta.
    device: for host (NumPy) inputs, 'cuda:N', 'rocm:N' or 'sim:gfx950'; GPU arrays decide it.
    Tile overrides: block_m, block_n, block_k, warps/waves, stages, group_m, ...
    """
    A, B = interop.describe(a), interop.describe(b)
    if A.ndim != 2 or B.ndim != 2:
        raise InvalidArgumentError(f"gemm: a and b must be 2-D, got shapes {A.shape} and {B.shape}")
    (M, K), (K2, N) = A.shape, B.shape
    if K != K2:
        raise InvalidArgumentError(f"gemm: inner dimensions differ: a is {M}×{K}, b is {K2}×{N}")
    if min(M, N, K) < 1:
        raise InvalidArgumentError(f"gemm: empty operand ({M}×{K} @ {K2}×{N}); sizes must be >= 1")
    in_dtype = _check_dtype("a", A.dtype.name, IN_DTYPES)
    if B.dtype.name != in_dtype:
        raise DTypeError(f"gemm: a is {in_dtype} but b is {B.dtype.name}; convert one so both match")
    O = interop.describe(out) if out is not None else None
    if O is not None:
        if out_dtype is not None and to_dtype(out_dtype).name != O.dtype.name:
            raise DTypeError(f"gemm: out has dtype {O.dtype.name} but out_dtype={out_dtype!r}")
        out_dtype = O.dtype.name
    out_dtype = _check_dtype("out", out_dtype or in_dtype, OUT_DTYPES)
    Bias = interop.describe(bias) if bias is not None else None
    C = interop.describe(c) if c is not None else None
    _check_epilogue(Bias, C, O, M, N)
    a_layout, lda = _layout("a", A.shape, A.strides)
    b_layout, ldb = _layout("b", B.shape, B.strides)
    dev = _device_for([A, B, O, Bias, C], device)
    sig = (in_dtype, out_dtype, a_layout, b_layout, M, N, K, Bias is None, C is None, dev.kind, dev.index,
           compiler, tuple(sorted(tile_overrides.items())) if tile_overrides else ())
    launcher = _launchers.get(sig)
    if launcher is None:
        launcher = _make_launcher(dev, M, N, K, in_dtype, out_dtype, a_layout, b_layout, Bias, C, compiler,
                                  tile_overrides)
        _launchers[sig] = launcher
    if A.device == "cpu":
        return _run_host(launcher, A, B, O, Bias, C, M, N, K, a_layout, b_layout, out_dtype, alpha, beta)
    if O is None:
        out = _allocate_like(A, (M, N), out_dtype)
        O = interop.describe(out)
    args = launcher.mod.make_args(launcher.cfg, A.ptr, lda, B.ptr, ldb, O.ptr, O.strides[0], M, N, K,
                                  bias_ptr=Bias.ptr if Bias else 0, c_ptr=C.ptr if C else 0,
                                  ldc_in=C.strides[0] if C else 0, alpha=alpha, beta=beta)
    stream = runtime.stream_for(dev, A.framework)
    launcher.kernel.launch(launcher.grid, launcher.block, launcher.smem, args, stream)
    if A.framework == "jax":
        dev.synchronize(stream)  # JAX does not know about this stream: finish before it reads `out`
    return out


def _check_epilogue(Bias, C, O, M, N):
    if O is not None and (O.shape != (M, N) or O.strides[1] != 1 or O.strides[0] < N):
        raise InvalidArgumentError(f"gemm: out must be a row-major ({M}, {N}) array, got shape {O.shape} "
                                   f"strides {O.strides}")
    if Bias is not None:
        if Bias.shape != (N,) or (N > 1 and Bias.strides[0] != 1):
            raise InvalidArgumentError(f"gemm: bias must be a contiguous ({N},) vector, got shape {Bias.shape}")
        if Bias.dtype.name not in ("float32", "bfloat16", "float16"):
            raise DTypeError(f"gemm: bias dtype {Bias.dtype.name} is not supported")
    if C is not None and (C.shape != (M, N) or C.strides[1] != 1 or C.strides[0] < N):
        raise InvalidArgumentError(f"gemm: c must be a row-major ({M}, {N}) array, got shape {C.shape}")


def _make_launcher(dev, M, N, K, in_dtype, out_dtype, a_layout, b_layout, Bias, C, compiler, overrides):
    num_sms = getattr(dev, "multiprocessors", None)
    spec, cfg = GEMM.specialize(dev.target, m=M, n=N, k=K, dtype=in_dtype, out_dtype=out_dtype,
                                a_layout=a_layout, b_layout=b_layout, bias=Bias is not None,
                                c=C is not None, num_sms=num_sms, **overrides)
    mod = _arch_module(dev.target)
    kernel = jit.load_spec(spec, dev, mod.dynamic_smem(cfg), compiler)
    return _Launcher(kernel, cfg, mod, mod.grid(M, N, K, cfg, num_sms or dev.target.compute_units), dev)


def _allocate_like(template, shape, dtype_name):
    return interop.empty(template, shape, DTYPES[dtype_name])


def _run_host(launcher, A, B, O, Bias, C, M, N, K, a_layout, b_layout, out_dtype, alpha, beta):
    """NumPy inputs: copy dense copies (in each operand's own layout) to the device, run, copy back."""
    import numpy as np
    dev = launcher.device
    host_out = O.obj if O is not None else np.empty((M, N), dtype=interop.numpy_dtype(DTYPES[out_dtype]))
    a_host, lda = interop.dense_host_copy(A, a_layout)
    b_host, ldb = interop.dense_host_copy(B, b_layout)
    with interop.DeviceStaging(dev) as stage:
        a_ptr, b_ptr = stage.upload(a_host), stage.upload(b_host)
        bias_ptr = stage.upload(interop.dense_host_copy(Bias, "row")[0]) if Bias is not None else 0
        c_ptr = stage.upload(interop.dense_host_copy(C, "row")[0]) if C is not None else 0
        o_ptr = stage.alloc(M * N * DTYPES[out_dtype].itemsize)
        args = launcher.mod.make_args(launcher.cfg, a_ptr, lda, b_ptr, ldb, o_ptr, N, M, N, K, bias_ptr=bias_ptr,
                                      c_ptr=c_ptr, ldc_in=N if C is not None else 0, alpha=alpha, beta=beta)
        launcher.kernel.launch(launcher.grid, launcher.block, launcher.smem, args, 0)
        dev.synchronize(0)
        if host_out.flags.c_contiguous:
            stage.download(o_ptr, host_out)
        else:
            dense = np.empty((M, N), dtype=host_out.dtype)
            stage.download(o_ptr, dense)
            host_out[...] = dense
    return host_out
