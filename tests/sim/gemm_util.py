"""Build and run the shipped CDNA GEMM (kernel_sources/gemm_cdna.hip + hkjit/ops/_cdna_gemm.py)
directly with clang-22 on a SimDevice: independent of the rest of hkjit's compile layers."""

import os

import numpy as np

from hkjit.ops import _cdna_gemm as G
from hkjit.sim import SimDevice, fp
from simutil import ROOT, build

SRC = os.path.join(ROOT, "kernel_sources")


def gemm_code(cfg):
    unit = (f'#include "{G.SOURCE}"\nusing hkjit_kernel = {G.TEMPLATE}<{G.template_args(cfg)}>;\n'
            f"HK_ENTRY({G.KERNEL}, hkjit_kernel)\n")
    return build(unit, cfg["target"], defines=(), include=SRC)


def run_gemm(arch, M, N, K, dtype="bfloat16", out_dtype="float32", seed=0, overrides=None, checks=True,
             device=None):
    """C = A @ B with A (M x K), B (K x N) row-major. Returns (C, reference, kernel)."""
    rng = np.random.default_rng(seed)
    a32 = rng.standard_normal((M, K)).astype(np.float32)
    b32 = rng.standard_normal((K, N)).astype(np.float32)
    if dtype == "bfloat16":
        abits, bbits = fp.f32_to_bf16(a32), fp.f32_to_bf16(b32)
        a32, b32 = fp.bf16_to_f32(abits), fp.bf16_to_f32(bbits)
    else:
        abits, bbits = a32.astype(np.float16).view(np.uint16), b32.astype(np.float16).view(np.uint16)
        a32, b32 = a32.astype(np.float16).astype(np.float32), b32.astype(np.float16).astype(np.float32)
    alignment = 16 if (K * 2) % 16 == 0 and (N * 2) % 16 == 0 else 4
    cfg = G.choose_config(M, N, K, True, False, dtype, out_dtype, arch, overrides, alignment=alignment)
    code = gemm_code(cfg)
    dev = device or SimDevice(arch, checks=checks)
    k = dev.load(code, G.KERNEL)
    osize = 4 if out_dtype == "float32" else 2
    ba, bb, bc = dev.alloc(abits.nbytes), dev.alloc(bbits.nbytes), dev.alloc(M * N * osize)
    dev.copy_in(ba, abits)
    dev.copy_in(bb, bbits)
    args = G.make_args(cfg, ba.ptr, (K, 1), bb.ptr, (N, 1), bc.ptr, (N, 1), M, N, K)
    k.launch(G.grid(M, N, K, cfg), (G.threads(cfg), 1, 1), G.dynamic_smem(cfg), bytes(args))
    out = np.empty((M, N), np.float32 if out_dtype == "float32" else np.uint16)
    dev.copy_out(bc, out)
    if out_dtype == "bfloat16":
        out = fp.bf16_to_f32(out)
    elif out_dtype == "float16":
        out = out.view(np.float16).astype(np.float32)
    ref = a32.astype(np.float64) @ b32.astype(np.float64)
    for b in (ba, bb, bc):
        dev.free(b)
    return out, ref, k
