#pragma once
// hk/hopper/prims.hpp: the per-target primitives the portable register code (common/regs.hpp,
// common/rt_row.hpp) is built on. cdna/prims.hpp defines the same names for gfx942/gfx950.
//   WARP_THREADS, thread_id/lane_id/warp_id, sync_threads   threads and the block barrier
//   fast_exp2 / fast_log2 / fast_rsqrt / neg_inf / fmax_f  one hardware instruction each
//   fast_rcp                                                (v_rcp_f32 / rcp.approx)
//   mul_rn                                                  a product never fused into a later add
//   fma_rn                                                  a * b + c rounded once
//   opaque                                                  an int the compiler cannot see through
//   detail::ld_global<B> / st_global<B>                     B-byte global accesses (2..16; 32 as two)
//   detail::lane_allreduce<N, Op>                           a reduction over N adjacent lanes
#include "types.hpp"

namespace hk {

inline constexpr int WARP_THREADS = 32;
HK_INLINE int thread_id() { return (int)threadIdx.x; }
HK_INLINE int lane_id() { return (int)(threadIdx.x & 31u); }
HK_INLINE int warp_id() { return (int)(threadIdx.x >> 5); }
HK_INLINE void sync_threads() { __syncthreads(); }

// MUFU forms (ex2/lg2/rsqrt .approx.ftz): about 2 ULP, denormals flushed.
HK_INLINE float fast_exp2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
HK_INLINE float fast_log2(float x) { float y; asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
HK_INLINE float fast_rsqrt(float x) { float y; asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
// x, unknown to the compiler from here on (an empty asm): keeps values derived from x inside the
// loop iteration that computes them (see cdna/prims.hpp).
HK_INLINE int opaque(int x) { asm volatile("" : "+r"(x)); return x; }
// rcp.approx.ftz: 1 ULP; rcp(inf) = 0, rcp(0) = inf.
HK_INLINE float fast_rcp(float x) { float y; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
// mul.rn: a rounded product the compiler never contracts with a later add into an fma, so a sum of
// products gives the same bits whichever way the code around it is written (see cdna/prims.hpp).
HK_INLINE float mul_rn(float a, float b) { float y; asm("mul.rn.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b)); return y; }
// a * b + c rounded once (see cdna/prims.hpp).
HK_INLINE float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
HK_INLINE float neg_inf() { return bits_to_float(0xFF800000u); }
HK_INLINE float fmax_f(float a, float b) { float y; asm("max.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b)); return y; }

namespace detail {
// Global loads/stores of B bytes at a B-aligned address: LDG/STG .E.128/.64/.32/.U16. Volatile so
// that they keep program order among themselves: a kernel may store where it has loaded
// (in-place), and the loads here are not otherwise visible to the compiler as memory reads.
// B = 32 (sm_90a only): two 16-byte accesses, for a 32-byte chunk (8 fp32 table values beside
// 8 16-bit elements of x: rotary embeddings).
template <int B> HK_INLINE raw<B> ld_global(const void* p) {
  static_assert(B == 2 || B == 4 || B == 8 || B == 16 || B == 32, "accesses of 2, 4, 8, 16 or 32 bytes");
  raw<B> r;
  if constexpr (B == 32)
    asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%8];\n\tld.global.v4.b32 {%4, %5, %6, %7}, [%8+16];"
                 : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3]),
                   "=r"(r.w[4]), "=r"(r.w[5]), "=r"(r.w[6]), "=r"(r.w[7]) : "l"(p));
  else if constexpr (B == 16)
    asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3]) : "l"(p));
  else if constexpr (B == 8)
    asm volatile("ld.global.v2.b32 {%0, %1}, [%2];" : "=r"(r.w[0]), "=r"(r.w[1]) : "l"(p));
  else if constexpr (B == 4)
    asm volatile("ld.global.b32 %0, [%1];" : "=r"(r.w[0]) : "l"(p));
  else {
    u16 h;
    asm volatile("ld.global.b16 %0, [%1];" : "=h"(h) : "l"(p));
    r.w[0] = h;
  }
  return r;
}
template <int B> HK_INLINE void st_global(void* p, const raw<B>& r) {
  static_assert(B == 2 || B == 4 || B == 8 || B == 16 || B == 32, "accesses of 2, 4, 8, 16 or 32 bytes");
  if constexpr (B == 32)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n\tst.global.v4.b32 [%0+16], {%5, %6, %7, %8};"
                 :: "l"(p), "r"(r.w[0]), "r"(r.w[1]), "r"(r.w[2]), "r"(r.w[3]),
                    "r"(r.w[4]), "r"(r.w[5]), "r"(r.w[6]), "r"(r.w[7]) : "memory");
  else if constexpr (B == 16)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(r.w[0]), "r"(r.w[1]), "r"(r.w[2]), "r"(r.w[3]) : "memory");
  else if constexpr (B == 8)
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" :: "l"(p), "r"(r.w[0]), "r"(r.w[1]) : "memory");
  else if constexpr (B == 4)
    asm volatile("st.global.b32 [%0], %1;" :: "l"(p), "r"(r.w[0]) : "memory");
  else
    asm volatile("st.global.b16 [%0], %1;" :: "l"(p), "h"((u16)r.w[0]) : "memory");
}

// Reduce v over each aligned group of N lanes (N a power of two <= 32) with xor shuffles; every
// lane of a group gets the same bits.
template <int N, class Op> HK_INLINE float lane_allreduce(float v) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "lane groups of 1, 2, 4, ..., 32 lanes");
#pragma unroll
  for (int m = 1; m < N; m <<= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
}  // namespace detail

}  // namespace hk
