// Kernels with planted bugs (and their correct twins) for the simulator's hazard checks.
#include "hk/common/platform.hpp"

// A load whose result is used without the s_waitcnt that covers it (inline asm: the compiler
// inserts no wait for it). WAIT=1 is the correct version.
extern "C" __global__ void missing_waitcnt(const int* x, int* o) {
  int tid = __builtin_amdgcn_workitem_id_x();
  int v;
#if WAIT
  asm volatile("global_load_dword %0, %1, off\n\ts_waitcnt vmcnt(0)\n\tv_add_u32 %0, %0, 1" : "=&v"(v) : "v"(x + tid) : "memory");
#else
  asm volatile("global_load_dword %0, %1, off\n\tv_add_u32 %0, %0, 1" : "=&v"(v) : "v"(x + tid) : "memory");
#endif
  o[tid] = v;
}

// Wave 0 writes LDS that wave 1 reads (and vice versa): needs a barrier in between.
extern "C" __global__ void missing_barrier(const int* x, int* o) {
  __shared__ int s[128];
  int tid = __builtin_amdgcn_workitem_id_x();
  s[tid] = x[tid] * 2;
#if BARRIER
  __builtin_amdgcn_s_barrier();
#endif
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  o[tid] = s[127 - tid];
}

// An off-by-one bound: the last thread stores one element past the end of the output.
extern "C" __global__ void oob_store(const float* x, float* o, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i <= n) o[i] = x[i < n ? i : 0] + 1.0f;
}

// Three different hazards in one launch: a missing s_waitcnt, an LDS race and an out-of-bounds
// store; the simulator reports all of them, each once with how often it happened.
extern "C" __global__ void three_hazards(const int* x, int* o, int n) {
  __shared__ int s[128];
  int tid = __builtin_amdgcn_workitem_id_x();
  int v;
  asm volatile("global_load_dword %0, %1, off\n\tv_add_u32 %0, %0, 1" : "=&v"(v) : "v"(x + tid) : "memory");
  s[tid] = v;
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  o[tid + (tid >= 64 ? n : 0)] = s[127 - tid];
}

// Waves write disjoint 16-bit halves of shared dwords: wave w writes half w of dword i. With
// RACE=1, wave 1 also writes the half wave 0 owns (a real race on those two bytes).
extern "C" __global__ void halves(const unsigned short* x, unsigned* o) {
  __shared__ unsigned short s[128];
  int tid = __builtin_amdgcn_workitem_id_x(), w = tid / 64, i = tid % 64;
  s[2 * i + w] = x[tid];
#if RACE
  if (w == 1 && i == 5) s[2 * i] = 7;
#endif
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  if (w == 0) o[i] = ((unsigned*)s)[i];
}

// Every iteration stores out of bounds: the launch stops once the hazard bound is reached.
extern "C" __global__ void oob_loop(int* o, int n, int iters) {
  int tid = __builtin_amdgcn_workitem_id_x();
  for (int k = 0; k < iters; ++k) o[n + tid + 64 * k] = k;
}

// A direct-to-LDS load read back before the s_waitcnt vmcnt that completes it (WAIT=1: with it).
extern "C" __global__ void dma_read_early(const int* x, int* o, int nbytes) {
  __shared__ int s[64];
  int tid = __builtin_amdgcn_workitem_id_x();
  __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc((void*)x, (short)0, nbytes, 0x00020000);
  __builtin_amdgcn_raw_ptr_buffer_load_lds(r, (__attribute__((address_space(3))) void*)s, 4, tid * 4, 0, 0, 0);
  unsigned lds = (unsigned)(__UINTPTR_TYPE__)(__attribute__((address_space(3))) int*)s + tid * 4;
  int v;
#if WAIT
  asm volatile("s_waitcnt vmcnt(0)\n\tds_read_b32 %0, %1\n\ts_waitcnt lgkmcnt(0)" : "=v"(v) : "v"(lds) : "memory");
#else
  asm volatile("ds_read_b32 %0, %1\n\ts_waitcnt lgkmcnt(0)" : "=v"(v) : "v"(lds) : "memory");
#endif
  o[tid] = v;
}
