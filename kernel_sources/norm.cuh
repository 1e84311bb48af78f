// norm.cuh: the fused norms — add + RMSNorm, LayerNorm, dropout + add + LayerNorm — one source for
// gfx942, gfx950 and sm_90a (plain RMSNorm is rms_norm.cuh).
//
//   s = x                                   (RESIDUAL false)
//   s = round_T(x + residual)               (RESIDUAL, DROPOUT false; s written to residual_out)
//   s = round_T(keep ? x / (1 - p) : 0) + residual, rounded   (DROPOUT; keep from (seed, index))
//   RMS:   y = s * rsqrt(mean(s^2) + eps) [* weight]
//   LAYER: y = (s - mean(s)) * rsqrt(var(s) + eps) [* weight] [+ bias]     (biased variance)
//
// The statistics are fp32: in registers the mean first, then the sum of squared deviations (no
// cancellation for rows with a large mean); a row longer than a tile's COLS is taken in column
// blocks whose (count, mean, squared deviations) are combined exactly (Chan et al.), then read a
// second time (s from residual_out when RESIDUAL: what this thread itself wrote).
//
// Dropout mask: element (r, c) of the logical rows x cols array is kept iff
// hash(seed, r * cols + c) / 2^32 >= p (24 bits compared), hash = MurmurHash3's 32-bit finaliser
// of the low index word times the golden ratio, offset by a key mixed from the seed and the high
// index word (row_key / keep below): the mask depends on the seed and the index only, not on the
// schedule, the target or the strides.
//
// Template parameters: T (hk::bf16, hk::half, float: x, residual, weight, bias, outputs), LAYER
// (false: RMS), RESIDUAL, DROPOUT (needs RESIDUAL), WEIGHT, BIAS (LAYER only), then the row-tile
// schedule of rms_norm.cuh: VEC, THREADS, ROW_THREADS, ROWS, CHUNKS, MIN_BLOCKS, EXACT (same meaning
// and limits; EXACT: cols == COLS, rows tested only, weight and bias read once per thread and kept
// as fp32 in registers, one column block without Chan's combination or the padding mask; the same
// bits as EXACT = false), then PACKED_WB (EXACT only): weight and bias kept as T (two 16-bit
// elements a register: half the registers) and converted to fp32 where a row uses them, read again
// for each further row block of a persistent grid (so that the compiler cannot hoist the
// conversion out of the row loop and hold fp32 copies); the same bits (the conversion is exact).
//
// args, in this order (C layout offsets in the ctypes mirror, hkjit/ops/norms.py):
//   const T* x; const T* residual; const T* weight; const T* bias; T* y; T* residual_out;
//   long long x_stride, r_stride, y_stride, ro_stride;   row strides in elements
//   unsigned long long seed; int rows, cols; float eps, p, keep_scale
//
// threads = THREADS, dynamic_smem = 0; grid as rms_norm.cuh (block b takes row blocks b, b + grid.x..).
#pragma once
#include "hk/hk.hpp"

namespace norm_detail {
template <bool C, class A, class B> struct pick { using type = A; };
template <class A, class B> struct pick<false, A, B> { using type = B; };
}  // namespace norm_detail

template <class T, bool LAYER, bool RESIDUAL, bool DROPOUT, bool WEIGHT, bool BIAS, int VEC, int THREADS,
          int ROW_THREADS, int ROWS, int CHUNKS, int MIN_BLOCKS = 1, bool EXACT = false, bool PACKED_WB = false>
struct fused_norm {
  static constexpr int threads = THREADS;
  static constexpr int min_blocks = MIN_BLOCKS;
  static constexpr int dynamic_smem = 0;
  struct args {
    const T* x;
    const T* residual;
    const T* weight;
    const T* bias;
    T* y;
    T* residual_out;
    long long x_stride, r_stride, y_stride, ro_stride;
    unsigned long long seed;
    int rows, cols;
    float eps, p, keep_scale;
  };
  static_assert(!DROPOUT || RESIDUAL, "dropout is fused with the residual add");
  static_assert(!BIAS || LAYER, "a bias belongs to LayerNorm");
  static_assert(THREADS % 64 == 0 && THREADS <= 1024 && THREADS % ROW_THREADS == 0, "THREADS");

