"""hkjit.attention_backward: dQ, dK, dV of hkjit.attention, deterministic, and the torch autograd Function.

Two kernels, two registered ops (launched in this order by `attention_backward`):
  attention_bwd_dq    Delta = rowsum(dO ∘ O) (an output, fp32, shaped like LSE) and dQ
  attention_bwd_dkdv  dK and dV, reading Delta; GQA gradients summed over each KV head's query heads
                      inside one workgroup, in a fixed order (no atomics: the same inputs give the
                      same bits); on sm_90a also dQ, into the dq it is given (its `updated_names`,
                      so torch.compile and jax.jit know; it returns dk, dv, dq)
Both take the forward's parameters (`p` of hkjit/ops/attention.py) and the same layouts.

The backward modules' contract is in hkjit/ops/attention.py's docstring (beside the forward's).
"""

import functools

from .. import interop, launch, spec as spec_mod
from ..dtypes import DTYPES
from ..errors import DeviceError, InvalidArgumentError
from ..op import Binding, Op, Plan
from . import _cdna_attention_bwd, _hopper_attention_bwd, register
from .attention import ATTENTION, _alignment, _bhnd_strides, attention_forward, dense_strides, prepare_call, qkv_facts

ARRAYS = ("q", "k", "v", "out", "grad_out", "lse", "delta", "dq", "dk", "dv", "cu_seqlens_q", "cu_seqlens_k")


def backward_module(target):
    return _hopper_attention_bwd if target.is_nvidia else _cdna_attention_bwd


