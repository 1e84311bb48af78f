// rope.cuh: rotary position embeddings, one source for gfx942, gfx950 and sm_90a.
//
// For each row of D elements of a 4-D tensor (batch, heads, positions in either order) and its
// position p (the row's sequence index, or positions[b][n] when given), the first ROT = 2 HALF
// elements are rotated by the angles whose cosines and sines are row p of cos and sin:
//   half rotation (NeoX, Llama):  pairs (i, i + HALF)      y_i = x_i c_i - x_{i+H} s_i
//                                                          y_{i+H} = x_{i+H} c_i + x_i s_i
//   interleaved (GPT-J):          pairs (2i, 2i + 1)       y_2i = x_2i c_i - x_2i+1 s_i
//                                                          y_2i+1 = x_2i+1 c_i + x_2i s_i
// and the rest of the row (columns ROT .. D - 1) is copied (skipped when y is x). fp32 math, one
// rounding to T. Two tensors can be rotated in one launch (q and k: rope_qk); they share cos, sin
// and positions and may differ in heads.
//
// Template parameters, in order:
//   T            hk::bf16, hk::half or float: the type of x and y.
//   TC           the type of cos and sin (T or float).
//   TP           the type of positions (int or long long; ignored when args.positions is null).
//   INTERLEAVED  false: half rotation; true: interleaved pairs.
//   VEC          elements of x per vector access (1, 2, 4, 8; even when INTERLEAVED): cos and sin
//                are read VEC (half rotation) or VEC / 2 (interleaved) at a time. The caller
//                guarantees alignment: x, y, their row strides and HALF (half rotation) or ROT
//                (interleaved) are multiples of VEC elements, and cos/sin rows of VEC (VEC / 2)
//                elements of TC.
//   THREADS      threads per block: a multiple of 64, at most 1024.
//   ROW_THREADS  threads per row (a power of two up to the warp, dividing THREADS).
//   CHUNKS       VEC-element chunks per thread per step of a row's rotated half (interleaved: of
//                the rotated columns): COLS = ROW_THREADS * VEC * CHUNKS columns a step.
//   EXACT        the caller guarantees ROT == D and HALF == COLS (interleaved: ROT == COLS): a row
//                is one step, so the loads and stores test the row only (no column loop, no
//                column tests, no tail copy). Same results as EXACT = false. Default false.
//
// args, fields in this order:
//   tensor t[2]          the tensors; t[1] has rows = 0 when there is one. Each:
//     const T* x; T* y;                                   rows of D contiguous elements
//     long long xs0, xs1, xs2, ys0, ys1, ys2;             element strides of the leading dims
//     int d0, d1, d2;                                     leading dims (d0 = batch; rows are
//                                                         numbered in this order)
//     int n_axis;                                         1 or 2: which of d1, d2 is the position
//     int rows;                                           d0 * d1 * d2 (0: no tensor)
//   const TC* cos; const TC* sin;   rows of HALF elements, cs_stride elements apart
//   const TP* positions;            null: p = n; else p = positions[b * pos_stride + n]
//   long long cs_stride, pos_stride;
//   int table_rows;                 rows of cos/sin: a position outside [0, table_rows) gives NaN
//   int d, half;                    row length D and HALF = ROT / 2
// C layout: tensor: pointers at 0, 8, strides 16..56, ints 64..80; 88 bytes with padding. args: t at
// 0 and 88, cos 176, sin 184, positions 192, cs_stride 200, pos_stride 208, ints 216, 220, 224;
// 232 bytes (the ctypes mirror in hkjit/ops/rope.py; a test checks it against the AMD metadata).
//
// threads = THREADS, dynamic_smem = 0. Grid (1-D): a block step covers THREADS / ROW_THREADS rows
// (rows of t[0] first, then of t[1]); grid.x in [1, row blocks]; block b takes steps b, b + grid.x..
#pragma once
#include "hk/hk.hpp"

