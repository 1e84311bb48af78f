// rms_norm.cuh: RMS normalisation, one source for gfx942, gfx950 and sm_90a.
//
//   y[r][c] = x[r][c] * rsqrt(mean_c(x[r][c]^2) + eps) * weight[c]
//
// x, weight and y share one element type T; the math is fp32 (fast hardware rsqrt). Any number of
// rows >= 1, any hidden size (row length) >= 1; the rows of x and y may be strided (elements
// contiguous within a row). y may be x (in place, with equal strides): each element is read by
// the thread that later writes it, before it writes it.
//
// Template parameters, in order:
//   T            hk::bf16, hk::half or float: the type of x, weight and y.
//   VEC          elements per vector access: 1, 2, 4 or 8 for 16-bit T; 1, 2 or 4 for float. A
//                chunk of VEC elements wholly inside a row is one VEC * sizeof(T)-byte load or
//                store (16 bytes: VEC = 8 for 16-bit T, 4 for float); a chunk that straddles the
//                end of a row is accessed element by element. The caller guarantees that the
//                addresses x, y and weight are multiples of VEC * sizeof(T) bytes and that
//                x_row_stride and y_row_stride are multiples of VEC (VEC = 1 always qualifies).
//   THREADS      threads per block: a multiple of 64 (the AMD wave; also whole NVIDIA warps), at
//                most 1024.
//   ROW_THREADS  threads that share one row (a row group; row groups are consecutive threads):
//                a power of two <= the warp size (32 on NVIDIA, 64 on AMD) -- several rows per
//                warp, the row sum by shuffles only -- or a multiple of the warp size dividing
//                THREADS -- a row per group of warps (ROW_THREADS = THREADS: per block), the row
//                sum crossing warps through shared memory with two block barriers per step.
//                (Powers of two that divide THREADS qualify on every target.)
//   ROWS         rows each row group holds at once (>= 1): ROWS independent loads in flight per
//                chunk position.
//   CHUNKS       VEC-element chunks per thread and row (>= 1). COLS = ROW_THREADS * VEC * CHUNKS
//                columns of a row are held in registers (as T, two 16-bit elements per register):
//                when hidden <= COLS, x is read from memory once; when hidden > COLS, the row is
//                processed in column blocks of COLS and x is read twice (sum of squares, then
//                output). A thread keeps ROWS * CHUNKS * VEC * sizeof(T) / 4 registers of x: at
//                1024 threads keep it <= 32 on sm_90a (64 registers a thread) and <= 64 on CDNA
//                (so fp32 rows longer than 32768 are read twice there).
//   MIN_BLOCKS   blocks an NVIDIA SM must hold at once (__launch_bounds__(THREADS, MIN_BLOCKS)):
//                a register cap; ignored on AMD. Default 1 (no cap beyond THREADS).
//   EXACT        the caller guarantees hidden == COLS (every row is exactly one tile). The loads
//                and stores then test rows only, the row is read once, and the weight (the
//                same for every row) is read once per thread before the row loop and kept as
//                fp32 in registers (COLS / ROW_THREADS of them): with short rows the per-row work
//                is the load, the sum, the scale and the store. Same results as EXACT = false,
//                bit for bit. Default false.
//   WEIGHT_REGS  (EXACT) true: the weight kept in registers as above; false: read per row, one
//                chunk ahead of its use, as the general path reads it (no registers held across
//                rows; straight-line code for the row). Default true.
//
// Schedules (choose by hidden so that hidden <= COLS; 16-byte accesses):
//   short rows, many rows   ROW_THREADS < warp, ROWS 2..4, CHUNKS 1   <hk::bf16, 8, 256, 16, 2, 1>    (128)
//   rows of about 1K        one warp per row                          <hk::bf16, 8, 256, 32, 1, 4>    (1024)
//   rows of 4K / 8K         a few warps per row                       <hk::bf16, 8, 512, 128, 1, 4>   (4096)
//                                                                     <hk::bf16, 8, 512, 256, 1, 4>   (8192)
//   long rows (<= 65536)    one row per block of 1024 threads         <hk::bf16, 8, 1024, 1024, 1, 8> (65536)
//   persistent              any of these with fewer blocks than row blocks (see Grid)
// Row groups no wider than a warp need no block barrier; each warp then runs on its own.
//
// args (the kernel's single parameter, passed by value), fields in this order:
//   const T*  x              row r at x + r * x_row_stride
//   const T*  weight         hidden elements, contiguous
//   T*        y              row r at y + r * y_row_stride
//   long long x_row_stride   elements between the starts of consecutive rows of x (>= hidden)
//   long long y_row_stride   elements between the starts of consecutive rows of y (>= hidden)
//   int       rows           >= 1
//   int       hidden         >= 1
//   float     eps
// C layout: offsets 0, 8, 16, 24, 32, 40, 44, 48; 56 bytes with the tail padding.
//
// threads = THREADS. dynamic_smem = 0 (ROW_THREADS > warp uses 4 * ROWS * 1024 / warp bytes of
// static shared memory for the row sums).
//
// Grid (1-D, grid.y = grid.z = 1): a block step covers ROWS_PER_BLOCK = THREADS / ROW_THREADS *
// ROWS consecutive rows (row group g of the block takes rows g * ROWS .. g * ROWS + ROWS - 1 of
// the step); there are row_blocks = ceil(rows / ROWS_PER_BLOCK) steps. Launch grid.x = any value in
// [1, row_blocks]: row_blocks for one step per block, fewer for a persistent grid (e.g. a few
// blocks per SM / CU); block b runs steps b, b + grid.x, b + 2 grid.x, ...
#pragma once
#include "hk/hk.hpp"

