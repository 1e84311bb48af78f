"""Precompiled headers (hkjit/pch.py, hkjit/cache/pch.py): same bytes and key with or without one,
reuse across processes, a header change builds a new one, a damaged or refused one is never used,
and any PCH failure leaves a plain compile and at most one warning line."""
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import hkjit
from hkjit import deploy, jit, spec as spec_mod, targets
from hkjit.cache import default_cache, encode_entry
from hkjit.compiler import ClangCompiler
from hkjit.errors import CacheWarning, CompileError

from conftest import needs_clang, needs_nvrtc

KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture
def sources(editable_sources):
    return editable_sources


def _spec(target, s):
    return spec_mod.Specialization("scale", targets.parse(target), "scale.cuh", f"scale_kernel<{s}, 256>",
                                   "hkjit_scale", spec_mod.make_params({"s": s, "threads": 256}))


def _build(target, s):
    """A build as a fresh process would see it: no memoised key, the cache read from disk."""
    hkjit.reset_state()
    return jit.build_spec(_spec(target, s))


def _forget_kernels():
    root = default_cache().root
    for folder in ("entries", "index"):
        shutil.rmtree(root / folder, ignore_errors=True)


def _pch_files(root):
    return sorted((root / "pch").glob("*/*.hkpch"))


def _hkjit_warnings(caught):
    found = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert all("\n" not in str(w.message) for w in found), "a PCH problem is said in one line"
    return found


@needs_clang
def test_clang_pch_same_bytes_same_key(sources, cache_dir, monkeypatch):
    monkeypatch.setenv("HKJIT_PCH", "0")
    plain = _build("gfx950", 3)
    assert plain.meta["pch"] == "off" and not _pch_files(cache_dir)
    monkeypatch.setenv("HKJIT_PCH", "1")
    _forget_kernels()
    first = _build("gfx950", 3)
    assert first.meta["pch"] == "built" and len(_pch_files(cache_dir)) == 1
    _forget_kernels()
    reused = _build("gfx950", 3)
    assert reused.meta["pch"] == "used" and reused.compiled
    assert plain.code == first.code == reused.code
    assert plain.key == first.key == reused.key     # the kernel's key never depends on a PCH
    assert "-include-pch" not in " ".join(reused.meta["flags"])
    # a PCH is for one target: gfx942 gets its own
    assert _build("gfx942", 3).meta["pch"] == "built" and len(_pch_files(cache_dir)) == 2


@needs_nvrtc
def test_nvrtc_pch_same_bytes_within_a_process(sources, cache_dir, monkeypatch):
    monkeypatch.setenv("HKJIT_COMPILER", "nvrtc")
    monkeypatch.setenv("HKJIT_PCH", "0")
    plain = _build("sm_90a", 3)
    monkeypatch.setenv("HKJIT_PCH", "1")
    _forget_kernels()
    if hkjit.compiler.find_compiler(targets.parse("sm_90a")).pch_scope is None:
        pytest.skip("this NVRTC has no precompiled headers (12.8+)")
    statuses, codes = [], {plain.code}
    for _ in range(3):   # a process writes its PCH at its second compile of a source
        _forget_kernels()
        hkjit.cache.reset_default_cache()
        built = jit.build_spec(_spec("sm_90a", 3))
        statuses.append(built.meta["pch"])
        codes.add(built.code)
        assert built.key == plain.key
    assert statuses == ["off", "created", "used"] and len(codes) == 1
    assert not _pch_files(cache_dir)   # NVRTC's PCH never goes to the cache: no other process could read it


@needs_nvrtc
def test_nvrtc_keeps_no_cache_of_its_own(sources, tmp_path):
    """NVRTC >= 12.9 would keep compiled programs in ~/.nv/ComputeCache: hkjit turns that off, and
    the option changes no byte of the code object."""
    comp = hkjit.compiler.find_compiler(targets.parse("sm_90a"), "nvrtc")
    if not comp.runtime_options:
        pytest.skip("this NVRTC has no cache of its own (< 12.9)")
    unit = tmp_path / "unit.cu"
    unit.write_text(spec_mod.render(_spec("sm_90a", 3)))
    dirs = [spec_mod.include_dir(), spec_mod.kernel_sources_dir()]
    with_option = comp.compile(unit.read_text(), unit, targets.parse("sm_90a"), dirs, "hkjit_scale")
    comp.runtime_options = []
    try:
        without = comp.compile(unit.read_text(), unit, targets.parse("sm_90a"), dirs, "hkjit_scale")
    finally:
        comp.runtime_options = ["--no-cache"]
    assert with_option.code == without.code
    assert "--no-cache" not in comp.flags(targets.parse("sm_90a"), dirs)   # not part of the key


