import functools
import os
import secrets
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

# JAX takes 75% of a GPU's memory when it first touches it; the GPU tests run JAX beside torch, and
# often several test processes share one GPU (pytest -n): take memory as needed instead. Seen on an
# H100: one worker that had run the JAX tests held 60 GiB, and its neighbours ran out of memory.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# Tests draw fresh random inputs every run. The draws of a test module's `rng` come from this seed
# and the test's id, so a failure seen once (in CI, say) repeats with HKJIT_TEST_SEED=<seed> and
# that one test: the seed is printed in the report header and beside every failure.
TEST_SEED = int(os.environ.get("HKJIT_TEST_SEED") or secrets.randbits(32))


def _seed_line():
    return f"hkjit test seed: {TEST_SEED} (HKJIT_TEST_SEED={TEST_SEED} repeats this run's random inputs)"


def pytest_report_header(config):
    return _seed_line()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(_seed_line())   # also under -q, where the header is not printed


@pytest.fixture(autouse=True)
def _reproducible_module_rng(request):
    """Reseeds the test module's `rng` (a numpy Generator, if it has one) from TEST_SEED and the
    test's id, so each test's inputs depend on nothing that ran before it."""
    module = request.module
    if isinstance(getattr(module, "rng", None), np.random.Generator):
        module.rng = np.random.default_rng([TEST_SEED, zlib.crc32(request.node.nodeid.encode())])
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("hkjit test seed", f"rerun with HKJIT_TEST_SEED={TEST_SEED} pytest '{item.nodeid}'"))


def _clang_ok():
    path = shutil.which("clang-22")
    return path is not None


def _nvrtc_ok():
    try:
        from cuda.bindings import nvrtc
        return nvrtc.nvrtcVersion()[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:
        return False


def _cuda_gpu():
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return False
        err, n = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and n > 0
    except Exception:
        return False


HAVE_CLANG = _clang_ok()
HAVE_NVRTC = _nvrtc_ok()
HAVE_GPU = _cuda_gpu()

needs_clang = pytest.mark.skipif(not HAVE_CLANG, reason="clang-22 not installed (apt-get install clang-22 lld-22)")
needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC not available (pip install 'hkjit[cuda]')")
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private cache for one test."""
    d = tmp_path / "cache"
    monkeypatch.setenv("HKJIT_CACHE_DIR", str(d))
    import hkjit
    hkjit.reset_state()
    yield d
    hkjit.reset_state()


@pytest.fixture
def editable_sources(monkeypatch, tmp_path):
    """(kernel_sources, include) copies holding the small test kernel (tests/kernels/scale.cuh),
    put where hkjit looks for them, so a test can edit headers."""
    from hkjit import spec as spec_mod
    src, inc = tmp_path / "kernel_sources", tmp_path / "include"
    shutil.copytree(spec_mod.include_dir(), inc)
    src.mkdir()
    shutil.copy(os.path.join(os.path.dirname(__file__), "kernels", "scale.cuh"), src)
    monkeypatch.setattr(spec_mod, "kernel_sources_dir", lambda: src)
    monkeypatch.setattr(spec_mod, "include_dir", lambda: inc)
    return src, inc


def nvrtc_compile_spec(spec):
    """NVRTC's compile of a planned sm_90a kernel (a hkjit.spec.KernelSpec): the CompileResult with the
    cubin, the ptxas log, its figures in .meta (registers, spills, stack) and the PTX. Skips the calling
    test where NVRTC is missing."""
    from hkjit import compiler, spec as spec_mod
    from hkjit.errors import CompilerNotFoundError
    try:
        comp = compiler.find_compiler(spec.target, "nvrtc")
    except CompilerNotFoundError as e:
        pytest.skip(f"NVRTC not available: {e}")
    return comp.compile(spec_mod.render(spec), Path("kernel_unit.cu"), spec.target,
                        [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)


@functools.lru_cache(maxsize=None)
def nvrtc_compile_op(op, **params):
    """nvrtc_compile_spec of hkjit.ops.get(op).plan("sm_90a", **params), once per process (the static
    tests of one op share their compiles)."""
    import hkjit
    return nvrtc_compile_spec(hkjit.ops.get(op).plan("sm_90a", **params).spec)


def _sass_tool():
    from hkjit import static
    return static.nvidia_tool("cuobjdump")


needs_sass = pytest.mark.skipif(_sass_tool() is None,
                                reason="cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")


def sass(code: bytes, tmp_path) -> str:
    """cuobjdump's SASS of a cubin (tests marked needs_sass)."""
    import subprocess
    path = tmp_path / "kernel.cubin"
    path.write_bytes(code)
    return subprocess.run([_sass_tool(), "--dump-sass", str(path)], capture_output=True, text=True, check=True).stdout
