"""hkjit.attention: softmax(scale · Q Kᵀ [+ causal mask]) V, bf16/fp16 in, fp32 softmax and accumulation.

Shapes: q (B, H, Nq, D), k and v (B, HKV, Nk, D) for layout "bhnd", or (B, N, H, D) for "bnhd";
variable-length batches pack sequences as (total, H, D) delimited by int32 `cu_seqlens_q/k`
(B + 1 offsets). Any strides with the head dim contiguous are read in place. GQA/MQA: query head h
reads KV head h // (H // HKV). Causal masking is aligned to the bottom right (as FlashAttention):
query i of a sequence of Lq sees key j of Lk iff j <= i + Lk - Lq; a query that sees no key gets
O = 0 and LSE = -inf. LSE (fp32, natural log of the sum of exp of the scaled scores) is
(B, H, Nq), or (H, total_q) when varlen.

## The contract between this module and the per-arch kernel modules
Each kernel has a per-arch module with the GEMM's per-arch interface (hkjit/ops/gemm.py): `TILES`,
`SOURCE`, `configure(target, p, tiles) -> Config`, `template_params(cfg)`, `kernel_type(cfg)`,
`threads(cfg)`, `dynamic_smem(cfg)`, `checks(cfg)`, `launch_grid(cfg, p)`, `workspace(cfg, p)` (the
plan's workspace bytes, of them zeroed, and optionally scratch bytes: hkjit/op.py Plan),
`Args` and `fill(cfg, **kernel arguments) -> Args`; a module whose argument block depends on the
configuration also offers `args_type(cfg)`, which the plan takes instead of `Args`. Forward:
`_cdna_attention_fwd` (gfx942, gfx950) and `_hopper_attention_fwd` (sm_90a), picked by
`target.is_nvidia`.

`p` (validated here): batch, heads, kv_heads, n_q, n_k (per-sequence lengths; the maxima when
varlen), head_dim (64 or 128), dtype ("bfloat16" | "float16"), causal, varlen, and align (the byte
alignment, up to 16, of q, k and v's base pointers and strides; a module may ignore it).

Forward `fill(cfg, *, q, k, v, o, lse, q_strides, k_strides, v_strides, o_strides, lse_strides,
cu_seqlens_q, cu_seqlens_k, batch, heads, kv_heads, n_q, n_k, scale, workspace)`: pointers are
ints (device addresses; lse is 0 when the caller did not ask for it: the kernel writes none);
every `*_strides` is (batch, head, row) in elements, the head dim contiguous; lse is float32;
varlen: batch strides 0, rows index the packed rows, cu_seqlens_* int32 device pointers (0 when
not varlen), n_q / n_k the maximum lengths; scale the softmax scale (kernels use exp2 with
scale · log2(e) folded into Q).

Backward (`hkjit.attention_backward`, hkjit/ops/attention_backward.py): a per-arch backward module
offers, for each of its kernels, the GEMM's per-arch interface (`TILES`, `SOURCE`, `configure`,
`template_params`, `kernel_type`, `threads`, `dynamic_smem`, `checks`, `launch_grid`, `workspace`,
`Args`, `fill`, optionally `args_type`) and names the kernels `DQ` and `DKDV` (objects or modules). `fill(cfg, *, q, k, v,
o, d_o, lse, delta, dq, dk, dv, q_strides, k_strides, v_strides, o_strides, do_strides,
lse_strides, delta_strides, dq_strides, dk_strides, dv_strides, cu_seqlens_q, cu_seqlens_k, batch,
heads, kv_heads, n_q, n_k, scale, workspace, scratch)`: the forward's keywords plus d_o (the output
gradient, q's layout), o (the forward output), delta (float32, LSE's shape and strides), dq / dk /
dv (q's / k's / v's layouts) and their strides, each (batch, head, row) in elements; `do` is `d_o`
because `do` is a Python keyword. The DQ kernel writes delta and dq (dk, dv are 0); the DKDV kernel
reads delta and writes dk and dv (o and dq are 0); lse and delta rows are contiguous. Modules:
`_cdna_attention_bwd` (gfx942, gfx950) and `_hopper_attention_bwd` (sm_90a).
"""

import functools
import importlib.util
import math

