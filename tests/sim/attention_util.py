"""Run the flash-attention forward of tests/sim/kernels/attention.hip (a kernel written the way
outside code is: MFMA builtins, exp2, cross-lane softmax) on a SimDevice."""

import numpy as np

from hkjit.sim import SimDevice
from simutil import bf16, build

D = 64


def attention_reference(q, k, v):
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def run_attention(arch, heads, n, seed=0, checks=True, device=None):
    """O = softmax(Q K^T / 8) V for random bf16 Q, K, V of shape (heads, n, 64), float32 O.
    -> (O, float64 reference, kernel)."""
    rng = np.random.default_rng(seed)
    qkv = [bf16(rng.standard_normal((heads, n, D)).astype(np.float32)) for _ in range(3)]
    bits, vals = [b for b, _ in qkv], [v.astype(np.float64) for _, v in qkv]
    dev = device or SimDevice(arch, checks=checks)
    k = dev.load(build("attention.hip", arch), "attention_fwd")
    bufs = [dev.alloc(b.nbytes) for b in bits] + [dev.alloc(heads * n * D * 4)]
    for buf, b in zip(bufs, bits):
        dev.copy_in(buf, b)
    args = np.array([b.ptr for b in bufs], np.uint64).tobytes() + np.array([n], np.int32).tobytes() + \
        np.array([np.log2(np.e) / np.sqrt(D)], np.float32).tobytes()
    k.launch(((n + 63) // 64, heads, 1), (256, 1, 1), 0, args)
    out = np.full((heads, n, D), np.nan, np.float32)
    dev.copy_out(bufs[3], out)
    for b in bufs:
        dev.free(b)
    return out, attention_reference(*vals), k
