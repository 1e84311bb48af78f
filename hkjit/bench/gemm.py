"""GEMM: hkjit against torch.matmul (cuBLAS) in one process, with ratios.

Medians of CUDA-event timings (triton.testing.do_bench when present) with warm-up; inputs rotate
over several buffers so that small problems are not timed out of L2; every timed configuration
is first checked against a float32 reference on fresh random inputs.
"""

import statistics

SHAPES_FULL = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (4096, 14336, 4096),
               (4096, 4096, 14336), (128, 8192, 8192), (16, 4096, 4096)]
SHAPES_QUICK = [(4096, 4096, 4096), (8192, 8192, 8192), (128, 8192, 8192), (16, 4096, 4096)]


def _bench(fn, warmup_ms=100, rep_ms=400):
    try:
        from triton.testing import do_bench
        return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    except ImportError:
        import torch
        for _ in range(10):
            fn()
        times = []
        for _ in range(50):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)


def _inputs(M, N, K, dtype, layout, copies):
    import torch
    sets = []
    for _ in range(copies):
        a = torch.randn(M, K, device="cuda", dtype=dtype)
        b = torch.randn(N, K, device="cuda", dtype=dtype).t() if layout == "nt" else \
            torch.randn(K, N, device="cuda", dtype=dtype)
        sets.append((a, b, torch.empty(M, N, device="cuda", dtype=dtype)))
    return sets


def run(shapes=None, quick=False, layouts=("nn", "nt"), dtype_name="bfloat16", log=print, rounds=3, **tile_overrides):
    import torch
    import hkjit
    shapes = shapes or (SHAPES_QUICK if quick else SHAPES_FULL)
    dtype = getattr(torch, dtype_name)
    rows = []
    for (M, N, K) in shapes:
        for layout in layouts:
            per_set = 2 * (M * K + K * N + M * N)
            copies = max(1, min(8, (512 << 20) // per_set))  # rotate until ~512 MB, well past L2
            sets = _inputs(M, N, K, dtype, layout, copies)
            a, b, out = sets[0]
            out.fill_(float("nan"))
            hkjit.gemm(a, b, out=out, **tile_overrides)
            ref = a.float() @ b.float()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            del ref
            it = {"i": 0}

            def step(fn):
                def call():
                    x, y, o = sets[it["i"] % copies]
                    it["i"] += 1
                    fn(x, y, o)
                return call
            # Alternate the two, three rounds each: clocks and neighbours drift, and a single
            # back-to-back pair can favour either side by several percent.
            hk_times, cb_times = [], []
            for _ in range(rounds):
                cb_times.append(_bench(step(lambda x, y, o: torch.matmul(x, y, out=o))))
                hk_times.append(_bench(step(lambda x, y, o: hkjit.gemm(x, y, out=o, **tile_overrides))))
            t_hk, t_cb = statistics.median(hk_times), statistics.median(cb_times)
            flops = 2.0 * M * N * K
            row = {"M": M, "N": N, "K": K, "layout": layout, "dtype": dtype_name,
                   "hkjit_ms": t_hk, "cublas_ms": t_cb, "hkjit_tflops": flops / t_hk / 1e9,
                   "cublas_tflops": flops / t_cb / 1e9, "ratio": t_cb / t_hk, "rel_err": err,
                   "cublas_spread": max(cb_times) / min(cb_times) - 1, "hkjit_spread": max(hk_times) / min(hk_times) - 1,
                   "correct": bool(err < 1e-2)}
            rows.append(row)
            log(f"  gemm {M:>6}x{N:>6}x{K:>6} {layout}  hkjit {row['hkjit_tflops']:7.1f} TFLOP/s  "
                f"cuBLAS {row['cublas_tflops']:7.1f}  ratio {row['ratio']:5.2f}x  (spread hkjit {row['hkjit_spread']:.0%}, "
                f"cuBLAS {row['cublas_spread']:.0%})  err {err:.1e}"
                + ("" if row["correct"] else "  WRONG"))
            sets.clear()  # free the inputs before the next shape
            torch.cuda.empty_cache()
    return rows
