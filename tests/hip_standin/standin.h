/* What the two stand-in libraries (libamdhip64.so, libhiprtc.so) share: opaque handles that are
 * checked before use, and the bootstrap that imports their Python half into the interpreter of
 * the process that loaded them.
 *
 * The libraries are C so that hip-python loads them exactly as it loads ROCm's: by dlopen, then
 * dlsym of every entry point it calls. What they do is decided in Python (hip_standin/runtime.py,
 * hip_standin/rtc.py), which fills a table of function pointers on first use. */
#ifndef HIP_STANDIN_H
#define HIP_STANDIN_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#ifndef STANDIN_PYPATH_HEX
#error "build with -DSTANDIN_PYPATH_HEX=\"<hex of the folder holding the hip_standin package>\""
#endif

/* --- handles -----------------------------------------------------------------------------------
 * Every handle given out (module, function, stream, event, program) is the address of one of
 * these. The registry of live ones lets an entry point reject a stale or wrong handle, or a
 * pointer to a handle where a handle was due, without dereferencing it. Handles are never
 * freed: a destroyed one stays dead so that reuse is caught too. */
enum standin_kind { KIND_MODULE = 1, KIND_FUNCTION, KIND_STREAM, KIND_EVENT, KIND_PROGRAM };

struct standin_handle {
  uint64_t magic;     /* STANDIN_MAGIC while live */
  int kind;
  int device;         /* the device it belongs to (modules, functions, streams) */
  uint64_t id;        /* the Python half's id, or the event's timestamp */
  int recorded;       /* events: hipEventRecord was called */
};

#define STANDIN_MAGIC 0x6e69646e61747348ull   /* "hstandin" */

static pthread_mutex_t standin_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct standin_handle** standin_registry;
static size_t standin_registry_len, standin_registry_cap;

static struct standin_handle* standin_handle_new(int kind, int device, uint64_t id) {
  struct standin_handle* h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->magic = STANDIN_MAGIC;
  h->kind = kind;
  h->device = device;
  h->id = id;
  pthread_mutex_lock(&standin_registry_lock);
  if (standin_registry_len == standin_registry_cap) {
    size_t cap = standin_registry_cap ? 2 * standin_registry_cap : 64;
    struct standin_handle** grown = realloc(standin_registry, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&standin_registry_lock);
      free(h);
      return NULL;
    }
    standin_registry = grown;
    standin_registry_cap = cap;
  }
  standin_registry[standin_registry_len++] = h;
  pthread_mutex_unlock(&standin_registry_lock);
  return h;
}

/* The live handle of `kind` at address `p`, or NULL (p is not a handle, is dead, or is of another
 * kind). Only addresses in the registry are ever dereferenced. */
static struct standin_handle* standin_handle_get(const void* p, int kind) {
  struct standin_handle* found = NULL;
  pthread_mutex_lock(&standin_registry_lock);
  for (size_t i = 0; i < standin_registry_len; i++) {
    if ((const void*)standin_registry[i] == p) {
      found = standin_registry[i];
      break;
    }
  }
  pthread_mutex_unlock(&standin_registry_lock);
  if (found && (found->magic != STANDIN_MAGIC || found->kind != kind)) return NULL;
  return found;
}

static void standin_handle_kill(struct standin_handle* h) { h->magic = 0; }

/* --- bootstrap ---------------------------------------------------------------------------------
 * Runs `import hip_standin.<module>; hip_standin.<module>.install(<table address>)` in the
 * process's interpreter. The Python C API is looked up at run time (the process is a Python
 * process: its executable or libpython exports these), so the libraries need no Python headers
 * and link against no libpython. */
typedef int (*standin_gil_ensure_t)(void);
typedef void (*standin_gil_release_t)(int);
typedef int (*standin_run_t)(const char*);

static int standin_install(const char* module, const void* table) {
  standin_gil_ensure_t ensure = (standin_gil_ensure_t)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
  standin_gil_release_t release = (standin_gil_release_t)dlsym(RTLD_DEFAULT, "PyGILState_Release");
  standin_run_t run = (standin_run_t)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
  if (!ensure || !release || !run) {
    fprintf(stderr, "hip stand-in: no Python interpreter in this process; the stand-in %s is served "
                    "by hkjit's simulator and only works inside a Python process\n", module);
    return -1;
  }
  char code[1024];
  /* __import__ only: nothing is bound in the caller's __main__. */
  snprintf(code, sizeof code,
           "__import__('sys').path.append(bytes.fromhex('%s').decode())\n"
           "__import__('hip_standin.%s', fromlist=['install']).install(%llu)\n",
           STANDIN_PYPATH_HEX, module, (unsigned long long)(uintptr_t)table);
  int state = ensure();
  int rc = run(code);   /* prints the traceback itself on failure */
  release(state);
  if (rc != 0) fprintf(stderr, "hip stand-in: installing hip_standin.%s failed (traceback above)\n", module);
  return rc;
}

#endif
