#pragma once
// hk/cdna/cdna4.hpp: gfx950 (MI350X/MI355X) specifics.
// 160 KiB LDS per workgroup, direct-to-LDS buffer loads up to 16 bytes per lane, bf16/fp16 MFMA
// 16x16x32 and 32x32x16 in addition to the CDNA3 shapes, ds_read_b64_tr_b16.
namespace hk::arch {
inline constexpr int lds_bytes = 160 * 1024;
inline constexpr int lds_dma_bytes = 16;       // buffer_load_dwordx4 ... lds
inline constexpr bool has_tr_read = true;      // ds_read_b64_tr_b16
inline constexpr bool has_bf16_cvt = true;     // v_cvt_pk_bf16_f32 (round to nearest even)
inline constexpr int lds_banks = 64;
inline constexpr int default_mfma_m = 16, default_mfma_k = 32;
template <int MI, int MK>
inline constexpr bool has_mfma = (MI == 16 && (MK == 16 || MK == 32)) || (MI == 32 && (MK == 8 || MK == 16));
}  // namespace hk::arch
// Default shared-tile swizzles (types.hpp) for K-major and MN-major GEMM operands.
namespace hk { struct swz_k16; struct swz_mn_tr; using arch_swz_k = swz_k16; using arch_swz_mn = swz_mn_tr; }