template <class T, int VEC, int THREADS, int ROW_THREADS, int ROWS, int CHUNKS, int MIN_BLOCKS = 1,
          bool EXACT = false, bool WEIGHT_REGS = true>
struct rms_norm {
  static constexpr int threads = THREADS;
  static constexpr int min_blocks = MIN_BLOCKS;
  static constexpr int dynamic_smem = 0;
  struct args {
    const T* x;
    const T* weight;
    T* y;
    long long x_row_stride, y_row_stride;
    int rows, hidden;
    float eps;
  };

  using tile = hk::rt_row<T, ROWS, ROW_THREADS * VEC * CHUNKS, VEC, ROW_THREADS>;   // x, as stored
  using ftile = typename tile::template retype<float>;                              // fp32 math
  static constexpr int COLS = tile::cols;
  static constexpr int SLICE = ROW_THREADS * VEC;                                   // one chunk per thread
  using slice = hk::rt_row<T, ROWS, SLICE, VEC, ROW_THREADS>;
  using fslice = typename slice::template retype<float>;
  using wslice = hk::rt_row<T, 1, SLICE, VEC, ROW_THREADS>;                           // weight, as stored
  static constexpr int ROWS_PER_BLOCK = THREADS / ROW_THREADS * ROWS;
  static_assert(THREADS % 64 == 0 && THREADS <= 1024, "THREADS: a multiple of 64, at most 1024");
  static_assert(THREADS % ROW_THREADS == 0, "ROW_THREADS must divide THREADS");
  static_assert(VEC * sizeof(T) <= 16, "at most 16-byte accesses");
  static_assert(EXACT || WEIGHT_REGS, "WEIGHT_REGS = false: a choice of the EXACT path");

  // ss (the rows' sums of squares) -> rsqrt(ss * inv_hidden + eps), each path's order of operations.
  HK_INLINE static void inv_rms(hk::row_vec<tile>& ss, float inv_hidden, float eps) {
    hk::mul(ss, ss, inv_hidden);
    hk::add(ss, ss, eps);
    hk::rsqrt(ss, ss);
  }

  // y = x * ss * weight over the COLS columns from c0, one chunk a thread at a time, so that only a slice
  // of the weight and of the fp32 result is live next to x; the next slice's weight is loaded before
  // this one is stored. FULL_COLS: the columns are known to lie inside the row (tested: rows only).
  template <bool FULL_COLS, class GW, class GY>
  HK_INLINE static void scale_store(const GY& gy, const GW& gw, const tile& x, const hk::row_vec<tile>& ss, int r0,
                                    int c0) {
    wslice w[2];
    hk::load<FULL_COLS>(w[0], gw, 0, c0);
#pragma unroll
    for (int s = 0; s < CHUNKS; ++s) {
      if (s + 1 < CHUNKS) hk::load<FULL_COLS>(w[(s + 1) % 2], gw, 0, c0 + (s + 1) * SLICE);
      hk::col_vec<slice> wf;
      fslice f;
      hk::convert(wf, w[s % 2]);
      hk::convert(f, hk::subtile_cols<SLICE>(x, s));
      hk::mul_row(f, f, ss);
      hk::mul_col(f, f, wf);
      hk::store<FULL_COLS>(gy, f, r0, c0 + s * SLICE);
    }
  }

