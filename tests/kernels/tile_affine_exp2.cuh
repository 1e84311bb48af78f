#pragma once
// One source for gfx942, gfx950 and sm_90a: y = exp2(x * s + b), tile by tile, written only with
// the shared tile interface (gl, rt_acc, load, mul, add, exp2, store). Each tile group (a wave
// on CDNA, a warpgroup on Hopper) owns one 64x64 tile; ragged edges are bounds-checked.
#include "hk/hk.hpp"

template <class T, int GROUPS>
struct tile_affine_exp2 {
  static constexpr int threads = GROUPS * hk::TILE_GROUP_THREADS;
  static constexpr int dynamic_smem = 0;
  struct args { const T* x; T* y; int rows, cols; float s, b; };

  __device__ static void run(const args& a) {
    const auto x = hk::make_gl(const_cast<T*>(a.x), a.rows, a.cols, a.cols, 1);
    const auto y = hk::make_gl(a.y, a.rows, a.cols, a.cols, 1);
    const int tiles_c = (a.cols + 63) / 64;
    const int tile = hk::block_x() * GROUPS + hk::tile_group();
    const int r0 = (tile / tiles_c) * 64, c0 = (tile % tiles_c) * 64;
    if (r0 >= a.rows) return;
    hk::rt_acc<64, 64> t;
    hk::load(t, x, r0, c0);
    hk::mul(t, t, a.s);
    hk::add(t, t, a.b);
    hk::exp2(t, t);
    hk::store(y, t, r0, c0);
  }
};
