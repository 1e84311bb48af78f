#pragma once
// hk/hopper/tma.hpp: the bulk tensor copy engine. A tensor map (CUtensorMap, 128 bytes, encoded on
// the host by cuTensorMapEncodeTiled) lives in the kernel's __grid_constant__ argument struct; we
// only ever take its address.
#include "sync.hpp"

namespace hk {

// Same size and alignment as CUtensorMap; opaque here.
struct alignas(64) tma_desc { unsigned long long v[16]; };

namespace tma {

HK_INLINE void prefetch(const tma_desc& d) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(&d) : "memory");
}

// Copy the 2D box at element coordinates (c0 = innermost, c1) into shared memory at `dst`;
// completion is signalled on `bar` as transaction bytes. Out-of-bounds elements read as zero.
HK_INLINE void load_async(void* dst, const tma_desc& d, int c0, int c1, mbarrier& bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];"
      :: "r"(smem_addr(dst)), "l"(&d), "r"(c0), "r"(c1), "r"(smem_addr(&bar)) : "memory");
}

// The same for a 4D box at (c0 = innermost, c1, c2, c3), e.g. a (head dim, rows, heads, batch)
// view of an attention operand: one map covers every (batch, head) with the caller's strides.
HK_INLINE void load_async(void* dst, const tma_desc& d, int c0, int c1, int c2, int c3, mbarrier& bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];"
      :: "r"(smem_addr(dst)), "l"(&d), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(&bar)) : "memory");
}

// Copy a shared-memory tile to the 2D box at (c0, c1) of global memory; elements outside the
// tensor are skipped. Tracked by bulk groups of the issuing thread (store_commit / store_wait).
HK_INLINE void store_async(const tma_desc& d, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
               :: "l"(&d), "r"(c0), "r"(c1), "r"(smem_addr(src)) : "memory");
}
HK_INLINE void store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N committed store groups still read their shared-memory source.
template <int N> HK_INLINE void store_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }
template <int N> HK_INLINE void store_wait() { asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory"); }

}  // namespace tma
}  // namespace hk
