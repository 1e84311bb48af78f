#pragma once
// hk/hopper/ops.hpp: element-wise maps, row reductions and global stores on register tiles.
// Names are shared with include/hk/cdna: kernels written against them build for either target.
#include "tiles.hpp"

namespace hk {

// ---- element-wise ------------------------------------------------------------------------------
template <class RT, class F> HK_INLINE void map(RT& t, F f) {
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; ++k) t.v[b][k] = f(t.v[b][k]);
}
template <class RT> HK_INLINE void zero(RT& t) { map(t, [](float) { return 0.0f; }); }
template <class RT> HK_INLINE void mul(RT& t, float s) { map(t, [s](float x) { return x * s; }); }
template <class RT> HK_INLINE void add(RT& t, float s) { map(t, [s](float x) { return x + s; }); }
template <class RT> HK_INLINE void add(RT& d, const RT& a) {
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; ++k) d.v[b][k] += a.v[b][k];
}
HK_INLINE float exp2f_approx(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
template <class RT> HK_INLINE void exp2(RT& t) { map(t, [](float x) { return exp2f_approx(x); }); }

// ---- row reductions ------------------------------------------------------------------------------
// A thread holds 2 rows per 64-row block (r and r+8); out[2b + h] is the reduction of row
// 64b + r + 8h over all C columns, complete in all four lanes that share the row.
template <class RT, class F> HK_INLINE void row_reduce(float (&out)[2 * RT::blocks], const RT& t, F f) {
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float r = t.v[b][2 * h];
#pragma unroll
      for (int k = 0; k < RT::regs; ++k)
        if (k != 2 * h && (k % 4) / 2 == h) r = f(r, t.v[b][k]);
      r = f(r, __shfl_xor_sync(0xffffffffu, r, 1));
      r = f(r, __shfl_xor_sync(0xffffffffu, r, 2));
      out[2 * b + h] = r;
    }
}
template <class RT> HK_INLINE void row_sum(float (&out)[2 * RT::blocks], const RT& t) {
  row_reduce(out, t, [](float a, float b) { return a + b; });
}
template <class RT> HK_INLINE void row_max(float (&out)[2 * RT::blocks], const RT& t) {
  row_reduce(out, t, [](float a, float b) { return a > b ? a : b; });
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
template <class RT> HK_INLINE void mul(RT& d, const RT& a, float s) { d = a; mul(d, s); }
template <class RT> HK_INLINE void add(RT& d, const RT& a, float s) { d = a; add(d, s); }
template <class RT> HK_INLINE void add(RT& d, const RT& a, const RT& b) { d = a; add(d, b); }
template <class RT> HK_INLINE void exp2(RT& d, const RT& a) { d = a; exp2(d); }

// Global -> accumulator-layout tile, bounds-checked, zero fill: the mirror of store below.
template <class T, class RT> HK_INLINE void load(RT& t, const gl<T>& g, int row0, int col0) {
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; ++k) {
      int r = row0 + RT::row(b, k), c = col0 + RT::col(k);
      t.v[b][k] = (r < g.rows && c < g.cols) ? to_float(g(r, c)) : 0.0f;
    }
}

template <class T, class RT> HK_INLINE void store(const gl<T>& g, const RT& t, int row0, int col0) {
  const bool vec_ok = g.stride_c == 1 && (g.stride_r % 2) == 0 && (reinterpret_cast<u64>(g.ptr) % (2 * sizeof(T))) == 0;
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; k += 2) {
      int r = row0 + RT::row(b, k), c = col0 + RT::col(k);
      if (r >= g.rows || c >= g.cols) continue;
      bool both = c + 1 < g.cols;
      T* p = &g(r, c);
      store_pair(p, t.v[b][k], t.v[b][k + 1], both && vec_ok);
      if (both && !vec_ok) p[g.stride_c] = from_float<T>(t.v[b][k + 1]);
    }
}

}  // namespace hk
