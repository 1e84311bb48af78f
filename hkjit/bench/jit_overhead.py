"""Host cost of one call: every op's repeat path (native, and the Python fallback), beside a raw
cuLaunchKernel with pre-packed arguments (through cuda-bindings, and through ctypes as hkjit's
Python path launches), a CuPy RawKernel, a Triton kernel, an apache-tvm-ffi function that launches
(when tvm_ffi is installed) and each op's torch eager function, all in
this process on tiny inputs; then warm start (fresh processes on a populated cache).

    python -m hkjit.bench.jit_overhead [--json FILE] [--ops gemm,rms_norm]

Each figure is the median over bursts of 200 back-to-back calls of the wall time per call; the GPU
is synchronised between bursts, so a burst never fills the launch queue and the host's cost is
what is timed (a kernel slower than the host's call rate would be timed instead otherwise).
"""

import argparse
import ctypes
import functools
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
CALLS, BURSTS = 200, 40


def _per_call_us(fn, calls=CALLS, bursts=BURSTS):
    import torch
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


@functools.lru_cache(maxsize=None)
def _empty_cubin():
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(EMPTY.encode(), b"empty.cu", 0, [], [])
    opts = [b"--gpu-architecture=sm_90a"]
    assert nvrtc.nvrtcCompileProgram(prog, 1, opts)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    size = nvrtc.nvrtcGetCUBINSize(prog)[1]
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin


def _empty_args(x):
    vals = (ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(x.data_ptr()), ctypes.c_int(16))
    params = (ctypes.c_void_p * 3)(*(ctypes.addressof(v) for v in vals))
    return vals, params


def raw_launch():
    """cuLaunchKernel through cuda-bindings, arguments packed once."""
    from cuda.bindings import driver as cu
    import torch
    x = torch.empty(16, device="cuda")
    dev = cu.cuDeviceGet(0)[1]
    cu.cuCtxSetCurrent(cu.cuDevicePrimaryCtxRetain(dev)[1])
    mod = cu.cuModuleLoadData(_empty_cubin())[1]
    fn = cu.cuModuleGetFunction(mod, b"empty_kernel")[1]
    vals, params = _empty_args(x)
    addr = ctypes.addressof(params)
    stream = torch.cuda.current_stream().cuda_stream

    def call():
        cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, addr, 0)
    call.keep_alive = (x, vals, params, mod)  # the launch reads these through raw addresses
    return call


def raw_launch_ctypes():
    """cuLaunchKernel through ctypes on libcuda (how hkjit's Python path launches)."""
    import torch
    from ..runtime import cuda
    dev = cuda.CudaDevice(0)
    kernel = dev.load(_empty_cubin(), "empty_kernel")
    x = torch.empty(16, device="cuda")
    vals, params = _empty_args(x)
    addr = ctypes.addressof(params)
    launch, f = cuda._lib.cuLaunchKernel, kernel.function
    stream = torch.cuda.current_stream().cuda_stream

    def call():
        launch(f, 1, 1, 1, 32, 1, 1, 0, stream, addr, None)
    call.keep_alive = (x, vals, params, kernel)
    return call


def raw_launch_c_us(calls=CALLS, bursts=BURSTS) -> float:
    """µs per cuLaunchKernel called back to back from C (launch_loop.c): the driver's own cost, the
    floor under every path here."""
    import torch
    from pathlib import Path
    from .. import hostcc
    from ..runtime import cuda
    loop = ctypes.CDLL(str(hostcc.build("bench_launch_loop", [Path(__file__).with_name("launch_loop.c")])))
    loop.hk_launch_loop.restype = ctypes.c_double
    loop.hk_launch_loop.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    dev = cuda.CudaDevice(0)
    kernel = dev.load(_empty_cubin(), "empty_kernel")
    x = torch.empty(16, device="cuda")
    vals, params = _empty_args(x)
    launch = ctypes.cast(cuda._lib.cuLaunchKernel, ctypes.c_void_p).value
    stream = torch.cuda.current_stream().cuda_stream
    error = ctypes.c_int(0)
    samples = []
    for i in range(bursts + 1):
        seconds = loop.hk_launch_loop(launch, kernel.function, stream, params, calls, ctypes.byref(error))
        if seconds < 0:
            raise RuntimeError(f"cuLaunchKernel failed with CUresult {error.value}")
        if i:                                  # the first burst warms up
            samples.append(seconds / calls * 1e6)
        torch.cuda.synchronize()
    del vals
    return statistics.median(samples)


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


