#pragma once
// hk/hopper/wgmma.hpp: warpgroup matrix multiply (sm_90a) on shared tiles.
//   mma_AB   acc (+)= A  * B   A: st<M,K> (K contiguous), B: st<K,N> (N contiguous)
//   mma_ABt  acc (+)= A  * B^T A: st<M,K>,                B: st<N,K>
//   mma_AtB  acc (+)= A^T* B   A: st<K,M> (M contiguous), B: st<K,N>
//   mma_AtBt acc (+)= A^T* B^T A: st<K,M>,                B: st<N,K>
//   mma_AB   acc (+)= A  * B   A: rt_a<K> (registers),     B: st<K,N> (N contiguous)
// Each call issues every k16 step of the tiles' K (one wgmma per 64-row block and step), then
// commits them as one group; mma_wait<N>() waits until at most N groups are in flight.
#include "tiles.hpp"
#include "wgmma_ops.hpp"

namespace hk {

// Shared-memory matrix descriptor (PTX ISA "matrix descriptor"): start address, leading byte
// offset (LBO), stride byte offset (SBO), all >> 4, and the swizzle mode in bits 62-63.
HK_INLINE u64 smem_desc(u32 addr, u32 lbo, u32 sbo, int swizzle_bytes) {
  u64 mode = swizzle_bytes == 128 ? 1 : swizzle_bytes == 64 ? 2 : 3;
  return u64((addr & 0x3FFFF) >> 4) | (u64(lbo >> 4) << 16) | (u64(sbo >> 4) << 32) | (mode << 62);
}

// K-major operand (K contiguous, one 128-byte chunk = 64 K): rows are 128 B apart, 8-row groups
// 1024 B apart (SBO); a k16 step moves 32 B inside the swizzled row (the hardware applies the
// XOR on the final address). LBO is unused for swizzled K-major layouts. A tile of several 64-wide
// chunks (K = 128, ...) is read chunk by chunk: step k16 lies in chunk k16 / 4.
template <class ST> HK_INLINE u64 desc_kmajor(const ST& t, int k16, int row0 = 0) {
  static_assert(ST::cols % 64 == 0, "K-major wgmma operand: whole 64-wide (128-byte) chunks of K");
  return smem_desc(smem_addr(t.data) + (k16 / 4) * ST::chunk_bytes + row0 * 128 + (k16 % 4) * 32, 16, 1024, 128);
}
// M/N-major operand (M or N contiguous): SBO steps 8 K-rows (8 swizzle rows), LBO steps one chunk
// of W = min(C,64) columns; a k16 step moves 16 swizzle rows.
template <class ST> HK_INLINE u64 desc_mnmajor(const ST& t, int k16, int chunk0 = 0) {
  return smem_desc(smem_addr(t.data) + chunk0 * ST::chunk_bytes + k16 * 16 * ST::swizzle_bytes,
                   ST::chunk_bytes, 8 * ST::swizzle_bytes, ST::swizzle_bytes);
}

// A tile's descriptors, walked: the descriptors of its k16 steps (and of its 64-row blocks, of a
// ring's stages) differ only in the start-address field (bits 0-13: byte address >> 4) and shared
// addresses stay below 2^18 bytes, so that field never carries into the LBO above it. Holding the
// low word of the tile's first descriptor (in a uniform register when the tile's address is
// warp-uniform) makes each step's descriptor one 32-bit add of a constant, with a constant high
// word, where desc_kmajor / desc_mnmajor redo the mask, shift and or from the address every time.
// MN: the M/N-major form (desc_mnmajor), else the K-major one (desc_kmajor). at(k, sub) equals
// desc_kmajor(t, k, sub) (sub: its row0, in rows) / desc_mnmajor(t, k, sub) (sub: its chunk0) of the
// tile the walk started from.
template <class ST, bool MN> struct desc_walk {
  static constexpr u32 mode = ST::swizzle_bytes == 128 ? 1 : ST::swizzle_bytes == 64 ? 2 : 3;
  static constexpr u32 lbo = MN ? ST::chunk_bytes : 16, sbo = MN ? 8 * ST::swizzle_bytes : 1024;
  static constexpr u32 hi = (sbo >> 4) | (mode << 30);
  static_assert(MN || ST::cols % 64 == 0, "K-major wgmma operand: whole 64-wide (128-byte) chunks of K");
  static_assert((lbo >> 4) < (1u << 14), "LBO field: 14 bits");
  u32 lo;
  HK_INLINE static desc_walk of(u32 addr) { return {(addr >> 4) + ((lbo >> 4) << 16)}; }
  HK_INLINE static desc_walk of(const ST& t) { return of(smem_addr(t.data)); }
  // Byte offset of step k16 (and of row / chunk `sub`) from the tile's start.
  HK_HD static constexpr u32 offset(int k16, int sub = 0) {
    return MN ? sub * ST::chunk_bytes + k16 * 16 * ST::swizzle_bytes
              : (k16 / 4) * ST::chunk_bytes + sub * 128 + (k16 % 4) * 32;
  }
  HK_INLINE u64 at(int k16, int sub = 0) const { return (u64(hi) << 32) | (lo + (offset(k16, sub) >> 4)); }
  // The same walk n strides of `stride` bytes (a multiple of 16) further on: stage n of a ring.
  HK_INLINE desc_walk plus(int n, u32 stride) const { return {lo + u32(n) * (stride >> 4)}; }
};

HK_INLINE void mma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
HK_INLINE void mma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> HK_INLINE void mma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// Keep the compiler from moving accumulator reads across an in-flight wgmma.
template <class RT> HK_INLINE void fence_operand(RT& t) {
#pragma unroll
  for (int b = 0; b < RT::blocks; ++b)
#pragma unroll
    for (int k = 0; k < RT::regs; ++k) asm volatile("" : "+f"(t.v[b][k]) :: "memory");
}

// ---- A from registers (wgmma's RS form) ----------------------------------------------------------
// A 64 x K tile of 16-bit values held the way wgmma reads A from registers: step s (columns
// 16s..16s+15) is four registers of packed pairs, (row r, columns c, c+1), (r+8, c), (r, c+8),
// (r+8, c+8), for this thread's r and c of rt's accumulator layout. That is exactly an
// rt<float, 64, K> packed pairwise in register order (accumulator register k, k+1 -> v[k / 8][k % 8 / 2]):
// a product's result becomes the next product's A with no shared-memory round trip.
template <class T, int K> struct rt_a {
  static_assert(K % 16 == 0, "hk::rt_a: whole k16 steps");
  using dtype = T;
  static constexpr int rows = 64, cols = K, steps = K / 16;
  u32 v[steps][4];
  // Accumulator registers k and k + 1 (k even) of an rt<float, 64, K>, rounded to T.
  HK_INLINE void set_pair(int k, float lo, float hi) { v[k / 8][(k % 8) / 2] = pack2<T>(lo, hi); }
};
template <class T, int K> HK_INLINE void pack_a(rt_a<T, K>& a, const rt<float, 64, K>& acc) {
#pragma unroll
  for (int k = 0; k < K / 2; k += 2) a.set_pair(k, acc.v[0][k], acc.v[0][k + 1]);
}
// Keep an in-flight wgmma's A registers alive and unmoved until after its mma_wait.
template <class T, int K> HK_INLINE void fence_operand(rt_a<T, K>& a) {
#pragma unroll
  for (int s = 0; s < K / 16; ++s)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a.v[s][i]) :: "memory");
}

