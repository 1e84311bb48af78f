#pragma once
// hk/cdna/cdna.hpp: the CDNA (gfx942, gfx950) tile library, included by hk/hk.hpp on AMD targets.
// Per-arch facts (MFMA shapes, LDS size, direct-to-LDS widths, transposing reads) live in
// cdna3.hpp (gfx942) and cdna4.hpp (gfx950); everything else is shared.
#include "../common/platform.hpp"
#if HK_CDNA4
#include "cdna4.hpp"
#elif HK_CDNA3
#include "cdna3.hpp"
#elif defined(__AMDGCN__) && defined(__HIP_DEVICE_COMPILE__)
#error "hk/cdna: compile for gfx942 or gfx950"
#else
// Host pass of a hipcc build: nothing here is host code, but the names must exist and the
// per-target static checks must pass for every device target: declare the superset (gfx950).
#include "cdna4.hpp"
#endif
#include "base.hpp"
#include "mfma.hpp"
#include "sched.hpp"
#include "prims.hpp"
#include "types.hpp"
#include "memory.hpp"
#include "ops.hpp"
#include "../common/regs.hpp"
#include "../common/rt_row.hpp"
