// Kernels written the way code outside hkjit is written: clang's math builtins (an accurate logf
// is a v_fmamk/v_fmaak sequence), raw __builtin_amdgcn_* intrinsics, inline ds_* / buffer_*
// assembly with hand-placed s_waitcnt, DPP and ds_bpermute / ds_swizzle reductions, v_permlane
// swaps, partial waves. All in one code object; tests/sim/test_sim_outside.py runs them.
#include "hk/common/platform.hpp"
typedef unsigned int u32;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
#define LID __builtin_amdgcn_workitem_id_x()
#define GID (__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + LID)
#define LANE __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u))

// accurate single-precision math as clang lowers it (no device library)
extern "C" __global__ void math_fns(const float* x, float* o, int n) {
  int i = GID;
  if (i >= n) return;
  float v = x[i];
  o[5 * i + 0] = __builtin_logf(v);
  o[5 * i + 1] = __builtin_expf(v * 0.0625f);
  o[5 * i + 2] = __builtin_log2f(v) + __builtin_exp2f(-v * 0.125f);
  o[5 * i + 3] = __builtin_sqrtf(v);
  o[5 * i + 4] = 1.0f / v;
}

// the classic DPP wave sum (quad_perm, row_ror, row_bcast:15/31), read from lane 63
__device__ int dpp_wave_sum(int x) {
  x += __builtin_amdgcn_update_dpp(0, x, 0xB1, 0xF, 0xF, false);    // quad_perm [1,0,3,2]
  x += __builtin_amdgcn_update_dpp(0, x, 0x4E, 0xF, 0xF, false);    // quad_perm [2,3,0,1]
  x += __builtin_amdgcn_update_dpp(0, x, 0x124, 0xF, 0xF, false);   // row_ror:4
  x += __builtin_amdgcn_update_dpp(0, x, 0x128, 0xF, 0xF, false);   // row_ror:8
  x += __builtin_amdgcn_update_dpp(0, x, 0x142, 0xA, 0xF, false);   // row_bcast:15 into rows 1, 3
  x += __builtin_amdgcn_update_dpp(0, x, 0x143, 0xC, 0xF, false);   // row_bcast:31 into rows 2, 3
  return __builtin_amdgcn_readlane(x, 63);
}

// an inclusive prefix sum over the wave with row_shr and row_bcast (DPP scan)
__device__ int dpp_wave_scan(int x) {
  x += __builtin_amdgcn_update_dpp(0, x, 0x111, 0xF, 0xF, false);   // row_shr:1, 2, 4, 8 within rows
  x += __builtin_amdgcn_update_dpp(0, x, 0x112, 0xF, 0xF, false);
  x += __builtin_amdgcn_update_dpp(0, x, 0x114, 0xF, 0xF, false);
  x += __builtin_amdgcn_update_dpp(0, x, 0x118, 0xF, 0xF, false);
  x += __builtin_amdgcn_update_dpp(0, x, 0x142, 0xA, 0xF, false);
  x += __builtin_amdgcn_update_dpp(0, x, 0x143, 0xC, 0xF, false);
  return x;
}

// a butterfly max over the wave with ds_swizzle (within 32 lanes) and ds_bpermute (across halves)
__device__ float bpermute_wave_max(float v) {
  v = __builtin_fmaxf(v, __builtin_bit_cast(float, __builtin_amdgcn_ds_swizzle(__builtin_bit_cast(int, v), 0x041F)));  // xor 1
  v = __builtin_fmaxf(v, __builtin_bit_cast(float, __builtin_amdgcn_ds_swizzle(__builtin_bit_cast(int, v), 0x081F)));  // xor 2
  v = __builtin_fmaxf(v, __builtin_bit_cast(float, __builtin_amdgcn_ds_swizzle(__builtin_bit_cast(int, v), 0x101F)));  // xor 4
  v = __builtin_fmaxf(v, __builtin_bit_cast(float, __builtin_amdgcn_ds_swizzle(__builtin_bit_cast(int, v), 0x201F)));  // xor 8
  v = __builtin_fmaxf(v, __builtin_bit_cast(float, __builtin_amdgcn_ds_swizzle(__builtin_bit_cast(int, v), 0x401F)));  // xor 16
  int other = __builtin_amdgcn_ds_bpermute((int)((LANE ^ 32) * 4), __builtin_bit_cast(int, v));
  return __builtin_fmaxf(v, __builtin_bit_cast(float, other));
}