namespace detail {
// One k16 step (k = 0 .. K/16-1) of acc (+)= op(A) op(B): one wgmma per 64-row block of acc.
template <bool TA, bool TB, class RT, class STA, class STB>
HK_INLINE void mma_step(RT& acc, const STA& a, const STB& b, int k, int scale_d) {
  constexpr bool bf = is_bf16<typename STA::dtype>::value;
  u64 db;
  if constexpr (TB) db = desc_mnmajor(b, k); else db = desc_kmajor(b, k);
#pragma unroll
  for (int m = 0; m < RT::blocks; ++m) {
    u64 da;
    if constexpr (TA) da = desc_mnmajor(a, k, m); else da = desc_kmajor(a, k, m * 64);
    wgmma_m64k16<RT::cols, bf, TA, TB>(acc.v[m], da, db, scale_d);
  }
}

// All k16 steps of the tiles, as one commit group. With NACC > 1 accumulators, step k goes to
// acc[k % NACC]: consecutive wgmmas then do not depend on each other, which matters when the
// tiles are so small that wgmma latency, not throughput, sets the pace. Sum them at the end.
template <bool TA, bool TB, int NACC, class RT, class STA, class STB>
HK_INLINE void mma(RT (&acc)[NACC], const STA& a, const STB& b, bool accumulate) {
  constexpr int K = TA ? STA::rows : STA::cols;
  static_assert(K % 16 == 0);
  mma_fence();
#pragma unroll
  for (int k = 0; k < K / 16; ++k) mma_step<TA, TB>(acc[k % NACC], a, b, k, (accumulate || k >= NACC) ? 1 : 0);
  mma_commit();
}
template <bool TA, bool TB, class RT, class STA, class STB>
HK_INLINE void mma(RT& acc, const STA& a, const STB& b, bool accumulate) {
  RT (&one)[1] = *reinterpret_cast<RT(*)[1]>(&acc);
  mma<TA, TB, 1>(one, a, b, accumulate);
}
}  // namespace detail