CHILD = """
import json, sys, hkjit
b = hkjit.build(sys.argv[1], target="gfx950", rows=64, cols=256)
print(json.dumps({"pch": b.meta["pch"], "compiled": b.compiled}))
"""


@needs_clang
def test_pch_reused_across_processes(cache_dir):
    """relu and silu are two units of one kernel source: the second process uses the first one's PCH."""
    env = {**os.environ, "HKJIT_CACHE_DIR": str(cache_dir)}
    env.pop("HKJIT_PCH", None)
    run = lambda op: subprocess.run([sys.executable, "-c", CHILD, op], env=env, capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1]
    assert '"pch": "built"' in run("relu")
    assert len(_pch_files(cache_dir)) == 1
    assert run("silu") == '{"pch": "used", "compiled": true}'


@needs_clang
def test_header_change_builds_a_new_pch(sources, cache_dir):
    src, inc = sources
    _build("gfx950", 3)
    assert _build("gfx950", 4).meta["pch"] == "used"
    kernel = src / "scale.cuh"
    kernel.write_text(kernel.read_text().replace("a.x[i] * float(S)", "a.x[i] * float(S) + 1.0f"))
    changed = _build("gfx950", 4)
    assert changed.meta["pch"] == "built" and len(_pch_files(default_cache().root)) == 2   # a new key
    assert _build("gfx950", 5).meta["pch"] == "used"
    _forget_kernels()
    with_pch = _build("gfx950", 4)
    os.environ["HKJIT_PCH"] = "0"
    try:
        _forget_kernels()
        plain = _build("gfx950", 4)
    finally:
        del os.environ["HKJIT_PCH"]
    assert with_pch.meta["pch"] == "used" and with_pch.code == plain.code == changed.code
    # a header that only changed its mtime (a checkout, a reinstall) keeps its PCH: same content, same key
    header = inc / "hk/common/platform.hpp"
    os.utime(header, (header.stat().st_atime, header.stat().st_mtime + 100))
    _forget_kernels()
    assert _build("gfx950", 4).meta["pch"] == "used"


