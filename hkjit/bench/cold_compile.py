"""Cold compile: the seconds `hkjit.build` takes to specialise, compile and store a kernel that no
cache holds, each op at its default shape on each target; with and without precompiled headers.

    python -m hkjit.bench.cold_compile [--ops gemm,rms_norm] [--targets sm_90a,gfx942,gfx950]
                                       [--breakdown] [--parallel] [--json FILE]

Per op and target, in one process whose compilers were found and asked their versions first (no
row pays for that), three builds into empty kernel caches:
  no PCH      HKJIT_PCH=0
  first       PCH on, nothing built before: clang builds the PCH beside this compile; NVRTC
              compiles without one (it writes one at a process's second compile of a source)
  PCH reused  the kernel cache emptied again and the PCH kept (clang's on disk, as any later
              process finds it; NVRTC's in this process, the only one that can read it), the
              PCH made by first compiling another specialisation of the same source
and whether the three code objects are byte-identical (they must be).

--breakdown: where one compile's time goes (clang -ftime-report groups and its slowest passes;
NVRTC's --time phases), for the default GEMM, with and without a PCH.
--parallel: every op's default kernel on every target through `precompile`, one at a time and
then on every CPU, fresh caches each; wall time and whether the two bundles hold the same kernels.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .. import api, cache, compiler, deploy, jit, ops, pch, spec, targets

DEFAULT_TARGETS = ("sm_90a", "gfx942", "gfx950")


@contextlib.contextmanager
def environment(**values):
    """os.environ with `values` set (None: the variable removed) inside the block, restored after."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        _set_environ(values)
        yield
    finally:
        _set_environ(saved)


def _set_environ(values):
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _forget_kernels():
    """A new kernel cache object and no memoised keys; found compilers and PCHs stay."""
    jit.reset()
    cache.reset_default_cache()


def _timed(op: str, target: str, shape: dict):
    t0 = time.perf_counter()
    built = api.build(op, target=target, **shape)
    return time.perf_counter() - t0, built


def available_targets(wanted=DEFAULT_TARGETS) -> tuple[list, dict]:
    """(targets with a compiler here, {target: why not} for the others)."""
    found, missing = [], {}
    for t in wanted:
        try:
            compiler.find_compiler(targets.parse(t)).identity   # found and named before any timing
            found.append(t)
        except Exception as e:   # noqa: BLE001  a missing compiler is a row note, not a failure
            missing[t] = f"{type(e).__name__}: {e}"[:160]
    return found, missing


def cold_compile(names=None, wanted=DEFAULT_TARGETS, log=print) -> list[dict]:
    names = list(names or ops.names())
    found, missing = available_targets(wanted)
    rows = [{"op": op, "target": t, "error": why} for t, why in missing.items() for op in names]
    with tempfile.TemporaryDirectory(prefix="hkjit-cold-") as tmp:
        # A process's first compiles run slower (libraries paged in, caches cold; up to 0.25 s
        # more on the H200 host): one untimed build per target first, so no row carries that.
        with environment(HKJIT_CACHE_DIR=str(Path(tmp) / "warm-up"), HKJIT_PCH="0"):
            for target in found:
                _forget_kernels()
                with contextlib.suppress(Exception):
                    api.build(names[0], target=target, **ops.get(names[0]).default_shape)
        for op in names:
            shape = ops.get(op).default_shape
            for target in found:
                row = {"op": op, "target": target}
                try:
                    row.update(_one(op, target, shape, Path(tmp) / f"{op}-{target}"))
                except Exception as e:   # noqa: BLE001  one op failing must not hide the others
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                rows.append(row)
                log(_line(row))
    _forget_kernels()
    return rows