class AttentionBackwardOp(Op):
    params = ATTENTION.params
    shape_params = ATTENTION.shape_params
    default_shape = ATTENTION.default_shape
    array_names = ARRAYS
    scalar_names = ("scale",)

    def __init__(self, kernel: str, outputs: tuple, updated: tuple = ()):
        self.kernel, self.name, self.output_names = kernel, f"attention_bwd_{kernel}", outputs
        self.updated_names = updated

    @property
    def tile_keywords(self) -> tuple:
        """The union over the per-arch kernels (each rejects what it lacks)."""
        kernels = (getattr(m, self.kernel.upper()) for m in (_cdna_attention_bwd, _hopper_attention_bwd))
        return tuple(dict.fromkeys(t for k in kernels for t in k.TILES))

    def plan_for(self, target, p, tiles) -> Plan:
        if p["heads"] % p["kv_heads"]:
            raise InvalidArgumentError(f"attention: heads={p['heads']} is not a multiple of kv_heads={p['kv_heads']}")
        k = getattr(backward_module(target), self.kernel.upper())
        cfg = k.configure(target, p, tiles)
        threads, smem = k.threads(cfg), k.dynamic_smem(cfg)
        spec = spec_mod.Specialization(self.name, target, k.SOURCE, k.kernel_type(cfg), f"hkjit_{self.name}",
                                       spec_mod.make_params(k.template_params(cfg)),
                                       (("threads", threads), ("dynamic_smem", smem)) + k.checks(cfg))
        ws = k.workspace(cfg, p)
        args_type = k.args_type(cfg) if hasattr(k, "args_type") else k.Args    # the block may depend on cfg
        return Plan(spec, cfg, threads, smem, k.launch_grid(cfg, p), args_type, functools.partial(k.fill, cfg), *ws)

    def bind(self, arrays, options, device) -> Binding:
        a = arrays
        f = qkv_facts(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], options)
        layout, varlen, dtype = f["layout"], f["varlen"], f["dtype"]
        stats_shape = (f["heads"], f["total_q"]) if varlen else (f["batch"], f["heads"], f["n_q"])
        strides = {"q_strides": f["q_strides"], "k_strides": f["k_strides"], "v_strides": f["v_strides"]}
        # array -> (the array whose shape it has, its name among fill's keywords)
        shaped_like = {"grad_out": ("q", "do"), "out": ("q", "o"), "dq": ("q", "dq"), "dk": ("k", "dk"),
                       "dv": ("v", "dv")}
        for name, (like, key) in shaped_like.items():
            arr = a[name]
            if arr is None:
                if name == "grad_out" or (name == "out" and self.kernel == "dq"):
                    raise InvalidArgumentError(f"attention backward: {name} is required")
                strides[f"{key}_strides"] = \
                    dense_strides(a[like].shape, layout, varlen) if name in self.output_names else (0, 0, 0)
                continue
            if arr.shape != a[like].shape or arr.dtype.name != dtype:
                raise InvalidArgumentError(f"attention backward: {name} has shape {arr.shape} dtype {arr.dtype.name}; "
                                           f"it must have {like}'s, {a[like].shape} {dtype}")
            strides[f"{key}_strides"] = _bhnd_strides(name, arr, layout, varlen)[1]
        for name in ("lse", "delta"):
            arr = a[name]
            if arr is None:
                if name == "lse" or self.kernel == "dkdv":
                    raise InvalidArgumentError(f"attention backward: {name} is required")
                st = (0, f["total_q"], 1) if varlen else (f["heads"] * f["n_q"], f["n_q"], 1)
            else:
                if arr.shape != stats_shape or arr.dtype.name != "float32":
                    raise InvalidArgumentError(f"attention backward: {name} has shape {arr.shape} dtype "
                                               f"{arr.dtype.name}; it must be float32 of shape {stats_shape}")
                st = (0,) + tuple(arr.strides) if varlen else tuple(arr.strides)
            strides[f"{name}_strides"] = st
        if device is None:
            return None
        seqs = 1 if varlen else f["batch"]        # varlen: one packed array, batch stride 0
        sq, skv = (seqs, f["heads"], f["n_q"]), (seqs, f["kv_heads"], f["n_k"])
        align = min(_alignment(a[n].ptr, strides[f"{s}_strides"], e)
                    for n, s, e in (("q", "q", sq), ("k", "k", skv), ("v", "v", skv), ("grad_out", "do", sq))
                    + ((("out", "o", sq),) if self.kernel == "dq" else ()))
        if align < 4:
            raise InvalidArgumentError("attention backward: an odd base address or stride (in elements); pass "
                                       "contiguous arrays")
        request = dict(batch=f["batch"], heads=f["heads"], kv_heads=f["kv_heads"], n_q=f["n_q"], n_k=f["n_k"],
                       head_dim=f["head_dim"], dtype=dtype, causal=bool(options.get("causal", False)), varlen=varlen,
                       align=align)
        sizes = {n: f[n] for n in ("batch", "heads", "kv_heads", "n_q", "n_k")}

        def args(ptrs, scalars):
            return dict(q=ptrs["q"], k=ptrs["k"], v=ptrs["v"], o=ptrs["out"], d_o=ptrs["grad_out"], lse=ptrs["lse"],
                        delta=ptrs["delta"], dq=ptrs["dq"], dk=ptrs["dk"], dv=ptrs["dv"],
                        cu_seqlens_q=ptrs["cu_seqlens_q"], cu_seqlens_k=ptrs["cu_seqlens_k"], scale=float(scalars[0]),
                        workspace=ptrs["workspace"], scratch=ptrs["scratch"], **sizes, **strides)
        outputs = {}
        for name in self.output_names:
            if a[name] is None:
                like = {"dq": "q", "dk": "k", "dv": "v"}.get(name)
                outputs[name] = (a[like].shape, a[like].dtype) if like else (stats_shape, DTYPES["float32"])
        # the sm_90a dK/dV kernel writes dq too (one pass): a call on host arrays brings it back
        updates = getattr(getattr(backward_module(device.target), self.kernel.upper()), "UPDATES", ())
        return Binding(request, outputs, args, returns=self.returns_for(options), updates=updates)


    def static_figures(self, plan, report) -> None:
        cfg, mix = plan.config, report.get("instruction_mix")
        if plan.spec.target.is_amd and mix:
            per_wave = mix["main_loop"].get("mfma", 0)
            k = getattr(_cdna_attention_bwd, self.kernel.upper())
            report["mfma_per_step"] = {"step": "KV block" if self.kernel == "dq" else "query block",
                                       "per_wave": per_wave, "per_block": per_wave * cfg["waves"],
                                       "tile_arithmetic": k.mfma_per_step(cfg)}


