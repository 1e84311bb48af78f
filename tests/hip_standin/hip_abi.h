/* What ROCm's headers fix and the stand-in libamdhip64.so must match byte for byte: hipError_t
 * values and hipDeviceProp_tR0600 (hip_runtime_api.h, HIP 6.0 and later). Included once, by
 * amdhip64.c; the tables are exported so that tests can compare them with what hip-python was
 * generated from. */
#ifndef HIP_STANDIN_ABI_H
#define HIP_STANDIN_ABI_H

#include <stddef.h>

#include "standin.h"

typedef int hipError_t;
enum {
  hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2, hipErrorNotInitialized = 3,
  hipErrorInvalidConfiguration = 9, hipErrorInvalidMemcpyDirection = 21, hipErrorInvalidDeviceFunction = 98,
  hipErrorNoDevice = 100, hipErrorInvalidDevice = 101, hipErrorInvalidImage = 200, hipErrorNoBinaryForGpu = 209,
  hipErrorInvalidResourceHandle = 400, hipErrorNotFound = 500, hipErrorNotReady = 600,
  hipErrorIllegalAddress = 700, hipErrorLaunchFailure = 719, hipErrorNotSupported = 801, hipErrorUnknown = 999,
};

/* Name and description of every code this library returns (also what tests compare with the
 * hipError_t that hip-python was generated from). */
struct standin_code { const char* name; int value; const char* text; };
EXPORT const struct standin_code hip_standin_error_codes[] = {
  {"hipSuccess", hipSuccess, "no error"},
  {"hipErrorInvalidValue", hipErrorInvalidValue, "invalid argument"},
  {"hipErrorOutOfMemory", hipErrorOutOfMemory, "out of memory"},
  {"hipErrorNotInitialized", hipErrorNotInitialized, "initialization error"},
  {"hipErrorInvalidConfiguration", hipErrorInvalidConfiguration, "invalid configuration argument"},
  {"hipErrorInvalidMemcpyDirection", hipErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"},
  {"hipErrorInvalidDeviceFunction", hipErrorInvalidDeviceFunction, "invalid device function"},
  {"hipErrorNoDevice", hipErrorNoDevice, "no ROCm-capable device is detected"},
  {"hipErrorInvalidDevice", hipErrorInvalidDevice, "invalid device ordinal"},
  {"hipErrorInvalidImage", hipErrorInvalidImage, "device kernel image is invalid"},
  {"hipErrorNoBinaryForGpu", hipErrorNoBinaryForGpu, "no kernel image is available for execution on the device"},
  {"hipErrorInvalidResourceHandle", hipErrorInvalidResourceHandle, "invalid resource handle"},
  {"hipErrorNotFound", hipErrorNotFound, "named symbol not found"},
  {"hipErrorNotReady", hipErrorNotReady, "device not ready"},
  {"hipErrorIllegalAddress", hipErrorIllegalAddress, "an illegal memory access was encountered"},
  {"hipErrorLaunchFailure", hipErrorLaunchFailure, "unspecified launch failure"},
  {"hipErrorNotSupported", hipErrorNotSupported, "operation not supported"},
  {"hipErrorUnknown", hipErrorUnknown, "unknown error"},
  {NULL, 0, NULL},
};

/* --- hipDeviceProp_tR0600 (hip_runtime_api.h, HIP >= 6.0) ------------------------------------ */
typedef struct { char bytes[16]; } hipUUID;
typedef struct {
  unsigned hasGlobalInt32Atomics : 1, hasGlobalFloatAtomicExch : 1, hasSharedInt32Atomics : 1,
      hasSharedFloatAtomicExch : 1, hasFloatAtomicAdd : 1, hasGlobalInt64Atomics : 1, hasSharedInt64Atomics : 1,
      hasDoubles : 1, hasWarpVote : 1, hasWarpBallot : 1, hasWarpShuffle : 1, hasFunnelShift : 1,
      hasThreadFenceSystem : 1, hasSyncThreadsExt : 1, hasSurfaceFuncs : 1, has3dGrid : 1,
      hasDynamicParallelism : 1;
} hipDeviceArch_t;

typedef struct hipDeviceProp_tR0600 {
  char name[256];
  hipUUID uuid;
  char luid[8];
  unsigned int luidDeviceNodeMask;
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize;
  size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
  size_t totalConstMem;
  int major, minor;
  size_t textureAlignment, texturePitchAlignment;
  int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory, computeMode;
  int maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2], maxTexture2DMipmap[2],
      maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap,
      maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2];
  int maxSurface1D, maxSurface2D[2], maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3],
      maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount,
      unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize,
      maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported,
      singleToDoublePrecisionPerfRatio, pageableMemoryAccess, concurrentManagedAccess, computePreemptionSupported,
      canUseHostPointerForRegisteredMem, cooperativeLaunch, cooperativeMultiDeviceLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor,
      accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported, sparseHipArraySupported, hostRegisterReadOnlySupported,
      timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
  unsigned int gpuDirectRDMAFlushWritesOptions;
  int gpuDirectRDMAWritesOrdering;
  unsigned int memoryPoolSupportedHandleTypes;
  int deferredMappingHipArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers;
  int reserved[63];
  int hipReserved[32];
  char gcnArchName[256];
  size_t maxSharedMemoryPerMultiProcessor;
  int clockInstructionRate;
  hipDeviceArch_t arch;
  unsigned int *hdpMemFlushCntl, *hdpRegFlushCntl;
  int cooperativeMultiDeviceUnmatchedFunc, cooperativeMultiDeviceUnmatchedGridDim,
      cooperativeMultiDeviceUnmatchedBlockDim, cooperativeMultiDeviceUnmatchedSharedMem;
  int isLargeBar, asicRevision;
} hipDeviceProp_tR0600;

