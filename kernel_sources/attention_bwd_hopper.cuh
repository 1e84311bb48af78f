#pragma once
// attention_bwd_hopper.cuh: the attention backward on Hopper (sm_90a), deterministic (no atomics).
//
// With c = scale, P = exp(c Q K^T - LSE) (masked as in the forward), dO the output gradient:
//   Delta = rowsum(dO o O)      dV = P^T dO      dP = dO V^T      dS = P o (dP - Delta)
//   dQ = c dS K                 dK = c dS^T Q    (GQA: dK, dV summed over the query heads of a KV head)
// Two kernels, each the only writer of what it writes (the CDNA half's split):
//   attention_bwd_dq_hopper    one block per (64 x CONSUMERS query rows, head, batch): Delta (for
//                              the other kernel) and dQ; a producer warpgroup streams K and V blocks;
//   attention_bwd_dkdv_hopper  one block per (64 x CONSUMERS keys, KV head, batch): dK and dV; a
//                              producer warpgroup streams the Q, dO, LSE and Delta blocks of every
//                              query head of the group, in order (a deterministic GQA sum).
// Every product is a wgmma. The first two of each step read both operands from shared memory
// (S = Q K^T and dP = dO V^T, or their transposes S^T = K Q^T and dP^T = V dO^T); the others take
// their A operand from registers (wgmma's RS form): P, dS (or P^T, dS^T) are computed in the
// accumulator layout, which packed to 16 bits is wgmma's A-register layout, so
//   dq kernel:    dQ += dS K                 (A = dS in registers, B = K: keys x D, D contiguous)
//   dkdv kernel:  dV += P^T dO, dK += dS^T Q (A in registers, B = dO / Q: queries x D)
// and neither P nor dS ever goes through shared memory. Scores are in base-2 units: P =
// exp2(S * c log2(e) - LSE log2(e)), one FMA and one ex2 per score. Queries past the sequence get
// LSE = +inf (P = 0), so only causal diagonals and the ragged key tail are masked explicitly.
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
  float* delta;              // written by the dq kernel, read by the dkdv kernel
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

constexpr float LOG2E = 1.4426950408889634f;

// LSE (natural log) of query row `row` in base 2; rows past the sequence and rows that see no
// key (LSE = -inf) get +inf, so that every one of their probabilities is exp2(-inf) = 0.
__device__ __forceinline__ float lse_base2(const float* lse, long long sr, int row, int rows) {
  const float x = row < rows ? lse[(long long)row * sr] : hk::neg_inf();
  return x == hk::neg_inf() ? -hk::neg_inf() : x * LOG2E;
}

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

}  // namespace hkjit_attn_hopper

