#pragma once
// gemm_hopper.cuh: C = alpha * A B + beta * C_in + bias on Hopper (sm_90a).
//
//   A: M x K, B: K x N (bf16 or fp16, each K-major or M/N-major, read through strides),
//   C: M x N (bf16, fp16 or fp32), fp32 accumulation.
//
// One producer warpgroup fills a STAGES-deep ring of shared-memory stages (TMA, or plain loads
// where TMA cannot address an operand); CONSUMERS warpgroups each own BM/CONSUMERS rows of the
// BM x BN block and run wgmma on every stage. full[s] says "stage s holds data", empty[s] says
// "every consumer is done reading stage s". The grid is persistent: each block walks tiles
// blockIdx.x, blockIdx.x + gridDim.x, ... in GROUP_M-grouped order, and the ring runs on across
// tiles, so the producer prefetches the next tile while consumers store the current one.
//
// SPLIT_K > 1 (small M, long K): the work unit is (tile, K-slice); the SPLIT_K slices of a tile are
// adjacent units, so they run at the same time on different SMs. Each consumer writes its fp32
// partial accumulator to the scratch, then bumps the tile's counter; the one that arrives last
// adds the other partials and runs the normal epilogue (alpha, beta, C_in, bias, output dtype),
// then resets the counter to 0 for the next launch. Nobody waits on another block.
#include "hk/hk.hpp"

template <class TIn, class TOut, bool A_KMAJOR, bool B_KMAJOR, int BM, int BN, int BK, int CONSUMERS,
          int STAGES, int GROUP_M, bool HAS_BIAS, bool HAS_C, bool A_TMA, bool B_TMA, bool C_TMA = false, int SPLIT_K = 1>
struct gemm_hopper {
  // ---- constants -------------------------------------------------------------------------------
  static constexpr int CONSUMER_ROWS = BM / CONSUMERS;        // rows of C per consumer warpgroup
  static constexpr int threads = (CONSUMERS + 1) * hk::WARPGROUP_THREADS;
  static constexpr int PRODUCER = CONSUMERS;                  // the last warpgroup loads
  static constexpr bool ALL_TMA = A_TMA && B_TMA;
  // Registers: at entry every thread has 65536/threads (rounded down to 8); the producer needs few,
  // so it gives them to the consumers, whose accumulators are BN/2 * CONSUMER_ROWS/64 floats.
  // Plain (non-TMA) loads need address registers in the producer.
  static constexpr int PRODUCER_REGS = !ALL_TMA ? 56 : CONSUMERS <= 2 ? 40 : 24;
  // setmaxnreg.inc only draws on registers the block was launched with (threads x entry count):
  // asking for more than the producer gave back blocks forever.
  static constexpr int ENTRY_REGS = 65536 / threads / 8 * 8;
  static constexpr int CONSUMER_REGS_RAW = (ENTRY_REGS * (CONSUMERS + 1) - PRODUCER_REGS) / CONSUMERS / 8 * 8;
  static constexpr int CONSUMER_REGS = CONSUMER_REGS_RAW > 240 ? 240 : CONSUMER_REGS_RAW;
  static constexpr bool REALLOC_REGS = CONSUMERS >= 2;

  static_assert(SPLIT_K >= 1 && SPLIT_K <= 16, "gemm_hopper: SPLIT_K");
  static_assert(BK == 64, "gemm_hopper: BK is one 128-byte swizzle row of bf16/fp16");
  static_assert(CONSUMER_ROWS % 64 == 0, "gemm_hopper: each consumer owns whole 64-row wgmma blocks");
  static_assert(BN == 16 || BN == 32 || BN == 64 || BN == 128 || BN == 192 || BN == 256, "gemm_hopper: BN");

