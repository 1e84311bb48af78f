// One small kernel per instruction (or family), all in one code object: each lane reads its
// operands from `in`, runs the instruction through inline assembly or a builtin, and writes the
// result; tests/sim/test_sim_instructions.py compares with NumPy on sim:gfx942 and sim:gfx950.
#include "hk/common/platform.hpp"
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
#define LANE (__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x())
#define WG __builtin_amdgcn_workgroup_id_x()

// vector ops with three 32-bit operands a, b, c per lane: out = op(a, b, c)
#define VOP(name, text)                                                                  \
  extern "C" __global__ void name(const u32* in, u32* out) {                             \
    int t = LANE;                                                                        \
    u32 a = in[3 * t], b = in[3 * t + 1], c = in[3 * t + 2], d;                          \
    asm volatile(text : "=v"(d) : "v"(a), "v"(b), "v"(c));                               \
    out[t] = d;                                                                          \
  }
// accumulating forms: out = op(a, b) + c, the destination being c's register
#define VACC(name, text)                                                                 \
  extern "C" __global__ void name(const u32* in, u32* out) {                             \
    int t = LANE;                                                                        \
    u32 a = in[3 * t], b = in[3 * t + 1], d = in[3 * t + 2];                             \
    asm volatile(text : "+v"(d) : "v"(a), "v"(b));                                       \
    out[t] = d;                                                                          \
  }
// scalar ops, one value per workgroup (uniform, so in SGPRs): out[wg] = op(in[wg])
#define SOP(name, T, TR, text)                                                           \
  extern "C" __global__ void name(const T* in, TR* out) {                                \
    T x = in[WG];                                                                        \
    TR r;                                                                                \
    asm volatile(text : "=s"(r) : "s"(x));                                               \
    if (__builtin_amdgcn_workitem_id_x() == 0) out[WG] = r;                              \
  }

VOP(fmamk, "v_fmamk_f32 %0, %1, 0x40490fdb, %2")          // a * pi + b
VOP(fmaak, "v_fmaak_f32 %0, %1, %2, 0xc0490fdb")          // a * b - pi
VOP(madmk_f16, "v_madmk_f16 %0, %1, 0x4248, %2")          // a * 3.140625 + b (f16, not fused)
VOP(madak_f16, "v_madak_f16 %0, %1, %2, 0x4248")
VOP(sad_u8, "v_sad_u8 %0, %1, %2, %3")
VOP(sad_hi_u8, "v_sad_hi_u8 %0, %1, %2, %3")
VOP(sad_u16, "v_sad_u16 %0, %1, %2, %3")
VOP(sad_u32, "v_sad_u32 %0, %1, %2, %3")
VOP(lerp_u8, "v_lerp_u8 %0, %1, %2, %3")
VOP(cvt_pk_u8_f32, "v_cvt_pk_u8_f32 %0, %1, %2, %3")
VOP(cvt_pknorm_i16_f16, "v_cvt_pknorm_i16_f16 %0, %1, %2")
VOP(cvt_norm_u16_f16, "v_cvt_norm_u16_f16 %0, %1")
VOP(cvt_off_f32_i4, "v_cvt_off_f32_i4 %0, %1")
VOP(sat_pk_u8_i16, "v_sat_pk_u8_i16 %0, %1")
VOP(add_i16, "v_add_i16 %0, %1, %2")
VOP(min3_i16, "v_min3_i16 %0, %1, %2, %3")
VOP(med3_u16, "v_med3_u16 %0, %1, %2, %3")
VOP(dot4_i32_i8, "v_dot4_i32_i8 %0, %1, %2, %3")
VOP(dot8_u32_u4, "v_dot8_u32_u4 %0, %1, %2, %3")
VOP(dot2_i32_i16, "v_dot2_i32_i16 %0, %1, %2, %3")
VACC(dot2c_f32_f16, "v_dot2c_f32_f16 %0, %1, %2")
VACC(dot4c_i32_i8, "v_dot4c_i32_i8 %0, %1, %2")
VACC(pk_fmac_f16, "v_pk_fmac_f16 %0, %1, %2")
#if HK_CDNA4
VOP(minimum3_f32, "v_minimum3_f32 %0, %1, %2, %3")
VOP(maximum3_f32, "v_maximum3_f32 %0, %1, %2, %3")
VOP(pk_minimum3_f16, "v_pk_minimum3_f16 %0, %1, %2, %3")
#endif

// v_pk_mov_b32: D.lo = src0's half op_sel[0], D.hi = src1's half op_sel[1] (op_sel_hi selects
// nothing); what clang emits to pair the odd and even floats of two registers.
extern "C" __global__ void pk_mov_b32(const u32* in, u32* out) {
  int t = LANE;
  u32x2 a = {in[4 * t], in[4 * t + 1]}, b = {in[4 * t + 2], in[4 * t + 3]}, d, e;
  asm volatile("v_pk_mov_b32 %0, %2, %3 op_sel:[1,0]\n v_pk_mov_b32 %1, %2, %3 op_sel:[0,1]"
               : "=&v"(d), "=&v"(e) : "v"(a), "v"(b));
  out[4 * t] = d.x; out[4 * t + 1] = d.y; out[4 * t + 2] = e.x; out[4 * t + 3] = e.y;
}

