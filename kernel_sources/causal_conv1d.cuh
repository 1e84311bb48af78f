// causal_conv1d.cuh: the depthwise causal convolution of Mamba-style blocks and its one-step decode
// update, one source for gfx942, gfx950 and sm_90a.
//
// causal_conv1d (prefill): for x of logical shape (B, D, L), weight (D, W), bias (D,) or none,
//   y[b][d][t] = ACT(bias[d] + sum_{i < W} weight[d][i] * x[b][d][t - (W - 1) + i])
// with x[b][d][t] = 0 for t < 0 (zero left padding; the output has x's length). fp32 math, one
// rounding to T. ACT is the identity or silu. One pass over memory: every x element is read once
// from DRAM and every y element written once; the W - 1 elements before a thread's chunk (its
// halo) come from registers, never from a second read, except at the start of a segment.
//
// Two memory layouts, the same arithmetic:
//   L-major (CHANNEL_LAST false): each (b, d) is a row of L elements, contiguous. A row group of
//     ROW_THREADS lanes of one warp walks a segment of a row in steps of COLS = ROW_THREADS * VEC *
//     CHUNKS columns: lane l holds chunks k of VEC elements at columns (k ROW_THREADS + l) VEC (one
//     16-byte access each at best, rt_row's layout). The halo of a chunk is the tail of the chunk
//     before it: lane l - 1's chunk k, or for lane 0 lane ROW_THREADS - 1's chunk k - 1, or for
//     chunk 0 of lane 0 the last chunk of the previous step, carried in registers. All of it moves
//     with one lane rotation (shuffle) per halo element and chunk. A segment's first halo is read
//     from memory (zero before t = 0).
//   channel-last (CHANNEL_LAST true): x is (B, L, D) in memory (Mamba's layout, a (B, D, L) view
//     with channel stride 1): a row group of ROW_THREADS threads covers ROW_THREADS * VEC channels
//     (VEC per thread, 16 bytes at best) and walks a segment of time steps, CHUNKS steps at a time
//     (CHUNKS independent loads in flight); each thread keeps the last W - 1 time steps of its
//     channels in registers.
//
// causal_conv1d_update (decode): one step. For x (B, D) and conv_state (B, D, S), S >= W - 1,
//   window = [conv_state[b][d][S - W + 1 .. S - 1], x[b][d]]
//   y[b][d] = ACT(bias[d] + sum_{i < W} weight[d][i] * window[i])
//   conv_state[b][d][0 .. S - 1] <- [conv_state[b][d][1 .. S - 1], x[b][d]]   (in place)
// One thread per channel, any strides (element accesses; the state is moved bit for bit).
//
// Template parameters of causal_conv1d, in order:
//   T             hk::bf16, hk::half or float: x and y.
//   TW            the type of weight and bias (T or float).
//   W             the kernel width, 2, 3 or 4.
//   SILU          false: no activation; true: y = silu(conv).
//   CHANNEL_LAST  the layout (above).
//   VEC           elements per vector access (1, 2, 4, 8; VEC sizeof(T) <= 16). The caller
//                 guarantees x, y, their batch strides and their row strides (L-major: channel
//                 strides; channel-last: time strides) are multiples of VEC elements.
//   THREADS       threads per block: a multiple of 64, at most 1024.
//   ROW_THREADS   L-major: lanes per row, a power of two from 4 up to the warp; channel-last: a
//                 power of two up to THREADS.
//   CHUNKS        L-major: chunks per lane and step; channel-last: time steps per step.
//   PREFETCH      software pipelining: the next step's loads (L-major: also across work items) are
//                 issued before the current step's arithmetic (a second tile of registers).
//   MIN_BLOCKS    blocks per SM the NVIDIA compiler must fit (a register cap; 1: none).
//   DIRECT        channel-last only: a thread whose VEC channels lie below dim, in a step whose CHUNKS
//                 time steps lie inside the segment, reads and writes through a pointer walked by
//                 the time stride (one add and one access a time step) instead of the tile path's
//                 per-access row and column checks, 64-bit row products and branches; edge
//                 channels and steps keep the tile path. false: the tile path everywhere.
//
// args (the kernel's single parameter, passed by value), fields in this order:
//   const T* x; T* y;                  element (b, d, t) at x + b xs0 + d xs1 + t xs2 (y: ys*)
//   const TW* weight; const TW* bias;  weight[d][i] at weight + d ws0 + i ws1; bias + d bs (null:
//                                      no bias)
//   long long xs0, xs1, xs2, ys0, ys1, ys2, ws0, ws1, bs;
//   int batch, dim, len;               B, D, L
//   int seg_len;                       columns (time steps) of a segment, a multiple of the step
//   int segs;                          segments per row (L-major) or per (batch, channel block)
// L-major needs xs2 = ys2 = 1; channel-last xs1 = ys1 = 1.
// C layout: pointers at 0, 8, 16, 24; strides 32..96; ints 104..120; 128 bytes (the ctypes
// mirror in hkjit/ops/causal_conv1d.py; a test checks it against the AMD metadata).
//
// threads = THREADS, dynamic_smem = 0. Grid (1-D): work items are (row, segment) pairs (L-major,
// rows = B D, segment fastest) or (batch, segment, channel block) triples (channel-last, channel
// block fastest), THREADS / ROW_THREADS of them a block step; grid.x in [1, block steps], block b
// takes steps b, b + grid.x, ... Every lane of a warp runs the same number of steps (the lane
// rotation needs the whole warp): items past the end and columns past a segment run masked.
//
// Template parameters of causal_conv1d_update: T, TW, W, SILU as above; THREADS (a multiple of 64).
// args: const T* x; T* y; T* state; const TW* weight; const TW* bias;
//       long long xs0, xs1, ys0, ys1, ss0, ss1, ss2, ws0, ws1, bs;  int batch, dim, state_len;
// C layout: pointers 0..32; strides 40..112; ints 120, 124, 128; 136 bytes. Grid: one thread per
// (b, d), grid.x in [1, cdiv(B D, THREADS)], grid-stride.
#pragma once
#include "hk/hk.hpp"
#include "hk/common/activations.hpp"
#include "hk/common/select.hpp"   // detail::lane_shfl

