"""ds_swizzle_b32 on sim:gfx942/gfx950: the value swizzled is the instruction's ADDR operand
(`ds_swizzle_b32 vdst, vaddr offset:...`), in bit mode (xor/or/and masks within 32 lanes) and
quad-permute mode."""
import numpy as np
import pytest

from simutil import ARCHS, build, needs_clang, run

pytestmark = needs_clang

SRC = """
extern "C" __attribute__((global)) void swz(const int* x, int* y) {
  const int i = __builtin_amdgcn_workitem_id_x();
  const int v = x[i];
  y[3 * i + 0] = __builtin_amdgcn_ds_swizzle(v, 0x401F);   // bit mode: lane ^ 16
  y[3 * i + 1] = __builtin_amdgcn_ds_swizzle(v, 0x0C1C);   // bit mode: (lane & 28) ^ 3
  y[3 * i + 2] = __builtin_amdgcn_ds_swizzle(v, 0x801B);   // quad permute [3, 2, 1, 0]
}
"""


@pytest.mark.parametrize("arch", ARCHS)
def test_ds_swizzle_reads_the_addr_operand(arch):
    x = np.random.default_rng().integers(-2**31, 2**31 - 1, 128).astype(np.int32)
    _, y = run(build(SRC, arch), "swz", arch, (1, 1, 1), (128, 1, 1), [x, np.zeros(3 * 128, np.int32)])
    y = y.reshape(128, 3)
    lane = np.arange(128)
    base = lane & ~31
    np.testing.assert_array_equal(y[:, 0], x[base + ((lane & 31) ^ 16)])
    np.testing.assert_array_equal(y[:, 1], x[base + ((lane & 28) ^ 3)])
    np.testing.assert_array_equal(y[:, 2], x[(lane & ~3) + 3 - (lane & 3)])