template <class RT, class STA, class STB> HK_INLINE void mma_AB(RT& d, const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::cols == STB::rows && RT::rows == STA::rows && RT::cols == STB::cols, "mma_AB shapes");
  detail::mma<false, true>(d, a, b, acc);
}
template <class RT, int NACC, class STA, class STB>
HK_INLINE void mma_AB(RT (&d)[NACC], const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::cols == STB::rows && RT::rows == STA::rows && RT::cols == STB::cols, "mma_AB shapes");
  detail::mma<false, true, NACC>(d, a, b, acc);
}
// acc (+)= A * B with A in registers (rt_a, 64 x K) and B: st<K, N> (N contiguous), one commit group.
template <class RT, class T, int K, class STB>
HK_INLINE void mma_AB(RT& d, const rt_a<T, K>& a, const STB& b, bool acc = true) {
  static_assert(RT::rows == 64 && STB::rows == K && RT::cols == STB::cols, "mma_AB (A in registers) shapes");
  static_assert(sizeof(typename STB::dtype) == 2 && is_bf16<T>::value == is_bf16<typename STB::dtype>::value,
                "mma_AB: A and B of one 16-bit type");
  mma_fence();
#pragma unroll
  for (int k = 0; k < K / 16; ++k)
    detail::wgmma_rs_m64k16<RT::cols, is_bf16<T>::value, 1>(d.v[0], a.v[k], desc_mnmajor(b, k), (acc || k > 0) ? 1 : 0);
  mma_commit();
}
template <class RT, class STA, class STB> HK_INLINE void mma_ABt(RT& d, const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::cols == STB::cols && RT::rows == STA::rows && RT::cols == STB::rows, "mma_ABt shapes");
  detail::mma<false, false>(d, a, b, acc);
}
template <class RT, int NACC, class STA, class STB>
HK_INLINE void mma_ABt(RT (&d)[NACC], const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::cols == STB::cols && RT::rows == STA::rows && RT::cols == STB::rows, "mma_ABt shapes");
  detail::mma<false, false, NACC>(d, a, b, acc);
}
template <class RT, class STA, class STB> HK_INLINE void mma_AtB(RT& d, const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::rows == STB::rows && RT::rows == STA::cols && RT::cols == STB::cols, "mma_AtB shapes");
  detail::mma<true, true>(d, a, b, acc);
}
template <class RT, int NACC, class STA, class STB>
HK_INLINE void mma_AtB(RT (&d)[NACC], const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::rows == STB::rows && RT::rows == STA::cols && RT::cols == STB::cols, "mma_AtB shapes");
  detail::mma<true, true, NACC>(d, a, b, acc);
}
template <class RT, class STA, class STB> HK_INLINE void mma_AtBt(RT& d, const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::rows == STB::cols && RT::rows == STA::cols && RT::cols == STB::rows, "mma_AtBt shapes");
  detail::mma<true, false>(d, a, b, acc);
}
template <class RT, int NACC, class STA, class STB>
HK_INLINE void mma_AtBt(RT (&d)[NACC], const STA& a, const STB& b, bool acc = true) {
  static_assert(STA::rows == STB::cols && RT::rows == STA::cols && RT::cols == STB::rows, "mma_AtBt shapes");
  detail::mma<true, false, NACC>(d, a, b, acc);
}

// The same products from walked descriptors (desc_walk), one 64-row block of acc, one commit group:
// acc (+)= A * B^T with A: st<64, K> and B: st<N, K> (both K-major), and acc (+)= A * B with A in
// registers (rt_a, 64 x K) and B: st<K, N> (N contiguous).
template <class RT, class STA, class STB>
HK_INLINE void mma_ABt(RT& d, const desc_walk<STA, false>& a, const desc_walk<STB, false>& b, bool acc = true) {
  static_assert(STA::cols == STB::cols && RT::rows == 64 && STA::rows == 64 && RT::cols == STB::rows, "mma_ABt shapes");
  mma_fence();
#pragma unroll
  for (int k = 0; k < STA::cols / 16; ++k)
    detail::wgmma_m64k16<RT::cols, is_bf16<typename STA::dtype>::value, 0, 0>(d.v[0], a.at(k), b.at(k),
                                                                             (acc || k > 0) ? 1 : 0);
  mma_commit();
}
template <class RT, class T, int K, class STB>
HK_INLINE void mma_AB(RT& d, const rt_a<T, K>& a, const desc_walk<STB, true>& b, bool acc = true) {
  static_assert(RT::rows == 64 && STB::rows == K && RT::cols == STB::cols, "mma_AB (A in registers) shapes");
  static_assert(is_bf16<T>::value == is_bf16<typename STB::dtype>::value, "mma_AB: A and B of one 16-bit type");
  mma_fence();
#pragma unroll
  for (int k = 0; k < K / 16; ++k)
    detail::wgmma_rs_m64k16<RT::cols, is_bf16<T>::value, 1>(d.v[0], a.v[k], b.at(k), (acc || k > 0) ? 1 : 0);
  mma_commit();
}

}  // namespace hk