namespace conv1d_detail {
// One element of T at p, as fp32.
template <class T> HK_INLINE float load_one(const T* p) {
  return hk::to_float(hk::detail::elem<T>(hk::detail::ld_global<(int)sizeof(T)>(p), 0));
}
template <bool SILU> HK_INLINE float activate(float v) {
  if constexpr (SILU) return hk::act::silu::apply(v);
  else return v;
}
}  // namespace conv1d_detail

template <class T, class TW, int W, bool SILU, bool CHANNEL_LAST, int VEC, int THREADS, int ROW_THREADS, int CHUNKS,
          bool PREFETCH, int MIN_BLOCKS, bool DIRECT = false>
struct causal_conv1d {
  static constexpr int threads = THREADS;
  static constexpr int min_blocks = MIN_BLOCKS;
  static constexpr int dynamic_smem = 0;
  struct args {
    const T* x;
    T* y;
    const TW* weight;
    const TW* bias;
    long long xs0, xs1, xs2, ys0, ys1, ys2, ws0, ws1, bs;
    int batch, dim, len, seg_len, segs;
  };

  static constexpr int H = W - 1;                          // halo: elements before an output's own
  static constexpr int GROUPS = THREADS / ROW_THREADS;     // row groups (work items) per block step
  static_assert(W >= 2 && W <= 4, "kernel widths 2, 3, 4");
  static_assert(THREADS % 64 == 0 && THREADS <= 1024, "THREADS: a multiple of 64, at most 1024");
  static_assert(VEC * sizeof(T) <= 16, "at most 16-byte accesses");
  static_assert(THREADS % ROW_THREADS == 0 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
                "ROW_THREADS: a power of two dividing THREADS");
  static_assert(CHANNEL_LAST || (ROW_THREADS >= 4 && ROW_THREADS <= hk::WARP_THREADS),
                "L-major rows: 4 to a warp of lanes (a halo lies at most 3 lanes back)");
  static_assert(CHANNEL_LAST || !DIRECT, "DIRECT: channel-last x only");

