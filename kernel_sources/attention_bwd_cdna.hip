// attention_bwd_cdna.hip: flash-attention backward on CDNA (gfx942, gfx950), deterministic (no atomics).
//
// With c = scale, P = exp(c Q K^T - LSE) (masked as in the forward), dO the output gradient:
//   Delta = rowsum(dO o O)      dV = P^T dO      dP = dO V^T      dS = P o (dP - Delta)
//   dQ = c dS K                 dK = c dS^T Q    (GQA: dK, dV summed over the query heads of a KV head)
// Two kernels, each the only writer of what it writes:
//   attention_bwd_dq_cdna    one workgroup per (query block, head, batch): Delta (written for the
//                            other kernel) and dQ, streaming KV blocks through LDS;
//   attention_bwd_dkdv_cdna  one workgroup per (KV block, KV head, batch): dK, dV, streaming the
//                            query blocks of every query head of the group (a deterministic sum),
//                            after the first kernel (it reads Delta).
// Both keep their own rows in registers and compute transposed products (S^T in the first, dK^T and
// dV^T in the second) so that every 16x16 fp32 accumulator is, register for register, the B
// operand of the next MFMA, in the accumulators' K order (attention_cdna_common.hpp). Scores are in base-2 units:
// the resident operand (Q in the first kernel, K in the second) is pre-scaled by c log2(e) and
// LSE multiplied by log2(e). Schedule: two LDS stages; per block, issue the next block's
// direct-to-LDS loads, compute, wait for this wave's loads, barrier.
#pragma once
#include "attention_cdna_common.hpp"

namespace hkjit_attn {

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

// The (batch b) sequence's offset and length, from cu_seqlens when VARLEN.
template <bool VARLEN>
HK_INLINE void seq(const int* cu, int n, int b, int& off, int& len) {
  if constexpr (VARLEN) {
    off = cu[b];
    len = cu[b + 1] - off;
  } else {
    off = 0;
    len = n;
  }
}

}  // namespace hkjit_attn

template <typename T, int D, int BKV, int WAVES, bool CAUSAL, bool VARLEN, int LOAD_BYTES>
struct attention_bwd_dq_cdna {
  static constexpr int threads = WAVES * 64;
  static constexpr int dynamic_smem = 0;
  static constexpr int WQ = 32, BQ = WAVES * WQ;
  using args = hkjit_attn::bwd_args;
  using S1 = hk::default_shape;
  using S2 = hk::default_shape;   // second product in the accumulators' K order (acc_to_operand)
  using StK = hk::st<T, BKV, D, hk::arch_swz_k>;   // read as K (row_l) for S^T and as K^T (col_l) for dQ^T
  using StV = hk::st<T, BKV, D, hk::arch_swz_k>;
  static constexpr int lds_bytes = 2 * (StK::bytes + StV::bytes);
  static_assert(lds_bytes <= hk::arch::lds_bytes, "LDS budget exceeded");
  // Q, dO and the K, V fragments in KH parts of D: at D128 one K (V) fragment read of half the
  // head dim at a time keeps 32 VGPRs of it live instead of 64.
  static constexpr int KH = D == 128 ? 2 : 1, DH = D / KH;
  using RQ = hk::rt<T, WQ, DH, hk::row_l, S1>;
  using RK = hk::rt<T, BKV, DH, hk::row_l, S1>;
  using RS = hk::rt<float, BKV, WQ, hk::acc_l, S1>;   // S^T, dP^T (keys x queries)
  using RDS = hk::rt<T, BKV, WQ, hk::col_l, S2>;      // dS^T as the B operand
  using RKT = hk::rt<T, BKV, D, hk::col_l, S2>;       // K read transposed: A^T of dQ^T
  using RO = hk::rt<float, D, WQ, hk::acc_l, S2>;     // dQ^T, rows in load_acc_order's order
  static constexpr int QS = RS::TC;

