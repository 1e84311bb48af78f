"""hk::store_unit_rows (include/hk/cdna/memory.hpp) on sim:gfx942/gfx950: an accumulator tile whose
rows are unit-stride in memory goes out as one 4-element store per run of 4 rows (global_store_dwordx2
for bf16, dwordx4 for fp32), element stores where rows_left cuts a run, nothing past cols_left. The
destination starts at an odd element (2-byte aligned for bf16): the wide stores are declared
element-aligned, which CDNA's unaligned-access mode (the HSA ABI's) allows; the simulator models it.
Fresh random values; unwritten elements must keep their NaN."""
import re

import numpy as np
import pytest

from hkjit import static
from simutil import ARCHS, bf16, build, needs_clang, run

pytestmark = needs_clang

SRC = """
#include "hk/hk.hpp"
// A 64 x 32 tile (MFMA outputs MI x MI) of src (row-major floats) stored with element (r, c) at
// dst[off + r + c * sc]: unit-stride rows, as an O^T accumulator is stored into O.
extern "C" __attribute__((global)) void store(const float* src, TEST_TO* dst, int off, int sc, int rows_left,
                                              int cols_left) {
  using S = hk::mfma_shape<TEST_MI, TEST_MI == 16 ? 16 : 8>;
  hk::rt<float, 64, 32, hk::acc_l, S> t;
  const int l = hk::lane_id();
  for (int i = 0; i < t.TR; ++i)
    for (int j = 0; j < t.TC; ++j)
      for (int v = 0; v < S::ACC; ++v)
        t.t[i][j][v] = src[(i * S::MI + S::acc_row(v, l)) * 32 + j * S::MI + S::acc_col(l)];
  hk::store_unit_rows(dst + off, (long long)sc, t, rows_left, cols_left);
}
"""
KERNELS = {"bf16-16x16": ("hk::bf16", 16), "f32-16x16": ("float", 16), "bf16-32x32": ("hk::bf16", 32)}
R, C = 64, 32
rng = np.random.default_rng()   # reseeded per test from HKJIT_TEST_SEED (tests/conftest.py)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("rows_left,cols_left", [(64, 32), (37, 20), (2, 32)])
def test_store_unit_rows(arch, kernel, rows_left, cols_left):
    src = rng.standard_normal((R, C)).astype(np.float32)
    off, sc = 3, 71   # odd: the first element of a lane's run is only element-aligned
    n = off + R + (C - 1) * sc
    is_bf16 = "bf16" in kernel
    if is_bf16:
        nan = bf16(np.array([np.nan], np.float32))[0][0]
        dst = np.full(n, nan, np.uint16)
    else:
        dst = np.full(n, np.nan, np.float32)
    to, mi = KERNELS[kernel]
    code = build(SRC, arch, (f"TEST_TO={to}", f"TEST_MI={mi}"))
    _, out = run(code, "store", arch, (1, 1, 1), (64, 1, 1), [src, dst, off, sc, rows_left, cols_left])
    want = src if not is_bf16 else bf16(src)[1]
    got = out if not is_bf16 else bf16_to_f32(out)
    idx = off + np.arange(R)[:, None] + np.arange(C)[None, :] * sc
    inside = (np.arange(R)[:, None] < rows_left) & (np.arange(C)[None, :] < cols_left)
    np.testing.assert_array_equal(got[idx[inside]], want[inside])
    untouched = np.ones(n, bool)
    untouched[idx[inside]] = False
    assert np.isnan(got[untouched]).all(), "an element outside (rows_left, cols_left) was written"
    ops = {m for _, m, _, _ in static.amd_disassembly(code, arch) or ()}
    if ops:   # the wide form is there (llvm-objdump present)
        wide = "global_store_dwordx2" if is_bf16 else "global_store_dwordx4"
        assert wide in ops, sorted(o for o in ops if re.match("global_store", o))


def bf16_to_f32(bits):
    from hkjit.sim import fp
    return fp.bf16_to_f32(bits)
