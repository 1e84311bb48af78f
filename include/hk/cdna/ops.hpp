#pragma once
// hk/cdna/ops.hpp: register-tile operations: zero, MFMA multiply-accumulate, element-wise maps,
// row/column reductions, conversions.
namespace hk {

// ---- zero / fill --------------------------------------------------------------------------
template <typename RT> HK_INLINE void zero(RT& x) {
  using V = __typeof__(x.t[0][0]);
  constexpr int N = sizeof(x.t) / sizeof(V);
  V* p = &x.t[0][0];
#pragma unroll
  for (int i = 0; i < N; ++i) p[i] = (V)0.0f;
}
template <typename T, int N, typename S> HK_INLINE void zero(rv<T, N, S>& x) {
#pragma unroll
  for (int i = 0; i < x.TN; ++i) x.t[i] = 0.0f;
}

// ---- MFMA ---------------------------------------------------------------------------------
// D = A * B + C with A: M x K, B: K x N (as stored in registers by the layout's name).
namespace detail {
template <typename D, typename A, typename B, typename C>
HK_INLINE void mma_loop(D& d, const A& a, const B& b, const C& c) {
  using S = typename D::shape;
  static_assert(same_t<typename A::shape, S>::value && same_t<typename B::shape, S>::value, "one MFMA shape per mma");
  static_assert(A::TK == B::TK, "A and B must agree on K");
  static_assert(D::TR == A::TMN && D::TC == B::TMN, "accumulator shape must be (A rows) x (B cols)");
#pragma unroll
  for (int k = 0; k < A::TK; ++k)
#pragma unroll
    for (int i = 0; i < D::TR; ++i)
#pragma unroll
      for (int j = 0; j < D::TC; ++j)
        d.t[i][j] = mfma<typename A::dtype, S>(a.t[i][k], b.t[j][k], k == 0 ? c.t[i][j] : d.t[i][j]);
}
}  // namespace detail
// A (M x K, row_l) * B (K x N, col_l)
template <typename T, int M, int N, int K, typename S>
HK_INLINE void mma_AB(rt<float, M, N, acc_l, S>& d, const rt<T, M, K, row_l, S>& a, const rt<T, K, N, col_l, S>& b,
                      const rt<float, M, N, acc_l, S>& c) { detail::mma_loop(d, a, b, c); }
// A (M x K, row_l) * B^T where B is given as N x K (row_l)
template <typename T, int M, int N, int K, typename S>
HK_INLINE void mma_ABt(rt<float, M, N, acc_l, S>& d, const rt<T, M, K, row_l, S>& a, const rt<T, N, K, row_l, S>& b,
                       const rt<float, M, N, acc_l, S>& c) { detail::mma_loop(d, a, b, c); }
// A^T where A is given as K x M (col_l) * B (K x N, col_l)
template <typename T, int M, int N, int K, typename S>
HK_INLINE void mma_AtB(rt<float, M, N, acc_l, S>& d, const rt<T, K, M, col_l, S>& a, const rt<T, K, N, col_l, S>& b,
                       const rt<float, M, N, acc_l, S>& c) { detail::mma_loop(d, a, b, c); }
// A^T (K x M, col_l) * B^T (N x K, row_l)
template <typename T, int M, int N, int K, typename S>
HK_INLINE void mma_AtBt(rt<float, M, N, acc_l, S>& d, const rt<T, K, M, col_l, S>& a, const rt<T, N, K, row_l, S>& b,
                        const rt<float, M, N, acc_l, S>& c) { detail::mma_loop(d, a, b, c); }

// ---- element-wise maps --------------------------------------------------------------------
namespace detail {
template <typename RT, typename F> HK_INLINE void map_inplace(RT& x, F f) {
  using V = __typeof__(x.t[0][0]);
  constexpr int N = sizeof(x.t) / sizeof(V);
  constexpr int L = sizeof(V) / sizeof(x.t[0][0][0]);
  V* p = &x.t[0][0];
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < L; ++j) p[i][j] = f(p[i][j]);
}
template <typename RT, typename F> HK_INLINE void zip_inplace(RT& x, const RT& y, F f) {
  using V = __typeof__(x.t[0][0]);
  constexpr int N = sizeof(x.t) / sizeof(V);
  V* p = &x.t[0][0];
  const V* q = &y.t[0][0];
#pragma unroll
  for (int i = 0; i < N; ++i) p[i] = f(p[i], q[i]);
}
}  // namespace detail
template <typename RT> HK_INLINE void add(RT& d, const RT& a, const RT& b) { d = a; detail::zip_inplace(d, b, [](auto x, auto y) { return x + y; }); }
template <typename RT> HK_INLINE void mul(RT& d, const RT& a, const RT& b) { d = a; detail::zip_inplace(d, b, [](auto x, auto y) { return x * y; }); }
template <typename RT> HK_INLINE void add(RT& d, const RT& a, float s) { d = a; detail::map_inplace(d, [s](auto x) { return (__typeof__(x))(to_float(x) + s); }); }
template <typename RT> HK_INLINE void mul(RT& d, const RT& a, float s) { d = a; detail::map_inplace(d, [s](auto x) { return (__typeof__(x))(to_float(x) * s); }); }
template <typename RT> HK_INLINE void exp2(RT& d, const RT& a) { d = a; detail::map_inplace(d, [](auto x) { return (__typeof__(x))__builtin_amdgcn_exp2f(to_float(x)); }); }

