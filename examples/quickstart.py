"""hkjit quickstart: one GEMM, checked against a float64 reference.

Runs on the GPU when one is present (CUDA Hopper or ROCm gfx942/gfx950), otherwise on hkjit's CDNA
simulator (`sim:gfx950`), and says which.

    python examples/quickstart.py
"""
import time

import numpy as np

import hkjit
from hkjit import runtime


def pick_device():
    for kind in ("cuda", "rocm"):
        if runtime.gpu_count(kind):
            return f"{kind}:0"
    return "sim:gfx950"


def main():
    device = pick_device()
    on_gpu = not device.startswith("sim")
    M, N, K = (4096, 4096, 4096) if on_gpu else (200, 136, 96)  # the simulator is a CPU program: keep it small
    print(f"hkjit {hkjit.__version__}: gemm {M}x{N}x{K} bf16 on {device}"
          + ("" if on_gpu else " (no GPU found: running on hkjit's CDNA simulator)"))
    rng = np.random.default_rng()
    if on_gpu:
        import torch
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        t0 = time.perf_counter()
        c = hkjit.gemm(a, b)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        ref = a.double() @ b.double()
        err = ((c.double() - ref).norm() / ref.norm()).item()
    else:
        import ml_dtypes
        a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
        t0 = time.perf_counter()
        c = hkjit.gemm(a, b, device=device, out_dtype="float32")
        first = time.perf_counter() - t0
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.linalg.norm(c - ref) / np.linalg.norm(ref))
    print(f"first call (specialise, compile or load from cache, run): {first:.2f} s")
    print(f"relative error vs float64 reference: {err:.2e} -> {'OK' if err < 1e-2 else 'FAILED'}")
    if err >= 1e-2:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