  // L-major: one row of CHUNKS chunks per lane; channel-last: CHUNKS time steps of VEC channels.
  using tile = hk::rt_row<T, CHANNEL_LAST ? CHUNKS : 1, ROW_THREADS * VEC * (CHANNEL_LAST ? 1 : CHUNKS), VEC, ROW_THREADS>;
  using ftile = typename tile::template retype<float>;

  __device__ static void run(const args& a) {
    if constexpr (CHANNEL_LAST) run_channel_last(a);
    else run_lmajor(a);
  }

  // ---- L-major ---------------------------------------------------------------------------------
  static constexpr int COLS = tile::cols;                  // columns a step
  // Halo element h (1 <= h <= H elements before a chunk's first) lies M(h) chunks back, at P(h).
  HK_HD static constexpr int M(int h) { return (h + VEC - 1) / VEC; }
  HK_HD static constexpr int P(int h) { return M(h) * VEC - h; }

  // What a row group needs of one work item (a segment of a row): its row in x and y, its taps and
  // bias, and the halo of its first chunk (carry[h - 1], for lanes whose first chunk's halo element h
  // lies before the segment, l VEC < h; zero before t = 0). Items past the end read and write nothing.
  struct row_item {
    const T* x;
    T* y;
    int t_begin, t_end;                                    // t_end = 0: nothing to read or write
    float w[W], bias, carry[H];
    HK_INLINE hk::gl<T> gx(const args& a) const { return hk::make_gl(const_cast<T*>(x), 1, t_end, a.len, 1); }
    HK_INLINE hk::gl<T> gy(const args& a) const { return hk::make_gl(y, 1, t_end, a.len, 1); }
  };
  __device__ static row_item begin_row(const args& a, long long item, long long items, int l) {
    row_item it;
    const bool ok = item < items;
    const int r = ok ? (int)(item / a.segs) : 0, s = ok ? (int)(item % a.segs) : 0;
    const int b = r / a.dim, d = r % a.dim;
#pragma unroll
    for (int i = 0; i < W; ++i) it.w[i] = conv1d_detail::load_one(a.weight + d * a.ws0 + i * a.ws1);
    it.bias = a.bias != nullptr ? conv1d_detail::load_one(a.bias + d * a.bs) : 0.0f;
    const T* xrow = a.x + (b * a.xs0 + d * a.xs1);
    it.x = xrow;
    it.y = a.y + (b * a.ys0 + d * a.ys1);
    it.t_begin = s * a.seg_len;
    it.t_end = !ok ? 0 : a.len - it.t_begin < a.seg_len ? a.len : it.t_begin + a.seg_len;
#pragma unroll
    for (int h = 1; h <= H; ++h) {
      const int t = it.t_begin + l * VEC - h;
      it.carry[h - 1] = ok && l * VEC < h && t >= 0 ? conv1d_detail::load_one(xrow + t) : 0.0f;
    }
    return it;
  }

  // One step: y = conv(x) for the step's chunks, whose halo comes from the lanes before (and, for
  // the first lanes, from `carry`, which then takes this step's tail for the next step).
  HK_INLINE static void step(const row_item& it, float (&carry)[H], const tile& xt, tile& o, int l, int lane,
                             int base) {
    ftile f;
    hk::convert(f, xt);
    // nb[k][h - 1]: element P(h) of the chunk M(h) lanes back (cyclically) in chunk k.
    float nb[CHUNKS][H];
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k)
#pragma unroll
      for (int h = 1; h <= H; ++h) {
        const int src = base | ((lane - M(h)) & (ROW_THREADS - 1));
        const float v = f.get(k * VEC + P(h));
        nb[k][h - 1] = __builtin_bit_cast(float, hk::detail::lane_shfl(__builtin_bit_cast(hk::u32, v), src));
      }
#pragma unroll
    for (int k = 0; k < CHUNKS; ++k) {
      // win[q + H]: the input at offset q from the chunk's first element, -H <= q < VEC.
      float win[H + VEC];
#pragma unroll
      for (int h = 1; h <= H; ++h)   // lanes below M(h) wrapped around: one chunk further back
        win[H - h] = l >= M(h) ? nb[k][h - 1] : (k > 0 ? nb[k > 0 ? k - 1 : 0][h - 1] : carry[h - 1]);
#pragma unroll
      for (int j = 0; j < VEC; ++j) win[H + j] = f.get(k * VEC + j);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float acc = it.bias;
#pragma unroll
        for (int i = 0; i < W; ++i) acc += it.w[i] * win[j + i];
        o.set(k * VEC + j, conv1d_detail::activate<SILU>(acc));
      }
    }
