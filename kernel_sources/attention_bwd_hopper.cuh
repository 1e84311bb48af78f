#pragma once
// attention_bwd_hopper.cuh: the attention backward on Hopper (sm_90a), one pass, deterministic.
//
// With c = scale, P = exp(c Q K^T - LSE) (masked as in the forward), dO the output gradient:
//   Delta = rowsum(dO o O)      dV = P^T dO      dP = dO V^T      dS = P o (dP - Delta)
//   dQ = c dS K                 dK = c dS^T Q    (GQA: dK, dV summed over the query heads of a KV head)
// Two kernels:
//   attention_bwd_prep_hopper  Delta per query row (and dQ = 0 for rows that see no key);
//   attention_bwd_dkdv_hopper  one block per (128 keys, KV head, batch): dK and dV in registers
//                              over every query block of the group's heads, and each query block's
//                              dQ partial (dS K) added into an fp32 accumulator in global memory in
//                              the fixed order of the KV blocks (below); the last adder writes dQ.
// Five products per (KV block, query block), all wgmma: S^T = K Q^T and dP^T = V dO^T (both operands
// in shared memory), dV += P^T dO and dK += dS^T Q (A = P^T, dS^T straight from the accumulator
// registers, wgmma's RS form), dQ = dS K (A = dS^T written once to shared memory, read transposed).
//
// Deterministic dQ: per (batch, head, query block of BQ rows) a semaphore in the workspace (zero at
// launch, kept by the launcher) and a BQ x D fp32 accumulator in the scratch (per call, no contents
// needed). KV block i of a head adds its partial only when the semaphore equals i
// (the KV blocks that see a query block are 0 .. last, contiguous, also under causal masking): the
// first stores, the next ones add with one bulk reduction (cp.reduce.async.bulk), the last reads the
// sum, adds its own, scales and writes dQ, and resets the semaphore to 0 for the next launch. The adds
// run in the producer warpgroup, from a shared-memory copy of the partial: the consumers never wait
// on another block. Block i waits only on block i - 1 of its head (a lower block index, dispatched
// before it), so the order cannot deadlock.
// DQ_WARP (the default with one query head a KV head, and under TMA): the hand-off runs on warp 3 of the
// producer warpgroup alone and the loads on warps 0 .. LOAD_WARPS - 1, so the next stage's loads never
// wait for a dQ add; the shared partial is freed to the consumers once the bulk operation has read it,
// and the full completion is waited for only before the semaphore release. Same order, same bits; the
// waits still point only from block i to block i - 1 (loads wait on consumers, consumers on loads and on
// the dQ warp's freeing of step t - 2, the dQ warp on the consumers' step t and on block i - 1's
// semaphore).
// TMA (the default where it can serve the call; on top of DQ_WARP with one load warp): one elected thread
// of warp 0 issues Q and dO as tensor-map boxes and announces their bytes on the stage's full barrier;
// its 32 lanes copy LSE and Delta by cp.async. Warp 3 adds dQ as above; warps 1 and 2 have nothing to do.
// The producer then needs 24 registers and the consumers get 240 (FlashAttention-3's split).
// CONSUMER (variants of the TMA kernel's consumers, bits; 2 is the default, hkjit/ops/_hopper_attention_bwd.py):
//   1  wait placement: S and dP issued, wait <= 1 (S in), P while dP runs; wait for dP, dS^T; dV
//      issued and kept in flight across the dS^T store and the barrier; dQ issued (in S^T's
//      registers), wait <= 1 (dV in), dK issued, wait <= 1 (dQ in), dQ stored with dK in flight.
//   2  dS^T to shared memory by stmatrix (4 STSM a thread, one per 16 queries) instead of 16
//      scalar stores.
//   4  (with 1) dV issued as soon as P is packed, before the dP wait: dS^T formed while dV runs.
#include "attention_hopper_common.cuh"

namespace hkjit_attn_hopper {

// Mirrored by hkjit/ops/_attention_args.py: BackwardArgs (the CDNA kernels' bwd_args, field for field).
struct bwd_args {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* d_o;
  const float* lse;          // (batch, head, row) strides below; natural log, from the forward
  float* delta;              // written by the prep kernel, read by the dkdv kernel
  void* dq;
  void* dk;
  void* dv;
  const int* cu_seqlens_q;   // VARLEN: batch + 1 offsets into the packed rows
  const int* cu_seqlens_k;
  long long q_sb, q_sh, q_sr, k_sb, k_sh, k_sr, v_sb, v_sh, v_sr, o_sb, o_sh, o_sr, do_sb, do_sh, do_sr;
  long long dq_sb, dq_sh, dq_sr, dk_sb, dk_sh, dk_sr, dv_sb, dv_sh, dv_sr;
  long long lse_sb, lse_sh, lse_sr, delta_sb, delta_sh, delta_sr;
  int batch, heads, kv_heads, n_q, n_k;
  float scale_log2;          // scale * log2(e)
  float scale;
};
static_assert(sizeof(bwd_args) == 368, "bwd_args layout is mirrored in Python");

// The one-pass kernel's arguments (hkjit/ops/_hopper_attention_bwd.py: WorkspaceArgs): the common
// block, the workspace (one int semaphore per query block, zero at launch and left zero), the
// scratch (one BQ x D fp32 dQ accumulator per query block, its contents neither needed nor kept)
// and the query blocks of BQ rows per (batch, head) both were sized for (varlen: of the longest sequence).
struct bwd_ws_args {
  bwd_args a;
  int* semaphores;
  float* dq_accum;
  int q_blocks, unused;
};
static_assert(sizeof(bwd_ws_args) == 392, "bwd_ws_args layout is mirrored in Python");

// The TMA variant's arguments (WorkspaceTmaArgs): the Q and dO tensor maps first (64-byte aligned,
// (D, n_q, heads, batch) over the caller's strides, box (64, 64, 1, 1)), then bwd_ws_args.
struct bwd_qdo_maps { hk::tma_desc q_map, do_map; };
struct bwd_tma_args : bwd_qdo_maps, bwd_ws_args {};
static_assert(sizeof(bwd_tma_args) == 704, "bwd_tma_args layout is mirrored in Python");

constexpr float LOG2E = 1.4426950408889634f;

// Store a 64 x D accumulator tile times `mul` as T rows [row0, row0 + 64) of base (row stride sr),
// rows at or past `rows` skipped.
template <class T, class RT>
__device__ __forceinline__ void store_rows(T* base, long long sr, const RT& t, float mul, int row0, int rows) {
#pragma unroll
  for (int k = 0; k < RT::regs; k += 2) {
    const int row = row0 + RT::row(0, k);
    if (row < rows)
      *reinterpret_cast<unsigned*>(base + (long long)row * sr + RT::col(k)) = hk::pack2<T>(t.v[0][k] * mul, t.v[0][k + 1] * mul);
  }
}

// ---- the dQ semaphores and bulk copies (cp.async itself: attention_hopper_common.cuh) ------------
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void wait_until(const int* p, int value) {
  while (ld_acquire(p) != value) {
  }
}
__device__ __forceinline__ void release_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_relaxed(int* p, int v) {
  asm volatile("st.relaxed.gpu.global.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
// Order global accesses of the generic proxy (semaphores) against the bulk copies' (async proxy).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
// Wait for every cp.async this thread issued (a loading warp does before it exits).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Shared -> global bulk copy and bulk fp32 add (16-byte aligned, multiple-of-16 sizes), in bulk groups.
__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               :: "l"(dst), "r"(hk::smem_addr(src)), "r"(bytes) : "memory");
}
// Global -> shared bulk copy, its bytes counted on `bar` (announced with arrive_expect_tx).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, hk::mbarrier& bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(hk::smem_addr(dst)), "l"(src), "r"(bytes), "r"(hk::smem_addr(&bar)) : "memory");
}
__device__ __forceinline__ void bulk_add(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               :: "l"(dst), "r"(hk::smem_addr(src)), "r"(bytes) : "memory");
}