  using a_tile = hk::conditional_t<A_KMAJOR, hk::st<TIn, BM, BK>, hk::st<TIn, BK, BM>>;
  using b_tile = hk::conditional_t<B_KMAJOR, hk::st<TIn, BN, BK>, hk::st<TIn, BK, BN>>;
  using acc_t = hk::rt<float, CONSUMER_ROWS, BN>;
  // Small accumulators: k16 steps rotate over NACC independent accumulators (summed before the
  // epilogue), so a chain of K/16 dependent wgmmas becomes NACC chains of K/16/NACC.
  static constexpr int ACC_REGS = CONSUMER_ROWS / 64 * BN / 2;
  static constexpr int NACC = ACC_REGS <= 32 ? 4 : ACC_REGS <= 64 ? 2 : 1;
  struct stage_t { a_tile a; b_tile b; };
  static constexpr int STAGE_BYTES = sizeof(stage_t);
  // C_TMA: each consumer stages its rows of C in shared memory (128-byte swizzle, chunks of 64
  // columns) and one thread stores them with TMA, so the warpgroup goes back to wgmma at once
  // instead of waiting on ~64 scattered 4-byte global stores per thread.
  static_assert(!C_TMA || sizeof(TOut) == 2, "gemm_hopper: TMA-store epilogue for 16-bit outputs");
  using c_tile = hk::st<hk::conditional_t<sizeof(TOut) == 2, TOut, TIn>, CONSUMER_ROWS, BN>;
  static constexpr int C_BYTES = C_TMA ? CONSUMERS * int(sizeof(c_tile)) : 0;
  // 1024 bytes of slack to align the ring to a swizzle atom, the ring, C staging, the barriers.
  // Split-K: one "am I last" word per consumer after the barriers.
  static constexpr int dynamic_smem = 1024 + STAGES * STAGE_BYTES + C_BYTES + 2 * STAGES * 8 + (SPLIT_K > 1 ? 16 : 0);

  // ---- arguments (mirrored by hkjit/ops/_hopper_gemm.py: Args) -----------------------------------
  struct args {
    hk::tma_desc a_map;        // A as {K, M} (K-major) or {M, K}; box = one stage's A chunk
    hk::tma_desc b_map;        // B as {K, N} (K-major) or {N, K}
    hk::tma_desc c_map;        // C as {N, M}, box {min(64, BN), BM/CONSUMERS} (C_TMA only)
    const void* a;             // used by the non-TMA path only
    const void* b;
    void* c;                   // output, M x N, row stride ldc, column stride 1
    const void* c_in;          // beta * c_in (HAS_C), row stride ldc_in
    const void* bias;          // length N, output dtype (HAS_BIAS)
    long long a_stride_m, a_stride_k, b_stride_k, b_stride_n;   // elements
    long long ldc, ldc_in;
    int M, N, K;
    float alpha, beta;
    void* workspace;           // SPLIT_K > 1: counters, zero at launch and left zero (kept per stream)
    float* partials;           // SPLIT_K > 1: fp32 partials (scratch, per call; layout: splitk_reduce)
  };
  // Offsets (mirrored and tested in Python): a_map 0, b_map 128, c_map 256, a 384, a_stride_m 424,
  // M 472, alpha 484, workspace 496, partials 504; size 512 (alignas(64) of the tensor maps).
  static_assert(sizeof(args) == 512, "args layout is mirrored in Python");

