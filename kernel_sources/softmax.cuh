// softmax.cuh: softmax over the last dimension, one source for gfx942, gfx950 and sm_90a.
//
//   y[r][c] = exp(s x[r][c] - m) / sum_c exp(s x[r][c] - m),   m = max_c s x[r][c]
//
// computed in fp32 as exp2 of pre-scaled inputs: z = x * (s log2 e), y = exp2(z - max z) / sum.
// x and y share one element type T. Any number of rows >= 1, any row length >= 1; rows may be
// strided (elements contiguous within a row); y may be x (in place, equal strides).
// Special rows: a row of only -inf gives zeros (torch gives NaN there); a NaN or a +inf in a row
// makes the whole row NaN (as torch).
//
// Template parameters, in order (as rms_norm.cuh):
//   T            hk::bf16, hk::half or float.
//   VEC          elements per vector access (1, 2, 4, 8 for 16-bit T; 1, 2, 4 for float); x, y must
//                be multiples of VEC * sizeof(T) bytes, the row strides multiples of VEC.
//   THREADS      threads per block: a multiple of 64, at most 1024.
//   ROW_THREADS  threads sharing a row: a power of two <= the warp (row reductions by shuffles
//                only) or whole warps dividing THREADS (across warps through shared memory, two
//                block barriers per reduction).
//   ROWS         rows each row group holds at once (>= 1).
//   CHUNKS       VEC-element chunks per thread and row: COLS = ROW_THREADS * VEC * CHUNKS columns
//                are held in registers. hidden <= COLS: one pass over memory (x read once, two row
//                reductions: max, then sum). hidden > COLS: x is read twice; the first pass keeps a
//                running max and a sum rescaled to it per thread (online softmax), combined over
//                the row group once at the end; the second pass writes y.
//   EXACT        hidden == COLS (the caller guarantees it): the one-pass path only, rows tested
//                only (hk::load<true> / store<true>: no column compare, no element-wise fallback
//                in the code). The same results as EXACT = false. Default false.
//
// Schedules (hkjit/ops/softmax.py; bf16, 16-byte accesses):
//   short rows (128)       8 threads per row, 32 rows per block     <hk::bf16, 8, 256, 8, 1, 2>
//   rows of 4K / 8K        a group of warps per row                 <hk::bf16, 8, 128, 128, 1, 4> (4096)
//                                                                   <hk::bf16, 8, 256, 256, 1, 4> (8192)
//   rows of 32K            one row per 1024-thread block            <hk::bf16, 8, 1024, 1024, 1, 4>
//   rows of 64K            CDNA: in registers                       <hk::bf16, 8, 1024, 1024, 1, 8>
//                          sm_90a (64 registers a thread): read twice <hk::bf16, 8, 1024, 1024, 1, 4>
// The output is converted and stored one chunk per thread at a time: converting the whole fp32
// row at once keeps a compare mask per element live in scalar registers on gfx942 (software bf16
// rounding) and spills them.
//
// args (passed by value), fields in this order:
//   const T*  x; T* y; long long x_row_stride, y_row_stride; int rows, hidden; float scale_log2e
//   (scale_log2e = scale * log2(e), the caller's pre-scaling)
// C layout: offsets 0, 8, 16, 24, 32, 36, 40; 48 bytes with the tail padding.
//
// threads = THREADS. dynamic_smem = 0 (ROW_THREADS > warp: static shared memory for the sums).
// Grid (1-D): ROWS_PER_BLOCK = THREADS / ROW_THREADS * ROWS rows per block step; grid.x in
// [1, ceil(rows / ROWS_PER_BLOCK)], block b runs steps b, b + grid.x, ... (as rms_norm.cuh).
#pragma once
#include "hk/hk.hpp"

template <class T, int VEC, int THREADS, int ROW_THREADS, int ROWS, int CHUNKS, bool EXACT = false>
struct softmax {
  static constexpr int threads = THREADS;
  static constexpr int dynamic_smem = 0;
  struct args {
    const T* x;
    T* y;
    long long x_row_stride, y_row_stride;
    int rows, hidden;
    float scale_log2e;
  };

  using tile = hk::rt_row<T, ROWS, ROW_THREADS * VEC * CHUNKS, VEC, ROW_THREADS>;
  using ftile = typename tile::template retype<float>;
  using rvec = hk::row_vec<tile>;
  static constexpr int COLS = tile::cols;
  static constexpr int SLICE = ROW_THREADS * VEC;   // one chunk per thread
  static constexpr int ROWS_PER_BLOCK = THREADS / ROW_THREADS * ROWS;
  static_assert(THREADS % 64 == 0 && THREADS <= 1024, "THREADS: a multiple of 64, at most 1024");
  static_assert(THREADS % ROW_THREADS == 0, "ROW_THREADS must divide THREADS");
  static_assert(VEC * sizeof(T) <= 16, "at most 16-byte accesses");

  // The max to subtract: 0 for a row (or a thread's part of one) holding only -inf, so that
  // exp2(-inf - 0) = 0 rather than exp2(-inf + inf) = NaN.
  HK_INLINE static float offset(float m) { return m == hk::neg_inf() ? 0.0f : m; }
  // 1 / sum; 0 for a sum of 0 (a row of -inf: zeros out); NaN stays NaN.
  HK_INLINE static float inverse(float s) { return s == 0.0f ? 0.0f : 1.0f / s; }

