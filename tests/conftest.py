import os
import shutil
import subprocess

import pytest


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
    from hkjit import cache, jit
    cache.reset_default_cache()
    jit._keys.clear()
    jit._loaded.clear()
    yield d
    cache.reset_default_cache()
