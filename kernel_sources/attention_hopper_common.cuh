#pragma once
// attention_hopper_common.cuh: what the sm_90a attention kernels (attention_fwd_hopper.cuh,
// attention_bwd_hopper.cuh) share: a sequence's offsets and lengths (dense or varlen), the
// warpgroup tile loaders (vector loads; cp.async with its mbarrier arrival; a TMA tile), the register split
// between producer and consumer warpgroups, and the lane reductions over the 4 lanes that hold one
// accumulator row.
#include "hk/hk.hpp"

namespace hkjit_attn_hopper {

// Registers: the producer warpgroup keeps PRODUCER_REGS for its batched loads and address
// arithmetic and gives the rest to the consumers (setmaxnreg). The forward's producer keeps 72 with
// plain loads (56 spilled at D64 / block_kv 64), its consumers get 216; with TMA (one thread issues
// the copies) or cp.async (issue only, no data held; R21 its highest) it keeps 24 and its consumers
// get 240, the most setmaxnreg gives. The backward's keeps 56, its consumers get 224 (dK, dV, S^T,
// dP^T: 192 accumulator registers at D128).
template <int CONSUMERS, int PRODUCER_REGS> struct register_split {
  static constexpr int threads = (CONSUMERS + 1) * hk::WARPGROUP_THREADS;
  static constexpr int PRODUCER = PRODUCER_REGS;
  static constexpr int ENTRY = 65536 / threads / 8 * 8;
  static constexpr int RAW = (ENTRY * (CONSUMERS + 1) - PRODUCER) / CONSUMERS / 8 * 8;
  static constexpr int CONSUMER = RAW > 240 ? 240 : RAW;
};

// How the forward's producer streams K and V (attention_fwd_hopper.cuh; hkjit/ops/_hopper_attention_fwd.py
// names them "lsu", "tma", "cpasync").
enum class kv_producer { lsu, tma, cpasync };

// A batch's sequence: row offsets into the packed arrays (varlen) and lengths.
struct seq_t { int q0, k0, lq, lk; };
template <bool VARLEN>
__device__ __forceinline__ seq_t sequence(const int* cu_q, const int* cu_k, int n_q, int n_k, int b) {
  if constexpr (VARLEN) {
    const int q0 = cu_q[b], k0 = cu_k[b];
    return {q0, k0, cu_q[b + 1] - q0, cu_k[b + 1] - k0};
  } else {
    return {0, 0, n_q, n_k};
  }
}

// Tile t <- global rows [r0, r0 + ST::rows), columns [c0, c0 + ST::cols) (row stride sr), by the
// 128 threads of a warpgroup, with VEC-element (16/8/4-byte) loads written straight into the
// swizzled layout wgmma reads; rows at or past `limit` read as zero (masked rows then multiply
// zeros, never stale NaNs). Loads go out in batches of MAX_BATCH (4) before their stores, so each
// thread keeps several in flight (a smaller batch holds fewer registers). The caller fences
// (fence_proxy_async) before wgmma reads the tile.
template <int VEC>
using vec_t = hk::conditional_t<VEC == 8, uint4, hk::conditional_t<VEC == 4, uint2, unsigned>>;
template <int VEC, int MAX_BATCH = 4, class ST, class T>
__device__ __forceinline__ void load_tile(ST& t, const T* base, long long sr, int r0, int limit, int c0, int tid) {
  static_assert(VEC == 8 || VEC == 4 || VEC == 2, "16-, 8- or 4-byte loads");
  using V = vec_t<VEC>;
  constexpr int per_row = ST::cols / VEC, per_thread = ST::rows * per_row / hk::WARPGROUP_THREADS;
  constexpr int BATCH = per_thread < MAX_BATCH ? per_thread : MAX_BATCH;
  static_assert(per_thread % BATCH == 0, "whole batches of loads");
#pragma unroll 1
  for (int i0 = 0; i0 < per_thread; i0 += BATCH) {
    V x[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = (i0 + u) * hk::WARPGROUP_THREADS + tid, r = i / per_row, c = (i % per_row) * VEC;
      x[u] = V{};
      if (r0 + r < limit) x[u] = *reinterpret_cast<const V*>(base + (long long)(r0 + r) * sr + c0 + c);
    }
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      const int i = (i0 + u) * hk::WARPGROUP_THREADS + tid, r = i / per_row, c = (i % per_row) * VEC;
      *reinterpret_cast<V*>(reinterpret_cast<char*>(t.data) + ST::offset(r, c)) = x[u];
    }
  }
}