// A 64 x N product of rows [row0, row0 + 64) of A (K-major, any number of 64-wide chunks) and B^T
// (K-major): one commit group.
template <class RT, class STA, class STB>
__device__ __forceinline__ void mma_ABt_rows(RT& d, const STA& a, int row0, const STB& b) {
  static_assert(STA::cols == STB::cols && RT::rows == 64 && RT::cols == STB::rows, "mma_ABt_rows shapes");
  hk::mma_fence();
#pragma unroll
  for (int k = 0; k < STA::cols / 16; ++k)
    hk::detail::wgmma_m64k16<RT::cols, hk::is_bf16<typename STA::dtype>::value, false, false>(
        d.v[0], hk::desc_kmajor(a, k, row0), hk::desc_kmajor(b, k), k > 0 ? 1 : 0);
  hk::mma_commit();
}

// Four 8 x 8 16-bit matrices to shared memory (stmatrix .x4): lanes 8i .. 8i + 7 give the row
// addresses of matrix i, register i of every lane holds its (row lane / 4, columns 2 (lane % 4), + 1)
// pair: the layout of one k16 step of wgmma's A registers (hk::rt_a), so a step is one instruction.
__device__ __forceinline__ void stmatrix_x4(unsigned addr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

}  // namespace hkjit_attn_hopper

// ---- Delta (and dQ of rows that see no key) ------------------------------------------------------
// Two threads a row, D / 2 columns each; 128 rows a block.
template <class T, int D, bool CAUSAL, bool VARLEN, int VEC>
struct attention_bwd_prep_hopper {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static constexpr int threads = 256, ROWS = 128, dynamic_smem = 0;
  using args = hkjit_attn_hopper::bwd_args;

  static __device__ void run(const args& g) {
    const auto s = hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, blockIdx.z);
    const int b = blockIdx.z, h = blockIdx.y, tid = threadIdx.x, half = tid % 2;
    const int row = blockIdx.x * ROWS + tid / 2;
    float acc = 0.f;
    if (row < s.lq) {
      const T* o = (const T*)g.o + b * g.o_sb + h * g.o_sh + (long long)(s.q0 + row) * g.o_sr + half * (D / 2);
      const T* d = (const T*)g.d_o + b * g.do_sb + h * g.do_sh + (long long)(s.q0 + row) * g.do_sr + half * (D / 2);
      using V = hkjit_attn_hopper::vec_t<VEC>;
      constexpr int WORDS = sizeof(V) / 4;
#pragma unroll
      for (int c = 0; c < D / 2; c += VEC) {
        V x = *reinterpret_cast<const V*>(o + c), y = *reinterpret_cast<const V*>(d + c);
        const unsigned* xw = reinterpret_cast<const unsigned*>(&x);
        const unsigned* yw = reinterpret_cast<const unsigned*>(&y);
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
          acc += hk::to_float(T{(hk::u16)(xw[w] & 0xffffu)}) * hk::to_float(T{(hk::u16)(yw[w] & 0xffffu)});
          acc += hk::to_float(T{(hk::u16)(xw[w] >> 16)}) * hk::to_float(T{(hk::u16)(yw[w] >> 16)});
        }
      }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    if (row >= s.lq) return;
    if (half == 0) g.delta[b * g.delta_sb + h * g.delta_sh + (long long)(s.q0 + row) * g.delta_sr] = acc;
    // A row that sees no key (no keys at all; causal: row + Lk - Lq < 0) gets dQ = 0 here: the
    // dkdv kernel may never visit its query block.
    if (s.lk == 0 || (CAUSAL && row + s.lk - s.lq < 0)) {
      T* q = (T*)g.dq + b * g.dq_sb + h * g.dq_sh + (long long)(s.q0 + row) * g.dq_sr + half * (D / 2);
#pragma unroll
      for (int c = 0; c < D / 2; c += 2) *reinterpret_cast<unsigned*>(q + c) = 0u;
    }
  }
};

// ---- dK, dV and dQ ---------------------------------------------------------------------------------
// Warpgroup 2 is the producer: for each query block (BQ = 64 rows) that sees a key of this block
// (causal: from the last one down), for each query head of the KV head's group, in order: Q, dO, LSE and Delta by cp.async into a
// STAGES-deep ring (full[s]: 128 cp.async completions + 128 arrivals; empty[s]: one arrival per
// consumer warp); and, one block behind, the dQ partials the consumers leave in shared memory
// (dq_full / dq_empty, two buffers) added in order into the scratch accumulators. Consumer c owns keys
// [64c, 64c + 64) of the block: dK and dV in registers; per query block S^T, dP^T (K-major
// operands), P^T and dS^T in A registers, dV += P^T dO, dK += dS^T Q, dS^T to shared memory, then
// (both consumers' halves in place) dQ columns [64c, 64c + 64) = dS K (at D64 consumer 0 alone).
// Prepared variants (hkjit/ops/_hopper_attention_bwd.py validates them; the defaults are the kernel
// measured): DQ_WARP, LOAD_WARPS and TMA (the file's header). With cp.async the producer keeps 56
// registers: at 40 (consumers 232) or 24 (240) ptxas spills, in the loads and in the consumer. With
// TMA it keeps 24 and the consumers get 240.
template <class T, int D, int BQ, int CONSUMERS, int STAGES, bool CAUSAL, bool VARLEN, int VEC,
          bool DQ_WARP = false, int LOAD_WARPS = 4, bool TMA = false, int CONSUMER = 0>