_Static_assert(sizeof(hipDeviceArch_t) == 4, "hipDeviceArch_t is 17 one-bit fields in one unsigned");
_Static_assert(sizeof(hipDeviceProp_tR0600) == 1472, "hipDeviceProp_tR0600 is 1472 bytes since HIP 6.0");

/* Where this library puts each field (tests read the same bytes back through hip-python). */
struct standin_field { const char* name; size_t offset, size; };
#define FIELD(f) {#f, offsetof(hipDeviceProp_tR0600, f), sizeof(((hipDeviceProp_tR0600*)0)->f)}
EXPORT const struct standin_field hip_standin_prop_fields[] = {
  FIELD(name), FIELD(totalGlobalMem), FIELD(sharedMemPerBlock), FIELD(regsPerBlock), FIELD(warpSize),
  FIELD(maxThreadsPerBlock), FIELD(maxThreadsDim), FIELD(maxGridSize), FIELD(clockRate), FIELD(major),
  FIELD(minor), FIELD(multiProcessorCount), FIELD(canMapHostMemory), FIELD(concurrentKernels), FIELD(pciBusID),
  FIELD(pciDeviceID), FIELD(unifiedAddressing), FIELD(memoryBusWidth), FIELD(l2CacheSize),
  FIELD(maxThreadsPerMultiProcessor), FIELD(sharedMemPerMultiprocessor), FIELD(regsPerMultiprocessor),
  FIELD(sharedMemPerBlockOptin), FIELD(maxBlocksPerMultiProcessor), FIELD(unifiedFunctionPointers),
  FIELD(gcnArchName), FIELD(maxSharedMemoryPerMultiProcessor), FIELD(clockInstructionRate),
  FIELD(cooperativeMultiDeviceUnmatchedSharedMem), FIELD(isLargeBar), FIELD(asicRevision),
  {NULL, 0, 0},
};
EXPORT const size_t hip_standin_prop_size = sizeof(hipDeviceProp_tR0600);

#endif
