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

// The fp32 accumulators of 16x16 MFMAs over a (K x N) product, as the B operand (K x N, col_l) of
// a 16x16xMK MFMA, in "accumulator order": register v of accumulator subtile r holds K-row
// 16 r + 4 (l / 16) + v, so operand element e of K-subtile k is accumulator subtile (MK/16) k + e/4,
// register e % 4. For MK = 16 this is the MFMA's own K order; for MK = 32 (gfx950) the K rows of
// a lane are {4g .. 4g+3, 16+4g .. 16+4g+3} (g = l / 16) instead of 8g .. 8g+7, a permutation of
// K that the A operand must share: read it with load_acc_order.
template <typename T, int R, int C, typename S, typename SA>
HK_INLINE void acc_to_operand(hk::rt<T, R, C, hk::col_l, S>& dst, const hk::rt<float, R, C, hk::acc_l, SA>& acc) {
  static_assert(S::MI == 16 && SA::MI == 16 && SA::ACC == 4, "16x16 outputs and operands");
#pragma unroll
  for (int j = 0; j < dst.TMN; ++j)
#pragma unroll
    for (int k = 0; k < dst.TK; ++k)
#pragma unroll
      for (int e = 0; e < S::E; ++e) dst.t[j][k][e] = hk::from_float<T>(acc.t[(S::MK / 16) * k + e / 4][j][e % 4]);
}

// A^T operand fragments (K x MN shared tile, K along rows: rows [0, R), columns [c0, c0 + C)) in
// the accumulator K order of acc_to_operand: lane l's element e of K-subtile k is row
// MK k + 4 (l / 16) + 16 (e / 4) + e % 4. gfx950: one ds_read_b64_tr_b16 per 4 rows; gfx942: element reads.
template <typename T, int R, int C, typename S, int SR, int SC, typename Swz>
HK_INLINE void load_acc_order(hk::rt<T, R, C, hk::col_l, S>& dst, const hk::st<T, SR, SC, Swz>& src, int c0 = 0) {
  using ST = hk::st<T, SR, SC, Swz>;
  static_assert(S::MI == 16, "16-row lane groups");
  const int l = hk::lane_id(), g = l / 16;
  const HK_LDS char* base = (const HK_LDS char*)(const HK_LDS void*)src.data;
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

}  // namespace hkjit_attn
