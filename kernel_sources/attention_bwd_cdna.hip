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
//                            after the first kernel (it reads Delta); its waves work in pairs, one
//                            computing P and dV, the other dS and dK (see the kernel).
// Both keep their own rows in registers and compute transposed products (S^T in the first, dK^T and
// dV^T in the second) so that every 16x16 fp32 accumulator is, register for register, the B
// operand of the next MFMA, in the accumulators' K order (attention_cdna_common.hpp). Scores are in base-2 units:
// the resident operand (Q in the first kernel, K in the second) is pre-scaled by c log2(e) and
// LSE multiplied by log2(e). Schedule: two LDS stages; per block, issue the next block's
// direct-to-LDS loads, compute (dkdv: with a barrier between the pair's halves), wait for this
// wave's loads, barrier.
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
      lse2[s] = hkjit_attn::lse_log2<T>(x);
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
        // Masked only where a key lies past the sequence or past the diagonal of the wave's first
        // query (uniform per wave, as in the forward): elsewhere every score of the block is seen.
        if (kv0 + BKV > Lk || (CAUSAL && kv0 + BKV - 1 > qw + shift)) {
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
              for (int v = 0; v < S1::ACC; ++v)
                st.t[i][j][v] = hkjit_attn::mask_by_sign(st.t[i][j][v], lim[j] - (i * 16 + v));
        }
#pragma unroll
        for (int i = 0; i < RS::TR; ++i)
#pragma unroll
          for (int j = 0; j < RS::TC; ++j)
#pragma unroll
            for (int v = 0; v < S1::ACC; ++v)
              st.t[i][j][v] = hk::fast_exp2(st.t[i][j][v] - lse2[j]) * (dpt.t[i][j][v] - delta[j]);   // dS^T
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

// dK and dV of each 32-key slice are computed by a pair of waves, w and w + PAIRS (the same SIMD):
// the P wave (w < PAIRS) holds K (pre-scaled) and dV^T, the dS wave holds V and dK^T. Per query
// block (Q and dO tiles in LDS, two stages; `|` is a barrier):
//   P wave:   S  = Q K^T,  P = 2^(S - LSE) masked, P to the pair's slab  |  dV^T += dO^T P
//   dS wave:  dP = dO V^T                                                |  dS = P o (dP - Delta), P from the slab;
//                                                                        |  dK^T += Q^T dS
// The two run the same code on swapped tiles and differ only in the element-wise step. Each holds
// one resident operand (32 keys x D) and one accumulator (D x 32): half of what one wave computing
// both gradients holds (192 of 256 registers at D128), so two waves per SIMD fit at D128.
template <typename T, int D, int BQ, int WAVES, bool CAUSAL, bool VARLEN, int LOAD_BYTES>
struct attention_bwd_dkdv_cdna {
  static constexpr int threads = WAVES * 64;
  static constexpr int dynamic_smem = 0;
  static constexpr int PAIRS = WAVES / 2, WK = 32, BKV = PAIRS * WK;
  static_assert(WAVES % 2 == 0, "waves come in pairs");
  using args = hkjit_attn::bwd_args;
  using S1 = hk::default_shape;
  using S2 = hk::default_shape;   // second products in the accumulators' K order (acc_to_operand)
  using StQ = hk::st<T, BQ, D, hk::arch_swz_k>;    // Q and dO: read row_l (S, dP) and col_l (dK^T, dV^T)
  using RK = hk::rt<T, WK, D, hk::row_l, S1>;        // K (pre-scaled) or V: the pair's keys
  using RQ = hk::rt<T, BQ, D, hk::row_l, S1>;        // Q or dO of the query block
  using RS = hk::rt<float, BQ, WK, hk::acc_l, S1>;   // S or dP (queries x keys)
  using RP = hk::rt<T, BQ, WK, hk::col_l, S2>;       // P or dS as the B operand (K = queries)
  using RQT = hk::rt<T, BQ, D, hk::col_l, S2>;       // dO or Q read transposed
  using RO = hk::rt<float, D, WK, hk::acc_l, S2>;    // dV^T or dK^T (D x keys), rows in load_acc_order's order
  using Slab = hkjit_attn::acc_slab<RS>;
  static constexpr int lds_bytes = 2 * 2 * StQ::bytes + PAIRS * (int)sizeof(Slab);
  static_assert(lds_bytes <= hk::arch::lds_bytes, "LDS budget exceeded");
  static_assert(S1::ACC == 4 && S1::MI == 16, "16x16 accumulators");
  // At D64 with 32-query blocks a wave needs about 125 registers: ask the compiler for at most 128
  // (4 waves per SIMD, two workgroups per CU). Elsewhere what the block itself implies (WAVES / 4
  // per SIMD): a larger block_q may need more registers.
  static constexpr int amd_waves_per_simd = D == 64 && BQ == 32 ? 4 : WAVES / 4;