extern "C" __global__ void reductions(const int* x, const float* f, int* sums, int* scans, float* maxes) {
  int i = GID, w = i / 64;
  int s = dpp_wave_sum(x[i]);
  if (LANE == 0) sums[w] = s;
  scans[i] = dpp_wave_scan(x[i]);
  float m = bpermute_wave_max(f[i]);
  if (LANE == 5) maxes[w] = m;
}

// exchange halves of the wave: v_permlane32_swap / v_permlane16_swap on CDNA4, ds_bpermute on CDNA3
extern "C" __global__ void swap_halves(const u32* a, const u32* b, u32* o) {
  int i = GID;
  u32 x = a[i], y = b[i];
#if HK_CDNA4
  u32x2 r32 = __builtin_amdgcn_permlane32_swap(x, y, false, false);
  u32x2 r16 = __builtin_amdgcn_permlane16_swap(x, y, false, false);
#else
  // the same exchanges, by lane permutes: permlane32_swap swaps x's upper half with y's lower
  int l = LANE;
  u32 x32 = __builtin_amdgcn_ds_bpermute((l ^ 32) * 4, l < 32 ? y : x);
  u32x2 r32 = {l < 32 ? x : x32, l < 32 ? x32 : y};
  u32 x16 = __builtin_amdgcn_ds_bpermute((l ^ 16) * 4, (l & 16) ? x : y);
  u32x2 r16 = {(l & 16) ? x16 : x, (l & 16) ? y : x16};
#endif
  o[4 * i + 0] = r32.x;
  o[4 * i + 1] = r32.y;
  o[4 * i + 2] = r16.x;
  o[4 * i + 3] = r16.y;
}

// inline assembly with hand-placed waits: a buffer load of a tile row, an LDS transpose through
// ds_write_b32 / ds_read_b64, and s_barrier; 4 waves, 32x32 ints per workgroup
extern "C" __global__ void asm_tile_transpose(const int* x, int* o, int nbytes) {
  __shared__ int t[32 * 34];
  __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc((void*)x, (short)0, nbytes, 0x00020000);
  int tid = LID, row = tid / 8, col = tid % 8;                       // 256 threads: 32 rows of 8 lanes
  u32 base = __builtin_amdgcn_workgroup_id_x() * 4096u;
  u32 tl = (u32)(__UINTPTR_TYPE__)(__attribute__((address_space(3))) int*)t;   // LDS byte address
  for (int k = 0; k < 4; ++k) {
    int v;
    u32 off = base + (u32)(row * 32 + col + 8 * k) * 4;
    asm volatile("buffer_load_dword %0, %1, %2, 0 offen\n\ts_waitcnt vmcnt(0)" : "=v"(v) : "v"(off), "s"(r));
    u32 lds = (u32)((col + 8 * k) * 34 + row) * 4 + tl;
    asm volatile("ds_write_b32 %0, %1" :: "v"(lds), "v"(v) : "memory");
  }
  asm volatile("s_waitcnt lgkmcnt(0)\n\ts_barrier" ::: "memory");
  typedef int i32x2 __attribute__((ext_vector_type(2)));
  for (int k = 0; k < 2; ++k) {
    i32x2 d;
    u32 lds = (u32)(row * 34 + (col + 8 * k) * 2) * 4 + tl;
    asm volatile("ds_read_b64 %0, %1\n\ts_waitcnt lgkmcnt(0)" : "=v"(d) : "v"(lds) : "memory");
    int ob = __builtin_amdgcn_workgroup_id_x() * 1024 + row * 32 + (col + 8 * k) * 2;
    o[ob] = d.x;
    o[ob + 1] = d.y;
  }
}

// partial waves: the block is not a multiple of 64; lanes past it are off from the start
extern "C" __global__ void partial_waves(const int* x, int* o, int* blocksum) {
  __shared__ int total;
  int i = GID, l = LID;
  if (l == 0) total = 0;
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  unsigned long long act = __builtin_amdgcn_ballot_w64(true);       // lanes alive in this wave
  unsigned long long odd = __builtin_amdgcn_ballot_w64(x[i] & 1);
  o[3 * i + 0] = __builtin_popcountll(act);
  o[3 * i + 1] = __builtin_popcountll(odd & ((1ull << LANE) - 1));  // odd values in lower lanes
  o[3 * i + 2] = __builtin_amdgcn_readfirstlane(x[i]);
  __hip_atomic_fetch_add(&total, x[i], __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  if (l == 0) blocksum[__builtin_amdgcn_workgroup_id_x()] = total;
}
