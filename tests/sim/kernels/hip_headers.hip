// A kernel written against HIP's own headers (hip/hip_runtime.h): threadIdx / blockIdx,
// __syncthreads, __shared__, __shfl_xor, atomicAdd and the device library's logf / expf.
#include <hip/hip_runtime.h>

extern "C" __global__ void softplus_rows(const float* x, float* y, float* row_sums, int cols) {
  __shared__ float partial[4];
  int row = blockIdx.x, t = threadIdx.x;
  float s = 0.0f;
  for (int c = t; c < cols; c += blockDim.x) {
    float v = x[row * cols + c];
    float sp = v > 15.0f ? v : logf(1.0f + expf(v));
    y[row * cols + c] = sp;
    s += sp;
  }
  for (int k = 32; k >= 1; k /= 2) s += __shfl_xor(s, k);
  if (t % 64 == 0) partial[t / 64] = s;
  __syncthreads();
  if (t == 0) {
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x + 63) / 64; ++w) total += partial[w];
    atomicAdd(&row_sums[row % 2], total);
  }
}
