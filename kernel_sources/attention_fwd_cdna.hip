// attention_fwd_cdna.hip: flash-attention forward on CDNA (gfx942, gfx950), bf16/fp16 in, fp32 math.
//
//   O[b][h][i] = sum_j softmax_j(scale * Q[b][h][i] . K[b][kh][j]) V[b][kh][j],  kh = h / (H / HKV)
//   LSE[b][h][i] = log sum_j exp(scale * Q . K)          (natural log, fp32; -inf for a row with no key)
//
// Causal masking is aligned to the bottom right: query i of a sequence of Lq sees key j of Lk
// iff j <= i + Lk - Lq. A row that sees no key gets O = 0 and LSE = -inf. Any Lq, Lk >= 1 (ragged
// tails masked); VARLEN reads packed (total, H, D) sequences delimited by cu_seqlens (int32).
//
// Block: WAVES waves x 32 query rows of one (batch, head); KV blocks of BKV keys stream through
// two LDS stages (direct-to-LDS loads: K and V tiles, BKV x D each). Each wave computes
//   S^T = K Q^T                (BKV x 32, MFMA 16x16xK of the target, Q pre-scaled by scale*log2 e)
//   P^T = exp2(S^T - m)        online softmax per query = per accumulator column (exp2)
//   O^T = O^T * alpha + V^T P^T   (D x 32, the same MFMA)
// S^T rather than S: an accumulator lane holds one query column, so the softmax statistics are
// per lane column, and the fp32 accumulators of 16x16 MFMAs are, register for register, the B
// operand of the next MFMA in the accumulators' K order (V is read in that order:
// attention_cdna_common.hpp): P^T feeds the second product with no data movement. V is read
// transposed from its keys x D tile: ds_read_b64_tr_b16 on gfx950; on gfx942, one ds_read_b64 per
// 4 head-dim columns with O^T's rows in "quad order" (load_acc_order), undone by the epilogue's
// stores (store_acc_order).
//
// Schedule per KV block t (stage s = t & 1), a barrier after each phase:
//   M1: read K fragments (stage s); issue the loads of block t+1 into stage s^1
//   C1: S^T MFMAs, mask, softmax                  M2: read V fragments; wait own loads of t+1
//   C2: O^T MFMAs
// With 8 waves, waves 4..7 start one barrier late (HipKittens' 8-wave ping-pong): while one
// group runs MFMAs and softmax, the other reads LDS and issues loads on the same SIMDs. The
// phase hazards are the CDNA GEMM's (docs/notes/cdna_gemm.md): a stage is refilled only after
// every wave's reads of it drained (lgkmcnt(0) before each barrier) and read only after every
// wave's loads into it completed (vmcnt(0) before the barrier ending M2).
//
// Causal blocks: a workgroup processes only the KV blocks its last query sees; query blocks are
// dealt heaviest first. Loads past a sequence's last key read 0 (buffer range check); masked
// scores are -inf.
#pragma once
#include "attention_cdna_common.hpp"

template <typename T, int D, int BKV, int WAVES, bool CAUSAL, bool VARLEN, int LOAD_BYTES>
struct attention_fwd_cdna {
  static constexpr int threads = WAVES * 64;
  static constexpr int dynamic_smem = 0;
  static constexpr int WQ = 32;                  // query rows per wave
  static constexpr int BQ = WAVES * WQ;          // query rows per workgroup
  static constexpr bool PINGPONG = WAVES == 8;

  struct args {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;                 // null: not written
    const int* cu_seqlens_q;    // VARLEN: batch + 1 offsets into the packed rows
    const int* cu_seqlens_k;
    long long q_sb, q_sh, q_sr;   // element strides (batch, head, row); the head dim is contiguous
    long long k_sb, k_sh, k_sr;
    long long v_sb, v_sh, v_sr;
    long long o_sb, o_sh, o_sr;
    long long lse_sb, lse_sh, lse_sr;
    int batch, heads, kv_heads;
    int n_q, n_k;               // lengths (VARLEN: the maxima; the grid covers n_q)
    float scale_log2;           // softmax scale * log2(e), folded into Q
  };