  static __device__ void run(const args& g) {
    __shared__ StK sK[2];
    __shared__ StV sV[2];
    const int nqb = hk::ceil_div(g.n_q, BQ);
    const int qb = CAUSAL ? nqb - 1 - hk::block_id_x() : hk::block_id_x();
    const int h = hk::block_id_y(), b = hk::block_id_z(), kh = h / (g.heads / g.kv_heads);
    int q_off, Lq, k_off, Lk;
    hkjit_attn::seq<VARLEN>(g.cu_seqlens_q, g.n_q, b, q_off, Lq);
    hkjit_attn::seq<VARLEN>(g.cu_seqlens_k, g.n_k, b, k_off, Lk);
    const int q0 = qb * BQ;
    if (q0 >= Lq) return;
    const int wave = hk::wave_id(), l = hk::lane_id();
    const int qw = q0 + wave * WQ;
    auto rows = [&](const void* base, long long sb, long long sh, long long sr, int hh, int off) {
      return (const T*)base + (long long)b * sb + (long long)hh * sh + (long long)off * sr;
    };
    const T* Q = rows(g.q, g.q_sb, g.q_sh, g.q_sr, h, q_off);
    const T* O = rows(g.o, g.o_sb, g.o_sh, g.o_sr, h, q_off);
    const T* dO = rows(g.d_o, g.do_sb, g.do_sh, g.do_sr, h, q_off);
    const T* K = rows(g.k, g.k_sb, g.k_sh, g.k_sr, kh, k_off);
    const T* V = rows(g.v, g.v_sb, g.v_sh, g.v_sr, kh, k_off);

    // Delta = rowsum(dO o O) for this wave's queries 16 s + l % 16 (lanes sharing l % 16 hold
    // the rest of the row), written for the dkdv kernel.
    RQ rq[KH], rdo[KH];
#pragma unroll
    for (int h = 0; h < KH; ++h) {
      hkjit_attn::load_rows<LOAD_BYTES>(rdo[h], dO + h * DH, g.do_sr, qw, Lq);
      hkjit_attn::load_rows<LOAD_BYTES>(rq[h], O + h * DH, g.o_sr, qw, Lq);
    }
    float delta[QS], lse2[QS];
#pragma unroll
    for (int s = 0; s < QS; ++s) {
      float acc = 0.0f;
#pragma unroll
      for (int h = 0; h < KH; ++h)
#pragma unroll
        for (int k = 0; k < RQ::TK; ++k)
#pragma unroll
          for (int e = 0; e < S1::E; ++e)
            acc += hk::to_float(rdo[h].t[s][k][e]) * hk::to_float(rq[h].t[s][k][e]);
      acc += hk::shfl_xor(acc, 16);
      delta[s] = acc + hk::shfl_xor(acc, 32);
      const int qi = qw + s * 16 + l % 16;
      float x = 0.0f;
      if (qi < Lq) {
        x = g.lse[(long long)b * g.lse_sb + (long long)h * g.lse_sh + (long long)(q_off + qi) * g.lse_sr];
        if (l < 16) {
          const long long at =
              (long long)b * g.delta_sb + (long long)h * g.delta_sh + (long long)(q_off + qi) * g.delta_sr;
          g.delta[at] = delta[s];
        }
      }
      lse2[s] = x == hk::neg_inf() ? 0.0f : x * 1.4426950408889634f;   // a row with no key is all masked
    }
#pragma unroll
    for (int h = 0; h < KH; ++h) {
      hkjit_attn::load_rows<LOAD_BYTES>(rq[h], Q + h * DH, g.q_sr, qw, Lq);
      hk::mul(rq[h], rq[h], g.scale_log2);
    }

    const int shift = Lk - Lq;
    int keys = Lk;
    if constexpr (CAUSAL) keys = hk::min(Lk, hk::min(q0 + BQ, Lq) + shift);
    const int nkb = keys > 0 ? hk::ceil_div(keys, BKV) : 0;
    RO dqt;
    hk::zero(dqt);
    if (nkb > 0) {
      hk::tile_loader<StK, WAVES, LOAD_BYTES> lk;
      hk::tile_loader<StV, WAVES, LOAD_BYTES> lv;
      lk.init(g.k_sr, wave);
      lv.init(g.v_sr, wave);
      const long long k_end = (long long)(Lk - 1) * g.k_sr + D, v_end = (long long)(Lk - 1) * g.v_sr + D;
      auto issue = [&](int t, int stage) {
        const long long r = (long long)t * BKV;
        lk.issue(sK[stage], K + r * g.k_sr, (k_end - r * g.k_sr) * (long long)sizeof(T));
        lv.issue(sV[stage], V + r * g.v_sr, (v_end - r * g.v_sr) * (long long)sizeof(T));
      };
      issue(0, 0);
      hk::wait_vm<0>();
      hk::barrier();
      for (int t = 0; t < nkb; ++t) {
        const int s = t & 1, kv0 = t * BKV;
        if (t + 1 < nkb) issue(t + 1, s ^ 1);
        RS st, dpt;
        hk::zero(st);
        hk::zero(dpt);
#pragma unroll
        for (int h = 0; h < KH; ++h) {
          RK rk;
          hk::load(rk, sK[s], 0, h * DH);
          hk::mma_ABt(st, rk, rq[h], st);
        }
#pragma unroll
        for (int h = 0; h < KH; ++h) {
          RK rk;
          hk::load(rk, sV[s], 0, h * DH);
          hk::mma_ABt(dpt, rk, rdo[h], dpt);
        }
        int lim[QS];
#pragma unroll
        for (int j = 0; j < QS; ++j) {
          const int last = CAUSAL ? hk::min(Lk - 1, qw + j * 16 + S1::acc_col(l) + shift) : Lk - 1;
          lim[j] = last - kv0 - S1::acc_row(0, l);
        }
        static_assert(S1::ACC == 4, "acc_row(v, l) = acc_row(0, l) + v");
#pragma unroll
        for (int i = 0; i < RS::TR; ++i)
#pragma unroll
          for (int j = 0; j < RS::TC; ++j)
#pragma unroll
            for (int v = 0; v < S1::ACC; ++v) {
              const float x = hkjit_attn::mask_by_sign(st.t[i][j][v], lim[j] - (i * 16 + v));
              st.t[i][j][v] = hk::fast_exp2(x - lse2[j]) * (dpt.t[i][j][v] - delta[j]);   // dS^T
            }
        RDS ds;
        hkjit_attn::acc_to_operand(ds, st);
        RKT rkt;
        hkjit_attn::load_acc_order(rkt, sK[s]);
        hk::mma_AtB(dqt, rkt, ds, dqt);
        hk::wait_vm<0>();
        hk::sync_lds();   // this block's reads done, the next block's loads landed, for every wave
      }
    }
    hk::mul(dqt, dqt, g.scale);
    T* dQ = (T*)g.dq + (long long)b * g.dq_sb + (long long)h * g.dq_sh + (long long)(q_off + qw) * g.dq_sr;
    hkjit_attn::store_acc_order(dQ, g.dq_sr, dqt, Lq - qw);
  }
};