#pragma unroll
    for (int h = 1; h <= H; ++h) carry[h - 1] = nb[CHUNKS - 1][h - 1];
  }

  // PREFETCH: software-pipelined, the loads of the next step (of this item, or the first of the
  // group's next item) are issued before the current step's arithmetic, so that every thread keeps
  // a step of loads in flight while it computes (more registers: a second tile).
  __device__ static void run_lmajor(const args& a) {
    if constexpr (PREFETCH) run_lmajor_pipelined(a);
    else run_lmajor_plain(a);
  }

  __device__ static void run_lmajor_plain(const args& a) {
    const long long items = (long long)a.batch * a.dim * a.segs;
    const long long steps = (items + GROUPS - 1) / GROUPS;
    const int l = tile::lane(), lane = hk::lane_id(), base = lane & ~(ROW_THREADS - 1);
    for (long long blk = hk::block_x(); blk < steps; blk += hk::grid_x()) {
      const row_item it = begin_row(a, blk * GROUPS + tile::group(), items, l);
      float carry[H];
#pragma unroll
      for (int h = 0; h < H; ++h) carry[h] = it.carry[h];
      for (int c0 = it.t_begin; c0 < it.t_begin + a.seg_len; c0 += COLS) {
        tile xt, o;
        hk::load(xt, it.gx(a), 0, c0);
        step(it, carry, xt, o, l, lane, base);
        hk::store(it.gy(a), o, 0, c0);
      }
    }
  }

  __device__ static void run_lmajor_pipelined(const args& a) {
    const long long items = (long long)a.batch * a.dim * a.segs;
    const long long steps = (items + GROUPS - 1) / GROUPS;
    const int seg_steps = a.seg_len / COLS;
    const int l = tile::lane(), lane = hk::lane_id(), base = lane & ~(ROW_THREADS - 1);
    long long blk = hk::block_x();
    if (blk >= steps) return;
    row_item it = begin_row(a, blk * GROUPS + tile::group(), items, l);
    tile cur;
    hk::load(cur, it.gx(a), 0, it.t_begin);
    for (; blk < steps; blk += hk::grid_x()) {
      float carry[H];
#pragma unroll
      for (int h = 0; h < H; ++h) carry[h] = it.carry[h];
      for (int n = 0; n < seg_steps; ++n) {
        const int c0 = it.t_begin + n * COLS;
        const bool last = n + 1 == seg_steps;                // the same for every lane
        tile nxt, o;
        row_item next;
        if (!last) {
          hk::load(nxt, it.gx(a), 0, c0 + COLS);
        } else {
          next = begin_row(a, (blk + hk::grid_x()) * GROUPS + tile::group(), items, l);
          hk::load(nxt, next.gx(a), 0, next.t_begin);
        }
        step(it, carry, cur, o, l, lane, base);
        hk::store(it.gy(a), o, 0, c0);
        cur = nxt;
        if (last) it = next;
      }
    }
  }

  // ---- channel-last ----------------------------------------------------------------------------
  static constexpr int CCOLS = ROW_THREADS * VEC;          // channels a row group covers

  __device__ static void run_channel_last(const args& a) {
    const int cblocks = (a.dim + CCOLS - 1) / CCOLS;
    const long long items = (long long)a.batch * a.segs * cblocks;
    const long long steps = (items + GROUPS - 1) / GROUPS;
    for (long long blk = hk::block_x(); blk < steps; blk += hk::grid_x()) {
      const long long item = blk * GROUPS + tile::group();
      const bool ok = item < items;
      const int cb = ok ? (int)(item % cblocks) : 0;
      const long long bs_ = ok ? item / cblocks : 0;
      const int s = (int)(bs_ % a.segs), b = (int)(bs_ / a.segs);
      const int c0 = cb * CCOLS;
      const int t_begin = s * a.seg_len;
      const int t_end = a.len - t_begin < a.seg_len ? a.len : t_begin + a.seg_len;
      // Rows are time steps (stride xs2), columns channels (stride 1).
      const auto gx = hk::make_gl(const_cast<T*>(a.x) + b * a.xs0, ok ? t_end : 0, a.dim, a.xs2, 1);
      const auto gy = hk::make_gl(a.y + b * a.ys0, ok ? t_end : 0, a.dim, a.ys2, 1);
      // This thread's channels' taps and bias (zero past the last channel).
      float w[W][VEC], bias[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int d = c0 + tile::col(0, j);
        const bool in = ok && d < a.dim;
#pragma unroll
        for (int i = 0; i < W; ++i) w[i][j] = in ? conv1d_detail::load_one(a.weight + d * a.ws0 + i * a.ws1) : 0.0f;
        bias[j] = in && a.bias != nullptr ? conv1d_detail::load_one(a.bias + d * a.bs) : 0.0f;
      }
      // hist[h][j]: time step t - H + h before the step's first t (zero before t = 0).
      float hist[H][VEC];
      using one = hk::rt_row<T, 1, CCOLS, VEC, ROW_THREADS>;
#pragma unroll
      for (int h = 0; h < H; ++h) {
        one ht;
        const int t = t_begin - H + h;
        hk::load(ht, gx, t < 0 ? t_end : t, c0);              // a row past gl's rows reads as zeros
#pragma unroll
        for (int j = 0; j < VEC; ++j) hist[h][j] = hk::to_float(hk::detail::elem<T>(ht.d[0][0], j));
      }
      // DIRECT: this thread's channels at time step t are at px + t xs2 (py + t ys2); whole steps
      // of whole channels take the pointer walk (see load_step / store_step).
      const int d0 = c0 + tile::col(0, 0);
      const bool cols_in = ok && d0 + VEC <= a.dim;
      const T* px = a.x + (b * a.xs0 + d0);
      T* py = a.y + (b * a.ys0 + d0);
      const int t_stop = ok ? t_end : 0;
      // PREFETCH: the next step's loads are issued before this step's arithmetic (past the
      // segment's end they read nothing).
      tile xt;
      if constexpr (PREFETCH) load_step(xt, gx, px, a.xs2, t_begin, c0, cols_in, t_stop);
      for (int t0 = t_begin; t0 < t_begin + a.seg_len; t0 += CHUNKS) {
        tile nxt, o;
        if constexpr (PREFETCH) load_step(nxt, gx, px, a.xs2, t0 + CHUNKS, c0, cols_in, t_stop);
        else load_step(xt, gx, px, a.xs2, t0, c0, cols_in, t_stop);
        ftile f;
        hk::convert(f, xt);
#pragma unroll
        for (int u = 0; u < CHUNKS; ++u) {
          float v[VEC];
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            float acc = bias[j];
#pragma unroll
            for (int i = 0; i < W; ++i) {
              const int q = u - H + i;                         // time offset from t0
              acc += w[i][j] * (q >= 0 ? f.get(q * VEC + j) : hist[q < 0 ? q + H : 0][j]);
            }
            v[j] = conv1d_detail::activate<SILU>(acc);
            if constexpr (!PAIRS) o.set(u * VEC + j, v[j]);
          }
          if constexpr (PAIRS) put_pairs(o, u, v);
        }
#pragma unroll
        for (int h = 0; h < H; ++h)
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const int q = CHUNKS - H + h;
            hist[h][j] = q >= 0 ? f.get(q * VEC + j) : hist[q < 0 ? q + H : 0][j];   // a later entry: not yet replaced
          }
        store_step(gy, o, py, a.ys2, t0, c0, cols_in, t_stop);
        if constexpr (PREFETCH) xt = nxt;
      }
    }
  }

  // With DIRECT on NVIDIA, 16-bit outputs are rounded in pairs (one cvt.rn.bf16x2 / f16x2 a pair:
  // the same rounding as one at a time, half the conversions and no merging of halves).
