"""Host cost of one call: hkjit.gemm on tiny inputs against a raw cuLaunchKernel with pre-packed
arguments, a CuPy RawKernel and a Triton kernel, all in this process; then warm start (a fresh
process with a populated cache, time from `import hkjit` done to the first result).

    python -m hkjit.bench.jit_overhead [--json FILE]
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

EMPTY = r'''
extern "C" __global__ void empty_kernel(const float* x, float* y, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && n < 0) y[0] = x[0];
}'''


def _per_call_us(fn, n=20000, repeats=5):
    """Median over `repeats` of the mean host time per call of `n` back-to-back calls."""
    import torch
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def raw_launch():
    from cuda.bindings import driver as cu, nvrtc
    import torch
    torch.cuda.init()
    err, prog = nvrtc.nvrtcCreateProgram(EMPTY.encode(), b"empty.cu", 0, [], [])
    opts = [b"--gpu-architecture=sm_90a"]
    assert nvrtc.nvrtcCompileProgram(prog, 1, opts)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    size = nvrtc.nvrtcGetCUBINSize(prog)[1]
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    x = torch.empty(16, device="cuda")
    dev = cu.cuDeviceGet(0)[1]
    ctx = cu.cuDevicePrimaryCtxRetain(dev)[1]
    cu.cuCtxSetCurrent(ctx)
    mod = cu.cuModuleLoadData(cubin)[1]
    fn = cu.cuModuleGetFunction(mod, b"empty_kernel")[1]
    vals = (ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(x.data_ptr()), ctypes.c_int(16))
    params = (ctypes.c_void_p * 3)(*(ctypes.addressof(v) for v in vals))
    addr = ctypes.addressof(params)
    stream = torch.cuda.current_stream().cuda_stream

    def call():
        cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, addr, 0)
    call.keep_alive = (x, vals, params, mod)  # the launch reads these through raw addresses
    return call


def cupy_raw():
    import cupy
    k = cupy.RawKernel(EMPTY, "empty_kernel")
    x = cupy.empty(16, dtype=cupy.float32)
    n = cupy.int32(16)
    return lambda: k((1,), (32,), (x, x, n))


def triton_kernel():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def empty(x, y, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(y + i, tl.load(x + i, mask=i < n), mask=i < n)
    x = torch.empty(16, device="cuda")
    return lambda: empty[(1,)](x, x, 16, BLOCK=16)


def hkjit_gemm(with_out):
    import torch
    import hkjit
    a = torch.randn(16, 16, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(16, 16, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(16, 16, device="cuda", dtype=torch.bfloat16)
    if with_out:
        return lambda: hkjit.gemm(a, b, out=out)
    return lambda: hkjit.gemm(a, b)


def torch_mm():
    import torch
    a = torch.randn(16, 16, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(16, 16, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.mm(a, b)


WARM_CHILD = r'''
import time, sys
t0 = time.perf_counter()
import torch
a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16); b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t1 = time.perf_counter()
import hkjit
t2 = time.perf_counter()
c = hkjit.gemm(a, b); torch.cuda.synchronize()
t3 = time.perf_counter()
err = ((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()
print(f"{(t2 - t1) * 1e3:.2f} {(t3 - t2) * 1e3:.2f} {err:.2e}")
'''


def warm_start(runs=5):
    """(import ms, first-result ms) medians of fresh processes on a populated cache."""
    env = dict(os.environ)
    subprocess.run([sys.executable, "-c", WARM_CHILD], env=env, check=True, capture_output=True)  # populate
    imports, firsts = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", WARM_CHILD], env=env, check=True, capture_output=True,
                             text=True).stdout.split()
        imports.append(float(out[0]))
        firsts.append(float(out[1]))
        assert float(out[2]) < 1e-2, f"warm-start result wrong: rel err {out[2]}"
    return statistics.median(imports), statistics.median(firsts)


def hot_path_rows(log=print) -> dict:
    """Host µs per call of each path, in this process; a missing peer is reported, not fatal."""
    import torch
    rows = {}
    for name, make in (("raw cuLaunchKernel (pre-packed)", raw_launch), ("CuPy RawKernel", cupy_raw),
                       ("Triton JIT kernel", triton_kernel), ("torch.mm 16x16x16", torch_mm),
                       ("hkjit.gemm 16x16x16, out=", lambda: hkjit_gemm(True)),
                       ("hkjit.gemm 16x16x16", lambda: hkjit_gemm(False))):
        try:
            rows[name] = _per_call_us(make())
        except Exception as e:
            rows[name] = f"unavailable: {type(e).__name__}: {e}"[:120]
    raw = rows["raw cuLaunchKernel (pre-packed)"]
    log(f"Host µs per call ({torch.cuda.get_device_name()}):")
    for name, us in rows.items():
        ratio = f"{us / raw:5.2f}x raw" if isinstance(us, float) and isinstance(raw, float) else ""
        log(f"  {name:34s} {us if isinstance(us, str) else f'{us:6.2f} us'}  {ratio}")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    args = p.parse_args(argv)
    import torch
    rows = hot_path_rows()
    imp, first = warm_start()
    print(f"\nWarm start (fresh process, populated cache): import hkjit {imp:.1f} ms, "
          f"first gemm result {first:.1f} ms (hkjit time, import excluded)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"per_call_us": rows, "warm_import_ms": imp, "warm_first_result_ms": first,
                       "device": torch.cuda.get_device_name()}, f, indent=2)


if __name__ == "__main__":
    main()