DQ_OP = register(AttentionBackwardOp("dq", ("dq", "delta")))
# dq: an input the sm_90a dK/dV kernel writes (one pass), declared for every target so a compiled
# graph's schema does not depend on the GPU it is traced for; the call returns it after dk, dv
DKDV_OP = register(AttentionBackwardOp("dkdv", ("dk", "dv"), updated=("dq",)))


def _check_second(arrays, options, device, tiles):
    """Everything the dK/dV launch would refuse, before the dQ kernel runs (nothing launched on bad
    input): its arrays (delta stands in as lse, which has its shape), the device, its plan."""
    described = {n: None if a is None else interop.describe(a) for n, a in arrays.items()}
    try:
        dev = launch.device_for(DKDV_OP.name, tuple(described.values()), device)
    except DeviceError:
        DKDV_OP.bind(described, dict(options), None)
        raise
    binding = DKDV_OP.bind(described, dict(options), dev)
    DKDV_OP.plan(dev.target, **binding.request, **tiles)


def attention_backward(grad_out, q, k, v, out, lse, *, causal=False, scale=None, layout="bhnd", dq=None, dk=None,
                       dv=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                       device=None, compiler=None, **tile_overrides):
    """Gradients (dq, dk, dv) of `hkjit.attention(q, k, v, causal=, scale=, layout=, cu_seqlens_*=)`
    given its output `out`, its `lse` (return_lse=True) and the output gradient `grad_out` (q's
    shape). dq / dk / dv: optional arrays to write into. Deterministic. Tile overrides: block_kv
    (the dQ kernel's KV block), block_q (the dK/dV kernel's query block); on sm_90a also
    dq_stages and dkdv_stages (each kernel's ring depth), dq_warp, load_warps, dkdv_producer
    ("tma", the default where it can serve the call, or "cpasync": how the dK/dV kernel's producer
    loads) and dkdv_consumer (variants of its consumer step: wait placement, stmatrix;
    hkjit/ops/_hopper_attention_bwd.py)."""
    options, scale = prepare_call(q, k, causal, scale, layout, True, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k)
    unknown = sorted(set(tile_overrides) - set(DQ_OP.tile_keywords) - set(DKDV_OP.tile_keywords))
    if unknown:
        raise InvalidArgumentError(f"attention_backward: unknown tile override(s) {', '.join(unknown)}; valid: "
                                   f"{', '.join(DQ_OP.tile_keywords + DKDV_OP.tile_keywords)}")
    pick = lambda op: {n: v for n, v in tile_overrides.items() if n in op.tile_keywords}  # noqa: E731
    arrays = dict(q=q, k=k, v=v, out=out, grad_out=grad_out, lse=lse, delta=None, dq=dq, dk=None, dv=None,
                  cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    # fake tensors, and torch.compile's tracing (dynamo): the traced ops' fake implementations check
    if not launch.symbolic(arrays.values()) and not launch.tracing():
        _check_second(dict(arrays, out=None, dq=None, delta=lse, dk=dk, dv=dv), options, device, pick(DKDV_OP))
    dq, delta = launch.call(DQ_OP, tuple(arrays[n] for n in ARRAYS), (scale,), options, device, compiler, pick(DQ_OP))
    arrays.update(out=None, dq=dq, delta=delta, dk=dk, dv=dv)
    # dq comes back too: the sm_90a kernel writes it, and inside jax.jit the written dq is a new value
    dk, dv, dq = launch.call(DKDV_OP, tuple(arrays[n] for n in ARRAYS), (scale,), options, device, compiler,
                             pick(DKDV_OP))
    return dq, dk, dv


@functools.lru_cache(maxsize=1)
def autograd_function():
    """torch.autograd.Function: hkjit.attention forward, attention_backward backward. apply(q, k, v,
    keywords, forward tile overrides) -> (out, lse); lse is not differentiable."""
    import torch

    class AttentionFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, kw, tiles):
            o, lse = attention_forward(q, k, v, return_lse=True, **kw, **tiles)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.kw = kw
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, grad_out, _grad_lse):
            q, k, v, o, lse = ctx.saved_tensors
            if grad_out.stride(-1) != 1:
                grad_out = grad_out.contiguous()
            dq, dk, dv = attention_backward(grad_out, q, k, v, o, lse, **ctx.kw)
            return dq, dk, dv, None, None

    return AttentionFunction