from .. import launch, spec as spec_mod
from ..dtypes import DTYPES, MMA_INPUTS
from ..errors import DTypeError, InvalidArgumentError, TargetError
from ..op import Binding, Op, Param, Plan, dtype_of
from . import _cdna_attention_fwd, register

IN_DTYPES = MMA_INPUTS
HEAD_DIMS = (64, 128)
LAYOUTS = ("bhnd", "bnhd")
_HOPPER_FWD = f"{__package__}._hopper_attention_fwd"


def forward_module(target):
    """The per-arch forward module for `target`."""
    if not target.is_nvidia:
        return _cdna_attention_fwd
    if importlib.util.find_spec(_HOPPER_FWD) is None:
        raise TargetError("attention on sm_90a: not built yet")
    return importlib.import_module(_HOPPER_FWD)


@functools.lru_cache(maxsize=None)
def arch_tiles(modules: tuple, optional: str) -> tuple:
    """Tile keywords of `modules` and of the module named `optional` if it exists."""
    if importlib.util.find_spec(optional) is not None:
        modules += (importlib.import_module(optional),)
    return tuple(dict.fromkeys(t for m in modules for t in m.TILES))


def _alignment(ptr: int, strides: tuple, extents: tuple) -> int:
    """Byte alignment (up to 16) of every address a kernel forms from `ptr` and the (batch, head, row)
    element strides of dims of these extents: vector loads and TMA tensor maps need the head and batch
    strides aligned as well as the row stride. A dim of extent 1 is never stepped; a broadcast one
    (stride 0) counts as 8-byte aligned: TMA cannot map it, vector loads can."""
    x = ptr
    for s, n in zip(strides, extents):
        if n > 1:
            x |= int(s) * 2 if s else 8
    return 16 if x == 0 else min(16, x & -x)


def _bhnd_strides(name, arr, layout, varlen):
    """(batch, heads, rows, D) extents and (batch, head, row) strides of q, k, v or out."""
    want = 3 if varlen else 4
    if arr.ndim != want:
        form = "(total, heads, head_dim) packed rows" if varlen else \
            ("(batch, heads, seq, head_dim)" if layout == "bhnd" else "(batch, seq, heads, head_dim)")
        raise InvalidArgumentError(f"attention: {name} has shape {arr.shape}; with "
                                   f"{'cu_seqlens' if varlen else f'layout={layout!r}'} it must be {form}")
    if arr.shape[-1] > 1 and arr.strides[-1] != 1:
        raise InvalidArgumentError(f"attention: {name}'s head dim is strided ({arr.strides[-1]} elements); it must "
                                   f"be contiguous: pass {name}.contiguous()")
    if any(s < 0 for s in arr.strides):
        raise InvalidArgumentError(f"attention: {name} has negative strides {arr.strides}; pass a copy")
    if varlen:
        (rows, heads, d), (sr, sh, _) = arr.shape, arr.strides
        return (1, heads, rows, d), (0, sh, sr)
    if layout == "bhnd":
        (b, heads, rows, d), (sb, sh, sr, _) = arr.shape, arr.strides
    else:
        (b, rows, heads, d), (sb, sr, sh, _) = arr.shape, arr.strides
    return (b, heads, rows, d), (sb, sh, sr)


def dense_strides(shape, layout, varlen):
    if varlen:
        _, h, d = shape
        return (0, d, h * d)
    if layout == "bhnd":
        _, h, n, d = shape
        return (h * n * d, n * d, d)
    _, n, h, d = shape
    return (n * h * d, d, h * d)


def _check_cu(CQ, CK) -> int:
    for name, c in (("cu_seqlens_q", CQ), ("cu_seqlens_k", CK)):
        if c.dtype.name != "int32":
            raise DTypeError(f"attention: {name} has dtype {c.dtype.name}; it must be int32 (e.g. "
                             f"torch.int32 or np.int32)")
        if c.ndim != 1 or c.shape[0] < 2 or (c.strides[0] != 1):
            raise InvalidArgumentError(f"attention: {name} must be a contiguous 1-D array of batch + 1 offsets, "
                                       f"got shape {c.shape} strides {c.strides}")
    if CQ.shape != CK.shape:
        raise InvalidArgumentError(f"attention: cu_seqlens_q has {CQ.shape[0]} offsets, cu_seqlens_k "
                                   f"{CK.shape[0]}; both are batch + 1 long")
    return CQ.shape[0] - 1


