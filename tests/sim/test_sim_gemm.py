"""The GEMM hkjit ships (kernel_sources/gemm_cdna.hip) runs on sim:gfx942 and sim:gfx950 at small
and ragged shapes, with hazard checks on, and matches NumPy."""

import numpy as np
import pytest

from simutil import needs_clang
from gemm_util import run_gemm

pytestmark = needs_clang

SHAPES = [(64, 64, 64), (128, 128, 128), (100, 64, 64), (64, 72, 96), (96, 40, 24)]


def _case(arch, shape):
    # gemm_cdna advances its direct-to-LDS loads with the SGPR offset (soffset); a raw buffer's
    # range check leaves soffset out, so a K tail that ends inside a tile reads past the matrix.
    # Caught by the simulator on gfx950 (16-byte loads); reported to the kernel's owner.
    ragged_k = shape[2] % 64 != 0
    if arch == "gfx950" and ragged_k:
        return pytest.param(arch, shape, marks=pytest.mark.xfail(
            reason="gemm_cdna reads past A/B through soffset at a ragged K on gfx950", strict=False))
    return (arch, shape)


@pytest.mark.parametrize("arch,shape", [_case(a, s) for a in ("gfx942", "gfx950") for s in SHAPES])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gemm(arch, shape, dtype):
    M, N, K = shape
    c, ref, _ = run_gemm(arch, M, N, K, dtype=dtype)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4 * np.sqrt(K))


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_gemm_bf16_output(arch):
    c, ref, _ = run_gemm(arch, 64, 64, 128, out_dtype="bfloat16")
    np.testing.assert_allclose(c, ref, rtol=1e-2, atol=2e-2)
