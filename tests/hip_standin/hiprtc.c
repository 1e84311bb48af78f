/* Stand-in libhiprtc.so: hiprtc's program API (hiprtc.h) with ROCm's ABI, served by clang-22 with
 * the options hiprtc itself adds, through hip_standin/rtc.py. */
#include "standin.h"

#ifndef STANDIN_HIP_VERSION
#define STANDIN_HIP_VERSION 70200000
#endif

typedef int hiprtcResult;
enum {
  HIPRTC_SUCCESS = 0, HIPRTC_ERROR_OUT_OF_MEMORY = 1, HIPRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
  HIPRTC_ERROR_INVALID_INPUT = 3, HIPRTC_ERROR_INVALID_PROGRAM = 4, HIPRTC_ERROR_INVALID_OPTION = 5,
  HIPRTC_ERROR_COMPILATION = 6, HIPRTC_ERROR_INTERNAL_ERROR = 11,
};

struct standin_code { const char* name; int value; };
EXPORT const struct standin_code hiprtc_standin_result_codes[] = {
  {"HIPRTC_SUCCESS", HIPRTC_SUCCESS},
  {"HIPRTC_ERROR_OUT_OF_MEMORY", HIPRTC_ERROR_OUT_OF_MEMORY},
  {"HIPRTC_ERROR_PROGRAM_CREATION_FAILURE", HIPRTC_ERROR_PROGRAM_CREATION_FAILURE},
  {"HIPRTC_ERROR_INVALID_INPUT", HIPRTC_ERROR_INVALID_INPUT},
  {"HIPRTC_ERROR_INVALID_PROGRAM", HIPRTC_ERROR_INVALID_PROGRAM},
  {"HIPRTC_ERROR_INVALID_OPTION", HIPRTC_ERROR_INVALID_OPTION},
  {"HIPRTC_ERROR_COMPILATION", HIPRTC_ERROR_COMPILATION},
  {"HIPRTC_ERROR_INTERNAL_ERROR", HIPRTC_ERROR_INTERNAL_ERROR},
  {NULL, 0},
};

/* Filled by hip_standin.rtc.install(); every function returns a hiprtcResult. `log` and `code`
 * report the size (NUL included for the log) and copy it out when `dst` is not NULL. */
struct rtc_ops {
  int (*create)(const char* src, const char* name, int num_headers, const char* const* headers,
                const char* const* include_names, uint64_t* program);
  int (*compile)(uint64_t program, int num_options, const char* const* options);
  int (*log)(uint64_t program, char* dst, uint64_t* size);
  int (*code)(uint64_t program, char* dst, uint64_t* size);
  int (*destroy)(uint64_t program);
};
static struct rtc_ops ops;
static int ops_ready;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void bootstrap(void) { ops_ready = standin_install("rtc", &ops) == 0 && ops.destroy != NULL; }

#define ENTER()                                           \
  do {                                                    \
    pthread_once(&ops_once, bootstrap);                   \
    if (!ops_ready) return HIPRTC_ERROR_INTERNAL_ERROR;   \
  } while (0)

typedef struct standin_handle* hiprtcProgram;

EXPORT const char* hiprtcGetErrorString(hiprtcResult result) {
  for (const struct standin_code* c = hiprtc_standin_result_codes; c->name; c++)
    if (c->value == result) return c->name;
  return "Invalid HIPRTC error code";
}

EXPORT hiprtcResult hiprtcVersion(int* major, int* minor) {
  if (!major || !minor) return HIPRTC_ERROR_INVALID_INPUT;
  *major = STANDIN_HIP_VERSION / 10000000;
  *minor = STANDIN_HIP_VERSION / 100000 % 100;
  return HIPRTC_SUCCESS;
}

EXPORT hiprtcResult hiprtcCreateProgram(hiprtcProgram* prog, const char* src, const char* name, int num_headers,
                                        const char* const* headers, const char* const* include_names) {
  ENTER();
  if (!prog || !src || num_headers < 0 || (num_headers > 0 && (!headers || !include_names)))
    return HIPRTC_ERROR_INVALID_INPUT;
  uint64_t id = 0;
  hiprtcResult r = ops.create(src, name ? name : "", num_headers, headers, include_names, &id);
  if (r != HIPRTC_SUCCESS) return r;
  *prog = standin_handle_new(KIND_PROGRAM, 0, id);
  return *prog ? HIPRTC_SUCCESS : HIPRTC_ERROR_OUT_OF_MEMORY;
}

#define PROGRAM(prog, h)                                                  \
  struct standin_handle* h = standin_handle_get((prog), KIND_PROGRAM);    \
  if (!h) return HIPRTC_ERROR_INVALID_PROGRAM

EXPORT hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int num_options, const char* const* options) {
  ENTER();
  PROGRAM(prog, h);
  if (num_options < 0 || (num_options > 0 && !options)) return HIPRTC_ERROR_INVALID_INPUT;
  return ops.compile(h->id, num_options, options);
}

EXPORT hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t* size) {
  ENTER();
  PROGRAM(prog, h);
  if (!size) return HIPRTC_ERROR_INVALID_INPUT;
  uint64_t n = 0;
  hiprtcResult r = ops.log(h->id, NULL, &n);
  *size = n;
  return r;
}

EXPORT hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char* log) {
  ENTER();
  PROGRAM(prog, h);
  if (!log) return HIPRTC_ERROR_INVALID_INPUT;
  uint64_t n = 0;
  return ops.log(h->id, log, &n);
}

EXPORT hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t* size) {
  ENTER();
  PROGRAM(prog, h);
  if (!size) return HIPRTC_ERROR_INVALID_INPUT;
  uint64_t n = 0;
  hiprtcResult r = ops.code(h->id, NULL, &n);
  *size = n;
  return r;
}

EXPORT hiprtcResult hiprtcGetCode(hiprtcProgram prog, char* code) {
  ENTER();
  PROGRAM(prog, h);
  if (!code) return HIPRTC_ERROR_INVALID_INPUT;
  uint64_t n = 0;
  return ops.code(h->id, code, &n);
}

/* Takes the address of the caller's handle. hiprtc frees whatever *prog points at, so being given
 * the handle itself (or a pointer to anything but a live program) corrupts the heap there; this
 * library stops the process with the reason instead. */
EXPORT hiprtcResult hiprtcDestroyProgram(hiprtcProgram* prog) {
  ENTER();
  if (!prog) return HIPRTC_ERROR_INVALID_INPUT;
  if (standin_handle_get(prog, KIND_PROGRAM)) {
    fprintf(stderr, "hip stand-in: hiprtcDestroyProgram was given a program, not the address of one "
                    "(hiprtcProgram*); hiprtc would free memory it does not own\n");
    abort();
  }
  struct standin_handle* h = standin_handle_get(*prog, KIND_PROGRAM);
  if (!h) {
    fprintf(stderr, "hip stand-in: hiprtcDestroyProgram: *prog is not a live program (destroyed twice?)\n");
    abort();
  }
  hiprtcResult r = ops.destroy(h->id);
  standin_handle_kill(h);
  *prog = NULL;
  return r;
}