def qkv_facts(Q, K, V, CQ, CK, options) -> dict:
    """Validated facts of q, k, v (and cu_seqlens): dtype, sizes, (batch, head, row) strides."""
    layout = options.get("layout", "bhnd")
    if layout not in LAYOUTS:
        raise InvalidArgumentError(f"attention: layout={layout!r}; give 'bhnd' (batch, heads, seq, head_dim) "
                                   "or 'bnhd' (batch, seq, heads, head_dim)")
    if (CQ is None) != (CK is None):
        raise InvalidArgumentError("attention: give both cu_seqlens_q and cu_seqlens_k for variable-length "
                                   "batches, or neither")
    varlen = CQ is not None
    dtype = dtype_of("attention", "q", Q.dtype, IN_DTYPES)
    for name, arr in (("k", K), ("v", V)):
        if arr.dtype.name != dtype:
            raise DTypeError(f"attention: q is {dtype} but {name} is {arr.dtype.name}; convert them to one dtype")
    (b, heads, n_q, d), q_strides = _bhnd_strides("q", Q, layout, varlen)
    (bk, kv_heads, n_k, dk), k_strides = _bhnd_strides("k", K, layout, varlen)
    vshape, v_strides = _bhnd_strides("v", V, layout, varlen)
    if d not in HEAD_DIMS:
        raise InvalidArgumentError(f"attention: head_dim={d}; supported head dims are 64 and 128 (pad the "
                                   "head dim with zeros, or split it)")
    if dk != d or vshape[3] != d:
        raise InvalidArgumentError(f"attention: head dims differ: q {d}, k {dk}, v {vshape[3]}; they must match")
    if bk != b or vshape[0] != b:
        raise InvalidArgumentError(f"attention: batch sizes differ: q {b}, k {bk}, v {vshape[0]}")
    if vshape[1] != kv_heads or vshape[2] != n_k:
        raise InvalidArgumentError(f"attention: k has {kv_heads} heads x {n_k} rows but v has {vshape[1]} x "
                                   f"{vshape[2]}; k and v must have the same shape")
    if min(b, heads, kv_heads, n_q, n_k) < 1:
        raise InvalidArgumentError(f"attention: empty input (q {Q.shape}, k {K.shape}); sizes must be >= 1")
    if heads % kv_heads:
        raise InvalidArgumentError(f"attention: q has {heads} heads, k and v {kv_heads}; the query heads must be "
                                   "a multiple of the key/value heads (GQA/MQA)")
    batch = b
    if varlen:
        batch = _check_cu(CQ, CK)
        n_q, n_k = options.get("max_seqlen_q"), options.get("max_seqlen_k")
    total_q = Q.shape[0] if varlen else None
    return dict(layout=layout, varlen=varlen, dtype=dtype, batch=batch, heads=heads, kv_heads=kv_heads, n_q=n_q,
                n_k=n_k, head_dim=d, q_strides=q_strides, k_strides=k_strides, v_strides=v_strides, total_q=total_q,
                total_k=K.shape[0] if varlen else None)


