"""The attention kernels' argument blocks, the same on every target: the forward's
(attention_fwd_cdna<...> and attention_fwd_hopper<...> declare one `args` layout) with the checks
and packing both per-arch forward `fill`s share, and the backward's (hkjit_attn::bwd_args in
attention_bwd_cdna.hip, hkjit_attn_hopper::bwd_args in attention_bwd_hopper.cuh)."""

import ctypes
import math

from ..errors import InvalidArgumentError

_L = ctypes.c_longlong


class ForwardArgs(ctypes.Structure):
    """Mirror of attention_fwd_cdna<...>::args and attention_fwd_hopper<...>::args."""
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("lse", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p)] + \
               [(f"{t}_{s}", _L) for t in ("q", "k", "v", "o", "lse") for s in ("sb", "sh", "sr")] + \
               [("batch", ctypes.c_int), ("heads", ctypes.c_int), ("kv_heads", ctypes.c_int),
                ("n_q", ctypes.c_int), ("n_k", ctypes.c_int), ("scale_log2", ctypes.c_float)]


def pack_forward(load_bytes, varlen, *, q, k, v, o, lse, q_strides, k_strides, v_strides, o_strides, lse_strides,
                 cu_seqlens_q, cu_seqlens_k, batch, heads, kv_heads, n_q, n_k, scale, workspace=0,
                 args_type=ForwardArgs) -> ForwardArgs:
    """The argument block, after the checks every forward kernel needs: q, k and v base pointers and
    row strides aligned to the kernel's `load_bytes`-byte loads, cu_seqlens given to a varlen kernel.
    `args_type`: ForwardArgs, or a structure holding its fields by name after fields of its own
    (the sm_90a TMA variant's tensor maps), which the caller fills."""
    for name, ptr, strides in (("q", q, q_strides), ("k", k, k_strides), ("v", v, v_strides)):
        if int(ptr) % load_bytes or int(strides[2]) * 2 % load_bytes:
            raise InvalidArgumentError(f"attention: {name}'s base pointer or row stride ({strides[2]} elements) is "
                                       f"not aligned to the {load_bytes}-byte loads this kernel was built for")
    if varlen and not (cu_seqlens_q and cu_seqlens_k):
        raise InvalidArgumentError("attention: a varlen kernel needs cu_seqlens_q and cu_seqlens_k")
    vals = [int(x) for s in (q_strides, k_strides, v_strides, o_strides, lse_strides) for x in s]
    vals = [int(q), int(k), int(v), int(o), int(lse or 0), int(cu_seqlens_q or 0), int(cu_seqlens_k or 0),
            *vals, int(batch), int(heads), int(kv_heads), int(n_q), int(n_k), float(scale) * math.log2(math.e)]
    if args_type is ForwardArgs:
        return ForwardArgs(*vals)
    return args_type(**{f[0]: x for f, x in zip(ForwardArgs._fields_, vals)})


BACKWARD_STRIDED = ("q", "k", "v", "o", "do", "dq", "dk", "dv", "lse", "delta")


class BackwardArgs(ctypes.Structure):
    """Mirror of hkjit_attn::bwd_args (CDNA) and hkjit_attn_hopper::bwd_args (sm_90a)."""
    _fields_ = [(n, ctypes.c_void_p) for n in ("q", "k", "v", "o", "d_o", "lse", "delta", "dq", "dk", "dv",
                                               "cu_seqlens_q", "cu_seqlens_k")] + \
               [(f"{t}_{s}", _L) for t in BACKWARD_STRIDED for s in ("sb", "sh", "sr")] + \
               [(n, ctypes.c_int) for n in ("batch", "heads", "kv_heads", "n_q", "n_k")] + \
               [("scale_log2", ctypes.c_float), ("scale", ctypes.c_float)]


def pack_backward(*, q, k, v, o, d_o, lse, delta, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, batch, heads, kv_heads,
                  n_q, n_k, scale, **strides) -> BackwardArgs:
    vals = [int(x) for t in BACKWARD_STRIDED for x in strides[f"{t}_strides"]]
    return BackwardArgs(int(q), int(k), int(v), int(o or 0), int(d_o), int(lse), int(delta), int(dq or 0),
                        int(dk or 0), int(dv or 0), int(cu_seqlens_q or 0), int(cu_seqlens_k or 0), *vals, int(batch),
                        int(heads), int(kv_heads), int(n_q), int(n_k), float(scale) * math.log2(math.e), float(scale))
