"""The README's main command and HKJIT_DEVICE, on a machine with no GPU (the CDNA simulator)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hkjit
from conftest import HAVE_GPU, needs_clang

ROOT = Path(__file__).resolve().parents[1]


@needs_clang
@pytest.mark.skipif(HAVE_GPU, reason="checks the no-GPU path of the quickstart")
def test_quickstart_runs_on_the_simulator(cache_dir):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sim:gfx950" in proc.stdout and "-> OK" in proc.stdout


@needs_clang
def test_hkjit_device_selects_the_simulator_for_host_arrays(cache_dir, monkeypatch):
    monkeypatch.setenv("HKJIT_DEVICE", "sim:gfx942")
    rng = np.random.default_rng()
    a = rng.standard_normal((40, 24)).astype(np.float16)
    b = rng.standard_normal((24, 33)).astype(np.float16)
    out = np.full((40, 33), np.nan, dtype=np.float32)
    hkjit.gemm(a, b, out=out)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isfinite(out).all() and np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2
    from hkjit import launch
    assert any(sig[0] == "gemm" and sig[3:5] == ("sim", "gfx942") for sig, _ in launch.launchers())