  using tile = hk::rt_row<T, ROWS, ROW_THREADS * VEC * CHUNKS, VEC, ROW_THREADS>;
  using ftile = typename tile::template retype<float>;
  using rvec = hk::row_vec<ftile>;
  static constexpr int COLS = tile::cols;
  static constexpr int SLICE = ROW_THREADS * VEC;
  using slice = hk::rt_row<T, ROWS, SLICE, VEC, ROW_THREADS>;
  using fslice = typename slice::template retype<float>;
  using wslice = hk::rt_row<T, 1, SLICE, VEC, ROW_THREADS>;
  static constexpr int ROWS_PER_BLOCK = THREADS / ROW_THREADS * ROWS;
  static_assert(!PACKED_WB || EXACT, "PACKED_WB: the exact path's registers");
  // The exact path's weight and bias in registers: fp32, or (PACKED_WB) as stored.
  using wb = typename norm_detail::pick<PACKED_WB, hk::rt_row<T, 1, COLS, VEC, ROW_THREADS>, hk::col_vec<tile>>::type;

  HK_INLINE static hk::u32 fmix(hk::u32 h) {
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    return h;
  }
  // The mask hash of element `col` of a row whose key is row_key(a, row): one multiply and one
  // finaliser round per element; the seed and the row (its 64-bit index base) enter per row.
  HK_INLINE static hk::u32 row_key(const args& a, int row) {
    const hk::u64 base = (hk::u64)row * (hk::u64)a.cols;
    return fmix(fmix((hk::u32)a.seed ^ fmix((hk::u32)(a.seed >> 32))) ^ (hk::u32)(base >> 32)) + (hk::u32)base;
  }
  // keep <=> (h >> 8) / 2^24 >= p <=> h >= ceil(p 2^24) << 8: the same mask as the float compare
  // (h >> 8 and p 2^24 are exact in fp32), as one integer compare per element. `threshold`: once
  // per thread (p < 1, so ceil(p 2^24) <= 2^24 - 1 and the shift stays inside 32 bits).
  HK_INLINE static hk::u32 threshold(const args& a) {
    const float t = a.p * 16777216.0f;
    hk::u32 c = (hk::u32)t;
    if ((float)c < t) ++c;
    return c << 8;
  }
  HK_INLINE static bool keep(hk::u32 thr, hk::u32 key, int col) {
    return fmix((key + (hk::u32)col) * 0x9E3779B9u) >= thr;
  }

  // The inputs of one column block, as stored: x and (RESIDUAL) the residual. FULL: columns
  // c0 .. c0 + COLS - 1 lie inside the row (EXACT).
  struct inputs {
    tile x, res;
  };
  template <bool FULL = false>
  HK_INLINE static void load_block(inputs& in, const args& a, int r0, int c0) {
    hk::load<FULL>(in.x, hk::make_gl(const_cast<T*>(a.x), a.rows, a.cols, a.x_stride, 1), r0, c0);
    if constexpr (RESIDUAL)
      hk::load<FULL>(in.res, hk::make_gl(const_cast<T*>(a.residual), a.rows, a.cols, a.r_stride, 1), r0, c0);
  }

  // s for one column block: x (+ dropout) (+ residual), rounded to T, as fp32; stored to
  // residual_out when RESIDUAL.
  template <bool FULL = false>
  HK_INLINE static void sum_block(ftile& s, inputs& in, const args& a, int r0, int c0) {
    tile& x = in.x;
    hk::convert(s, x);
    if constexpr (RESIDUAL) {
      const auto gro = hk::make_gl(a.residual_out, a.rows, a.cols, a.ro_stride, 1);
      ftile rf;
      hk::convert(rf, in.res);
      const hk::u32 thr = DROPOUT ? threshold(a) : 0u;
      if (DROPOUT && (thr != 0u || a.keep_scale != 1.0f)) {   // p = 0 keeps x as it is: no hashes
        hk::u32 key[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) key[r] = row_key(a, r0 + r);
#pragma unroll
        for (int i = 0; i < ftile::n_elems; ++i) {
          const int col = c0 + tile::col(i / (ROWS * VEC), i % VEC);
          s.set(i, keep(thr, key[ftile::row_slot(i)], col) ? s.get(i) * a.keep_scale : 0.0f);
        }
        hk::convert(x, s);                      // the kept values rounded to T, two to a packed convert
        hk::convert(s, x);
      }
      hk::add(s, s, rf);
      tile st;
      hk::convert(st, s);                       // the sum as stored: what is normalised
      hk::convert(s, st);
      hk::store<FULL>(gro, st, r0, c0);
    }
  }

