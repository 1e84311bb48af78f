// Small kernels that exercise one instruction family each; tests/sim/test_sim_isa.py compares
// their results with NumPy on sim:gfx942 and sim:gfx950.
#include "hk/common/platform.hpp"
typedef unsigned int u32;
typedef unsigned short u16;
#define TID (__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x())

// integer and float ALU, conversions (RNE), lane-divergent control flow and a loop
extern "C" __global__ void alu(const float* x, const int* y, float* fo, int* io, u16* ho, int n) {
  int i = TID;
  if (i >= n) return;
  float a = x[i];
  int b = y[i];
  fo[8 * i + 0] = __builtin_fmaf(a, 3.0f, -1.5f);
  fo[8 * i + 1] = a / (float)(b | 1);                 // v_div_scale / v_rcp / v_div_fmas / v_div_fixup
  fo[8 * i + 2] = __builtin_sqrtf(__builtin_fabsf(a));
  fo[8 * i + 3] = __builtin_amdgcn_exp2f(a);
  fo[8 * i + 4] = (float)b * 0.25f;
  fo[8 * i + 5] = __builtin_fminf(a, (float)b) + __builtin_fmaxf(a, 1.0f);
  fo[8 * i + 6] = (float)(_Float16)a;                  // f32 -> f16 (RNE) -> f32
  float acc = 0.0f;
  for (int k = 0; k < (b & 7); ++k) acc += a * (float)k;   // per-lane trip counts
  fo[8 * i + 7] = acc;
  io[4 * i + 0] = (b * 7 + 3) ^ (b >> 2);
  io[4 * i + 1] = (int)((unsigned)b >> 3) + (b << 5);
  io[4 * i + 2] = b > 100 ? b / 3 : b % 5;            // divergent, integer division sequences
  io[4 * i + 3] = (int)a;                              // f32 -> i32 (truncate)
  __bf16 h = (__bf16)a;                                // f32 -> bf16 (RNE)
  ho[i] = __builtin_bit_cast(u16, h);
}

// 64-bit integer and double arithmetic
extern "C" __global__ void wide(const long long* x, const double* d, long long* xo, double* dout, int n) {
  int i = TID;
  if (i >= n) return;
  long long v = x[i];
  xo[2 * i] = v * 3 + (v >> 7);
  xo[2 * i + 1] = (long long)((unsigned long long)v >> 11) ^ (v << 3);
  dout[i] = __builtin_fma(d[i], 1.5, -0.25);
}

// DPP with the destination aliasing the source: x + (value of lane - 1 within the row)
extern "C" __global__ void dpp_alias(const float* x, float* o) {
  int i = TID;
  float v = x[i];
  asm volatile("v_add_f32_dpp %0, %0, %0 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1" : "+v"(v));
  o[i] = v;
}

// DPP via the builtins (quad_perm, row_shr, row_ror, row_mirror) and a wave reduction
extern "C" __global__ void dpp_ops(const int* x, int* o) {
  int i = TID;
  int v = x[i];
  o[8 * i + 0] = __builtin_amdgcn_mov_dpp(v, 0x1B, 0xF, 0xF, false);   // quad_perm [3,2,1,0]
  o[8 * i + 1] = __builtin_amdgcn_update_dpp(-1, v, 0x112, 0xF, 0xF, false);  // row_shr:2, keep old (-1)
  o[8 * i + 2] = __builtin_amdgcn_mov_dpp(v, 0x124, 0xF, 0xF, false);  // row_ror:4
  o[8 * i + 3] = __builtin_amdgcn_mov_dpp(v, 0x140, 0xF, 0xF, false);  // row_mirror
  o[8 * i + 4] = __builtin_amdgcn_ds_bpermute((63 - (int)(i & 63)) * 4, v);
  o[8 * i + 5] = __builtin_amdgcn_readfirstlane(v + 1);
  o[8 * i + 6] = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  int s = v;
  for (int k = 32; k >= 1; k /= 2) s += __builtin_amdgcn_ds_bpermute((int)((i & 63) ^ k) * 4, s);
  o[8 * i + 7] = s;
}

// SDWA: take the high 16 bits of x and write them into the high half, low half kept
extern "C" __global__ void sdwa(const u32* x, const u32* y, u32* o) {
  int i = TID;
  u32 d = y[i];
  asm volatile("v_mov_b32_sdwa %0, %1 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:WORD_1" : "+v"(d) : "v"(x[i]));
  o[i] = d;
}