@functools.lru_cache(maxsize=None)
def _tvm_ffi_module():
    """tvm_ffi_launch.cc built with the host C++ compiler and loaded, once per process."""
    import shutil
    import tempfile
    from pathlib import Path
    import tvm_ffi
    import tvm_ffi.libinfo as info
    lib = info.find_libtvm_ffi()
    folder = tempfile.mkdtemp(prefix="hkjit-bench-tvmffi-")
    try:
        so = os.path.join(folder, "tvm_ffi_launch.so")
        cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
        cmd = [cxx, "-std=c++17", "-O2", "-shared", "-fPIC",
               *(f"-I{d}" for d in [*info.include_paths(), info.find_dlpack_include_path()]),
               str(Path(__file__).with_name("tvm_ffi_launch.cc")), lib, f"-Wl,-rpath,{os.path.dirname(lib)}", "-o", so]
        built = subprocess.run(cmd, capture_output=True, text=True)
        if built.returncode:
            raise RuntimeError(f"building the tvm-ffi peer failed: {built.stderr[-300:]}")
        return tvm_ffi.load_module(so)
    finally:
        shutil.rmtree(folder, ignore_errors=True)      # the loaded library stays mapped


def tvm_ffi_kernel():
    """The empty kernel launched through an apache-tvm-ffi function (tvm_ffi_launch.cc): tensors
    in through tvm-ffi's DLPack conversion, the stream from its environment, then cuLaunchKernel,
    as CuTe DSL and TileLang launch."""
    import torch
    from ..runtime import cuda
    mod = _tvm_ffi_module()
    dev = cuda.CudaDevice(0)
    kernel = dev.load(_empty_cubin(), "empty_kernel")
    mod.bind(ctypes.cast(cuda._lib.cuLaunchKernel, ctypes.c_void_p).value, kernel.function)
    x = torch.empty(16, device="cuda")
    fn = mod.empty

    def call():
        fn(x, x, 16)
    call.keep_alive = (mod, kernel)
    return call


# --- every op on tiny inputs ------------------------------------------------------------------------
def cuda_randn(*shape, dtype=None):
    """Standard-normal values on the GPU, bf16 unless `dtype` says otherwise."""
    import torch
    return torch.randn(*shape, device="cuda", dtype=dtype or torch.bfloat16)


def rope_angles(n, d):
    """(cos, sin) of the usual rotary angles for n positions and head dim d, fp32 on the GPU."""
    import torch
    a = torch.outer(torch.arange(n, device="cuda", dtype=torch.float32),
                    1e4 ** (-torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
    return a.cos(), a.sin()


def op_cases(torch):
    """name -> (inputs() -> (args, kwargs), names of the out= keywords, torch eager function)."""
    F = torch.nn.functional
    r, angles = cuda_randn, rope_angles

    def rope_eager(x, cos, sin):
        h = x.shape[-1] // 2
        c, s = cos.view(1, 1, *cos.shape), sin.view(1, 1, *sin.shape)
        x1, x2 = x[..., :h].float(), x[..., h:].float()
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1).to(x.dtype)

    def gated(fn):
        def eager(x):
            d = x.shape[-1] // 2
            return fn(x[..., :d]) * x[..., d:]
        return eager
    return {
        "gemm": (lambda: ((r(16, 16), r(16, 16)), {}), ("out",), torch.mm),
        "rms_norm": (lambda: ((r(16, 256), r(256)), {"eps": 1e-6}), ("out",),
                     lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps)),
        "add_rms_norm": (lambda: ((r(16, 256), r(16, 256), r(256)), {"eps": 1e-6}), ("out", "residual_out"),
                         lambda x, res, w, eps: (F.rms_norm(x + res, (x.shape[-1],), w, eps), x + res)),
        "layer_norm": (lambda: ((r(16, 256), r(256), r(256)), {"eps": 1e-5}), ("out",),
                       lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps)),
        "dropout_add_layer_norm": (lambda: ((r(16, 256), r(16, 256), r(256), r(256), 0.1), {"eps": 1e-5, "seed": 1}),
                                   ("out", "residual_out"),
                                   lambda x, res, w, b, p, eps, seed: F.layer_norm(F.dropout(x, p) + res,
                                                                                   (x.shape[-1],), w, b, eps)),
        "rope": (lambda: ((r(1, 4, 16, 64), *angles(16, 64)), {}), ("out",), rope_eager),
        "rope_qk": (lambda: ((r(1, 4, 16, 64), r(1, 2, 16, 64), *angles(16, 64)), {}), ("q_out", "k_out"),
                    lambda q, k, cos, sin: (rope_eager(q, cos, sin), rope_eager(k, cos, sin))),
        "silu": (lambda: ((r(16, 256),), {}), ("out",), F.silu),
        "gelu": (lambda: ((r(16, 256),), {}), ("out",), F.gelu),
        "gelu_tanh": (lambda: ((r(16, 256),), {}), ("out",), lambda x: F.gelu(x, approximate="tanh")),
        "relu": (lambda: ((r(16, 256),), {}), ("out",), torch.relu),
        "tanh": (lambda: ((r(16, 256),), {}), ("out",), torch.tanh),
        "silu_and_mul": (lambda: ((r(16, 512),), {}), ("out",), gated(F.silu)),
        "gelu_and_mul": (lambda: ((r(16, 512),), {}), ("out",), gated(F.gelu)),
        "softmax": (lambda: ((r(16, 256),), {}), ("out",), lambda x: torch.softmax(x, -1)),
        "topk": (lambda: ((r(16, 256, dtype=torch.float32), 8), {}), ("out_values", "out_indices"), torch.topk),
        "attention": (lambda: ((r(1, 2, 64, 64), r(1, 2, 64, 64), r(1, 2, 64, 64)), {}), ("out",),
                      F.scaled_dot_product_attention),
    }