  // cols == COLS (EXACT): run_general's operations for one column block, in the same order (the
  // first block of Chan's combination reduces to mean = bmean * w1, m2 = part), without the
  // padding mask (there is none), the weight and bias from registers.
  HK_INLINE static void exact_rows(const args& a, inputs& in, const wb& w, const wb& bias, int r0) {
    const auto gy = hk::make_gl(a.y, a.rows, COLS, a.y_stride, 1);
    const float nb = (float)COLS;
    const float rcp_n = hk::fast_rcp(nb);          // as run_general: exact for powers of two
    ftile s;
    sum_block<true>(s, in, a, r0, 0);
    rvec mean, m2;
    if constexpr (LAYER) {
      const float w1 = nb * hk::fast_rcp(0.0f + nb);   // Chan's weight of the first block (1 to an ULP)
      rvec bmean;
      hk::row_sum(bmean, s);
      hk::mul(bmean, bmean, rcp_n);
      ftile dev;
      hk::sub_row(dev, s, bmean);
      hk::square(dev, dev);
      hk::row_sum(m2, dev);                         // 0 + part + delta^2 * 0 * w1 = part
      hk::mul(mean, bmean, w1);                     // 0 + delta * w1 (the 0 + keeps a -0 the same)
      hk::add(mean, mean, 0.0f);
    } else {
      ftile sq;
      hk::square(sq, s);
      hk::row_sum(m2, sq);
    }
    rvec rstd;
    hk::mul(rstd, m2, rcp_n);
    hk::add(rstd, rstd, a.eps);
    hk::rsqrt(rstd, rstd);
    if constexpr (LAYER) hk::sub_row(s, s, mean);
    hk::mul_row(s, s, rstd);
    if constexpr (PACKED_WB) {
      hk::col_vec<tile> f;
      if constexpr (WEIGHT) { hk::convert(f, w); hk::mul_col(s, s, f); }
      if constexpr (BIAS) { hk::convert(f, bias); hk::add_col(s, s, f); }
    } else {
      if constexpr (WEIGHT) hk::mul_col(s, s, w);
      if constexpr (BIAS) hk::add_col(s, s, bias);
    }
    hk::store<true>(gy, s, r0, 0);
  }

  HK_INLINE static void load_wb(wb& w, wb& bias, const args& a) {
    if constexpr (WEIGHT) hk::load<true>(w, hk::make_gl(const_cast<T*>(a.weight), 1, COLS, COLS, 1), 0, 0);
    if constexpr (BIAS) hk::load<true>(bias, hk::make_gl(const_cast<T*>(a.bias), 1, COLS, COLS, 1), 0, 0);
  }