  static_assert(WAVES == 4 || WAVES == 8, "4 or 8 waves");
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BKV % 32 == 0, "KV block: a multiple of 32 keys");
  using S1 = hk::default_shape;                  // S^T = K Q^T: 16x16x32 (gfx950) / 16x16x16 (gfx942)
  using S2 = hk::default_shape;                  // O^T += V^T P^T: P^T is the B operand as accumulated
  static_assert(S1::MI == 16, "S^T accumulators must be 16x16 outputs to feed P^T");

  using StK = hk::st<T, BKV, D, hk::arch_swz_k>;     // keys x D, K-major operand of S^T
  using StV = hk::st<T, BKV, D, hk::arch_swz_mn>;    // keys x D, read transposed (MN-major operand of O^T)
  static constexpr int lds_bytes = 2 * (StK::bytes + StV::bytes);
  static_assert(lds_bytes <= hk::arch::lds_bytes, "LDS budget exceeded");

  using RQ = hk::rt<T, WQ, D, hk::row_l, S1>;         // Q (queries x D): B^T of S^T
  using RK = hk::rt<T, BKV, D, hk::row_l, S1>;        // K (keys x D): A of S^T
  using RS = hk::rt<float, BKV, WQ, hk::acc_l, S1>;   // S^T (keys x queries)
  using RP = hk::rt<T, BKV, WQ, hk::col_l, S2>;       // P^T (keys x queries): B of O^T
  using RV = hk::rt<T, BKV, D, hk::col_l, S2>;        // V (keys x D): A^T of O^T
  using RO = hk::rt<float, D, WQ, hk::acc_l, S2>;     // O^T (D x queries), rows in load_acc_order's order
  static constexpr int QS = RS::TC;                   // query slots per lane (2: queries l%16, 16 + l%16)
  static_assert(RO::TC == QS, "one query column layout for S^T and O^T");

  static __device__ void run(const args& g) {
    __shared__ StK sK[2];
    __shared__ StV sV[2];

    const int nqb = hk::ceil_div(g.n_q, BQ);
    const int qb = CAUSAL ? nqb - 1 - hk::block_id_x() : hk::block_id_x();   // heaviest first
    const int h = hk::block_id_y(), b = hk::block_id_z();
    const int kh = h / (g.heads / g.kv_heads);
    int q_off = 0, k_off = 0, Lq = g.n_q, Lk = g.n_k;
    if constexpr (VARLEN) {
      q_off = g.cu_seqlens_q[b];
      Lq = g.cu_seqlens_q[b + 1] - q_off;
      k_off = g.cu_seqlens_k[b];
      Lk = g.cu_seqlens_k[b + 1] - k_off;
    }
    const int q0 = qb * BQ;
    if (q0 >= Lq) return;   // uniform per workgroup, before any barrier

    const int wave = hk::wave_id(), l = hk::lane_id();
    const int group = PINGPONG ? wave / 4 : 0;
    const int qw = q0 + wave * WQ;   // this wave's first query (within the sequence)
    const T* Q = (const T*)g.q + (long long)b * g.q_sb + (long long)h * g.q_sh + (long long)q_off * g.q_sr;
    const T* K = (const T*)g.k + (long long)b * g.k_sb + (long long)kh * g.k_sh + (long long)k_off * g.k_sr;
    const T* V = (const T*)g.v + (long long)b * g.v_sb + (long long)kh * g.v_sh + (long long)k_off * g.v_sr;
    T* O = (T*)g.o + (long long)b * g.o_sb + (long long)h * g.o_sh + (long long)(q_off + qw) * g.o_sr;
    float* L = g.lse == nullptr ? nullptr : g.lse + (long long)b * g.lse_sb + (long long)h * g.lse_sh +
                                            (long long)(q_off + qw) * g.lse_sr;

    // KV blocks this workgroup needs: causal stops at the last key its last query sees.
    const int shift = Lk - Lq;
    int keys = Lk;
    if constexpr (CAUSAL) keys = hk::min(Lk, hk::min(q0 + BQ, Lq) - 1 + shift + 1);
    const int nkb = keys > 0 ? hk::ceil_div(keys, BKV) : 0;

    RO o;
    hk::zero(o);
    float m[QS], lsum[QS];
#pragma unroll
    for (int s = 0; s < QS; ++s) { m[s] = hk::neg_inf(); lsum[s] = 0.0f; }

    if (nkb > 0) {
      RQ rq;
      hkjit_attn::load_rows<LOAD_BYTES>(rq, Q, g.q_sr, qw, Lq);
      hk::mul(rq, rq, g.scale_log2);
      hk::tile_loader<StK, WAVES, LOAD_BYTES> lk;
      hk::tile_loader<StV, WAVES, LOAD_BYTES> lv;
      lk.init(g.k_sr, wave);
      lv.init(g.v_sr, wave);
      // Bytes from key row r to the end of the sequence's last key row: lanes past it read 0.
      const long long k_end = (long long)(Lk - 1) * g.k_sr + D, v_end = (long long)(Lk - 1) * g.v_sr + D;
      auto issue = [&](int t, int stage) {
        const long long r = (long long)t * BKV;
        lk.issue(sK[stage], K + r * g.k_sr, (k_end - r * g.k_sr) * (long long)sizeof(T));
        lv.issue(sV[stage], V + r * g.v_sr, (v_end - r * g.v_sr) * (long long)sizeof(T));
      };
      RK rk;
      RV rv;
      RS st;
      RP pt;
      auto softmax = [&](int t) {
        const int kv0 = t * BKV;
        // Mask where a key may be invalid for some query of this wave (uniform per wave).
        const bool ragged = kv0 + BKV > Lk;
        const bool diag = CAUSAL && kv0 + BKV - 1 > qw + shift;
        if (ragged || diag) {
          // Key kv0 + 16i + acc_row(v) is masked when it exceeds this lane's last visible key:
          // score = min(score, +inf or -inf), the sign taken from (limit - key). No compares:
          // per-element compares keep their lane masks in SGPR pairs, which spilled.
          static_assert(S1::ACC == 4, "acc_row(v, l) = acc_row(0, l) + v");
          int lim[QS];
#pragma unroll
          for (int j = 0; j < QS; ++j) {
            const int last = CAUSAL ? hk::min(Lk - 1, qw + j * 16 + S1::acc_col(l) + shift) : Lk - 1;
            lim[j] = last - kv0 - S1::acc_row(0, l);
          }
#pragma unroll
          for (int i = 0; i < RS::TR; ++i)
#pragma unroll
            for (int j = 0; j < RS::TC; ++j)
#pragma unroll
              for (int v = 0; v < S1::ACC; ++v)
                st.t[i][j][v] = hkjit_attn::mask_by_sign(st.t[i][j][v], lim[j] - (i * 16 + v));
        }
        typename RS::cvec mx, ps;
        hk::col_max(mx, st);
        float alpha[QS], mu[QS];
#pragma unroll
        for (int s = 0; s < QS; ++s) {
          const float mn = hk::fmax_f(m[s], mx.data[s]);
          mu[s] = mn == hk::neg_inf() ? 0.0f : mn;   // a column with no key yet: exp2(-inf) = 0, not NaN
          alpha[s] = hk::fast_exp2(m[s] - mu[s]);
          m[s] = mn;
        }
#pragma unroll
        for (int i = 0; i < RS::TR; ++i)
#pragma unroll
          for (int j = 0; j < RS::TC; ++j) {
            st.t[i][j] = hkjit_attn::minus(st.t[i][j], mu[j]);
#pragma unroll
            for (int v = 0; v < S1::ACC; ++v) st.t[i][j][v] = hk::fast_exp2(st.t[i][j][v]);
          }
        hkjit_attn::acc_to_operand(pt, st);   // accumulator registers = B-operand registers
        hk::col_sum(ps, st);
        typename RO::cvec a;
#pragma unroll
        for (int s = 0; s < QS; ++s) {
          lsum[s] = lsum[s] * alpha[s] + ps.data[s];
          a.data[s] = alpha[s];
        }
        hk::mul_col(o, o, a);
      };
      auto step = [&](int t) {
        const int s = t & 1;
        // M1: K fragments; the next block's loads into the other stage
        hk::load(rk, sK[s], 0, 0);
        if (t + 1 < nkb) issue(t + 1, s ^ 1);
        hk::sync_lds();
        // C1: S^T = K Q^T, softmax
        hk::setprio<1>();
        hk::zero(st);
        hk::mma_ABt(st, rk, rq, st);
        hk::setprio<0>();
        softmax(t);
        hk::barrier();
        // M2: V fragments; this wave's loads of block t+1 complete
        hkjit_attn::load_acc_order(rv, sV[s]);
        hk::wait_vm<0>();
        hk::sync_lds();
        // C2: O^T += V^T P^T
        hk::setprio<1>();
        hk::mma_AtB(o, rv, pt, o);
        hk::setprio<0>();
        hk::barrier();
      };
      issue(0, 0);
      hk::wait_vm<0>();
      hk::sync_lds();
      if (group == 1) hk::barrier();   // ping-pong: the second group runs one phase behind
      for (int t = 0; t < nkb - 1; ++t) step(t);
      if (PINGPONG && group == 0) hk::barrier();   // balances the one above
      step(nkb - 1);
    }

    // ---- epilogue: O = O^T / l (0 where no key), LSE = (m + log2 l) ln 2 ----
    typename RO::cvec inv;
    float lse[QS];
#pragma unroll
    for (int s = 0; s < QS; ++s) {
      const bool any = lsum[s] > 0.0f;
      inv.data[s] = any ? 1.0f / lsum[s] : 0.0f;
      lse[s] = any ? (m[s] + hk::fast_log2(lsum[s])) * 0.69314718055994531f : hk::neg_inf();
    }
    hk::mul_col(o, o, inv);
    // O^T element (d, query): stride 1 along d (4 consecutive d per store), o_sr along queries.
    hkjit_attn::store_acc_order(O, g.o_sr, o, Lq - qw);
    if (L != nullptr && l < 16) {
#pragma unroll
      for (int s = 0; s < QS; ++s)
        if (s * 16 + l < Lq - qw) L[(long long)(s * 16 + l) * g.lse_sr] = lse[s];
    }
  }
};
