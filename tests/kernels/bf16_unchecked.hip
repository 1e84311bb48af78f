#pragma once
// A CDNA test kernel: y[i] = the bf16 bits of hk::from_float_unchecked<bf16>(x[i]) and, beside them,
// of hk::from_float<bf16>(x[i]) (clang's NaN-safe conversion), one element a lane.
#include "hk/hk.hpp"

template <int THREADS>
struct bf16_unchecked {
  static constexpr int threads = THREADS;
  static constexpr int dynamic_smem = 0;
  struct args { const float* x; unsigned short* fast; unsigned short* safe; int n; };
  __device__ static void run(const args& a) {
    const int i = hk::block_id_x() * THREADS + hk::thread_id();
    if (i >= a.n) return;
    a.fast[i] = __builtin_bit_cast(unsigned short, hk::from_float_unchecked<hk::bf16>(a.x[i]));
    a.safe[i] = __builtin_bit_cast(unsigned short, hk::from_float<hk::bf16>(a.x[i]));
  }
};
