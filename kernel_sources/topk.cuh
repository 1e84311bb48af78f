// topk.cuh: the k largest elements of each row and their indices, sorted; one source for gfx942,
// gfx950 and sm_90a.
//
//   values[r][0..k) = the k largest x[r][c], descending; indices[r][i] = their columns (int64)
//
// Order: the order-preserving key of hk/common/select.hpp, so NaN ranks above +inf (every NaN
// equal) and -0 just below +0, as torch.topk on CUDA; among equal keys the lower column ranks
// first. Each row's k survivors are found by a radix select on the composite key (key, ~column),
// which is unique per element, so exactly k elements pass and ties need no second rule:
//   - for every bit of the key from the top: does count(key >= threshold | bit) reach k? keep
//     the bit if so (each count is this thread's elements, then a sum over the row group);
//   - when more than k elements share the final key (ties at the boundary), the same search over
//     the bits of ~column keeps the lowest columns;
//   - the survivors (key, column) go to shared memory; each one's output position is the number
//     of survivors ranked above it (k <= 128: at most 128 comparisons each).
//
// Template parameters, in order:
//   T            hk::bf16, hk::half or float: the type of x and values.
//   VEC          elements per vector load: 1, 2, 4 or 8 for 16-bit T, 1, 2 or 4 for float (VEC *
//                sizeof(T) = 16: one 16-byte load). The caller guarantees that x and x_row_stride
//                allow VEC * sizeof(T)-byte aligned accesses (VEC = 1 always does).
//   THREADS      threads per block: a multiple of 64, at most 1024.
//   ROW_THREADS  threads sharing one row (a row group of consecutive threads): a power of two up
//                to the warp size (several rows per warp), or THREADS (one row per block).
//   CHUNKS       VEC-element chunks a thread holds per row (or per column block when STREAM):
//                COLS = ROW_THREADS * VEC * CHUNKS columns.
//   STREAM       false: the row is held in registers (n <= COLS; x read once), and the search
//                counts over registers. true (ROW_THREADS = THREADS): for rows longer than a
//                block holds, the row is read in column blocks of COLS, twice: pass 1 builds a
//                histogram of the keys' top 11 bits in shared memory (shared atomics), and warp
//                0 finds the boundary bin (a scan over its lanes' bins); pass 2 sends the
//                elements above the boundary bin straight to the survivors and those in it to a
//                shared candidate buffer (CAND entries), where warp 0 runs the rest of the search
//                (no block barriers; histograms of the next 8 bits while 8 or more remain). If
//                the boundary bin holds more than CAND elements (data with few distinct
//                values), the block counts over the row in memory instead: one more read per
//                remaining key bit (and column bit when there are ties), then one to collect.
//   SPLIT        1, or (STREAM) parts a row is cut into, one block each (grid.y = SPLIT), so that
//                a few long rows still fill the GPU: each part selects its own k survivors (from
//                whole column blocks of its columns), writes them to the scratch and counts
//                itself done on the row's counter; the last part selects the row's k among the
//                parts' survivors (at most 16 * 128, in the candidate buffer) and writes them.
//   RADIX        0, or (ROW_THREADS = THREADS, !STREAM) a row held by the whole block, searched by
//                digits of RADIX bits (4 to 11): rounds from the top bit, each counting the keys
//                whose higher bits match the threshold so far into a shared histogram of the next
//                digit, a block-wide scan of the bins finding the digit of the k-th largest.
//   ROWS_PER_BLOCK (RADIX) rows a block takes in turn, the next one's loads ahead (grid.x =
//                ceil(rows / ROWS_PER_BLOCK)).
//   MIN_BLOCKS   blocks an NVIDIA SM must hold at once (a register cap; 1: none).
//   FILTER       (RADIX) first a threshold that keeps at least k keys (proven from the lane maxima,
//                or guessed from the row two before and proven by the count), the candidates at or
//                above it ranked directly; the digit search only when more than FCAND pass.
//   PREFETCH_REGS (ROWS_PER_BLOCK > 1) the next row's loads into registers before this row's
//                search; false: a hint that brings it into L2 (NVIDIA).
//   SPREAD_RANK  (FILTER) each candidate ranked by up to 8 lanes of one warp, each comparing it with
//                every G-th candidate, the counts summed by shuffles: the comparisons of c candidates
//                spread over c * G threads instead of c (at c ~ 48, warps 0 and 1 alone while the rest
//                of the block waits at the next row's barrier).
//
// args (the kernel's single parameter, by value), fields in this order:
//   const T*   x                    row r at x + r * x_row_stride, n elements contiguous
//   T*         values               row r at values + r * values_row_stride, k elements
//   long long* indices              row r at indices + r * indices_row_stride, k elements
//   u32*       workspace            SPLIT > 1: rows counters, zero at launch (left zero; kept)
//   u32*       scratch              SPLIT > 1: rows * SPLIT * 2 * 128 words for the parts' survivors
//                                   (written before they are read; given per call)
//   long long  x_row_stride, values_row_stride, indices_row_stride     (elements)
//   int        rows                 >= 1
//   int        n                    >= 1 (the row length)
//   int        k                    1 <= k <= min(n, 128)
// C layout: offsets 0, 8, 16, 24, 32, 40, 48, 56, 64, 68, 72; 80 bytes with the tail padding.
//
// threads = THREADS. dynamic_smem = 0 (static shared memory: the survivors, 8 bytes times
// min(128, COLS) per row group; STREAM adds the 8 KiB histogram and the 16 KiB candidate buffer;
// RADIX a 4 * 2^RADIX-byte histogram and, with FILTER, two rows' candidates, 8 KiB).
//
// Grid: a step covers THREADS / ROW_THREADS consecutive rows (one per row group). Rows in
// registers: grid.x = ceil(rows / (THREADS / ROW_THREADS)), block b runs step b (RADIX: rows
// b * ROWS_PER_BLOCK onwards). STREAM: grid.x = rows, block (b, y) runs part y of row b, grid.y =
// SPLIT; grid.z = 1.
//
// Schedules (what hkjit/ops/topk.py picks):
//   (sm_90a; CDNA keeps at most 16 keys a thread in a 64-lane wave, and streams with 512 threads)
//   rows a warp holds: a warp per row, <= 32 keys a thread   <hk::bf16, 8, 256, 32, 1, false, 1>    (256)
//                                                            <hk::bf16, 8, 256, 32, 4, false, 1>    (1024)
//   rows a block holds (n <= 16384), filtered, 8 rows a block in turn
//                     <float, 4, 256, 256, 4, false, 1, 11, 8, 4, true, true>                    (16384 x 4096 fp32)
//                     <hk::bf16, 8, 256, 256, 4, false, 1, 11, 8, 4, true>                      (16384 x 8192 bf16)
//   longer rows: streamed, in parts of about 64 KiB          <hk::bf16, 8, 256, 256, 2, true, 4>    (128 x 128256)
//     few rows: up to 16 parts                               <hk::bf16, 8, 256, 256, 2, true, 16>   (16 x 128256)
//   (a block-wide row group searched bit by bit, ROW_THREADS = THREADS without RADIX, is kept
//   for overrides; so are streamed rows of any length, stream=1)
#pragma once
#include "hk/hk.hpp"
#include "hk/common/select.hpp"