struct attention_bwd_dkdv_hopper {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BQ == 64 || (BQ == 128 && D == 64 && (CONSUMER == 8 || CONSUMER == 10 || CONSUMER == 11) && TMA),
                "query block: 64 rows, or 128 at D64 with dQ by key halves (CONSUMER 8, 10 or 11) and the TMA "
                "producer");
  static_assert(CONSUMERS == 2, "2 consumer warpgroups: dQ needs both halves of the 128-key block");
  static_assert(STAGES >= 2 && STAGES <= 4, "2 to 4 stages");
  static_assert(DQ_WARP ? LOAD_WARPS >= 1 && LOAD_WARPS <= 3 : LOAD_WARPS == 4,
                "all 4 producer warps load, or 1 to 3 of them beside the dQ warp (warp 3)");
  static_assert(!TMA || (DQ_WARP && LOAD_WARPS == 1 && !VARLEN && VEC == 8),
                "TMA: warp 0 loads, warp 3 adds dQ; dense batches and 16-byte rows only");
  static_assert(CONSUMER >= 0 && CONSUMER <= 15 && (CONSUMER & 5) != 4 && (CONSUMER == 0 || TMA) &&
                    (!(CONSUMER & 8) || D == 64),
                "consumer variants: bits 1 (wait placement), 2 (stmatrix), 4 (early dV, with 1), 8 (dQ by key "
                "halves, D64), on the TMA kernel's 240 registers");
  static constexpr bool WAITS = CONSUMER & 1, STSM = CONSUMER & 2, EARLY_DV = CONSUMER & 4;
  // KEYS (D64): each consumer computes dQ = dS K over its own 64 keys (one 64 x 64 partial each, summed
  // in shared memory by consumer 0) instead of consumer 0 alone over all 128 (at D64 the 64 columns
  // of dQ are one warpgroup's tile): the two do the same tensor work a step, and each reads only its
  // own rows of dS^T, so the consumers no longer meet at a barrier before dQ.
  static constexpr bool KEYS = CONSUMER & 8;
  static constexpr int BKV = CONSUMERS * 64;
  static constexpr int threads = (CONSUMERS + 1) * hk::WARPGROUP_THREADS;
  static constexpr int PRODUCER = CONSUMERS;
  using split = hkjit_attn_hopper::register_split<CONSUMERS, TMA ? 24 : 56>;
  static constexpr int PRODUCER_REGS = split::PRODUCER;
  static constexpr int CONSUMER_REGS = split::CONSUMER;
  static constexpr int LOADERS = 32 * LOAD_WARPS;   // producer threads that issue the stage loads
  static constexpr int DQ_WG = D / 64;              // consumers that compute 64 dQ columns each
  static constexpr int DQ_FLOATS = BQ * D;          // one query block's dQ
  // dS^T buffers: two, so that a consumer's store of step t + 1 never meets the other's dQ reads of
  // step t; one with KEYS at BQ 128 (each consumer reads only its own rows, its own dQ of step t
  // retired before its next store), which is what lets 128 query rows fit shared memory.
  static constexpr int DS_BUFS = BQ == 128 ? 1 : 2;
  using args = hk::conditional_t<TMA, hkjit_attn_hopper::bwd_tma_args, hkjit_attn_hopper::bwd_ws_args>;
  using seq_t = hkjit_attn_hopper::seq_t;

  using keys_t = hk::st<T, BKV, D>;     // K, V of the block (K-major A of S^T, dP^T; N-major B of dQ)
  using q_t = hk::st<T, BQ, D>;         // Q, dO (K-major B of S^T, dP^T; N-major B of dK, dV)
  using ds_t = hk::st<T, BKV, BQ>;      // dS^T: keys x queries, the transposed A of dQ = dS K
  using s_t = hk::rt<float, 64, BQ>;    // S^T, dP^T (keys x queries)
  using o_t = hk::rt<float, 64, D>;     // dK, dV
  using dq_t = hk::rt<float, BQ, 64>;   // 64 columns of dQ (BQ 128: two 64-row blocks; dq_accumulator)
  using a_t = hk::rt_a<T, BQ>;          // P^T, dS^T as wgmma's A registers
  static_assert(sizeof(dq_t) == sizeof(s_t), "dQ takes S^T's registers at BQ 64 (dq_accumulator)");
  struct stage_t { q_t q, d_o; };
  struct keys_block { keys_t k, v; };
  // dQ partial in fragment order: float4 (consumer c, registers 4j..4j+3, thread t) at (8c + j) 128 + t,
  // so both the consumers' stores and the producer's reads are whole 512-byte warp rows. The
  // scratch accumulator has the same layout (the bulk copies are flat).
  struct dq_buf { float4 v[DQ_FLOATS / 4]; };
  // shift: k0 - (Lk - Lq) - q0, the causal diagonal of the block's first key against the stage's
  // first query (written by the producer so that no consumer register holds it across the loop).
  struct stats_t { float lse[BQ], delta[BQ]; int q0, shift; };
  // Shared memory, in this order (every part a multiple of its successor's alignment, so the
  // offsets are dynamic_smem's sum; one base pointer addresses all of it).
  struct smem_t {
    stage_t ring[STAGES];
    keys_block kv;
    ds_t ds[DS_BUFS];
    dq_buf dq[2];
    stats_t stats[STAGES];
    hk::mbarrier full[STAGES], empty[STAGES], dq_full[2], dq_empty[2];
    hk::mbarrier dq_sum;   // TMA: the last KV block's bulk load of the query block's sum
  };
  static constexpr int dynamic_smem = 1024 + STAGES * int(sizeof(stage_t)) + int(sizeof(keys_block)) +
                                      DS_BUFS * int(sizeof(ds_t)) + 2 * int(sizeof(dq_buf)) +
                                      STAGES * int(sizeof(stats_t)) + (2 * STAGES + 5) * 8;

  // The query blocks of one head that see a key of [k0, k0 + BKV): causal starts at the first
  // query that sees key k0 (query i sees key j iff j <= i + Lk - Lq).
  static __device__ __forceinline__ int first_q_block(const seq_t& s, int k0) {
    if constexpr (CAUSAL) {
      const int q = k0 - (s.lk - s.lq);
      return q > 0 ? q / BQ : 0;
    } else {
      return 0;
    }
  }

  // Step t is query block q_block(t / group) of head t % group of the KV head's group (the query
  // block outer, the heads inner). Causal walks the blocks from the last one down, so that every KV
  // block meets query block m of head h at the same step as KV block i - 1 (whose walk only goes
  // further down): waiting for i - 1's add then costs one hand-off, not the steps by which a
  // bottom-up walk (or a head-major one, under GQA) would put it behind.
  static __device__ __forceinline__ int q_block(int j, int qb0, int per_head) {
    return CAUSAL ? qb0 + per_head - 1 - j : qb0 + j;
  }

  // ---- producer ----
  template <class ST>
  static __device__ __forceinline__ void load_async(ST& t, const T* base, long long sr, int r0, int limit, int tid) {
    hkjit_attn_hopper::load_tile_async<VEC, false>(t, base, sr, r0, limit, tid);
  }

  // Where step u's dQ goes: query block m of head h (rows q0 ..), the last KV block that streams it,
  // and its semaphore (workspace) and fp32 accumulator (scratch).
  struct dq_step { int h, q0, last; int* sem; float* acc; };
  static __device__ __forceinline__ dq_step dq_step_of(const args& ga, const seq_t& s, int u, int qb0, int per_head) {
    const auto& g = ga.a;
    const int b = blockIdx.z, group = g.heads / g.kv_heads;
    const int h = blockIdx.y * group + u % group, m = q_block(u / group, qb0, per_head), q0 = m * BQ;
    // The KV blocks that stream query block m: 0 .. last (first_q_block(i) <= m).
    int last = (s.lk + BKV - 1) / BKV - 1;
    if constexpr (CAUSAL) {
      const int see = (q0 + BQ - 1 + s.lk - s.lq) / BKV;
      last = see < last ? see : last;
    }
    const long long slot = ((long long)b * g.heads + h) * ga.q_blocks + m;
    return {h, q0, last, ga.semaphores + slot, ga.dq_accum + slot * DQ_FLOATS};
  }

  // Add the consumers' dQ partial of step u (query block m of head h) into its accumulator, in
  // order; the last KV block of the query block writes dQ instead.
  static __device__ void write_dq(const args& ga, const seq_t& s, int u, int qb0, int per_head, smem_t& sm, int tid) {
    static_assert(BQ == 64, "the cp.async producer's dQ conversion walks 64 rows (BQ 128 is TMA-only)");
    dq_buf* dqb = sm.dq;
    hk::mbarrier* dq_full = sm.dq_full;
    hk::mbarrier* dq_empty = sm.dq_empty;
    const auto& g = ga.a;
    const int b = blockIdx.z, i = blockIdx.x;
    const dq_step d = dq_step_of(ga, s, u, qb0, per_head);
    const int h = d.h, q0 = d.q0, last = d.last;
    int* sem = d.sem;
    float* acc = d.acc;
    const int buf = u & 1, parity = (u >> 1) & 1;
    // Every producer thread waits on every phase (a thread that skipped one could mistake a later
    // phase of the same parity for it).
    hk::wait(dq_full[buf], parity);
    if (i != last) {
      if (tid == 0) {
        if (i > 0) {
          hkjit_attn_hopper::wait_until(sem, i);
          hkjit_attn_hopper::fence_proxy_async_global();
          hkjit_attn_hopper::bulk_add(acc, &dqb[buf], DQ_FLOATS * 4);
        } else {
          hkjit_attn_hopper::bulk_store(acc, &dqb[buf], DQ_FLOATS * 4);
        }
        hk::tma::store_commit();
        hk::tma::store_wait<0>();
        hkjit_attn_hopper::fence_proxy_async_global();
        hkjit_attn_hopper::release_add(sem, 1);
        hk::arrive(dq_empty[buf]);
      }
      return;
    }
    if (i > 0) hkjit_attn_hopper::wait_until(sem, i);
    const int r = (tid / 32) * 16 + (tid % 32) / 4, cc = (tid % 4) * 2;
    T* out = (T*)g.dq + b * g.dq_sb + h * g.dq_sh + (long long)(s.q0 + q0) * g.dq_sr;
    const float mul = g.scale;
    const bool lo = q0 + r < s.lq, hi = q0 + r + 8 < s.lq;
    T* out_lo = out + (long long)r * g.dq_sr + cc;
    T* out_hi = out_lo + 8 * g.dq_sr;
    // Two accumulator loads in flight at a time (the producer has few registers).
#pragma unroll 1
    for (int j0 = 0; j0 < 8 * DQ_WG; j0 += 2) {
      float4 y[2];
#pragma unroll
      for (int j = 0; j < 2; ++j)
        y[j] = i > 0 ? __ldcg(reinterpret_cast<const float4*>(acc) + (j0 + j) * hk::WARPGROUP_THREADS + tid)
                     : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float4 x = dqb[buf].v[(j0 + j) * hk::WARPGROUP_THREADS + tid];
        const int col = 64 * ((j0 + j) / 8) + 8 * ((j0 + j) % 8);
        if (lo) *reinterpret_cast<unsigned*>(out_lo + col) = hk::pack2<T>((x.x + y[j].x) * mul, (x.y + y[j].y) * mul);
        if (hi) *reinterpret_cast<unsigned*>(out_hi + col) = hk::pack2<T>((x.z + y[j].z) * mul, (x.w + y[j].w) * mul);
      }
    }
    hk::named_barrier(2, hk::WARPGROUP_THREADS);   // every producer thread is done polling and reading
    if (tid == 0) {
      if (i > 0) hkjit_attn_hopper::store_relaxed(sem, 0);   // the workspace's semaphores end zeroed
      hk::arrive(dq_empty[buf]);
    }
  }

  // One thread hands KV block i's dQ partial to the query block's sum: after block i - 1's add (the
  // semaphore equals i), a bulk reduction into the accumulator (block 0 stores); the shared buffer goes
  // back to the consumers once the bulk operation has read it, and the function returns once the add is
  // complete in global memory and visible to the generic accesses that follow.
  template <bool FREE = true>   // FREE: the buffer back to the consumers once read (else the caller keeps it)
  static __device__ __forceinline__ void add_partial(const dq_step& d, dq_buf& src, hk::mbarrier& empty, int i) {
    if (i > 0) {
      hkjit_attn_hopper::wait_until(d.sem, i);
      hkjit_attn_hopper::fence_proxy_async_global();
      hkjit_attn_hopper::bulk_add(d.acc, &src, DQ_FLOATS * 4);
    } else {
      hkjit_attn_hopper::bulk_store(d.acc, &src, DQ_FLOATS * 4);
    }
    hk::tma::store_commit();
    if constexpr (FREE) {
      hk::tma::store_wait_read<0>();             // shared memory read: the buffer is free
      hk::arrive(empty);
    }
    hk::tma::store_wait<0>();                    // the add is complete in global memory
    hkjit_attn_hopper::fence_proxy_async_global();
  }

  // TMA (its producer has 24 registers), the last KV block: it adds its partial by the same bulk
  // reduction as the others (a store where it is the only one), keeps the buffer, bulk-loads the sum
  // into it (one transfer) and converts it from shared memory, then frees it. (Converting straight
  // from global memory, one float4 a lane at a time, took 64 dependent round trips to L2 a query
  // block: measured on H100 as 30% of the whole backward at N2048 D128.) The bulk fp32 add is the add
  // the other variants do in registers (y + x), so dQ is the same sum, deterministic as before.
  static __device__ __forceinline__ void convert_sum_lean(const args& ga, const dq_step& d, const seq_t& s,
                                                          dq_buf& src, hk::mbarrier& empty, hk::mbarrier& sum_bar,
                                                          int lane) {
    const int i = blockIdx.x;
    if (lane == 0) {
      add_partial<false>(d, src, empty, i);
      if (i > 0) hkjit_attn_hopper::store_relaxed(d.sem, 0);   // nobody waits on it any more: zeroed
      // A fresh barrier each time, so its phase is always 0 (a count of conversions kept across
      // steps spilled the producer's 24 registers); the last one's waits are over (__syncwarp below).
      hk::init(sum_bar, 1);
      hk::fence_barrier_init();
      hk::arrive_expect_tx(sum_bar, DQ_FLOATS * 4);
      hkjit_attn_hopper::bulk_load(&src, d.acc, DQ_FLOATS * 4, sum_bar);
    }
    __syncwarp();                                // lane 0's init before the others' first try
    hk::wait(sum_bar, 0);
    const auto& g = ga.a;
    // The sum's float4 (j, t) (t: a consumer thread's fragment index) holds rows r(t) and r(t) + 8,
    // columns 64 (j / 8) + 8 (j % 8) + 2 (t % 4) = 8 j + 2 (t % 4), + 1; lane l takes t = 32 w + l,
    // w = 0 .. 3, i.e. rows 16 w + l / 4 (+ 8) of the query block. BQ 128 (D64): float4 (8 m + j, t)
    // holds rows 64 m + r(t) (+ 8), columns 8 j + 2 (t % 4).
    const int row = d.q0 + lane / 4;
    T* const out = (T*)g.dq + blockIdx.z * g.dq_sb + d.h * g.dq_sh + (long long)(s.q0 + row) * g.dq_sr + (lane % 4) * 2;
    const float mul = g.scale;
    // Rows r and r + 8 of a float4 in turn (h8): one row pointer and one bound live at a time.
#pragma unroll 1
    for (int wh = 0; wh < 8 * (BQ / 64); ++wh) {
      const int m = BQ == 64 ? 0 : wh / 8, w = BQ == 64 ? wh / 2 : (wh / 2) % 4, h8 = wh % 2;
      if (row + 64 * m + 16 * w + 8 * h8 >= s.lq) continue;
      T* const o = out + (64 * m + 16 * w + 8 * h8) * g.dq_sr;
      const float2* sum = reinterpret_cast<const float2*>(src.v + m * 8 * hk::WARPGROUP_THREADS + 32 * w + lane) + h8;
#pragma unroll 1
      for (int j = 0; j < 8 * DQ_WG; ++j) {
        const float2 y = sum[2 * j * hk::WARPGROUP_THREADS];
        *reinterpret_cast<unsigned*>(o + 8 * j) = hk::pack2<T>(y.x * mul, y.y * mul);
      }
    }
    __syncwarp();                                // every lane has read the buffer
    if (lane == 0) hk::arrive(empty);
  }

  // DQ_WARP: the same hand-off on one warp (lane 0 issues, all 32 lanes convert on the last block).
  // The shared partial goes back to the consumers as soon as the bulk operation has read it; the
  // add's completion in global memory is waited for only before the release that lets block i + 1
  // add (its bulk reduction must land on a sum that includes ours).
  static __device__ void write_dq_warp(const args& ga, const seq_t& s, int u, int qb0, int per_head, smem_t& sm,
                                       int lane) {
    dq_buf& src = sm.dq[u & 1];
    hk::mbarrier& full = sm.dq_full[u & 1];
    hk::mbarrier& empty = sm.dq_empty[u & 1];
    const auto& g = ga.a;
    const int b = blockIdx.z, i = blockIdx.x;
    const dq_step d = dq_step_of(ga, s, u, qb0, per_head);
    hk::wait(full, (u >> 1) & 1);               // every lane waits on every phase (as above)
    if (i != d.last) {
      if (lane == 0) {
        add_partial(d, src, empty, i);
        hkjit_attn_hopper::release_add(d.sem, 1);
      }
      __syncwarp();
      return;
    }
    if constexpr (TMA) {
      convert_sum_lean(ga, d, s, src, empty, sm.dq_sum, lane);
      return;
    } else {
      static_assert(BQ == 64, "the cp.async producer's dQ conversion walks 64 rows (BQ 128 is TMA-only)");
    }
    if (i > 0) hkjit_attn_hopper::wait_until(d.sem, i);
    T* out = (T*)g.dq + b * g.dq_sb + d.h * g.dq_sh + (long long)(s.q0 + d.q0) * g.dq_sr;
    const float mul = g.scale;
    // The partial's float4 (j, t) (t: a consumer thread's fragment index) holds row r(t) and r(t) + 8,
    // columns 64 (j / 8) + 8 (j % 8) + 2 (t % 4), + 1; lane l takes t = 32 w + l, w = 0 .. 3.
#pragma unroll 1
    for (int jw = 0; jw < 8 * DQ_WG * 4; ++jw) {
      const int j = jw / 4, t = (jw % 4) * 32 + lane, idx = j * hk::WARPGROUP_THREADS + t;
      const float4 y = i > 0 ? __ldcg(reinterpret_cast<const float4*>(d.acc) + idx) : make_float4(0.f, 0.f, 0.f, 0.f);
      const float4 x = src.v[idx];
      const int r = d.q0 + (t / 32) * 16 + (t % 32) / 4;
      T* o = out + (long long)(r - d.q0) * g.dq_sr + 64 * (j / 8) + 8 * (j % 8) + (t % 4) * 2;
      if (r < s.lq) *reinterpret_cast<unsigned*>(o) = hk::pack2<T>((x.x + y.x) * mul, (x.y + y.y) * mul);
      if (r + 8 < s.lq)
        *reinterpret_cast<unsigned*>(o + 8 * g.dq_sr) = hk::pack2<T>((x.z + y.z) * mul, (x.w + y.w) * mul);
    }
    __syncwarp();                                // every lane is done polling and reading
    if (lane == 0) {
      if (i > 0) hkjit_attn_hopper::store_relaxed(d.sem, 0);   // the workspace's semaphores end zeroed
      hk::arrive(empty);
    }
  }

  // Stage st <- step t's Q, dO, LSE and Delta: thread `me`'s share of a 128-thread split (a loading
  // thread of fewer calls this once per share it stands in for).
  static __device__ __forceinline__ void issue_stage(const args& ga, const seq_t& s, int h, int q0, stage_t& x,
                                                     stats_t& z, int me) {
    const auto& g = ga.a;
    const int b = blockIdx.z;
    const T* qb = (const T*)g.q + b * g.q_sb + h * g.q_sh + (long long)s.q0 * g.q_sr;
    const T* db = (const T*)g.d_o + b * g.do_sb + h * g.do_sh + (long long)s.q0 * g.do_sr;
    load_async(x.q, qb, g.q_sr, q0, s.lq, me);
    load_async(x.d_o, db, g.do_sr, q0, s.lq, me);
    static_assert(BQ == 64, "a 128-thread split: LSE (64 rows) on threads 0-63, Delta on 64-127 (BQ 128 is TMA-only)");
    // LSE (threads 0-63) and Delta (64-127) of the block's rows; rows past the sequence read 0,
    // which with their zero Q and dO rows gives P^T dO = 0 and dS = 0.
    const int r = me % BQ, row = q0 + r;
    const bool ok = row < s.lq;
    const long long at = s.q0 + (ok ? row : 0);
    if (me < BQ)
      hkjit_attn_hopper::cp_async<4>(&z.lse[r], g.lse + b * g.lse_sb + h * g.lse_sh + at * g.lse_sr, ok);
    else
      hkjit_attn_hopper::cp_async<4>(&z.delta[r], g.delta + b * g.delta_sb + h * g.delta_sh + at * g.delta_sr, ok);
    if (me == 0) {
      z.q0 = q0;
      z.shift = blockIdx.x * BKV - (s.lk - s.lq) - q0;
    }
  }

  // TMA, warp 0: lane 0 writes the stage's q0 / shift, announces Q's and dO's bytes on full[s] (its
  // arrival) and issues D / 64 boxes of each; rows past n_q come back as zeros (TMA's out-of-bounds
  // fill), as the cp.async path writes them. LSE and Delta of the stage's 64 rows go by 4-byte
  // cp.async from the 32 lanes, zero past the sequence (a tensor map would need their head stride
  // 16-byte aligned, which a ragged n_q breaks), each lane's arrival landing with its copies: full[s]
  // completes on 33 arrivals and the bytes.
  static __device__ void produce_tma(const args& ga, const seq_t& s, int qb0, int per_head, smem_t& sm, int lane) {
    const auto& g = ga.a;
    const int b = blockIdx.z, kh = blockIdx.y, group = g.heads / g.kv_heads, n = group * per_head;
    if (lane == 0) {
      hk::tma::prefetch(ga.q_map);
      hk::tma::prefetch(ga.do_map);
    }
    int st = 0, phase = 0;
#pragma unroll 1
    for (int t = 0; t < n; ++t) {
      hk::wait(sm.empty[st], phase ^ 1);              // fresh barriers pass parity 1 at once
      const int h = kh * group + t % group, q0 = q_block(t / group, qb0, per_head) * BQ;
      stats_t& z = sm.stats[st];
      hk::mbarrier& full = sm.full[st];
      if (lane == 0) {
        z.q0 = q0;
        z.shift = blockIdx.x * BKV - (s.lk - s.lq) - q0;
        hk::arrive_expect_tx(full, 2 * sizeof(q_t));
        hkjit_attn_hopper::tma_load_tile(sm.ring[st].q, ga.q_map, q0, h, b, full);
        hkjit_attn_hopper::tma_load_tile(sm.ring[st].d_o, ga.do_map, q0, h, b, full);
      }
      const float* lse = g.lse + b * g.lse_sb + h * g.lse_sh;
      const float* delta = g.delta + b * g.delta_sb + h * g.delta_sh;
#pragma unroll
      for (int r = lane; r < BQ; r += 32) {
        const bool ok = q0 + r < s.lq;
        const long long row = ok ? q0 + r : 0;
        hkjit_attn_hopper::cp_async<4>(&z.lse[r], lse + row * g.lse_sr, ok);
        hkjit_attn_hopper::cp_async<4>(&z.delta[r], delta + row * g.delta_sr, ok);
      }
      hkjit_attn_hopper::arrive_async(full);
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
    hkjit_attn_hopper::cp_async_wait_all();           // nothing in flight when this warp exits
  }

  static __device__ void produce(const args& ga, const seq_t& s, int qb0, int per_head, smem_t& sm) {
    stage_t* ring = sm.ring;
    stats_t* stats = sm.stats;
    hk::mbarrier* full = sm.full;
    hk::mbarrier* empty = sm.empty;
    const auto& g = ga.a;
    const int kh = blockIdx.y, group = g.heads / g.kv_heads;
    const int tid = hk::warpgroup_thread(), n = group * per_head;
    int st = 0, phase = 0;
    if constexpr (DQ_WARP) {
      // TMA: the warp index through a shuffle, so that ptxas knows it is warp-uniform and keeps the
      // per-warp loops' counters and addresses in uniform registers (the producer has 24 others).
      const int warp = TMA ? __shfl_sync(0xffffffffu, tid / 32, 0) : tid / 32;
      if (warp == 3) {
        for (int t = 0; t < n; ++t) write_dq_warp(ga, s, t, qb0, per_head, sm, tid % 32);
        return;
      }
      if (warp >= LOAD_WARPS) return;
      if constexpr (TMA) {
        produce_tma(ga, s, qb0, per_head, sm, tid % 32);
      } else {
        for (int t = 0; t < n; ++t) {
          hk::wait(empty[st], phase ^ 1);           // fresh barriers pass parity 1 at once
          const int h = kh * group + t % group, q0 = q_block(t / group, qb0, per_head) * BQ;
#pragma unroll 1
          for (int v = tid; v < hk::WARPGROUP_THREADS; v += LOADERS)
            issue_stage(ga, s, h, q0, ring[st], stats[st], hk::opaque(v));   // addresses stay inside the share
          hkjit_attn_hopper::arrive_async(full[st]);
          hk::arrive(full[st]);
          if (++st == STAGES) { st = 0; phase ^= 1; }
        }
        hkjit_attn_hopper::cp_async_wait_all();     // nothing in flight when this warp exits
      }
    } else {
      produce_all(ga, s, qb0, per_head, sm);
    }
  }

  // All four warps load (cp.async) and, one step behind, hand off dQ (write_dq): dq_warp=0, the cp.async
  // producer's default for GQA.
  static __device__ void produce_all(const args& ga, const seq_t& s, int qb0, int per_head, smem_t& sm) {
    stage_t* ring = sm.ring;
    stats_t* stats = sm.stats;
    hk::mbarrier* full = sm.full;
    hk::mbarrier* empty = sm.empty;
    const auto& g = ga.a;
    const int kh = blockIdx.y, group = g.heads / g.kv_heads;
    const int tid = hk::warpgroup_thread(), n = group * per_head;
    int st = 0, phase = 0;
    for (int t = 0; t <= n; ++t) {
      if (t < n) {
        hk::wait(empty[st], phase ^ 1);               // fresh barriers pass parity 1 at once
        const int h = kh * group + t % group, q0 = q_block(t / group, qb0, per_head) * BQ;
        issue_stage(ga, s, h, q0, ring[st], stats[st], hk::opaque(tid));   // addresses stay inside the iteration
        hkjit_attn_hopper::arrive_async(full[st]);
        hk::arrive(full[st]);
        if (++st == STAGES) { st = 0; phase ^= 1; }
      }
      if (t > 0) write_dq(ga, s, t - 1, qb0, per_head, sm, tid);
    }
  }

  // dS^T (this warpgroup's 64 keys x BQ queries, wgmma A registers) into rows [64 c, 64 c + 64) of
  // dst. Register (s, i) is the pair (row r + 8 (i & 1), columns 16 s + c + 8 (i >> 1), + 1).
  // STSM: one stmatrix per k16 step; lane l addresses row 16 w + l % 8 + 8 ((l / 8) & 1) of its
  // warp's 16 rows, columns 16 s + 8 (l / 16) (a 16-byte piece, kept whole by the swizzle).
  static __device__ __forceinline__ void store_ds(ds_t& dst, const a_t& ds, int consumer) {
    if constexpr (STSM) {
      const int lane = threadIdx.x % 32;
      const int r = consumer * 64 + (s_t::row(0, 0) & ~15) + lane % 8 + 8 * ((lane / 8) & 1), h = lane / 16;
      const unsigned base = hk::smem_addr(dst.data);
#pragma unroll
      for (int s16 = 0; s16 < BQ / 16; ++s16)
        hkjit_attn_hopper::stmatrix_x4(base + ds_t::offset(r, 16 * s16 + 8 * h), ds.v[s16]);
    } else {
      const int r = consumer * 64 + s_t::row(0, 0), c = s_t::col(0);
#pragma unroll
      for (int s16 = 0; s16 < BQ / 16; ++s16)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          *reinterpret_cast<unsigned*>(reinterpret_cast<char*>(dst.data) +
                                       ds_t::offset(r + 8 * (e & 1), 16 * s16 + c + 8 * (e >> 1))) = ds.v[s16][e];
    }
  }

  // dS^T of this step in place for dQ: KEYS, this warpgroup's own rows; else both consumers' halves.
  static __device__ __forceinline__ void sync_ds(int consumer) {
    if constexpr (KEYS)
      hk::named_barrier(3 + consumer, hk::WARPGROUP_THREADS);
    else
      hk::named_barrier(1, CONSUMERS * hk::WARPGROUP_THREADS);
  }

  // dQ's accumulator. BQ 64: S^T's registers, dead once P^T and dS^T are packed (the same 64 x 64 layout;
  // an accumulator of its own, the same count, made ptxas serialise every wgmma, C7512, and spill: 13.5 4
  // bytes, with EARLY_DV 68-76 bytes, NVRTC 13.0 and 13.5). BQ 128: its own (128 x 64 over the 64 x 128
  // S^T made ptxas serialise every wgmma, C7511 "insufficient register resources", NVRTC 13.0 and 13.5).
  static __device__ __forceinline__ dq_t& dq_accumulator(s_t& sc, dq_t& own) {
    if constexpr (BQ == 64) return *reinterpret_cast<dq_t*>(&sc);
    else return own;
  }

  // dQ = dS K into dq (S^T's registers at BQ 64): KEYS, over this warpgroup's keys [64c, 64c + 64) (every
  // consumer); else columns [64c, 64c + 64) over all 128 keys (consumers below DQ_WG; the others
  // commit an empty group where EMPTY_GROUP, so the waits that follow count alike). Operands behind
  // opaque offsets.
  template <bool EMPTY_GROUP>
  static __device__ __forceinline__ void issue_dq(dq_t& dq, ds_t& dst, keys_block& kv, int consumer) {
    if (KEYS || consumer < DQ_WG) {
      const int o = hk::opaque(0);
      ds_t& a = *reinterpret_cast<ds_t*>(reinterpret_cast<char*>(&dst) + o);
      keys_t& kk = *reinterpret_cast<keys_t*>(reinterpret_cast<char*>(&kv.k) + o);
      if constexpr (KEYS && BQ == 128) {
        // Query rows [64 h, 64 h + 64) of dQ from column chunk h of dS^T: both halves, one commit group.
        using half_t = hk::rt<float, 64, 64>;
        hk::mma_fence();
#pragma unroll
        for (int k = 0; k < 64 / 16; ++k)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            hk::detail::mma_step<true, true>(*reinterpret_cast<half_t*>(dq.v[h]),
                                             hk::subtile_rows<64>(hk::subtile_cols<64>(a, h), consumer),
                                             hk::subtile_rows<64>(kk, consumer), k, k > 0 ? 1 : 0);
        hk::mma_commit();
      } else if constexpr (KEYS)
        hk::mma_AtB(dq, hk::subtile_rows<64>(a, consumer), hk::subtile_rows<64>(kk, consumer), false);
      else
        hk::mma_AtB(dq, a, hk::subtile_cols<64>(kk, consumer), false);
    } else if constexpr (EMPTY_GROUP) {
      hk::mma_commit();
    }
  }

  // The step's dQ partial (in dq, complete) into the shared buffer the producer adds. KEYS: consumer 1
  // leaves its partial there and arrives; consumer 0 waits for it and writes the sum in place (the
  // same order every run: the same bits). The hand-off barrier alternates with the buffer: consumer 1
  // may arrive for step t + 1 before consumer 0 waited at step t, never for step t + 2 (its buffer is
  // freed only after consumer 0's step t).
  static __device__ __forceinline__ void put_dq(dq_buf& dqo, dq_t& dq, int consumer, int t, int tid) {
    if constexpr (KEYS) {
      hk::fence_operand(dq);
      // float4 (block m, registers 4j..4j+3, thread t) at (8 m + j) 128 + t
      float4* out = dqo.v + tid;
      const int bar = 5 + (t & 1);
      if (consumer == 1) {
#pragma unroll
        for (int m = 0; m < dq_t::blocks; ++m)
#pragma unroll
          for (int j = 0; j < 8; ++j)
            out[(8 * m + j) * hk::WARPGROUP_THREADS] =
                make_float4(dq.v[m][4 * j], dq.v[m][4 * j + 1], dq.v[m][4 * j + 2], dq.v[m][4 * j + 3]);
        hk::named_barrier_arrive(bar, CONSUMERS * hk::WARPGROUP_THREADS);
      } else {
        hk::named_barrier(bar, CONSUMERS * hk::WARPGROUP_THREADS);
#pragma unroll
        for (int m = 0; m < dq_t::blocks; ++m)
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            float4* o = out + (8 * m + j) * hk::WARPGROUP_THREADS;
            const float4 x = *o;
            *o = make_float4(dq.v[m][4 * j] + x.x, dq.v[m][4 * j + 1] + x.y, dq.v[m][4 * j + 2] + x.z,
                             dq.v[m][4 * j + 3] + x.w);
          }
        hk::fence_proxy_async();                      // read by the bulk copy (async proxy)
      }
      return;
    }
    if (consumer < DQ_WG) {
      hk::fence_operand(dq);
      float4* out = dqo.v + consumer * 8 * hk::WARPGROUP_THREADS + tid;
#pragma unroll
      for (int j = 0; j < 8; ++j)
        out[j * hk::WARPGROUP_THREADS] = make_float4(dq.v[0][4 * j], dq.v[0][4 * j + 1], dq.v[0][4 * j + 2],
                                                     dq.v[0][4 * j + 3]);
      hk::fence_proxy_async();                        // read by the bulk copy (async proxy)
    }
  }

  // WAITS: one step after S^T and dP^T were issued (in that order), with the tensor pipe kept busy
  // (FlashAttention-3's order, item 3 of docs/notes/attention_hopper_bwd_vs_fa3.md): P^T while dP^T
  // runs, dV issued once dS^T is formed and kept in flight across the dS^T store and the consumers'
  // barrier, dQ issued with dV still running, dK after dQ, and the dQ partial stored while dK runs.
  // EARLY_DV: dV issued as soon as P^T is packed, before the dP^T wait, so dS^T is formed while dV
  // runs. Commit groups retire in order, so each wait <= 1 names the older of the two in flight.
  // P^T stays fp32 in S^T's registers until dS^T is formed. The stage is released after dK, its
  // last reader (of Q).
  static __device__ __forceinline__ void step_overlapped(const hkjit_attn_hopper::bwd_args& g, s_t& sc, s_t& dp,
                                                         o_t& dk, o_t& dv, stage_t& x, const stats_t& z, ds_t& dst,
                                                         keys_block& kv, dq_buf& dqo, hk::mbarrier& empty,
                                                         hk::mbarrier& dq_full, hk::mbarrier& dq_empty, int t,
                                                         int consumer, int tid) {
    const float sl2 = g.scale_log2;
    hk::mma_wait<1>();                                // S^T in; dP^T running
    hk::fence_operand(sc);
    const int first = z.shift + consumer * 64 + s_t::row(0, 0) - s_t::col(0);
    a_t p, ds;
#pragma unroll
    for (int k = 0; k < s_t::regs; k += 2) {
      const int col = s_t::col(k);
      const float2 l = *reinterpret_cast<const float2*>(&z.lse[col]);
      float v0 = sc.v[0][k] * sl2 - l.x * hkjit_attn_hopper::LOG2E;
      float v1 = sc.v[0][k + 1] * sl2 - l.y * hkjit_attn_hopper::LOG2E;
      if (CAUSAL) {
        const int c = 8 * (k / 4) - 8 * ((k % 4) / 2);
        v0 = c < first ? hk::neg_inf() : v0;
        v1 = c + 1 < first ? hk::neg_inf() : v1;
      }
      sc.v[0][k] = hk::fast_exp2(v0);                 // P^T in fp32, over S^T
      sc.v[0][k + 1] = hk::fast_exp2(v1);
      if constexpr (EARLY_DV) p.set_pair(k, sc.v[0][k], sc.v[0][k + 1]);
    }
    if constexpr (EARLY_DV) {
      hk::mma_AB(dv, p, x.d_o, true);                 // dV += P^T dO, in flight until dQ is issued
      hk::mma_wait<1>();                              // dP^T in; dV running
    } else {
      hk::mma_wait<0>();                              // dP^T in
    }
    hk::fence_operand(dp);
#pragma unroll
    for (int k = 0; k < s_t::regs; k += 2) {
      const float2 d = *reinterpret_cast<const float2*>(&z.delta[s_t::col(k)]);
      if constexpr (!EARLY_DV) p.set_pair(k, sc.v[0][k], sc.v[0][k + 1]);
      ds.set_pair(k, sc.v[0][k] * (dp.v[0][k] - d.x), sc.v[0][k + 1] * (dp.v[0][k + 1] - d.y));
    }
    if constexpr (!EARLY_DV) hk::mma_AB(dv, p, x.d_o, true);   // dV += P^T dO, in flight until dQ is issued
    store_ds(dst, ds, consumer);
    hk::fence_proxy_async();
    sync_ds(consumer);
    [[maybe_unused]] dq_t own;                       // (BQ 128: dQ's own accumulator; dq_accumulator)
    dq_t& dq = dq_accumulator(sc, own);
    issue_dq<true>(dq, dst, kv, consumer);
    hk::mma_wait<1>();                                // dV in (P^T's registers free); dQ running
    hk::fence_operand(dv);
    hk::fence_operand(p);
    hk::mma_AB(dk, ds, x.q, true);                    // dK += dS^T Q
    hk::mma_wait<1>();                                // dQ in; dK running
    // The dQ partial to the producer (the buffer of step t - 2 must have been added).
    hk::wait(dq_empty, ((t >> 1) & 1) ^ 1);
    put_dq(dqo, dq, consumer, t, tid);
    hk::arrive(dq_full);
    hk::mma_wait<0>();                                // dK in
    hk::fence_operand(dk);
    hk::fence_operand(ds);
    if (tid % 32 == 0) hk::arrive(empty);             // this warp's wgmma reads of the stage are done
  }

  // ---- consumers ----
  static __device__ void consume(const args& ga, const seq_t& s, int per_head, smem_t& sm, int consumer) {
    stage_t* ring = sm.ring;
    const stats_t* stats = sm.stats;
    keys_block& kv = sm.kv;
    ds_t* dsb = sm.ds;
    dq_buf* dqb = sm.dq;
    hk::mbarrier* full = sm.full;
    hk::mbarrier* empty = sm.empty;
    hk::mbarrier* dq_full = sm.dq_full;
    hk::mbarrier* dq_empty = sm.dq_empty;
    const auto& g = ga.a;
    const int b = blockIdx.z, kh = blockIdx.y, group = g.heads / g.kv_heads, tid = hk::warpgroup_thread();
    const int k0 = blockIdx.x * BKV, key0 = k0 + consumer * 64;   // the block's and this warpgroup's first key
    if (consumer == 0) {
      const T* kb = (const T*)g.k + b * g.k_sb + kh * g.k_sh + (long long)s.k0 * g.k_sr;
      hkjit_attn_hopper::load_tile<VEC>(kv.k, kb, g.k_sr, k0, s.lk, 0, tid);
    } else {
      const T* vb = (const T*)g.v + b * g.v_sb + kh * g.v_sh + (long long)s.k0 * g.v_sr;
      hkjit_attn_hopper::load_tile<VEC>(kv.v, vb, g.v_sr, k0, s.lk, 0, tid);
    }
    hk::fence_proxy_async();
    hk::named_barrier(1, CONSUMERS * hk::WARPGROUP_THREADS);

    const float sl2 = g.scale_log2;
    o_t dk, dv;
    hk::map(dk, [](float) { return 0.f; });
    hk::map(dv, [](float) { return 0.f; });
    int st = 0, phase = 0;
    const int n = group * per_head;
    for (int t = 0; t < n; ++t) {
      hk::wait(full[st], phase);
      // cp.async wrote Q and dO through the generic proxy; wgmma reads through the async one (TMA
      // writes through it: no fence; the stats are read by plain loads either way)
      if constexpr (!TMA) hk::fence_proxy_async();
      stage_t& x = ring[st];
      const stats_t& z = stats[st];
      const int q0 = z.q0;
      // K and V's descriptors are loop-invariant; hoisted, they would hold registers for the whole
      // loop. Recomputed from an opaque offset, they cost an add each step.
      keys_block& m = *reinterpret_cast<keys_block*>(reinterpret_cast<char*>(&kv) + hk::opaque(0));
      s_t sc, dp;
      hkjit_attn_hopper::mma_ABt_rows(sc, m.k, consumer * 64, x.q);
      hkjit_attn_hopper::mma_ABt_rows(dp, m.v, consumer * 64, x.d_o);
      if constexpr (WAITS) {
        step_overlapped(g, sc, dp, dk, dv, x, z, dsb[t & (DS_BUFS - 1)], kv, dqb[t & 1], empty[st], dq_full[t & 1],
                        dq_empty[t & 1], t, consumer, tid);
        if (++st == STAGES) { st = 0; phase ^= 1; }
        continue;
      }
      hk::mma_wait<0>();
      hk::fence_operand(sc);
      hk::fence_operand(dp);
      // P^T and dS^T pair by pair, straight into A registers. Causal, branch-free: key > query +
      // shift is masked, i.e. (key row r + 8h, query column c0 + 8j + e of this thread) is masked
      // iff 8j + e - 8h < first (recomputed per step from the stage's shift: kept across the loop,
      // it was the register that made the D128 causal consumer spill).
      const int first = z.shift + consumer * 64 + s_t::row(0, 0) - s_t::col(0);
      a_t p, ds;
#pragma unroll
      for (int k = 0; k < s_t::regs; k += 2) {
        const int col = s_t::col(k);                   // query q0 + col (and + 1)
        const float2 l = *reinterpret_cast<const float2*>(&z.lse[col]);
        const float2 d = *reinterpret_cast<const float2*>(&z.delta[col]);
        float v0 = sc.v[0][k] * sl2 - l.x * hkjit_attn_hopper::LOG2E;
        float v1 = sc.v[0][k + 1] * sl2 - l.y * hkjit_attn_hopper::LOG2E;
        if (CAUSAL) {
          const int c = 8 * (k / 4) - 8 * ((k % 4) / 2);   // 8j - 8h
          v0 = c < first ? hk::neg_inf() : v0;
          v1 = c + 1 < first ? hk::neg_inf() : v1;
        }
        const float p0 = hk::fast_exp2(v0), p1 = hk::fast_exp2(v1);
        p.set_pair(k, p0, p1);
        ds.set_pair(k, p0 * (dp.v[0][k] - d.x), p1 * (dp.v[0][k + 1] - d.y));
      }
      hk::mma_AB(dv, p, x.d_o, true);                 // dV += P^T dO
      hk::mma_AB(dk, ds, x.q, true);                  // dK += dS^T Q
      // dS^T to shared memory (rows = this warpgroup's keys) while those run.
      ds_t& dst = dsb[t & (DS_BUFS - 1)];
      store_ds(dst, ds, consumer);
      hk::fence_proxy_async();
      // dV and dK done before dQ starts: their A registers (P^T, dS^T) then die, which makes room
      // for dQ's accumulators.
      hk::mma_wait<0>();
      hk::fence_operand(dv);
      hk::fence_operand(dk);
      hk::fence_operand(p);
      hk::fence_operand(ds);
      sync_ds(consumer);
      [[maybe_unused]] dq_t own;
      dq_t& dq = dq_accumulator(sc, own);             // BQ 64: S^T is dead, its registers take dQ
      issue_dq<false>(dq, dst, kv, consumer);
      hk::mma_wait<0>();
      if (tid % 32 == 0) hk::arrive(empty[st]);      // this warp's wgmma reads of the stage are done
      // The dQ partial to the producer (the buffer of step t - 2 must have been added).
      hk::wait(dq_empty[t & 1], ((t >> 1) & 1) ^ 1);
      put_dq(dqb[t & 1], dq, consumer, t, tid);
      hk::arrive(dq_full[t & 1]);
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
    T* dkb = (T*)g.dk + b * g.dk_sb + kh * g.dk_sh + (long long)s.k0 * g.dk_sr;
    T* dvb = (T*)g.dv + b * g.dv_sb + kh * g.dv_sh + (long long)s.k0 * g.dv_sr;
    hkjit_attn_hopper::store_rows(dkb, g.dk_sr, dk, g.scale, key0, s.lk);
    hkjit_attn_hopper::store_rows(dvb, g.dv_sr, dv, 1.f, key0, s.lk);
  }

  // The dynamic shared memory rounded up to 1024 bytes (the swizzle atom). TMA: by a byte offset on
  // the shared array itself, so the compiler still knows every structure below is in shared memory
  // (LDS / STS with 32-bit addresses; rounded through an integer, the pointer is generic, and stats,
  // dS^T and dQ accesses become LD.E / ST.E with 64-bit addresses). Kept to the TMA variant, whose
  // consumers have the 240 registers it takes (at 224 it spilled 8 bytes).
  static __device__ __forceinline__ smem_t& aligned_smem(unsigned char* raw) {
    if constexpr (TMA) {
      return *reinterpret_cast<smem_t*>(raw + ((1024u - (hk::smem_addr(raw) & 1023u)) & 1023u));
    } else {
      unsigned long long base = (reinterpret_cast<unsigned long long>(raw) + 1023) & ~1023ull;
      return *reinterpret_cast<smem_t*>(base);
    }
  }

  static __device__ void run(const args& ga) {
    const auto& g = ga.a;
    extern __shared__ unsigned char smem_raw[];
    smem_t& sm = aligned_smem(smem_raw);
    hk::mbarrier* full = sm.full;
    hk::mbarrier* empty = sm.empty;
    hk::mbarrier* dq_full = sm.dq_full;
    hk::mbarrier* dq_empty = sm.dq_empty;
    const seq_t s = hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, blockIdx.z);
    const int k0 = blockIdx.x * BKV;
    if (k0 >= s.lk) return;                                     // varlen: this sequence is shorter
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        // each loading thread: its cp.asyncs' arrival, its own; TMA: the 32 lanes' cp.async arrivals
        // and lane 0's (with the bytes)
        hk::init(full[i], TMA ? 32 + 1 : 2 * LOADERS);
        hk::init(empty[i], CONSUMERS * 4);              // one arrival per consumer warp
      }
      for (int i = 0; i < 2; ++i) {
        hk::init(dq_full[i], CONSUMERS * hk::WARPGROUP_THREADS);
        hk::init(dq_empty[i], 1);
      }
      hk::fence_barrier_init();
    }
    __syncthreads();
    const int qb0 = first_q_block(s, k0), nqb = (s.lq + BQ - 1) / BQ;
    const int per_head = nqb > qb0 ? nqb - qb0 : 0;
    // TMA (consumers at 240 registers): the warpgroup index through a shuffle, so that ptxas knows it
    // is warp-uniform and keeps each wgmma descriptor's arithmetic on the uniform datapath (item 2(b)
    // of docs/notes/attention_hopper_bwd_vs_fa3.md: at 224 registers this spilled 28 bytes).
    const int wg = TMA ? __shfl_sync(0xffffffffu, hk::warpgroup_id(), 0) : hk::warpgroup_id();
    if (wg == PRODUCER) {
      hk::setmaxnreg_dec<PRODUCER_REGS>();
      produce(ga, s, qb0, per_head, sm);
    } else {
      hk::setmaxnreg_inc<CONSUMER_REGS>();
      consume(ga, s, per_head, sm, wg);
    }
  }
};
