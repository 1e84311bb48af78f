#pragma once
// hk/common/select.hpp: what selection kernels (top-k) need besides the row tile, for every target.
//
//   order_key<T>::encode(bits)    a 32-bit unsigned image of an element's bits that orders like
//                                 the values: a > b iff key(a) > key(b); NaN (any sign, any
//                                 payload) above +inf, -0 just below +0. 16-bit types keep their
//                                 image in the high half (the low half is 0), so the key's
//                                 significant bits are [32 - order_key<T>::bits, 32). No element
//                                 has key 0, which therefore marks "no element".
//   order_key<T>::decode(key)     the bits back (NaN comes back as one quiet NaN)
//   elem_bits<T>(chunk, j)        the bits of element j of a packed chunk (rt_row's storage), as
//                                 encode takes them (16-bit elements in the high half)
//   detail::smem_fetch_add(p, v)  atomic add to a 32-bit word in shared memory, returning the
//                                 old value (ds_add_rtn_u32 on CDNA, atom.shared.add on Hopper)
//   detail::lane_shfl(v, src)     v of another lane of the warp / wave
//   detail::sync_warp()           the lanes of a warp / wave meet (shared memory ordered)
//   detail::prefetch_l2(p)        a hint: the line at p into L2 (NVIDIA; nothing on CDNA)
//   detail::global_fetch_add(p, v), detail::fence_device()
//                                 the same in global memory, and a device-wide fence: blocks
//                                 publish partial results, the last to count in combines them
//   bit_length(v)                 bits needed to write v >= 0 (0 for 0)
// Include after hk/hk.hpp.
namespace hk {

template <class T> struct order_key;
template <> struct order_key<float> {
  static constexpr int bits = 32;
  // Negatives: every bit flipped; the rest: the sign bit set. One shift and one three-input logic
  // op (x ^ (sign-fill | 0x80000000)), then NaN by a float compare: a few instructions a key.
  HK_INLINE static u32 encode(u32 b) {
    const u32 k = b ^ ((u32)((int)b >> 31) | 0x80000000u);
    return __builtin_isnan(__builtin_bit_cast(float, b)) ? 0xFFFFFFFFu : k;
  }
  HK_INLINE static u32 decode(u32 k) { return (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k; }
};
namespace detail {
template <u32 INF> struct order_key16 {   // INF: the 16-bit pattern of +inf (bf16 0x7F80, fp16 0x7C00)
  static constexpr int bits = 16;
  // b: the element's bits in the high half of the word (32-bit operations only)
  HK_INLINE static u32 encode(u32 b) {
    if ((b & 0x7FFF0000u) > (INF << 16)) return 0xFFFF0000u;
    return (b & 0x80000000u) ? (~b & 0xFFFF0000u) : (b | 0x80000000u);
  }
  HK_INLINE static u32 decode(u32 k) {
    const u32 h = k >> 16;
    return (h & 0x8000u) ? (h & 0x7FFFu) : (~h & 0xFFFFu);
  }
};
}  // namespace detail
// bf16 in the high half of a word is the fp32 of the same value: fp32's encoding, the low half kept 0.
template <> struct order_key<bf16> : detail::order_key16<0x7F80u> {
  HK_INLINE static u32 encode(u32 b) { return order_key<float>::encode(b) & 0xFFFF0000u; }
};
template <> struct order_key<half> : detail::order_key16<0x7C00u> {};

// The bits of element j of a packed chunk, as order_key<T>::encode takes them: a 16-bit element in
// the high half of the word (so no 16-bit operation is needed), a 32-bit one as it is.
template <class T, int B> HK_INLINE u32 elem_bits(const raw<B>& r, int j) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
  if constexpr (sizeof(T) == 4) return r.w[j];
  else return j % 2 ? r.w[j / 2] & 0xFFFF0000u : r.w[j / 2] << 16;
}

HK_INLINE int bit_length(int v) {
  int n = 0;
  while (v > 0) { ++n; v >>= 1; }
  return n;
}

namespace detail {
// Atomic add to a 32-bit word in global memory (device scope), returning the old value.
HK_INLINE u32 global_fetch_add(u32* p, u32 v) {
#if HK_CUDA
  return atomicAdd(p, v);
#else
  return __atomic_fetch_add((__attribute__((address_space(1))) u32*)p, v, __ATOMIC_RELAXED);
#endif
}
// This thread's global writes before it are visible device-wide before its later accesses, and
// its later reads see what other blocks published before their fence (CUDA's __threadfence).
HK_INLINE void fence_device() {
#if HK_CUDA
  __threadfence();
#else
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
#endif
}
// The lanes of this warp / wave meet: shared-memory writes before it are seen by reads after it.
HK_INLINE void sync_warp() {
#if HK_CUDA
  __syncwarp();
#else
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#endif
}
// v of lane `src` of this warp / wave (every lane takes part).
HK_INLINE u32 lane_shfl(u32 v, int src) {
#if HK_CUDA
  return __shfl_sync(0xFFFFFFFFu, v, src);
#else
  return (u32)__builtin_amdgcn_ds_bpermute(src << 2, (int)v);
#endif
}
// Ask for the 128-byte line at p to be brought into L2 (NVIDIA: prefetch.global.L2); a hint that
// loads nothing into registers. CDNA: nothing (no prefetch to L2 here).
HK_INLINE void prefetch_l2(const void* p) {
#if HK_CUDA
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}
HK_INLINE u32 smem_fetch_add(u32* p, u32 v) {
#if HK_CUDA
  return atomicAdd(p, v);
#else
  return __atomic_fetch_add((__attribute__((address_space(3))) u32*)p, v, __ATOMIC_RELAXED);
#endif
}
}  // namespace detail

}  // namespace hk
