#pragma once
// hk/common/rt_row.hpp: the row tile, for memory-bound row-wise kernels (norms, softmax, rotary,
// activations), written once for every target on the primitives of cdna/ or hopper/prims.hpp.
//
// rt_row<T, R, C, V, G>: R rows of up to C columns, held by a *row group* of G threads (G
// consecutive threads of the block: a part of a warp/wave, one, or several). Every thread of the
// group holds all R rows, in chunks of V contiguous elements: chunk k of lane l (l = thread % G)
// covers columns (k G + l) V .. + V - 1, so for each k the group reads G V contiguous elements of
// a row with one V-element access per lane (16 bytes when V sizeof(T) = 16).
//
//   load(tile, gl, r0, c0[, fill])  rows r0.., columns c0.. of gl (columns must be contiguous);
//                                   elements outside gl get `fill` (default 0)
//   store(gl, tile, r0, c0)         the elements inside gl
//   load<true>, store<true>         the same when the tile's columns are known to lie inside gl
//                                   (only rows are tested)
//   col_vec<tile>                   a one-row fp32 row tile: loads row r of gl like the tile's
//                                   columns (a weight, a bias)
//   subtile_cols<CS>(tile, i)       columns [i CS, (i + 1) CS) as a CS-column tile, in place
//   convert, element-wise ops, row_/col_ broadcasts and reductions: common/regs.hpp
//
// Vector accesses: a chunk that lies wholly inside gl's columns is one access of V sizeof(T)
// bytes, which must be V sizeof(T)-aligned: the caller picks V so that gl's base pointer, its row
// stride and c0 allow it (V = 1 always does). A chunk that straddles the last column is read and
// written element by element.
//
// Row reductions combine the G threads of a group: with shuffles inside a warp (G <= warp), and
// then through shared memory when a group spans several warps (G > warp). In that case every
// thread of the block must reach the reduction together (it synchronises the block twice).
// Column reductions combine the R rows of the tile (one thread holds every row of its columns).
namespace hk {

namespace detail {
// v[s] reduced over the G threads of this thread's row group, for every s.
template <int G, int N, class Op> HK_INLINE void group_allreduce(float (&v)[N]) {
  constexpr int L = G < WARP_THREADS ? G : WARP_THREADS;
#pragma unroll
  for (int s = 0; s < N; ++s) v[s] = lane_allreduce<L, Op>(v[s]);
  if constexpr (G > WARP_THREADS) {
    constexpr int WG = G / WARP_THREADS;   // warps per group
    __shared__ float part[N][1024 / WARP_THREADS];
    const int w = warp_id(), w0 = w - w % WG;
    sync_threads();   // every thread has read the previous reduction's partials
    if (lane_id() == 0)
#pragma unroll
      for (int s = 0; s < N; ++s) part[s][w] = v[s];
    sync_threads();
#pragma unroll
    for (int s = 0; s < N; ++s) {
      float t = part[s][w0];
#pragma unroll
      for (int q = 1; q < WG; ++q) t = Op::apply(t, part[s][w0 + q]);
      v[s] = t;
    }
  }
}

template <class TD, class TS> HK_INLINE TD cast(TS x) {
  if constexpr (same_t<TD, TS>::value) return x;
  else return from_float<TD>(to_float(x));
}

// Element j of type T among the packed elements of r (16-bit ones two to a register).
template <class T, int B> HK_INLINE T elem(const raw<B>& r, int j) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
  if constexpr (sizeof(T) == 4) return __builtin_bit_cast(T, r.w[j]);
  else return __builtin_bit_cast(T, (u16)(r.w[j / 2] >> (16 * (j % 2))));
}
template <class T, int B> HK_INLINE void set_elem(raw<B>& r, int j, T v) {
  if constexpr (sizeof(T) == 4) {
    r.w[j] = __builtin_bit_cast(u32, v);
  } else {
    const int s = 16 * (j % 2);
    r.w[j / 2] = (r.w[j / 2] & ~(0xFFFFu << s)) | ((u32)__builtin_bit_cast(u16, v) << s);
  }
}
// The V elements of src as type TD.
template <class TD, class TS, int V> HK_INLINE raw<V * (int)sizeof(TD)> convert_chunk(const raw<V * (int)sizeof(TS)>& src) {
  if constexpr (same_t<TD, TS>::value) {
    return src;
  } else {
    raw<V * (int)sizeof(TD)> d{};
#pragma unroll
    for (int j = 0; j < V; ++j) set_elem<TD>(d, j, cast<TD>(elem<TS>(src, j)));
    return d;
  }
}

// The chunk at p, whose first element is column c of a row valid below column n, as V elements
// of TD; the elements outside get `fill`. FULL: the caller knows the chunk is wholly inside.
template <bool FULL, int V, class TD, class TM>
HK_INLINE raw<V * (int)sizeof(TD)> load_chunk(const TM* p, int c, int n, bool row_ok, float fill) {
  using U = remove_cv_t<TM>;
  constexpr int B = V * (int)sizeof(U);
  if (FULL || (row_ok && c + V <= n)) return convert_chunk<TD, U, V>(ld_global<B>(p));
  raw<V * (int)sizeof(TD)> d{};
#pragma unroll
  for (int j = 0; j < V; ++j) {
    TD v = from_float<TD>(fill);
    if (row_ok && c + j < n) v = cast<TD>(elem<U>(ld_global<(int)sizeof(U)>(p + j), 0));
    set_elem<TD>(d, j, v);
  }
  return d;
}

// The mirror of load_chunk: the elements of src below column n, converted to TM.
template <bool FULL, int V, class TM, class TS>
HK_INLINE void store_chunk(TM* p, int c, int n, const raw<V * (int)sizeof(TS)>& src) {
  const raw<V * (int)sizeof(TM)> m = convert_chunk<TM, TS, V>(src);
  if (FULL || c + V <= n) {
    st_global<V * (int)sizeof(TM)>(p, m);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (c + j < n) {
        raw<(int)sizeof(TM)> e{};
        set_elem<TM>(e, 0, elem<TM>(m, j));
        st_global<(int)sizeof(TM)>(p + j, e);
      }
  }
}
}  // namespace detail

