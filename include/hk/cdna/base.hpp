#pragma once
// hk/cdna/base.hpp: scalar and vector types, lane/wave ids and conversions shared by gfx942/gfx950.
// Only clang builtins: the same source builds with `clang -nogpuinc`, hipcc and hiprtc.

namespace hk {

using bf16 = __bf16;
using half = _Float16;

// ext_vector_type vectors: vec<bf16, 8> is the 16-byte MFMA operand of a 16x16x32 instruction.
template <typename T, int N>
using vec = T __attribute__((ext_vector_type(N)));

#define HK_LDS __attribute__((address_space(3)))

inline constexpr int WAVE = 64;

HK_INLINE int thread_id() { return (int)__builtin_amdgcn_workitem_id_x(); }
HK_INLINE int lane_id() { return (int)(__builtin_amdgcn_workitem_id_x() & 63u); }
// The wave index is uniform: readfirstlane lets the compiler keep it (and what derives from it,
// such as M0 bases of direct-to-LDS loads) in SGPRs.
HK_INLINE int wave_id() { return __builtin_amdgcn_readfirstlane((int)(__builtin_amdgcn_workitem_id_x() >> 6)); }
// A register tile is owned by a "tile group": a wave here, a warpgroup on Hopper.
constexpr int TILE_GROUP_THREADS = 64;
HK_INLINE int tile_group() { return wave_id(); }
HK_INLINE int block_id_x() { return (int)__builtin_amdgcn_workgroup_id_x(); }
HK_INLINE int block_id_y() { return (int)__builtin_amdgcn_workgroup_id_y(); }
HK_INLINE int block_id_z() { return (int)__builtin_amdgcn_workgroup_id_z(); }

template <typename T> HK_INLINE constexpr T min(T a, T b) { return a < b ? a : b; }
template <typename T> HK_INLINE constexpr T max(T a, T b) { return a > b ? a : b; }
HK_INLINE constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ---- conversions --------------------------------------------------------------------------
// float -> bf16 rounds to nearest even (clang's __bf16 conversion: v_cvt_pk_bf16_f32 on gfx950,
// an integer RNE sequence with NaN quieting on gfx942). float -> half is v_cvt_f16_f32 (RNE).
template <typename T> HK_INLINE T from_float(float x) { return (T)x; }
template <> HK_INLINE float from_float<float>(float x) { return x; }
// float -> T as from_float, but bf16 without the NaN test where the target has no conversion instruction
// (gfx942): round to nearest even by one integer add, 2 VALU a value (bfe, add3) where clang's NaN-safe
// sequence takes 5 (bfe, add3, compare, select, quieting or). Exact for every finite value and +-inf; a
// NaN stays NaN when its low 16 bits are 0 (else the add can carry it into a zero or an infinity), which
// holds for every NaN computed from bf16 inputs and the default NaN (not for fp16 payloads, nor for NaNs a
// caller's fp32 array may hold). For scores, probabilities and their gradients in MFMA operands. gfx950,
// half, float: from_float.
template <typename T> HK_INLINE T from_float_unchecked(float x) {
  if constexpr (__is_same(T, bf16) && !arch::has_bf16_cvt) {
    const unsigned u = __builtin_bit_cast(unsigned, x);
    return __builtin_bit_cast(T, (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
  } else {
    return from_float<T>(x);
  }
}
HK_INLINE float to_float(float x) { return x; }
HK_INLINE float to_float(bf16 x) { return (float)x; }
HK_INLINE float to_float(half x) { return (float)x; }

template <typename T> struct is_float_t { static constexpr bool value = false; };
template <> struct is_float_t<float> { static constexpr bool value = true; };
template <bool B> struct bool_c { static constexpr bool value = B; };
template <bool C, typename A, typename B> struct cond { using type = A; };
template <typename A, typename B> struct cond<false, A, B> { using type = B; };

// ---- cross-lane ---------------------------------------------------------------------------
// ds_bpermute: lane l receives `v` of lane `src`. Used by reductions across the lanes of a row.
HK_INLINE float shfl(float v, int src) {
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src << 2, __builtin_bit_cast(int, v)));
}
HK_INLINE float shfl_xor(float v, int mask) { return shfl(v, lane_id() ^ mask); }

}  // namespace hk