template <typename T, int D, int BQ, int WAVES, bool CAUSAL, bool VARLEN, int LOAD_BYTES>
struct attention_bwd_dkdv_cdna {
  static constexpr int threads = WAVES * 64;
  static constexpr int dynamic_smem = 0;
  static constexpr int WK = 32, BKV = WAVES * WK;
  using args = hkjit_attn::bwd_args;
  using S1 = hk::default_shape;
  using S2 = hk::default_shape;   // second products in the accumulators' K order (acc_to_operand)
  using StQ = hk::st<T, BQ, D, hk::arch_swz_k>;    // Q and dO: read row_l (S, dP) and col_l (dK^T, dV^T)
  static constexpr int lds_bytes = 2 * 2 * StQ::bytes;
  static_assert(lds_bytes <= hk::arch::lds_bytes, "LDS budget exceeded");
  using RK = hk::rt<T, WK, D, hk::row_l, S1>;        // K (pre-scaled), V: this wave's keys
  using RQ = hk::rt<T, BQ, D, hk::row_l, S1>;        // Q, dO of the query block
  using RS = hk::rt<float, BQ, WK, hk::acc_l, S1>;   // S, dP (queries x keys)
  using RP = hk::rt<T, BQ, WK, hk::col_l, S2>;       // P, dS as B operands (K = queries)
  using RQT = hk::rt<T, BQ, D, hk::col_l, S2>;       // Q, dO read transposed
  using RO = hk::rt<float, D, WK, hk::acc_l, S2>;    // dK^T, dV^T (D x keys), rows in load_acc_order's order
  static_assert(S1::ACC == 4 && S1::MI == 16, "16x16 accumulators");

