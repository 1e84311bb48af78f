"""`hkjit bench`: every figure hkjit claims, reproducible by one command.

On a CUDA GPU: each op against its peers in this process (GEMM vs torch.matmul/cuBLAS), the JIT's
own figures (cold compile per op and target, warm start, hot-path µs per call against a raw
launch). Everywhere: the static AMD report (`hkjit inspect` figures for gfx942 and gfx950) and the
simulator's pass/fail per op. Output: tables on stdout, --json, --plot (PNGs), --markdown (the
report in docs/benchmarks.md).
"""

import datetime
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import __version__, runtime

OPS = ("gemm",)


def _log(msg=""):
    print(msg, flush=True)


def environment() -> dict:
    env = {"hkjit": __version__, "python": platform.python_version(), "date": datetime.date.today().isoformat(),
           "command": "hkjit bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else " ".join(sys.argv)}
    for mod in ("torch", "triton", "cuda.bindings", "numpy"):
        try:
            env[mod] = __import__(mod, fromlist=["__version__"]).__version__
        except Exception:
            pass
    if runtime.gpu_count("cuda"):
        env["device"] = runtime.get("cuda", 0).name
    return env


def cold_compile(targets=("sm_90a", "gfx950", "gfx942")) -> list:
    """Seconds to specialise + compile + store each op's default 4096³ kernel into an empty cache."""
    import os
    from .. import api, cache, jit
    rows = []
    old = os.environ.get("HKJIT_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HKJIT_CACHE_DIR"] = tmp
        cache._default = None
        jit._keys.clear()
        try:
            for op in OPS:
                for target in targets:
                    t0 = time.perf_counter()
                    try:
                        built = api.build(op, target=target, m=4096, n=4096, k=4096)
                        rows.append({"op": op, "target": target, "seconds": time.perf_counter() - t0,
                                     "compiler": built.meta.get("compiler", "")})
                    except Exception as e:
                        rows.append({"op": op, "target": target, "error": f"{type(e).__name__}: {e}"[:200]})
        finally:
            if old is None:
                os.environ.pop("HKJIT_CACHE_DIR", None)
            else:
                os.environ["HKJIT_CACHE_DIR"] = old
            cache._default = None
            jit._keys.clear()
    return rows


def static_amd(shapes) -> list:
    from .. import static
    rows = []
    for arch in ("gfx950", "gfx942"):
        for (M, N, K) in shapes:
            try:
                r = static.inspect("gemm", arch, m=M, n=N, k=K)
            except Exception as e:
                rows.append({"target": arch, "shape": [M, N, K], "error": f"{type(e).__name__}: {e}"[:200]})
                continue
            p = r["params"]
            rows.append({"target": arch, "shape": [M, N, K],
                         "tile": f"{p.get('block_m')}x{p.get('block_n')}x{p.get('block_k')} w{p.get('waves')}",
                         "vgprs": r["vgprs"], "agprs": r["agprs"], "sgprs": r["sgprs"], "lds_bytes": r["lds_bytes"],
                         "spills": r["spills"], "waves_per_simd": r.get("waves_per_simd"),
                         "mfma_per_k_step": r.get("mfma_per_k_step")})
    return rows


def simulator_checks() -> list:
    """Each op at small ragged shapes on sim:gfx942 and sim:gfx950 against a float64 reference."""
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
                rows.append({"op": "gemm", "device": dev, "shape": [M, N, K], "rel_err": err,
                             "passed": bool(err < 1e-2), "seconds": time.perf_counter() - t0})
            except Exception as e:
                rows.append({"op": "gemm", "device": dev, "shape": [M, N, K], "passed": False,
                             "error": f"{type(e).__name__}: {e}"[:300]})
    return rows


def simulator_speed() -> list:
    """Wave-instructions per second of the simulator on one core, running hkjit.gemm's code
    objects on sim:* with hazard checks on (the default), after a warm-up launch."""
    import hkjit
    from ..ops import gemm as gemm_op
    rows = []
    rng = np.random.default_rng()
    for dev in ("sim:gfx950", "sim:gfx942"):
        for (M, N, K) in ((256, 256, 256), (1024, 1024, 256)):
            a = rng.standard_normal((M, K)).astype(np.float16)
            b = rng.standard_normal((K, N)).astype(np.float16)
            hkjit.gemm(a, b, device=dev)  # compile / load / first run
            launcher = next(l for sig, l in gemm_op._launchers.items()
                            if sig[7:10] == (M, N, K) and sig[12] == "sim" and sig[13] == dev[4:])
            sim_kernel = launcher.kernel.kernel
            before = sim_kernel.wave_instructions
            t0 = time.perf_counter()
            hkjit.gemm(a, b, device=dev)
            seconds = time.perf_counter() - t0
            count = sim_kernel.wave_instructions - before
            rows.append({"device": dev, "shape": [M, N, K], "seconds": seconds, "wave_instructions": count,
                         "per_second": count / seconds})
    return rows


def plot(results, directory):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    rows = results.get("gemm") or []
    for layout in sorted({r["layout"] for r in rows}):
        sel = [r for r in rows if r["layout"] == layout]
        labels = [f"{r['M']}x{r['N']}x{r['K']}" for r in sel]
        x = np.arange(len(sel))
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.bar(x - 0.2, [r["hkjit_tflops"] for r in sel], 0.4, label="hkjit")
        ax.bar(x + 0.2, [r["cublas_tflops"] for r in sel], 0.4, label="torch.matmul (cuBLAS)")
        ax.set_xticks(x, labels, rotation=20, fontsize=8)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"bf16 GEMM ({layout}) on {results['env'].get('device', '?')}")
        ax.legend()
        fig.tight_layout()
        path = directory / f"gemm_{layout}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(str(path))
    return paths


