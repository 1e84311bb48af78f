#pragma once
// hk/common/activations.hpp: activation functions as types (a kernel takes one as a template
// parameter), fp32 in, fp32 out, written once for every target on the fast primitives of
// cdna/ or hopper/prims.hpp (exp2, reciprocal: one hardware instruction each).
//
//   act::silu        x * sigmoid(x)
//   act::gelu        0.5 x (1 + erf(x / sqrt 2))           (torch's gelu, approximate="none")
//   act::gelu_short  the same with a shorter erfc, for 16-bit outputs (fast_erf=1)
//   act::gelu_tanh   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (approximate="tanh")
//   act::relu        max(x, 0); NaN stays NaN (as torch.relu)
//   act::tanh        tanh(x)
//
// Accuracy (fp32, against float64): relative error a few 1e-7 near the fast primitives' own, except
// where the true result is below the fp32 normal range (flushed to 0). The sigmoid forms use
// 1 / (1 + 2^(-x log2 e)): 2^(...) overflows to inf for very negative x and the reciprocal gives 0,
// so silu(-100) = -0, not NaN.
#include "../hk.hpp"

namespace hk::act {

inline constexpr float LOG2E = 1.4426950408889634f;

HK_INLINE float abs_f(float x) { return __builtin_bit_cast(float, __builtin_bit_cast(u32, x) & 0x7FFFFFFFu); }
HK_INLINE float sigmoid(float x) { return fast_rcp(1.0f + fast_exp2(-LOG2E * x)); }

struct silu {
  HK_INLINE static float apply(float x) { return x * sigmoid(x); }
};

// p = c0 t^n + c1 t^(n-1) + ... + cn by Horner's rule, highest degree first.
template <class... C>
HK_INLINE float horner(float t, float c0, C... c) {
  float p = c0;
  ((p = p * t + c), ...);
  return p;
}

// erfc(a) for a >= 0 as t exp(-a^2 + P(t)), t = 1 / (1 + a / 2), P's coefficients highest degree first.
// gelu uses erfc directly: for x < 0, 1 + erf(x) = erfc(-x) keeps its relative accuracy where
// 1 + erf(x) would cancel; for x >= 0, 1 + erf(x) = 2 - erfc(x) lies in [1, 2].
template <class... C>
HK_INLINE float erfc_nonneg(float a, C... coefficients) {
  const float t = fast_rcp(1.0f + 0.5f * a);
  return t * fast_exp2(LOG2E * (horner(t, coefficients...) - a * a));
}

// 0.5 x (1 + erf(x / sqrt 2)) with ERFC::at(a) for erfc(a), a >= 0.
template <class ERFC>
struct gelu_by {
  HK_INLINE static float apply(float x) {
    const float e = ERFC::at(abs_f(x) * 0.70710678118654752f);
    return 0.5f * x * (x < 0.0f ? e : 2.0f - e);
  }
};

// The Chebyshev fit of Press et al., Numerical Recipes, 2nd ed., section 6.2 (fractional error below
// 1.2e-7 for every a >= 0).
struct erfc_nr {
  HK_INLINE static float at(float a) {
    return erfc_nonneg(a, 0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f,
                       0.09678418f, 0.37409196f, 1.00002368f, -1.26551223f);
  }
};

// For 16-bit outputs (the `fast_erf=1` override): a degree-5 P, 6 coefficients fitted here (iteratively
// reweighted least squares on [0, 9.5], the range where fp32 gelu does not underflow): |P - P_true| <=
// 7.8e-6, so relative error of erfc about 1e-5 before fp32 rounding (float32 model of this evaluation
// against float64 over x in [-12, 6]: 2.5e-5 at most, bf16 results differing from the correctly rounded
// value 0.07% of the time against the 10-coefficient form's 0.02%), four FFMA an element fewer. Far below
// a bf16 or fp16 output's rounding (2^-9, 2^-12); not for fp32.
struct erfc_short {
  HK_INLINE static float at(float a) {
    return erfc_nonneg(a, 0.22879221f, -0.70919078f, 0.47448449f, 0.25445404f, 1.01800871f, -1.26654104f);
  }
};

struct gelu : gelu_by<erfc_nr> {};
struct gelu_short : gelu_by<erfc_short> {};

// 1 + tanh(u) = 2 sigmoid(2 u): x sigmoid(2 u), no cancellation at either end.
struct gelu_tanh {
  HK_INLINE static float apply(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x * sigmoid(2.0f * u);
  }
};

struct relu {
  HK_INLINE static float apply(float x) { return x < 0.0f ? 0.0f : x; }
};

// |x| < 0.55: x + x^3 q(x^2), q a least-squares fit of (tanh(x) - x) / x^3 (relative error of tanh
// below 7e-8 there); beyond: (1 - e) / (1 + e) with e = exp(-2|x|) >= 1/3 away from 1, signed
// like x. tanh(+-inf) = +-1, NaN stays NaN.
struct tanh {
  HK_INLINE static float apply(float x) {
    const float a = abs_f(x);
    const float s = x * x;
    float q = -0.0063564959f;
    q = q * s + 0.0211272407f;
    q = q * s - 0.0538650788f;
    q = q * s + 0.133326992f;
    q = q * s - 0.333333194f;
    const float small = x + x * s * q;
    const float e = fast_exp2(-2.0f * LOG2E * a);
    const float big = (1.0f - e) * fast_rcp(1.0f + e);
    return a < 0.55f ? small : (x < 0.0f ? -big : big);
  }
};

}  // namespace hk::act
