#pragma once
// hk/cdna/prims.hpp: the per-target primitives the portable register code (common/regs.hpp,
// common/rt_row.hpp) is built on. hopper/prims.hpp defines the same names for sm_90a.
//   WARP_THREADS, thread_id/lane_id/warp_id, sync_threads   threads and the block barrier
//   fast_exp2 / fast_log2 / fast_rsqrt / neg_inf / fmax_f  one hardware instruction each
//   fast_rcp                                                (v_rcp_f32 / rcp.approx)
//   mul_rn                                                  a product never fused into a later add
//   fma_rn                                                  a * b + c rounded once
//   opaque                                                  an int the compiler cannot see through
//   detail::ld_global<B> / st_global<B>                     B-byte global accesses (2..16)
//   detail::lane_allreduce<N, Op>                           a reduction over N adjacent lanes
namespace hk {

inline constexpr int WARP_THREADS = WAVE;
HK_INLINE int warp_id() { return wave_id(); }

// Block barrier after this wave's LDS accesses completed: what one wave wrote to LDS before it,
// every wave reads after it.
HK_INLINE void sync_threads() { sync_lds(); }

// v_exp_f32 / v_log_f32 / v_rsq_f32: 1 ULP; denormal results may flush to 0.
HK_INLINE float fast_exp2(float x) { return __builtin_amdgcn_exp2f(x); }
HK_INLINE float fast_log2(float x) { return __builtin_amdgcn_logf(x); }
HK_INLINE float fast_rsqrt(float x) { return __builtin_amdgcn_rsqf(x); }
// x, unknown to the compiler from here on (an empty asm in a scalar register): keeps values
// derived from x inside the loop iteration that computes them, e.g. per-element bounds tests that
// would otherwise be hoisted out of a loop and kept live in scalar registers. x must be uniform.
HK_INLINE int opaque(int x) { asm volatile("" : "+s"(x)); return x; }
// v_rcp_f32: 1 ULP; rcp(inf) = 0, rcp(0) = inf.
HK_INLINE float fast_rcp(float x) { return __builtin_amdgcn_rcpf(x); }
// A rounded product that is never contracted with a later add into an fma (HIP compiles with
// -ffp-contract=fast-honor-pragmas, and this pragma turns it off for the product). Whether
// clang fuses x * x into the next add of a sum otherwise depends on what stands between them
// (a select does not fuse, a plain add does), so two schedules of one formula could round
// differently.
HK_INLINE float mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
// a * b + c rounded once, whatever the code around it: with mul_rn, a formula such as
// a c - b s can be pinned to one rounding order (fma_rn(a, c, -mul_rn(b, s))) in every schedule.
HK_INLINE float fma_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
HK_INLINE float neg_inf() { return -__builtin_inff(); }
HK_INLINE float fmax_f(float a, float b) { return __builtin_fmaxf(a, b); }

namespace detail {
#define HK_GLOBAL __attribute__((address_space(1)))
// Global loads/stores of B bytes at a B-aligned address: global_load/store_dword{,x2,x4},
// global_load/store_short for 2 bytes. The address space is spelled out so the compiler never
// falls back to flat accesses.
template <int B> HK_INLINE raw<B> ld_global(const void* p) {
  static_assert(B == 2 || B == 4 || B == 8 || B == 16, "accesses of 2, 4, 8 or 16 bytes");
  raw<B> r;
  if constexpr (B == 16) {
    const vec<u32, 4> v = *(const HK_GLOBAL vec<u32, 4>*)p;
    r.w[0] = v[0]; r.w[1] = v[1]; r.w[2] = v[2]; r.w[3] = v[3];
  } else if constexpr (B == 8) {
    const vec<u32, 2> v = *(const HK_GLOBAL vec<u32, 2>*)p;
    r.w[0] = v[0]; r.w[1] = v[1];
  } else if constexpr (B == 4) {
    r.w[0] = *(const HK_GLOBAL u32*)p;
  } else {
    r.w[0] = *(const HK_GLOBAL u16*)p;
  }
  return r;
}
template <int B> HK_INLINE void st_global(void* p, const raw<B>& r) {
  static_assert(B == 2 || B == 4 || B == 8 || B == 16, "accesses of 2, 4, 8 or 16 bytes");
  if constexpr (B == 16) *(HK_GLOBAL vec<u32, 4>*)p = vec<u32, 4>{r.w[0], r.w[1], r.w[2], r.w[3]};
  else if constexpr (B == 8) *(HK_GLOBAL vec<u32, 2>*)p = vec<u32, 2>{r.w[0], r.w[1]};
  else if constexpr (B == 4) *(HK_GLOBAL u32*)p = r.w[0];
  else *(HK_GLOBAL u16*)p = (u16)r.w[0];
}
#undef HK_GLOBAL

// v combined with the value of another lane through a DPP source modifier (VALU latency, no LDS).
template <int CTRL> HK_INLINE float dpp(float v) {
  return __builtin_bit_cast(float, __builtin_amdgcn_mov_dpp(__builtin_bit_cast(int, v), CTRL, 0xF, 0xF, false));
}
// Reduce v over each aligned group of N lanes (N a power of two <= 64); every lane of a group
// gets the same bits (each step combines a lane with its partner, which is commutative).
//   N >= 2: DPP quad_perm [1,0,3,2]     (lane ^ 1)
//   N >= 4: DPP quad_perm [2,3,0,1]     (lane ^ 2)
//   N >= 8: DPP row_half_mirror         (lane i <-> 7 - i: pairs across the two quads)
//   N >= 16: DPP row_mirror             (lane i <-> 15 - i: pairs across the two half-rows)
//   N >= 32: ds_swizzle xor 16          (within 32 lanes)
//   N == 64: readlane 0 and 32          (the two halves, uniform)
template <int N, class Op> HK_INLINE float lane_allreduce(float v) {
  static_assert(N >= 1 && N <= 64 && (N & (N - 1)) == 0, "lane groups of 1, 2, 4, ..., 64 lanes");
  if constexpr (N >= 2) v = Op::apply(v, dpp<0xB1>(v));
  if constexpr (N >= 4) v = Op::apply(v, dpp<0x4E>(v));
  if constexpr (N >= 8) v = Op::apply(v, dpp<0x141>(v));
  if constexpr (N >= 16) v = Op::apply(v, dpp<0x140>(v));
  if constexpr (N >= 32)
    v = Op::apply(v, __builtin_bit_cast(float, __builtin_amdgcn_ds_swizzle(__builtin_bit_cast(int, v), 0x401F)));
  if constexpr (N >= 64) {
    const int b = __builtin_bit_cast(int, v);
    v = Op::apply(__builtin_bit_cast(float, __builtin_amdgcn_readlane(b, 0)),
                  __builtin_bit_cast(float, __builtin_amdgcn_readlane(b, 32)));
  }
  return v;
}
}  // namespace detail

}  // namespace hk