template <class T, class TC, class TP, bool INTERLEAVED, int VEC, int THREADS, int ROW_THREADS, int CHUNKS,
          bool EXACT = false>
struct rope {
  static constexpr int threads = THREADS;
  static constexpr int dynamic_smem = 0;
  struct tensor {
    const T* x;
    T* y;
    long long xs0, xs1, xs2, ys0, ys1, ys2;
    int d0, d1, d2, n_axis, rows;
  };
  struct args {
    tensor t[2];
    const TC* cos;
    const TC* sin;
    const TP* positions;
    long long cs_stride, pos_stride;
    int table_rows, d, half;
  };

  static constexpr int CVEC = INTERLEAVED ? VEC / 2 : VEC;       // cos/sin elements per access
  using xtile = hk::rt_row<T, 1, ROW_THREADS * VEC * CHUNKS, VEC, ROW_THREADS>;
  using ctile = hk::rt_row<TC, 1, ROW_THREADS * CVEC * CHUNKS, CVEC, ROW_THREADS>;
  using fx = typename xtile::template retype<float>;
  using fc = typename ctile::template retype<float>;
  static constexpr int COLS = xtile::cols;                        // x columns a step
  static constexpr int ROWS_PER_BLOCK = THREADS / ROW_THREADS;
  static_assert(THREADS % 64 == 0 && THREADS <= 1024, "THREADS: a multiple of 64, at most 1024");
  static_assert(ROW_THREADS <= hk::WARP_THREADS && THREADS % ROW_THREADS == 0, "ROW_THREADS: up to a warp");
  static_assert(!INTERLEAVED || VEC % 2 == 0, "interleaved pairs need an even VEC");

  // y = x c - x' s for the first of a pair, x c + x' s for the second (sign -1 / +1), rounded in
  // one fixed order (x' s on its own, then one fma): left to the compiler, which product it fuses
  // depends on the code around it, and the exact and general paths would differ in the last bit.
  HK_INLINE static float rotate1(float x, float x2, float c, float s, float sign) {
    return hk::fma_rn(x, c, sign * hk::mul_rn(x2, s));
  }
  HK_INLINE static void rotate(fx& out, const fx& a, const fx& b, const fc& c, const fc& s, float sign) {
#pragma unroll
    for (int i = 0; i < fx::n_elems; ++i) out.set(i, rotate1(a.get(i), b.get(i), c.get(i), s.get(i), sign));
  }