// Row-broadcast maps on accumulators: x[r][c] op= v[r].
template <typename T, int R, int C, typename S>
HK_INLINE void add_row(rt<T, R, C, acc_l, S>& d, const rv<float, R, S>& v) {
#pragma unroll
  for (int i = 0; i < d.TR; ++i)
#pragma unroll
    for (int j = 0; j < d.TC; ++j) d.t[i][j] += v.t[i];
}
template <typename T, int R, int C, typename S>
HK_INLINE void mul_row(rt<T, R, C, acc_l, S>& d, const rv<float, R, S>& v) {
#pragma unroll
  for (int i = 0; i < d.TR; ++i)
#pragma unroll
    for (int j = 0; j < d.TC; ++j) d.t[i][j] *= v.t[i];
}

// ---- reductions ---------------------------------------------------------------------------
// Row reductions of an accumulator tile: register v of row subtile i of the result holds the
// reduction of row acc_row(v, lane) (every lane of a row's MI-lane group gets the result).
namespace detail {
template <typename S, typename F> HK_INLINE float lane_reduce_row(float x, F f) {
#pragma unroll
  for (int m = 1; m < S::MI; m <<= 1) x = f(x, shfl_xor(x, m));
  return x;
}
}  // namespace detail
template <typename T, int R, int C, typename S, typename F>
HK_INLINE void row_reduce(rv<float, R, S>& out, const rt<T, R, C, acc_l, S>& x, F f) {
#pragma unroll
  for (int i = 0; i < x.TR; ++i) {
    vec<float, S::ACC> a = x.t[i][0];
#pragma unroll
    for (int j = 1; j < x.TC; ++j)
#pragma unroll
      for (int v = 0; v < S::ACC; ++v) a[v] = f(a[v], (float)x.t[i][j][v]);
#pragma unroll
    for (int v = 0; v < S::ACC; ++v) a[v] = detail::lane_reduce_row<S>(a[v], f);
    out.t[i] = a;
  }
}
template <typename T, int R, int C, typename S>
HK_INLINE void row_sum(rv<float, R, S>& out, const rt<T, R, C, acc_l, S>& x) {
  row_reduce(out, x, [](float a, float b) { return a + b; });
}
template <typename T, int R, int C, typename S>
HK_INLINE void row_max(rv<float, R, S>& out, const rt<T, R, C, acc_l, S>& x) {
  row_reduce(out, x, [](float a, float b) { return __builtin_fmaxf(a, b); });
}
// Column reductions: out lane l (for column subtile j) holds the reduction of column l % MI.
template <typename T, int R, int C, typename S, typename F>
HK_INLINE void col_reduce(float (&out)[C / S::MI], const rt<T, R, C, acc_l, S>& x, F f) {
#pragma unroll
  for (int j = 0; j < x.TC; ++j) {
    float a = x.t[0][j][0];
#pragma unroll
    for (int i = 0; i < x.TR; ++i)
#pragma unroll
      for (int v = (i == 0 ? 1 : 0); v < S::ACC; ++v) a = f(a, (float)x.t[i][j][v]);
#pragma unroll
    for (int m = S::MI; m < 64; m <<= 1) a = f(a, shfl_xor(a, m));
    out[j] = a;
  }
}
template <typename T, int R, int C, typename S>
HK_INLINE void col_sum(float (&out)[C / S::MI], const rt<T, R, C, acc_l, S>& x) {
  col_reduce(out, x, [](float a, float b) { return a + b; });
}
template <typename T, int R, int C, typename S>
HK_INLINE void col_max(float (&out)[C / S::MI], const rt<T, R, C, acc_l, S>& x) {
  col_reduce(out, x, [](float a, float b) { return __builtin_fmaxf(a, b); });
}

// ---- conversions --------------------------------------------------------------------------
// Element-wise conversion between tiles of the same shape/layout (bf16 rounds to nearest even).
template <typename TD, typename TS, int R, int C, typename L, typename S>
HK_INLINE void convert(rt<TD, R, C, L, S>& d, const rt<TS, R, C, L, S>& s) {
  using VS = __typeof__(s.t[0][0]);
  constexpr int N = sizeof(s.t) / sizeof(VS);
  constexpr int E = sizeof(VS) / sizeof(TS);
  const VS* p = &s.t[0][0];
  auto* q = &d.t[0][0];
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < E; ++j) q[i][j] = from_float<TD>(to_float(p[i][j]));
}

}  // namespace hk
