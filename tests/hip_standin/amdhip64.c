/* Stand-in libamdhip64.so: the HIP runtime entry points hkjit (through hip-python) calls, with
 * ROCm's ABI (hip_runtime_api.h: hipError_t values, hipDeviceProp_tR0600, the launch `extra`
 * block), served by hkjit's CDNA simulator through hip_standin/runtime.py.
 *
 * C owns what the ABI fixes (structure layouts, handles, the current device of each thread, the
 * last error, events); Python owns devices, memory, code objects and launches. Where ROCm is
 * lenient or undefined (a launch argument block of the wrong size, a function launched on a device
 * it was not loaded on) this library fails loudly, because that is where a caller's bug hides. */
#include "standin.h"

#include <elf.h>
#include <time.h>

#include "hip_abi.h"

#ifndef STANDIN_HIP_VERSION
#define STANDIN_HIP_VERSION 70200000   /* HIP_VERSION encoding: major * 1e7 + minor * 1e5 + patch */
#endif

/* --- the Python half ----------------------------------------------------------------------------
 * Filled by hip_standin.runtime.install(); every function returns a hipError_t. */
enum { NUM_TOTAL_MEM, NUM_COMPUTE_UNITS, NUM_LDS_BYTES, NUM_CLOCK_KHZ, NUM_MAJOR, NUM_MINOR, NUM_COUNT };
struct hip_ops {
  int (*device_count)(int* count);
  int (*device_info)(int device, char* name, char* arch, uint64_t* numbers);
  int (*malloc)(int device, uint64_t size, uint64_t* ptr);
  int (*free)(uint64_t ptr);
  int (*memcpy)(uint64_t dst, uint64_t src, uint64_t size, int kind);
  int (*mem_info)(int device, uint64_t* free_bytes, uint64_t* total_bytes);
  int (*module_load)(int device, const void* image, uint64_t size, uint64_t* module);
  int (*module_unload)(uint64_t module);
  int (*module_function)(uint64_t module, const char* name, uint64_t* function);
  int (*launch)(uint64_t function, const uint32_t* grid_block, uint32_t dynamic_lds, const void* args,
                uint64_t args_size, void** params);
  int (*synchronize)(int device);
};
static struct hip_ops ops;
static int ops_ready;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void bootstrap(void) { ops_ready = standin_install("runtime", &ops) == 0 && ops.synchronize != NULL; }

static __thread int current_device;
static __thread hipError_t last_error;

static hipError_t done(hipError_t e) {
  if (e != hipSuccess) last_error = e;
  return e;
}

#define ENTER()                                          \
  do {                                                   \
    pthread_once(&ops_once, bootstrap);                  \
    if (!ops_ready) return done(hipErrorNotInitialized); \
  } while (0)

typedef struct standin_handle* hipModule_t;
typedef struct standin_handle* hipFunction_t;
typedef struct standin_handle* hipStream_t;
typedef struct standin_handle* hipEvent_t;

static int device_count(void) {
  int n = 0;
  return ops.device_count(&n) == hipSuccess ? n : 0;
}

/* The device a stream runs on; the null stream is the calling thread's current device. */
static hipError_t stream_device(hipStream_t stream, int* device) {
  if (stream == NULL) {
    *device = current_device;
    return hipSuccess;
  }
  struct standin_handle* h = standin_handle_get(stream, KIND_STREAM);
  if (!h) return hipErrorInvalidResourceHandle;
  *device = h->device;
  return hipSuccess;
}

/* --- version, errors, devices ------------------------------------------------------------------ */
EXPORT hipError_t hipInit(unsigned int flags) {
  ENTER();
  return done(flags == 0 ? hipSuccess : hipErrorInvalidValue);
}

EXPORT hipError_t hipDriverGetVersion(int* version) {
  if (!version) return done(hipErrorInvalidValue);
  *version = STANDIN_HIP_VERSION;
  return hipSuccess;
}

EXPORT hipError_t hipRuntimeGetVersion(int* version) { return hipDriverGetVersion(version); }

static const struct standin_code* find_code(hipError_t e) {
  for (const struct standin_code* c = hip_standin_error_codes; c->name; c++)
    if (c->value == e) return c;
  return NULL;
}

EXPORT const char* hipGetErrorName(hipError_t e) {
  const struct standin_code* c = find_code(e);
  return c ? c->name : "hipErrorUnknown";
}

EXPORT const char* hipGetErrorString(hipError_t e) {
  const struct standin_code* c = find_code(e);
  return c ? c->text : "unknown error";
}

