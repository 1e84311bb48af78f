#pragma once
// attention_fwd_hopper.cuh: the attention forward on Hopper (sm_90a), FlashAttention-3-style.
//
//   O = softmax(scale * Q K^T [+ bottom-right causal mask]) V,   LSE = log sum exp of the scaled scores
//   q, o: (batch, heads, rows, D); k, v: (batch, kv_heads, rows, D), head dim contiguous; bf16 / fp16.
//
// One block owns CONSUMERS * 64 query rows of one (batch, head). Warpgroup CONSUMERS is the
// producer: it streams K and V blocks of BKV keys into a STAGES-deep ring of shared tiles (full[s]:
// "stage s holds K and V", empty[s]: "every consumer warp is done with stage s"). Each consumer
// warpgroup owns 64 query rows: it loads its Q once into shared memory, then per KV block j
//   S_j = Q K_j^T       wgmma (both operands in shared memory), fp32 in registers (64 x BKV)
//   mask, online softmax in exp2 (one FFMA + ex2 per score: scale * log2 e folded in)
//   P_j -> wgmma A registers (16-bit pairs, hk::rt_a): no shared-memory round trip
//   O += P_j V_j        wgmma (A from registers, V from shared memory)
// software-pipelined one block deep (FlashAttention-3's intra-warpgroup overlap): iteration j
// issues S_j and O += P_(j-1) V_(j-1) back to back, then runs block j's softmax while the second
// product is still on the tensor cores. With PINGPONG the two consumers also take turns issuing
// their products (named barriers 3 and 4), so that one's softmax runs under the other's wgmma.
// At the end O /= l, LSE = (m + log2 l) / log2 e, stored with bounds checks.
// Loads are plain vector loads (any (batch, head, row) strides, varlen offsets) into the swizzled
// layout wgmma reads; rows past the sequence read as zero. Causal blocks past the diagonal of the
// block's last row are never loaded.
//
// Variants (compile-checked; docs/notes/attention_hopper.md, "Variants prepared"):
//   OVERLAP  the wait that retires O += P_(j-1) V_(j-1) moves from after block j's softmax to the top
//            of iteration j + 1, after the stage wait: ptxas hoists a wgmma wait to the top of its
//            basic block, and only there does the softmax stay under the product. It holds stages
//            j - 2 and j - 1 while it waits for stage j, so it needs STAGES >= 3.
//   TMA      one thread of the producer streams K and V with cp.async.bulk.tensor (4D maps over
//            (D, rows, kv heads, batch) with the caller's strides, 128-byte swizzle: the layout the
//            consumers read), completion counted in bytes on full[s]; rows past n_k come back as
//            zeros (out-of-bounds fill), as the plain loads write them. Dense batches only (packed
//            varlen rows run on into the next sequence). The producer keeps 24 registers.
//   CPASYNC  the producer's 128 threads issue every 16-byte piece of K and V (8 or 4 bytes where the
//            rows are narrower aligned) as cp.async straight into the swizzled stage, zero-filling
//            rows past n_k, then one cp.async.mbarrier.arrive.noinc each on full[s] (128 arrivals):
//            a whole stage in flight at once, nothing through registers, any strides and varlen as
//            the plain loads. The consumers fence (fence_proxy_async) after each stage wait: cp.async
//            writes through the generic proxy, wgmma reads through the async one.
//   LEAN     (1 or 2; docs/notes/attention_hopper_fwd_sass.md) the consumer loop with fewer instructions:
//            wgmma descriptors walked (hk::desc_walk: one add of a constant each, not rebuilt from the
//            address), the causal diagonal blocks' key mask as one compare a score, the row max in
//            four chains a row, and O rescaled after the iteration's P V wait, outside the ping-pong
//            turn, and only where a row of the warp moved its max. 2 also lets the softmax run under
//            the warpgroup's own P V (the wait after a branch; see consume).
//   EXP_FMA  (0, 1, 2, 3, 4, 6 or 8; docs/notes/attention_hopper_fwd_exp.md) that many of every 16 of a
//            thread's scores take their exponential on the FMA pipe (exp2_fma.cuh: range reduction and a
//            degree 3 polynomial for bf16, 4 for fp16), the rest MUFU.EX2: at D64 the exponentials, not
//            the tensor cores, bound a KV block (2 x 66 MUFU.EX2 of 8 cycles = 1056 against 1024).
//   PROLOGUE (0 or 1) each consumer's Q by cp.async, issued before the block barrier that publishes the
//            mbarriers: the whole tile in flight at once (the plain loads take two round trips, 4 loads
//            a thread each), under the barrier set-up and the first stage's TMA.
//   EPILOGUE (0 or 1) O's stores from two row pointers worked out once (a store: its row's pointer plus
//            a compile-time column offset), not each store's address from (row, column) behind its own
//            branch: 802 -> 276 instructions a warp after the last product at D128 (SASS, static).
//   PERSIST  (0 or 1) a persistent grid: grid.x blocks (one an SM) walk units of tiles (query block,
//            head, batch; the query block fastest, the order of the non-persistent grid; causal: a unit
//            pairs query blocks p and last - p, see walk_t) u = blockIdx.x, blockIdx.x + gridDim.x, ...;
//            the ring's stage and phase carry from tile to tile, so the producer streams the next
//            tile's first K/V blocks while the consumers finish this one's last products and store O.
//            Each consumer issues the next tile's Q (cp.async, PROLOGUE's path) as soon as this tile's
//            last S = Q K^T has retired, under the last P V and the O stores; the ping-pong barriers
//            alternate between two pairs from one tile with KV blocks to the next (a tile with none
//            takes no turn).
#include "attention_hopper_common.cuh"
#include "exp2_fma.cuh"

