#pragma once
// hk/cdna/ops.hpp: MFMA multiply-accumulate on register tiles. Element-wise maps, broadcasts,
// reductions and conversions are the portable ones of common/regs.hpp.
namespace hk {

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

}  // namespace hk