// ---- dQ (and Delta) --------------------------------------------------------------------------------
// Warpgroup CONSUMERS is the producer: K and V blocks of BKV keys into a STAGES-deep ring (full[s]:
// 128 producer arrivals; empty[s]: one arrival per consumer warp, after its wgmma reads are done).
// Each consumer owns 64 query rows: Q and dO in shared memory, Delta and LSE in registers (rows r
// and r + 8 of the thread), and per KV block S = Q K^T and dP = dO V^T (issued back to back), P
// and dS in registers, dQ += dS K.
template <class T, int D, int BKV, int CONSUMERS, int STAGES, bool CAUSAL, bool VARLEN, int VEC>
struct attention_bwd_dq_hopper {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BKV == 64 || BKV == 128, "KV block: 64 or 128 keys");
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "1 or 2 consumer warpgroups");
  static constexpr int BQ = CONSUMERS * 64;
  static constexpr int threads = (CONSUMERS + 1) * hk::WARPGROUP_THREADS;
  static constexpr int PRODUCER = CONSUMERS;
  static constexpr int PRODUCER_REGS = hkjit_attn_hopper::register_split<CONSUMERS, 56>::PRODUCER;
  static constexpr int CONSUMER_REGS = hkjit_attn_hopper::register_split<CONSUMERS, 56>::CONSUMER;
  using args = hkjit_attn_hopper::bwd_args;
  using seq_t = hkjit_attn_hopper::seq_t;

  using rows_t = hk::st<T, 64, D>;      // Q, dO: 64 query rows x D (K-major A of S and dP)
  using kv_t = hk::st<T, BKV, D>;       // K, V: keys x D (K-major B of S, dP; N-major B of dQ += dS K)
  using s_t = hk::rt<float, 64, BKV>;   // S, dP
  using o_t = hk::rt<float, 64, D>;     // dQ
  using a_t = hk::rt_a<T, BKV>;         // dS as wgmma's A registers
  struct stage_t { kv_t k, v; };
  struct consumer_t { rows_t q, d_o; };
  static constexpr int dynamic_smem = 1024 + STAGES * int(sizeof(stage_t)) + CONSUMERS * int(sizeof(consumer_t)) +
                                      CONSUMERS * 64 * 4 + 2 * STAGES * 8;

  // KV blocks the block's rows [row0, row0 + BQ) need: causal stops after the last row's diagonal.
  static __device__ __forceinline__ int kv_blocks(const seq_t& s, int row0) {
    int keys = s.lk;
    if constexpr (CAUSAL) {
      const int last = row0 + BQ - 1 < s.lq - 1 ? row0 + BQ - 1 : s.lq - 1;
      const int see = last + s.lk - s.lq + 1;
      keys = see < keys ? see : keys;
    }
    return keys > 0 ? (keys + BKV - 1) / BKV : 0;
  }

  static __device__ void produce(const args& g, const seq_t& s, int blocks, stage_t* ring, hk::mbarrier* full,
                                 hk::mbarrier* empty) {
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (g.heads / g.kv_heads);
    const T* kb = (const T*)g.k + b * g.k_sb + kh * g.k_sh + (long long)s.k0 * g.k_sr;
    const T* vb = (const T*)g.v + b * g.v_sb + kh * g.v_sh + (long long)s.k0 * g.v_sr;
    const int tid = hk::warpgroup_thread();
    int st = 0, phase = 0;
    for (int j = 0; j < blocks; ++j) {
      hk::wait(empty[st], phase ^ 1);                 // fresh barriers pass parity 1 at once
      // opaque: the address arithmetic stays inside the iteration (hoisted, it spills at 56 registers)
      const int me = hk::opaque(tid);
      hkjit_attn_hopper::load_tile<VEC, 2>(ring[st].k, kb, g.k_sr, j * BKV, s.lk, 0, me);
      hkjit_attn_hopper::load_tile<VEC, 2>(ring[st].v, vb, g.v_sr, j * BKV, s.lk, 0, me);
      hk::fence_proxy_async();
      hk::arrive(full[st]);
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
  }

  // Delta = rowsum(dO o O) of this warpgroup's 64 rows (two threads a row, D / 2 columns each),
  // written to global memory for the dkdv kernel and to `out` for this kernel.
  static __device__ void row_delta(const args& g, const seq_t& s, int row0, float* out, int tid) {
    const int b = blockIdx.z, h = blockIdx.y, r = tid / 2, half = tid % 2, row = row0 + r;
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
    if (half == 0) {
      out[r] = acc;
      if (row < s.lq) g.delta[b * g.delta_sb + h * g.delta_sh + (long long)(s.q0 + row) * g.delta_sr] = acc;
    }
  }

  static __device__ void consume(const args& g, const seq_t& s, int blocks, stage_t* ring, consumer_t& mine,
                                 float* delta_rows, hk::mbarrier* full, hk::mbarrier* empty, int consumer) {
    const int b = blockIdx.z, h = blockIdx.y, tid = hk::warpgroup_thread();
    const int row0 = blockIdx.x * BQ + consumer * 64;
    const T* qb = (const T*)g.q + b * g.q_sb + h * g.q_sh + (long long)s.q0 * g.q_sr;
    const T* db = (const T*)g.d_o + b * g.do_sb + h * g.do_sh + (long long)s.q0 * g.do_sr;
    hkjit_attn_hopper::load_tile<VEC>(mine.q, qb, g.q_sr, row0, s.lq, 0, tid);
    hkjit_attn_hopper::load_tile<VEC>(mine.d_o, db, g.do_sr, row0, s.lq, 0, tid);
    row_delta(g, s, row0, delta_rows, tid);
    hk::fence_proxy_async();
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);

    // This thread's rows r (k % 4 < 2) and r + 8 (k % 4 >= 2).
    float lse2[2], dl[2];
    const float* lb = g.lse + b * g.lse_sb + h * g.lse_sh + (long long)s.q0 * g.lse_sr;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = s_t::row(0, 2 * i);
      lse2[i] = hkjit_attn_hopper::lse_base2(lb, g.lse_sr, row0 + r, s.lq);
      dl[i] = delta_rows[r];
    }
    const float sl2 = g.scale_log2;
    const int shift = s.lk - s.lq;

    o_t dq;
    hk::map(dq, [](float) { return 0.f; });
    int st = 0, phase = 0;
    for (int j = 0; j < blocks; ++j) {
      hk::wait(full[st], phase);
      stage_t& x = ring[st];
      s_t sc, dp;
      hk::mma_ABt(sc, mine.q, x.k, false);
      hk::mma_ABt(dp, mine.d_o, x.v, false);
      hk::mma_wait<1>();
      hk::fence_operand(sc);
      // P = exp2(S c log2 e - LSE log2 e); masked: keys past the sequence and (causal) past each
      // row's diagonal (edge blocks only).
      const bool edge = (j + 1) * BKV > s.lk || (CAUSAL && (j + 1) * BKV - 1 > row0 + shift);
#pragma unroll
      for (int k = 0; k < s_t::regs; ++k) {
        float v = sc.v[0][k] * sl2 - lse2[(k % 4) / 2];
        if (edge) {
          const int key = j * BKV + s_t::col(k), row = row0 + s_t::row(0, k);
          if (key >= s.lk || (CAUSAL && key > row + shift)) v = hk::neg_inf();
        }
        sc.v[0][k] = hk::fast_exp2(v);
      }
      hk::mma_wait<0>();
      hk::fence_operand(dp);
      a_t ds;
#pragma unroll
      for (int k = 0; k < s_t::regs; k += 2) {
        const float d = dl[(k % 4) / 2];
        ds.set_pair(k, sc.v[0][k] * (dp.v[0][k] - d), sc.v[0][k + 1] * (dp.v[0][k + 1] - d));
      }
      hk::mma_AB(dq, ds, x.k, true);
      hk::mma_wait<0>();
      hk::fence_operand(dq);
      hk::fence_operand(ds);
      if (tid % 32 == 0) hk::arrive(empty[st]);   // this warp's wgmma reads are done
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
    T* out = (T*)g.dq + b * g.dq_sb + h * g.dq_sh + (long long)s.q0 * g.dq_sr;
    hkjit_attn_hopper::store_rows(out, g.dq_sr, dq, g.scale, row0, s.lq);
  }

  static __device__ void run(const args& g) {
    extern __shared__ unsigned char smem_raw[];
    unsigned long long base = (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull;
    stage_t* ring = reinterpret_cast<stage_t*>(base);
    consumer_t* cons = reinterpret_cast<consumer_t*>(ring + STAGES);
    float* delta_rows = reinterpret_cast<float*>(cons + CONSUMERS);
    hk::mbarrier* full = reinterpret_cast<hk::mbarrier*>(delta_rows + CONSUMERS * 64);
    hk::mbarrier* empty = full + STAGES;
    const seq_t s = hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, blockIdx.z);
    if ((int)blockIdx.x * BQ >= s.lq) return;                  // varlen: this sequence is shorter
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        hk::init(full[i], hk::WARPGROUP_THREADS);
        hk::init(empty[i], CONSUMERS * 4);   // one arrival per consumer warp
      }
      hk::fence_barrier_init();
    }
    __syncthreads();
    const int blocks = kv_blocks(s, blockIdx.x * BQ);
    const int wg = hk::warpgroup_id();
    if (wg == PRODUCER) {
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_dec<PRODUCER_REGS>();
      produce(g, s, blocks, ring, full, empty);
    } else {
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_inc<CONSUMER_REGS>();
      consume(g, s, blocks, ring, cons[wg], delta_rows + wg * 64, full, empty, wg);
    }
  }
};