template <class T, int VEC, int THREADS, int ROW_THREADS, int CHUNKS, bool STREAM, int SPLIT, int RADIX = 0,
          int ROWS_PER_BLOCK = 1, int MIN_BLOCKS = 1, bool FILTER = false,
          bool PREFETCH_REGS = false, bool SPREAD_RANK = false>
struct topk {
  static constexpr int threads = THREADS;
  static constexpr int min_blocks = MIN_BLOCKS;
  static constexpr int dynamic_smem = 0;
  struct args {
    const T* x;
    T* values;
    long long* indices;
    hk::u32* workspace;
    hk::u32* scratch;
    long long x_row_stride, values_row_stride, indices_row_stride;
    int rows, n, k;
  };

  static constexpr int MAX_K = 128;
  static constexpr int G = ROW_THREADS;
  static constexpr int GROUPS = THREADS / G;
  static constexpr int COLS = G * VEC * CHUNKS;
  static constexpr int KEYS = CHUNKS * VEC;          // elements a thread holds per (column block of a) row
  static constexpr int HIST_BITS = 11;               // STREAM: pass 1's histogram of the top key bits
  static constexpr int BINS = 1 << HIST_BITS;
  static constexpr int NARROW_BITS = 8;              // STREAM: the digits warp 0 narrows the candidates by
  static constexpr int CAND = 2048;                  // STREAM: candidates of the boundary bin kept in shared memory
  using key_t = hk::order_key<T>;
  static constexpr int KEY_LOW = 32 - key_t::bits;   // the key's lowest significant bit
  using tile = hk::rt_row<T, 1, COLS, VEC, G>;
  static_assert(THREADS % 64 == 0 && THREADS <= 1024, "THREADS: a multiple of 64, at most 1024");
  static_assert(G <= hk::WARP_THREADS ? (G & (G - 1)) == 0 : G == THREADS,
                "ROW_THREADS: a power of two up to the warp size, or THREADS");
  static_assert(!STREAM || G == THREADS, "STREAM reads a row with the whole block");
  static_assert(SPLIT >= 1 && (SPLIT == 1 || STREAM) && SPLIT * MAX_K <= CAND,
                "SPLIT: 1, or up to 16 parts of a streamed row");
  static_assert(VEC * sizeof(T) <= 16, "at most 16-byte accesses");
  static_assert(RADIX == 0 || (!STREAM && G == THREADS && RADIX >= 4 && RADIX <= 11),
                "RADIX: 4 to 11 digit bits, for a row held by the whole block");
  static_assert((ROWS_PER_BLOCK == 1 && !FILTER) || RADIX > 0, "ROWS_PER_BLOCK, FILTER: radix rows only");
  static_assert(!SPREAD_RANK || FILTER, "SPREAD_RANK: a choice of the filtered rows");

  // The survivors of one row group (k of them after the search; k <= n <= COLS in registers).
  static constexpr int SURV = STREAM || COLS > MAX_K ? MAX_K : COLS;
  struct survivors {
    hk::u32 key[SURV], col[SURV], count;
  };

  // Sum of c over the row group (or over GW threads: a warp); every thread of it gets the sum.
  template <int GW = G>
  HK_INLINE static int group_count(int c) {
    float v[1] = {(float)c};   // exact: counts stay below 2**24
    hk::detail::group_allreduce<GW, 1, hk::op_sum>(v);
    return (int)v[0];
  }

  // v summed over this lane and the lanes below it (a Hillis-Steele scan over the warp; lanes below
  // d add nothing at step d: an arithmetic mask, no branch).
  HK_INLINE static hk::u32 lanes_inclusive_sum(hk::u32 v) {
    constexpr int W = hk::WARP_THREADS;
    const int lane = hk::lane_id();
#pragma unroll
    for (int d = 1; d < W; d *= 2) {
      const hk::u32 t = hk::detail::lane_shfl(v, (lane - d) & (W - 1));
      v += t & (hk::u32)((d - 1 - lane) >> 31);
    }
    return v;
  }

