#pragma once
// attention_fwd_hopper.cuh: the attention forward on Hopper (sm_90a), FlashAttention-style.
//
//   O = softmax(scale * Q K^T [+ bottom-right causal mask]) V,   LSE = log sum exp of the scaled scores
//   q, o: (batch, heads, rows, D); k, v: (batch, kv_heads, rows, D), head dim contiguous; bf16 / fp16.
//
// One block owns CONSUMERS * 64 query rows of one (batch, head). Warpgroup CONSUMERS is the
// producer: it streams K and V blocks of BKV keys into a STAGES-deep ring of shared tiles (full[s]:
// "stage s holds K and V", empty[s]: "every consumer is done with stage s"). Each consumer
// warpgroup owns 64 query rows: it loads its Q once into shared memory, then per KV block
//   S = Q K^T         wgmma, fp32 in registers (64 x BKV)
//   mask, online softmax in exp2 (scale * log2 e folded into the exponent's multiply-add)
//   P -> shared (16-bit), O += P V   wgmma with both operands in shared memory
// and at the end O /= l, LSE = (m + log2 l) / log2 e, stored with bounds checks.
// Loads are plain vector loads (any (batch, head, row) strides, varlen offsets) into the swizzled
// layout wgmma reads; rows past the sequence read as zero. Causal blocks past the diagonal of the
// block's last row are never loaded.
#include "attention_hopper_common.cuh"

