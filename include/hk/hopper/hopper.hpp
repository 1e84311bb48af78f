#pragma once
// hk/hopper/hopper.hpp: the sm_90a implementation of the hk tile interface.
//   types.hpp  bf16 / half and round-to-nearest-even conversions (inline PTX, no vendor headers)
//   sync.hpp   mbarriers, fences, named barriers, setmaxnreg
//   tma.hpp    tensor-map (TMA) loads
//   tiles.hpp  gl (global), st (shared, swizzled), rt (warpgroup registers)
//   wgmma.hpp  mma_AB / mma_ABt / mma_AtB / mma_AtBt on shared tiles
//   prims.hpp  the primitives common/ is built on (fast math, shuffles, raw global accesses)
//   ops.hpp    load / store of register tiles
//   common/    element-wise math, broadcasts, reductions (regs.hpp); row tiles (rt_row.hpp)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#else
#error "hk/hopper needs sm_90a (wgmma, setmaxnreg)"
#endif
#include "types.hpp"
#include "prims.hpp"
#include "sync.hpp"
#include "tma.hpp"
#include "tiles.hpp"
#include "wgmma.hpp"
#include "ops.hpp"
#include "../common/regs.hpp"
#include "../common/rt_row.hpp"