class AttentionOp(Op):
    name = "attention"
    params = (
        Param("batch", "size", doc="sequences"), Param("heads", "size", doc="query heads"),
        Param("kv_heads", "size", doc="key/value heads (heads is a multiple of it)"),
        Param("n_q", "size", doc="query length (the maximum when varlen)"),
        Param("n_k", "size", doc="key length (the maximum when varlen)"),
        Param("head_dim", "choice", 128, HEAD_DIMS, "head dimension"),
        Param("dtype", "dtype", "bfloat16", IN_DTYPES, "q, k, v and the output"),
        Param("causal", "bool", False, doc="bottom-right aligned causal mask"),
        Param("varlen", "bool", False, doc="packed sequences delimited by cu_seqlens"),
        Param("align", "choice", 16, (4, 8, 16), "byte alignment of q, k, v base pointers and strides"),
        Param("num_sms", "int", None, doc="SMs a persistent grid fills (sm_90a persistent=1; default: the target's)"),
    )
    shape_params = ("batch", "heads", "kv_heads", "n_q", "n_k", "head_dim")
    default_shape = {"batch": 16, "heads": 64, "kv_heads": 8, "n_q": 8192, "n_k": 8192, "head_dim": 128}

    @property
    def tile_keywords(self) -> tuple:
        """The union over the per-arch modules present (each rejects what it lacks)."""
        return arch_tiles((_cdna_attention_fwd,), _HOPPER_FWD)
    array_names = ("q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k")
    output_names = ("out", "lse")
    scalar_names = ("scale",)

    def plan_for(self, target, p, tiles) -> Plan:
        if p["heads"] % p["kv_heads"]:
            raise InvalidArgumentError(f"attention: heads={p['heads']} is not a multiple of kv_heads={p['kv_heads']}")
        mod = forward_module(target)
        cfg = mod.configure(target, p, tiles)
        threads, smem = mod.threads(cfg), mod.dynamic_smem(cfg)
        checks = (("threads", threads), ("dynamic_smem", smem)) + mod.checks(cfg)
        spec = spec_mod.Specialization("attention", target, mod.SOURCE, mod.kernel_type(cfg), "hkjit_attention",
                                       spec_mod.make_params(mod.template_params(cfg)), checks)
        ws_bytes, ws_zeroed = mod.workspace(cfg, p)
        args_type = mod.args_type(cfg) if hasattr(mod, "args_type") else mod.Args
        return Plan(spec, cfg, threads, smem, mod.launch_grid(cfg, p), args_type, functools.partial(mod.fill, cfg),
                    ws_bytes, ws_zeroed)

    def bind(self, arrays, options, device) -> Binding:
        Q, K, V, O, L, CQ, CK = (arrays[n] for n in self.array_names)
        f = qkv_facts(Q, K, V, CQ, CK, options)
        layout, varlen, dtype = f["layout"], f["varlen"], f["dtype"]
        batch, heads, kv_heads, n_q, n_k, d = (f[n] for n in ("batch", "heads", "kv_heads", "n_q", "n_k", "head_dim"))
        q_strides, k_strides, v_strides, total_q = f["q_strides"], f["k_strides"], f["v_strides"], f["total_q"]
        if O is not None:
            if O.shape != Q.shape:
                raise InvalidArgumentError(f"attention: out has shape {O.shape}; it must be q's, {Q.shape}")
            if O.dtype.name != dtype:
                raise DTypeError(f"attention: out has dtype {O.dtype.name}; it must be q's, {dtype}")
            o_strides = _bhnd_strides("out", O, layout, varlen)[1]
        else:
            o_strides = dense_strides(Q.shape, layout, varlen)
        lse_shape = (heads, total_q) if varlen else (batch, heads, n_q)
        if L is not None:
            if L.shape != lse_shape or L.dtype.name != "float32":
                raise InvalidArgumentError(f"attention: lse has shape {L.shape} dtype {L.dtype.name}; it must be a "
                                           f"float32 array of shape {lse_shape}")
            lse_strides = (0, L.strides[0], L.strides[1]) if varlen else L.strides
        else:
            lse_strides = (0, total_q, 1) if varlen else (heads * n_q, n_q, 1)
        if device is None:
            return None
        seqs = 1 if varlen else batch         # varlen: one packed (total, heads, D) array, batch stride 0
        align = min(_alignment(a.ptr, s, (seqs, h, n)) for a, s, h, n in
                    ((Q, q_strides, heads, n_q), (K, k_strides, kv_heads, n_k), (V, v_strides, kv_heads, n_k)))
        if align < 4:
            raise InvalidArgumentError("attention: q, k or v has an odd base address or stride (in elements); "
                                       "pass contiguous arrays")
        request = dict(batch=batch, heads=heads, kv_heads=kv_heads, n_q=n_q, n_k=n_k, head_dim=d, dtype=dtype,
                       causal=bool(options.get("causal", False)), varlen=varlen, align=align,
                       num_sms=getattr(device, "multiprocessors", None))
        want_lse = bool(options.get("return_lse", False))

        def args(ptrs, scalars):
            return dict(q=ptrs["q"], k=ptrs["k"], v=ptrs["v"], o=ptrs["out"], lse=ptrs["lse"], q_strides=q_strides,
                        k_strides=k_strides, v_strides=v_strides, o_strides=o_strides, lse_strides=lse_strides,
                        cu_seqlens_q=ptrs["cu_seqlens_q"], cu_seqlens_k=ptrs["cu_seqlens_k"], batch=batch,
                        heads=heads, kv_heads=kv_heads, n_q=n_q, n_k=n_k, scale=float(scalars[0]),
                        workspace=ptrs["workspace"])
        outputs = {}
        if O is None:
            outputs["out"] = (Q.shape, Q.dtype)
        if L is None and want_lse:
            outputs["lse"] = (lse_shape, DTYPES["float32"])
        return Binding(request, outputs, args, returns=("out", "lse") if want_lse else ("out",))

    def returns_for(self, options) -> tuple:
        return ("out", "lse") if options.get("return_lse") else ("out",)

    def torch_backward(self, inputs, outputs, grads, scalars, options) -> dict:
        """dq, dk, dv for torch.library.register_autograd (the compiled path; eager autograd uses
        `autograd_function`). Needs the forward's lse: `attention` asks for it when tracing."""
        from .attention_backward import attention_backward
        if outputs.get("lse") is None or outputs["lse"].numel() == 0:
            raise InvalidArgumentError("attention: the backward needs the forward's lse; call hkjit.attention "
                                       "(it asks for lse when its inputs require grad)")
        grad_out = grads["out"]
        if grad_out.stride(-1) != 1:
            grad_out = grad_out.contiguous()
        kw = {k: options[k] for k in ("causal", "layout", "max_seqlen_q", "max_seqlen_k") if k in options}
        dq, dk, dv = attention_backward(grad_out, inputs["q"], inputs["k"], inputs["v"], outputs["out"],
                                        outputs["lse"], scale=scalars[0], cu_seqlens_q=inputs["cu_seqlens_q"],
                                        cu_seqlens_k=inputs["cu_seqlens_k"], **kw)
        return {"q": dq, "k": dk, "v": dv}

    def static_figures(self, plan, report) -> None:
        cfg, mix = plan.config, report.get("instruction_mix")
        if plan.spec.target.is_amd and mix:
            per_wave = mix["main_loop"].get("mfma", 0)
            report["mfma_per_step"] = {"step": "KV block", "per_wave": per_wave, "per_block": per_wave * cfg["waves"],
                                       "tile_arithmetic": _cdna_attention_fwd.mfma_per_kv_block(cfg)}


