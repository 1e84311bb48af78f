// attention_cdna_common.hpp: pieces the CDNA attention kernels share (forward, backward).
#pragma once
#include "hk/hk.hpp"

namespace hkjit_attn {

// Rows [r0, r0 + RT::MN) of a (rows x D) matrix with row stride sr straight from global memory
// into a row_l MFMA operand (K along D); rows >= `rows` read 0. Each lane's E elements of a
// fragment are contiguous: loads of min(LOAD_BYTES, 2E) bytes (the caller guarantees that
// alignment of the base pointer and the row stride).
template <int LOAD_BYTES, typename T, int R, int C, typename S>
HK_INLINE void load_rows(hk::rt<T, R, C, hk::row_l, S>& dst, const T* p, long long sr, int r0, int rows) {
  using RT = hk::rt<T, R, C, hk::row_l, S>;
  constexpr int PB = hk::min(LOAD_BYTES, 2 * S::E);
  constexpr int W = PB / 4 > 0 ? PB / 4 : 1;
  static_assert(PB >= 4, "loads of at least one dword");
  const int l = hk::lane_id();
#pragma unroll
  for (int i = 0; i < RT::TMN; ++i) {
    const int r = r0 + i * S::MI + l % S::MI;
#pragma unroll
    for (int k = 0; k < RT::TK; ++k) {
      hk::vec<hk::u32, S::E / 2> w = {};
      if (r < rows) {
        const T* q = p + r * sr + k * S::MK + S::E * (l / S::MI);
#pragma unroll
        for (int c = 0; c < 2 * S::E / PB; ++c) {
          const hk::raw<PB> x = hk::detail::ld_global<PB>(q + c * (PB / 2));
#pragma unroll
          for (int u = 0; u < W; ++u) w[c * W + u] = x.w[u];
        }
      }
      dst.t[i][k] = __builtin_bit_cast(hk::vec<T, S::E>, w);
    }
  }
}

// score = min(score, +inf) keeps it, min(score, -inf) masks it: the sign of `keep` (>= 0 keeps).
// Arithmetic, not a compare: per-element compares keep their lane masks in SGPR pairs. Not the
// bit-select (sign & -inf) | (~sign & score) either: in one context clang-22 turned that into
// selects reading the wrong accumulator register (docs/notes/attention.md).
HK_INLINE float mask_by_sign(float score, int keep) {
  const hk::u32 bound = 0x7F800000u | ((hk::u32)keep & 0x80000000u);
  return __builtin_fminf(score, __builtin_bit_cast(float, bound));
}

// A row's LSE (natural log, as the caller's array holds it) in the base-2 units of exp2(S - lse2): -inf
// (a row that sees no key, all of whose scores are masked) as 0. Where P and dS become bf16 operands by
// from_float_unchecked's rounding add (gfx942), any NaN as the default NaN, whose low 16 bits are 0: the
// caller's NaN may have other bits (0x7FFFFFFF, a 0xFF fill), which the add would carry into a zero,
// hiding the NaN it poisons. (Elsewhere the conversion is an instruction that keeps NaN NaN.)
template <typename T> HK_INLINE float lse_log2(float x) {
  if constexpr (__is_same(T, hk::bf16) && !hk::arch::has_bf16_cvt)
    if (x != x) return __builtin_nanf("");
  return x == hk::neg_inf() ? 0.0f : x * 1.4426950408889634f;
}

// a - m for the 4 registers of an accumulator subtile (one row or column's 4 scores of a lane), as
// two packed adds of -m (v_pk_add_f32, exact: x - m is x + (-m)). Written element by element, LLVM
// keeps a subtraction whose result feeds an exponential scalar: one v_sub_f32 a score.
HK_INLINE hk::vec<float, 4> minus(const hk::vec<float, 4>& a, float m) {
  using f2 = hk::vec<float, 2>;
  const f2 nm = {-m, -m};
  const f2 lo = f2{a[0], a[1]} + nm, hi = f2{a[2], a[3]} + nm;
  return {lo[0], lo[1], hi[0], hi[1]};
}

// The fp32 accumulators of 16x16 MFMAs over a (K x N) product, as the B operand (K x N, col_l) of
// a 16x16xMK MFMA, in "accumulator order": register v of accumulator subtile r holds K-row
// 16 r + 4 (l / 16) + v, so operand element e of K-subtile k is accumulator subtile (MK/16) k + e/4,
// register e % 4. For MK = 16 this is the MFMA's own K order; for MK = 32 (gfx950) the K rows of
// a lane are {4g .. 4g+3, 16+4g .. 16+4g+3} (g = l / 16) instead of 8g .. 8g+7, a permutation of
// K that the A operand must share: read it with load_acc_order. Converted without the NaN test
// (hk::from_float_unchecked): every NaN a probability or score gradient here can hold carries a bf16
// input's payload or is the default NaN (the LSE a caller passes is read through lse_log2).
template <typename T, int R, int C, typename S, typename SA>
HK_INLINE void acc_to_operand(hk::rt<T, R, C, hk::col_l, S>& dst, const hk::rt<float, R, C, hk::acc_l, SA>& acc) {
  static_assert(S::MI == 16 && SA::MI == 16 && SA::ACC == 4, "16x16 outputs and operands");
#pragma unroll
  for (int j = 0; j < dst.TMN; ++j)
#pragma unroll
    for (int k = 0; k < dst.TK; ++k)
#pragma unroll
      for (int e = 0; e < S::E; ++e)
        dst.t[j][k][e] = hk::from_float_unchecked<T>(acc.t[(S::MK / 16) * k + e / 4][j][e % 4]);
}

// An fp32 accumulator tile parked in LDS for another wave that holds a tile of the same shape
// and layout (the dK/dV kernel's P hand-over): lane l's ACC registers of subtile (i, j) at slot
// (i TC + j) 64 + l, so each lane writes and reads 16 contiguous bytes (ds_write_b128 /
// ds_read_b128) and a subtile is one conflict-free KiB.
template <typename RT>
struct acc_slab {
  alignas(16) hk::vec<float, RT::shape::ACC> v[RT::TR * RT::TC * 64];
};
template <typename T, int R, int C, typename S>
HK_INLINE void put(acc_slab<hk::rt<T, R, C, hk::acc_l, S>>& dst, const hk::rt<T, R, C, hk::acc_l, S>& src) {
  using RT = hk::rt<T, R, C, hk::acc_l, S>;
  HK_LDS hk::vec<float, S::ACC>* d = (HK_LDS hk::vec<float, S::ACC>*)(HK_LDS void*)dst.v;
  const int l = hk::lane_id();
#pragma unroll
  for (int i = 0; i < RT::TR; ++i)
#pragma unroll
    for (int j = 0; j < RT::TC; ++j) d[(i * RT::TC + j) * 64 + l] = src.t[i][j];
}
template <typename T, int R, int C, typename S>
HK_INLINE void take(hk::rt<T, R, C, hk::acc_l, S>& dst, const acc_slab<hk::rt<T, R, C, hk::acc_l, S>>& src) {
  using RT = hk::rt<T, R, C, hk::acc_l, S>;
  const HK_LDS hk::vec<float, S::ACC>* p = (const HK_LDS hk::vec<float, S::ACC>*)(const HK_LDS void*)src.v;
  const int l = hk::lane_id();
#pragma unroll
  for (int i = 0; i < RT::TR; ++i)
#pragma unroll
    for (int j = 0; j < RT::TC; ++j) dst.t[i][j] = p[(i * RT::TC + j) * 64 + l];
}

// gfx942 has no transposing LDS read. An A^T operand wants, per lane, E K-consecutive elements of
// one MN column: read element by element that is one ds_read_u16 per element. But the MN index of
// an operand is the accumulator's row, and which row of a product stands for which MN column is the
// kernel's choice, as long as the epilogue knows it. "Quad order" (gfx942, MN a multiple of 64): in
// each group of 4 MN subtiles 4p .. 4p+3, operand row m of subtile 4p + t stands for column
// 64 p + 4 m + t. One ds_read_b64 of (K row, columns 64 p + 4 m .. +3) then serves the 4 subtiles
// of the group at once (4 times fewer LDS reads), each lane's K rows packed by v_perm_b32.
template <int MN>
inline constexpr bool quad_order = !hk::arch::has_tr_read && MN % 64 == 0;

// The MN column that operand (and accumulator) row `row` of an A^T fragment read by
// load_acc_order stands for.
template <int MN>
HK_INLINE constexpr int acc_order_col(int row) {
  if constexpr (quad_order<MN>) return (row / 64) * 64 + 4 * (row % 16) + (row / 16) % 4;
  else return row;
}

// A^T operand fragments (K x MN shared tile, K along rows: rows [0, R), columns [c0, c0 + C)) in
// the accumulator K order of acc_to_operand: lane l's element e of K-subtile k is row
// MK k + 4 (l / 16) + 16 (e / 4) + e % 4. gfx950: one ds_read_b64_tr_b16 per 4 rows; gfx942: quad
// order (above) where C is a multiple of 64, else element reads.
template <typename T, int R, int C, typename S, int SR, int SC, typename Swz>
HK_INLINE void load_acc_order(hk::rt<T, R, C, hk::col_l, S>& dst, const hk::st<T, SR, SC, Swz>& src, int c0 = 0) {
  using ST = hk::st<T, SR, SC, Swz>;
  static_assert(S::MI == 16, "16-row lane groups");
  const int l = hk::lane_id(), g = l / 16;
  const HK_LDS char* base = (const HK_LDS char*)(const HK_LDS void*)src.data;
  if constexpr (quad_order<C>) {
    // gfx942: E = 4 (MK 16), the accumulator K order is the MFMA's: element e is K row MK k + 4 g + e.
    static_assert(S::E == 4 && sizeof(T) == 2, "16x16x16 operands of 16-bit elements");
    static_assert(Swz::unit >= 8, "8-byte LDS reads must stay inside a swizzle unit");
    const int col = c0 + 4 * (l % 16);
#pragma unroll
    for (int k = 0; k < dst.TK; ++k)
#pragma unroll
      for (int p = 0; p < C / 64; ++p) {
        hk::vec<hk::u32, 2> w[4];   // w[e]: columns 64 p + 4 m .. +3 of K row MK k + 4 g + e
#pragma unroll
        for (int e = 0; e < 4; ++e)
          w[e] = hk::detail::lds_vec<hk::u32, 2>(base, ST::offset(k * S::MK + 4 * g + e, col + 64 * p));
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          // the 16-bit half t % 2 of word t / 2 of each w[e]: bytes {0,1} or {2,3} of two words
          const hk::u32 sel = t % 2 ? 0x07060302u : 0x05040100u;
          const hk::vec<hk::u32, 2> x = {__builtin_amdgcn_perm(w[1][t / 2], w[0][t / 2], sel),
                                        __builtin_amdgcn_perm(w[3][t / 2], w[2][t / 2], sel)};
          dst.t[4 * p + t][k] = __builtin_bit_cast(hk::vec<T, 4>, x);
        }
      }
  } else {
#pragma unroll
    for (int i = 0; i < dst.TMN; ++i)
#pragma unroll
      for (int k = 0; k < dst.TK; ++k) {
        hk::vec<T, S::E> v;
#if HK_CDNA4
        const int s = l & 15;
        const int col = c0 + i * 16 + 4 * (s & 3);
#pragma unroll
        for (int h = 0; h < S::E / 4; ++h) {
          const hk::vec<T, 4> q = hk::detail::lds_tr4<T>(base, ST::offset(k * S::MK + 4 * g + 16 * h + (s >> 2), col));
#pragma unroll
          for (int j = 0; j < 4; ++j) v[4 * h + j] = q[j];
        }
#else
        const int col = c0 + i * 16 + l % 16;
#pragma unroll
        for (int e = 0; e < S::E; ++e)
          v[e] = hk::detail::lds_elem<T>(base, ST::offset(k * S::MK + 4 * g + 16 * (e / 4) + e % 4, col));
#endif
        dst.t[i][k] = v;
      }
  }
}