#if HK_CUDA
  static constexpr bool PAIRS = DIRECT && sizeof(T) == 2 && VEC % 2 == 0;
#else
  static constexpr bool PAIRS = false;
#endif
  HK_INLINE static void put_pairs(tile& o, int u, const float (&v)[VEC]) {
#if HK_CUDA
#pragma unroll
    for (int j = 0; j < VEC; j += 2) o.d[0][u].w[j / 2] = hk::pack2<T>(v[j], v[j + 1]);
#endif
  }

  // The CHUNKS time steps from t of this thread's channels: with DIRECT, where they and the
  // channels are whole (t + CHUNKS <= t_stop, cols_in), one VEC-element access a time step at p,
  // p + xs2, ...; otherwise the tile path (rows past t_stop read as zeros, columns past dim masked).
  HK_INLINE static void load_step(tile& xt, const hk::gl<T>& gx, const T* px, long long xs2, int t, int c0,
                                  bool cols_in, int t_stop) {
    if constexpr (DIRECT) {
      if (cols_in && t + CHUNKS <= t_stop) {
        const T* p = px + t * xs2;
#pragma unroll
        for (int u = 0; u < CHUNKS; ++u, p += xs2) xt.d[0][u] = hk::detail::ld_global<VEC * (int)sizeof(T)>(p);
        return;
      }
    }
    hk::load(xt, gx, t, c0);
  }
  HK_INLINE static void store_step(const hk::gl<T>& gy, const tile& o, T* py, long long ys2, int t, int c0,
                                   bool cols_in, int t_stop) {
    if constexpr (DIRECT) {
      if (cols_in && t + CHUNKS <= t_stop) {
        T* p = py + t * ys2;
#pragma unroll
        for (int u = 0; u < CHUNKS; ++u, p += ys2) hk::detail::st_global<VEC * (int)sizeof(T)>(p, o.d[0][u]);
        return;
      }
    }
    hk::store(gy, o, t, c0);
  }
};

