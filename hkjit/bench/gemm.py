"""GEMM: hkjit against torch.matmul (cuBLAS) in one process, with ratios.

Medians of CUDA-event timings (triton.testing.do_bench when present) with warm-up; inputs rotate
over several buffers so that small problems are not timed out of L2; every timed configuration
is first checked against a float32 reference on fresh random inputs.
"""

import statistics
import time
from pathlib import Path

import numpy as np

from .timing import median_ms as _bench

SHAPES_FULL = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (4096, 14336, 4096),
               (4096, 4096, 14336), (128, 8192, 8192), (16, 4096, 4096)]
SHAPES_QUICK = [(4096, 4096, 4096), (8192, 8192, 8192), (128, 8192, 8192), (16, 4096, 4096)]


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


def static_shapes(quick) -> list:
    return [dict(m=M, n=N, k=K) for (M, N, K) in (SHAPES_QUICK if quick else SHAPES_FULL)]


def simulator_checks() -> list:
    """hkjit.gemm at small ragged shapes on sim:gfx942 and sim:gfx950 against a float64 reference."""
    import hkjit
    rows = []
    rng = np.random.default_rng()
    try:
        import ml_dtypes
        bf16 = ml_dtypes.bfloat16
    except ImportError:
        bf16 = np.float16
    for dev in ("sim:gfx942", "sim:gfx950"):
        for (M, N, K) in ((128, 128, 128), (200, 136, 96), (37, 50, 29)):
            a = rng.standard_normal((M, K)).astype(bf16)
            b = rng.standard_normal((K, N)).astype(bf16)
            t0 = time.perf_counter()
            try:
                c = hkjit.gemm(a, b, device=dev, out_dtype="float32")
                ref = a.astype(np.float64) @ b.astype(np.float64)
                err = float(np.linalg.norm(c - ref) / np.linalg.norm(ref))
                rows.append({"op": "gemm", "device": dev, "shape": f"{M}×{N}×{K}", "rel_err": err,
                             "passed": bool(err < 1e-2), "seconds": time.perf_counter() - t0})
            except Exception as e:
                rows.append({"op": "gemm", "device": dev, "shape": f"{M}×{N}×{K}", "passed": False,
                             "error": f"{type(e).__name__}: {e}"[:300]})
    return rows


def simulator_speed() -> list:
    """Wave-instructions per second of the simulator on one core, running hkjit.gemm's code
    objects on sim:* with hazard checks on (the default), after a warm-up launch."""
    import hkjit
    from .. import launch
    rows = []
    rng = np.random.default_rng()
    for dev in ("sim:gfx950", "sim:gfx942"):
        for (M, N, K) in ((256, 256, 256), (1024, 1024, 256)):
            a = rng.standard_normal((M, K)).astype(np.float16)
            b = rng.standard_normal((K, N)).astype(np.float16)
            hkjit.gemm(a, b, device=dev)  # compile / load / first run
            launcher = next(ln for sig, ln in launch.launchers()
                            if sig[0] == "gemm" and sig[3:5] == ("sim", dev[4:]) and ln.binding.request["m"] == M
                            and ln.binding.request["n"] == N and ln.binding.request["k"] == K)
            sim_kernel = launcher.kernel.kernel
            before = sim_kernel.wave_instructions
            t0 = time.perf_counter()
            hkjit.gemm(a, b, device=dev)
            seconds = time.perf_counter() - t0
            count = sim_kernel.wave_instructions - before
            rows.append({"op": "gemm", "device": dev, "shape": f"{M}×{N}×{K}", "seconds": seconds,
                         "wave_instructions": count,
                         "per_second": count / seconds})
    return rows


def plot(rows, env, directory):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for layout in sorted({r["layout"] for r in rows}):
        sel = [r for r in rows if r["layout"] == layout]
        labels = [f"{r['M']}x{r['N']}x{r['K']}" for r in sel]
        x = np.arange(len(sel))
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.bar(x - 0.2, [r["hkjit_tflops"] for r in sel], 0.4, label="hkjit")
        ax.bar(x + 0.2, [r["cublas_tflops"] for r in sel], 0.4, label="torch.matmul (cuBLAS)")
        ax.set_xticks(x, labels, rotation=20, fontsize=8)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"bf16 GEMM ({layout}) on {env.get('device', '?')}")
        ax.legend()
        fig.tight_layout()
        path = directory / f"gemm_{layout}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(str(path))
    return paths


def markdown(rows, plots=()) -> list:
    out = []
    out += ["", "## GEMM vs torch.matmul (cuBLAS), bf16, same process", "",
            "Medians of CUDA-event timings (triton.testing.do_bench), hkjit and cuBLAS alternated over three "
            "rounds (the spread columns give max/min − 1 across rounds), inputs rotated past L2, each "
            "configuration checked against a float32 reference first. `nt` = B transposed (A·Bᵀ).", "",
            "| M×N×K | layout | hkjit TFLOP/s | cuBLAS TFLOP/s | ratio | spread hkjit / cuBLAS | rel. error |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['M']}×{r['N']}×{r['K']} | {r['layout']} | {r['hkjit_tflops']:.1f} | "
                   f"{r['cublas_tflops']:.1f} | {r['ratio']:.3f} | {r['hkjit_spread']:.1%} / "
                   f"{r['cublas_spread']:.1%} | {r['rel_err']:.1e} |")
    for p in plots:
        out += ["", f"![{Path(p).stem}]({Path(p).name if 'img' not in p else 'img/' + Path(p).name})"]
    return out