  // Ties at the boundary key (`have` elements reach it, more than k): the largest tn such that
  // count(cand) -- the elements above the boundary key plus those at it whose ~column >= cand --
  // still reaches k, i.e. the boundary elements of the lowest columns. 0 when there are no ties
  // (every boundary element survives). count is called uniformly by the whole warp (several row
  // groups may share one), so the decision to search is taken for the warp.
  template <class COUNT>
  HK_INLINE static hk::u32 search_columns(int n, int k, int have, COUNT count) {
    const float ties = hk::detail::lane_allreduce<hk::WARP_THREADS, hk::op_max>(have > k ? 1.0f : 0.0f);
    if (ties == 0.0f) return 0u;
    const int col_bits = hk::bit_length(n - 1);
    hk::u32 tn = col_bits >= 32 ? 0u : ~0u << col_bits;   // every column's ~column reaches this
#pragma unroll 1
    for (int bit = col_bits - 1; bit >= 0; --bit) {
      const hk::u32 cand = tn | (1u << bit);
      if (count(cand) >= k) tn = cand;
    }
    return have > k ? tn : 0u;
  }

  HK_INLINE static void add_survivor(survivors& s, hk::u32 key, int col) {
    const hk::u32 slot = hk::detail::smem_fetch_add(&s.count, 1u);
    s.key[slot] = key;
    s.col[slot] = (hk::u32)col;
  }

  // After a barrier: the k survivors of `s` in order, written to row `row` (by the group's threads).
  HK_INLINE static void write_sorted(const args& a, const survivors& s, int row, int lane) {
    for (int i = lane; i < a.k; i += G) {
      const hk::u32 key = s.key[i], col = s.col[i];
      int rank = 0;
      for (int j = 0; j < a.k; ++j) rank += s.key[j] > key || (s.key[j] == key && s.col[j] < col);
      hk::raw<(int)sizeof(T)> v;
      v.w[0] = key_t::decode(key);
      hk::detail::st_global<(int)sizeof(T)>(a.values + row * a.values_row_stride + rank, v);
      hk::raw<8> ix;
      ix.w[0] = col;
      ix.w[1] = 0;
      hk::detail::st_global<8>(a.indices + row * a.indices_row_stride + rank, ix);
    }
  }

  // This thread's keys of columns c0 .. c0 + COLS of row `row` (0 outside the row): the loads,
  // then the keys of what they brought (apart, so that loads can be in flight across other work).
  HK_INLINE static void load_keys(hk::u32 (&key)[KEYS], const hk::gl<T>& gx, int row, int c0, bool live) {
    tile x;
    hk::load(x, gx, live ? row : gx.rows, c0);
    encode_keys(key, x, gx, c0, live);
  }
  HK_INLINE static void encode_keys(hk::u32 (&key)[KEYS], const tile& x, const hk::gl<T>& gx, int c0, bool live) {
#pragma unroll
    for (int i = 0; i < KEYS; ++i) key[i] = key_t::encode(hk::elem_bits<T>(x.d[i / VEC][0], i % VEC));
    if (!live || c0 + COLS > gx.cols) {   // (uniform over the row group) a row's end or no row: 0 past it
      const hk::u32 row_mask = live ? ~0u : 0u;
#pragma unroll
      for (int i = 0; i < KEYS; ++i)   // by arithmetic (no lane masks to keep)
        key[i] &= (hk::u32)((col_of(c0, i) - gx.cols) >> 31) & row_mask;
    }
  }
  HK_INLINE static int col_of(int c0, int i) { return c0 + tile::col(i / VEC, i % VEC); }

  __device__ static void run(const args& a) {
    if constexpr (STREAM) run_stream(a);
    else if constexpr (RADIX > 0) run_radix(a);
    else run_regs(a);
  }

  // The survivors from this thread's keys into s, given tk (the k-th largest key of the row) and
  // `have` (the row group's count of keys >= tk): those above tk, then the lowest columns among
  // those at tk (the column search runs only when more than k reach tk). The keys become ~column
  // for the elements at tk and 0 for the rest (reused registers; the column search's comparisons
  // then change with every step, so none is kept live across its loop). SUM_ABOVE: the row
  // group's count of keys above tk is summed here; otherwise it is `above`. Dead row groups
  // (live = false) write nothing.
  template <bool SUM_ABOVE>
  HK_INLINE static void collect(survivors& s, hk::u32 (&key)[KEYS], hk::u32 tk, int above, int have, int n, int k,
                                bool live) {
    int mine = 0;
#pragma unroll
    for (int i = 0; i < KEYS; ++i) mine += key[i] > tk;
    if (live && mine) {   // one shared-memory atomic per thread, not per survivor
      hk::u32 slot = hk::detail::smem_fetch_add(&s.count, (hk::u32)mine);
#pragma unroll
      for (int i = 0; i < KEYS; ++i)
        if (key[i] > tk) {
          s.key[slot] = key[i];
          s.col[slot] = (hk::u32)col_of(0, i);
          ++slot;
        }
    }
#pragma unroll
    for (int i = 0; i < KEYS; ++i) key[i] = key[i] == tk ? ~(hk::u32)col_of(0, i) : 0u;
    if constexpr (SUM_ABOVE) above = group_count(mine);
    const hk::u32 tn = search_columns(n, k, have, [&](hk::u32 cand) {
      int c = 0;
#pragma unroll
      for (int i = 0; i < KEYS; ++i) c += key[i] >= cand;
      return above + group_count(c);
    });
    int at = 0;
#pragma unroll
    for (int i = 0; i < KEYS; ++i) at += key[i] != 0u && key[i] >= tn;
    if (live && at) {
      hk::u32 slot = hk::detail::smem_fetch_add(&s.count, (hk::u32)at);
#pragma unroll
      for (int i = 0; i < KEYS; ++i)
        if (key[i] != 0u && key[i] >= tn) {
          s.key[slot] = tk;
          s.col[slot] = ~key[i];
          ++slot;
        }
    }
  }