@needs_clang
def test_damaged_pch_is_set_aside_and_built_again(sources, cache_dir):
    first = _build("gfx950", 3)
    (stored,) = _pch_files(cache_dir)
    blob = bytearray(stored.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    stored.write_bytes(bytes(blob))
    _forget_kernels()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = _build("gfx950", 3)
    (warning,) = _hkjit_warnings(caught)
    assert "checksum" in str(warning.message) and "quarantine" in str(warning.message)
    assert again.meta["pch"] == "built" and again.code == first.code
    assert list((cache_dir / "quarantine").glob(f"{stored.stem}*"))
    assert _build("gfx950", 4).meta["pch"] == "used"


@needs_clang
def test_pch_the_compiler_refuses_falls_back_to_a_plain_compile(sources, cache_dir):
    """A PCH whose checksum is right but which clang will not read (forged, or from a broken
    toolchain): compiled without it, one warning, the PCH removed so the next process rebuilds it."""
    first = _build("gfx950", 3)
    (stored,) = _pch_files(cache_dir)
    stored.write_bytes(encode_entry(stored.stem, b"not a precompiled header", {}))
    _forget_kernels()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = _build("gfx950", 3)
        assert not stored.exists()       # removed: the next compile builds a fresh one
        later = _build("gfx950", 4)
    (warning,) = _hkjit_warnings(caught)
    assert "precompiled header of scale.cuh for gfx950" in str(warning.message)
    assert again.meta["pch"] == "failed" and again.code == first.code and later.meta["pch"] == "built"
    assert _build("gfx950", 5).meta["pch"] == "used"


@needs_clang
def test_pch_build_failure_falls_back_with_one_warning(sources, cache_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise CompileError("clang (precompiled header) failed (exit code 1)", log="error: out of memory")
    monkeypatch.setattr(ClangCompiler, "build_pch", fail)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = _build("gfx950", 3)
        _forget_kernels()
        hkjit.cache.reset_default_cache()
        again = jit.build_spec(_spec("gfx950", 3))   # same process, same PCH key: not tried again
    (warning,) = _hkjit_warnings(caught)
    assert "compiled without it" in str(warning.message) and "out of memory" in str(warning.message)
    assert plain.meta["pch"] == "failed" and again.meta["pch"] == "off" and plain.code == again.code
    assert not _pch_files(cache_dir)


@needs_clang
def test_a_broken_kernel_reports_its_own_error_once(sources, cache_dir):
    src, _ = sources
    _build("gfx950", 3)   # a PCH of the working source exists
    kernel = src / "scale.cuh"
    kernel.write_text(kernel.read_text().replace("float(S);", "float(S) +;"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CompileError) as err:
            _build("gfx950", 3)
    assert "expected expression" in err.value.log and not _hkjit_warnings(caught)


@needs_clang
def test_parallel_precompile_gives_the_serial_kernels(cache_dir, tmp_path):
    jobs = [deploy.Job(op, t, (("cols", 256), ("rows", 64))) for op in ("relu", "silu") for t in ("gfx942", "gfx950")]
    kernels = {}
    for n in (1, 4):
        os.environ["HKJIT_CACHE_DIR"] = str(tmp_path / f"cache-{n}")
        hkjit.reset_state()
        report = deploy.precompile(jobs, tmp_path / f"bundle-{n}", build=hkjit.api.build, parallel=n)
        assert report.count("compiled") == 4, report.summary()
        bundle = hkjit.cache.Bundle(report.bundle)
        kernels[n] = {r["key"]: bundle.get(r["key"]).code for r in bundle.manifest["entries"]}
    assert kernels[1] == kernels[4] and len(kernels[1]) == 4


@needs_clang
def test_cold_compile_benchmark_reports_pch_and_same_bytes(cache_dir):
    """`python -m hkjit.bench.cold_compile` on one small op: the three builds agree byte for byte,
    the PCH is used once it exists, and clang's own report is read (figures, not timings, checked)."""
    from hkjit.bench import cold_compile
    (row,) = cold_compile.cold_compile(["relu"], ("gfx950",), log=lambda line: None)
    assert row["identical"] and row["key_identical"], row
    assert (row["first_pch"], row["reused_pch"]) == ("built", "used")
    rows = cold_compile.breakdown("relu", ("gfx950",), log=lambda line: None)
    assert [r["mode"] for r in rows] == ["no PCH", "PCH"]
    for r in rows:
        assert {"Front end", "Optimizer", "Machine code generation"} <= set(r["phases"]) and r["top_passes"]
    text = "\n".join(cold_compile.markdown({"cold_compile": [row], "cold_breakdown": rows}))
    assert "| relu | gfx950 |" in text and "(used) | yes |" in text
    assert os.environ["HKJIT_CACHE_DIR"] == str(cache_dir)   # the benchmark put the environment back


def test_clang_time_report_is_read_whichever_columns_llvm_prints():
    """LLVM leaves out a time column whose group total is zero (a short compile's passes often have no
    system time) and may append bare memory counts: the wall time is read from every form."""
    from hkjit.bench.cold_compile import _clang_report
    report = """\
===-------------------------------------------------------------------------===
                               Clang time report
===-------------------------------------------------------------------------===
   ---User Time---   --System Time--   --User+System--   ---Wall Time---  --- Name ---
   0.0300 ( 60.0%)   0.0100 ( 50.0%)   0.0400 ( 57.1%)   0.0410 ( 57.3%)  Front end
   0.0200 ( 40.0%)   0.0100 ( 50.0%)   0.0300 ( 42.9%)   0.0305 ( 42.7%)  Optimizer
===-------------------------------------------------------------------------===
                      Pass execution timing report
===-------------------------------------------------------------------------===
   ---User Time---   --User+System--   ---Wall Time---  --- Name ---
   0.0030 ( 75.0%)   0.0030 ( 75.0%)   0.0031 ( 73.8%)  InstCombinePass
   0.0010 ( 25.0%)   0.0010 ( 25.0%)   0.0011 ( 26.2%)     1024  SROAPass
   0.0040 (100.0%)   0.0040 (100.0%)   0.0042 (100.0%)  Total
"""
    groups, passes = _clang_report(report)
    assert groups == {"Front end": 0.041, "Optimizer": 0.0305}
    assert passes == [("InstCombinePass", 0.0031), ("SROAPass", 0.0011)]