template <class T, int R, int C, int V, int G>
struct rt_row {
  static_assert(R >= 1, "a row tile holds at least one row");
  static_assert(V >= 1 && V <= 16 && (V & (V - 1)) == 0, "chunks of 1, 2, 4, 8 or 16 elements");
  static_assert(G >= 1 && (G <= WARP_THREADS ? (G & (G - 1)) == 0 : G % WARP_THREADS == 0),
                "a row group is a power of two of lanes up to a warp, or whole warps");
  static_assert(C % (G * V) == 0, "the columns must be a whole number of chunks per thread (C = G V chunks)");
  using dtype = T;
  static constexpr int rows = R, cols = C, vec = V, group_threads = G;
  static constexpr int chunks = C / (G * V);   // chunks per thread and row
  raw<V * (int)sizeof(T)> d[chunks][R];        // chunk k of row r, elements packed as in memory

  // This thread's place in its row group, and the group's index in the block.
  HK_INLINE static int lane() { return thread_id() % G; }
  HK_INLINE static int group() { return thread_id() / G; }
  // Column (from the tile's first) of element j of this thread's chunk k.
  HK_INLINE static int col(int k, int j) { return (k * G + lane()) * V + j; }

  template <class U> using retype = rt_row<U, R, C, V, G>;
  // A row vector depends on the rows and the group only; a column vector is a one-row fp32 tile.
  using rvec = tile_vec<rt_row<float, R, G * V, V, G>, 0>;
  using cvec = rt_row<float, 1, C, V, G>;
  // Flat element view (common/regs.hpp): element i is element i % V of d[i / (R V)][(i / V) % R].
  static constexpr int n_elems = chunks * R * V;
  HK_INLINE float get(int i) const { return to_float(detail::elem<T>(d[i / (R * V)][(i / V) % R], i % V)); }
  HK_INLINE void set(int i, float x) { detail::set_elem<T>(d[i / (R * V)][(i / V) % R], i % V, from_float<T>(x)); }
  static constexpr int row_slots = R, col_slots = chunks * V;
  HK_HD static constexpr int row_slot(int i) { return (i / V) % R; }
  HK_HD static constexpr int col_slot(int i) { return (i / (R * V)) * V + i % V; }
  template <class Op> HK_INLINE static void finish_rows(float (&x)[row_slots]) { detail::group_allreduce<G, R, Op>(x); }
  template <class Op> HK_INLINE static void finish_cols(float (&)[col_slots]) {}
};

