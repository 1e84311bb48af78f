#pragma once
// hk/hopper/types.hpp: 2-byte float types and conversions, with no vendor header.
// bf16/half are plain 16-bit structs; every conversion is one PTX cvt (round-to-nearest-even),
// so NVRTC needs nothing but this file.
#include "../common/platform.hpp"

namespace hk {

struct alignas(2) bf16 { u16 bits; };
struct alignas(2) half { u16 bits; };
struct alignas(8) float2_ { float x, y; };

template <class T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<bf16> { static constexpr bool value = true; };

// ---- scalar conversions ----------------------------------------------------------------------
HK_INLINE float to_float(float x) { return x; }
HK_INLINE float to_float(bf16 x) { float f; asm("cvt.f32.bf16 %0, %1;" : "=f"(f) : "h"(x.bits)); return f; }
HK_INLINE float to_float(half x) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits)); return f; }

template <class T> HK_INLINE T from_float(float x);
template <> HK_INLINE float from_float<float>(float x) { return x; }
template <> HK_INLINE bf16 from_float<bf16>(float x) { bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x)); return r; }
template <> HK_INLINE half from_float<half>(float x) { half r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x)); return r; }

// ---- packed pairs: two adjacent elements in one 32-bit word (lo = lower address) --------------
template <class T> HK_INLINE u32 pack2(float lo, float hi);
template <> HK_INLINE u32 pack2<bf16>(float lo, float hi) {
  u32 r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;  // d.hi = first source
}
template <> HK_INLINE u32 pack2<half>(float lo, float hi) {
  u32 r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}

HK_INLINE float bits_to_float(u32 b) { float f; asm("mov.b32 %0, %1;" : "=f"(f) : "r"(b)); return f; }

}  // namespace hk
