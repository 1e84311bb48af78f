#pragma once
// hk/common/regs.hpp: element-wise math, row/column broadcasts and reductions, written once for
// every register tile of every target (rt_acc on Hopper and CDNA, rt_row from rt_row.hpp) on top
// of the target's primitives (cdna/prims.hpp, hopper/prims.hpp).
//
// A register object X (a tile or a vector) shows this thread's part as a flat list of elements:
//   X::n_elems                     how many this thread holds
//   x.get(i) -> float, x.set(i, f) element i, converted from/to the storage type
// A register tile also says which of its rows and columns this thread's element i lies in, as
// slots of its row and column vectors (the per-row / per-column values this thread holds):
//   X::row_slots, X::row_slot(i)   X::col_slots, X::col_slot(i)
//   X::retype<U>                   the same tile holding U
//   X::rvec, X::cvec               its row and column vector types (register objects of row_slots
//                                  / col_slots elements; tiles that lay out their rows or columns
//                                  alike share them: all dtypes of a tile, and for row tiles,
//                                  column slices and other row counts)
// and how a reduction finishes across the threads that share a row / column:
//   X::finish_rows<Op>(float (&)[row_slots]), X::finish_cols<Op>(float (&)[col_slots])
namespace hk {

// ---- reduction operators ------------------------------------------------------------------
struct op_sum {
  HK_INLINE static float identity() { return 0.0f; }
  HK_INLINE static float apply(float a, float b) { return a + b; }
};
struct op_max {
  HK_INLINE static float identity() { return neg_inf(); }
  HK_INLINE static float apply(float a, float b) { return fmax_f(a, b); }
};

// ---- vectors ------------------------------------------------------------------------------
// An fp32 vector laid out like the rows (AXIS 0) or the columns (AXIS 1) of tile KEY in its
// owning threads: data[s] is the value of the row / column in slot s of this thread. (A row
// tile's column vector is itself a one-row fp32 row tile, so it loads and converts like one.)
template <class KEY, int AXIS> struct tile_vec {
  static constexpr int n_elems = AXIS == 0 ? KEY::row_slots : KEY::col_slots;
  float data[n_elems];
  HK_INLINE float get(int i) const { return data[i]; }
  HK_INLINE void set(int i, float v) { data[i] = v; }
};
// The per-row / per-column fp32 vectors of tile RT: produced by the row/col reductions, consumed
// by the broadcasts; element s is the row / column in slot s of this thread.
template <class RT> using row_vec = typename RT::rvec;
template <class RT> using col_vec = typename RT::cvec;

template <class X> concept reg_data = requires(X& x, const X& c) {
  X::n_elems;
  { c.get(0) } -> same_as_c<float>;
  x.set(0, 0.0f);
};
template <class X> concept reg_tile = reg_data<X> && requires {
  typename X::rvec;
  typename X::cvec;
  X::row_slots;
  X::col_slots;
  X::row_slot(0);
  X::col_slot(0);
};

namespace detail {
template <class X, class A, class B, class F> HK_INLINE void zip(X& d, const A& a, const B& b, F f) {
#pragma unroll
  for (int i = 0; i < X::n_elems; ++i) d.set(i, f(a.get(i), b.get(i)));
}
template <class X, class A, class F> HK_INLINE void map(X& d, const A& a, F f) {
#pragma unroll
  for (int i = 0; i < X::n_elems; ++i) d.set(i, f(a.get(i)));
}
}  // namespace detail

// ---- fill, element-wise -------------------------------------------------------------------
template <reg_data X> HK_INLINE void fill(X& d, float s) {
#pragma unroll
  for (int i = 0; i < X::n_elems; ++i) d.set(i, s);
}
template <reg_data X> HK_INLINE void zero(X& d) { fill(d, 0.0f); }

#define HK_BINARY(name, expr)                                                                          \
  template <reg_data X> HK_INLINE void name(X& d, const X& a, const X& b) {                          \
    detail::zip(d, a, b, [](float x, float y) { return expr; });                                      \
  }                                                                                                    \
  template <reg_data X> HK_INLINE void name(X& d, const X& a, float s) {                             \
    detail::map(d, a, [s](float x) { const float y = s; return expr; });                             \
  }
HK_BINARY(add, x + y)
HK_BINARY(sub, x - y)
HK_BINARY(mul, x * y)
HK_BINARY(div, x / y)
HK_BINARY(max, fmax_f(x, y))
#undef HK_BINARY

// x * x rounded on its own (prims.hpp's mul_rn): a sum of squares then rounds the same in every
// schedule of a kernel, whether or not the compiler could fuse the product into the sum.
template <reg_data X> HK_INLINE void square(X& d, const X& a) { detail::map(d, a, [](float x) { return mul_rn(x, x); }); }

// Fast hardware forms (one instruction per element; see prims.hpp for their accuracy).
template <reg_data X> HK_INLINE void exp2(X& d, const X& a) { detail::map(d, a, [](float x) { return fast_exp2(x); }); }
template <reg_data X> HK_INLINE void log2(X& d, const X& a) { detail::map(d, a, [](float x) { return fast_log2(x); }); }
template <reg_data X> HK_INLINE void rsqrt(X& d, const X& a) { detail::map(d, a, [](float x) { return fast_rsqrt(x); }); }

// Between tiles of one shape and layout holding different types (fp32 <-> bf16 / fp16: round to
// nearest even).
template <reg_data D, reg_data S>
  requires same_as_c<typename D::template retype<float>, typename S::template retype<float>>
HK_INLINE void convert(D& d, const S& s) {
  detail::map(d, s, [](float x) { return x; });
}

// ---- broadcasts of a vector over the rows / columns: d[r][c] = a[r][c] op v[r] (or v[c]) -----
// div_row / div_col multiply by the reciprocal of each vector element (one division per slot).
#define HK_BROADCAST(name, vec, slot, expr)                                                            \
  template <reg_tile X> HK_INLINE void name(X& d, const X& a, const vec<X>& v) {                      \
    _Pragma("unroll") for (int i = 0; i < X::n_elems; ++i) {                                          \
      const float x = a.get(i), y = v.get(X::slot(i));                                                \
      d.set(i, expr);                                                                                  \
    }                                                                                                  \
  }
HK_BROADCAST(add_row, row_vec, row_slot, x + y)
HK_BROADCAST(sub_row, row_vec, row_slot, x - y)
HK_BROADCAST(mul_row, row_vec, row_slot, x * y)
HK_BROADCAST(add_col, col_vec, col_slot, x + y)
HK_BROADCAST(sub_col, col_vec, col_slot, x - y)
HK_BROADCAST(mul_col, col_vec, col_slot, x * y)
#undef HK_BROADCAST
template <reg_tile X> HK_INLINE void div_row(X& d, const X& a, const row_vec<X>& v) {
  row_vec<X> r;
  detail::map(r, v, [](float x) { return 1.0f / x; });
  mul_row(d, a, r);
}
template <reg_tile X> HK_INLINE void div_col(X& d, const X& a, const col_vec<X>& v) {
  col_vec<X> r;
  detail::map(r, v, [](float x) { return 1.0f / x; });
  mul_col(d, a, r);
}

// ---- reductions ---------------------------------------------------------------------------
// Every thread that holds part of a row (column) gets the reduction of the whole row (column)
// in that row's (column's) slot. This thread's elements first, then the tile kind's finish.
namespace detail {
template <class Op, int N, class X, class SLOT> HK_INLINE void local_reduce(float (&acc)[N], const X& x, SLOT slot) {
#pragma unroll
  for (int s = 0; s < N; ++s) acc[s] = Op::identity();
#pragma unroll
  for (int i = 0; i < X::n_elems; ++i) acc[slot(i)] = Op::apply(acc[slot(i)], x.get(i));
}
}  // namespace detail
template <class Op, reg_tile X> HK_INLINE void row_reduce(row_vec<X>& out, const X& x) {
  static_assert(row_vec<X>::n_elems == X::row_slots, "a row vector holds one value per row slot");
  float acc[X::row_slots];
  detail::local_reduce<Op>(acc, x, [](int i) { return X::row_slot(i); });
  X::template finish_rows<Op>(acc);
#pragma unroll
  for (int s = 0; s < X::row_slots; ++s) out.set(s, acc[s]);
}
template <class Op, reg_tile X> HK_INLINE void col_reduce(col_vec<X>& out, const X& x) {
  static_assert(col_vec<X>::n_elems == X::col_slots, "a column vector holds one value per column slot");
  float acc[X::col_slots];
  detail::local_reduce<Op>(acc, x, [](int i) { return X::col_slot(i); });
  X::template finish_cols<Op>(acc);
#pragma unroll
  for (int s = 0; s < X::col_slots; ++s) out.set(s, acc[s]);
}
template <reg_tile X> HK_INLINE void row_sum(row_vec<X>& out, const X& x) { row_reduce<op_sum>(out, x); }
template <reg_tile X> HK_INLINE void row_max(row_vec<X>& out, const X& x) { row_reduce<op_max>(out, x); }
template <reg_tile X> HK_INLINE void col_sum(col_vec<X>& out, const X& x) { col_reduce<op_sum>(out, x); }
template <reg_tile X> HK_INLINE void col_max(col_vec<X>& out, const X& x) { col_reduce<op_max>(out, x); }

}  // namespace hk
