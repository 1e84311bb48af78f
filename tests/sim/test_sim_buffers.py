"""Structured buffer resources on sim:gfx942 and sim:gfx950 (tests/sim/kernels/buffers.hip):
a row stride in the resource with idxen/offen, index-only and add_tid addressing, the swizzle
and cache-swizzle bits, and the range checks (index >= num_records, offset >= stride), against a
NumPy model of the CDNA3/CDNA4 ISA's buffer addressing."""

import numpy as np
import pytest

from simutil import ARCHS, build, needs_clang, run

pytestmark = needs_clang
rng = np.random.default_rng(5)
WORD3 = 4 << 15                    # data format 32 (what make_buffer_rsrc users pass)
ADD_TID = 1 << 23
SWIZZLE = -0x8000                  # bit 15 of the 16-bit stride argument: resource bit 63
CACHE_SWIZZLE = 0x4000             # bit 14: resource bit 62 (cache banks only)


def code(arch):
    return build("buffers.hip", arch)


def model_address(index, offset, stride, word3=WORD3, swizzle=False):
    """Byte offset of (index, offset) in a buffer, as the ISA describes it (element size 4)."""
    if not swizzle:
        return index * stride + offset
    istride = 8 << (word3 >> 21 & 3)
    return (index // istride * stride + offset // 4 * 4) * istride + index % istride * 4 + offset % 4


def in_range(index, offset, stride, records, idx_mode=True):
    return (index < records) & ~(idx_mode & (offset >= stride))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("cache_swizzle", [0, CACHE_SWIZZLE])
def test_row_strided_load_with_range_checks(arch, cache_swizzle):
    stride, rows, cols = 28, 9, 8                 # 7 ints per row, 9 rows: a ragged tile
    x = rng.integers(1, 10**6, stride // 4 * 12).astype(np.int32)
    _, o = run(code(arch), "strided_load", arch, (1, 1, 1), (128, 1, 1),
               [x, np.zeros(128, np.int32), stride | cache_swizzle, rows, WORD3, cols, 8])
    t = np.arange(128)
    r, c = t // cols, (t % cols) * 4 + 4          # the instruction offset is part of the column
    ok = in_range(r, c, stride, rows)
    byte = model_address(r, c, stride) + 8        # soffset (8) moves the address, not the check
    want = np.where(ok, x[np.minimum(byte // 4, x.size - 1)], 0)
    np.testing.assert_array_equal(o, want)
    assert (~ok).sum() > 40 and ok.sum() > 40     # both checks cut lanes off


@pytest.mark.parametrize("arch", ARCHS)
def test_index_only_and_add_tid(arch):
    stride, rows = 20, 50
    x = rng.integers(1, 10**6, 5 * 64).astype(np.int32)
    _, o = run(code(arch), "indexed_load_x2", arch, (1, 1, 1), (64, 1, 1),
               [x, np.zeros(128, np.int32), stride, rows, WORD3])
    t = np.arange(64)
    want = np.stack([np.where(t < rows, x[(t * stride + 8) // 4 + k], 0) for k in (0, 1)], 1).reshape(-1)
    np.testing.assert_array_equal(o, want)
    # add_tid: the lane is the index; with it the data format field holds stride bits 14-17
    big = 16384 + 32                              # 2 ** 14 + 32 bytes: needs those bits
    x = rng.integers(1, 10**6, big * 64 // 4).astype(np.int32)
    word3 = ADD_TID | (big >> 14) << 15
    _, o = run(code(arch), "tid_load", arch, (1, 1, 1), (64, 1, 1),
               [x, np.zeros(64, np.int32), big & 0x3FFF, 60, word3])
    np.testing.assert_array_equal(o, np.where(t < 60, x[(t * big + 12) // 4], 0))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("index_stride", [0, 1])
def test_swizzled_store_lands_where_the_isa_says(arch, index_stride):
    stride, rows, cols = 16, 40, 4
    x = np.zeros(stride * 64 // 4, np.int32)
    word3 = WORD3 | index_stride << 21
    (x,) = run(code(arch), "strided_store", arch, (1, 1, 1), (128, 1, 1), [x, stride | SWIZZLE, rows, word3, cols])
    t = np.arange(128)
    r, c = t // cols, (t % cols) * 4
    ok = in_range(r, c, stride, rows)
    want = np.zeros_like(x)
    want[model_address(r[ok], c[ok], stride, word3, swizzle=True) // 4] = t[ok] + 1000
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("arch", ARCHS)
def test_structured_atomics_and_stores_drop_out_of_range_lanes(arch):
    stride, rows = 12, 10
    x = rng.integers(0, 100, 3 * 16).astype(np.int32)
    after, old = run(code(arch), "strided_atomic", arch, (1, 1, 1), (64, 1, 1),
                     [x.copy(), np.zeros(64, np.int32), stride, rows, WORD3])
    t = np.arange(64)
    row = t % 16
    want = x.copy()
    np.add.at(want, (row * stride + 4)[row < rows] // 4, 1)
    np.testing.assert_array_equal(after, want)
    seen = (t // 16)                                   # lanes of one row go in lane order
    np.testing.assert_array_equal(old, np.where(row < rows, x[(row * stride + 4) // 4] + seen, 0))
    x = np.full(4 * 8, -1, np.int32)
    (x,) = run(code(arch), "strided_store", arch, (1, 1, 1), (64, 1, 1), [x, 16, 5, WORD3, 3])
    r, c = t // 3, (t % 3) * 4
    want = np.full_like(x, -1)
    ok = r < 5
    want[(r * 16 + c)[ok] // 4] = t[ok] + 1000
    np.testing.assert_array_equal(x, want)