template <class T, class TW, int W, bool SILU, int THREADS>
struct causal_conv1d_update {
  static constexpr int threads = THREADS;
  static constexpr int dynamic_smem = 0;
  struct args {
    const T* x;
    T* y;
    T* state;
    const TW* weight;
    const TW* bias;
    long long xs0, xs1, ys0, ys1, ss0, ss1, ss2, ws0, ws1, bs;
    int batch, dim, state_len;
  };
  static constexpr int H = W - 1;
  static_assert(W >= 2 && W <= 4, "kernel widths 2, 3, 4");
  static_assert(THREADS % 64 == 0 && THREADS <= 1024, "THREADS: a multiple of 64, at most 1024");
  static constexpr int B = (int)sizeof(T);

  __device__ static void run(const args& a) {
    const long long channels = (long long)a.batch * a.dim;
    for (long long i = (long long)hk::block_x() * THREADS + hk::thread_id(); i < channels;
         i += (long long)hk::grid_x() * THREADS) {
      const int b = (int)(i / a.dim), d = (int)(i % a.dim);
      T* st = a.state + (b * a.ss0 + d * a.ss1);
      const int S = a.state_len;
      // The window: the state's last H entries (bits kept for the shift) and x.
      hk::raw<B> win[W];
#pragma unroll
      for (int h = 0; h < H; ++h) win[h] = hk::detail::ld_global<B>(st + (S - H + h) * a.ss2);
      win[H] = hk::detail::ld_global<B>(a.x + (b * a.xs0 + d * a.xs1));
      float acc = a.bias != nullptr ? conv1d_detail::load_one(a.bias + d * a.bs) : 0.0f;
#pragma unroll
      for (int k = 0; k < W; ++k)
        acc += conv1d_detail::load_one(a.weight + d * a.ws0 + k * a.ws1) * hk::to_float(hk::detail::elem<T>(win[k], 0));
      // Shift the state left by one, oldest first (each entry is read before it is overwritten);
      // the entries of the window are already in registers.
      for (int j = 0; j < S - H; ++j)
        hk::detail::st_global<B>(st + j * a.ss2, hk::detail::ld_global<B>(st + (j + 1) * a.ss2));
#pragma unroll
      for (int h = 0; h < H; ++h) hk::detail::st_global<B>(st + (S - H + h) * a.ss2, win[h + 1]);
      hk::raw<B> out{};
      hk::detail::set_elem<T>(out, 0, hk::from_float<T>(conv1d_detail::activate<SILU>(acc)));
      hk::detail::st_global<B>(a.y + (b * a.ys0 + d * a.ys1), out);
    }
  }
};