  // z = x * scale_log2e, tails and missing rows -inf. FULL: the columns lie inside the row.
  template <bool FULL = false>
  HK_INLINE static void scaled(ftile& z, const hk::gl<T>& g, int r0, int c0, float k) {
    tile x;
    hk::load<FULL>(x, g, r0, c0, hk::neg_inf());
    hk::convert(z, x);
    hk::mul(z, z, k);
  }

  // y = z in one-chunk slices (as few fp32 -> T conversions in flight as a chunk).
  template <bool FULL = false>
  HK_INLINE static void store(const hk::gl<T>& g, ftile& z, int r0, int c0) {
#pragma unroll
    for (int s = 0; s < CHUNKS; ++s) hk::store<FULL>(g, hk::subtile_cols<SLICE>(z, s), r0, c0 + s * SLICE);
  }

  __device__ static void run(const args& a) {
    const auto gx = hk::make_gl(const_cast<T*>(a.x), a.rows, a.hidden, a.x_row_stride, 1);
    const auto gy = hk::make_gl(a.y, a.rows, a.hidden, a.y_row_stride, 1);
    const int row_blocks = (a.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    const float k = a.scale_log2e;
    // Every row group runs every step to the end (a group wider than a warp synchronises the
    // block in its reductions); rows outside are neither read nor written.
    for (int b = hk::block_x(); b < row_blocks; b += hk::grid_x()) {
      const int r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
      rvec m, s;
      ftile z;
      if (EXACT || a.hidden <= COLS) {     // the row in registers: one pass over memory
        // Column 0, hidden from the compiler: its per-element bounds tests (the ragged last
        // chunk) would be hoisted out of the row loop and held in scalar registers (CDNA).
        const int c0 = EXACT ? 0 : hk::opaque(0);
        scaled<EXACT>(z, gx, r0, c0, k);
        hk::row_max(m, z);
#pragma unroll
        for (int i = 0; i < rvec::n_elems; ++i) m.set(i, offset(m.get(i)));
        hk::sub_row(z, z, m);
        hk::exp2(z, z);
        hk::row_sum(s, z);
#pragma unroll
        for (int i = 0; i < rvec::n_elems; ++i) s.set(i, inverse(s.get(i)));
        hk::mul_row(z, z, s);
        store<EXACT>(gy, z, r0, c0);
        continue;
      }
      if constexpr (!EXACT) two_pass(a, gx, gy, r0, k);
    }
  }

  // Rows longer than COLS, read twice (the one-pass path's m, s and z, per row group).
  HK_INLINE static void two_pass(const args& a, const hk::gl<T>& gx, const hk::gl<T>& gy, int r0, float k) {
    rvec m, s;
    ftile z;
    // Longer rows: this thread's running max m[i] and sum s[i] (of exp2(z - offset(m[i]))).
    float tm[ftile::row_slots], ts[ftile::row_slots];
#pragma unroll
    for (int i = 0; i < ftile::row_slots; ++i) tm[i] = hk::neg_inf(), ts[i] = 0.0f;
    for (int c0 = 0; c0 < a.hidden; c0 += COLS) {
      scaled(z, gx, r0, c0, k);
      float bm[ftile::row_slots];
#pragma unroll
      for (int i = 0; i < ftile::row_slots; ++i) bm[i] = tm[i];
#pragma unroll
      for (int e = 0; e < ftile::n_elems; ++e) bm[ftile::row_slot(e)] = hk::fmax_f(bm[ftile::row_slot(e)], z.get(e));
#pragma unroll
      for (int i = 0; i < ftile::row_slots; ++i) {
        ts[i] *= hk::fast_exp2(tm[i] - offset(bm[i]));   // tm = -inf: ts = 0 stays 0
        tm[i] = bm[i];
      }
#pragma unroll
      for (int e = 0; e < ftile::n_elems; ++e) ts[ftile::row_slot(e)] += hk::fast_exp2(z.get(e) - offset(tm[ftile::row_slot(e)]));
    }
    // Combine the group: the row max, then every thread's sum rescaled to it.
    float rm[ftile::row_slots];
#pragma unroll
    for (int i = 0; i < ftile::row_slots; ++i) rm[i] = tm[i];
    ftile::template finish_rows<hk::op_max>(rm);
#pragma unroll
    for (int i = 0; i < ftile::row_slots; ++i) {
      // This thread's sum was taken at tm (0 when it saw only -inf: nothing to rescale, and
      // exp2(0 - offset(rm)) may overflow).
      ts[i] = tm[i] == hk::neg_inf() ? 0.0f : ts[i] * hk::fast_exp2(tm[i] - offset(rm[i]));
      m.set(i, offset(rm[i]));
    }
    ftile::template finish_rows<hk::op_sum>(ts);
#pragma unroll
    for (int i = 0; i < ftile::row_slots; ++i) s.set(i, inverse(ts[i]));
    for (int c0 = 0; c0 < a.hidden; c0 += COLS) {
      scaled(z, gx, r0, c0, k);
      hk::sub_row(z, z, m);
      hk::exp2(z, z);
      hk::mul_row(z, z, s);
      store(gy, z, r0, c0);
    }
  }
};
