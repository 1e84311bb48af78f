// eltwise.cuh: element-wise activations and gated activations ("act and mul"), one source for
// gfx942, gfx950 and sm_90a.
//
//   unary:  y[r][c] = ACT(x[r][c])                               c < cols
//   gated:  y[r][c] = ACT(x[r][c]) * x[r][cols + c]              c < cols (x rows hold 2 cols)
//
// x and y share one element type T; the math is fp32, rounded once to T. Any number of rows >= 1,
// any row length >= 1; rows may be strided (elements contiguous within a row). A contiguous array
// is passed as one long row (rows = 1), so only its last chunk is ragged. y may be x (unary, in
// place, equal strides): every element is read by the thread that later writes it.
//
// Template parameters, in order:
//   T            hk::bf16, hk::half or float.
//   ACT          the activation: a type with `static float apply(float)` (hk::act::silu, gelu,
//                gelu_tanh, relu, tanh from hk/common/activations.hpp).
//   GATED        false: unary; true: act-and-mul on the [x | gate] halves of each row.
//   VEC          elements per vector access (1, 2, 4, 8 for 16-bit T; 1, 2, 4 for float): a chunk
//                wholly inside a row is one VEC * sizeof(T)-byte access (16 bytes at best), a chunk
//                straddling the row end goes element by element. The caller guarantees that x, y
//                (and x + cols when GATED) are multiples of VEC * sizeof(T) bytes and the row
//                strides multiples of VEC.
//   THREADS      threads per block: a multiple of 64, at most 1024.
//   ROW_THREADS  threads sharing a row (consecutive threads): a power of two dividing THREADS.
//   ROWS         rows each row group holds at once (>= 1).
//   CHUNKS       VEC-element chunks per thread and row (>= 1): a block step covers
//                COLS = ROW_THREADS * VEC * CHUNKS columns of ROWS_PER_BLOCK = THREADS /
//                ROW_THREADS * ROWS rows. ROWS * CHUNKS independent loads (twice that gated) are
//                in flight per thread.
//   MIN_BLOCKS   blocks an NVIDIA SM must hold at once (__launch_bounds__(THREADS, MIN_BLOCKS)):
//                caps registers so that enough loads stay in flight; ignored on AMD. Default 1.
//   EXACT        cols == COLS (the caller guarantees it): one column block, so a tile's
//                row block is its index (no division by the column blocks) and only rows are
//                tested (hk::load<true> / store<true>: no column compare, no element-wise
//                fallback in the code). The same results as EXACT = false, to 1-2 ULPs where the
//                compiler contracts the activation's multiply-adds differently. Default false.
//
// Schedules (hkjit/ops/activations.py picks them; bf16, 16-byte accesses):
//   contiguous unary (one long row)   a block per 4096 elements      <hk::bf16, hk::act::gelu, false, 8, 256, 256, 1, 2, 6>  (sm_90a)
//                                     a block per 8192 elements      <hk::bf16, hk::act::silu, false, 8, 256, 256, 1, 4>     (CDNA)
//   strided rows of 4096              a 128-thread group per row     <hk::bf16, hk::act::silu, false, 8, 256, 128, 1, 4>     (CDNA)
//   strided rows of 77                4 threads per row, 64 rows     <hk::bf16, hk::act::silu, false, 8, 256, 4, 1, 3>       (CDNA)
//   gated, d = 128 (x 4096 x 256)     8 threads per row, 32 rows     <hk::bf16, hk::act::silu, true, 8, 256, 8, 1, 2>
//   gated, d = 8192                   a block per 4096 columns       <hk::bf16, hk::act::gelu, true, 8, 256, 256, 1, 2, 4>   (sm_90a)
//
// args (the kernel's single parameter, passed by value), fields in this order:
//   const T*  x              row r at x + r * x_row_stride
//   T*        y              row r at y + r * y_row_stride
//   long long x_row_stride   elements between consecutive rows of x (>= cols, >= 2 cols gated)
//   long long y_row_stride   elements between consecutive rows of y (>= cols)
//   int       rows           >= 1
//   int       cols           >= 1: the row length of y (and of each half of x when GATED)
// C layout: offsets 0, 8, 16, 24, 32, 36; 40 bytes.
//
// threads = THREADS. dynamic_smem = 0, no shared memory, no barrier.
//
// Grid (1-D): the output is cut into tiles of ROWS_PER_BLOCK rows x COLS columns, numbered row
// block-major (tile t: row block t / col_blocks, column block t % col_blocks, so consecutive
// blocks touch consecutive memory). grid.x = any value in [1, tiles]; block b takes tiles b,
// b + grid.x, ...
#pragma once
#include "hk/hk.hpp"
#include "hk/common/activations.hpp"

template <class T, class ACT, bool GATED, int VEC, int THREADS, int ROW_THREADS, int ROWS, int CHUNKS, int MIN_BLOCKS = 1,
          bool EXACT = false>
struct eltwise {
  static constexpr int threads = THREADS;
  static constexpr int min_blocks = MIN_BLOCKS;
  static constexpr int dynamic_smem = 0;
  struct args {
    const T* x;
    T* y;
    long long x_row_stride, y_row_stride;
    int rows, cols;
  };

  using tile = hk::rt_row<T, ROWS, ROW_THREADS * VEC * CHUNKS, VEC, ROW_THREADS>;
  using ftile = typename tile::template retype<float>;
  static constexpr int COLS = tile::cols;
  static constexpr int ROWS_PER_BLOCK = THREADS / ROW_THREADS * ROWS;
  static_assert(THREADS % 64 == 0 && THREADS <= 1024, "THREADS: a multiple of 64, at most 1024");
  static_assert(THREADS % ROW_THREADS == 0 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
                "ROW_THREADS: a power of two dividing THREADS");
  static_assert(VEC * sizeof(T) <= 16, "at most 16-byte accesses");

  __device__ static void run(const args& a) {
    T* const x = const_cast<T*>(a.x);
    const auto gx = hk::make_gl(x, a.rows, a.cols, a.x_row_stride, 1);
    const auto gg = hk::make_gl(x + a.cols, a.rows, a.cols, a.x_row_stride, 1);   // the gate half
    const auto gy = hk::make_gl(a.y, a.rows, a.cols, a.y_row_stride, 1);
    const int col_blocks = EXACT ? 1 : (a.cols + COLS - 1) / COLS;
    const int tiles = (a.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK * col_blocks;
    for (int t = hk::block_x(); t < tiles; t += hk::grid_x()) {
      const int r0 = (EXACT ? t : t / col_blocks) * ROWS_PER_BLOCK + tile::group() * ROWS;
      const int c0 = EXACT ? 0 : t % col_blocks * COLS;
      tile xt, gt;
      hk::load<EXACT>(xt, gx, r0, c0);
      if constexpr (GATED) hk::load<EXACT>(gt, gg, r0, c0);   // both halves in flight before the math
      ftile f;
      hk::convert(f, xt);
#pragma unroll
      for (int i = 0; i < ftile::n_elems; ++i) f.set(i, ACT::apply(f.get(i)));
      if constexpr (GATED) {
        ftile g;
        hk::convert(g, gt);
        hk::mul(f, f, g);
      }
      hk::store<EXACT>(gy, f, r0, c0);
    }
  }
};
