// gemm_cdna.hip: bf16/fp16 GEMM on CDNA (gfx942, gfx950), fp32 accumulation.
//
//   D[m][n] = alpha * sum_k A[m][k] * B[k][n] + bias[n] + beta * Cin[m][n]
//
// A is M x K and B is K x N, each either K-major (unit stride along K) or MN-major (unit stride
// along M / N), read in place from its strides. D, bias and Cin have the output type; bias and
// Cin may be null; Cin is read only when beta != 0. Any M, N, K >= 1: global reads go through
// buffer resources whose num_records ends at the matrix (lanes past it read 0, never fault; no
// part of an address goes into the unchecked soffset), the one load chunk that straddles a
// matrix's end is re-read element by element, the ragged last K-step is zeroed in LDS before it
// is read, and stores are bounds-checked.
//
// LOAD_BYTES (4, or 16 on gfx950) is the direct-to-LDS width per lane: every global row start
// (base pointer, leading-dimension stride) must be aligned to it (hkjit checks before launch).
//
// Block: BM x BN output tile, WAVES waves in a WM x WN grid (8 waves: 2 x 4, 4 waves: 2 x 2);
// each wave owns a (BM/WM) x (BN/WN) tile, computed in two halves along M. Per K-step of BK:
//
//   M1: ds_read A half 0 + all of B; issue direct-to-LDS loads of tile t+1 (other stage)
//   C1: MFMAs of half 0                  M2: ds_read A half 1; wait own loads of t+1
//   C2: MFMAs of half 1
//
// with a workgroup barrier after each of the four phases. With 8 waves and 2 stages, waves 4..7
// start one barrier late (ping-pong): while waves 0..3 run MFMAs, waves 4..7 run their memory
// phase on the same SIMDs, and the other way round. Phase-level hazards (see
// docs/notes/cdna_gemm.md): a stage is refilled only after every wave's reads of it completed
// (lgkmcnt(0) before each barrier), and is read only after every wave's loads into it completed
// (vmcnt(0) before the barrier that ends M2).
#pragma once
#include "hk/hk.hpp"

template <typename TIn, typename TOut, int BM, int BN, int BK, int WAVES, int STAGES, int GROUP_M,
          bool A_KMAJOR, bool B_KMAJOR, int MFMA_M, int MFMA_K, int LOAD_BYTES>
struct gemm_cdna {
  static constexpr int threads = WAVES * 64;
  static constexpr int dynamic_smem = 0;

  struct args {
    const void* a;      // M x K
    const void* b;      // K x N
    void* c;            // M x N output
    const void* bias;   // N (output dtype) or null
    const void* cin;    // M x N (output dtype) or null; read when beta != 0
    long long a_stride_m, a_stride_k;     // elements; the K-major operand has stride_k == 1
    long long b_stride_k, b_stride_n;
    long long c_stride_m, c_stride_n;
    long long cin_stride_m, cin_stride_n;
    int M, N, K;
    float alpha, beta;
  };

  using S = hk::mfma_shape<MFMA_M, MFMA_K>;
  static constexpr int WM = 2, WN = WAVES / 2;
  static constexpr int WTM = BM / WM, WTN = BN / WN, HALF = WTM / 2;
  static constexpr bool PINGPONG = WAVES == 8 && STAGES == 2;
  static_assert(WAVES == 4 || WAVES == 8, "4 or 8 waves");
  static_assert(STAGES == 1 || STAGES == 2, "1 or 2 LDS stages");
  static_assert(hk::arch::has_mfma<MFMA_M, MFMA_K>, "MFMA shape not available on this target");
  static_assert(BM % (WM * 2 * MFMA_M) == 0 && BN % (WN * MFMA_M) == 0 && BK % MFMA_K == 0, "tile / MFMA mismatch");

  using SwzK = hk::arch_swz_k;
  using SwzMN = hk::arch_swz_mn;
  // Shared tiles: K-major operands are stored (M or N) x BK, MN-major ones BK x (M or N).
  using StA = hk::st<TIn, A_KMAJOR ? BM : BK, A_KMAJOR ? BK : BM, typename hk::cond<A_KMAJOR, SwzK, SwzMN>::type>;
  using StB = hk::st<TIn, B_KMAJOR ? BN : BK, B_KMAJOR ? BK : BN, typename hk::cond<B_KMAJOR, SwzK, SwzMN>::type>;
  static constexpr int lds_bytes = STAGES * (StA::bytes + StB::bytes);
  static_assert(lds_bytes <= hk::arch::lds_bytes, "LDS budget exceeded");

  // Register tiles: A half (HALF x BK), B (BK x WTN), fp32 accumulators.
  using RA = hk::rt<TIn, A_KMAJOR ? HALF : BK, A_KMAJOR ? BK : HALF, typename hk::cond<A_KMAJOR, hk::row_l, hk::col_l>::type, S>;
  using RB = hk::rt<TIn, B_KMAJOR ? WTN : BK, B_KMAJOR ? BK : WTN, typename hk::cond<B_KMAJOR, hk::row_l, hk::col_l>::type, S>;
  using RC = hk::rt<float, HALF, WTN, hk::acc_l, S>;