template <class T, int D, int BKV, int CONSUMERS, int STAGES, bool CAUSAL, bool VARLEN, int VEC>
struct attention_fwd_hopper {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BKV == 64 || BKV == 128, "KV block: 64 or 128 keys");
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "1 or 2 consumer warpgroups");
  static constexpr int BQ = CONSUMERS * 64;                  // query rows per block
  static constexpr int threads = (CONSUMERS + 1) * hk::WARPGROUP_THREADS;
  static constexpr int PRODUCER = CONSUMERS;
  static constexpr int DC = D / 64, KC = BKV / 64;           // 64-wide chunks of the head dim / of a KV block
  // Registers (attention_hopper_common.cuh): 2 consumers get 216 each, the producer 72.
  static constexpr int PRODUCER_REGS = hkjit_attn_hopper::register_split<CONSUMERS, 72>::PRODUCER;
  static constexpr int CONSUMER_REGS = hkjit_attn_hopper::register_split<CONSUMERS, 72>::CONSUMER;

  using chunk_t = hk::st<T, 64, 64>;           // Q chunk (64 rows x 64 of D), P chunk (64 rows x 64 keys)
  using k_t = hk::st<T, BKV, 64>;              // K: keys x 64 of D (K-major B operand of Q K^T)
  using v_t = hk::st<T, 64, D>;                // V: 64 keys x D (N-major B operand of P V)
  using s_t = hk::rt<float, 64, BKV>;
  using o_t = hk::rt<float, 64, D>;
  struct stage_t { k_t k[DC]; v_t v[KC]; };
  struct consumer_t { chunk_t q[DC]; chunk_t p[KC]; };
  static constexpr int dynamic_smem = 1024 + STAGES * int(sizeof(stage_t)) + CONSUMERS * int(sizeof(consumer_t)) +
                                      2 * STAGES * 8;

  // ---- arguments (mirrored by hkjit/ops/_hopper_attention_fwd.py: Args) ---------------------------
  struct args {
    const T* q; const T* k; const T* v; T* o; float* lse;
    const int* cu_seqlens_q; const int* cu_seqlens_k;
    long long q_sb, q_sh, q_sr, k_sb, k_sh, k_sr, v_sb, v_sh, v_sr, o_sb, o_sh, o_sr, lse_sb, lse_sh, lse_sr;
    int batch, heads, kv_heads, n_q, n_k;
    float scale_log2;          // softmax scale * log2(e)
  };
  static_assert(sizeof(args) == 200, "args layout is mirrored in Python");

  using seq_t = hkjit_attn_hopper::seq_t;
  // KV blocks the block's query rows [row0, row0 + BQ) need: causal stops after the last row's diagonal.
  static __device__ __forceinline__ int kv_blocks(const seq_t& s, int row0) {
    int keys = s.lk;
    if constexpr (CAUSAL) {
      const int last = row0 + BQ - 1 < s.lq - 1 ? row0 + BQ - 1 : s.lq - 1;
      const int see = last + s.lk - s.lq + 1;                   // keys the last row sees
      keys = see < keys ? see : keys;
    }
    return keys > 0 ? (keys + BKV - 1) / BKV : 0;
  }

  template <class ST>
  static __device__ __forceinline__ void load_tile(ST& t, const T* base, long long sr, int r0, int limit, int c0,
                                                   int tid) {
    hkjit_attn_hopper::load_tile<VEC>(t, base, sr, r0, limit, c0, tid);
  }

  // ---- producer ------------------------------------------------------------------------------------
  static __device__ void produce(const args& g, const seq_t& s, int blocks, stage_t* ring, hk::mbarrier* full,
                                 hk::mbarrier* empty) {
    const int b = blockIdx.z, h = blockIdx.y, hk_ = h / (g.heads / g.kv_heads);
    const T* kb = g.k + b * g.k_sb + hk_ * g.k_sh + (long long)s.k0 * g.k_sr;
    const T* vb = g.v + b * g.v_sb + hk_ * g.v_sh + (long long)s.k0 * g.v_sr;
    const int tid = hk::warpgroup_thread();
    int st = 0, phase = 0;
    for (int j = 0; j < blocks; ++j) {
      hk::wait(empty[st], phase ^ 1);                 // fresh barriers pass parity 1 at once
      stage_t& x = ring[st];
#pragma unroll
      for (int c = 0; c < DC; ++c) load_tile(x.k[c], kb, g.k_sr, j * BKV, s.lk, c * 64, tid);
#pragma unroll
      for (int c = 0; c < KC; ++c) load_tile(x.v[c], vb, g.v_sr, j * BKV + c * 64, s.lk, 0, tid);
      hk::fence_proxy_async();                        // generic-proxy writes, read next by wgmma
      hk::arrive(full[st]);
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
  }

  // ---- consumers -------------------------------------------------------------------------------------
  static __device__ __forceinline__ float quad_max(float x) { return hkjit_attn_hopper::quad_max(x); }
  static __device__ __forceinline__ float quad_sum(float x) { return hkjit_attn_hopper::quad_sum(x); }
  static __device__ __forceinline__ float exp2_(float x) { return hk::fast_exp2(x); }

  static __device__ void consume(const args& g, const seq_t& s, int blocks, stage_t* ring, consumer_t& mine,
                                 hk::mbarrier* full, hk::mbarrier* empty, int consumer) {
    const int b = blockIdx.z, h = blockIdx.y, tid = hk::warpgroup_thread();
    const int row0 = blockIdx.x * BQ + consumer * 64;          // first query row of this warpgroup
    const bool leader = tid == 0;
    const T* qb = g.q + b * g.q_sb + h * g.q_sh + (long long)s.q0 * g.q_sr;
#pragma unroll
    for (int c = 0; c < DC; ++c) load_tile(mine.q[c], qb, g.q_sr, row0, s.lq, c * 64, tid);
    hk::fence_proxy_async();
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);

    o_t o;
    hk::map(o, [](float) { return 0.f; });
    float m[2] = {hk::neg_inf(), hk::neg_inf()}, l[2] = {0.f, 0.f};   // rows r and r + 8 of this thread, in log2 units
    const float sl2 = g.scale_log2;
    int st = 0, phase = 0;
    for (int j = 0; j < blocks; ++j) {
      hk::wait(full[st], phase);
      stage_t& x = ring[st];
      s_t sc;
#pragma unroll
      for (int c = 0; c < DC; ++c) hk::mma_ABt(sc, mine.q[c], x.k[c], c > 0);
      hk::mma_wait<0>();
      hk::fence_operand(sc);
      // Mask keys past the sequence and (causal) past each row's diagonal; fold the scale in.
      const bool edge = (j + 1) * BKV > s.lk || (CAUSAL && (j + 1) * BKV - 1 > row0 + s.lk - s.lq);
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int k = 0; k < s_t::regs; ++k) {
        float v = sc.v[0][k] * sl2;
        if (edge) {
          const int key = j * BKV + s_t::col(k), row = row0 + s_t::row(0, k);
          if (key >= s.lk || (CAUSAL && key > row + s.lk - s.lq)) v = hk::neg_inf();
        }
        sc.v[0][k] = v;
        mx[(k % 4) / 2] = fmaxf(mx[(k % 4) / 2], v);
      }
      float alpha[2], base[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = quad_max(mx[r]);
        base[r] = mx[r] == hk::neg_inf() ? 0.f : mx[r];           // a row with no key yet: exp2(-inf) = 0
        alpha[r] = exp2_(m[r] - base[r]);
        m[r] = mx[r];
      }
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int k = 0; k < s_t::regs; ++k) {
        const float p = exp2_(sc.v[0][k] - base[(k % 4) / 2]);
        sc.v[0][k] = p;
        sum[(k % 4) / 2] += p;
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + quad_sum(sum[r]);
#pragma unroll
      for (int k = 0; k < o_t::regs; ++k) o.v[0][k] *= alpha[(k % 4) / 2];
      // P to shared memory (16-bit), then O += P V.
#pragma unroll
      for (int k = 0; k < s_t::regs; k += 2) {
        const int col = s_t::col(k), row = s_t::row(0, k) % 64;
        *reinterpret_cast<unsigned*>(&mine.p[col / 64].at(row, col % 64)) = hk::pack2<T>(sc.v[0][k], sc.v[0][k + 1]);
      }
      hk::fence_proxy_async();
      hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
#pragma unroll
      for (int c = 0; c < KC; ++c) hk::mma_AB(o, mine.p[c], x.v[c], true);
      hk::mma_wait<0>();
      hk::fence_operand(o);
      if (leader) hk::arrive(empty[st]);
      // Every thread's wgmma reads of P are done (mma_wait) before anyone writes the next P.
      hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }

    // O /= l; LSE (natural log) = (m + log2 l) / log2 e; rows with no key: O = 0, LSE = -inf.
    float inv[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool none = l[r] == 0.f;
      inv[r] = none ? 0.f : 1.f / l[r];
      lse[r] = none ? hk::neg_inf() : (m[r] + __log2f(l[r])) * 0.69314718055994531f;
    }
    T* ob = g.o + b * g.o_sb + h * g.o_sh + (long long)s.q0 * g.o_sr;