EXPORT hipError_t hipGetLastError(void) {
  hipError_t e = last_error;
  last_error = hipSuccess;
  return e;
}

EXPORT hipError_t hipPeekAtLastError(void) { return last_error; }

EXPORT hipError_t hipGetDeviceCount(int* count) {
  ENTER();
  if (!count) return done(hipErrorInvalidValue);
  hipError_t e = ops.device_count(count);
  if (e == hipSuccess && *count == 0) e = hipErrorNoDevice;
  return done(e);
}

EXPORT hipError_t hipGetDevice(int* device) {
  ENTER();
  if (!device) return done(hipErrorInvalidValue);
  *device = current_device;
  return hipSuccess;
}

EXPORT hipError_t hipSetDevice(int device) {
  ENTER();
  if (device < 0 || device >= device_count()) return done(hipErrorInvalidDevice);
  current_device = device;
  return hipSuccess;
}

EXPORT hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600* p, int device) {
  ENTER();
  if (!p) return done(hipErrorInvalidValue);
  if (device < 0 || device >= device_count()) return done(hipErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  uint64_t n[NUM_COUNT] = {0};
  hipError_t e = ops.device_info(device, p->name, p->gcnArchName, n);
  if (e != hipSuccess) return done(e);
  p->name[sizeof p->name - 1] = p->gcnArchName[sizeof p->gcnArchName - 1] = 0;
  p->totalGlobalMem = n[NUM_TOTAL_MEM];
  p->multiProcessorCount = (int)n[NUM_COMPUTE_UNITS];
  p->sharedMemPerBlock = p->sharedMemPerBlockOptin = p->sharedMemPerMultiprocessor =
      p->maxSharedMemoryPerMultiProcessor = n[NUM_LDS_BYTES];
  p->clockRate = p->clockInstructionRate = (int)n[NUM_CLOCK_KHZ];
  p->major = (int)n[NUM_MAJOR];
  p->minor = (int)n[NUM_MINOR];
  p->warpSize = 64;
  p->regsPerBlock = p->regsPerMultiprocessor = 512 * 64 * 4;  /* 512 registers x 64 lanes x 4 SIMDs */
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = 1024;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65536;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxBlocksPerMultiProcessor = 32;
  p->l2CacheSize = 4 << 20;
  p->memoryBusWidth = 8192;
  p->totalConstMem = 1 << 31;
  p->memPitch = 0x7fffffff;
  p->textureAlignment = 256;
  p->concurrentKernels = p->unifiedAddressing = p->canMapHostMemory = p->isLargeBar = 1;
  p->pciBusID = 0x10 + device;
  p->pciDeviceID = 0;
  p->arch.hasGlobalInt32Atomics = p->arch.hasSharedInt32Atomics = p->arch.hasGlobalInt64Atomics =
      p->arch.hasSharedInt64Atomics = p->arch.hasFloatAtomicAdd = p->arch.hasDoubles = p->arch.hasWarpVote =
          p->arch.hasWarpBallot = p->arch.hasWarpShuffle = p->arch.hasFunnelShift = p->arch.has3dGrid = 1;
  return hipSuccess;
}

EXPORT hipError_t hipDeviceSynchronize(void) {
  ENTER();
  return done(ops.synchronize(current_device));
}

/* --- memory -------------------------------------------------------------------------------------- */
EXPORT hipError_t hipMalloc(void** ptr, size_t size) {
  ENTER();
  if (!ptr) return done(hipErrorInvalidValue);
  *ptr = NULL;
  if (size == 0) return hipSuccess;
  uint64_t p = 0;
  hipError_t e = ops.malloc(current_device, size, &p);
  if (e == hipSuccess) *ptr = (void*)(uintptr_t)p;
  return done(e);
}

EXPORT hipError_t hipFree(void* ptr) {
  ENTER();
  return ptr ? done(ops.free((uint64_t)(uintptr_t)ptr)) : hipSuccess;
}

EXPORT hipError_t hipMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ENTER();
  if (!free_bytes || !total_bytes) return done(hipErrorInvalidValue);
  uint64_t f = 0, t = 0;
  hipError_t e = ops.mem_info(current_device, &f, &t);
  *free_bytes = f;
  *total_bytes = t;
  return done(e);
}

