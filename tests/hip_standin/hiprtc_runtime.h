// Stand-in for the header hiprtc puts in front of every program (-include hiprtc_runtime.h).
// ROCm's is hip_runtime.h preprocessed with __HIPCC_RTC__; this keeps the part a self-contained
// unit can collide with: the spellings of HIP's function and variable attributes (host_defines.h)
// and the fixed-width integer types hiprtc provides in place of <cstdint>.
#pragma once

#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __hip_launch_bounds_1(max_threads) __attribute__((amdgpu_flat_work_group_size(1, max_threads)))
#define __hip_launch_bounds_2(max_threads, min_blocks) \
  __attribute__((amdgpu_flat_work_group_size(1, max_threads), amdgpu_waves_per_eu(min_blocks)))
#define __hip_launch_bounds_pick(_1, _2, name, ...) name
#define __launch_bounds__(...) \
  __hip_launch_bounds_pick(__VA_ARGS__, __hip_launch_bounds_2, __hip_launch_bounds_1, )(__VA_ARGS__)

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;