  // hidden == COLS: one load, one store, the weight from registers (see EXACT above). The same
  // operations in the same order as run_general, so the same bits. The first row block's x is
  // loaded before the weight, so that the two loads are in flight together (the weight's fp32
  // conversion, hoisted out of the row loop, would otherwise wait for it before x is asked for).
  HK_INLINE static void exact_rows(const args& a, const tile& x, const hk::col_vec<tile>& w, int r0) {
    constexpr float inv_hidden = 1.0f / (float)COLS;   // = the run-time 1.0f / hidden, rounded once
    const auto gy = hk::make_gl(a.y, a.rows, COLS, a.y_row_stride, 1);
    ftile f, sq;
    hk::convert(f, x);
    hk::square(sq, f);
    hk::row_vec<tile> ss;
    hk::row_sum(ss, sq);                            // run_general's 0 + part: the same (part >= +0)
    inv_rms(ss, inv_hidden, a.eps);
    hk::mul_row(f, f, ss);
    hk::mul_col(f, f, w);
    hk::store<true>(gy, f, r0, 0);
  }

  __device__ static void run_exact(const args& a) {
    const auto gx = hk::make_gl(const_cast<T*>(a.x), a.rows, COLS, a.x_row_stride, 1);
    const int row_blocks = (a.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    int b = hk::block_x();
    if (b >= row_blocks) return;
    int r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
    tile x;
    hk::load<true>(x, gx, r0, 0);
    hk::col_vec<tile> w;
    hk::load<true>(w, hk::make_gl(const_cast<T*>(a.weight), 1, COLS, COLS, 1), 0, 0);
    exact_rows(a, x, w, r0);
    for (b += hk::grid_x(); b < row_blocks; b += hk::grid_x()) {   // a persistent grid's next row blocks
      r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
      hk::load<true>(x, gx, r0, 0);
      exact_rows(a, x, w, r0);
    }
  }

  // EXACT without the weight in registers: run_general's order of operations over exactly COLS
  // columns (a constant), rows tested only.
  __device__ static void run_exact_streamed(const args& a) {
    constexpr float inv_hidden = 1.0f / (float)COLS;
    const auto gx = hk::make_gl(const_cast<T*>(a.x), a.rows, COLS, a.x_row_stride, 1);
    const auto gw = hk::make_gl(const_cast<T*>(a.weight), 1, COLS, COLS, 1);
    const auto gy = hk::make_gl(a.y, a.rows, COLS, a.y_row_stride, 1);
    const int row_blocks = (a.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    for (int b = hk::block_x(); b < row_blocks; b += hk::grid_x()) {
      const int r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
      tile x;
      hk::load<true>(x, gx, r0, 0);
      ftile sq;
      hk::convert(sq, x);
      hk::square(sq, sq);
      hk::row_vec<tile> ss;
      hk::row_sum(ss, sq);                          // run_general's 0 + part: the same (part >= +0)
      inv_rms(ss, inv_hidden, a.eps);
      scale_store<true>(gy, gw, x, ss, r0, 0);
    }
  }

  __device__ static void run(const args& a) {
    if constexpr (EXACT && WEIGHT_REGS) run_exact(a);
    else if constexpr (EXACT) run_exact_streamed(a);
    else run_general(a);
  }

  __device__ static void run_general(const args& a) {
    const auto gx = hk::make_gl(const_cast<T*>(a.x), a.rows, a.hidden, a.x_row_stride, 1);
    const auto gw = hk::make_gl(const_cast<T*>(a.weight), 1, a.hidden, a.hidden, 1);
    const auto gy = hk::make_gl(a.y, a.rows, a.hidden, a.y_row_stride, 1);
    const int row_blocks = (a.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    const float inv_hidden = 1.0f / (float)a.hidden;
    // Every group of the block runs every step to the end, with or without rows left (a row
    // group wider than a warp synchronises the block in its row sums); outside rows are neither
    // read nor written.
    for (int b = hk::block_x(); b < row_blocks; b += hk::grid_x()) {
      const int r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
      tile x;
      hk::row_vec<tile> ss, part;
      hk::zero(ss);
      for (int c0 = 0; c0 < a.hidden; c0 += COLS) {
        hk::load(x, gx, r0, c0);
        ftile sq;
        hk::convert(sq, x);
        hk::square(sq, sq);
        hk::row_sum(part, sq);
        hk::add(ss, ss, part);
      }
      inv_rms(ss, inv_hidden, a.eps);
      for (int c0 = 0; c0 < a.hidden; c0 += COLS) {
        if (a.hidden > COLS) hk::load(x, gx, r0, c0);   // one block of columns: x is still here
        scale_store<false>(gy, gw, x, ss, r0, c0);
      }
    }
  }
};
