#pragma once
// hk/common/platform.hpp: the few definitions every kernel needs, identical on every target.
// No system or vendor header is included anywhere under include/: NVRTC, hiprtc and a bare
// `clang -nogpuinc` all see the same self-contained source, and the cache key (which hashes
// every header a kernel includes) covers everything the compiler reads.

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(__CUDA_ARCH__)
#define HK_CUDA 1
#define HK_AMD 0
#elif defined(__HIP__) || defined(__AMDGCN__) || defined(__HIPCC_RTC__)
#define HK_CUDA 0
#define HK_AMD 1
#else
#error "hk: unknown compiler; build with NVRTC/nvcc (sm_90a) or hiprtc/hipcc/clang -x hip (gfx942/gfx950)"
#endif

#if HK_AMD
// `clang -nogpuinc` brings no HIP headers; hipcc and hiprtc do. Define only what is missing.
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif
#ifndef __host__
#define __host__ __attribute__((host))
#endif
// (threads, min_blocks): min_blocks, the blocks a CUDA SM must hold at once, caps registers on
// NVIDIA; AMD kernels take the block size only.
#define HK_LAUNCH_BOUNDS(threads, min_blocks) __attribute__((amdgpu_flat_work_group_size(1, threads)))
// (waves): the waves per SIMD the AMD compiler must leave registers for (512 / waves per wave).
#define HK_AMD_WAVES(waves) __attribute__((amdgpu_waves_per_eu(waves)))
#define HK_GRID_CONSTANT
#if defined(__gfx950__)
#define HK_CDNA4 1
#define HK_CDNA3 0
#elif defined(__gfx942__)
#define HK_CDNA4 0
#define HK_CDNA3 1
#elif defined(__AMDGCN__) && defined(__HIP_DEVICE_COMPILE__)
#error "hk: unsupported AMD target; hkjit supports gfx942 and gfx950"
#endif
#else
#define HK_LAUNCH_BOUNDS(threads, min_blocks) __launch_bounds__(threads, min_blocks)
#define HK_AMD_WAVES(waves)
#define HK_GRID_CONSTANT __grid_constant__
#endif

#define HK_INLINE __device__ __forceinline__
#define HK_HD __host__ __device__   // constexpr helpers usable in device code and constant expressions
#if HK_AMD && !defined(__forceinline__)
#define __forceinline__ inline __attribute__((always_inline))
#endif

namespace hk {
using i8 = signed char;
using u8 = unsigned char;
using i16 = short;
using u16 = unsigned short;
using i32 = int;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;

// The block's index in the grid, and the number of blocks along x (grid-stride loops), read the
// same way on every target. AMD: the dispatch packet's grid size is in work-items; it is a whole
// number of workgroups when launched through HIP's module API (gridDim * blockDim).
#if HK_CUDA
HK_INLINE int block_x() { return (int)blockIdx.x; }
HK_INLINE int block_y() { return (int)blockIdx.y; }
HK_INLINE int grid_x() { return (int)gridDim.x; }
#else
HK_INLINE int block_x() { return (int)__builtin_amdgcn_workgroup_id_x(); }
HK_INLINE int block_y() { return (int)__builtin_amdgcn_workgroup_id_y(); }
HK_INLINE int grid_x() {
  // hsa_kernel_dispatch_packet_t: workgroup_size_x (u16) at byte 4, grid_size_x (u32) at byte 12
  const __attribute__((address_space(4))) char* p = (const __attribute__((address_space(4))) char*)__builtin_amdgcn_dispatch_ptr();
  const u32 wg = *(const __attribute__((address_space(4))) unsigned short*)(p + 4);
  const u32 items = *(const __attribute__((address_space(4))) u32*)(p + 12);
  return (int)(items / wg);
}
#endif

template <class A, class B> struct same_t { static constexpr bool value = false; };
template <class A> struct same_t<A, A> { static constexpr bool value = true; };
template <class A, class B> concept same_as_c = same_t<A, B>::value;
template <class T> struct remove_cv { using type = T; };
template <class T> struct remove_cv<const T> { using type = T; };
template <class T> struct remove_cv<volatile T> { using type = T; };
template <class T> struct remove_cv<const volatile T> { using type = T; };
template <class T> using remove_cv_t = typename remove_cv<T>::type;

// B bytes held in 32-bit registers, lowest address in the low bits of w[0]: what the targets'
// raw global loads/stores (detail::ld_global / st_global, B = 2, 4, 8 or 16) return and take, and
// how a row tile keeps a chunk of elements (packed: two 16-bit elements per register).
template <int B> struct raw {
  u32 w[(B + 3) / 4];
};
// A per-row / per-column vector of a register tile (defined in common/regs.hpp).
template <class KEY, int AXIS> struct tile_vec;
}  // namespace hk

// The one entry point hkjit generates per specialisation: an extern "C" kernel taking the
// kernel's `args` struct by value (CUDA: __grid_constant__, so TMA descriptors inside it can be
// addressed). K is a concrete kernel type with `threads`, `args` and `static run(const args&)`.
// K may also say `static constexpr int min_blocks`: the blocks per SM the NVIDIA compiler must leave
// registers for (__launch_bounds__'s second argument, a register cap for streaming kernels whose
// speed is the loads they keep in flight; default 1). CDNA compilers take the block size and, where
// K says `static constexpr int amd_waves_per_simd`, the waves per SIMD to leave registers for
// (amdgpu_waves_per_eu: a register cap of 512 / waves; default: the waves one block puts on a SIMD).
namespace hk {
template <class K> HK_HD constexpr int min_blocks_of() {
  if constexpr (requires { K::min_blocks; }) return K::min_blocks;
  else return 1;
}
template <class K> HK_HD constexpr int amd_waves_of() {
  if constexpr (requires { K::amd_waves_per_simd; }) return K::amd_waves_per_simd;
  else return (K::threads + 255) / 256;   // what the block size implies anyway (4 SIMDs)
}
}  // namespace hk
#define HK_ENTRY(name, K)                                                                              \
  extern "C" __global__ void HK_LAUNCH_BOUNDS(K::threads, hk::min_blocks_of<K>())                      \
      HK_AMD_WAVES(hk::amd_waves_of<K>()) name(const HK_GRID_CONSTANT K::args a) {                     \
    K::run(a);                                                                                         \
  }