// cp.async: BYTES (4, 8 or 16) from global to shared without passing through registers; `valid`
// false writes zeros (rows past the sequence). Completion is tracked by an mbarrier (arrive_async).
template <int BYTES>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
  const unsigned d = hk::smem_addr(dst), n = valid ? BYTES : 0;
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(n) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" :: "r"(d), "l"(src), "n"(BYTES), "r"(n) : "memory");
}
// One arrival on `b` once every cp.async this thread issued so far has landed (counted in the
// barrier's expected arrivals: .noinc).
__device__ __forceinline__ void arrive_async(hk::mbarrier& b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(hk::smem_addr(&b)) : "memory");
}

// Tile t <- global rows [r0, r0 + ST::rows) of base (row stride sr), by the 128 threads of a
// warpgroup, each VEC-element piece by one cp.async straight into the swizzled layout wgmma reads:
// nothing passes through registers, so the whole tile is in flight at once. Rows at or past `limit`
// are zero-filled (src-size 0; their source address clamped to row 0, never read). The caller
// arrives on an mbarrier with arrive_async; the reader fences (fence_proxy_async) after its wait,
// since cp.async writes through the generic proxy and wgmma reads through the async one.
// WHOLE: a tile whose rows are all below `limit` (every KV block but a sequence's last) is issued
// unrolled with no predicate: thread tid's pieces lie RPU = 128 / (cols / VEC) rows apart, so the
// source steps by RPU rows and the destination by constants (the 128-byte swizzle repeats every 8
// rows). Otherwise, and always without WHOLE, one rolled loop per piece (the backward's).
template <int VEC, bool WHOLE, class ST, class T>
__device__ __forceinline__ void load_tile_async(ST& t, const T* base, long long sr, int r0, int limit, int tid) {
  static_assert(VEC == 8 || VEC == 4 || VEC == 2, "16-, 8- or 4-byte copies");
  constexpr int per_row = ST::cols / VEC, per_thread = ST::rows * per_row / hk::WARPGROUP_THREADS;
  char* const dst = reinterpret_cast<char*>(t.data);
  if constexpr (WHOLE) {
    static_assert(hk::WARPGROUP_THREADS % per_row == 0 && ST::swizzle_bytes == 128,
                  "whole rows per step, 128-byte swizzle");
    constexpr int RPU = hk::WARPGROUP_THREADS / per_row, PERIOD = RPU >= 8 ? 1 : 8 / RPU;
    if (r0 + ST::rows <= limit) {
      const int rt = tid / per_row, ct = (tid % per_row) * VEC;
      const T* src = base + (long long)(r0 + rt) * sr + ct;
      const long long step = RPU * sr;
#pragma unroll
      for (int u = 0; u < per_thread; ++u) {
        const int o = ST::offset(rt + (u % PERIOD) * RPU, ct) + (u / PERIOD) * (PERIOD * RPU * 128);
        cp_async<VEC * 2>(dst + o, src + u * step, true);
      }
      return;
    }
  }
#pragma unroll 1
  for (int u = 0; u < per_thread; ++u) {     // issue only: nothing waits here, nothing to unroll for
    const int i = u * hk::WARPGROUP_THREADS + tid, r = i / per_row, c = (i % per_row) * VEC;
    const bool ok = r0 + r < limit;
    cp_async<VEC * 2>(dst + ST::offset(r, c), base + (long long)(ok ? r0 + r : 0) * sr + c, ok);
  }
}

// TMA: tile t <- rows [row, row + ST::rows) of (head, batch) of a 4D (D, rows, heads, batch) tensor
// map whose box is one 64-column swizzle chunk of t: ST::chunks copies, their bytes counted on
// `bar` (announced by the caller with arrive_expect_tx). Rows past the map's extent read as zeros.
template <class ST>
__device__ __forceinline__ void tma_load_tile(ST& t, const hk::tma_desc& map, int row, int head, int batch,
                                              hk::mbarrier& bar) {
#pragma unroll
  for (int c = 0; c < ST::chunks; ++c) hk::tma::load_async(t.chunk(c), map, c * ST::chunk_cols, row, head, batch, bar);
}

// An accumulator row lives in 4 adjacent lanes.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace hkjit_attn_hopper
