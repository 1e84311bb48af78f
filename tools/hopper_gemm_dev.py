"""Dev harness for kernel_sources/gemm_hopper.cuh on an H100/H200: build, check, time.

    PYTHONPATH=. python3 tools/hopper_gemm_dev.py --check            # correctness matrix
    PYTHONPATH=. python3 tools/hopper_gemm_dev.py --bench            # default configs vs cuBLAS
    PYTHONPATH=. python3 tools/hopper_gemm_dev.py --sweep 8192,8192,8192 --variants "128,256,2,4;..."
    PYTHONPATH=. python3 tools/hopper_gemm_dev.py --compile-only     # NVRTC report, no GPU needed

Compiles with NVRTC (cuda.bindings.nvrtc) exactly the unit hkjit generates, loads it with
cuModuleLoadData and launches it with cuLaunchKernel on torch's current stream. `--log FILE`
also appends everything printed to FILE.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from hkjit.ops import _hopper_gemm as hg  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LOG = None


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG:
        LOG.write(s + "\n")
        LOG.flush()


# ---- build ------------------------------------------------------------------------------------------
def unit_source(targs: str) -> str:
    return (f'#include "gemm_hopper.cuh"\nusing hkjit_kernel = gemm_hopper<{targs}>;\n'
            f'HK_ENTRY(hkjit_gemm, hkjit_kernel)\n')


def nvrtc_compile(targs: str, want_cubin=True):
    """-> (cubin or None, ptx text, ptxas report text) through hkjit's own NVRTC driver and pinned
    flags. Raises hkjit.CompileError on a compile error."""
    from pathlib import Path
    from hkjit import compiler, spec as spec_mod, targets
    target = targets.parse("sm_90a")
    comp = compiler.find_compiler(target, "nvrtc")
    result = comp.compile(unit_source(targs), Path("hkjit_unit.cu"), target,
                          [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], "hkjit_gemm")
    return (result.code if want_cubin else None), result.ptx, result.log


def ptxas_summary(report: str) -> str:
    import re
    regs = re.search(r"Used (\d+) registers", report)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    stack = re.search(r"(\d+) bytes stack frame", report)
    return (f"regs={regs.group(1) if regs else '?'} stack={stack.group(1) if stack else '?'} "
            f"spills={spill.group(1) + '/' + spill.group(2) if spill else '?'}")


class Kernel:
    _cache: dict = {}

    def __init__(self, cfg):
        from cuda.bindings import driver as cu
        self.cfg = cfg
        self.targs = hg.template_args(cfg)
        hit = Kernel._cache.get(self.targs)
        if hit is None:
            t0 = time.time()
            cubin, ptx, report = nvrtc_compile(self.targs)
            err, mod = cu.cuModuleLoadData(cubin)
            check(err, "cuModuleLoadData")
            err, fn = cu.cuModuleGetFunction(mod, b"hkjit_gemm")
            check(err, "cuModuleGetFunction")
            smem = hg.dynamic_smem(cfg)
            (err,) = cu.cuFuncSetAttribute(
                fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            check(err, "cuFuncSetAttribute")
            hit = (mod, fn, ptxas_summary(report), ptx.count("wgmma.mma_async"), time.time() - t0)
            Kernel._cache[self.targs] = hit
            log(f"  built <{self.targs}> {hit[2]} wgmma_in_ptx={hit[3]} ({hit[4]:.1f}s)")
        self.mod, self.fn, self.ptxas, _, _ = hit

    def prepare(self, M, N, K, args: hg.Args, num_sms, stream):
        """Pre-packed launch: returns a zero-argument callable."""
        from cuda.bindings import driver as cu
        gx, gy, gz = hg.grid(M, N, K, self.cfg, num_sms)
        nthr, smem = hg.threads(self.cfg), hg.dynamic_smem(self.cfg)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(args))
        keep = (args, params)
        fn = self.fn
        pptr = ctypes.addressof(params)

        def launch():
            (err,) = cu.cuLaunchKernel(fn, gx, gy, gz, nthr, 1, 1, smem, stream, pptr, 0)
            if err != cu.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuLaunchKernel: {err} {keep[0].M}")
        return launch


def check(err, what):
    from cuda.bindings import driver as cu
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {err}")


# ---- problem set-up ----------------------------------------------------------------------------------
TORCH_DT = {}


def tdt(name):
    import torch
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def make_operands(M, N, K, a_t, b_t, in_dt, gen=None):
    """A (M x K) and B (K x N) as torch views; a_t: A stored K x M; b_t: B stored N x K."""
    import torch
    dt = tdt(in_dt)
    a = (torch.randn(K, M, device="cuda", dtype=dt).t() if a_t else torch.randn(M, K, device="cuda", dtype=dt))
    b = (torch.randn(N, K, device="cuda", dtype=dt).t() if b_t else torch.randn(K, N, device="cuda", dtype=dt))
    return a, b


def build_call(M, N, K, a, b, c, out_dt, overrides, num_sms, bias=None, cin=None, alpha=1.0, beta=0.0):
    import torch
    overrides = dict(overrides or {})
    direct = overrides.pop("_direct", False)
    akm, atma = hg.operand_layout(a.data_ptr(), M, K, a.stride(0), a.stride(1))
    bkm, btma = hg.operand_layout(b.data_ptr(), N, K, b.stride(1), b.stride(0))
    cfg = hg.choose_config(M, N, K, akm, bkm, str(a.dtype).split(".")[1], out_dt, num_sms, overrides,
                           has_bias=bias is not None, has_c=cin is not None, a_tma=atma, b_tma=btma,
                           c_tma=not direct and hg.output_tma_ok(c.data_ptr(), M, N, c.stride(0), c.element_size()))
    k = Kernel(cfg)
    ws = workspace(cfg, M, N)
    args = hg.make_args(cfg, a.data_ptr(), (M, K), (a.stride(0), a.stride(1)), b.data_ptr(), (K, N),
                        (b.stride(0), b.stride(1)), c.data_ptr(), (c.stride(0), 1),
                        bias_ptr=bias.data_ptr() if bias is not None else None,
                        c_in_ptr=cin.data_ptr() if cin is not None else None,
                        c_in_strides=(cin.stride(0), 1) if cin is not None else None, alpha=alpha, beta=beta,
                        workspace_ptr=ws, partials_ptr=ws and ws + hg.workspace_counter_bytes(M, N, cfg))
    stream = torch.cuda.current_stream().cuda_stream
    return cfg, k, k.prepare(M, N, K, args, num_sms, stream)


_WS: dict = {}


def workspace(cfg, M, N):
    """Split-K counters (then the partials, in one buffer here), zeroed once and then reused by
    every launch of that config and shape, as hkjit.gemm does its counters: a wrong counter reset shows up as a wrong second result."""
    import torch
    nbytes = hg.workspace_bytes(M, N, cfg)
    if not nbytes:
        return 0
    key = (hg.template_args(cfg), M, N)
    if key not in _WS:
        _WS[key] = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    return _WS[key].data_ptr()


# ---- correctness -------------------------------------------------------------------------------------
def run_check(cases, num_sms):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, fails = [], 0
    for (M, N, K, a_t, b_t, in_dt, out_dt, use_bias, use_c, ov) in cases:
        short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
        name = f"{M}x{N}x{K} A{'t' if a_t else 'n'}B{'t' if b_t else 'n'} {short[in_dt]}->{short[out_dt]}" \
               f"{' bias' if use_bias else ''}{' c' if use_c else ''} {ov or ''}"
        try:
            errs = []
            for rep in range(2):   # fresh inputs each time; a moving error is a race
                a, b = make_operands(M, N, K, a_t, b_t, in_dt)
                odt = tdt(out_dt)
                ldc = N + 8
                buf = torch.full((M + 2, ldc), 3.0, device="cuda", dtype=odt)
                c = buf[:M, :N]
                c.fill_(float("nan"))
                bias = torch.randn(N, device="cuda", dtype=odt) if use_bias else None
                cin = torch.randn(M, N, device="cuda", dtype=odt) if use_c else None
                alpha, beta = (0.5, -1.5) if use_c else (1.0, 0.0)
                cfg, k, launch = build_call(M, N, K, a, b, c, out_dt, ov, num_sms, bias, cin, alpha, beta)
                launch()
                launch()
                c.fill_(float("nan"))
                launch()             # the third launch on the same workspace is the one checked
                torch.cuda.synchronize()
                ref = alpha * (a.float() @ b.float())
                if use_c:
                    ref += beta * cin.float()
                if use_bias:
                    ref += bias.float()
                out = c.float()
                err = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                if torch.isnan(out).any():
                    err = float("nan")
                guard = buf.float().clone()
                guard[:M, :N] = 3.0
                if not bool((guard == 3.0).all()):
                    err = float("inf")   # wrote outside C
                errs.append(err)
            ok = all(e < 1e-2 for e in errs)
            fails += not ok
            lay = f"{'K' if cfg['a_kmajor'] else 'M'}{'K' if cfg['b_kmajor'] else 'N'}" \
                  f"{' split' + str(cfg['split_k']) if cfg['split_k'] > 1 else ''}" \
                  f"{'' if cfg['a_tma'] else ' A-plain'}{'' if cfg['b_tma'] else ' B-plain'}"
            rows.append((name, f"{cfg['block_m']}x{cfg['block_n']}x{cfg['consumers']}c{cfg['stages']}s {lay}",
                         " ".join(f"{e:.2e}" for e in errs), "ok" if ok else "FAIL"))
        except Exception as e:  # noqa: BLE001
            fails += 1
            rows.append((name, "-", repr(e)[:200], "FAIL"))
        log(" | ".join(rows[-1]))
    log("\n## correctness")
    log("| case | config | rel. Frobenius error (2 fresh draws) | |\n|---|---|---|---|")
    for r in rows:
        log("| " + " | ".join(r) + " |")
    log(f"{len(rows) - fails}/{len(rows)} passed")
    return fails


CHECK_CASES = [
    # M, N, K, A transposed, B transposed, in, out, bias, c, overrides
    (1000, 1000, 1000, False, False, "bfloat16", "bfloat16", False, False, None),
    (1000, 1000, 1000, True, False, "bfloat16", "bfloat16", False, False, None),
    (1000, 1000, 1000, False, True, "float16", "float16", False, False, None),
    (1000, 1000, 1000, True, True, "float16", "float32", False, False, None),
    (1, 4096, 4096, False, False, "bfloat16", "bfloat16", False, False, None),
    (1, 4096, 4096, False, True, "bfloat16", "float32", True, False, None),
    (4097, 257, 63, False, False, "bfloat16", "bfloat16", False, False, None),
    (4097, 257, 63, True, True, "float16", "float32", True, True, None),
    (1, 1, 1, False, False, "bfloat16", "bfloat16", False, False, None),
    (1, 1, 1, True, True, "float16", "float16", True, True, None),
    (2048, 2048, 2048, False, False, "bfloat16", "bfloat16", True, True, None),
    (2048, 2048, 2048, False, True, "bfloat16", "float32", False, False, None),
    (2048, 2048, 2048, True, False, "float16", "bfloat16", False, False, None),
    (2048, 2048, 2048, True, True, "bfloat16", "bfloat16", False, False, None),
    (4096, 4096, 4096, False, False, "bfloat16", "bfloat16", False, False, None),
    (16, 4096, 4096, False, False, "bfloat16", "bfloat16", False, False, None),
    (128, 8192, 8192, False, False, "bfloat16", "bfloat16", False, False, None),
    (1000, 1000, 1000, False, False, "bfloat16", "bfloat16", False, False, dict(block_m=256, block_n=128, consumers=2)),
    (1000, 1000, 1000, False, True, "bfloat16", "bfloat16", False, False, dict(block_m=192, block_n=128, consumers=3)),
    (1000, 1000, 1000, True, False, "bfloat16", "bfloat16", False, False, dict(block_m=128, block_n=192, consumers=2)),
    (1000, 1000, 1000, False, False, "bfloat16", "bfloat16", False, False, dict(block_m=64, block_n=16, stages=3)),
    (1000, 1000, 1000, True, False, "bfloat16", "bfloat16", False, False, dict(block_m=64, block_n=32, stages=2)),
    (1000, 1000, 1000, False, False, "bfloat16", "bfloat16", False, False, dict(block_m=256, block_n=64, consumers=4)),
    (1001, 1003, 999, False, True, "float16", "float16", True, True, dict(block_m=128, block_n=64)),
    (1000, 1000, 1000, True, True, "bfloat16", "bfloat16", False, False, dict(block_m=64, block_n=256)),
    # split-K (default for small M, long K; overrides elsewhere)
    (16, 4096, 4096, False, True, "bfloat16", "bfloat16", False, False, None),
    (16, 4096, 4096, True, True, "float16", "float32", True, True, None),
    (64, 4096, 14336, False, True, "bfloat16", "bfloat16", True, True, None),
    (37, 1000, 3000, False, False, "bfloat16", "bfloat16", True, True, dict(split_k=4)),
    (33, 1003, 2999, True, False, "float16", "float16", True, True, dict(split_k=3)),
    (256, 512, 4096, False, False, "bfloat16", "float32", False, True, dict(block_m=128, block_n=128, split_k=3)),
    (1000, 1000, 2000, False, True, "bfloat16", "bfloat16", True, False, dict(block_m=64, block_n=64, split_k=4)),
    (5, 300, 130, False, False, "bfloat16", "bfloat16", False, False, dict(split_k=16)),
]


# ---- timing ------------------------------------------------------------------------------------------
def bench(M, N, K, a_t, b_t, variants, num_sms, in_dt="bfloat16", out_dt="bfloat16"):
    import torch
    from triton.testing import do_bench
    flops = 2.0 * M * N * K
    per_set = (M * K + K * N + M * N) * 2
    sets = max(1, min(8, int(-(-3 * 64e6 // per_set))))   # rotate inputs over > 3x the L2
    ops = [make_operands(M, N, K, a_t, b_t, in_dt) for _ in range(sets)]
    outs = [torch.empty(M, N, device="cuda", dtype=tdt(out_dt)) for _ in range(sets)]
    i = [0]

    def torch_fn():
        j = i[0] = (i[0] + 1) % sets
        torch.matmul(ops[j][0], ops[j][1], out=outs[j])
    t_ref = do_bench(torch_fn, warmup=50, rep=300, return_mode="median")
    res = [("cuBLAS", flops / t_ref / 1e9, t_ref, 1.0)]
    for ov in variants:
        try:
            calls = [build_call(M, N, K, a, b, c, out_dt, ov, num_sms)[2] for (a, b), c in zip(ops, outs)]
            ovc = {k: v for k, v in (ov or {}).items() if not k.startswith("_")}
            cfg = hg.choose_config(M, N, K, True, True, in_dt, out_dt, num_sms, ovc)
            def fn():
                j = i[0] = (i[0] + 1) % sets
                calls[j]()
            fn()
            torch.cuda.synchronize()
            t = do_bench(fn, warmup=50, rep=300, return_mode="median")
            cfg = build_call(M, N, K, *ops[0], outs[0], out_dt, ov, num_sms)[0]
            tag = (f"{cfg['block_m']}x{cfg['block_n']} c{cfg['consumers']} s{cfg['stages']} g{cfg['group_m']}"
                   f"{' k' + str(cfg['split_k']) if cfg['split_k'] > 1 else ''}"
                   f"{' direct-C' if (ov or {}).get('_direct') else ''}{' non-persistent' if not cfg['persistent'] else ''}")
            res.append((tag, flops / t / 1e9, t, t_ref / t))
        except Exception as e:  # noqa: BLE001
            res.append((f"{ov} ERROR {repr(e)[:120]}", 0, 0, 0))
    # cuBLAS again: the spread between the two is the noise floor
    t_ref2 = do_bench(torch_fn, warmup=50, rep=300, return_mode="median")
    res.append(("cuBLAS (again)", flops / t_ref2 / 1e9, t_ref2, t_ref / t_ref2))
    return res


BENCH_SHAPES = [
    (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (4096, 14336, 4096),
    (4096, 4096, 14336), (128, 8192, 8192), (16, 4096, 4096),
]


def parse_variants(s):
    """'128,256,2,4;128,128,2,6,g16' -> override dicts (block_m, block_n, consumers, stages[, gN])."""
    out = []
    if not s:
        return [None]
    for part in s.split(";"):
        if part.strip() in ("", "default"):
            out.append(None)
            continue
        f = part.split(",")
        d = dict(block_m=int(f[0]), block_n=int(f[1]), consumers=int(f[2]), stages=int(f[3]))
        for extra in f[4:]:
            if extra.startswith("g"):
                d["group_m"] = int(extra[1:])
            if extra == "d":
                d["_direct"] = True
            if extra == "np":
                d["persistent"] = 0
            if extra.startswith("k"):
                d["split_k"] = int(extra[1:])
        out.append(d)
    return out


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--shapes", default="")
    ap.add_argument("--variants", default="")
    ap.add_argument("--layouts", default="nn", help="comma list of nn,nt,tn,tt (A,B transposed)")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--log", metavar="FILE", help="also append everything printed to FILE")
    a = ap.parse_args()
    if a.log:
        LOG = open(a.log, "a")
    if a.compile_only:
        for t in ["hk::bf16, hk::bf16, true, false, 128, 256, 64, 2, 4, 8, false, false, true, true"]:
            _, ptx, rep = nvrtc_compile(t, want_cubin=True)
            log(t, ptxas_summary(rep), "wgmma:", ptx.count("wgmma.mma_async"))
        return 0
    import torch
    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    log(f"# device: {props.name}, {num_sms} SMs, torch {torch.__version__}, date {time.strftime('%Y-%m-%d %H:%M')}")
    fails = 0
    if a.check:
        fails = run_check(CHECK_CASES, num_sms)
    if a.bench:
        shapes = BENCH_SHAPES if not a.shapes else [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
        variants = parse_variants(a.variants)
        table = []
        for lay in a.layouts.split(","):
            for (M, N, K) in shapes:
                res = bench(M, N, K, lay[0] == "t", lay[1] == "t", variants, num_sms)
                for r in res:
                    table.append((f"{M}x{N}x{K} {lay}",) + r)
                    log(f"  {M}x{N}x{K} {lay} {r[0]:<28} {r[1]:7.1f} TFLOP/s {r[2]*1e3:9.1f} us  x{r[3]:.3f}")
        log("\n## timing (median, triton.testing.do_bench)")
        log("| shape | kernel | TFLOP/s | time (us) | vs cuBLAS |\n|---|---|---|---|---|")
        for r in table:
            log(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]*1e3:.1f} | {r[4]:.3f} |")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