def op_rows(names=None, log=print) -> list:
    """One row per op: host µs per call of hkjit natively (out= and allocating), on the Python
    path (the same two), and of torch eager; which path served the native column."""
    import torch
    import hkjit
    from .. import launch, native
    rows = []
    for name, (inputs, out_names, eager) in op_cases(torch).items():
        if names and name not in names:
            continue
        fn = getattr(hkjit, name)
        args, kwargs = inputs()
        row = {"op": name}
        try:
            result = fn(*args, **kwargs)
            outs = dict(zip(out_names, result if isinstance(result, tuple) else (result,)))
            for path in ("native", "python"):
                launch.use_native(path == "native")
                before = launch.native_stats()
                row[f"{path} out="] = _per_call_us(lambda: fn(*args, **kwargs, **outs))
                row[f"{path} allocating"] = _per_call_us(lambda: fn(*args, **kwargs))
                if path == "native":
                    after = launch.native_stats() or {}
                    for k in ("hits", "repacks"):
                        row[f"native {k}"] = after.get(k, 0) - (before or {}).get(k, 0)
            launch.use_native(True)
            row["torch eager"] = _per_call_us(lambda: eager(*args, **kwargs))
        except Exception as e:  # noqa: BLE001  (a failing op is reported, the rest still run)
            row["error"] = f"{type(e).__name__}: {e}"[:160]
        rows.append(row)
        log("  " + "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    if native.why_not:
        log(f"  (native path off: {native.why_not})")
    return rows


def alloc_rows() -> dict:
    """hkjit.gemm allocating its output natively: through the DLPack exchange table's allocator
    (the default) and through torch.empty called from C."""
    import torch
    import hkjit
    from .. import launch
    a, b = (torch.randn(16, 16, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    rows = {}
    for mode, label in ((0, "DLPack allocator"), (1, "torch.empty")):
        launch.use_native(True)
        for _ in range(3):
            hkjit.gemm(a, b)
        table = launch.native_table()
        if table is None:
            return {}
        table.set_alloc_mode(mode)
        rows[label] = _per_call_us(lambda: hkjit.gemm(a, b))
    table.set_alloc_mode(0)
    return rows


def native_detail_rows() -> dict:
    """Where a native call's time goes, for hkjit.gemm and hkjit.rms_norm with out=: the call as
    it runs, and the same call through a table that records the launch instead of making it
    (hkjit's own cost: the Python wrapper, the key, the patching, the stream; everything but
    cuLaunchKernel)."""
    import torch
    import hkjit
    from .. import launch, native
    from ..ops.gemm import GEMM
    from ..ops.rms_norm import RMS_NORM
    a, b, c = (torch.randn(16, 16, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    x, y, w = torch.randn(16, 256, device="cuda"), torch.empty(16, 256, device="cuda"), torch.randn(256, device="cuda")
    cases = {"hkjit.gemm 16x16x16, out=": (lambda: hkjit.gemm(a, b, out=c), GEMM, (a, b, c, None, None), (1.0, 0.0)),
             "hkjit.rms_norm 16x256, out=": (lambda: hkjit.rms_norm(x, w, 1e-6, out=y), RMS_NORM, (x, w, y), (1e-6,))}
    rows = {}
    launch.use_native(True)
    for name, (fn, op, values, scalars) in cases.items():
        for _ in range(3):
            fn()
        table = launch.native_table()
        if table is None:
            return {}
        rows[f"{name}: native"] = _per_call_us(fn)
        launcher = next(lr for sig, lr in launch.launchers() if sig[0] == op.name and
                        all((a is None) == (v is None) and (v is None or a[1] == tuple(v.shape))
                            for a, v in zip(sig[1], values)))
        recording = native.table(native.extension(), torch, launch._python_call, None)
        ptrs = tuple(0 if v is None else v.data_ptr() for v in values)
        if not launch.remember_native(recording, op, values, (), scalars, ptrs, launcher, {}):
            continue
        real, launch.call = launch.call, recording.call
        try:
            rows[f"{name}: native, launch recorded not made"] = _per_call_us(fn)
        finally:
            launch.call = real
    return rows


WARM_CHILD = r'''
import time, sys
t0 = time.perf_counter()
import torch
a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16); b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
before = set(sys.modules)
t1 = time.perf_counter()
import hkjit
t2 = time.perf_counter()
gemm = hkjit.gemm                        # imports the op's module chain
t3 = time.perf_counter()
c = gemm(a, b); torch.cuda.synchronize()
t4 = time.perf_counter()
err = ((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()
watched = ("cuda.bindings.driver", "cuda.bindings.nvrtc", "hkjit.compiler", "hkjit.pch", "hkjit.deploy", "hkjit.native",
           "hkjit.cache.bundle", "hkjit.cache.prune", "hkjit.ops._cdna_gemm", "zipfile", "tempfile", "subprocess")
heavy = ",".join(m for m in watched if m in sys.modules and m not in before) or "-"
hashed = len(sys.modules["hkjit.spec"]._closures)
print(f"{(t2 - t1) * 1e3:.2f} {(t4 - t2) * 1e3:.2f} {(t3 - t2) * 1e3:.2f} {err:.2e} {heavy} {hashed}")
'''


def warm_start_rows(runs=5) -> dict:
    """Medians over fresh processes on a populated cache (torch and the inputs ready first):
    `import hkjit`, the first hkjit.gemm result after it, and the part of that spent importing the
    op's modules; the modules of note the call imported that were not loaded before, and how many
    header closures it hashed. The children may write bytecode (into a private folder when the
    environment forbids it beside the sources), as an installed package has: compiling hkjit's
    sources again in every process is not part of a warm start."""
    import tempfile
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None) and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="hkjit-bench-pyc-")
    subprocess.run([sys.executable, "-c", WARM_CHILD], env=env, check=True, capture_output=True)  # populate
    rows = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", WARM_CHILD], env=env, check=True, capture_output=True,
                             text=True).stdout.split()
        assert float(out[3]) < 1e-2, f"warm-start result wrong: rel err {out[3]}"
        rows.append(out)
    med = lambda i: statistics.median(float(r[i]) for r in rows)  # noqa: E731
    return {"import_ms": med(0), "first_result_ms": med(1), "op_modules_import_ms": med(2),
            "imported": rows[-1][4], "header_closures_hashed": int(rows[-1][5])}


def warm_start(runs=5):
    """(import ms, first-result ms, modules of note imported): see warm_start_rows."""
    w = warm_start_rows(runs)
    return w["import_ms"], w["first_result_ms"], w["imported"]


def hot_path_rows(log=print) -> dict:
    """Host µs per call of the launch paths on an empty kernel and of hkjit.gemm; a missing peer is
    reported, not fatal."""
    import torch
    rows = {}
    for name, make in (("raw cuLaunchKernel, cuda-bindings (pre-packed)", raw_launch),
                       ("raw cuLaunchKernel, ctypes (pre-packed)", raw_launch_ctypes),
                       ("CuPy RawKernel", cupy_raw), ("Triton JIT kernel", triton_kernel),
                       ("apache-tvm-ffi function -> cuLaunchKernel", tvm_ffi_kernel)):
        try:
            rows[name] = _per_call_us(make())
        except Exception as e:  # noqa: BLE001
            rows[name] = f"unavailable: {type(e).__name__}: {e}"[:120]
    try:
        rows["raw cuLaunchKernel from a C loop (the driver's floor)"] = raw_launch_c_us()
    except Exception as e:  # noqa: BLE001  (no C compiler: the row says so)
        rows["raw cuLaunchKernel from a C loop (the driver's floor)"] = f"unavailable: {type(e).__name__}: {e}"[:120]
    raw = rows["raw cuLaunchKernel, cuda-bindings (pre-packed)"]
    log(f"Host µs per call ({torch.cuda.get_device_name()}):")
    for name, us in rows.items():
        ratio = f"{us / raw:5.2f}x raw" if isinstance(us, float) and isinstance(raw, float) else ""
        log(f"  {name:48s} {us if isinstance(us, str) else f'{us:6.2f} us'}  {ratio}")
    return rows


def head_to_head_rows(rounds=7, log=print) -> dict:
    """The paths the dispatch goal compares, measured in alternation, `rounds` times each, medians
    reported: the driver's floor (C loop), raw cuLaunchKernel through cuda-bindings, the tvm-ffi
    peer, hkjit.gemm 16x16x16 natively with out= and allocating, and torch.empty of the same
    output alone (what allocating adds at least). Alternating keeps the host's drift (clocks,
    neighbours) out of the ratios; a single pass in a fixed order measured the first path up to
    1.4x slower than the same path timed a minute later."""
    import torch
    import hkjit
    from .. import launch
    a, b, c = (torch.randn(16, 16, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    launch.use_native(True)
    paths = {"raw cuLaunchKernel, cuda-bindings (pre-packed)": raw_launch()}
    try:
        paths["apache-tvm-ffi function -> cuLaunchKernel"] = tvm_ffi_kernel()
    except Exception as e:  # noqa: BLE001  (tvm_ffi not installed, or no C++ compiler)
        log(f"  (tvm-ffi peer unavailable: {type(e).__name__}: {e})"[:160])
    paths["hkjit.gemm(a, b, out=c), native"] = lambda: hkjit.gemm(a, b, out=c)
    paths["hkjit.gemm(a, b), native, allocating"] = lambda: hkjit.gemm(a, b)
    paths["torch.empty(16, 16) alone"] = lambda: torch.empty(16, 16, device="cuda", dtype=torch.bfloat16)
    samples = {name: [] for name in ["raw cuLaunchKernel from a C loop (the driver's floor)", *paths]}
    for _ in range(rounds):
        try:
            samples["raw cuLaunchKernel from a C loop (the driver's floor)"].append(raw_launch_c_us(bursts=10))
        except Exception:  # noqa: BLE001  (no C compiler: the row stays empty)
            pass
        for name, fn in paths.items():
            samples[name].append(_per_call_us(fn, bursts=10))
    rows = {name: statistics.median(v) for name, v in samples.items() if v}
    rows["spread"] = {name: (min(v), max(v)) for name, v in samples.items() if v}
    raw = rows["raw cuLaunchKernel, cuda-bindings (pre-packed)"]
    log(f"Head to head, {rounds} alternating rounds, median µs per call ({torch.cuda.get_device_name()}):")
    for name, us in rows.items():
        if name != "spread":
            lo, hi = rows["spread"][name]
            log(f"  {name:52s} {us:6.2f} us  {us / raw:5.2f}x raw   (rounds {lo:.2f}..{hi:.2f})")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--ops", help="comma-separated ops (default: all)")
    args = p.parse_args(argv)
    import torch
    # Warm start first: its children are fresh processes, and a run cut short still has this row.
    warm = warm_start_rows()
    print(f"Warm start (fresh process, populated cache): import hkjit {warm['import_ms']:.1f} ms, first gemm "
          f"result {warm['first_result_ms']:.1f} ms after it, of which importing the op's modules "
          f"{warm['op_modules_import_ms']:.1f} ms; imported on the way: {warm['imported']}; header closures "
          f"hashed: {warm['header_closures_hashed']}", flush=True)
    duel = head_to_head_rows()
    peers = hot_path_rows()
    ops = op_rows(args.ops.split(",") if args.ops else None)
    allocs = alloc_rows()
    for label, us in allocs.items():
        print(f"  hkjit.gemm allocating natively through {label}: {us:.2f} us")
    detail = native_detail_rows()
    for label, us in detail.items():
        print(f"  {label}: {us:.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"head_to_head_us": duel, "peers_us": peers, "ops_us": ops, "native_alloc_us": allocs, "native_detail_us": detail,
                       "warm_import_ms": warm["import_ms"], "warm_first_result_ms": warm["first_result_ms"],
                       "warm_op_modules_import_ms": warm["op_modules_import_ms"], "warm_imported": warm["imported"],
                       "warm_header_closures_hashed": warm["header_closures_hashed"],
                       "device": torch.cuda.get_device_name()}, f, indent=2)


if __name__ == "__main__":
    main()
