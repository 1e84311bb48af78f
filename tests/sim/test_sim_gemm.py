"""The GEMM hkjit ships (kernel_sources/gemm_cdna.hip) runs on sim:gfx942 and sim:gfx950 at small
and ragged shapes, with hazard checks on, and matches NumPy."""

import numpy as np
import pytest

from simutil import needs_clang
from gemm_util import run_gemm

pytestmark = needs_clang

SHAPES = [(64, 64, 64), (128, 128, 128), (100, 64, 64), (64, 72, 96), (96, 40, 24)]


@pytest.mark.parametrize("arch,shape", [(a, s) for a in ("gfx942", "gfx950") for s in SHAPES])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gemm(arch, shape, dtype):
    M, N, K = shape
    c, ref, _ = run_gemm(arch, M, N, K, dtype=dtype)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4 * np.sqrt(K))


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_gemm_bf16_output(arch):
    c, ref, _ = run_gemm(arch, 64, 64, 128, out_dtype="bfloat16")
    np.testing.assert_allclose(c, ref, rtol=1e-2, atol=2e-2)