#pragma unroll
    for (int k = 0; k < o_t::regs; k += 2) {
      const int row = row0 + o_t::row(0, k), col = o_t::col(k);
      if (row >= s.lq) continue;
      const int r = (k % 4) / 2;
      *reinterpret_cast<unsigned*>(ob + (long long)row * g.o_sr + col) = hk::pack2<T>(o.v[0][k] * inv[r], o.v[0][k + 1] * inv[r]);
    }
    if (g.lse && tid % 4 == 0) {
      float* lb = g.lse + b * g.lse_sb + h * g.lse_sh + (long long)s.q0 * g.lse_sr;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + o_t::row(0, 2 * r);
        if (row < s.lq) lb[(long long)row * g.lse_sr] = lse[r];
      }
    }
  }

  // ---- entry ---------------------------------------------------------------------------------------
  static __device__ void run(const args& g) {
    extern __shared__ unsigned char smem_raw[];
    unsigned long long base = (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull;
    stage_t* ring = reinterpret_cast<stage_t*>(base);
    consumer_t* cons = reinterpret_cast<consumer_t*>(ring + STAGES);
    hk::mbarrier* full = reinterpret_cast<hk::mbarrier*>(cons + CONSUMERS);
    hk::mbarrier* empty = full + STAGES;
    const seq_t s = hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, blockIdx.z);
    if ((int)blockIdx.x * BQ >= s.lq) return;                  // varlen: this sequence is shorter
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        hk::init(full[i], hk::WARPGROUP_THREADS);
        hk::init(empty[i], CONSUMERS);
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
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_inc<CONSUMER_REGS>();   // (one consumer has them all)
      consume(g, s, blocks, ring, cons[wg], full, empty, wg);
    }
  }
};
