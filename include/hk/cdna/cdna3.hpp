#pragma once
// hk/cdna/cdna3.hpp: gfx942 (MI300X/MI325X) specifics.
// 64 KiB LDS per workgroup, direct-to-LDS buffer loads of 1/2/4 bytes per lane, bf16/fp16 MFMA
// 16x16x16 and 32x32x8, no transposing LDS read, LDS of 32 banks x 4 bytes.
namespace hk::arch {
inline constexpr int lds_bytes = 64 * 1024;
inline constexpr int lds_dma_bytes = 4;        // buffer_load_dword ... lds
inline constexpr bool has_tr_read = false;     // no ds_read_b64_tr_b16
inline constexpr bool has_bf16_cvt = false;    // no float -> bf16 instruction (v_cvt_pk_bf16_f32 is gfx950's)
inline constexpr int lds_banks = 32;
inline constexpr int default_mfma_m = 16, default_mfma_k = 16;
template <int MI, int MK> inline constexpr bool has_mfma = (MI == 16 && MK == 16) || (MI == 32 && MK == 8);
}  // namespace hk::arch
// Default shared-tile swizzles (types.hpp) for K-major and MN-major GEMM operands.
namespace hk { struct swz_k8; struct swz_mn_u16; using arch_swz_k = swz_k8; using arch_swz_mn = swz_mn_u16; }