// Columns [i CS, (i + 1) CS) of x as a row tile of CS columns sharing x's registers (this
// thread's chunks [i CS / (G V), (i + 1) CS / (G V))): a half of each row (rotary embeddings), or
// a slice to work on while the rest of the row stays in registers.
template <int CS, class T, int R, int C, int V, int G>
HK_INLINE rt_row<T, R, CS, V, G>& subtile_cols(rt_row<T, R, C, V, G>& x, int i) {
  static_assert(C % CS == 0 && CS % (G * V) == 0, "a column slice is a whole number of chunks per thread");
  return *reinterpret_cast<rt_row<T, R, CS, V, G>*>(&x.d[i * (CS / (G * V))]);
}
template <int CS, class T, int R, int C, int V, int G>
HK_INLINE const rt_row<T, R, CS, V, G>& subtile_cols(const rt_row<T, R, C, V, G>& x, int i) {
  static_assert(C % CS == 0 && CS % (G * V) == 0, "a column slice is a whole number of chunks per thread");
  return *reinterpret_cast<const rt_row<T, R, CS, V, G>*>(&x.d[i * (CS / (G * V))]);
}

// A row whose chunks all lie inside gl (the common case) is read with one access per chunk and
// no per-chunk test. Chunk k of a thread is G V elements after its chunk k - 1: one address per
// row and thread, constant offsets for the chunks.
// FULL_COLS (load<true>, store<true>): the caller knows that columns c0 .. c0 + C - 1 lie inside
// gl (a row is exactly the tile's columns), so only the rows are tested: no column compare and
// no element-wise branch in the code.
template <bool FULL_COLS = false, class TM, class T, int R, int C, int V, int G>
HK_INLINE void load(rt_row<T, R, C, V, G>& x, const gl<TM>& g, int r0, int c0, float fill = 0.0f) {
  using X = rt_row<T, R, C, V, G>;
  const int c = c0 + X::lane() * V;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const bool ok = r0 + r < g.rows;
    const TM* p = &g(0, 0, ok ? r0 + r : 0, 0) + c;
    if constexpr (FULL_COLS) {
      if (ok) {
#pragma unroll
        for (int k = 0; k < X::chunks; ++k) x.d[k][r] = detail::load_chunk<true, V, T>(p + k * G * V, 0, 0, true, 0.0f);
      } else {
#pragma unroll
        for (int k = 0; k < X::chunks; ++k) x.d[k][r] = detail::load_chunk<false, V, T>(p, 0, 0, false, fill);
      }
    } else if (ok && c0 + C <= g.cols) {
#pragma unroll
      for (int k = 0; k < X::chunks; ++k) x.d[k][r] = detail::load_chunk<true, V, T>(p + k * G * V, 0, 0, true, 0.0f);
    } else {
#pragma unroll
      for (int k = 0; k < X::chunks; ++k)
        x.d[k][r] = detail::load_chunk<false, V, T>(p + k * G * V, c + k * G * V, g.cols, ok, fill);
    }
  }
}

template <bool FULL_COLS = false, class TM, class T, int R, int C, int V, int G>
HK_INLINE void store(const gl<TM>& g, const rt_row<T, R, C, V, G>& x, int r0, int c0) {
  using X = rt_row<T, R, C, V, G>;
  const int c = c0 + X::lane() * V;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= g.rows) continue;
    TM* p = &g(0, 0, r0 + r, 0) + c;
    if (FULL_COLS || c0 + C <= g.cols) {
#pragma unroll
      for (int k = 0; k < X::chunks; ++k) detail::store_chunk<true, V, TM, T>(p + k * G * V, 0, 0, x.d[k][r]);
    } else {
#pragma unroll
      for (int k = 0; k < X::chunks; ++k) detail::store_chunk<false, V, TM, T>(p + k * G * V, c + k * G * V, g.cols, x.d[k][r]);
    }
  }
}

}  // namespace hk