  // Fragment reads: shared-tile coordinates of this wave's A half h and of its B columns.
  HK_INLINE static void read_a(RA& ra, const StA& sa, int row0) {
    if constexpr (A_KMAJOR) hk::load(ra, sa, row0, 0);
    else hk::load(ra, sa, 0, row0);
  }
  HK_INLINE static void read_b(RB& rb, const StB& sb, int col0) {
    if constexpr (B_KMAJOR) hk::load(rb, sb, col0, 0);
    else hk::load(rb, sb, 0, col0);
  }
  HK_INLINE static void mma(RC& c, const RA& a, const RB& b) {
    if constexpr (A_KMAJOR && B_KMAJOR) hk::mma_ABt(c, a, b, c);
    else if constexpr (A_KMAJOR) hk::mma_AB(c, a, b, c);
    else if constexpr (B_KMAJOR) hk::mma_AtBt(c, a, b, c);
    else hk::mma_AtB(c, a, b, c);
  }

  static __device__ void run(const args& g) {
    __shared__ StA sA[STAGES];
    __shared__ StB sB[STAGES];

    // ---- which tile: XCD-aware remap, then GROUP_M ordering ----
    const int tiles_m = hk::ceil_div(g.M, BM), tiles_n = hk::ceil_div(g.N, BN);
    const int nblocks = tiles_m * tiles_n;
    const int pid = hk::xcd_remap(hk::block_id_x(), nblocks, 8);
    int tm, tn;
    hk::group_m_tile(pid, tiles_m, tiles_n, GROUP_M, tm, tn);
    const int m0 = tm * BM, n0 = tn * BN;

    const int wave = hk::wave_id();
    const int wr = wave / WN, wc = wave % WN;
    const int group = PINGPONG ? wave / 4 : 0;

    // ---- global sources: buffers that end where the matrices end ----
    const TIn* A = (const TIn*)g.a;
    const TIn* B = (const TIn*)g.b;
    const long long a_rs = A_KMAJOR ? g.a_stride_m : g.a_stride_k;   // stride between shared-tile rows
    const long long b_rs = B_KMAJOR ? g.b_stride_n : g.b_stride_k;
    const long long a_end = (long long)(g.M - 1) * g.a_stride_m + (long long)(g.K - 1) * g.a_stride_k + 1;
    const long long b_end = (long long)(g.K - 1) * g.b_stride_k + (long long)(g.N - 1) * g.b_stride_n + 1;
    hk::tile_loader<StA, WAVES, LOAD_BYTES> la;
    hk::tile_loader<StB, WAVES, LOAD_BYTES> lb;
    la.init(a_rs, wave);
    lb.init(b_rs, wave);
    auto issue = [&](int t, int stage) {
      const long long ao = (long long)m0 * g.a_stride_m + (long long)t * BK * g.a_stride_k;
      const long long bo = (long long)t * BK * g.b_stride_k + (long long)n0 * g.b_stride_n;
      la.issue(sA[stage], A + ao, (a_end - ao) * (long long)sizeof(TIn));
      lb.issue(sB[stage], B + bo, (b_end - bo) * (long long)sizeof(TIn));
    };

    RC acc[2];
    hk::zero(acc[0]);
    hk::zero(acc[1]);
    RA ra;
    RB rb;
    const int T = hk::ceil_div(g.K, BK);
    const int arow = wr * WTM, bcol = wc * WTN;

    // The last tile, once its loads completed and before anyone reads it, is patched by all
    // waves in up to two extra barrier-separated phases (uniform per block):
    //  * the direct-to-LDS chunk holding a matrix's last element straddles the end of the
    //    buffer when the unit-stride extent (K of a K-major operand, M/N of an MN-major one) is
    //    not a whole number of chunks; its range check is per dword (or per access), so valid
    //    elements in it read 0: blocks holding that element reload the chunk element by element
    //    (hk::fix_last_chunk; wave 0 for A, wave 1 for B).
    //  * ragged K: K indices >= kl are zeroed in LDS (both operands; a K-major row's tail holds
    //    the next row's data, and a finite or NaN/Inf value must not meet a zero).
    // Two phases, not one: the chunk and the zeroed tail can share dwords of one row.
    constexpr int EPC = LOAD_BYTES / (int)sizeof(TIn);   // elements per direct-to-LDS chunk
    const bool a_fix = (A_KMAJOR ? g.K : g.M) % EPC != 0 && tm == tiles_m - 1;
    const bool b_fix = (B_KMAJOR ? g.K : g.N) % EPC != 0 && tn == tiles_n - 1;
    auto tail = [&](int stage, int kl, int t) {
      if (a_fix || b_fix) {
        const long long k0 = (long long)t * BK;
        if (a_fix && wave == 0) {
          const long long ao = (long long)m0 * g.a_stride_m + k0 * g.a_stride_k;
          const long long left = (a_end - ao) * (long long)sizeof(TIn);
          if constexpr (A_KMAJOR) hk::fix_last_chunk<LOAD_BYTES>(sA[stage], A + ao, left, a_rs, g.M - 1 - m0, kl - 1);
          else hk::fix_last_chunk<LOAD_BYTES>(sA[stage], A + ao, left, a_rs, kl - 1, g.M - 1 - m0);
        }
        if (b_fix && wave == 1) {
          const long long bo = k0 * g.b_stride_k + (long long)n0 * g.b_stride_n;
          const long long left = (b_end - bo) * (long long)sizeof(TIn);
          if constexpr (B_KMAJOR) hk::fix_last_chunk<LOAD_BYTES>(sB[stage], B + bo, left, b_rs, g.N - 1 - n0, kl - 1);
          else hk::fix_last_chunk<LOAD_BYTES>(sB[stage], B + bo, left, b_rs, kl - 1, g.N - 1 - n0);
        }
        hk::sync_lds();
      }
      if (kl < BK) {
        const int tid = hk::thread_id();
        if constexpr (A_KMAJOR) hk::zero_region(sA[stage], 0, BM, kl, BK, tid, threads);
        else hk::zero_region(sA[stage], kl, BK, 0, BM, tid, threads);
        if constexpr (B_KMAJOR) hk::zero_region(sB[stage], 0, BN, kl, BK, tid, threads);
        else hk::zero_region(sB[stage], kl, BK, 0, BN, tid, threads);
        hk::sync_lds();
      }
    };
    // One K-step of the double-buffered schedule (four phases, a barrier after each).
    auto step2 = [&](int t) {
      const int s = t & 1;
      // M1: fragments of A half 0 and B, then the next tile's loads into the other stage
      read_a(ra, sA[s], arow);
      read_b(rb, sB[s], bcol);
      if (t + 1 < T) issue(t + 1, s ^ 1);
      hk::sync_lds();
      // C1
      hk::setprio<1>();
      mma(acc[0], ra, rb);
      hk::setprio<0>();
      hk::barrier();
      // M2: fragments of A half 1; this wave's loads of tile t+1 complete
      read_a(ra, sA[s], arow + HALF);
      hk::wait_vm<0>();
      hk::sync_lds();
      // C2
      hk::setprio<1>();
      mma(acc[1], ra, rb);
      hk::setprio<0>();
      hk::barrier();
    };
    const int kl_last = g.K - (T - 1) * BK;   // valid K of the last step, 1..BK
    if constexpr (STAGES == 2) {
      issue(0, 0);
      hk::wait_vm<0>();
      hk::barrier();
      if (group == 1) hk::barrier();   // ping-pong: the second group runs one phase behind
      for (int t = 0; t < T - 1; ++t) step2(t);
      if (PINGPONG && group == 0) hk::barrier();   // realign the groups (balances the one above)
      tail((T - 1) & 1, kl_last, T - 1);
      step2(T - 1);
    } else {
      for (int t = 0; t < T; ++t) {
        issue(t, 0);
        hk::wait_vm<0>();
        hk::barrier();
        if (t == T - 1) tail(0, kl_last, t);
        read_a(ra, sA[0], arow);
        read_b(rb, sB[0], bcol);
        hk::wait_lgkm<0>();
        mma(acc[0], ra, rb);
        read_a(ra, sA[0], arow + HALF);
        hk::wait_lgkm<0>();
        mma(acc[1], ra, rb);
        hk::barrier();   // every wave's reads of the stage completed before it is refilled
      }
    }

    // ---- epilogue: alpha, bias, beta * Cin, convert, bounds-checked store ----
    const int l = hk::lane_id();
    TOut* C = (TOut*)g.c;
    const TOut* bias = (const TOut*)g.bias;
    const TOut* cin = (const TOut*)g.cin;
    auto epilogue = [&](auto with_cin) {
      constexpr bool CIN = decltype(with_cin)::value;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < RC::TC; ++j) {
          const int n = n0 + bcol + j * S::MI + S::acc_col(l);
          const bool n_ok = n < g.N;
          const float bn = (bias != nullptr && n_ok) ? hk::to_float(bias[n]) : 0.0f;
#pragma unroll
          for (int i = 0; i < RC::TR; ++i)
#pragma unroll
            for (int v = 0; v < S::ACC; ++v) {
              const int m = m0 + arow + h * HALF + i * S::MI + S::acc_row(v, l);
              if (n_ok && m < g.M) {
                float x = g.alpha * acc[h].t[i][j][v] + bn;
                if constexpr (CIN) x += g.beta * hk::to_float(cin[m * g.cin_stride_m + n * g.cin_stride_n]);
                C[m * g.c_stride_m + n * g.c_stride_n] = hk::from_float<TOut>(x);
              }
            }
        }
    };
    if (cin != nullptr && g.beta != 0.0f) epilogue(hk::bool_c<true>{});
    else epilogue(hk::bool_c<false>{});
  }
};
