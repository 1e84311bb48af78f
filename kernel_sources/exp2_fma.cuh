#pragma once
// exp2_fma.cuh: 2^x on the FMA pipe, for the softmax's arguments x <= 0 (scores minus the row max,
// log2 units), without the MUFU unit. The sm_90a attention forward's exp_fma override sends a share
// of its exponentials here so that MUFU.EX2 (16 a clock per SM) and the FP32 pipe (128 a clock)
// carry them together (FlashAttention-4 does the same). Plain C++ as well as CUDA: the test suite
// compiles this very header on the host (tests/test_exp2_fma.py) and checks every result's error.
//
//   x  = max(x, -127)                clamped: -inf (masked keys) and anything below lands on -127
//   t  = x + 1.5 * 2^23              rounded to an integer: t's low mantissa bits hold j = round(x)
//   f  = x - (t - 1.5 * 2^23)        x - j in [-0.5, 0.5], exact (x and j are within 1 of each other)
//   p  = 1 + f (c1 + f (c2 + ...))   2^f on [-0.5, 0.5], a minimax polynomial of relative error,
//                                    its constant term exactly 1 (Horner: DEGREE FFMA)
//   2^x = bits(p) + (bits(t) << 23)  j added to p's exponent field (t's high bits shift out)
//
// At x = -127 exactly: j = -127, f = 0, p = 1 = 127 << 23, so the bits are 0: 2^x = +0, as MUFU's
// ftz form gives below -126 (a row with no key yet, every score -inf, sums to exactly 0). Between
// -127 and -126.5 the bits are a denormal below 2^-126: at most 2^-126 off, as MUFU's flush to zero.
// Relative error against exp2 (every float32 in [-126, 0], test_exp2_fma.py): DEGREE 3 1.0e-4, for
// bf16 P (a bf16 rounding is up to 2^-9 = 2.0e-3); DEGREE 4 2.9e-6, for fp16 P (2^-12 = 2.4e-4).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define HKJIT_EXP2_FN __host__ __device__ __forceinline__
#else
#include <cmath>
#include <cstring>
#define HKJIT_EXP2_FN inline
#endif

namespace hkjit_exp2 {

HKJIT_EXP2_FN unsigned float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  unsigned u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}
HKJIT_EXP2_FN float bits_float(unsigned u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Minimax coefficients c1..cDEGREE of 2^f - 1 over f in [-0.5, 0.5], relative error, rounded to
// float32 (fitted by linear programming on 20001 points; test_exp2_fma.py checks the float32 result).
template <int DEGREE> struct poly;
template <> struct poly<3> {
  static HKJIT_EXP2_FN float eval(float f) {
    return fmaf(fmaf(fmaf(0.05500892922282219f, f, 0.24221095442771912f), f, 0.6932829022407532f), f, 1.0f);
  }
};
template <> struct poly<4> {
  static HKJIT_EXP2_FN float eval(float f) {
    return fmaf(fmaf(fmaf(fmaf(0.009583231061697006f, f, 0.05590638518333435f), f, 0.2402409017086029f), f,
                     0.6931242346763611f), f, 1.0f);
  }
};

template <int DEGREE>
HKJIT_EXP2_FN float exp2_fma(float x) {
  const float round_magic = 12582912.0f;            // 1.5 * 2^23: x + it rounds x to an integer
  x = fmaxf(x, -127.0f);
  const float t = x + round_magic;
  const float f = x - (t - round_magic);
  return bits_float(float_bits(poly<DEGREE>::eval(f)) + (float_bits(t) << 23));
}

}  // namespace hkjit_exp2
