// One kernel per MFMA shape: each lane loads its raw A, B and C registers from memory, runs one
// MFMA, and stores its raw D registers. Python builds the registers from the documented layout.
#include "hk/common/platform.hpp"
typedef __bf16 bf16x4 __attribute__((ext_vector_type(4)));
typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 f16x8 __attribute__((ext_vector_type(8)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef int i32x8 __attribute__((ext_vector_type(8)));

#define MFMA_KERNEL(NAME, AT, CT, CALL)                                                     \
  extern "C" __global__ void NAME(const AT* a, const AT* b, const CT* c, CT* d) {          \
    int l = __builtin_amdgcn_workitem_id_x();                                               \
    AT va = a[l], vb = b[l];                                                                \
    CT vc = c[l];                                                                           \
    d[l] = CALL;                                                                            \
  }

MFMA_KERNEL(mfma_bf16_16x16x16, bf16x4, f32x4, __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_bf16_32x32x8, bf16x4, f32x16, __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_f16_16x16x16, f16x4, f32x4, __builtin_amdgcn_mfma_f32_16x16x16f16(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_f16_32x32x8, f16x4, f32x16, __builtin_amdgcn_mfma_f32_32x32x8f16(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_fp8_fp8_16x16x32, long, f32x4, __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_fp8_bf8_16x16x32, long, f32x4, __builtin_amdgcn_mfma_f32_16x16x32_fp8_bf8(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_bf8_fp8_16x16x32, long, f32x4, __builtin_amdgcn_mfma_f32_16x16x32_bf8_fp8(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_bf8_bf8_16x16x32, long, f32x4, __builtin_amdgcn_mfma_f32_16x16x32_bf8_bf8(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_fp8_fp8_32x32x16, long, f32x16, __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_bf8_bf8_32x32x16, long, f32x16, __builtin_amdgcn_mfma_f32_32x32x16_bf8_bf8(va, vb, vc, 0, 0, 0))
#if HK_CDNA4
MFMA_KERNEL(mfma_bf16_16x16x32, bf16x8, f32x4, __builtin_amdgcn_mfma_f32_16x16x32_bf16(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_bf16_32x32x16, bf16x8, f32x16, __builtin_amdgcn_mfma_f32_32x32x16_bf16(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_f16_16x16x32, f16x8, f32x4, __builtin_amdgcn_mfma_f32_16x16x32_f16(va, vb, vc, 0, 0, 0))
MFMA_KERNEL(mfma_f16_32x32x16, f16x8, f32x16, __builtin_amdgcn_mfma_f32_32x32x16_f16(va, vb, vc, 0, 0, 0))
// fp8 (fmt 0) x fp8 with E8M0 scales: each lane's scale byte covers its 32 K-elements
extern "C" __global__ void mfma_scale_fp8_16x16x128(const i32x8* a, const i32x8* b, const f32x4* c, f32x4* d,
                                                    const int* sa, const int* sb) {
  int l = __builtin_amdgcn_workitem_id_x();
  d[l] = __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a[l], b[l], c[l], 0, 0, 0, sa[l], 0, sb[l]);
}
extern "C" __global__ void mfma_scale_fp8_32x32x64(const i32x8* a, const i32x8* b, const f32x16* c, f32x16* d,
                                                   const int* sa, const int* sb) {
  int l = __builtin_amdgcn_workitem_id_x();
  d[l] = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a[l], b[l], c[l], 0, 0, 0, sa[l], 0, sb[l]);
}
#endif