// The fp32 accumulator of a product whose A^T operand was read by load_acc_order (R = its MN, rows
// in that order) to global with the MN index unit-stride: MN column d, column n at
// dst[d + n * sc]; columns >= cols_left skipped. 4 consecutive columns of d per access: on
// gfx942 in quad order the registers v of subtiles 4p .. 4p+3 hold columns 64 p + 16 g + 4 v + 0..3;
// otherwise a lane's 4 accumulator registers hold them (hk::store_unit_rows).
template <typename TO, int R, int C, typename S>
HK_INLINE void store_acc_order(TO* dst, long long sc, const hk::rt<float, R, C, hk::acc_l, S>& src, int cols_left) {
  if constexpr (quad_order<R>) {
    static_assert(S::MI == 16 && S::ACC == 4, "16x16 accumulators");
    static_assert(acc_order_col<R>(16 * 1 + 4 * 2 + 3) == 16 * 2 + 4 * 3 + 1,
                  "row 4 g + v of subtile 4 p + t: column 64 p + 16 g + 4 v + t");
    const int l = hk::lane_id(), g = l / 16;
#pragma unroll
    for (int j = 0; j < src.TC; ++j) {
      const int c = j * 16 + S::acc_col(l);
      if (c >= cols_left) continue;
#pragma unroll
      for (int p = 0; p < R / 64; ++p)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          hk::detail::st_global_run4(dst + 64 * p + 16 * g + 4 * v + c * sc, src.t[4 * p][j][v], src.t[4 * p + 1][j][v],
                                     src.t[4 * p + 2][j][v], src.t[4 * p + 3][j][v]);
        }
    }
  } else {
    hk::store_unit_rows(dst, sc, src, R, cols_left);
  }
}

}  // namespace hkjit_attn
