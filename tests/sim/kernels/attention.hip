// Flash-attention forward written the way kernels outside hkjit are: MFMA builtins, exp2, online
// softmax with cross-lane reductions (ds_bpermute on CDNA3, v_permlane*_swap on CDNA4), no LDS.
// One wave per 16 queries, head dimension 64, keys in blocks of 16; any sequence length.
// S^T = K Q^T is computed rather than S, so that each lane's scores belong to one query (lane % 16)
// and are, as bf16, exactly the B operand of O^T += V^T P^T; the softmax statistics of a lane's
// query then scale its O^T registers directly.
#include "hk/common/platform.hpp"
typedef __bf16 bf16x4 __attribute__((ext_vector_type(4)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef unsigned int u32;
typedef u32 u32x2 __attribute__((ext_vector_type(2)));
#define D 64

__device__ float partner(float x, int lane, int k) {    // x of lane ^ k (k = 16 or 32)
#if HK_CDNA4
  u32 b = __builtin_bit_cast(u32, x);
  u32x2 r = k == 32 ? __builtin_amdgcn_permlane32_swap(b, b, false, false)
                    : __builtin_amdgcn_permlane16_swap(b, b, false, false);
  return __builtin_bit_cast(float, (lane & k) ? r.x : r.y);
#else
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((lane ^ k) * 4, __builtin_bit_cast(int, x)));
#endif
}

__device__ float across_groups_max(float x, int lane) {
  x = __builtin_fmaxf(x, partner(x, lane, 16));
  return __builtin_fmaxf(x, partner(x, lane, 32));
}

__device__ float across_groups_sum(float x, int lane) {
  x += partner(x, lane, 16);
  return x + partner(x, lane, 32);
}

extern "C" __global__ void attention_fwd(const __bf16* Q, const __bf16* K, const __bf16* V, float* O, int n,
                                         float scale_log2) {
  int lane = __builtin_amdgcn_workitem_id_x() % 64, wave = __builtin_amdgcn_workitem_id_x() / 64;
  int q0 = (__builtin_amdgcn_workgroup_id_x() * (__builtin_amdgcn_workgroup_size_x() / 64) + wave) * 16;
  if (q0 >= n) return;
  long head = (long)__builtin_amdgcn_workgroup_id_y() * n * D;
  const __bf16 *q = Q + head, *k = K + head, *v = V + head;
  int lq = lane % 16, lg = lane / 16, qi = q0 + lq;
  bool qok = qi < n;
  const bf16x4 zero = {};
  bf16x4 qb[4];                                   // Q^T, the B operand: Q[qi][16c + 4lg + j]
  for (int c = 0; c < 4; ++c) qb[c] = qok ? *(const bf16x4*)(q + qi * D + 16 * c + 4 * lg) : zero;
  f32x4 acc[4] = {};                              // O^T: register r of chunk c is O[qi][16c + 4lg + r]
  float m = -__builtin_inff(), l = 0.0f;
  for (int kb = 0; kb < n; kb += 16) {
    int ki = kb + lq;
    f32x4 s = {};
    for (int c = 0; c < 4; ++c) {
      bf16x4 ka = ki < n ? *(const bf16x4*)(k + ki * D + 16 * c + 4 * lg) : zero;
      s = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(ka, qb[c], s, 0, 0, 0);
    }
    float mx = -__builtin_inff();                 // s[r]: score of key kb + 4lg + r for query qi
    for (int r = 0; r < 4; ++r) {
      if (kb + 4 * lg + r >= n) s[r] = -__builtin_inff();
      mx = __builtin_fmaxf(mx, s[r]);
    }
    float mnew = __builtin_fmaxf(m, across_groups_max(mx, lane));
    float alpha = __builtin_amdgcn_exp2f((m - mnew) * scale_log2);
    bf16x4 pb;                                    // P^T, the B operand of O^T += V^T P^T
    float ps = 0.0f;
    for (int r = 0; r < 4; ++r) {
      float p = __builtin_amdgcn_exp2f((s[r] - mnew) * scale_log2);
      pb[r] = (__bf16)p;
      ps += (float)pb[r];
    }
    l = l * alpha + across_groups_sum(ps, lane);
    m = mnew;
    for (int c = 0; c < 4; ++c) {
      bf16x4 va;                                  // V^T, the A operand: V[kb + 4lg + j][16c + lq]
      for (int j = 0; j < 4; ++j) {
        int key = kb + 4 * lg + j;
        va[j] = key < n ? v[key * D + 16 * c + lq] : (__bf16)0.0f;
      }
      acc[c] = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(va, pb, acc[c] * alpha, 0, 0, 0);
    }
  }
  if (qok)
    for (int c = 0; c < 4; ++c)
      for (int r = 0; r < 4; ++r) O[head + qi * D + 16 * c + 4 * lg + r] = acc[c][r] / l;
}