  static __device__ void run(const args& g) {
    __shared__ StQ tiles[2][2];   // [stage][0: Q, 1: dO]
    __shared__ Slab slab[PAIRS];
    const int kb = hk::block_id_x(), kh = hk::block_id_y(), b = hk::block_id_z();
    const int group = g.heads / g.kv_heads;
    int q_off, Lq, k_off, Lk;
    hkjit_attn::seq<VARLEN>(g.cu_seqlens_q, g.n_q, b, q_off, Lq);
    hkjit_attn::seq<VARLEN>(g.cu_seqlens_k, g.n_k, b, k_off, Lk);
    const int k0 = kb * BKV;
    if (k0 >= Lk) return;
    const int wave = hk::wave_id(), l = hk::lane_id();
    const int pair = wave % PAIRS, ds = wave / PAIRS;   // ds: this is the dS wave
    const int kw = k0 + pair * WK;
    // The resident operand: K scaled by c log2(e) (P wave) or V; the streamed matrix this wave loads
    // (Q or dO); the per-row statistic (LSE or Delta; rows contiguous: hkjit checks before launch).
    RK rkv;
    {
      const T* kv = (const T*)(ds ? g.v : g.k);
      const long long sb = ds ? g.v_sb : g.k_sb, sh = ds ? g.v_sh : g.k_sh, sr = ds ? g.v_sr : g.k_sr;
      hkjit_attn::load_rows<LOAD_BYTES>(rkv, kv + (long long)b * sb + (long long)kh * sh + (long long)k_off * sr, sr,
                                        kw, Lk);
      hk::mul(rkv, rkv, ds ? 1.0f : g.scale_log2);
    }
    const T* mine = (const T*)(ds ? g.d_o : g.q);
    const long long m_sb = ds ? g.do_sb : g.q_sb, m_sh = ds ? g.do_sh : g.q_sh, m_sr = ds ? g.do_sr : g.q_sr;
    const float* stat = ds ? g.delta : g.lse;
    const long long st_sb = ds ? g.delta_sb : g.lse_sb, st_sh = ds ? g.delta_sh : g.lse_sh;

    // Query blocks that see a key of this block: causal starts at the first query seeing key k0.
    const int shift = Lk - Lq;
    const int qb0 = CAUSAL ? hk::max(0, k0 - shift) / BQ : 0;
    const int nqb = hk::ceil_div(Lq, BQ);
    const int per_head = hk::max(0, nqb - qb0);
    const int steps = group * per_head;
    RO acc;   // dV^T (P wave) or dK^T (dS wave)
    hk::zero(acc);
    if (steps > 0) {
      // The P waves load the Q tiles, the dS waves the dO tiles.
      hk::tile_loader<StQ, PAIRS, LOAD_BYTES> ld;
      ld.init(m_sr, pair);
      const long long m_end = (long long)(Lq - 1) * m_sr + D;
      auto head_of = [&](int t) { return kh * group + t / per_head; };
      auto q0_of = [&](int t) { return (qb0 + t % per_head) * BQ; };
      auto issue = [&](int t, int stage) {
        const long long r = q0_of(t);
        const T* p = mine + (long long)b * m_sb + (long long)head_of(t) * m_sh + (q_off + r) * m_sr;
        ld.issue(tiles[stage][ds], p, (m_end - r * m_sr) * (long long)sizeof(T));
      };
      issue(0, 0);
      hk::wait_vm<0>();
      hk::barrier();
      for (int t = 0; t < steps; ++t) {
        const int s = t & 1, q0 = q0_of(t);
        if (t + 1 < steps) issue(t + 1, s ^ 1);
        RS x;   // S (P wave) or dP (dS wave)
        {
          RQ rq;
          hk::load(rq, tiles[s][ds], 0, 0);
          hk::zero(x);
          hk::mma_ABt(x, rq, rkv, x);
        }
        // Row r = 16 i + acc_row(v) of the block: query q0 + r and its LSE or Delta, read through a
        // buffer that ends at the last query (rows past it read 0; no branch per row).
        const hk::buffer stats =
            hk::make_buffer(stat + (long long)b * st_sb + (long long)head_of(t) * st_sh + q_off + q0, (Lq - q0) * 4ll);
        auto row = [&](int i, int v) { return i * 16 + S1::acc_row(v, l); };
        auto row_stat = [&](int r) {
          return __builtin_bit_cast(float, __builtin_amdgcn_raw_buffer_load_b32(stats, (hk::u32)(4 * r), 0, 0));
        };
        if (!ds) {
#pragma unroll
          for (int i = 0; i < RS::TR; ++i)
#pragma unroll
            for (int v = 0; v < S1::ACC; ++v) {
              const int qi = q0 + row(i, v);
              const float x2 = row_stat(row(i, v));
              const float lse2 = hkjit_attn::lse_log2<T>(x2);
              const int last = qi >= Lq ? -1 : (CAUSAL ? hk::min(Lk - 1, qi + shift) : Lk - 1);
              const int lim = last - kw - S1::acc_col(l);
#pragma unroll
              for (int j = 0; j < RS::TC; ++j)
                x.t[i][j][v] = hk::fast_exp2(hkjit_attn::mask_by_sign(x.t[i][j][v], lim - j * 16) - lse2);   // P
            }
          hkjit_attn::put(slab[pair], x);
        }
        hk::sync_lds();   // P in the slab
        if (ds) {
          RS p;
          hkjit_attn::take(p, slab[pair]);
#pragma unroll
          for (int i = 0; i < RS::TR; ++i)
#pragma unroll
            for (int v = 0; v < S1::ACC; ++v) {
              const float dl = row_stat(row(i, v));
#pragma unroll
              for (int j = 0; j < RS::TC; ++j) x.t[i][j][v] = p.t[i][j][v] * (x.t[i][j][v] - dl);   // dS
            }
        }
        {
          RP op;
          hkjit_attn::acc_to_operand(op, x);
          RQT rt_;
          hkjit_attn::load_acc_order(rt_, tiles[s][1 - ds]);
          hk::mma_AtB(acc, rt_, op, acc);
        }
        hk::wait_vm<0>();
        hk::sync_lds();   // this block's reads and slab reads done, the next block's loads landed
      }
    }
    if (ds) hk::mul(acc, acc, g.scale);
    T* out = (T*)(ds ? g.dk : g.dv);
    const long long o_sb = ds ? g.dk_sb : g.dv_sb, o_sh = ds ? g.dk_sh : g.dv_sh, o_sr = ds ? g.dk_sr : g.dv_sr;
    hkjit_attn::store_acc_order(out + (long long)b * o_sb + (long long)kh * o_sh + (long long)(k_off + kw) * o_sr, o_sr,
                                acc, Lk - kw);
  }
};