def _sibling(op: str, target: str, shape: dict) -> dict | None:
    """Parameters of another specialisation of the same kernel source (half of one extent, or
    another dtype), or None. The PCH-reused figure compiles it first, so that its own compile is
    of a program this process has not compiled before: NVRTC 13.0 returns a program it compiled
    before, with a PCH, from a cache of its own at once (measured), which would time nothing."""
    the_op = ops.get(op)
    own = spec.render(the_op.plan(target, **shape).spec)
    tries = [{**shape, k: v // 2} for k, v in shape.items() if isinstance(v, int) and v >= 32]
    tries += [{**shape, "dtype": d} for d in ("float16", "bfloat16", "float32")]
    for params in tries:
        try:
            other = the_op.plan(target, **params).spec
        except Exception:   # noqa: BLE001  not a valid variation for this op
            continue
        if other.source == the_op.plan(target, **shape).spec.source and spec.render(other) != own:
            return params
    return None


def _one(op, target, shape, folder: Path) -> dict:
    with environment(HKJIT_CACHE_DIR=str(folder / "off"), HKJIT_PCH="0"):
        _forget_kernels()
        t_off, off = _timed(op, target, shape)
    with environment(HKJIT_CACHE_DIR=str(folder / "on"), HKJIT_PCH="1"):
        pch.reset(process_pchs=True)   # as in a fresh process
        _forget_kernels()
        t_first, first = _timed(op, target, shape)
        root = cache.default_cache().root
        sibling = _sibling(op, target, shape)
        reused = None
        if sibling is not None:
            # NVRTC writes its PCH at a process's second compile of a source: the sibling's
            for _ in range(2):
                shutil.rmtree(root / "entries", ignore_errors=True)
                shutil.rmtree(root / "index", ignore_errors=True)
                _forget_kernels()
                if _timed(op, target, sibling)[1].meta.get("pch") != "created":
                    break
            for kept_out in ("entries", "index"):   # the kernels are gone; the PCH is not
                shutil.rmtree(root / kept_out, ignore_errors=True)
            _forget_kernels()
            t_reused, reused = _timed(op, target, shape)
    row = {"compiler": off.meta.get("compiler", "").split(" | ")[0], "no_pch": t_off, "first": t_first,
           "first_pch": first.meta.get("pch"), "identical": off.code == first.code, "key_identical": off.key == first.key,
           "compiler_seconds": [off.meta.get("compile_seconds"), first.meta.get("compile_seconds")]}
    if reused is not None:
        row.update(pch_reused=t_reused, reused_pch=reused.meta.get("pch"), sibling=sibling,
                   identical=row["identical"] and reused.code == off.code,
                   key_identical=row["key_identical"] and reused.key == off.key)
        row["compiler_seconds"].append(reused.meta.get("compile_seconds"))
    return row


def _line(r: dict) -> str:
    if "error" in r:
        return f"  {r['op']:24s} {r['target']:7s} {r['error']}"
    reused = (f"PCH reused {r['pch_reused']:.3f} s ({r['reused_pch']})" if "pch_reused" in r
              else "PCH reused: no other specialisation of this source to build it with")
    return (f"  {r['op']:24s} {r['target']:7s} no PCH {r['no_pch']:.3f} s, first {r['first']:.3f} s "
            f"({r['first_pch']}), {reused}, identical bytes: {r['identical']}")


# ------------------------------------------------------------------------------ where the time goes

# LLVM prints a time column only where its group's total is nonzero (a short compile's passes can have
# no system time), so the count of "value (percent%)" columns varies; wall time is always the last of
# them, followed by optional bare memory / instruction counts, then the name.
_REPORT_ROW = re.compile(r"^\s*(?:[\d.]+ \(\s*[\d.]+%\)\s+)*([\d.]+) \(\s*[\d.]+%\)\s+(?:\d+\s+)*(\S.*?)\s*$")


def _clang_report(stderr: str) -> tuple[dict, list]:
    """({group: wall s} of clang's time report, [(pass, wall s)] slowest passes) from -ftime-report."""
    groups, passes, section = {}, [], None
    for line in stderr.splitlines():
        if "Clang time report" in line:
            section = "clang"
        elif "Pass execution timing report" in line:
            section = "passes"
        elif "===" in line or not line.strip():
            continue
        m = _REPORT_ROW.match(line)
        if m and section == "clang":
            groups[m.group(2)] = float(m.group(1))
        elif m and section == "passes" and m.group(2) != "Total":
            passes.append((m.group(2), float(m.group(1))))
    return groups, sorted(passes, key=lambda p: -p[1])[:6]


def _clang_breakdown(comp, the_spec, folder: Path) -> list[dict]:
    dirs = [spec.include_dir(), spec.kernel_sources_dir()]
    text = spec.render(the_spec)
    unit = folder / "unit.hip"
    unit.write_text(text)
    header = next(Path(d) / the_spec.source for d in dirs if (Path(d) / the_spec.source).is_file())
    pch_file = folder / "unit.pch"
    pch_file.write_bytes(comp.build_pch(header, unit, the_spec.target, dirs))
    rows = []
    for label, extra in (("no PCH", []), ("PCH", comp.pch_flags(compiler.PchUse(pch_file)))):
        cmd = [comp.path, *comp.flags(the_spec.target, dirs), *comp.unit_flags(text), *extra, "-ftime-report",
               "-o", str(folder / "out.co"), str(unit)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        groups, passes = _clang_report(proc.stderr)
        rows.append({"target": the_spec.target.id, "compiler": comp.identity.split(" | ")[0], "mode": label,
                     "wall": wall, "phases": groups, "top_passes": passes})
    return rows


def _nvrtc_breakdown(comp, the_spec, sibling, folder: Path) -> list[dict]:
    """NVRTC's --time phases: the unit without a PCH, a sibling unit writing the PCH, then the unit
    with it. --no-cache where NVRTC takes it: NVRTC 13.0 otherwise returns a program it compiled
    before (with a PCH) from a cache of its own, and there would be nothing to time."""
    from cuda.bindings import nvrtc as nv
    dirs = [spec.include_dir(), spec.kernel_sources_dir()]
    pch_file = folder / "unit.pch"
    modes = [("no PCH", the_spec, [])]
    if comp.pch_scope and sibling is not None:
        modes += [("PCH written (another unit)", sibling, [f"--create-pch={pch_file}"]),
                  ("PCH used", the_spec, [f"--use-pch={pch_file}"])]
    no_cache = ["--no-cache"]
    rows = []
    for label, unit, extra in modes:
        csv = folder / f"time-{len(rows)}.csv"
        text = spec.render(unit).encode()
        while True:
            opts = [o.encode() for o in (*comp.flags(unit.target, dirs), *extra, *no_cache, f"--time={csv}")]
            prog = nv.nvrtcCreateProgram(text, b"unit.cu", 0, [], [])[1]
            t0 = time.perf_counter()
            err = nv.nvrtcCompileProgram(prog, len(opts), opts)[0]
            wall = time.perf_counter() - t0
            nv.nvrtcDestroyProgram(prog)
            if err == nv.nvrtcResult.NVRTC_ERROR_INVALID_OPTION and no_cache:
                no_cache = []   # an NVRTC older than its cache (12.9)
                continue
            break
        if err != nv.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC failed ({err.name}) with {extra}")
        phases = {}
        for line in csv.read_text().splitlines()[1:]:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 4 and parts[3] == "ms":
                phases[parts[1]] = phases.get(parts[1], 0.0) + float(parts[2]) / 1e3
        rows.append({"target": the_spec.target.id, "compiler": comp.identity, "mode": label, "wall": wall,
                     "phases": phases, "top_passes": []})
    return rows


def breakdown(op="gemm", wanted=DEFAULT_TARGETS, log=print) -> list[dict]:
    found, _ = available_targets(wanted)
    rows = []
    for target in found:
        the_spec = ops.get(op).plan(target, **ops.get(op).default_shape).spec
        comp = compiler.find_compiler(the_spec.target)
        with tempfile.TemporaryDirectory(prefix="hkjit-breakdown-") as tmp:
            if comp.name == "clang":
                got = _clang_breakdown(comp, the_spec, Path(tmp))
            elif comp.name == "nvrtc":
                params = _sibling(op, target, ops.get(op).default_shape)
                sibling = ops.get(op).plan(target, **params).spec if params else None
                got = _nvrtc_breakdown(comp, the_spec, sibling, Path(tmp))
            else:
                continue
        for r in got:
            r["op"] = op
            phases = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in r["phases"].items())
            log(f"  {op} {target} {r['mode']}: wall {r['wall']:.3f} s; {phases}")
        rows += got
    return rows


# --------------------------------------------------------------------------- several kernels at once

def parallel(names=None, wanted=DEFAULT_TARGETS, log=print) -> dict:
    """Every op's default kernel on each target through `precompile`: serially, then on every CPU."""
    found, _ = available_targets(wanted)
    jobs = [deploy.Job(op, t, tuple(sorted(ops.get(op).default_shape.items())))
            for op in names or ops.names() for t in found]
    workers = os.cpu_count() or 1
    out = {"jobs": len(jobs), "workers": workers}
    kernels = {}
    with tempfile.TemporaryDirectory(prefix="hkjit-parallel-") as tmp:
        for label, n in (("serial", 1), ("parallel", workers)):
            with environment(HKJIT_CACHE_DIR=str(Path(tmp) / f"cache-{label}")):
                _forget_kernels()
                pch.reset(process_pchs=True)
                t0 = time.perf_counter()
                report = deploy.precompile(jobs, Path(tmp) / f"bundle-{label}", build=api.build, parallel=n)
                out[label] = time.perf_counter() - t0
                out[f"{label}_failed"] = [o.job.describe() for o in report.failed]
                bundle = cache.Bundle(report.bundle)
                kernels[label] = {r["key"]: bundle.get(r["key"]).code for r in bundle.manifest["entries"]}
    _forget_kernels()
    out["identical"] = kernels["serial"] == kernels["parallel"]
    log(f"  {out['jobs']} kernels: one at a time {out['serial']:.1f} s, {workers} at a time {out['parallel']:.1f} s "
        f"({out['serial'] / out['parallel']:.1f}x); same kernels: {out['identical']}")
    return out


# --------------------------------------------------------------------------------------- reporting

def markdown(results: dict) -> list[str]:
    out = []
    rows = results.get("cold_compile") or []
    if rows:
        out += ["", "## JIT: cold compile, each op at its default shape",
                "", "Seconds of `hkjit.build` into an empty kernel cache (`python -m hkjit.bench.cold_compile`). "
                "*first*: nothing built before (clang builds the PCH beside the compile; NVRTC compiles "
                "without one and writes it at the process's second compile of the source); *PCH reused*: the kernel "
                "cache emptied, a PCH made by compiling another specialisation of the source (clang: on disk; "
                "NVRTC: in the same process, the only one that can read it).", "",
                "| op | target | compiler | no PCH | first | PCH reused | same bytes |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            if "error" in r:
                out.append(f"| {r['op']} | {r['target']} | {r['error'][:80]} | | | | |")
            elif "no_pch" not in r:   # an older run's row: one figure
                out.append(f"| {r['op']} | {r['target']} | {str(r.get('compiler', '')).split(' | ')[0]} | "
                           f"{r.get('seconds', float('nan')):.2f} | | | |")
            else:
                reused = f"{r['pch_reused']:.2f} ({r['reused_pch']})" if "pch_reused" in r else "n/a"
                out.append(f"| {r['op']} | {r['target']} | {r['compiler']} | {r['no_pch']:.2f} | {r['first']:.2f} | "
                           f"{reused} | {'yes' if r['identical'] else 'NO'} |")
    if results.get("cold_breakdown"):
        out += ["", "Where one compile's time goes (default GEMM; seconds):", "",
                "| target | mode | wall | phases | slowest passes |", "|---|---|---|---|---|"]
        for r in results["cold_breakdown"]:
            phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items())
            passes = ", ".join(f"{k} {v:.3f}" for k, v in r["top_passes"])
            out.append(f"| {r['target']} | {r['mode']} | {r['wall']:.3f} | {phases} | {passes} |")
    p = results.get("cold_parallel")
    if p:
        out += ["", f"`precompile` of {p['jobs']} kernels (every op's default on each target): one at a time "
                    f"{p['serial']:.1f} s, {p['workers']} at a time {p['parallel']:.1f} s "
                    f"({p['serial'] / p['parallel']:.1f}x); same kernels both ways: {p['identical']}."]
    return out


def main(argv=None):
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--ops", help="comma-separated ops (default: all)")
    a.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    a.add_argument("--breakdown", action="store_true", help="also: where the default GEMM's compile time goes")
    a.add_argument("--parallel", action="store_true", help="also: precompile every op serially and in parallel")
    a.add_argument("--json")
    args = a.parse_args(argv)
    names = args.ops.split(",") if args.ops else None
    wanted = args.targets.split(",")
    results = {"cold_compile": cold_compile(names, wanted)}
    if args.breakdown:
        results["cold_breakdown"] = breakdown("gemm", wanted)
    if args.parallel:
        results["cold_parallel"] = parallel(names, wanted)
    print("\n".join(markdown(results)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
