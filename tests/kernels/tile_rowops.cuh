#pragma once
// One source for gfx942, gfx950 and sm_90a, written only with the shared tile interface: row and
// column reductions, broadcasts, exp2/log2/rsqrt and conversions, on both kinds of register
// tile. For the rows r and columns c of a block of x (a 64 x 32 rt_acc tile, or the R rows of an
// rt_row group), with rm/rs row max/sum and cm/cs column max/sum:
//   y_row = exp2(x - rm) / sum_c exp2(x - rm)                     (base-2 softmax over each row)
//   y_col = log2(exp2(x - cm) * rsqrt(cs)) + cm, cs = sum_r exp2(x - cm)   (= x - log2(cs) / 2)
//   y_mix = max(x rs / cs + rm - x / 2, -x / 2) + x / 2, rs = sum_c exp2(x - rm), cs as above
// Elements outside x are loaded as -inf (neutral for max, exp2 gives 0 for sums) and never stored.
#include "hk/hk.hpp"

// Store a through a tile of type XO (converted first when XO holds another type).
template <class XO, class X, class TO> __device__ void put(const hk::gl<TO>& g, const X& a, int r0, int c0) {
  XO o;
  hk::convert(o, a);
  hk::store(g, o, r0, c0);
}

// The three outputs from a tile x (fp32) that holds -inf outside the matrix, stored through XO.
template <class XO, class X, class TO>
__device__ void rowops_outputs(const X& x, const hk::gl<TO>& y_row, const hk::gl<TO>& y_col, const hk::gl<TO>& y_mix,
                               int r0, int c0) {
  hk::row_vec<X> rm, rs;
  hk::col_vec<X> cm, cs, q;
  X a, b;
  hk::row_max(rm, x);
  hk::sub_row(a, x, rm);
  hk::exp2(a, a);
  hk::row_sum(rs, a);
  hk::div_row(a, a, rs);
  put<XO>(y_row, a, r0, c0);

  hk::col_max(cm, x);
  hk::sub_col(b, x, cm);
  hk::exp2(b, b);
  hk::col_sum(cs, b);
  hk::rsqrt(q, cs);
  hk::mul_col(b, b, q);
  hk::log2(b, b);
  hk::add_col(b, b, cm);
  put<XO>(y_col, b, r0, c0);

  hk::mul_row(a, x, rs);
  hk::div_col(a, a, cs);
  hk::add_row(a, a, rm);
  hk::div(b, x, -2.0f);
  hk::add(a, a, b);
  hk::max(a, a, b);
  hk::sub(a, a, b);
  put<XO>(y_mix, a, r0, c0);
}

// Each tile group (a wave on CDNA, a warpgroup on Hopper) owns one 64 x 32 accumulator tile.
template <class T, int GROUPS>
struct tile_rowops_acc {
  static constexpr int threads = GROUPS * hk::TILE_GROUP_THREADS;
  static constexpr int dynamic_smem = 0;
  struct args { const T* x; T* y_row; T* y_col; T* y_mix; int rows, cols, ld; };

  __device__ static void run(const args& a) {
    const auto x = hk::make_gl(const_cast<T*>(a.x), a.rows, a.cols, a.ld, 1);
    const int tiles_c = (a.cols + 31) / 32;
    const int tile = hk::block_x() * GROUPS + hk::tile_group();
    const int r0 = (tile / tiles_c) * 64, c0 = (tile % tiles_c) * 32;
    if (r0 >= a.rows) return;
    hk::rt_acc<64, 32> t;
    hk::load(t, x, r0, c0, hk::neg_inf());
    rowops_outputs<hk::rt_acc<64, 32>>(t, hk::make_gl(a.y_row, a.rows, a.cols, a.ld, 1),
                                       hk::make_gl(a.y_col, a.rows, a.cols, a.ld, 1),
                                       hk::make_gl(a.y_mix, a.rows, a.cols, a.ld, 1), r0, c0);
  }
};

// Row groups of G threads each own R rows of up to C columns (cols <= C) in an rt_row. x is
// loaded as T (slice by slice), converted to fp32 for the math, converted back to T and stored.
template <class T, int R, int C, int V, int G, int THREADS>
struct tile_rowops_row {
  static constexpr int threads = THREADS;
  static constexpr int dynamic_smem = 0;
  struct args { const T* x; T* y_row; T* y_col; T* y_mix; int rows, cols, ld; };
  using tile = hk::rt_row<T, R, C, V, G>;
  using ftile = hk::rt_row<float, R, C, V, G>;

  __device__ static void run(const args& a) {
    const auto x = hk::make_gl(const_cast<T*>(a.x), a.rows, a.cols, a.ld, 1);
    // Every group runs to the end (row reductions of groups wider than a warp synchronise the block).
    const int r0 = (hk::block_x() * (THREADS / G) + tile::group()) * R;
    tile raw;
    ftile t;
    // Read in one-chunk column slices of the tile (the same registers as one load of the whole).
    constexpr int SLICE = G * V;
#pragma unroll
    for (int s = 0; s < C / SLICE; ++s) hk::load(hk::subtile_cols<SLICE>(raw, s), x, r0, s * SLICE, hk::neg_inf());
    hk::convert(t, raw);
    rowops_outputs<tile>(t, hk::make_gl(a.y_row, a.rows, a.cols, a.ld, 1), hk::make_gl(a.y_col, a.rows, a.cols, a.ld, 1),
                         hk::make_gl(a.y_mix, a.rows, a.cols, a.ld, 1), r0, 0);
  }
};
