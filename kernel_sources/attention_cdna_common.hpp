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
// Arithmetic, not a compare: per-element compares keep their lane masks in SGPR pairs.
HK_INLINE float mask_by_sign(float score, int keep) {
  const hk::u32 bound = 0x7F800000u | ((hk::u32)keep & 0x80000000u);
  return __builtin_fminf(score, __builtin_bit_cast(float, bound));
}

}  // namespace hkjit_attn
