#pragma once
// hk/hopper/hopper.hpp: the sm_90a implementation of the hk tile interface.
//   types.hpp  bf16 / half and round-to-nearest-even conversions (inline PTX, no vendor headers)
//   sync.hpp   mbarriers, fences, named barriers, setmaxnreg
//   tma.hpp    tensor-map (TMA) loads
//   tiles.hpp  gl (global), st (shared, swizzled), rt (warpgroup registers)
//   wgmma.hpp  mma_AB / mma_ABt / mma_AtB / mma_AtBt on shared tiles
//   ops.hpp    zero, add, mul, exp2, row_sum, row_max, store
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#else
#error "hk/hopper needs sm_90a (wgmma, setmaxnreg)"
#endif
#include "types.hpp"
#include "sync.hpp"
#include "tma.hpp"
#include "tiles.hpp"
#include "wgmma.hpp"
#include "ops.hpp"