  // ---- tile order ---------------------------------------------------------------------------------
  // GROUP_M row-blocks are walked column by column, so blocks running together share A rows and
  // B columns in L2.
  static __device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
    int per_group = GROUP_M * tiles_n;
    int first = (t / per_group) * GROUP_M;
    int size = tiles_m - first < GROUP_M ? tiles_m - first : GROUP_M;
    int r = t % per_group;
    tm = first + r % size;
    tn = r / size;
  }

  // Work unit u: tile u / SPLIT_K, K-slice u % SPLIT_K = k-tiles [kb, ke) (may be empty when
  // k_tiles < SPLIT_K: that slice contributes zeros).
  static __device__ __forceinline__ void unit_range(int u, int k_tiles, int& tile, int& kb, int& ke) {
    tile = u / SPLIT_K;
    const int s = u % SPLIT_K;
    kb = s * k_tiles / SPLIT_K;
    ke = (s + 1) * k_tiles / SPLIT_K;
  }

  // ---- producer --------------------------------------------------------------------------------
  // Plain loads of one operand tile (where TMA cannot be used: unaligned base or strides). Tile
  // element (r, c), c the contiguous column, is global (row, k) or (k, row) of the operand; out of
  // range reads as zero, like TMA.
  template <class ST>
  static __device__ __forceinline__ void load_plain(ST& t, const TIn* p, bool kmajor, int row0, int k0,
                                                    int rows, int K, long long s_row, long long s_k) {
    for (int i = hk::warpgroup_thread(); i < ST::rows * ST::cols; i += hk::WARPGROUP_THREADS) {
      int r = i / ST::cols, c = i % ST::cols;
      int row = row0 + (kmajor ? r : c), k = k0 + (kmajor ? c : r);
      TIn v{0};
      if (row < rows && k < K) v = p[row * s_row + k * s_k];
      t.at(r, c) = v;
    }
  }

  static __device__ void produce(const args& g, stage_t* ring, hk::mbarrier* full, hk::mbarrier* empty) {
    const int tiles_m = (g.M + BM - 1) / BM, tiles_n = (g.N + BN - 1) / BN;
    const int k_tiles = (g.K + BK - 1) / BK, tiles = tiles_m * tiles_n;
    const bool leader = hk::warpgroup_thread() == 0;
    if (ALL_TMA && !leader) return;
    if (leader) {
      if (A_TMA) hk::tma::prefetch(g.a_map);
      if (B_TMA) hk::tma::prefetch(g.b_map);
    }
    constexpr unsigned TMA_BYTES = (A_TMA ? sizeof(a_tile) : 0) + (B_TMA ? sizeof(b_tile) : 0);
    int s = 0, phase = 0;
    for (int u = blockIdx.x; u < tiles * SPLIT_K; u += gridDim.x) {
      int t, kb, ke, tm, tn;
      unit_range(u, k_tiles, t, kb, ke);
      tile_coords(t, tiles_m, tiles_n, tm, tn);
      const int m0 = tm * BM, n0 = tn * BN;
      for (int kt = kb; kt < ke; ++kt) {
        const int k0 = kt * BK;
        hk::wait(empty[s], phase ^ 1);         // fresh barriers pass parity 1 at once
        stage_t& st = ring[s];
        if (leader) {
          if (ALL_TMA) hk::arrive_expect_tx(full[s], TMA_BYTES);
          else if (TMA_BYTES) asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;"
                                           :: "r"(hk::smem_addr(&full[s])), "r"(TMA_BYTES) : "memory");
          if constexpr (A_TMA) {
            if constexpr (A_KMAJOR) hk::tma::load_async(st.a.data, g.a_map, k0, m0, full[s]);
            else
#pragma unroll
              for (int c = 0; c < a_tile::chunks; ++c)
                hk::tma::load_async(st.a.chunk(c), g.a_map, m0 + c * a_tile::chunk_cols, k0, full[s]);
          }
          if constexpr (B_TMA) {
            if constexpr (B_KMAJOR) hk::tma::load_async(st.b.data, g.b_map, k0, n0, full[s]);
            else
#pragma unroll
              for (int c = 0; c < b_tile::chunks; ++c)
                hk::tma::load_async(st.b.chunk(c), g.b_map, n0 + c * b_tile::chunk_cols, k0, full[s]);
          }
        }
        if constexpr (!ALL_TMA) {
          if constexpr (!A_TMA)
            load_plain(st.a, static_cast<const TIn*>(g.a), A_KMAJOR, m0, k0, g.M, g.K, g.a_stride_m, g.a_stride_k);
          if constexpr (!B_TMA)
            load_plain(st.b, static_cast<const TIn*>(g.b), B_KMAJOR, n0, k0, g.N, g.K, g.b_stride_n, g.b_stride_k);
          hk::fence_proxy_async();            // generic-proxy writes, read next by wgmma
          hk::arrive(full[s]);
        }
        if (++s == STAGES) { s = 0; phase ^= 1; }
      }
    }
  }

  // ---- consumers ---------------------------------------------------------------------------------
  static __device__ __forceinline__ void mma_stage(acc_t (&acc)[NACC], stage_t& st, int consumer, bool accumulate) {
    if constexpr (A_KMAJOR) {
      auto& a = hk::subtile_rows<CONSUMER_ROWS>(st.a, consumer);
      if constexpr (B_KMAJOR) hk::mma_ABt(acc, a, st.b, accumulate);
      else hk::mma_AB(acc, a, st.b, accumulate);
    } else {
      auto& a = hk::subtile_cols<CONSUMER_ROWS>(st.a, consumer);
      if constexpr (B_KMAJOR) hk::mma_AtBt(acc, a, st.b, accumulate);
      else hk::mma_AtB(acc, a, st.b, accumulate);
    }
  }

  // out = alpha * acc + beta * c_in + bias. Calls emit(row, col, x0, x1, pair) for every column
  // pair this thread holds with row < M and col < N (pair: col + 1 < N too).
  template <class Emit>
  static __device__ __forceinline__ void epilogue_values(const args& g, acc_t& acc, int row0, int col0, Emit emit) {
    const TOut* cin = static_cast<const TOut*>(g.c_in);
    const TOut* bias = static_cast<const TOut*>(g.bias);
#pragma unroll
    for (int k = 0; k < acc_t::regs; k += 4) {
      const int col = col0 + acc_t::col(k);
      if (col >= g.N) continue;
      const bool pair = col + 1 < g.N;
      float b0 = 0.f, b1 = 0.f;
      if constexpr (HAS_BIAS) {
        b0 = hk::to_float(bias[col]);
        if (pair) b1 = hk::to_float(bias[col + 1]);
      }
#pragma unroll
      for (int blk = 0; blk < acc_t::blocks; ++blk)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + acc_t::row(blk, k + 2 * h);
          if (row >= g.M) continue;
          float x0 = g.alpha * acc.v[blk][k + 2 * h] + b0;
          float x1 = g.alpha * acc.v[blk][k + 2 * h + 1] + b1;
          if constexpr (HAS_C) {
            const TOut* ci = cin + row * g.ldc_in + col;
            x0 += g.beta * hk::to_float(ci[0]);
            if (pair) x1 += g.beta * hk::to_float(ci[1]);
          }
          emit(row, col, x0, x1, pair);
        }
    }
  }

  // Direct global stores, bounds-checked, column pairs stored together where aligned.
  static __device__ __forceinline__ void epilogue_direct(const args& g, acc_t& acc, int row0, int col0) {
    TOut* c = static_cast<TOut*>(g.c);
    const bool vec = (g.ldc % 2) == 0 && (reinterpret_cast<unsigned long long>(c) % (2 * sizeof(TOut))) == 0;
    epilogue_values(g, acc, row0, col0, [&](int row, int col, float x0, float x1, bool pair) {
      TOut* p = c + row * g.ldc + col;
      hk::store_pair(p, x0, x1, pair && vec);
      if (pair && !vec) p[1] = hk::from_float<TOut>(x1);
    });
  }

  // Through shared memory and TMA: the store engine clips rows/columns outside C.
  static __device__ __forceinline__ void epilogue_tma(const args& g, acc_t& acc, c_tile& cs, int consumer,
                                                      int row0, int col0) {
    const bool leader = hk::warpgroup_thread() == 0;
    if (leader) hk::tma::store_wait_read<0>();        // the previous tile's store has left smem
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
    epilogue_values(g, acc, row0, col0, [&](int row, int col, float x0, float x1, bool) {
      *reinterpret_cast<unsigned*>(&cs.at(row - row0, col - col0)) = hk::pack2<TOut>(x0, x1);
    });
    hk::fence_proxy_async();                           // generic writes -> async-proxy reads
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
    if (leader) {
#pragma unroll
      for (int c = 0; c < c_tile::chunks; ++c) hk::tma::store_async(g.c_map, cs.chunk(c), col0 + c * c_tile::chunk_cols, row0);
      hk::tma::store_commit();
    }
  }

  // ---- split-K reduction ---------------------------------------------------------------------------
  // Workspace: `tiles * CONSUMERS` u32 counters (zero before the first launch; each launch leaves
  // them zero). Scratch (`partials`, each slot written before it is read in the same launch): one
  // fp32 slot per (tile, slice, consumer) holding that consumer's accumulator in register order: float4 j of 64-row block b of thread t at
  // [(b * regs/4 + j) * 128 + t], so every store and load is a coalesced 16-byte access. Warps
  // whose 16 rows all lie below M skip both (the same warps in every slice).
  static constexpr long long SLOT_FLOATS = (long long)CONSUMER_ROWS * BN;
  static __device__ __forceinline__ void st_cg4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
  }
  static __device__ __forceinline__ void ld_cg4(const float* p, float& a, float& b, float& c, float& d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
  }
  // Returns true in the consumer that arrived last for this tile (its acc then holds the sum).
  static __device__ bool splitk_reduce(const args& g, acc_t& acc, int tiles, int tile, int slice, int consumer,
                                       int row0, volatile int* flags) {
    const int t = hk::warpgroup_thread();
    unsigned* counter = static_cast<unsigned*>(g.workspace) + tile * CONSUMERS + consumer;
    float* part = g.partials;
    auto slot = [&](int s) { return part + ((long long)(tile * SPLIT_K + s) * CONSUMERS + consumer) * SLOT_FLOATS; };
    const int warp_row = row0 + (t / 32) * 16;
    float* mine = slot(slice);
#pragma unroll
    for (int b = 0; b < acc_t::blocks; ++b)
      if (warp_row + b * 64 < g.M)
#pragma unroll
        for (int j = 0; j < acc_t::regs / 4; ++j)
          st_cg4(mine + ((b * (acc_t::regs / 4) + j) * 128 + t) * 4, acc.v[b][4 * j], acc.v[b][4 * j + 1],
                 acc.v[b][4 * j + 2], acc.v[b][4 * j + 3]);
    asm volatile("fence.acq_rel.gpu;" ::: "memory");     // our partial before our arrival
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
    if (t == 0) {
      unsigned old;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
      const bool last = old == SPLIT_K - 1;
      if (last) asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" :: "l"(counter) : "memory");
      flags[consumer] = last;
    }
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
    if (!flags[consumer]) return false;
    asm volatile("fence.acq_rel.gpu;" ::: "memory");     // the other partials after their arrivals
    // Sum the slices in slice order, whichever arrived last (our own partial read back from its
    // slot too): the same bits on every run. Starting from our own accumulator would make the
    // order, and so the rounding, depend on which slice finished last.
#pragma unroll 1
    for (int s = 0; s < SPLIT_K; ++s) {
      const float* p = slot(s);
#pragma unroll
      for (int b = 0; b < acc_t::blocks; ++b)
        if (warp_row + b * 64 < g.M)
#pragma unroll
          for (int j = 0; j < acc_t::regs / 4; ++j) {
            float x0, x1, x2, x3;
            ld_cg4(p + ((b * (acc_t::regs / 4) + j) * 128 + t) * 4, x0, x1, x2, x3);
            if (s == 0) acc.v[b][4 * j] = acc.v[b][4 * j + 1] = acc.v[b][4 * j + 2] = acc.v[b][4 * j + 3] = 0.0f;
            acc.v[b][4 * j] += x0; acc.v[b][4 * j + 1] += x1; acc.v[b][4 * j + 2] += x2; acc.v[b][4 * j + 3] += x3;
          }
    }
    return true;
  }

  static __device__ void consume(const args& g, stage_t* ring, c_tile* cstage, hk::mbarrier* full, hk::mbarrier* empty,
                                 volatile int* flags, int consumer) {
    const int tiles_m = (g.M + BM - 1) / BM, tiles_n = (g.N + BN - 1) / BN;
    const int k_tiles = (g.K + BK - 1) / BK, tiles = tiles_m * tiles_n;
    const bool leader = hk::warpgroup_thread() == 0;
    acc_t acc[NACC];
    int s = 0, phase = 0;
    for (int u = blockIdx.x; u < tiles * SPLIT_K; u += gridDim.x) {
      int t, kb, ke, tm, tn;
      unit_range(u, k_tiles, t, kb, ke);
      tile_coords(t, tiles_m, tiles_n, tm, tn);
      int prev = -1;
      if (kb == ke)
#pragma unroll
        for (int i = 0; i < NACC; ++i) hk::zero(acc[i]);
      for (int kt = kb; kt < ke; ++kt) {
        hk::wait(full[s], phase);
        mma_stage(acc, ring[s], consumer, kt > kb);
        // Keep one wgmma group in flight: once the previous stage's group is done, release it.
        hk::mma_wait<1>();
        if (prev >= 0 && leader) hk::arrive(empty[prev]);
        prev = s;
        if (++s == STAGES) { s = 0; phase ^= 1; }
      }
      hk::mma_wait<0>();
#pragma unroll
      for (int i = 0; i < NACC; ++i) hk::fence_operand(acc[i]);
      if (leader && prev >= 0) hk::arrive(empty[prev]);
#pragma unroll
      for (int i = 1; i < NACC; ++i) hk::add(acc[0], acc[i]);
      const int row0 = tm * BM + consumer * CONSUMER_ROWS, col0 = tn * BN;
      if constexpr (SPLIT_K > 1)
        if (!splitk_reduce(g, acc[0], tiles, t, u % SPLIT_K, consumer, row0, flags)) continue;
      if constexpr (C_TMA) epilogue_tma(g, acc[0], cstage[consumer], consumer, row0, col0);
      else epilogue_direct(g, acc[0], row0, col0);
    }
    if constexpr (C_TMA)
      if (leader) hk::tma::store_wait<0>();            // smem must outlive the last store
  }

  // ---- entry -------------------------------------------------------------------------------------
  static __device__ void run(const args& g) {
    extern __shared__ unsigned char smem_raw[];
    unsigned long long base = (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull;
    stage_t* ring = reinterpret_cast<stage_t*>(base);
    c_tile* cstage = reinterpret_cast<c_tile*>(ring + STAGES);
    hk::mbarrier* full = reinterpret_cast<hk::mbarrier*>(reinterpret_cast<unsigned char*>(ring + STAGES) + C_BYTES);
    hk::mbarrier* empty = full + STAGES;
    if (threadIdx.x == 0) {
      for (int s = 0; s < STAGES; ++s) {
        hk::init(full[s], ALL_TMA ? 1 : hk::WARPGROUP_THREADS);
        hk::init(empty[s], CONSUMERS);
      }
      hk::fence_barrier_init();
    }
    __syncthreads();
    const int wg = hk::warpgroup_id();
    if (wg == PRODUCER) {
      if constexpr (REALLOC_REGS) hk::setmaxnreg_dec<PRODUCER_REGS>();
      produce(g, ring, full, empty);
    } else {
      if constexpr (REALLOC_REGS) hk::setmaxnreg_inc<CONSUMER_REGS>();
      consume(g, ring, cstage, full, empty, reinterpret_cast<volatile int*>(empty + STAGES), wg);
    }
  }
};