def markdown(results, plots=()) -> str:
    env = results["env"]
    out = ["# hkjit benchmarks", "",
           f"Generated by `{env.get('command')}` on {env.get('date')}.", "",
           "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in env.items() if k not in ("command", "date")]
    if results.get("gemm"):
        out += ["", "## GEMM vs torch.matmul (cuBLAS), bf16, same process", "",
                "Medians of CUDA-event timings (triton.testing.do_bench), hkjit and cuBLAS alternated over three "
                "rounds (the spread columns give max/min − 1 across rounds), inputs rotated past L2, each "
                "configuration checked against a float32 reference first. `nt` = B transposed (A·Bᵀ).", "",
                "| M×N×K | layout | hkjit TFLOP/s | cuBLAS TFLOP/s | ratio | spread hkjit / cuBLAS | rel. error |",
                "|---|---|---|---|---|---|---|"]
        for r in results["gemm"]:
            out.append(f"| {r['M']}×{r['N']}×{r['K']} | {r['layout']} | {r['hkjit_tflops']:.1f} | "
                       f"{r['cublas_tflops']:.1f} | {r['ratio']:.3f} | {r['hkjit_spread']:.1%} / "
                       f"{r['cublas_spread']:.1%} | {r['rel_err']:.1e} |")
        for p in plots:
            out += ["", f"![{Path(p).stem}]({Path(p).name if 'img' not in p else 'img/' + Path(p).name})"]
    if results.get("hot_path"):
        out += ["", "## JIT: host µs per call (tiny inputs, same process)", "", "| path | µs per call |", "|---|---|"]
        out += [f"| {k} | {v if isinstance(v, str) else f'{v:.2f}'} |" for k, v in results["hot_path"].items()]
    if results.get("warm_start"):
        w = results["warm_start"]
        out += ["", f"Warm start (fresh process, populated cache): `import hkjit` {w['import_ms']:.1f} ms, "
                    f"first gemm result {w['first_result_ms']:.1f} ms of hkjit time (import excluded)."]
    if results.get("cold_compile"):
        out += ["", "## JIT: cold compile, default 4096³ GEMM", "", "| op | target | seconds | compiler |",
                "|---|---|---|---|"]
        for r in results["cold_compile"]:
            compiler = str(r.get("compiler", r.get("error", ""))).split(" | ")[0]  # first line of --version
            out.append(f"| {r['op']} | {r['target']} | {r.get('seconds', float('nan')):.2f} | {compiler} |")
    if results.get("static_amd"):
        out += ["", "## AMD static report (clang-22; compiled, never run on AMD hardware)", "",
                "| target | M×N×K | tile | VGPR/AGPR/SGPR | LDS | spills | waves/SIMD | MFMA per K-step (block / tile arithmetic) |",
                "|---|---|---|---|---|---|---|---|"]
        for r in results["static_amd"]:
            if "error" in r:
                out.append(f"| {r['target']} | {r['shape']} | error: {r['error']} | | | | | |")
                continue
            k = r.get("mfma_per_k_step") or {}
            out.append(f"| {r['target']} | {'×'.join(map(str, r['shape']))} | {r['tile']} | "
                       f"{r['vgprs']}/{r['agprs']}/{r['sgprs']} | {r['lds_bytes'] // 1024} KiB | {r['spills']} | "
                       f"{r['waves_per_simd']} | {k.get('per_block', '?')} / {k.get('tile_arithmetic', '?')} |")
    if results.get("simulator"):
        out += ["", "## Simulator (hkjit's CDNA simulator executing the same code objects)", "",
                "| op | device | shape | result | seconds |", "|---|---|---|---|---|"]
        for r in results["simulator"]:
            verdict = f"pass (err {r['rel_err']:.1e})" if r.get("passed") else f"FAIL {r.get('error', r.get('rel_err'))}"
            out.append(f"| {r['op']} | {r['device']} | {'×'.join(map(str, r['shape']))} | {verdict} | "
                       f"{r.get('seconds', float('nan')):.2f} |")
    if results.get("simulator_speed"):
        out += ["", "Simulator speed on one core (hazard checks on), GEMM code objects as above:", "",
                "| device | M×N×K | seconds | wave-instructions | per second |", "|---|---|---|---|---|"]
        for r in results["simulator_speed"]:
            out.append(f"| {r['device']} | {'×'.join(map(str, r['shape']))} | {r['seconds']:.2f} | "
                       f"{r['wave_instructions']:,} | {r['per_second']:,.0f} |")
    out += ["", "## Where the analyses are", "",
            "Per-kernel design notes, every measured variant with its prediction and outcome, and ncu "
            "profiles of the shapes that fall short: `docs/notes/hopper_gemm.md` (sm_90a), "
            "`docs/notes/cdna_gemm.md` (gfx942/gfx950, static only), `docs/notes/simulator.md`. "
            "GPU sections come from a run on the GPU machine (`gpu run command` above, its JSON in "
            "`docs/bench/`); the AMD sections need clang >= 20 and run anywhere; on a machine with both, "
            "`hkjit bench --json F --plot docs/img --markdown docs/benchmarks.md` produces the whole report."]
    return "\n".join(out) + "\n"


def _amd_compiler_missing():
    from .. import compiler, targets
    try:
        compiler.find_compiler(targets.parse("gfx950"))
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def merge(results: dict, paths) -> dict:
    """Fill the sections this run did not produce from earlier runs' JSON (e.g. the GPU sections
    measured on a GPU machine, the AMD sections on a machine with clang)."""
    for path in paths or ():
        earlier = json.loads(Path(path).read_text())
        for section, value in earlier.items():
            if section == "env":
                for k, v in value.items():
                    results["env"].setdefault(k if k not in results["env"] else f"gpu run {k}", v)
            elif not results.get(section):
                results[section] = value
    return results


def run(ops=OPS, quick=False, json_path=None, plot_dir=None, markdown_path=None, merge_paths=(),
        gpu=True) -> dict:
    results = {"env": environment()}
    _log(f"hkjit bench on {results['env'].get('device', 'no GPU (static AMD report and simulator only)')}")
    have_gpu = gpu and bool(runtime.gpu_count("cuda"))
    shapes = None
    if have_gpu and "gemm" in ops:
        from . import gemm, jit_overhead
        _log("\nGEMM vs torch.matmul (cuBLAS):")
        results["gemm"] = gemm.run(quick=quick, log=_log)
        shapes = sorted({(r["M"], r["N"], r["K"]) for r in results["gemm"]})
        _log("\nJIT hot path:")
        results["hot_path"] = jit_overhead.hot_path_rows(log=_log)
        imp, first = jit_overhead.warm_start()
        results["warm_start"] = {"import_ms": imp, "first_result_ms": first}
        _log(f"warm start: import {imp:.1f} ms, first result {first:.1f} ms")
    _log("\nCold compile:")
    results["cold_compile"] = cold_compile(("sm_90a",) + (() if _amd_compiler_missing() else ("gfx950", "gfx942")))
    for r in results["cold_compile"]:
        _log(f"  {r['op']} {r['target']}: " + (f"{r['seconds']:.2f} s" if "seconds" in r else r["error"]))
    missing = _amd_compiler_missing()
    if missing:
        _log(f"\nAMD static report and simulator skipped: no AMD compiler here ({missing})")
        results["amd_skipped"] = missing
    else:
        _log("\nAMD static report:")
        from .gemm import SHAPES_FULL, SHAPES_QUICK
        results["static_amd"] = static_amd(shapes or (SHAPES_QUICK if quick else SHAPES_FULL))
        for r in results["static_amd"]:
            _log(f"  {r}")
        _log("\nSimulator:")
        results["simulator"] = simulator_checks()
        for r in results["simulator"]:
            _log(f"  {r}")
        results["simulator_speed"] = simulator_speed()
        for r in results["simulator_speed"]:
            _log(f"  {r['device']} gemm {r['shape']}: {r['seconds']:.2f} s, {r['per_second']:,.0f} wave-instructions/s")
    merge(results, merge_paths)
    plots = plot(results, plot_dir) if plot_dir and results.get("gemm") else []
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2, default=str))
    if markdown_path:
        Path(markdown_path).write_text(markdown(results, plots))
    return results
