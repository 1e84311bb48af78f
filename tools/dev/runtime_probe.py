"""Device probe: hkjit's CUDA runtime path on a test kernel, and the micro-costs of the hot path."""
import ctypes, statistics, sys, time
from pathlib import Path

t0 = time.perf_counter(); import torch; t_torch = time.perf_counter() - t0
t0 = time.perf_counter(); from cuda.bindings import driver as cu; t_drv = time.perf_counter() - t0
t0 = time.perf_counter(); from cuda.bindings import nvrtc; t_nvrtc = time.perf_counter() - t0
t0 = time.perf_counter(); import hkjit; t_hk = time.perf_counter() - t0
print(f"import: torch {t_torch*1e3:.0f} ms, cuda.bindings.driver {t_drv*1e3:.1f} ms, nvrtc {t_nvrtc*1e3:.1f} ms, hkjit {t_hk*1e3:.1f} ms")

from hkjit import spec as spec_mod, targets, jit, runtime, interop
root = Path(__file__).resolve().parents[2]
spec_mod.kernel_sources_dir = lambda: root / "tests" / "kernels"
dev = runtime.get("cuda", 0)
print("device:", dev, "target", dev.target, "SMs", dev.multiprocessors, "smem optin", dev.max_smem_optin)
spec = spec_mod.Specialization("scale", dev.target, "scale.cuh", "scale_kernel<3, 256>", "hkjit_scale",
                               spec_mod.make_params({"s": 3}))
t0 = time.perf_counter(); k = jit.load_spec(spec, dev); t_first = time.perf_counter() - t0
print(f"first load_spec (compile + cache write + load): {t_first*1e3:.0f} ms")

class Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("n", ctypes.c_int)]
n = 1 << 20
x = torch.randn(n, device="cuda"); y = torch.full((n,), float("nan"), device="cuda")
args = Args(x.data_ptr(), y.data_ptr(), n)
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    k.launch(((n + 255) // 256, 1, 1), (256, 1, 1), 0, args, runtime.stream_for(dev, "torch"))
s.synchronize()
print("scale kernel correct:", torch.equal(y, x * 3))

def per_call(fn, n=20000):
    fn(); torch.cuda.synchronize(); out = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n): fn()
        out.append((time.perf_counter() - t) / n * 1e6); torch.cuda.synchronize()
    return statistics.median(out)

small = Args(x.data_ptr(), y.data_ptr(), 16)
stream = torch.cuda.current_stream().cuda_stream
params = (ctypes.c_void_p * 1)(ctypes.addressof(small)); addr = ctypes.addressof(params)
f = k.function
cs = cu.CUstream(stream)
libcuda = ctypes.CDLL("libcuda.so.1")
fn_ptr = ctypes.c_void_p(int(f))
launch = libcuda.cuLaunchKernel
launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
launch.restype = ctypes.c_int
ta = torch.randn(16, 16, device="cuda", dtype=torch.bfloat16)
rows = {
  "cu.cuLaunchKernel(int stream)": lambda: cu.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, stream, addr, 0),
  "cu.cuLaunchKernel(CUstream)": lambda: cu.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, cs, addr, 0),
  "ctypes libcuda.cuLaunchKernel": lambda: launch(fn_ptr, 1, 1, 1, 256, 1, 1, 0, stream, addr, None),
  "hkjit Kernel.launch": lambda: k.launch((1, 1, 1), (256, 1, 1), 0, small, stream),
  "interop.describe(torch)": lambda: interop.describe(ta),
  "torch.empty 16x16 bf16": lambda: torch.empty(16, 16, device="cuda", dtype=torch.bfloat16),
  "_cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
  "ctypes Args() + fill": lambda: Args(1, 2, 3),
}
for name, fn in rows.items():
    print(f"  {name:34s} {per_call(fn):6.2f} us")