ATTENTION = register(AttentionOp())


def _host_ints(name, obj):
    """The values of a cu_seqlens array as a list of ints (a device array is copied to the host)."""
    import numpy as np
    mod = type(obj).__module__
    if mod.startswith("torch"):
        obj = obj.detach().cpu().numpy()
    elif mod.startswith("cupy"):
        obj = obj.get()
    try:
        return np.asarray(obj).astype(np.int64).tolist()
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"attention: {name} could not be read as integers ({e})") from None


def _check_offsets(name, cu, total, given_max):
    """cu: batch + 1 offsets starting at 0, non-decreasing, within `total` rows -> the longest length."""
    if not cu or cu[0] != 0:
        raise InvalidArgumentError(f"attention: {name} must start at 0, got {cu[:4]}...")
    lengths = [b - a for a, b in zip(cu, cu[1:])]
    if any(n < 0 for n in lengths):
        i = next(i for i, n in enumerate(lengths) if n < 0)
        raise InvalidArgumentError(f"attention: {name} is not monotone: offset {i + 1} ({cu[i + 1]}) < offset {i} "
                                   f"({cu[i]}); offsets must be non-decreasing")
    if cu[-1] > total:
        raise InvalidArgumentError(f"attention: {name} ends at {cu[-1]} but the packed array has {total} rows")
    longest = max(lengths)
    if given_max is None:
        return max(longest, 1)
    if isinstance(given_max, bool) or not isinstance(given_max, int) or given_max < longest:
        raise InvalidArgumentError(f"attention: max_seqlen for {name} is {given_max!r}; it must be an int >= the "
                                   f"longest sequence ({longest})")
    return given_max