// ---- dK and dV -------------------------------------------------------------------------------------
// Warpgroup CONSUMERS is the producer: for each query head of the KV head's group, in order, the
// query blocks (BQ rows) that see a key of this block: Q, dO, and LSE (base 2) and Delta of those
// rows, into a STAGES-deep ring. Each consumer owns 64 keys: K and V in shared memory, dK and dV in
// registers; per query block S^T = K Q^T and dP^T = V dO^T (back to back), P^T and dS^T, then
// dV += P^T dO and dK += dS^T Q (back to back). A consumer skips (but releases) the query
// blocks that see none of its keys.
template <class T, int D, int BQ, int CONSUMERS, int STAGES, bool CAUSAL, bool VARLEN, int VEC>
struct attention_bwd_dkdv_hopper {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BQ == 64 || BQ == 128, "query block: 64 or 128 rows");
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "1 or 2 consumer warpgroups");
  static constexpr int BKV = CONSUMERS * 64;
  static constexpr int threads = (CONSUMERS + 1) * hk::WARPGROUP_THREADS;
  static constexpr int PRODUCER = CONSUMERS;
  static constexpr int PRODUCER_REGS = hkjit_attn_hopper::register_split<CONSUMERS, 56>::PRODUCER;
  static constexpr int CONSUMER_REGS = hkjit_attn_hopper::register_split<CONSUMERS, 56>::CONSUMER;
  using args = hkjit_attn_hopper::bwd_args;
  using seq_t = hkjit_attn_hopper::seq_t;

  using keys_t = hk::st<T, 64, D>;      // K, V: 64 keys x D (K-major A of S^T, dP^T)
  using q_t = hk::st<T, BQ, D>;         // Q, dO: BQ rows x D (K-major B of S^T, dP^T; N-major B of dK, dV)
  using s_t = hk::rt<float, 64, BQ>;    // S^T, dP^T (keys x queries)
  using o_t = hk::rt<float, 64, D>;     // dK, dV
  using a_t = hk::rt_a<T, BQ>;          // P^T, dS^T as wgmma's A registers
  struct stage_t { q_t q, d_o; };
  struct consumer_t { keys_t k, v; };
  // A stage's per-row values, and its first query row (the consumers read it rather than keep
  // the head/block walk in registers: at D128 they have none to spare).
  struct stats_t { float lse2[BQ], delta[BQ]; int q0, unused; };
  static constexpr int dynamic_smem = 1024 + STAGES * int(sizeof(stage_t)) + CONSUMERS * int(sizeof(consumer_t)) +
                                      STAGES * int(sizeof(stats_t)) + 2 * STAGES * 8;

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

  static __device__ void produce(const args& g, const seq_t& s, int qb0, int per_head, stage_t* ring,
                                 stats_t* stats, hk::mbarrier* full, hk::mbarrier* empty) {
    const int b = blockIdx.z, kh = blockIdx.y, group = g.heads / g.kv_heads;
    const int tid = hk::warpgroup_thread();
    int st = 0, phase = 0;
    for (int t = 0; t < group * per_head; ++t) {
      const int h = kh * group + t / per_head, q0 = (qb0 + t % per_head) * BQ;
      const T* qb = (const T*)g.q + b * g.q_sb + h * g.q_sh + (long long)s.q0 * g.q_sr;
      const T* db = (const T*)g.d_o + b * g.do_sb + h * g.do_sh + (long long)s.q0 * g.do_sr;
      hk::wait(empty[st], phase ^ 1);
      const int me = hk::opaque(tid);                 // as in the dq producer
      hkjit_attn_hopper::load_tile<VEC, 2>(ring[st].q, qb, g.q_sr, q0, s.lq, 0, me);
      hkjit_attn_hopper::load_tile<VEC, 2>(ring[st].d_o, db, g.do_sr, q0, s.lq, 0, me);
      for (int r = me; r < BQ; r += hk::WARPGROUP_THREADS) {
        const int row = q0 + r;
        const float* lb = g.lse + b * g.lse_sb + h * g.lse_sh + (long long)s.q0 * g.lse_sr;
        stats[st].lse2[r] = hkjit_attn_hopper::lse_base2(lb, g.lse_sr, row, s.lq);
        stats[st].delta[r] =
            row < s.lq ? g.delta[b * g.delta_sb + h * g.delta_sh + (long long)(s.q0 + row) * g.delta_sr] : 0.f;
      }
      if (me == 0) stats[st].q0 = q0;
      hk::fence_proxy_async();
      hk::arrive(full[st]);                           // release: the stats' generic stores too
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
  }

  static __device__ void consume(const args& g, const seq_t& s, int per_head, stage_t* ring,
                                 const stats_t* stats, consumer_t& mine, hk::mbarrier* full, hk::mbarrier* empty,
                                 int consumer) {
    const int b = blockIdx.z, kh = blockIdx.y, group = g.heads / g.kv_heads, tid = hk::warpgroup_thread();
    const int key0 = blockIdx.x * BKV + consumer * 64;            // first key of this warpgroup
    const T* kb = (const T*)g.k + b * g.k_sb + kh * g.k_sh + (long long)s.k0 * g.k_sr;
    const T* vb = (const T*)g.v + b * g.v_sb + kh * g.v_sh + (long long)s.k0 * g.v_sr;
    hkjit_attn_hopper::load_tile<VEC>(mine.k, kb, g.k_sr, key0, s.lk, 0, tid);
    hkjit_attn_hopper::load_tile<VEC>(mine.v, vb, g.v_sr, key0, s.lk, 0, tid);
    hk::fence_proxy_async();
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);

    const float sl2 = g.scale_log2;
    const int shift = s.lk - s.lq;
    o_t dk, dv;
    hk::map(dk, [](float) { return 0.f; });
    hk::map(dv, [](float) { return 0.f; });
    int st = 0, phase = 0;
    for (int t = group * per_head; t > 0; --t) {
      hk::wait(full[st], phase);
      const int q0 = stats[st].q0;
      // Causal: a block whose last query sees none of this warpgroup's keys adds nothing.
      if (!CAUSAL || q0 + BQ - 1 + shift >= key0) {
        stage_t& x = ring[st];
        const stats_t& z = stats[st];
        // K and V's wgmma descriptors are loop-invariant; hoisted, they would hold 4 D/16 registers
        // for the whole loop. Recomputed from an opaque offset, they cost an add each step.
        consumer_t& m = *reinterpret_cast<consumer_t*>(reinterpret_cast<char*>(&mine) + hk::opaque(0));
        s_t sc, dp;
        hk::mma_ABt(sc, m.k, x.q, false);
        hk::mma_ABt(dp, m.v, x.d_o, false);
        hk::mma_wait<0>();
        hk::fence_operand(sc);
        hk::fence_operand(dp);
        // P^T and dS^T pair by pair, straight into A registers: S^T and dP^T die as they grow.
        // Causal, branch-free: key > query + shift is masked, i.e. on this thread's key rows r and
        // r + 8 the columns below first[0] and first[1] (relative to its own column offset); blocks
        // that do not cross this warpgroup's diagonal get a first that masks nothing.
        int first[2] = {-BQ, -BQ};
        if (CAUSAL && key0 + 63 > q0 + shift) {
          first[0] = key0 + s_t::row(0, 0) - q0 - shift - s_t::col(0);
          first[1] = first[0] + 8;
        }
        a_t p, ds;
#pragma unroll
        for (int k = 0; k < s_t::regs; k += 2) {
          const int col = s_t::col(k);                   // query q0 + col (and + 1)
          const float2 l2 = *reinterpret_cast<const float2*>(&z.lse2[col]);
          const float2 d = *reinterpret_cast<const float2*>(&z.delta[col]);
          float v0 = sc.v[0][k] * sl2 - l2.x, v1 = sc.v[0][k + 1] * sl2 - l2.y;
          if (CAUSAL) {
            const int c = 8 * (k / 4), f = first[(k % 4) / 2];   // col - s_t::col(0) = c (+ 1)
            v0 = c < f ? hk::neg_inf() : v0;
            v1 = c + 1 < f ? hk::neg_inf() : v1;
          }
          const float p0 = hk::fast_exp2(v0), p1 = hk::fast_exp2(v1);
          p.set_pair(k, p0, p1);
          ds.set_pair(k, p0 * (dp.v[0][k] - d.x), p1 * (dp.v[0][k + 1] - d.y));
        }
        hk::mma_AB(dv, p, x.d_o, true);                 // dV += P^T dO
        hk::mma_AB(dk, ds, x.q, true);                  // dK += dS^T Q
        hk::mma_wait<0>();
        hk::fence_operand(dv);
        hk::fence_operand(dk);
        hk::fence_operand(p);
        hk::fence_operand(ds);
      }
      if (tid % 32 == 0) hk::arrive(empty[st]);   // this warp's wgmma reads are done
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
    T* dkb = (T*)g.dk + b * g.dk_sb + kh * g.dk_sh + (long long)s.k0 * g.dk_sr;
    T* dvb = (T*)g.dv + b * g.dv_sb + kh * g.dv_sh + (long long)s.k0 * g.dv_sr;
    hkjit_attn_hopper::store_rows(dkb, g.dk_sr, dk, g.scale, key0, s.lk);
    hkjit_attn_hopper::store_rows(dvb, g.dv_sr, dv, 1.f, key0, s.lk);
  }

  static __device__ void run(const args& g) {
    extern __shared__ unsigned char smem_raw[];
    unsigned long long base = (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull;
    stage_t* ring = reinterpret_cast<stage_t*>(base);
    consumer_t* cons = reinterpret_cast<consumer_t*>(ring + STAGES);
    stats_t* stats = reinterpret_cast<stats_t*>(cons + CONSUMERS);
    hk::mbarrier* full = reinterpret_cast<hk::mbarrier*>(stats + STAGES);
    hk::mbarrier* empty = full + STAGES;
    const seq_t s = hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, blockIdx.z);
    const int k0 = blockIdx.x * BKV;
    if (k0 >= s.lk) return;                                     // varlen: this sequence is shorter
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        hk::init(full[i], hk::WARPGROUP_THREADS);
        hk::init(empty[i], CONSUMERS * 4);   // one arrival per consumer warp
      }
      hk::fence_barrier_init();
    }
    __syncthreads();
    const int qb0 = first_q_block(s, k0), nqb = (s.lq + BQ - 1) / BQ;
    const int per_head = nqb > qb0 ? nqb - qb0 : 0;
    const int wg = hk::warpgroup_id();
    if (wg == PRODUCER) {
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_dec<PRODUCER_REGS>();
      produce(g, s, qb0, per_head, ring, stats, full, empty);
    } else {
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_inc<CONSUMER_REGS>();
      consume(g, s, per_head, ring, stats, cons[wg], full, empty, wg);
    }
  }
};