  __device__ static void run(const args& a) {
    const int rows = a.t[0].rows + a.t[1].rows;
    const int blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    for (int blk = hk::block_x(); blk < blocks; blk += hk::grid_x()) {
      int r = blk * ROWS_PER_BLOCK + xtile::group();
      const bool second = r >= a.t[0].rows;
      const tensor& t = second ? a.t[1] : a.t[0];
      if (second) r -= a.t[0].rows;
      const bool ok = r < t.rows;                    // rows past the end: nothing read or written
      const int i2 = ok ? r % t.d2 : 0, i1 = ok ? r / t.d2 % t.d1 : 0, i0 = ok ? r / t.d2 / t.d1 : 0;
      const int n = t.n_axis == 2 ? i2 : i1;
      long long p = n;
      if (a.positions != nullptr && ok) p = (long long)a.positions[i0 * a.pos_stride + n];
      const bool p_ok = p >= 0 && p < a.table_rows;
      const long long cs_row = p_ok ? p : 0;
      const auto gx = hk::make_gl(const_cast<T*>(t.x) + (i0 * t.xs0 + i1 * t.xs1 + i2 * t.xs2), ok ? 1 : 0, a.d, a.d, 1);
      const auto gy = hk::make_gl(t.y + (i0 * t.ys0 + i1 * t.ys1 + i2 * t.ys2), ok ? 1 : 0, a.d, a.d, 1);
      const auto gc = hk::make_gl(const_cast<TC*>(a.cos) + cs_row * a.cs_stride, 1, a.half, a.half, 1);
      const auto gs = hk::make_gl(const_cast<TC*>(a.sin) + cs_row * a.cs_stride, 1, a.half, a.half, 1);
      const float nan_if_bad = p_ok ? 0.0f : __builtin_bit_cast(float, 0x7FC00000u);   // a quiet NaN
      const int rot = 2 * a.half;
      if constexpr (INTERLEAVED) {
        for (int c0 = hk::opaque(0); EXACT ? c0 == 0 : c0 < rot; c0 += COLS) {   // EXACT: one step
          xtile xt;
          ctile ct, st;
          hk::load<EXACT>(xt, gx, 0, c0);
          hk::load<EXACT>(ct, gc, 0, c0 / 2);
          hk::load<EXACT>(st, gs, 0, c0 / 2);
          fx f, o;
          fc cf, sf;
          hk::convert(f, xt);
          hk::convert(cf, ct);
          hk::convert(sf, st);
#pragma unroll
          for (int i = 0; i < fx::n_elems; i += 2) {
            const float c = cf.get(i / 2) + nan_if_bad, s = sf.get(i / 2);
            o.set(i, rotate1(f.get(i), f.get(i + 1), c, s, -1.0f));
            o.set(i + 1, rotate1(f.get(i + 1), f.get(i), c, s, 1.0f));
          }
          if (EXACT || c0 + COLS <= rot) {
            hk::store<EXACT>(gy, o, 0, c0);
          } else {   // the last step may reach past ROT into the copied columns: store only < ROT
            const auto gyr = hk::make_gl(gy.ptr, ok ? 1 : 0, rot, a.d, 1);
            hk::store(gyr, o, 0, c0);
          }
        }
      } else {
        const auto gx2 = hk::make_gl(gx.ptr + a.half, ok ? 1 : 0, a.half, a.d, 1);
        const auto gx1 = hk::make_gl(gx.ptr, ok ? 1 : 0, a.half, a.d, 1);
        const auto gy1 = hk::make_gl(gy.ptr, ok ? 1 : 0, a.half, a.d, 1);
        const auto gy2 = hk::make_gl(gy.ptr + a.half, ok ? 1 : 0, a.half, a.d, 1);
        for (int c0 = hk::opaque(0); EXACT ? c0 == 0 : c0 < a.half; c0 += COLS) {   // EXACT: one step
          xtile x1, x2;
          ctile ct, st;
          hk::load<EXACT>(x1, gx1, 0, c0);
          hk::load<EXACT>(x2, gx2, 0, c0);
          hk::load<EXACT>(ct, gc, 0, c0);
          hk::load<EXACT>(st, gs, 0, c0);
          fx f1, f2, o;
          fc cf, sf;
          hk::convert(f1, x1);
          hk::convert(f2, x2);
          hk::convert(cf, ct);
          hk::convert(sf, st);
          hk::add(cf, cf, nan_if_bad);
          rotate(o, f1, f2, cf, sf, -1.0f);
          hk::store<EXACT>(gy1, o, 0, c0);
          rotate(o, f2, f1, cf, sf, 1.0f);
          hk::store<EXACT>(gy2, o, 0, c0);
        }
      }
      if (!EXACT && t.y != t.x) {   // the columns past the rotation, copied as they are
        const auto gxt = hk::make_gl(gx.ptr + rot, ok ? 1 : 0, a.d - rot, a.d, 1);
        const auto gyt = hk::make_gl(gy.ptr + rot, ok ? 1 : 0, a.d - rot, a.d, 1);
        for (int c0 = hk::opaque(0); c0 < a.d - rot; c0 += COLS) {
          xtile xt;
          hk::load(xt, gxt, 0, c0);
          hk::store(gyt, xt, 0, c0);
        }
      }
    }
  }
};
