#pragma once
// hk/cdna/mfma.hpp: one MFMA, picked by (input type, M=N, K). Fails to compile (static_assert)
// where the target lacks the shape: gfx942 has 16x16x16 and 32x32x8, gfx950 adds 16x16x32 and
// 32x32x16.
//
// Register layouts (lane l of 64, G = 64/MI lane groups, E = MK/G elements per lane):
//   A operand: lane l holds A[l % MI][E*(l / MI) + j], j < E
//   B operand: lane l holds B[E*(l / MI) + j][l % MI], j < E
//   C/D:       register v of lane l holds D[4*G*(v / 4) + 4*(l / MI) + v % 4][l % MI], v < MI*MI/64
namespace hk {

template <int MI_, int MK_>
struct mfma_shape {
  static constexpr int MI = MI_;              // M = N of one instruction
  static constexpr int MK = MK_;              // K of one instruction
  static constexpr int G = 64 / MI;           // lane groups along K
  static constexpr int E = MK / G;            // operand elements per lane (4 or 8)
  static constexpr int ACC = MI * MI / 64;    // accumulator registers per lane (4 or 16)
  static_assert(MI == 16 || MI == 32, "MFMA M/N is 16 or 32");
  static_assert(MK % G == 0 && (E == 4 || E == 8), "unsupported MFMA K");
  // Row of the output element held in accumulator register v of lane l.
  HK_INLINE static int acc_row(int v, int l) { return 4 * G * (v / 4) + 4 * (l / MI) + (v % 4); }
  HK_INLINE static int acc_col(int l) { return l % MI; }
};
using default_shape = mfma_shape<arch::default_mfma_m, arch::default_mfma_k>;

template <typename T, typename S>
HK_INLINE vec<float, S::ACC> mfma(vec<T, S::E> a, vec<T, S::E> b, vec<float, S::ACC> c) {
  static_assert(arch::has_mfma<S::MI, S::MK>, "this MFMA shape is not available on the compile target");
  static_assert(same_t<T, bf16>::value || same_t<T, half>::value, "MFMA inputs are bf16 or half");
  constexpr bool BF = same_t<T, bf16>::value;
  if constexpr (S::MI == 16 && S::MK == 16) {
    if constexpr (BF) return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
    else return __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0);
  } else if constexpr (S::MI == 32 && S::MK == 8) {
    if constexpr (BF) return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
    else return __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0);
  }
#if HK_CDNA4
  else if constexpr (S::MI == 16 && S::MK == 32) {
    if constexpr (BF) return __builtin_amdgcn_mfma_f32_16x16x32_bf16(a, b, c, 0, 0, 0);
    else return __builtin_amdgcn_mfma_f32_16x16x32_f16(a, b, c, 0, 0, 0);
  } else if constexpr (S::MI == 32 && S::MK == 16) {
    if constexpr (BF) return __builtin_amdgcn_mfma_f32_32x32x16_bf16(a, b, c, 0, 0, 0);
    else return __builtin_amdgcn_mfma_f32_32x32x16_f16(a, b, c, 0, 0, 0);
  }
#endif
  else return c;
}

}  // namespace hk