SOP(brev_b64, u64, u64, "s_brev_b64 %0, %1")
SOP(ff0_i32_b32, u32, u32, "s_ff0_i32_b32 %0, %1")
SOP(ff0_i32_b64, u64, u32, "s_ff0_i32_b64 %0, %1")
SOP(flbit_i32, u32, u32, "s_flbit_i32 %0, %1")
SOP(flbit_i32_i64, u64, u32, "s_flbit_i32_i64 %0, %1")
SOP(bcnt0_i32_b64, u64, u32, "s_bcnt0_i32_b64 %0, %1")
SOP(wqm_b32, u32, u32, "s_wqm_b32 %0, %1")
SOP(quadmask_b32, u32, u32, "s_quadmask_b32 %0, %1")
SOP(bitreplicate, u32, u64, "s_bitreplicate_b64_b32 %0, %1")
extern "C" __global__ void bitset1_b64(const u32* in, u64* out) {
  u32 x = in[WG];
  u64 r;
  asm volatile("s_mov_b64 %0, 0x10\n s_bitset1_b64 %0, %1" : "=&s"(r) : "s"(x));
  if (__builtin_amdgcn_workitem_id_x() == 0) out[WG] = r;
}

// s_movrels_b32 reads SGPR (operand + M0); s_andn1/andn2_wrexec_b64 write EXEC (restored after)
extern "C" __global__ void movrels(const u32* in, u32* out) {
  u32 x = in[2 * WG], y = in[2 * WG + 1], k = WG & 1, r;
  asm volatile("s_mov_b32 s20, %1\n s_mov_b32 s21, %2\n s_mov_b32 m0, %3\n s_movrels_b32 %0, s20"
               : "=s"(r) : "s"(x), "s"(y), "s"(k) : "s20", "s21", "m0");
  if (__builtin_amdgcn_workitem_id_x() == 0) out[WG] = r;
}
extern "C" __global__ void wrexec(const u64* in, u64* out) {
  u64 x = in[WG], r1, r2;
  asm volatile("s_mov_b64 s[20:21], exec\n s_andn1_wrexec_b64 %0, %2\n s_mov_b64 exec, s[20:21]\n"
               "s_andn2_wrexec_b64 %1, %2\n s_mov_b64 exec, s[20:21]"
               : "=&s"(r1), "=&s"(r2) : "s"(x) : "s20", "s21");
  if (__builtin_amdgcn_workitem_id_x() == 0) { out[2 * WG] = r1; out[2 * WG + 1] = r2; }
}

// LDS atomics (ds_*_rtn_*): every lane of the workgroup hits one of 4 words, so lanes collide
extern "C" __global__ void lds_atomics_all(const int* in, int* out, long long* out64) {
  __shared__ int s[8];
  __shared__ long long w[4];
  int t = __builtin_amdgcn_workitem_id_x(), v = in[t];
  if (t < 8) s[t] = t < 4 ? 0x0F0F0F0F : 0;
  if (t < 4) w[t] = 0;
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  int k = t & 3;
  int old = __hip_atomic_fetch_max(&s[4 + k], v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __hip_atomic_fetch_and(&s[k], ~(1 << (t & 31)), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __hip_atomic_fetch_add(&w[k], (long long)v << 20, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  out[t] = old <= s[4 + k] ? s[4 + k] : -1;        // every old value is at most the final maximum
  out[256 + t] = s[t & 7];
  if (t < 4) out64[t] = w[t];
}

// global atomics: a 32-bit and a 64-bit compare-and-swap loop, 64-bit add and exchange
extern "C" __global__ void global_atomics(const int* in, int* cnt, long long* acc, int* out) {
  int t = LANE, v = in[t];
  int cur = __hip_atomic_load(cnt, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  while (!__hip_atomic_compare_exchange_strong(cnt, &cur, cur + v, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                               __HIP_MEMORY_SCOPE_AGENT)) {
  }
  long long c64 = __hip_atomic_load(&acc[1], __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  while (!__hip_atomic_compare_exchange_strong(&acc[1], &c64, c64 > (long long)v ? c64 : (long long)v,
                                               __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)) {
  }
  __hip_atomic_fetch_add(&acc[0], (long long)v * 1000003, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  out[t] = __hip_atomic_exchange(&cnt[1 + (t & 1)], t, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}

// buffer atomics through a raw buffer resource, with lanes past num_records dropped
extern "C" __global__ void buffer_atomics(int* x, int* out, int nbytes) {
  __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc((void*)x, (short)0, nbytes, 0x00020000);
  int t = __builtin_amdgcn_workitem_id_x();
  out[t] = __builtin_amdgcn_raw_ptr_buffer_atomic_add_i32(t + 1, r, (t % 40) * 4, 0, 0);
}

// ds_read_b32 / ds_read_b64 with EXEC = 0 (as in a branch no lane of the wave takes, which compilers
// may still run through): nothing is read and the destinations keep their values
extern "C" __global__ void ds_read_no_lanes(const u32* in, u32* out) {
  __shared__ u32 s[128];
  const int t = __builtin_amdgcn_workitem_id_x();
  s[t] = in[t];
  s[64 + t] = in[64 + t];
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
  const u32 a = (u32)(unsigned long)(__attribute__((address_space(3))) u32*)(s + 2 * (t & 31));
  u32 r = in[128 + t];
  u32x2 r2 = {in[192 + t], ~in[192 + t]};
  asm volatile("s_mov_b64 s[20:21], exec\n s_mov_b64 exec, 0\n ds_read_b32 %0, %2\n ds_read_b64 %1, %2\n"
               " s_waitcnt lgkmcnt(0)\n s_mov_b64 exec, s[20:21]"
               : "+v"(r), "+v"(r2) : "v"(a) : "s20", "s21", "memory");
  out[t] = r;
  out[64 + t] = r2.x;
  out[128 + t] = r2.y;
}
