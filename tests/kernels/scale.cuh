#pragma once
// A portable test kernel (platform.hpp only): y[i] = x[i] * S, S a compile-time constant.
#include "hk/common/platform.hpp"

template <int S, int THREADS>
struct scale_kernel {
  static constexpr int threads = THREADS;
  static constexpr int dynamic_smem = 0;
  struct args { const float* x; float* y; int n; };
  __device__ static void run(const args& a) {
#if HK_CUDA
    int i = blockIdx.x * THREADS + threadIdx.x;
#else
    int i = __builtin_amdgcn_workgroup_id_x() * THREADS + __builtin_amdgcn_workitem_id_x();
#endif
    if (i < a.n) a.y[i] = a.x[i] * float(S);
  }
};