// SDWA with an SGPR second operand (the S1 bit): compare the low word of x with s, add s to y's high word
extern "C" __global__ void sdwa_sgpr(const u32* x, const u32* y, u32 s, u32* o) {
  int i = TID;
  u32 lt, sum;
  asm volatile("v_cmp_lt_u32_sdwa vcc, %1, %2 src0_sel:WORD_0 src1_sel:DWORD\n\t"
               "v_cndmask_b32 %0, 0, 1, vcc" : "=v"(lt) : "v"(x[i]), "s"(s) : "vcc");
  asm volatile("v_add_u32_sdwa %0, %1, %2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD"
               : "=v"(sum) : "v"(y[i]), "s"(s));
  o[2 * i] = lt;
  o[2 * i + 1] = sum;
}

// packed math: v_pk_fma_f32 / v_pk_mul_f32 (gfx90a+) and half2 ops
typedef float f32x2 __attribute__((ext_vector_type(2)));
typedef _Float16 f16x2 __attribute__((ext_vector_type(2)));
extern "C" __global__ void packed(const f32x2* a, const f32x2* b, const f16x2* h, f32x2* o, f16x2* ho) {
  int i = TID;
  o[2 * i] = a[i] * b[i] + a[i];
  o[2 * i + 1] = a[i] * b[i];
  ho[i] = h[i] * h[i] + (f16x2){1.0f16, -2.0f16};
}

// shared memory through LDS with barriers: block-wide transpose of 32x32 floats
extern "C" __global__ void lds_transpose(const float* x, float* o) {
  __shared__ float t[32][33];
  int tid = __builtin_amdgcn_workitem_id_x();
  int r = tid / 32, c = tid % 32;
  const float* blk = x + __builtin_amdgcn_workgroup_id_x() * 1024;
  for (int k = 0; k < 32; k += 8) t[r + k][c] = blk[(r + k) * 32 + c];
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  for (int k = 0; k < 32; k += 8) o[__builtin_amdgcn_workgroup_id_x() * 1024 + (r + k) * 32 + c] = t[c][r + k];
}

// LDS atomics and 64/128-bit LDS accesses
extern "C" __global__ void lds_atomics(const int* x, int* o) {
  __shared__ int sum[4];
  __shared__ long long wide[256];
  int tid = __builtin_amdgcn_workitem_id_x();
  if (tid < 4) sum[tid] = 0;
  wide[tid] = (long long)x[tid] << 20;
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  __hip_atomic_fetch_add(&sum[tid & 3], x[tid], __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  o[tid] = (int)(wide[255 - tid] >> 20) + sum[tid & 3];
}

// buffer loads whose lanes past num_records read 0, and direct-to-LDS buffer loads
extern "C" __global__ void buffer_oob(const int* x, int* o, int nbytes) {
  int tid = __builtin_amdgcn_workitem_id_x();
  __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc((void*)x, (short)0, nbytes, 0x00020000);
  o[tid] = __builtin_amdgcn_raw_buffer_load_b32(r, tid * 4, 0, 0);
}
extern "C" __global__ void buffer_lds(const int* x, int* o, int nbytes) {
  __shared__ int s[64];
  int tid = __builtin_amdgcn_workitem_id_x();
  __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc((void*)x, (short)0, nbytes, 0x00020000);
  __builtin_amdgcn_raw_ptr_buffer_load_lds(r, (__attribute__((address_space(3))) void*)s, 4, tid * 4, 0, 0, 0);
  __builtin_amdgcn_s_waitcnt(0x0F70);   // vmcnt(0)
  __builtin_amdgcn_s_barrier();
  o[tid] = s[63 - tid];
}

// fp8 conversions: FNUZ on gfx942, OCP on gfx950
extern "C" __global__ void fp8_cvt(const float* x, u32* packed, float* back) {
  int i = TID;
  int p = __builtin_amdgcn_cvt_pk_fp8_f32(x[2 * i], x[2 * i + 1], 0, false);
  packed[i] = (u32)p;
  back[2 * i] = __builtin_amdgcn_cvt_f32_fp8(p, 0);
  back[2 * i + 1] = __builtin_amdgcn_cvt_f32_fp8(p, 1);
}

#if HK_CDNA4
// ds_read_b64_tr_b16: each lane gets one column of a 4x16 block of 16-bit elements
typedef short i16x4 __attribute__((ext_vector_type(4)));
extern "C" __global__ void ds_tr16(const u16* x, u16* o) {
  __shared__ u16 s[64 * 4];
  int tid = __builtin_amdgcn_workitem_id_x();
  for (int k = 0; k < 4; ++k) s[tid * 4 + k] = x[tid * 4 + k];
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  i16x4 v = __builtin_amdgcn_ds_read_tr16_b64_v4i16((__attribute__((address_space(3))) i16x4*)(s + tid * 4));
  for (int k = 0; k < 4; ++k) o[tid * 4 + k] = (u16)v[k];
}
#endif

// an instruction the simulator does not implement
extern "C" __global__ void unknown_inst(float* o) {
  float v = o[0];
  asm volatile("v_cubeid_f32 %0, %0, %0, %0" : "+v"(v));
  o[0] = v;
}
