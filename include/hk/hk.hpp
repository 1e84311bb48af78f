#pragma once
// hk/hk.hpp: the one header a kernel includes. The tile interface is the same on every target;
// the implementation underneath is picked from the compile target.
#include "common/platform.hpp"
#if HK_CUDA
#include "hopper/hopper.hpp"
#else
#include "cdna/cdna.hpp"
#endif