  // ---- rows held in registers ----------------------------------------------------------------
  __device__ static void run_regs(const args& a) {
    __shared__ survivors surv[GROUPS];
    const auto gx = hk::make_gl(const_cast<T*>(a.x), a.rows, a.n, a.x_row_stride, 1);
    const int group = tile::group(), lane = tile::lane();
    survivors& s = surv[group];
    if (lane == 0) s.count = 0;
    hk::sync_threads();
    // One step per block (no grid-stride loop: around one, the compiler keeps the column
    // bounds of every element live across steps, which overflows the AMD scalar registers).
    const int row = hk::block_x() * GROUPS + group;
    const bool live = row < a.rows;
    hk::u32 key[KEYS];
    load_keys(key, gx, row, 0, live);
    // The key bits: count(key >= cand) over this thread's keys (absent ones are 0: never counted).
    hk::u32 tk = 0;
    int have = live ? a.n : 0;
#pragma unroll 1
    for (int bit = 31; bit >= KEY_LOW; --bit) {
      const hk::u32 cand = tk | (1u << bit);
      int c = 0;
#pragma unroll
      for (int i = 0; i < KEYS; ++i) c += key[i] >= cand;
      c = group_count(c);
      if (c >= a.k) { tk = cand; have = c; }
    }
    collect<true>(s, key, tk, 0, have, a.n, a.k, live);
    hk::sync_threads();
    if (live) write_sorted(a, s, row, lane);
  }

  // ---- rows held by a block, selected by digit histograms (RADIX) -------------------------------
  // The key is searched RADIX bits at a time from the top: a round counts the keys of the region
  // (those whose higher bits equal the threshold found so far) into a shared histogram of the next
  // digit, and a block-wide scan of the bins from the top finds the digit of the k-th largest.
  // Every key takes one shared add in the first round (no branch: an absent element's key 0 lands
  // in bin 0, below every element, so it never moves the boundary) and one compare in each later
  // round, whose few region keys add. fp32 keys take ceil(32 / RADIX) rounds, 16-bit ones
  // ceil(16 / RADIX); each round is three block barriers.
  static constexpr int RBINS = 1 << (RADIX > 0 ? RADIX : 1);
  static constexpr int NWARPS = THREADS / hk::WARP_THREADS;
  static constexpr int FCAND = 512;   // FILTER: candidates ranked directly (more: the digit search)
  struct radix_smem {
    hk::u32 hist[RBINS];
    hk::u32 warp_sum[NWARPS];
    hk::u32 digit, above, have;
    hk::u32 n_guessed[3], n_proven[2], guess[2];   // FILTER: candidate counts, thresholds for later rows
    survivors s;
    // FILTER: (key << 32) | ~column, so that one compare ranks two elements; two rows' worth
    unsigned long long cand[FILTER ? 2 : 1][FILTER ? FCAND : 1];
  };

