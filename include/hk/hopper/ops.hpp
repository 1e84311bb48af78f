#pragma once
// hk/hopper/ops.hpp: global loads/stores of warpgroup register tiles, and in-place helpers.
// Names are shared with include/hk/cdna: kernels written against them build for either target.
#include "tiles.hpp"

namespace hk {

// ---- in place ------------------------------------------------------------------------------
// (The portable element-wise ops, broadcasts and reductions are in common/regs.hpp.)
template <class RT, class F> HK_INLINE void map(RT& t, F f) {
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; ++k) t.v[b][k] = f(t.v[b][k]);
}
template <class RT> HK_INLINE void add(RT& d, const RT& a) {
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; ++k) d.v[b][k] += a.v[b][k];
}

// ---- stores ------------------------------------------------------------------------------------
// Store rows/cols of a register tile at (row0, col0) of g, skipping elements outside g. Column
// pairs go out as one 4/8-byte store when the pair is inside and aligned (cols contiguous).
template <class T> HK_INLINE void store_pair(T* p, float x0, float x1, bool pair) {
  if constexpr (sizeof(T) == 2) {
    if (pair) { *reinterpret_cast<u32*>(p) = pack2<T>(x0, x1); return; }
  } else {
    if (pair) { *reinterpret_cast<float2_*>(p) = float2_{x0, x1}; return; }
  }
  p[0] = from_float<T>(x0);
}

// ---- the portable forms (same names and arguments as include/hk/cdna) ---------------------------
// A register tile is owned by a "tile group": a warpgroup here, a wave on CDNA.
constexpr int TILE_GROUP_THREADS = 128;
HK_INLINE int tile_group() { return (int)(threadIdx.x / TILE_GROUP_THREADS); }
template <int R, int C> using rt_acc = rt<float, R, C>;

// Global -> accumulator-layout tile, bounds-checked (elements outside g get `fill`): the mirror
// of store below.
template <class T, class U, int R, int C>
HK_INLINE void load(rt<U, R, C>& t, const gl<T>& g, int row0, int col0, float fill = 0.0f) {
  using RT = rt<U, R, C>;
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; ++k) {
      int r = row0 + RT::row(b, k), c = col0 + RT::col(k);
      t.v[b][k] = from_float<U>((r < g.rows && c < g.cols) ? to_float(g(r, c)) : fill);
    }
}

template <class T, class U, int R, int C> HK_INLINE void store(const gl<T>& g, const rt<U, R, C>& t, int row0, int col0) {
  using RT = rt<U, R, C>;
  const bool vec_ok = g.stride_c == 1 && (g.stride_r % 2) == 0 && (reinterpret_cast<u64>(g.ptr) % (2 * sizeof(T))) == 0;
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; k += 2) {
      int r = row0 + RT::row(b, k), c = col0 + RT::col(k);
      if (r >= g.rows || c >= g.cols) continue;
      bool both = c + 1 < g.cols;
      T* p = &g(r, c);
      store_pair(p, to_float(t.v[b][k]), to_float(t.v[b][k + 1]), both && vec_ok);
      if (both && !vec_ok) p[g.stride_c] = from_float<T>(to_float(t.v[b][k + 1]));
    }
}

}  // namespace hk