def prepare_call(q, k, causal, scale, layout, return_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                 max_seqlen_k) -> tuple:
    """(compile-time options, scale) of a forward or backward call; checks cu_seqlens' values."""
    if not isinstance(causal, bool) or not isinstance(return_lse, bool):
        raise InvalidArgumentError(f"attention: causal={causal!r}, return_lse={return_lse!r}; give True or False")
    if scale is None:
        d = getattr(q, "shape", (1,))[-1]
        scale = 1.0 / math.sqrt(d) if isinstance(d, int) and d > 0 else 1.0
    options = [("causal", causal), ("layout", layout), ("return_lse", return_lse)]
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise InvalidArgumentError("attention: give both cu_seqlens_q and cu_seqlens_k for variable-length "
                                   "batches, or neither")
    if cu_seqlens_q is not None:
        # Packed (total, heads, D) arrays: their row counts bound the offsets (other shapes: bind says so).
        rows_q, rows_k = (x.shape[0] if len(getattr(x, "shape", ())) == 3 else math.inf for x in (q, k))
        options += [("max_seqlen_q", _check_offsets("cu_seqlens_q", _host_ints("cu_seqlens_q", cu_seqlens_q),
                                                    rows_q, max_seqlen_q)),
                    ("max_seqlen_k", _check_offsets("cu_seqlens_k", _host_ints("cu_seqlens_k", cu_seqlens_k),
                                                    rows_k, max_seqlen_k))]
    elif max_seqlen_q is not None or max_seqlen_k is not None:
        raise InvalidArgumentError("attention: max_seqlen_q / max_seqlen_k go with cu_seqlens_q / cu_seqlens_k")
    return tuple(options), scale


def attention_forward(q, k, v, *, causal=False, scale=None, layout="bhnd", return_lse=False, out=None, lse=None,
                      cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, device=None,
                      compiler=None, **tile_overrides):
    """hkjit.attention without autograd (see `attention`)."""
    options, scale = prepare_call(q, k, causal, scale, layout, return_lse or lse is not None, cu_seqlens_q,
                                  cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return launch.call(ATTENTION, (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k), (scale,), options, device,
                       compiler, tile_overrides)


def _needs_grad(*arrays) -> bool:
    """torch tensors that autograd tracks (torch itself is never imported here)."""
    if not any(type(a).__module__.startswith("torch") and getattr(a, "requires_grad", False) for a in arrays):
        return False
    import torch
    return torch.is_grad_enabled()


def attention(q, k, v, *, causal=False, scale=None, layout="bhnd", return_lse=False, out=None, lse=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, device=None,
              compiler=None, **tile_overrides):
    """Scaled dot-product attention: softmax(scale · Q Kᵀ) V with fp32 softmax and accumulation.

    q: (B, H, Nq, D) ("bhnd") or (B, Nq, H, D) ("bnhd"); k, v: the same with HKV heads and Nk rows
    (H a multiple of HKV: GQA/MQA). D is 64 or 128; bf16 or fp16. Variable-length batches: q, k, v
    packed as (total, heads, D) and int32 cu_seqlens_q / cu_seqlens_k of B + 1 offsets (lengths
    may differ; max_seqlen_* default to the longest). causal: bottom-right aligned. scale defaults
    to 1/sqrt(D). Returns out (q's shape), or (out, lse) with return_lse: lse float32 (B, H, Nq), or
    (H, total_q) when varlen. out= / lse= write into given arrays. Tile overrides: block_kv, waves.
    torch tensors that require grad go through a torch.autograd.Function whose backward is
    hkjit.attention_backward (out= and lse= are not taken then).
    """
    kw = dict(causal=causal, scale=scale, layout=layout, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
              max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, device=device, compiler=compiler)
    if _needs_grad(q, k, v):
        if out is not None or lse is not None:
            raise InvalidArgumentError("attention: out= and lse= are not supported for tensors that require grad")
        if launch.tracing():
            # torch.compile: hkjit::attention carries the backward (AttentionOp.torch_backward,
            # registered by hkjit/frameworks); it needs lse, so the traced forward returns it.
            o, lse_ = attention_forward(q, k, v, return_lse=True, **kw, **tile_overrides)
            return (o, lse_) if return_lse else o
        from .attention_backward import autograd_function   # torch autograd only: keeps the import light
        o, lse_ = autograd_function().apply(q, k, v, kw, tile_overrides)
        return (o, lse_) if return_lse else o
    return attention_forward(q, k, v, return_lse=return_lse, out=out, lse=lse, **kw, **tile_overrides)