EXPORT hipError_t hipMemcpy(void* dst, const void* src, size_t size, int kind) {
  ENTER();
  if (kind < 0 || kind > 4) return done(hipErrorInvalidMemcpyDirection);
  if (size == 0) return hipSuccess;
  if (!dst || !src) return done(hipErrorInvalidValue);
  return done(ops.memcpy((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, size, kind));
}

EXPORT hipError_t hipMemcpyHtoD(void* dst, const void* src, size_t size) { return hipMemcpy(dst, src, size, 1); }
EXPORT hipError_t hipMemcpyDtoH(void* dst, const void* src, size_t size) { return hipMemcpy(dst, src, size, 2); }
EXPORT hipError_t hipMemcpyDtoD(void* dst, const void* src, size_t size) { return hipMemcpy(dst, src, size, 3); }

/* --- code objects and launches ------------------------------------------------------------------- */

/* Bytes of an AMDGPU ELF image given only its start (hipModuleLoadData gets no size): the end of
 * its headers and sections. 0 when it is not a 64-bit little-endian AMDGPU ELF. */
static size_t amdgpu_elf_size(const unsigned char* image) {
  if (memcmp(image, ELFMAG, SELFMAG) != 0 || image[EI_CLASS] != ELFCLASS64 || image[EI_DATA] != ELFDATA2LSB)
    return 0;
  const Elf64_Ehdr* eh = (const Elf64_Ehdr*)image;
  if (eh->e_machine != 224 /* EM_AMDGPU */ || eh->e_shentsize != sizeof(Elf64_Shdr)) return 0;
  size_t end = eh->e_ehsize;
  size_t ph_end = eh->e_phoff + (size_t)eh->e_phnum * eh->e_phentsize;
  size_t sh_end = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
  if (ph_end > end) end = ph_end;
  if (sh_end > end) end = sh_end;
  if (end > ((size_t)1 << 30)) return 0;
  const Elf64_Shdr* sh = (const Elf64_Shdr*)(image + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++)
    if (sh[i].sh_type != SHT_NOBITS && sh[i].sh_offset + sh[i].sh_size > end) end = sh[i].sh_offset + sh[i].sh_size;
  return end > ((size_t)1 << 30) ? 0 : end;
}

EXPORT hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
  ENTER();
  if (!module || !image) return done(hipErrorInvalidValue);
  size_t size = amdgpu_elf_size(image);
  if (size == 0) {
    fprintf(stderr, "hip stand-in: hipModuleLoadData: the image is not an AMDGPU code object (64-bit ELF, "
                    "EM_AMDGPU); offload bundles are not modelled\n");
    return done(hipErrorInvalidImage);
  }
  uint64_t id = 0;
  hipError_t e = ops.module_load(current_device, image, size, &id);
  if (e != hipSuccess) return done(e);
  *module = standin_handle_new(KIND_MODULE, current_device, id);
  return *module ? hipSuccess : done(hipErrorOutOfMemory);
}

EXPORT hipError_t hipModuleLoadDataEx(hipModule_t* module, const void* image, unsigned int num_options,
                                      void* options, void** values) {
  (void)num_options, (void)options, (void)values;
  return hipModuleLoadData(module, image);
}

EXPORT hipError_t hipModuleUnload(hipModule_t module) {
  ENTER();
  struct standin_handle* h = standin_handle_get(module, KIND_MODULE);
  if (!h) return done(hipErrorInvalidResourceHandle);
  hipError_t e = ops.module_unload(h->id);
  standin_handle_kill(h);
  return done(e);
}

EXPORT hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* name) {
  ENTER();
  if (!function || !name) return done(hipErrorInvalidValue);
  struct standin_handle* m = standin_handle_get(module, KIND_MODULE);
  if (!m) return done(hipErrorInvalidResourceHandle);
  uint64_t id = 0;
  hipError_t e = ops.module_function(m->id, name, &id);
  if (e != hipSuccess) return done(e);
  *function = standin_handle_new(KIND_FUNCTION, m->device, id);
  return *function ? hipSuccess : done(hipErrorOutOfMemory);
}

#define HIP_LAUNCH_PARAM_BUFFER_POINTER ((void*)0x01)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE ((void*)0x02)
#define HIP_LAUNCH_PARAM_END ((void*)0x03)

EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int dynamic_lds,
                                        hipStream_t stream, void** params, void** extra) {
  ENTER();
  struct standin_handle* fn = standin_handle_get(f, KIND_FUNCTION);
  if (!fn) return done(hipErrorInvalidResourceHandle);
  int device;
  hipError_t e = stream_device(stream, &device);
  if (e != hipSuccess) return done(e);
  if (device != current_device) return done(hipErrorInvalidResourceHandle);  /* as ROCm's clr does */
  if (fn->device != device) {
    /* ROCm aborts the process here (a guarantee() in its code-object layer). */
    fprintf(stderr, "hip stand-in: hipModuleLaunchKernel: the function was loaded on device %d but is launched "
                    "on device %d; ROCm aborts on this\n", fn->device, device);
    abort();
  }
  const void* args = NULL;
  uint64_t args_size = 0;
  if (extra) {
    if (params) return done(hipErrorInvalidValue);
    if (extra[0] != HIP_LAUNCH_PARAM_BUFFER_POINTER || extra[2] != HIP_LAUNCH_PARAM_BUFFER_SIZE ||
        extra[4] != HIP_LAUNCH_PARAM_END || !extra[1] || !extra[3]) {
      fprintf(stderr, "hip stand-in: hipModuleLaunchKernel: `extra` is not {BUFFER_POINTER, p, BUFFER_SIZE, "
                      "&size, END}\n");
      return done(hipErrorInvalidValue);
    }
    args = extra[1];
    args_size = *(const size_t*)extra[3];
  }
  const uint32_t dims[6] = {gx, gy, gz, bx, by, bz};
  return done(ops.launch(fn->id, dims, dynamic_lds, args, args_size, params));
}

/* --- streams and events ------------------------------------------------------------------------ */
EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags) {
  ENTER();
  (void)flags;
  if (!stream) return done(hipErrorInvalidValue);
  *stream = standin_handle_new(KIND_STREAM, current_device, 0);
  return *stream ? hipSuccess : done(hipErrorOutOfMemory);
}

EXPORT hipError_t hipStreamCreate(hipStream_t* stream) { return hipStreamCreateWithFlags(stream, 0); }

EXPORT hipError_t hipStreamDestroy(hipStream_t stream) {
  ENTER();
  struct standin_handle* h = standin_handle_get(stream, KIND_STREAM);
  if (!h) return done(hipErrorInvalidResourceHandle);
  standin_handle_kill(h);
  return hipSuccess;
}

/* Launches run to completion when they are made, so synchronising only reports a kernel's failure
 * (recorded at launch, reported once, as an asynchronous error is on a GPU). */
EXPORT hipError_t hipStreamSynchronize(hipStream_t stream) {
  ENTER();
  int device;
  hipError_t e = stream_device(stream, &device);
  return done(e != hipSuccess ? e : ops.synchronize(device));
}

EXPORT hipError_t hipStreamQuery(hipStream_t stream) { return hipStreamSynchronize(stream); }

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned int flags) {
  ENTER();
  (void)flags;
  if (!event) return done(hipErrorInvalidValue);
  *event = standin_handle_new(KIND_EVENT, current_device, 0);
  return *event ? hipSuccess : done(hipErrorOutOfMemory);
}

EXPORT hipError_t hipEventCreate(hipEvent_t* event) { return hipEventCreateWithFlags(event, 0); }

EXPORT hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
  ENTER();
  struct standin_handle* h = standin_handle_get(event, KIND_EVENT);
  int device;
  if (!h || stream_device(stream, &device) != hipSuccess) return done(hipErrorInvalidResourceHandle);
  h->device = device;
  h->id = now_ns();   /* all earlier work on the stream has finished: launches are synchronous */
  h->recorded = 1;
  return hipSuccess;
}

EXPORT hipError_t hipEventSynchronize(hipEvent_t event) {
  ENTER();
  struct standin_handle* h = standin_handle_get(event, KIND_EVENT);
  return h ? (h->recorded ? done(ops.synchronize(h->device)) : hipSuccess) : done(hipErrorInvalidResourceHandle);
}

EXPORT hipError_t hipEventQuery(hipEvent_t event) {
  ENTER();
  return standin_handle_get(event, KIND_EVENT) ? hipSuccess : done(hipErrorInvalidResourceHandle);
}

EXPORT hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
  ENTER();
  struct standin_handle* a = standin_handle_get(start, KIND_EVENT);
  struct standin_handle* b = standin_handle_get(stop, KIND_EVENT);
  if (!ms) return done(hipErrorInvalidValue);
  if (!a || !b || !a->recorded || !b->recorded) return done(hipErrorInvalidResourceHandle);
  *ms = (float)((double)((int64_t)(b->id - a->id)) / 1e6);
  return hipSuccess;
}

EXPORT hipError_t hipEventDestroy(hipEvent_t event) {
  ENTER();
  struct standin_handle* h = standin_handle_get(event, KIND_EVENT);
  if (!h) return done(hipErrorInvalidResourceHandle);
  standin_handle_kill(h);
  return hipSuccess;
}