  // One round over the bits [shift, top) of the keys in the region `(key ^ tk) >> top == 0`: the
  // digit of the k-th largest goes into tk, the count of region keys above it into `above`, and
  // `have` becomes the count reaching tk's bits so far. The histogram is left zeroed.
  template <int TOP, int SHIFT>
  HK_INLINE static void radix_round(radix_smem& sm, const hk::u32 (&key)[KEYS], hk::u32& tk, int& above, int& have,
                                    int k) {
    constexpr int NB = 1 << (TOP - SHIFT);
    constexpr int PER = NB >= THREADS ? NB / THREADS : 1;   // bins a thread scans, from the top
    constexpr int OWNERS = NB / PER;
    const int tid = hk::thread_id(), lane = hk::lane_id(), warp = hk::warp_id();
#pragma unroll
    for (int i = 0; i < KEYS; ++i) {
      if constexpr (TOP == 32) {
        hk::detail::smem_fetch_add(&sm.hist[key[i] >> SHIFT], 1u);
      } else {
        if (((key[i] ^ tk) >> TOP) == 0u) hk::detail::smem_fetch_add(&sm.hist[(key[i] >> SHIFT) & (NB - 1)], 1u);
      }
    }
    hk::sync_threads();
    // Thread t scans bins [NB - (t + 1) PER, NB - t PER): thread 0 the top ones; then zeroes them.
    const int hi = NB - tid * PER;
    hk::u32 h[PER], mine = 0;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      h[j] = tid < OWNERS ? sm.hist[hi - 1 - j] : 0u;
      mine += h[j];
    }
    if (tid < OWNERS)
#pragma unroll
      for (int j = 0; j < PER; ++j) sm.hist[hi - 1 - j] = 0u;
    constexpr int W = hk::WARP_THREADS;
    const hk::u32 incl = lanes_inclusive_sum(mine);
    if (lane == W - 1) sm.warp_sum[warp] = incl;
    hk::sync_threads();
    hk::u32 before = 0;
    for (int w = 0; w < warp; ++w) before += sm.warp_sum[w];
    const hk::u32 need = (hk::u32)(k - above);
    hk::u32 acc = before + incl - mine;
    if (acc < need && acc + mine >= need) {   // exactly one thread: its bins hold the k-th largest
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        if (acc + h[j] >= need) {
          sm.digit = (hk::u32)(hi - 1 - j);
          sm.above = acc;
          sm.have = acc + h[j];
          break;
        }
        acc += h[j];
      }
    }
    hk::sync_threads();
    tk |= sm.digit << SHIFT;
    have = above + (int)sm.have;
    above += (int)sm.above;
  }

  template <int TOP>
  HK_INLINE static void radix_rounds(radix_smem& sm, const hk::u32 (&key)[KEYS], hk::u32& tk, int& above, int& have,
                                     int k) {
    if constexpr (TOP > KEY_LOW) {
      constexpr int SHIFT = TOP - RADIX > KEY_LOW ? TOP - RADIX : KEY_LOW;
      radix_round<TOP, SHIFT>(sm, key, tk, above, have, k);
      radix_rounds<SHIFT>(sm, key, tk, above, have, k);
    }
  }

  // Row `row`'s k largest from this thread's keys (the whole block's registers hold the row) into
  // values and indices; the shared state is left ready for the next row.
  HK_INLINE static void select_row(radix_smem& sm, const args& a, hk::u32 (&key)[KEYS], int row) {
    const int tid = hk::thread_id();
    hk::u32 tk = 0;
    int above = 0, have = 0;
    radix_rounds<32>(sm, key, tk, above, have, a.k);
    collect<false>(sm.s, key, tk, above, have, a.n, a.k, true);
    hk::sync_threads();
    write_sorted(a, sm.s, row, tid);
  }

  // FILTER: most of a row cannot be among its k largest, and a threshold t with at least k keys
  // at or above it is cheap to find without counting every key into bins (whose shared adds
  // collide on the few bins most data falls in). The keys >= t are the candidates: they go to
  // shared memory, and each one's output position is the number of candidates ranked above it (a
  // c x c comparison, no sort). Two thresholds:
  //   proven  each lane's largest key is an element, so the q-th largest lane maximum of a warp
  //           has at least q of the warp's elements at or above it; with q = ceil(k / warps) the
  //           smallest of the warps' thresholds keeps at least k (a bitonic sort of the lane maxima
  //           over each warp, one block barrier);
  //   guessed the key ranked GUESS(k) among the candidates of the row two before in the block (the
  //           second row: the first's), rows alike (e.g. logits) keeping about that many: taken
  //           when the count proves it (k <= c), and cheaper (no sort, no extra barrier);
  //           otherwise the proven one follows.
  // More than FCAND candidates (rows of few distinct values): the digit search takes the row.
  HK_INLINE static int guess_rank(int k) { return k + k / 4 + 8; }

  HK_INLINE static hk::u32 proven_threshold(radix_smem& sm, const args& a, const hk::u32 (&key)[KEYS]) {
    constexpr int W = hk::WARP_THREADS;
    const int lane = hk::lane_id(), warp = hk::warp_id();
    const int q = (a.k + NWARPS - 1) / NWARPS;   // <= W (the caller checks)
    hk::u32 v = 0;
#pragma unroll
    for (int i = 0; i < KEYS; ++i) v = key[i] > v ? key[i] : v;
    // Bitonic sort of the lane maxima over the warp, descending: lane i ends with the i-th largest.
#pragma unroll
    for (int size = 2; size <= W; size *= 2) {
#pragma unroll
      for (int j = size / 2; j > 0; j /= 2) {
        const hk::u32 other = hk::detail::lane_shfl(v, lane ^ j);
        const bool keep_max = ((lane & j) == 0) == ((lane & size) == 0 || size == W);
        v = keep_max ? (other > v ? other : v) : (other < v ? other : v);
      }
    }
    const hk::u32 tw = hk::detail::lane_shfl(v, q - 1);
    if (lane == 0) sm.warp_sum[warp] = tw;
    hk::sync_threads();
    hk::u32 t = ~0u;
    for (int w = 0; w < NWARPS; ++w) t = sm.warp_sum[w] < t ? sm.warp_sum[w] : t;
    return t > 1u ? t : 1u;   // absent elements (key 0) never pass
  }

  // The keys >= t into sm.cand[buf], counted on *count (one shared add a warp: an inclusive scan of
  // the lanes' counts); those past FCAND are counted, not kept. No barrier.
  HK_INLINE static void gather(radix_smem& sm, int buf, hk::u32* count, const hk::u32 (&key)[KEYS], hk::u32 t) {
    constexpr int W = hk::WARP_THREADS;
    const int lane = hk::lane_id();
    hk::u32 mine = 0;
#pragma unroll
    for (int i = 0; i < KEYS; ++i) mine += key[i] >= t;
    const hk::u32 incl = lanes_inclusive_sum(mine);
    hk::u32 base = 0;
    if (lane == W - 1 && incl) base = hk::detail::smem_fetch_add(count, incl);
    hk::u32 slot = hk::detail::lane_shfl(base, W - 1) + incl - mine;
    if (mine) {
#pragma unroll
      for (int i = 0; i < KEYS; ++i)
        if (key[i] >= t) {
          if (slot < (hk::u32)FCAND)
            sm.cand[buf][slot] = ((unsigned long long)key[i] << 32) | (hk::u32)~(hk::u32)col_of(0, i);
          ++slot;
        }
    }
  }

  // The k largest of the c candidates in sm.cand[buf], written in order; the candidate ranked
  // GUESS(k) (or the last) becomes the guess for the row two on.
  HK_INLINE static void rank_candidates(radix_smem& sm, const args& a, int buf, int c, int row) {
    const int g = (guess_rank(a.k) < c ? guess_rank(a.k) : c) - 1;
    if constexpr (SPREAD_RANK) {
      // G = 2^lg lanes a candidate (block-uniform), adjacent lanes of one warp: thread idx takes
      // candidate idx / G and the candidates j = idx % G, + G, ...; every lane runs the shuffles.
      const int lg = c * 8 <= THREADS ? 3 : c * 4 <= THREADS ? 2 : c * 2 <= THREADS ? 1 : 0;
      const int lane = hk::lane_id();
      for (int idx0 = 0; idx0 < c << lg; idx0 += THREADS) {
        const int idx = idx0 + hk::thread_id(), i = idx >> lg, part = idx & ((1 << lg) - 1);
        const bool live = i < c;
        const unsigned long long me = sm.cand[buf][live ? i : 0];
        hk::u32 rank = 0;
        if (live)
          for (int j = part; j < c; j += 1 << lg) rank += sm.cand[buf][j] > me;
        for (int d = 1; d < 1 << lg; d <<= 1) rank += hk::detail::lane_shfl(rank, lane ^ d);
        if (live && part == 0) put_ranked(sm, a, buf, me, (int)rank, g, row);
      }
      return;
    }
    for (int i = hk::thread_id(); i < c; i += THREADS) {
      const unsigned long long me = sm.cand[buf][i];
      int rank = 0;
      for (int j = 0; j < c; ++j) rank += sm.cand[buf][j] > me;
      put_ranked(sm, a, buf, me, rank, g, row);
    }
  }
  // A candidate of rank `rank`: its value and column to the output if among the k largest; the key
  // of rank g becomes the guess for the row two on.
  HK_INLINE static void put_ranked(radix_smem& sm, const args& a, int buf, unsigned long long me, int rank, int g,
                                   int row) {
    if (rank == g) sm.guess[buf] = (hk::u32)(me >> 32);
    if (rank < a.k) {
      hk::raw<(int)sizeof(T)> val;
      val.w[0] = key_t::decode((hk::u32)(me >> 32));
      hk::detail::st_global<(int)sizeof(T)>(a.values + row * a.values_row_stride + rank, val);
      hk::raw<8> ix;
      ix.w[0] = ~(hk::u32)me;
      ix.w[1] = 0;
      hk::detail::st_global<8>(a.indices + row * a.indices_row_stride + rank, ix);
    }
  }

  // Row `row`, the j-th of this block: filtered where FILTER allows, else the digit search. Returns
  // whether the digit search ran (its survivors must be read before the next row's are written).
  HK_INLINE static bool topk_row(radix_smem& sm, const args& a, hk::u32 (&key)[KEYS], int row, int j) {
    if constexpr (FILTER) {
      const int buf = j & 1;
      // The guess of the row two before (the barriers between make it visible); the second row
      // takes the first's, after one more barrier. 0: none.
      if (j == 1) hk::sync_threads();
      const hk::u32 guess = j >= 2 ? sm.guess[buf] : j == 1 ? sm.guess[0] : 0u;
      if (guess) {
        gather(sm, buf, &sm.n_guessed[j % 3], key, guess);
        hk::sync_threads();
        // Row j - 1's count: every thread read it before this barrier; row j + 2 counts on it.
        if (hk::thread_id() == 0) sm.n_guessed[(j + 2) % 3] = 0;
        const int c = (int)sm.n_guessed[j % 3];
        if (c >= a.k && c <= FCAND) {
          rank_candidates(sm, a, buf, c, row);
          return false;
        }
      }
      if ((a.k + NWARPS - 1) / NWARPS <= hk::WARP_THREADS) {
        // (row j - 2 read n_proven[buf] before the barrier that ended its row)
        if (hk::thread_id() == 0) sm.n_proven[buf] = 0;
        const hk::u32 t = proven_threshold(sm, a, key);
        if (!guess && hk::thread_id() == 0) sm.n_guessed[(j + 2) % 3] = 0;   // (as above)
        gather(sm, buf, &sm.n_proven[buf], key, t);
        hk::sync_threads();
        const int c = (int)sm.n_proven[buf];
        if (c <= FCAND) {
          rank_candidates(sm, a, buf, c, row);
          return false;
        }
      }
    }
    select_row(sm, a, key, row);
    return true;
  }

  // ROWS_PER_BLOCK consecutive rows a block; with more than one, the next row's loads are in flight
  // while this one is searched (PREFETCH_REGS) or it is hinted into L2 (NVIDIA), and later rows take
  // a threshold guessed from an earlier one (FILTER).
  __device__ static void run_radix(const args& a) {
    __shared__ radix_smem sm;
    const auto gx = hk::make_gl(const_cast<T*>(a.x), a.rows, a.n, a.x_row_stride, 1);
    const int tid = hk::thread_id();
    int row = hk::block_x() * ROWS_PER_BLOCK;   // < a.rows: grid.x = ceil(rows / ROWS_PER_BLOCK)
    hk::u32 key[KEYS];
    load_keys(key, gx, row, 0, true);
    for (int i = tid; i < RBINS; i += THREADS) sm.hist[i] = 0u;
    if (tid < 3) sm.n_guessed[tid] = 0;
    if (tid < 2) sm.guess[tid] = 0;
    if (tid == 0) sm.s.count = 0;
    hk::sync_threads();
    if constexpr (ROWS_PER_BLOCK == 1) {
      topk_row(sm, a, key, row, 0);
    } else {
      const int first = row, end = row + ROWS_PER_BLOCK < a.rows ? row + ROWS_PER_BLOCK : a.rows;
#pragma unroll 1
      for (;;) {
        // The next row: its loads in flight while this one is searched (PREFETCH_REGS: registers
        // held for them), or a hint that brings it into L2 (no registers).
        [[maybe_unused]] tile next;
        if constexpr (PREFETCH_REGS) {
          hk::load(next, gx, row + 1 < end ? row + 1 : gx.rows, 0);
        } else {
          const int line_elems = 128 / (int)sizeof(T);
          if (row + 1 < end && tid * line_elems < a.n)
            hk::detail::prefetch_l2(a.x + (long long)(row + 1) * a.x_row_stride + tid * line_elems);
        }
        if (topk_row(sm, a, key, row, row - first)) {
          hk::sync_threads();   // every thread has read the survivors before the next row's arrive
          if (tid == 0) sm.s.count = 0;
        }
        if (++row == end) break;
        if constexpr (PREFETCH_REGS) encode_keys(key, next, gx, 0, true);
        else load_keys(key, gx, row, 0, true);
      }
    }
  }

  // Which elements a count or a collection takes: key > tk, or key == tk with ~column >= tn
  // (strict: key > tk only). A plain struct, not a generic lambda: every JIT compiler takes it.
  struct pick {
    hk::u32 tk, tn;
    bool strict;
    HK_INLINE bool operator()(hk::u32 key, hk::u32 ncol) const {
      return key > tk || (!strict && key == tk && ncol >= tn);
    }
  };

  // The survivors past the first `above` (already in s): from a region whose elements have their
  // key bits above `top` equal to those of tk, `have` of them reaching tk. count_in(p) is the
  // count of region elements that p takes (over the threads searching); add_if(p) adds them to s.
  template <class COUNT, class ADD>
  HK_INLINE static void finish(int n, int k, int top, hk::u32 tk, int above, int have, COUNT count_in, ADD add_if) {
#pragma unroll 1
    for (int bit = top - 1; bit >= KEY_LOW; --bit) {
      const hk::u32 cand = tk | (1u << bit);
      const int c = above + count_in(pick{cand, 0u, false});   // key >= cand
      if (c >= k) { tk = cand; have = c; }
    }
    const hk::u32 tn = search_columns(n, k, have, [&](hk::u32 cand) {
      return above + count_in(pick{tk, cand, false});
    });
    add_if(pick{tk, tn, false});
  }

  // ---- long rows: one row (or a SPLIT-th of one) per block, read twice -------------------------
  struct stream_smem {
    hk::u32 hist[BINS];
    hk::u32 cand_key[CAND], cand_col[CAND];
    hk::u32 n_cand, last, tb, above;
    survivors s;
  };
  static constexpr int W = hk::WARP_THREADS;

  // Warp 0: the boundary bin among the first NB of sm.hist (the largest b with count(bins >= b)
  // >= k) into sm.tb and the count of the bins above it into sm.above. Lane l sums bins
  // [NB - (l + 1) B, NB - l B) (lane 0 the top ones), a scan over the lanes finds the lane whose
  // bins hold the k-th largest, and that lane walks its bins down.
  template <int NB>
  HK_INLINE static void find_boundary_bin(stream_smem& sm, int k) {
    static_assert(NB % W == 0 && NB <= BINS, "whole bins per lane");
    constexpr int B = NB / W;
    const int lane = hk::lane_id(), top = NB - lane * B;
    hk::u32 mine = 0;
    for (int b = top - B; b < top; ++b) mine += sm.hist[b];
    const hk::u32 incl = lanes_inclusive_sum(mine);
    hk::u32 acc = incl - mine;
    if (acc < (hk::u32)k && incl >= (hk::u32)k) {
      for (int b = top - 1; b >= top - B; --b) {
        if (acc + sm.hist[b] >= (hk::u32)k) {
          sm.tb = (hk::u32)b;
          sm.above = acc;
          break;
        }
        acc += sm.hist[b];
      }
    }
  }

  // The k largest of columns [c_lo, c_lo + gseg.cols) of row `row` into sm.s (k <= gseg.cols).
  HK_INLINE static void select_columns(stream_smem& sm, const hk::gl<T>& gseg, int row, int c_lo, int n, int k) {
    constexpr int SHIFT = 32 - HIST_BITS;
    const int tid = hk::thread_id(), len = gseg.cols;
    for (int i = tid; i < BINS; i += THREADS) sm.hist[i] = 0;
    if (tid == 0) sm.n_cand = 0;
    hk::sync_threads();
    for (int c0 = 0; c0 < len; c0 += COLS) {   // pass 1: histogram of the top key bits
      hk::u32 key[KEYS];
      load_keys(key, gseg, row, c0, true);
#pragma unroll
      for (int i = 0; i < KEYS; ++i)
        if (key[i] != 0u) hk::detail::smem_fetch_add(&sm.hist[key[i] >> SHIFT], 1u);
    }
    hk::sync_threads();
    if (hk::warp_id() == 0) find_boundary_bin<BINS>(sm, k);
    hk::sync_threads();
    const hk::u32 tb = sm.tb;
    const int above = (int)sm.above, in_bin = (int)sm.hist[tb];
    const bool fits = in_bin <= CAND;
    for (int c0 = 0; c0 < len; c0 += COLS) {   // pass 2: survivors above the bin, candidates in it
      hk::u32 key[KEYS];
      load_keys(key, gseg, row, c0, true);
#pragma unroll
      for (int i = 0; i < KEYS; ++i) {
        if (key[i] == 0u) continue;
        const hk::u32 bin = key[i] >> SHIFT;
        if (bin > tb) {
          add_survivor(sm.s, key[i], c_lo + col_of(c0, i));
        } else if (fits && bin == tb) {
          const hk::u32 slot = hk::detail::smem_fetch_add(&sm.n_cand, 1u);
          sm.cand_key[slot] = key[i];
          sm.cand_col[slot] = (hk::u32)(c_lo + col_of(c0, i));
        }
      }
    }
    hk::sync_threads();
    if (fits) {   // the rest within the bin: one warp over the candidates, no block barriers
      if (hk::warp_id() == 0) select_candidates(sm, SHIFT, tb << SHIFT, above, in_bin, n, k);
      return;
    }
    // More than CAND elements in the bin (few distinct values): the block counts over the row.
    auto count_bin = [&](const pick& p) {
      int c = 0;
      for (int c0 = 0; c0 < len; c0 += COLS) {
        hk::u32 key[KEYS];
        load_keys(key, gseg, row, c0, true);
#pragma unroll
        for (int i = 0; i < KEYS; ++i)
          c += key[i] != 0u && (key[i] >> SHIFT) == tb && p(key[i], ~(hk::u32)(c_lo + col_of(c0, i)));
      }
      return group_count(c);
    };
    auto add_bin = [&](const pick& p) {
      for (int c0 = 0; c0 < len; c0 += COLS) {
        hk::u32 key[KEYS];
        load_keys(key, gseg, row, c0, true);
#pragma unroll
        for (int i = 0; i < KEYS; ++i)
          if (key[i] != 0u && (key[i] >> SHIFT) == tb && p(key[i], ~(hk::u32)(c_lo + col_of(c0, i))))
            add_survivor(sm.s, key[i], c_lo + col_of(c0, i));
      }
    };
    finish(n, k, SHIFT, tb << SHIFT, above, above + in_bin, count_bin, add_bin);
  }

  // One warp: the survivors past `above` among the m candidates in sm.cand_*, whose key bits
  // above `top` equal tk's, into sm.s. While 8 or more key bits remain, a 256-bin histogram of
  // the next 8 bits narrows the region at once (as pass 1 does for the row): the candidates in
  // higher bins survive, those in lower ones drop out; the last bits are searched one by one.
  // (8-bit digits: a warp zeroes and scans 256 bins in a few steps per lane; for the few
  // candidates of a bin that is cheaper per bit than 2048 bins or single-bit steps.)
  HK_INLINE static void select_candidates(stream_smem& sm, int top, hk::u32 tk, int above, int m, int n, int k) {
    const int lane = hk::lane_id();
    int have = above + m;
    auto in_region = [](hk::u32 key, int t, hk::u32 prefix) { return t >= 32 || (key >> t) == (prefix >> t); };
    constexpr int NB = 1 << NARROW_BITS;
    while (top - KEY_LOW >= NARROW_BITS) {
      const int shift = top - NARROW_BITS;
      const hk::u32 digits = NB - 1;
      for (int b = lane; b < NB; b += W) sm.hist[b] = 0;
      hk::detail::sync_warp();
      for (int i = lane; i < m; i += W)
        if (in_region(sm.cand_key[i], top, tk))
          hk::detail::smem_fetch_add(&sm.hist[(sm.cand_key[i] >> shift) & digits], 1u);
      hk::detail::sync_warp();
      find_boundary_bin<NB>(sm, k - above);
      hk::detail::sync_warp();
      const hk::u32 d = sm.tb;
      for (int i = lane; i < m; i += W) {
        const hk::u32 key = sm.cand_key[i];
        if (in_region(key, top, tk) && ((key >> shift) & digits) > d) add_survivor(sm.s, key, (int)sm.cand_col[i]);
      }
      above += (int)sm.above;
      have = above + (int)sm.hist[d];
      tk |= d << shift;
      top = shift;
      hk::detail::sync_warp();   // every lane has read the histogram before the next one is built
    }
    finish(n, k, top, tk, above, have,
           [&](const pick& p) {
             int c = 0;
             for (int i = lane; i < m; i += W)
               c += in_region(sm.cand_key[i], top, tk) && p(sm.cand_key[i], ~sm.cand_col[i]);
             return group_count<W>(c);
           },
           [&](const pick& p) {
             for (int i = lane; i < m; i += W)
               if (in_region(sm.cand_key[i], top, tk) && p(sm.cand_key[i], ~sm.cand_col[i]))
                 add_survivor(sm.s, sm.cand_key[i], (int)sm.cand_col[i]);
           });
  }

  __device__ static void run_stream(const args& a) {
    __shared__ stream_smem sm;
    const int tid = hk::thread_id();
    const int part = SPLIT > 1 ? hk::block_y() : 0;
    // Part p of a row: columns [p seg, (p + 1) seg), seg a whole number of column blocks.
    const int seg = SPLIT > 1 ? ((a.n + SPLIT - 1) / SPLIT + COLS - 1) / COLS * COLS : a.n;
    const int c_lo = part * seg < a.n ? part * seg : a.n;
    const int len = a.n - c_lo < seg ? a.n - c_lo : seg;
    const int k_part = a.k < len ? a.k : len;
    const auto gseg = hk::make_gl(const_cast<T*>(a.x) + c_lo, a.rows, len, a.x_row_stride, 1);
    // One row per block (no grid-stride loop: around one, the compiler keeps lane-dependent
    // masks live across rows, which overflows the AMD scalar registers).
    const int row = hk::block_x();
    if (tid == 0) sm.s.count = 0;
    if (k_part > 0) select_columns(sm, gseg, row, c_lo, a.n, k_part);
    hk::sync_threads();
    if constexpr (SPLIT > 1) {
      // Each part leaves its k_part survivors in the scratch; the part that finishes last
      // (a counter per row, left at 0 again) selects the row's k among them.
      hk::u32* counter = a.workspace + row;
      hk::u32* list = a.scratch + ((long long)row * SPLIT + part) * 2 * MAX_K;
      for (int i = tid; i < k_part; i += THREADS) {
        list[2 * i] = sm.s.key[i];
        list[2 * i + 1] = sm.s.col[i];
      }
      hk::detail::fence_device();
      hk::sync_threads();
      if (tid == 0) sm.last = hk::detail::global_fetch_add(counter, 1u) == SPLIT - 1;
      hk::sync_threads();
      if (!sm.last) return;
      hk::detail::fence_device();
      int m = 0;
#pragma unroll 1
      for (int p = 0; p < SPLIT; ++p) {
        const int lo = p * seg < a.n ? p * seg : a.n;
        const int len_p = a.n - lo < seg ? a.n - lo : seg;
        const int kp = a.k < len_p ? a.k : len_p;
        const hk::u32* other = a.scratch + ((long long)row * SPLIT + p) * 2 * MAX_K;
        for (int i = tid; i < kp; i += THREADS) {
          sm.cand_key[m + i] = other[2 * i];
          sm.cand_col[m + i] = other[2 * i + 1];
        }
        m += kp;
      }
      if (tid == 0) { sm.s.count = 0; *counter = 0; }
      hk::sync_threads();
      if (hk::warp_id() == 0) select_candidates(sm, 32, 0u, 0, m, a.n, a.k);
      hk::sync_threads();
    }
    write_sorted(a, sm.s, row, tid);
  }
};