  static __device__ void run(const args& g) {
    __shared__ StQ sQ[2];
    __shared__ StQ sD[2];
    const int kb = hk::block_id_x(), kh = hk::block_id_y(), b = hk::block_id_z();
    const int group = g.heads / g.kv_heads;
    int q_off, Lq, k_off, Lk;
    hkjit_attn::seq<VARLEN>(g.cu_seqlens_q, g.n_q, b, q_off, Lq);
    hkjit_attn::seq<VARLEN>(g.cu_seqlens_k, g.n_k, b, k_off, Lk);
    const int k0 = kb * BKV;
    if (k0 >= Lk) return;
    const int wave = hk::wave_id(), l = hk::lane_id();
    const int kw = k0 + wave * WK;
    const T* K = (const T*)g.k + (long long)b * g.k_sb + (long long)kh * g.k_sh + (long long)k_off * g.k_sr;
    const T* V = (const T*)g.v + (long long)b * g.v_sb + (long long)kh * g.v_sh + (long long)k_off * g.v_sr;
    RK rk, rv;
    hkjit_attn::load_rows<LOAD_BYTES>(rk, K, g.k_sr, kw, Lk);
    hk::mul(rk, rk, g.scale_log2);
    hkjit_attn::load_rows<LOAD_BYTES>(rv, V, g.v_sr, kw, Lk);

    // Query blocks that see a key of this block: causal starts at the first query seeing key k0.
    const int shift = Lk - Lq;
    const int qb0 = CAUSAL ? hk::max(0, k0 - shift) / BQ : 0;
    const int nqb = hk::ceil_div(Lq, BQ);
    const int per_head = hk::max(0, nqb - qb0);
    const int steps = group * per_head;
    RO dkt, dvt;
    hk::zero(dkt);
    hk::zero(dvt);
    if (steps > 0) {
      hk::tile_loader<StQ, WAVES, LOAD_BYTES> lq, ld;
      lq.init(g.q_sr, wave);
      ld.init(g.do_sr, wave);
      const long long q_end = (long long)(Lq - 1) * g.q_sr + D, d_end = (long long)(Lq - 1) * g.do_sr + D;
      auto head_of = [&](int t) { return kh * group + t / per_head; };
      auto q0_of = [&](int t) { return (qb0 + t % per_head) * BQ; };
      auto issue = [&](int t, int stage) {
        const int h = head_of(t);
        const long long r = q0_of(t);
        const T* Q = (const T*)g.q + (long long)b * g.q_sb + (long long)h * g.q_sh + (q_off + r) * g.q_sr;
        const T* dO = (const T*)g.d_o + (long long)b * g.do_sb + (long long)h * g.do_sh + (q_off + r) * g.do_sr;
        lq.issue(sQ[stage], Q, (q_end - r * g.q_sr) * (long long)sizeof(T));
        ld.issue(sD[stage], dO, (d_end - r * g.do_sr) * (long long)sizeof(T));
      };
      issue(0, 0);
      hk::wait_vm<0>();
      hk::barrier();
      for (int t = 0; t < steps; ++t) {
        const int s = t & 1, h = head_of(t), q0 = q0_of(t);
        if (t + 1 < steps) issue(t + 1, s ^ 1);
        RS sc, dp;
        {
          RQ rq;
          hk::load(rq, sQ[s], 0, 0);
          hk::zero(sc);
          hk::mma_ABt(sc, rq, rk, sc);
          hk::load(rq, sD[s], 0, 0);
          hk::zero(dp);
          hk::mma_ABt(dp, rq, rv, dp);
        }
        // Per row (query q0 + 16 i + acc_row(v)): LSE, Delta, and the last key it sees.
        RP p, ds;
        // LSE and Delta rows are contiguous (lse_sr = delta_sr = 1: hkjit checks before launch).
        const float* lse_h = g.lse + (long long)b * g.lse_sb + (long long)h * g.lse_sh + q_off;
        const float* delta_h = g.delta + (long long)b * g.delta_sb + (long long)h * g.delta_sh + q_off;
#pragma unroll
        for (int i = 0; i < RS::TR; ++i)
#pragma unroll
          for (int v = 0; v < S1::ACC; ++v) {
            const int qi = q0 + i * 16 + S1::acc_row(v, l);
            const bool ok = qi < Lq;
            const float x = ok ? lse_h[qi] : 0.0f;
            const float lse2 = x == hk::neg_inf() ? 0.0f : x * 1.4426950408889634f;
            const float dl = ok ? delta_h[qi] : 0.0f;
            const int last = !ok ? -1 : (CAUSAL ? hk::min(Lk - 1, qi + shift) : Lk - 1);
            const int lim = last - kw - S1::acc_col(l);
#pragma unroll
            for (int j = 0; j < RS::TC; ++j) {
              const float e = hk::fast_exp2(hkjit_attn::mask_by_sign(sc.t[i][j][v], lim - j * 16) - lse2);
              sc.t[i][j][v] = e;
              dp.t[i][j][v] = e * (dp.t[i][j][v] - dl);   // dS
            }
          }
        hkjit_attn::acc_to_operand(p, sc);
        hkjit_attn::acc_to_operand(ds, dp);
        {
          RQT rt_;
          hkjit_attn::load_acc_order(rt_, sD[s]);
          hk::mma_AtB(dvt, rt_, p, dvt);
          hkjit_attn::load_acc_order(rt_, sQ[s]);
          hk::mma_AtB(dkt, rt_, ds, dkt);
        }
        hk::wait_vm<0>();
        hk::sync_lds();
      }
    }
    hk::mul(dkt, dkt, g.scale);
    T* dK = (T*)g.dk + (long long)b * g.dk_sb + (long long)kh * g.dk_sh + (long long)(k_off + kw) * g.dk_sr;
    T* dV = (T*)g.dv + (long long)b * g.dv_sb + (long long)kh * g.dv_sh + (long long)(k_off + kw) * g.dv_sr;
    hkjit_attn::store_acc_order(dK, g.dk_sr, dkt, Lk - kw);
    hkjit_attn::store_acc_order(dV, g.dv_sr, dvt, Lk - kw);
  }
};