namespace hkjit_attn_hopper {
// exp2_fma's polynomial for P's type (EXP_FMA): degree 3 where P is bf16 (a rounding up to 2^-9), 4 for
// fp16 (2^-12). An enumerator, like the kernel's own: a static constexpr member becomes a cubin symbol.
template <class T> struct exp_poly_degree { enum : int { value = 4 }; };
template <> struct exp_poly_degree<hk::bf16> { enum : int { value = 3 }; };
}  // namespace hkjit_attn_hopper

template <class T, int D, int BKV, int CONSUMERS, int STAGES, bool CAUSAL, bool VARLEN, int VEC, bool PINGPONG,
          bool OVERLAP = false, hkjit_attn_hopper::kv_producer LOADS = hkjit_attn_hopper::kv_producer::cpasync,
          int KNOBS = 0>
struct attention_fwd_hopper {
  // KNOBS: the consumer's overrides in one int (hkjit/ops/_hopper_attention_fwd.py, knobs()): bits 0-1
  // LEAN, bits 2-5 EXP_FMA, bit 6 PROLOGUE, bit 7 EPILOGUE. One packed argument, not one each, so that
  // adding an override leaves the type of every earlier configuration, and with it the names and bytes
  // of its cubin, as they were. (Enumerators, not static constexpr members: NVRTC emits a symbol for
  // each of those in the cubin.)
  enum : int {
    LEAN = KNOBS & 3, EXP_FMA = (KNOBS >> 2) & 15, PROLOGUE = (KNOBS >> 6) & 1, EPILOGUE = (KNOBS >> 7) & 1,
    PERSIST = (KNOBS >> 8) & 1
  };
  static constexpr bool TMA = LOADS == hkjit_attn_hopper::kv_producer::tma;
  static constexpr bool CPASYNC = LOADS == hkjit_attn_hopper::kv_producer::cpasync;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(BKV == 64 || BKV == 128, "KV block: 64 or 128 keys");
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "1 or 2 consumer warpgroups");
  static_assert(STAGES >= 2, "the one-block-deep pipeline holds stage j - 1 while it waits for stage j");
  static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong takes two consumer warpgroups");
  static_assert(!OVERLAP || STAGES >= 3, "the loop-top wait holds stages j - 2 and j - 1 while it waits for stage j");
  static_assert(!(TMA && VARLEN), "TMA streams dense (batch, head) views; packed rows run into the next sequence");
  static_assert(EXP_FMA >= 0 && EXP_FMA <= 8, "0 to 8 of every 16 scores on the FMA pipe");
  static_assert(!PERSIST || (PROLOGUE && !VARLEN), "PERSIST: each tile's Q by cp.async (PROLOGUE); dense batches");
  static constexpr int BQ = CONSUMERS * 64;                  // query rows per block
  static constexpr int threads = (CONSUMERS + 1) * hk::WARPGROUP_THREADS;
  static constexpr int PRODUCER = CONSUMERS;
  // Registers (attention_hopper_common.cuh): 2 consumers get 216 each and the producer 72 with plain
  // loads; with TMA the producer keeps 24 and the consumers get 240; with cp.async of 16-byte pieces
  // 40 and 232 (at 24 NVRTC 13.0's ptxas spilled in the producer; 13.5 did not), of narrower ones the
  // plain loads' 72 and 216 (2-4x the copies a stage).
  using split = hkjit_attn_hopper::register_split<CONSUMERS, TMA ? 24 : CPASYNC && VEC == 8 ? 40 : 72>;
  static constexpr int PRODUCER_REGS = split::PRODUCER;
  static constexpr int CONSUMER_REGS = split::CONSUMER;

  using q_t = hk::st<T, 64, D>;                // Q: 64 rows x D (K-major A operand of Q K^T)
  using k_t = hk::st<T, BKV, D>;               // K: keys x D (K-major B operand of Q K^T)
  using v_t = hk::st<T, BKV, D>;               // V: keys x D (N-major B operand of P V)
  using s_t = hk::rt<float, 64, BKV>;
  using p_t = hk::rt_a<T, BKV>;                // P as wgmma's A registers
  using o_t = hk::rt<float, 64, D>;
  struct stage_t { k_t k; v_t v; };
  using q_walk = hk::desc_walk<q_t, false>;    // LEAN: the products' descriptors, walked (hk/hopper/wgmma.hpp)
  using k_walk = hk::desc_walk<k_t, false>;
  using v_walk = hk::desc_walk<v_t, true>;
  struct consumer_t { q_t q; };
  static constexpr int dynamic_smem = 1024 + STAGES * int(sizeof(stage_t)) + CONSUMERS * int(sizeof(consumer_t)) +
                                      2 * STAGES * 8;
  static constexpr int SCHED_BARRIER = 3;      // + consumer (+ 2 on PERSIST's odd tiles): "your turn to issue"
                                               // (ids 1, 2: the Q fences)

  // A block's work: query block x (rows x * BQ ..), head h, batch b. The grid's block, or a tile of
  // PERSIST's walk (walk_t).
  struct tile_t { int x, h, b; };
  static __device__ __forceinline__ tile_t grid_tile() {
    const int b = blockIdx.z, h = blockIdx.y;         // (read in the order the kernel always read them)
    return {(int)blockIdx.x, h, b};
  }
  // The tile a role works on: PERSIST's, else the grid's block, read where it is used (read at the
  // call, the block indices' registers would live across the register split).
  static __device__ __forceinline__ tile_t my_tile(const tile_t& given) {
    if constexpr (PERSIST) return given;
    else return grid_tile();
  }

  // ---- arguments (mirrored by hkjit/ops/_hopper_attention_fwd.py: Args, TmaArgs) ------------------
  // TMA: the K and V tensor maps come first (64-byte aligned); plain loads: no maps, 200 bytes.
  struct no_maps {};
  struct kv_maps { hk::tma_desc k_map, v_map; };   // (D, n_k, kv_heads, batch), box (64, BKV, 1, 1)
  struct args : hk::conditional_t<TMA, kv_maps, no_maps> {
    const T* q; const T* k; const T* v; T* o; float* lse;
    const int* cu_seqlens_q; const int* cu_seqlens_k;
    long long q_sb, q_sh, q_sr, k_sb, k_sh, k_sr, v_sb, v_sh, v_sr, o_sb, o_sh, o_sr, lse_sb, lse_sh, lse_sr;
    int batch, heads, kv_heads, n_q, n_k;
    float scale_log2;          // softmax scale * log2(e)
  };
  static_assert(sizeof(args) == (TMA ? 512 : 200), "args layout is mirrored in Python");

  // PERSIST: block blockIdx.x walks units u = blockIdx.x, + gridDim.x, ... of UNIT tiles each, in
  // the order (unit of a (head, batch), head, batch): the blocks running at once share heads' K and
  // V in L2, as the grid's blocks do. Causal pairs query block p with q_blocks - 1 - p of the same
  // head (the heavier first): every unit then holds the same number of KV blocks, so the static walk
  // is balanced (in the grid's order a block would take every gridDim.x-th query block, e.g. only the
  // heaviest quarter of them). Odd q_blocks: the middle unit's second half is skipped.
  static constexpr int UNIT = CAUSAL ? 2 : 1;
  enum walk_step : int { WALK_END, WALK_SKIP, WALK_TILE };
  struct walk_t {
    int q_blocks, per_head, heads, units;
    __device__ __forceinline__ walk_t(const args& g)
        : q_blocks((g.n_q + BQ - 1) / BQ), per_head(CAUSAL ? (q_blocks + 1) / 2 : q_blocks), heads(g.heads),
          units(per_head * g.heads * g.batch) {}
    // Tile i (0, 1, ...) of this block's walk.
    __device__ __forceinline__ walk_step at(int i, tile_t& tile) const {
      const int u = blockIdx.x + (i / UNIT) * gridDim.x;
      if (u >= units) return WALK_END;
      const int bh = u / per_head, p = u - bh * per_head;
      const bool second = UNIT == 2 && i % UNIT == 1;
      tile = {CAUSAL ? (second ? p : q_blocks - 1 - p) : p, bh % heads, bh / heads};
      return second && p == q_blocks - 1 - p ? WALK_SKIP : WALK_TILE;
    }
    // f(i, tile, its sequence) for each tile of the walk, in order.
    template <class F> __device__ __forceinline__ void for_each(const args& g, F f) const {
#pragma unroll 1
      for (int i = 0;; ++i) {
        tile_t tile;
        const walk_step w = at(i, tile);
        if (w == WALK_END) break;
        if (w == WALK_SKIP) continue;
        f(i, tile, hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, tile.b));
      }
    }
  };

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
  // The ring walk every producer shares: KV block j waits for its stage to be free, then
  // fill(stage, j, full[stage]) issues the stage's loads and the arrival that completes full.
  template <class Fill>
  static __device__ __forceinline__ void fill_stages(int blocks, stage_t* ring, hk::mbarrier* full,
                                                     hk::mbarrier* empty, int& ring_st, int& ring_phase, Fill fill) {
    int st = PERSIST ? ring_st : 0, phase = PERSIST ? ring_phase : 0;   // (constants: see consume)
#pragma unroll 1
    for (int j = 0; j < blocks; ++j) {                // issue only: nothing to unroll for
      hk::wait(empty[st], phase ^ 1);                 // fresh barriers pass parity 1 at once
      fill(ring[st], j, full[st]);
      if (++st == STAGES) { st = 0; phase ^= 1; }
    }
    if constexpr (PERSIST) {
      ring_st = st;
      ring_phase = phase;
    }
  }

  // TMA: thread 0 of the producer warpgroup alone (the others have returned). Per KV block it
  // announces the stage's bytes on full[s] (its one arrival) and issues D / 64 copies for K, then as
  // many for V, one per 64-column swizzle chunk of the tile (tma_load_tile).
  static __device__ __forceinline__ void prefetch_maps(const args& g) {
    hk::tma::prefetch(g.k_map);
    hk::tma::prefetch(g.v_map);
  }
  // st, phase: the ring position of the tile's first block, left at the next tile's.
  static __device__ void produce_tma(const args& g, const tile_t& given, int blocks, stage_t* ring, hk::mbarrier* full,
                                     hk::mbarrier* empty, int& st, int& phase) {
    const tile_t tile = my_tile(given);
    const int b = tile.b, group = g.heads / g.kv_heads;
    const int hk_ = PERSIST ? tile.h / group : blockIdx.y / group;   // (the grid's: an unsigned division)
    if constexpr (!PERSIST) prefetch_maps(g);        // (PERSIST: once, before its walk)
    fill_stages(blocks, ring, full, empty, st, phase, [&](stage_t& x, int j, hk::mbarrier& f) {
      hk::arrive_expect_tx(f, sizeof(stage_t));
      hkjit_attn_hopper::tma_load_tile(x.k, g.k_map, j * BKV, hk_, b, f);   // K first: S needs it first
      hkjit_attn_hopper::tma_load_tile(x.v, g.v_map, j * BKV, hk_, b, f);
    });
  }

  // cp.async: every thread of the producer issues its pieces of K and V (a whole stage in flight)
  // and one arrival on full[s] that lands when they have; WHOLE blocks (all keys below n_k) go
  // unrolled without predicates, a sequence's last block piece by piece with zero fill.
  // "lsu": plain loads and shared stores, then a proxy fence and an ordinary arrival.
  static __device__ void produce(const args& g, const seq_t& s, const tile_t& given, int blocks, stage_t* ring,
                                 hk::mbarrier* full, hk::mbarrier* empty, int& st, int& phase) {
    const tile_t tile = my_tile(given);
    const int b = tile.b, h = tile.h, hk_ = h / (g.heads / g.kv_heads);
    const T* kb = g.k + b * g.k_sb + hk_ * g.k_sh + (long long)s.k0 * g.k_sr;
    const T* vb = g.v + b * g.v_sb + hk_ * g.v_sh + (long long)s.k0 * g.v_sr;
    const int tid = hk::warpgroup_thread();
    fill_stages(blocks, ring, full, empty, st, phase, [&](stage_t& x, int j, hk::mbarrier& f) {
      if constexpr (CPASYNC) {
        hkjit_attn_hopper::load_tile_async<VEC, true>(x.k, kb, g.k_sr, j * BKV, s.lk, tid);
        hkjit_attn_hopper::load_tile_async<VEC, true>(x.v, vb, g.v_sr, j * BKV, s.lk, tid);
        hkjit_attn_hopper::arrive_async(f);
      } else {
        load_tile(x.k, kb, g.k_sr, j * BKV, s.lk, 0, tid);
        load_tile(x.v, vb, g.v_sr, j * BKV, s.lk, 0, tid);
        hk::fence_proxy_async();                      // generic-proxy writes, read next by wgmma
        hk::arrive(f);
      }
    });
  }

  // ---- consumers -------------------------------------------------------------------------------------
  // Ping-pong: a consumer waits for its turn before issuing a block's products and hands the turn
  // to the other one right after, so their wgmmas alternate and each one's softmax overlaps the
  // other's products. Both consumers of a block run the same number of KV blocks.
  // sched: SCHED_BARRIER, or (PERSIST) SCHED_BARRIER + 2 on every other tile that has KV blocks: consumer
  // 1 hands over the next tile's first turn while consumer 0 may not yet have taken this tile's last
  // hand-over, and the two arrivals on one barrier would complete it without consumer 0. A tile with
  // no KV block (causal rows that see no key) takes no turn at all under PERSIST: consumer 1 waits for
  // nothing there, so a hand-over in it would let consumer 1 reach the barrier of two tiles back before
  // consumer 0 has taken that tile's last hand-over. (Consumer 1's first wait in a tile with blocks
  // needs consumer 0's turn of that tile, so it is never more than one such tile ahead.)
  static __device__ __forceinline__ void turn_wait(int consumer, int sched = SCHED_BARRIER) {
    if constexpr (PINGPONG) hk::named_barrier(sched + consumer, 2 * hk::WARPGROUP_THREADS);
  }
  static __device__ __forceinline__ void turn_pass(int consumer, int sched = SCHED_BARRIER) {
    if constexpr (PINGPONG) hk::named_barrier_arrive(sched + (consumer ^ 1), 2 * hk::WARPGROUP_THREADS);
  }

  // EXP_FMA: score register k's exponential on the FMA pipe? k % 16 walks a thread's 4 column groups
  // of 8 keys (2 rows x 2 columns each); k * EXP_FMA mod 16 < EXP_FMA picks EXP_FMA of the 16 residues
  // spread evenly (2: k % 16 = 0, 8; 4: 0, 4, 8, 12), so that the polynomials interleave with MUFU.EX2
  // in program order. The polynomial's degree follows P's precision (exp2_fma.cuh).
  enum : int { POLY_DEGREE = hkjit_attn_hopper::exp_poly_degree<T>::value };
  static __device__ constexpr bool on_fma(int k) { return (k % 16) * EXP_FMA % 16 < EXP_FMA; }

  // Scores of block j -> unnormalised probabilities, in place: mask keys past the sequence and
  // (causal) past each row's diagonal on edge blocks only; the running max m (log2 units of the
  // scaled scores) and this thread's partial row sums l move on; alpha rescales the old O and l.
  static __device__ __forceinline__ void softmax(s_t& sc, int j, const seq_t& s, int row0, float sl2, float (&m)[2],
                                                 float (&l)[2], float (&alpha)[2]) {
    const bool edge = (j + 1) * BKV > s.lk || (CAUSAL && (j + 1) * BKV - 1 > row0 + s.lk - s.lq);
    if (edge && LEAN && CAUSAL) {
      // A key is masked when it lies past the last key its row sees (the row's diagonal or the
      // sequence's last key). key = j * BKV + 8 (k / 4) + 2 (thread % 4) + k % 2: the compile-time
      // part against one limit a row, one compare and one select a score. (Causal only: without it
      // ptxas sets the limits up on every block, where only a ragged sequence's last one masks.)
      int lim[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int last = min(s.lk - 1, row0 + s_t::row(0, 2 * r) + s.lk - s.lq);
        lim[r] = last - j * BKV - 2 * (hk::warpgroup_thread() % 4);
      }
#pragma unroll
      for (int k = 0; k < s_t::regs; ++k)
        if ((k / 4) * 8 + k % 2 > lim[(k % 4) / 2]) sc.v[0][k] = hk::neg_inf();
    } else if (edge) {
#pragma unroll
      for (int k = 0; k < s_t::regs; ++k) {
        const int key = j * BKV + s_t::col(k), row = row0 + s_t::row(0, k);
        if (key >= s.lk || (CAUSAL && key > row + s.lk - s.lq)) sc.v[0][k] = hk::neg_inf();
      }
    }
    float mx[2];
    if constexpr (LEAN) {
      // Four chains a row, seeded with their first scores (no -inf start), joined by a tree: the
      // same FMNMX count less two, a quarter of the dependent chain the exponentials wait behind.
      float c[2][4];                               // row r's scores: k = 4j + 2r + e, i = 2j + e
#pragma unroll
      for (int k = 0; k < s_t::regs; ++k) {
        const int r = (k % 4) / 2, i = (k / 4) * 2 + k % 2;
        c[r][i % 4] = i < 4 ? sc.v[0][k] : fmaxf(c[r][i % 4], sc.v[0][k]);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) mx[r] = fmaxf(fmaxf(c[r][0], c[r][1]), fmaxf(c[r][2], c[r][3]));
    } else {
      mx[0] = mx[1] = hk::neg_inf();
#pragma unroll
      for (int k = 0; k < s_t::regs; ++k) mx[(k % 4) / 2] = fmaxf(mx[(k % 4) / 2], sc.v[0][k]);
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mn = fmaxf(m[r], hkjit_attn_hopper::quad_max(mx[r]) * sl2);   // the scale is positive
      base[r] = mn == hk::neg_inf() ? 0.f : mn;      // a row with no key yet: exp2(-inf) = 0
      alpha[r] = hk::fast_exp2(m[r] - base[r]);
      m[r] = mn;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int k = 0; k < s_t::regs; ++k) {
      const float x = fmaf(sc.v[0][k], sl2, -base[(k % 4) / 2]);
      const float p = on_fma(k) ? hkjit_exp2::exp2_fma<POLY_DEGREE>(x) : hk::fast_exp2(x);
      sc.v[0][k] = p;
      l[(k % 4) / 2] += p;
    }
  }
  static __device__ __forceinline__ void rescale(o_t& o, const float (&alpha)[2]) {
#pragma unroll
    for (int k = 0; k < o_t::regs; ++k) o.v[0][k] *= alpha[(k % 4) / 2];
  }
  // LEAN (without OVERLAP) rescales O at the end of the iteration whose softmax moved the max, once
  // that iteration's P V is retired, not between the next iteration's two products: there the turn
  // (PINGPONG) is held and the other consumer waits behind its FMULs. And only where the max moved:
  // when no row of the warp's 16 moved, every alpha is exp2(0) = 1 exactly and the multiplications
  // would change nothing (a warp-uniform branch, so skipping it is exact).
  static constexpr bool LATE_RESCALE = LEAN && !OVERLAP;
  // p of any of the warpgroup's 128 threads (bar.red.or on named barrier `id`), the same in all of
  // them; passed through a warp vote so that ptxas sees it warp-uniform (else it treats the branch
  // on it as divergent and moves the loop's descriptor arithmetic back to vector registers).
  static __device__ __forceinline__ bool warpgroup_any(int id, bool p) {
    unsigned r;
    asm volatile("{\n.reg .pred q, a;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred a, %2, %3, q;\nselp.u32 %0, 1, 0, a;\n}"
                 : "=r"(r) : "r"(unsigned(p)), "r"(id), "r"(hk::WARPGROUP_THREADS) : "memory");
    return __any_sync(0xffffffffu, r != 0);
  }

  // S = Q K^T of a stage and O += P V of a stage. LEAN: from walked descriptors (each wgmma's one
  // 32-bit add of a constant to a uniform register, the stage's start one multiply-add); else hk's
  // tile forms, which rebuild every descriptor from the tile's address (mask, shift, or).
  static __device__ __forceinline__ void scores(s_t& sc, const consumer_t& mine, const stage_t* ring, int stage) {
    if constexpr (LEAN)
      hk::mma_ABt(sc, q_walk::of(mine.q), k_walk::of(ring[0].k).plus(stage, sizeof(stage_t)), false);
    else
      hk::mma_ABt(sc, mine.q, ring[stage].k, false);
  }
  static __device__ __forceinline__ void accumulate(o_t& o, const p_t& p, const stage_t* ring, int stage) {
    if constexpr (LEAN)
      hk::mma_AB(o, p, v_walk::of(ring[0].v).plus(stage, sizeof(stage_t)), true);
    else
      hk::mma_AB(o, p, ring[stage].v, true);
  }

  // Row 0 of the tile's (batch, head) of q.
  static __device__ __forceinline__ const T* q_rows(const args& g, const seq_t& s, const tile_t& tile) {
    const int b = tile.b, h = tile.h;
    return g.q + b * g.q_sb + h * g.q_sh + (long long)s.q0 * g.q_sr;
  }

  // PERSIST: the next tile's Q for this consumer (rows: row 0 of its (batch, head) of q; r0: this
  // consumer's first row; lq: the sequence's rows), none past the block's last tile.
  struct q_next_t { const T* rows; int r0, lq; bool any; };
  static __device__ __forceinline__ void load_q(consumer_t& mine, const q_next_t& n, long long q_sr) {
    hkjit_attn_hopper::load_tile_async<VEC, true>(mine.q, n.rows, q_sr, n.r0, n.lq, hk::warpgroup_thread());
  }
  // PERSIST, once this tile's last S = Q K^T has retired (or there is none): the next tile's Q into the
  // same buffer, under this tile's last P V and O's stores. Every warp of the warpgroup first (a warp's
  // wgmma wait covers its own part of a product, and its copies write rows other warps' parts read).
  static __device__ __forceinline__ void prefetch_q(consumer_t& mine, const q_next_t* next, long long q_sr,
                                                    int consumer) {
    if constexpr (PERSIST) {
      hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
      if (next->any) load_q(mine, *next, q_sr);
    }
  }

  // ring_st, ring_phase: the ring position of the tile's first block, left at the next tile's; sched:
  // the tile's ping-pong barriers (turn_wait); next: PERSIST's next tile's Q (prefetch_q).
  static __device__ void consume(const args& g, const seq_t& s, const tile_t& given, int blocks, stage_t* ring,
                                 consumer_t& mine, hk::mbarrier* full, hk::mbarrier* empty, int consumer,
                                 int& ring_st, int& ring_phase, int sched = SCHED_BARRIER,
                                 const q_next_t* next = nullptr) {
    const tile_t tile = my_tile(given);
    const int b = tile.b, h = tile.h, tid = hk::warpgroup_thread();
    const int row0 = tile.x * BQ + consumer * 64;             // first query row of this warpgroup
    const bool warp_leader = tid % 32 == 0;
    if constexpr (PROLOGUE) {
      asm volatile("cp.async.wait_all;" ::: "memory");        // Q's copies (issued earlier) have landed
    } else {
      const T* qb = g.q + b * g.q_sb + h * g.q_sh + (long long)s.q0 * g.q_sr;
      load_tile(mine.q, qb, g.q_sr, row0, s.lq, 0, tid);
    }
    hk::fence_proxy_async();
    hk::named_barrier(1 + consumer, hk::WARPGROUP_THREADS);
    // Consumer 0 issues first: consumer 1 hands it the first turn. Each consumer then waits for its
    // turn `blocks` times and hands it over `blocks` times; consumer 0 takes the last hand-over
    // after its loop, so both barriers end balanced.
    if (PINGPONG && consumer == 1 && (!PERSIST || blocks > 0))
      hk::named_barrier_arrive(sched, 2 * hk::WARPGROUP_THREADS);
    if (PERSIST && blocks == 0) prefetch_q(mine, next, g.q_sr, consumer);   // this tile reads no Q

    o_t o;
    hk::map(o, [](float) { return 0.f; });
    // Rows r and r + 8 of this thread: running max (log2 units), this thread's share of the row sum.
    float m[2] = {hk::neg_inf(), hk::neg_inf()}, l[2] = {0.f, 0.f}, alpha[2];
    const float sl2 = g.scale_log2;
    p_t p;
    s_t sc;
    // (Without PERSIST the constants themselves: consume is not inlined, and a stage, phase or barrier id
    // from a parameter would be a register.)
    int st = PERSIST ? ring_st : 0, phase = PERSIST ? ring_phase : 0, prev = st;
    if constexpr (!PERSIST) sched = SCHED_BARRIER;
    if (blocks > 0) {
      hk::wait(full[st], phase);
      if constexpr (CPASYNC) hk::fence_proxy_async();         // the stage's cp.async writes, for wgmma
      turn_wait(consumer, sched);
      scores(sc, mine, ring, st);
      turn_pass(consumer, sched);
      hk::mma_wait<0>();
      hk::fence_operand(sc);
      if (PERSIST && blocks == 1) prefetch_q(mine, next, g.q_sr, consumer);   // the last S is in
      softmax(sc, 0, s, row0, sl2, m, l, alpha);
      if constexpr (!OVERLAP) hk::pack_a(p, sc);
    }
    // OVERLAP, iteration j: wait for stage j, retire O += P_(j-2) V_(j-2) (it ran under block j - 1's
    // softmax) and release its stage, pack P_(j-1), then as below. The retiring wait sits after the
    // stage wait (a spin loop ptxas does not hoist across), not after the softmax.
    for (int j = 1; j < blocks; ++j) {
      const int prev2 = prev;                                 // (OVERLAP) the stage of block j - 2
      prev = st;
      if (++st == STAGES) { st = 0; phase ^= 1; }
      hk::wait(full[st], phase);
      if constexpr (CPASYNC) hk::fence_proxy_async();
      if constexpr (OVERLAP) {
        hk::mma_wait<0>();                                    // P_(j-2) V_(j-2) is done
        hk::fence_operand(o);
        hk::fence_operand(p);
        if (j >= 2 && warp_leader) hk::arrive(empty[prev2]);  // this warp's reads of stage j - 2 are done
        hk::pack_a(p, sc);                                    // P_(j-1)
      }
      turn_wait(consumer, sched);
      scores(sc, mine, ring, st);                             // S_j
      if constexpr (!LATE_RESCALE) rescale(o, alpha);         // O to block j - 1's max, then
      accumulate(o, p, ring, prev);                           //   O += P_(j-1) V_(j-1)
      turn_pass(consumer, sched);
      hk::mma_wait<1>();                                      // S_j is in; P V still running
      hk::fence_operand(sc);
      if (PERSIST && j == blocks - 1) prefetch_q(mine, next, g.q_sr, consumer);   // the last S is in
      softmax(sc, j, s, row0, sl2, m, l, alpha);
      if constexpr (LATE_RESCALE) {
        auto retire = [&] {                                   // P_(j-1) V_(j-1) done: release stage j - 1
          hk::mma_wait<0>();
          hk::fence_operand(o);
          hk::fence_operand(p);
          if (warp_leader) hk::arrive(empty[prev]);
        };
        // O to block j's max where it moved (block 0's rescale is skipped: O is still 0). LEAN 2 puts
        // the rescale's branch before the wait: the wait then opens a basic block of its own, and
        // ptxas, which hoists a wgmma wait to the top of its block, leaves it after the softmax, which
        // so runs under this warpgroup's own P V (FlashAttention-3's intra-warpgroup overlap). LEAN 1
        // keeps the default's placement, the wait ahead of the max and the exponentials, and a warp's
        // own vote (its branch holds no wgmma instruction).
        if constexpr (LEAN >= 2) {
          // (The branch holds a wgmma wait, which all of a warpgroup's threads must execute as one
          // instruction: the condition is the warpgroup's, an OR over its 128 threads on named
          // barrier 1 + consumer, idle since the Q fence.)
          if (warpgroup_any(1 + consumer, alpha[0] != 1.f || alpha[1] != 1.f)) {
            retire();
            rescale(o, alpha);
          } else {
            retire();
          }
        } else {
          const bool moved = __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f);
          retire();
          if (moved) rescale(o, alpha);
        }
        hk::pack_a(p, sc);
      } else if constexpr (!OVERLAP) {
        // (ptxas 13.5 hoists this wait to the top of its basic block, ahead of the max and the
        // exponentials, so the overlap inside the warpgroup is lost; the two consumers' ping-pong
        // still overlaps one's softmax with the other's products. docs/notes/attention_hopper.md.)
        hk::mma_wait<0>();
        hk::fence_operand(o);
        hk::fence_operand(p);
        if (warp_leader) hk::arrive(empty[prev]);             // this warp's wgmma reads of stage j - 1 are done
        hk::pack_a(p, sc);
      }
    }
    if (blocks > 0) {
      if constexpr (OVERLAP) {                                // retire the last product in flight, pack P_last
        hk::mma_wait<0>();
        hk::fence_operand(o);
        hk::fence_operand(p);
        if (blocks >= 2 && warp_leader) hk::arrive(empty[prev]);
        hk::pack_a(p, sc);
      }
      if constexpr (!LATE_RESCALE) rescale(o, alpha);
      accumulate(o, p, ring, st);
      hk::mma_wait<0>();
      hk::fence_operand(o);
      hk::fence_operand(p);
      if (warp_leader) hk::arrive(empty[st]);
      if constexpr (PERSIST) {                                // the next tile starts at the next stage
        if (++st == STAGES) { st = 0; phase ^= 1; }
        ring_st = st;
        ring_phase = phase;
      }
    }
    hk::mma_wait<0>();             // (nothing in flight; tells ptxas so before a divergent path)
    if (PINGPONG && consumer == 0 && (!PERSIST || blocks > 0)) turn_wait(0, sched);   // the other's last hand-over

    // O /= l; LSE (natural log) = (m + log2 l) / log2 e; rows with no key: O = 0, LSE = -inf.
    float inv[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] = hkjit_attn_hopper::quad_sum(l[r]);
      const bool none = l[r] == 0.f;
      inv[r] = none ? 0.f : 1.f / l[r];
      lse[r] = none ? hk::neg_inf() : (m[r] + __log2f(l[r])) * 0.69314718055994531f;
    }
    T* ob = g.o + b * g.o_sb + h * g.o_sh + (long long)s.q0 * g.o_sr;
    if constexpr (EPILOGUE) {
      // Element k (even) of row r sits at column (k / 4) * 8 + 2 (tid % 4): the lane's part goes into
      // the row's pointer, the rest is an immediate offset of the store.
      T* rp[2];
      bool in[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + o_t::row(0, 2 * r);
        in[r] = row < s.lq;
        rp[r] = ob + (long long)row * g.o_sr + 2 * (tid % 4);
      }
#pragma unroll
      for (int k = 0; k < o_t::regs; k += 2) {
        const int r = (k % 4) / 2;
        if (in[r])
          *reinterpret_cast<unsigned*>(rp[r] + (k / 4) * 8) =
              hk::pack2<T>(o.v[0][k] * inv[r], o.v[0][k + 1] * inv[r]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < o_t::regs; k += 2) {
        const int row = row0 + o_t::row(0, k), col = o_t::col(k);
        if (row >= s.lq) continue;
        const int r = (k % 4) / 2;
        *reinterpret_cast<unsigned*>(ob + (long long)row * g.o_sr + col) = hk::pack2<T>(o.v[0][k] * inv[r], o.v[0][k + 1] * inv[r]);
      }
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
  // The dynamic shared memory, 1024-byte aligned: the ring, the consumers' Q tiles, full[], empty[].
  // (Rounding through an integer loses the shared state space: the Q tile's four stores a thread are
  // generic ST.E. Offsetting smem_raw by a pad from its shared address instead makes them STS but
  // costs the consumer loop 0-5 instructions an iteration, never fewer (both NVRTCs), so it stays.)
  struct smem_t {
    stage_t* ring;
    consumer_t* cons;
    hk::mbarrier* full;
    hk::mbarrier* empty;
  };
  static __device__ __forceinline__ smem_t carve_smem() {
    extern __shared__ unsigned char smem_raw[];
    unsigned long long base = (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull;
    stage_t* ring = reinterpret_cast<stage_t*>(base);
    consumer_t* cons = reinterpret_cast<consumer_t*>(ring + STAGES);
    hk::mbarrier* full = reinterpret_cast<hk::mbarrier*>(cons + CONSUMERS);
    return {ring, cons, full, full + STAGES};
  }
  // Thread 0 sets up the stage barriers (the caller's block barrier publishes them).
  static __device__ __forceinline__ void init_barriers(hk::mbarrier* full, hk::mbarrier* empty) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        hk::init(full[i], TMA ? 1 : hk::WARPGROUP_THREADS);    // TMA: one arrival + the stage's bytes; else
                                                               // one per producer thread (cp.async: .noinc)
        hk::init(empty[i], CONSUMERS * 4);             // one arrival per consumer warp
      }
      hk::fence_barrier_init();
    }
  }

  static __device__ void run(const args& g) {
    if constexpr (PERSIST) {
      run_persistent(g);
      return;
    }
    const auto [ring, cons, full, empty] = carve_smem();
    const seq_t s = hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, blockIdx.z);
    if ((int)blockIdx.x * BQ >= s.lq) return;                  // varlen: this sequence is shorter
    if constexpr (PROLOGUE) {
      // Q's copies first: they need no barrier (consume waits for them with cp.async.wait_all).
      const int c = __shfl_sync(0xffffffffu, hk::warpgroup_id(), 0);   // warp-uniform, as below
      if (c < CONSUMERS)
        hkjit_attn_hopper::load_tile_async<VEC, true>(cons[c].q, q_rows(g, s, grid_tile()), g.q_sr,
                                                      blockIdx.x * BQ + c * 64, s.lq, hk::warpgroup_thread());
    }
    init_barriers(full, empty);
    __syncthreads();
    // The KV block count is worked out after the register split, in each role: NVRTC 13.0's ptxas
    // spilled it to local memory when it was live across setmaxnreg (13.5 does not).
    // Warp-uniform by construction (lane 0's value): ptxas then keeps what derives from it, the
    // consumer's Q tile address and its wgmma descriptors, in uniform registers (threadIdx.x / 128
    // put them in vector registers, moved over by 2 R2UR a wgmma; 2-30 fewer instructions an iteration).
    const int wg = __shfl_sync(0xffffffffu, hk::warpgroup_id(), 0);
    int st = 0, phase = 0;                            // the ring's first stage (PERSIST carries them)
    if (wg == PRODUCER) {
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_dec<PRODUCER_REGS>();
      const int blocks = kv_blocks(s, blockIdx.x * BQ);
      if constexpr (TMA) {
        if (hk::warpgroup_thread() == 0) produce_tma(g, tile_t{}, blocks, ring, full, empty, st, phase);
      } else {
        produce(g, s, tile_t{}, blocks, ring, full, empty, st, phase);     // lsu or cpasync
      }
    } else {
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_inc<CONSUMER_REGS>();   // (one consumer has them all)
      consume(g, s, tile_t{}, kv_blocks(s, blockIdx.x * BQ), ring, cons[wg], full, empty, wg, st, phase);
    }
  }

  // PERSIST: the block walks its tiles (walk_t; hkjit/ops/_hopper_attention_fwd.py sizes the grid: one
  // block an SM, at most one a unit). Producer and consumers walk the same tiles and count the same KV
  // blocks, so the ring's stage and phase agree on both sides from tile to tile.
  static __device__ void run_persistent(const args& g) {
    const auto [ring, cons, full, empty] = carve_smem();
    init_barriers(full, empty);
    __syncthreads();
    const walk_t walk(g);
    const int wg = __shfl_sync(0xffffffffu, hk::warpgroup_id(), 0);
    int st = 0, phase = 0;
    if (wg == PRODUCER) {
      if constexpr (CONSUMERS >= 2) hk::setmaxnreg_dec<PRODUCER_REGS>();
      if (TMA && hk::warpgroup_thread() != 0) return;          // TMA: one thread issues
      if constexpr (TMA) prefetch_maps(g);
      walk.for_each(g, [&](int, const tile_t& tile, const seq_t& s) {
        const int blocks = kv_blocks(s, tile.x * BQ);
        if constexpr (TMA) produce_tma(g, tile, blocks, ring, full, empty, st, phase);
        else produce(g, s, tile, blocks, ring, full, empty, st, phase);
      });
      return;
    }
    if constexpr (CONSUMERS >= 2) hk::setmaxnreg_inc<CONSUMER_REGS>();
    // Q of the first walk tile after i (a skipped half is followed by a whole unit) for this consumer
    // (dense: the sequence is the batch's whole n_q rows).
    auto q_after = [&](int i) -> q_next_t {
      tile_t tile;
      walk_step w = walk.at(i + 1, tile);
      if (w == WALK_SKIP) w = walk.at(i + 2, tile);
      if (w != WALK_TILE) return {g.q, 0, 0, false};
      const seq_t s = hkjit_attn_hopper::sequence<VARLEN>(g.cu_seqlens_q, g.cu_seqlens_k, g.n_q, g.n_k, tile.b);
      return {q_rows(g, s, tile), tile.x * BQ + wg * 64, s.lq, true};
    };
    {
      const q_next_t first = q_after(-1);
      if (first.any) load_q(cons[wg], first, g.q_sr);    // consume waits for it; the later tiles' Q: prefetch_q
    }
    int odd = 0;                                       // the turn barriers' pair: tiles with KV blocks alternate
    walk.for_each(g, [&](int i, const tile_t& tile, const seq_t& s) {
      const q_next_t next = q_after(i);
      const int blocks = kv_blocks(s, tile.x * BQ);
      consume(g, s, tile, blocks, ring, cons[wg], full, empty, wg, st, phase, SCHED_BARRIER + 2 * odd, &next);
      odd ^= blocks > 0;
    });
  }
};