  // The first row block's inputs are loaded before the weight and bias, so that all are in
  // flight together (their fp32 conversion, hoisted out of the row loop, would otherwise wait
  // for them before x is asked for).
  __device__ static void run_exact(const args& a) {
    const int row_blocks = (a.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    int b = hk::block_x();
    if (b >= row_blocks) return;
    int r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
    inputs in;
    load_block<true>(in, a, r0, 0);
    wb w, bias;
    load_wb(w, bias, a);
    exact_rows(a, in, w, bias, r0);
    for (b += hk::grid_x(); b < row_blocks; b += hk::grid_x()) {   // a persistent grid's next row blocks
      r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
      load_block<true>(in, a, r0, 0);
      if constexpr (PACKED_WB) load_wb(w, bias, a);
      exact_rows(a, in, w, bias, r0);
    }
  }

  __device__ static void run(const args& a) {
    if constexpr (EXACT) run_exact(a);
    else run_general(a);
  }

  __device__ static void run_general(const args& a) {
    const auto gy = hk::make_gl(a.y, a.rows, a.cols, a.y_stride, 1);
    const auto gw = hk::make_gl(const_cast<T*>(a.weight), 1, a.cols, a.cols, 1);
    const auto gb = hk::make_gl(const_cast<T*>(a.bias), 1, a.cols, a.cols, 1);
    const auto gro = hk::make_gl(a.residual_out, a.rows, a.cols, a.ro_stride, 1);
    const auto gx = hk::make_gl(const_cast<T*>(a.x), a.rows, a.cols, a.x_stride, 1);
    const int row_blocks = (a.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    const bool one_block = a.cols <= COLS;
    for (int b = hk::block_x(); b < row_blocks; b += hk::grid_x()) {
      const int r0 = b * ROWS_PER_BLOCK + tile::group() * ROWS;
      ftile s;
      rvec mean, m2, part;                      // running count n, mean, squared deviations
      hk::zero(mean);
      hk::zero(m2);
      float n = 0.0f;
      for (int c0 = hk::opaque(0); c0 < a.cols; c0 += COLS) {
        inputs in;
        load_block(in, a, r0, c0);
        sum_block(s, in, a, r0, c0);
        const float nb = (float)(a.cols - c0 < COLS ? a.cols - c0 : COLS);
        if constexpr (LAYER) {
          rvec bmean;
          hk::row_sum(bmean, s);
          hk::mul(bmean, bmean, hk::fast_rcp(nb));   // exact for powers of two; 1 ULP otherwise
          ftile dev;                             // squared deviations; none from the padding columns
          hk::sub_row(dev, s, bmean);
#pragma unroll
          for (int i = 0; i < ftile::n_elems; ++i) {
            const int col = c0 + tile::col(i / (ROWS * VEC), i % VEC);
            dev.set(i, col < a.cols ? hk::mul_rn(dev.get(i), dev.get(i)) : 0.0f);
          }
          hk::row_sum(part, dev);
          // Chan et al.'s combination, the division by a reciprocal (n = 0 on the first block: w
          // is 1 to an ULP and m2 takes the block's own deviations).
          const float w = nb * hk::fast_rcp(n + nb);
#pragma unroll
          for (int i = 0; i < rvec::n_elems; ++i) {
            const float delta = bmean.get(i) - mean.get(i);
            m2.set(i, m2.get(i) + part.get(i) + delta * delta * n * w);
            mean.set(i, mean.get(i) + delta * w);
          }
        } else {
          ftile sq;
          hk::square(sq, s);
          hk::row_sum(part, sq);
          hk::add(m2, m2, part);                  // RMS: the sum of squares
        }
        n += nb;
      }
      rvec rstd;
      hk::mul(rstd, m2, hk::fast_rcp(n));
      hk::add(rstd, rstd, a.eps);
      hk::rsqrt(rstd, rstd);
      for (int c0 = hk::opaque(0); c0 < a.cols; c0 += COLS) {
        if (!one_block) {                        // s again: the stored sum, or x
          tile x;
          hk::load(x, RESIDUAL ? gro : gx, r0, c0);
          hk::convert(s, x);
        }
        if constexpr (LAYER) hk::sub_row(s, s, mean);
        hk::mul_row(s, s, rstd);
#pragma unroll
        for (int k = 0; k < CHUNKS; ++k) {       // out in one-chunk slices: weight and bias a slice at a time
          fslice f;
          hk::convert(f, hk::subtile_cols<SLICE>(s, k));
          if constexpr (WEIGHT) {
            wslice w;
            hk::load(w, gw, 0, c0 + k * SLICE);
            hk::col_vec<slice> wf;
            hk::convert(wf, w);
            hk::mul_col(f, f, wf);
          }
          if constexpr (BIAS) {
            wslice bb;
            hk::load(bb, gb, 0, c0 + k * SLICE);
            hk::col_vec<slice> bf;
            hk::convert(bf, bb);
            hk::add_col(f, f, bf);
          }
          hk::store(gy, f, r0, c0 + k * SLICE);
        }
      }
    }
  }
};
