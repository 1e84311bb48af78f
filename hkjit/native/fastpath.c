/* hkjit's native repeat-call path: the fast half of hkjit.launch.call, in C.

   A call whose arrays have the properties of an earlier call (dtype, shape, strides, 16-byte
   alignment class and device of every array, the same op and options) needs no Python: this
   module reads each tensor through DLPack's C exchange table (`__dlpack_c_exchange_api__` on the
   tensor type: a view of the tensor without allocating), finds the entry the Python path
   registered for those properties, writes the call's pointers into the entry's argument block at
   the places the Python path measured (plain pointer fields, and CUDA tensor maps through
   cuTensorMapReplaceAddress), allocates missing outputs through the framework's own allocator, and
   launches with cuLaunchKernel on the framework's current stream. New run-time scalars, or a
   pointer with no measured place, get a new block from the entry's `repack` (Python: the op's
   checks and fill, raising what the Python path raises). Anything else (a new signature, an array
   of another type, a failed allocation) goes to the Python path. This file itself raises only what
   the launch reports, with the Python backend's types and words.

   Built on first use by hkjit/hostcc.py; loaded by hkjit/native/__init__.py, which also says how
   entries are registered. The GIL is held throughout, as for any C function called from Python;
   the table is only touched with it held. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_SLOTS 16
#define MAX_DIMS 8
#define MAX_SCALARS 16
#define MAX_PATCHES 64
#define MAX_ARGS_BYTES 4096
#define KEY_PER_SLOT (1 + 4 + 8 + 4 + 1 + 16 * MAX_DIMS)
#define MAX_KEY (MAX_SLOTS * KEY_PER_SLOT)
#define N_BUCKETS 1024
#define MAX_ENTRIES 4096

/* ---- DLPack (v1.x) as far as used here: the view, the owning tensor, the exchange table ---- */
typedef struct { int32_t device_type, device_id; } DLDev;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLType;
typedef struct {
    void *data; DLDev device; int32_t ndim; DLType dtype;
    int64_t *shape, *strides; uint64_t byte_offset;
} DLView;
typedef struct { uint32_t major, minor; } DLVersion;
typedef struct Managed {
    DLVersion version; void *manager_ctx; void (*deleter)(struct Managed *);
    uint64_t flags; DLView dl_tensor;
} Managed;
typedef struct Header { DLVersion version; struct Header *prev_api; } Header;
typedef struct {
    Header header;
    int (*allocate)(DLView *prototype, Managed **out, void *error_ctx,
                    void (*set_error)(void *, const char *, const char *));
    int (*managed_from_py)(void *, Managed **);
    int (*managed_to_py)(Managed *, void **);
    int (*view_from_py)(void *, DLView *);
    int (*current_stream)(int32_t device_type, int32_t device_id, void **stream);
} Exchange;

/* ---- the driver functions (addresses from hkjit/runtime/cuda.py's libcuda) ------------------ */
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         void *, void **, void **);
typedef int (*ctx_get_fn)(void **);
typedef int (*ctx_set_fn)(void *);
typedef int (*err_fn)(int, const char **);
typedef int (*tmap_fn)(void *, void *);

/* Where a pointer goes in the argument block: a 64-bit field holding pointer + addend, or a
   128-byte CUDA tensor map addressing pointer + addend. */
enum { P_PTR, P_TMAP };
typedef struct { int32_t kind, source; int64_t offset; uint64_t addend; } Patch;

typedef struct {
    int slot, ndim; int64_t shape[MAX_DIMS]; DLType dtype; DLDev device; uint8_t align;
    PyObject *shape_tuple, *torch_dtype, *torch_device;   /* for the torch.empty allocation mode */
} Alloc;

typedef struct Entry {
    struct Entry *next; uint64_t hash;
    PyObject *op, *options;
    Py_ssize_t nvalues, key_len; unsigned char *key;
    Py_ssize_t nscalars; PyObject *scalars[MAX_SCALARS];   /* the values the block holds (owned) */
    uint32_t ptr_patchable;                                /* bit i: pointer i is written in place */
    PyObject *repack;                                      /* (ptrs, scalars) -> a new block */
    uint64_t ptrs[MAX_SLOTS];                              /* the pointers the block holds */
    int npatches; Patch *patches;
    void *function, *context; unsigned grid[3], block[3], smem; DLDev device;
    Py_ssize_t args_size; unsigned char *args, *args_base;  /* args: 64-byte aligned (tensor maps) */
    int nalloc; Alloc allocs[MAX_SLOTS];
    int nreturns, returns[MAX_SLOTS];
    PyObject *what;                                        /* "launch of NAME (grid ..., ...)" */
} Entry;

/* One table with its configuration: launch.py holds one; tests make their own in test mode. */
typedef struct {
    PyObject_HEAD
    const Exchange *api;
    PyTypeObject *types[4];
    int ntypes;
    PyObject *slow, *launch_error, *device_error, *empty, *empty_kwnames;
    launch_fn launch;
    ctx_get_fn ctx_get;
    ctx_set_fn ctx_set;
    err_fn err_name, err_string;
    tmap_fn tmap_replace;
    int alloc_mode;                      /* 0: the exchange table's allocator, 1: torch.empty */
    Entry *buckets[N_BUCKETS];
    Py_ssize_t count;
    unsigned long long hits, misses, repacks;
    /* Bumped whenever an entry is freed: Python code run during a call (an allocation, a repack,
       the garbage collector under them) could clear the table, so the call re-checks before
       touching its entry again. */
    unsigned long long generation;
    /* Test mode (no driver): launches are recorded, not made, so CPU tests check the real key and
       patch logic. */
    int test;
    unsigned long long test_launches;
    unsigned char last_args[MAX_ARGS_BYTES];
    Py_ssize_t last_size;
    void *last_function, *last_stream;
    unsigned last_geom[7];
} FastPath;

static FastPath *g_recording;            /* the test-mode table launching now (the GIL is held) */
static Py_ssize_t g_cur_size;

static int test_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, void *stream, void **params, void **extra) {
    (void)extra;
    FastPath *fp = g_recording;
    fp->test_launches++;
    fp->last_function = f; fp->last_stream = stream;
    unsigned geom[7] = {gx, gy, gz, bx, by, bz, smem};
    memcpy(fp->last_geom, geom, sizeof geom);
    fp->last_size = g_cur_size;
    memcpy(fp->last_args, params[0], (size_t)g_cur_size);
    return 0;
}

/* ---- keys ---------------------------------------------------------------------------------- */
static int accepted(const FastPath *fp, PyTypeObject *t) {
    for (int i = 0; i < fp->ntypes; i++)
        if (t == fp->types[i]) return 1;
    return 0;
}

/* Appends one tensor's properties to the key: what the Python repeat path keys on (dtype, shape,
   strides in elements, pointer & 15, device), so a changed tensor never reuses a stale block. */
static int key_tensor(const FastPath *fp, PyObject *v, unsigned char *key, Py_ssize_t *len, uint64_t *ptr) {
    DLView t;
    if (fp->api->view_from_py(v, &t) != 0) { PyErr_Clear(); return -1; }
    if (t.ndim < 0 || t.ndim > MAX_DIMS) return -1;
    uint64_t p = (uint64_t)(uintptr_t)t.data + t.byte_offset;
    unsigned char *k = key + *len;
    int32_t nd = t.ndim;
    *k++ = 1;
    memcpy(k, &t.dtype, 4); k += 4;
    memcpy(k, &t.device, 8); k += 8;
    memcpy(k, &nd, 4); k += 4;
    *k++ = (uint8_t)(p & 15);
    if (nd) memcpy(k, t.shape, 8 * (size_t)nd);
    k += 8 * nd;
    if (t.strides) {
        if (nd) memcpy(k, t.strides, 8 * (size_t)nd);
    } else {                                   /* compact row-major (DLPack's NULL strides) */
        int64_t s = 1;
        for (int i = nd - 1; i >= 0; i--) { memcpy(k + 8 * i, &s, 8); s *= t.shape[i]; }
    }
    k += 8 * nd;
    *len = k - key;
    *ptr = p;
    return 0;
}

static int make_key(const FastPath *fp, PyObject *values, unsigned char *key, Py_ssize_t *len, uint64_t *ptrs) {
    Py_ssize_t n = PyTuple_GET_SIZE(values);
    if (n > MAX_SLOTS) return -1;
    *len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(values, i);
        if (v == Py_None) { key[(*len)++] = 0; ptrs[i] = 0; continue; }
        if (!accepted(fp, Py_TYPE(v)) || key_tensor(fp, v, key, len, &ptrs[i]) != 0) return -1;
    }
    return 0;
}

static uint64_t hash_key(PyObject *op, const unsigned char *key, Py_ssize_t len) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(uintptr_t)op;    /* FNV-1a, 8 bytes a step */
    Py_ssize_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, key + i, 8);
        h = (h ^ w) * 1099511628211ULL;
        h ^= h >> 29;
    }
    for (; i < len; i++) h = (h ^ key[i]) * 1099511628211ULL;
    return h;
}

static Entry *lookup(FastPath *fp, uint64_t h, PyObject *op, PyObject *options, Py_ssize_t n,
                     const unsigned char *key, Py_ssize_t len, Entry ***link_out) {
    Entry **link = &fp->buckets[h & (N_BUCKETS - 1)];
    for (Entry *e = *link; e; link = &e->next, e = e->next) {
        if (e->hash != h || e->op != op || e->nvalues != n || e->key_len != len || memcmp(e->key, key, len))
            continue;
        if (e->options != options) {
            int same = PyObject_RichCompareBool(e->options, options, Py_EQ);
            if (same < 0) PyErr_Clear();
            if (same != 1) continue;
        }
        if (link_out) *link_out = link;
        return e;
    }
    return NULL;
}

static void free_entry(FastPath *fp, Entry *e) {
    fp->generation++;
    Py_XDECREF(e->op); Py_XDECREF(e->options); Py_XDECREF(e->what); Py_XDECREF(e->repack);
    for (Py_ssize_t j = 0; j < e->nscalars; j++) Py_XDECREF(e->scalars[j]);
    for (int a = 0; a < e->nalloc; a++) {
        Py_XDECREF(e->allocs[a].shape_tuple); Py_XDECREF(e->allocs[a].torch_dtype);
        Py_XDECREF(e->allocs[a].torch_device);
    }
    PyMem_Free(e->key); PyMem_Free(e->patches); PyMem_Free(e->args_base); PyMem_Free(e);
}

static void clear_table(FastPath *fp) {
    for (int b = 0; b < N_BUCKETS; b++) {
        Entry *e = fp->buckets[b];
        fp->buckets[b] = NULL;
        while (e) { Entry *next = e->next; free_entry(fp, e); e = next; }
    }
    fp->count = 0;
}

static int same_scalar(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (Py_TYPE(a) != Py_TYPE(b)) return 0;
    if (PyFloat_CheckExact(a)) {               /* bitwise: -0.0 is not 0.0 to a kernel */
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        return memcmp(&x, &y, sizeof x) == 0;
    }
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r < 0) { PyErr_Clear(); return 0; }
    return r;
}

static int kind_size(int kind) { return kind == P_TMAP ? 128 : 8; }

/* ---- outputs --------------------------------------------------------------------------------- */
static void note_alloc_error(void *ctx, const char *kind, const char *message) {
    (void)kind; (void)message;
    *(int *)ctx = 1;              /* the Python path allocates again and raises torch's own error */
}

static PyObject *allocate(FastPath *fp, const Alloc *a, uint64_t *ptr) {
    if (fp->alloc_mode == 0) {
        DLView proto;
        memset(&proto, 0, sizeof proto);
        proto.device = a->device; proto.ndim = a->ndim; proto.dtype = a->dtype;
        proto.shape = (int64_t *)a->shape;
        Managed *m = NULL;
        int failed = 0;
        if (fp->api->allocate(&proto, &m, &failed, note_alloc_error) != 0 || !m || failed) {
            PyErr_Clear();
            return NULL;
        }
        *ptr = (uint64_t)(uintptr_t)m->dl_tensor.data + m->dl_tensor.byte_offset;
        void *obj = NULL;
        if (fp->api->managed_to_py(m, &obj) != 0 || !obj) { PyErr_Clear(); return NULL; }
        return (PyObject *)obj;
    }
    PyObject *argv[3] = {a->shape_tuple, a->torch_dtype, a->torch_device};
    PyObject *obj = PyObject_Vectorcall(fp->empty, argv, 1, fp->empty_kwnames);
    if (!obj) { PyErr_Clear(); return NULL; }
    DLView t;
    if (fp->api->view_from_py(obj, &t) != 0) { PyErr_Clear(); Py_DECREF(obj); return NULL; }
    *ptr = (uint64_t)(uintptr_t)t.data + t.byte_offset;
    return obj;
}

/* ---- errors the launch reports: hkjit's own types, the Python backend's wording --------------- */
static PyObject *driver_error(const FastPath *fp, PyObject *type, PyObject *what, int err) {
    const char *name = NULL, *text = NULL;
    if (!fp->err_name || fp->err_name(err, &name) != 0 || !name) name = NULL;
    if (!fp->err_string || fp->err_string(err, &text) != 0 || !text) text = "no description";
    if (name)
        PyErr_Format(type, "%U failed: %s (%s)", what, name, text);
    else
        PyErr_Format(type, "%U failed: CUresult %d (%s)", what, err, text);
    return NULL;
}

static void release(PyObject **made) {
    for (int b = 0; b < MAX_SLOTS; b++) Py_CLEAR(made[b]);
}

/* ---- the call -------------------------------------------------------------------------------- */
static PyObject *slow(FastPath *fp, PyObject *const *args, Py_ssize_t nargs) {
    fp->misses++;
    return PyObject_Vectorcall(fp->slow, args, (size_t)nargs, NULL);
}

/* Writes `ptrs` into the entry's block where they differ from what it holds; -1 where a tensor map
   refused (the block is then marked stale for those pointers). */
static int patch(FastPath *fp, Entry *e, const uint64_t *ptrs, uint32_t changed, Py_ssize_t n) {
    for (int p = 0; p < e->npatches; p++) {
        const Patch *pt = &e->patches[p];
        if (!(changed >> pt->source & 1)) continue;
        uint64_t v = ptrs[pt->source] + pt->addend;
        if (pt->kind == P_PTR) {
            memcpy(e->args + pt->offset, &v, 8);
        } else if (!fp->tmap_replace || fp->tmap_replace(e->args + pt->offset, (void *)(uintptr_t)v) != 0) {
            for (Py_ssize_t i = 0; i < n; i++)           /* half written: rewritten next call */
                if (changed >> i & 1) e->ptrs[i] = UINT64_MAX;
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (changed >> i & 1) e->ptrs[i] = ptrs[i];
    return 0;
}

/* A new block from the entry's repack (new scalars, or a pointer with no measured place). */
static int repack(FastPath *fp, Entry *e, const uint64_t *ptrs, PyObject *scalars, Py_ssize_t n,
                  unsigned long long generation) {
    PyObject *ptr_tuple = PyTuple_New(n);
    if (!ptr_tuple) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(ptrs[i]);
        if (!v) { Py_DECREF(ptr_tuple); return -1; }
        PyTuple_SET_ITEM(ptr_tuple, i, v);
    }
    PyObject *block = PyObject_CallFunctionObjArgs(e->repack, ptr_tuple, scalars, NULL);
    Py_DECREF(ptr_tuple);
    if (!block) return -1;                               /* the op's own error, as in Python */
    if (generation != fp->generation) { Py_DECREF(block); return 1; }
    if (!PyBytes_Check(block) || PyBytes_GET_SIZE(block) != e->args_size) {
        Py_DECREF(block);
        PyErr_SetString(PyExc_RuntimeError, "hkjit native path: repack gave a block of another size");
        return -1;
    }
    memcpy(e->args, PyBytes_AS_STRING(block), (size_t)e->args_size);
    Py_DECREF(block);
    fp->repacks++;
    for (Py_ssize_t i = 0; i < n; i++) e->ptrs[i] = ptrs[i];
    for (Py_ssize_t j = 0; j < e->nscalars; j++) {
        PyObject *s = PyTuple_GET_ITEM(scalars, j);
        Py_INCREF(s);
        Py_SETREF(e->scalars[j], s);
    }
    return 0;
}

/* call(op, values, scalars, options, device, compiler, tiles): hkjit.launch.call's signature. */
static PyObject *fast_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    FastPath *fp = (FastPath *)self;
    if (nargs != 7) return slow(fp, args, nargs);
    PyObject *op = args[0], *values = args[1], *scalars = args[2], *options = args[3], *tiles = args[6];
    if (args[4] != Py_None || args[5] != Py_None || !PyTuple_CheckExact(values) || !PyTuple_CheckExact(scalars))
        return slow(fp, args, nargs);
    if (tiles != Py_None && !(PyDict_CheckExact(tiles) && PyDict_GET_SIZE(tiles) == 0)) return slow(fp, args, nargs);

    unsigned char key[MAX_KEY];
    Py_ssize_t klen;
    uint64_t ptrs[MAX_SLOTS];
    Py_ssize_t n = PyTuple_GET_SIZE(values);
    if (make_key(fp, values, key, &klen, ptrs) != 0) return slow(fp, args, nargs);
    Entry *e = lookup(fp, hash_key(op, key, klen), op, options, n, key, klen, NULL);
    if (!e || PyTuple_GET_SIZE(scalars) != e->nscalars) return slow(fp, args, nargs);

    /* Decide before writing: new scalars, or a pointer with no measured place, take a repack. */
    unsigned long long generation = fp->generation;
    int fresh = 0;
    for (Py_ssize_t j = 0; j < e->nscalars && !fresh; j++)
        fresh = !same_scalar(PyTuple_GET_ITEM(scalars, j), e->scalars[j]);
    PyObject *made[MAX_SLOTS] = {0};
    for (int a = 0; a < e->nalloc; a++) {
        const Alloc *al = &e->allocs[a];
        PyObject *obj = allocate(fp, al, &ptrs[al->slot]);
        made[al->slot] = obj;
        if (!obj || (ptrs[al->slot] & 15) != al->align) { release(made); return slow(fp, args, nargs); }
    }
    if (generation != fp->generation) { release(made); return slow(fp, args, nargs); }
    uint32_t changed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ptrs[i] != e->ptrs[i]) {
            changed |= 1u << i;
            if (!(e->ptr_patchable >> i & 1)) fresh = 1;
        }
    }
    /* The block keeps the last call's values, so a repeat with the same ones writes nothing. */
    if (fresh) {
        int r = repack(fp, e, ptrs, scalars, n, generation);
        if (r) { release(made); return r < 0 ? NULL : slow(fp, args, nargs); }
    } else if (changed && patch(fp, e, ptrs, changed, n) != 0) {
        release(made);
        return slow(fp, args, nargs);
    }

    void *stream = NULL;
    if (fp->api->current_stream(e->device.device_type, e->device.device_id, &stream) != 0) {
        PyErr_Clear();
        release(made);
        return slow(fp, args, nargs);
    }
    int err;
    if (fp->test) {
        g_recording = fp;
        g_cur_size = e->args_size;
    } else {
        void *cur = NULL;
        if (fp->ctx_get(&cur) != 0 || cur != e->context) {
            err = fp->ctx_set(e->context);
            if (err) {
                release(made);
                PyObject *what = PyUnicode_FromString("cuCtxSetCurrent");
                if (what) { driver_error(fp, fp->device_error, what, err); Py_DECREF(what); }
                return NULL;
            }
        }
    }
    /* kernelParams, not one CU_LAUNCH_PARAM_BUFFER_POINTER block: the latter gave an illegal
       instruction with gemm's tensor maps on an H200 (2026-11-23), and was no faster elsewhere. */
    void *params[1] = {e->args};
    err = (fp->test ? test_launch : fp->launch)(e->function, e->grid[0], e->grid[1], e->grid[2], e->block[0],
                                                e->block[1], e->block[2], e->smem, stream, params, NULL);
    if (err) { release(made); return driver_error(fp, fp->launch_error, e->what, err); }
    fp->hits++;

    PyObject *result;
    if (e->nreturns == 1) {
        int r = e->returns[0];
        result = made[r] ? made[r] : PyTuple_GET_ITEM(values, r);
        if (made[r]) made[r] = NULL; else Py_INCREF(result);
    } else {
        result = PyTuple_New(e->nreturns);
        for (int k = 0; result && k < e->nreturns; k++) {
            int r = e->returns[k];
            PyObject *o = made[r] ? made[r] : PyTuple_GET_ITEM(values, r);
            Py_INCREF(o);
            PyTuple_SET_ITEM(result, k, o);
        }
    }
    release(made);
    return result;
}

/* ---- registration (from hkjit/native/__init__.py) ---------------------------------------------- */
static int as_u64(PyObject *o, uint64_t *out) {
    *out = PyLong_AsUnsignedLongLongMask(o);
    return PyErr_Occurred() ? -1 : 0;
}

static int triple(PyObject *o, unsigned out[3], const char *what) {
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 3) {
        PyErr_Format(PyExc_ValueError, "%s must be a 3-tuple", what);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(o, i));
        if (PyErr_Occurred()) return -1;
        out[i] = (unsigned)v;
    }
    return 0;
}

/* register(op, values, options, scalars, ptrs, function, context, grid, block, smem, args,
            patches, ptr_patchable, repack, allocs, returns, what)
   values: the call's arrays (None for outputs to allocate); ptrs: the pointers `args` holds;
   patches: ((kind, slot, offset, addend), ...); repack(ptrs, scalars) -> a new block; allocs:
   ((slot, shape, (code, bits, lanes), (device_type, device_id), align, torch_dtype, torch_device),
   ...); returns: the slots returned. */
static PyObject *py_register(PyObject *self, PyObject *args) {
    FastPath *fp = (FastPath *)self;
    PyObject *op, *values, *options, *scalars, *ptrs, *grid, *block, *argbytes, *patches, *allocs, *returns, *what;
    PyObject *function, *context, *repack_fn;
    unsigned smem, ptr_patchable;
    if (!PyArg_ParseTuple(args, "OO!OO!O!OOOOIO!O!IOO!O!U", &op, &PyTuple_Type, &values, &options,
                          &PyTuple_Type, &scalars, &PyTuple_Type, &ptrs, &function, &context, &grid, &block,
                          &smem, &PyBytes_Type, &argbytes, &PyTuple_Type, &patches, &ptr_patchable,
                          &repack_fn, &PyTuple_Type, &allocs, &PyTuple_Type, &returns, &what))
        return NULL;
    if (!PyCallable_Check(repack_fn)) { PyErr_SetString(PyExc_TypeError, "repack must be callable"); return NULL; }
    Py_ssize_t n = PyTuple_GET_SIZE(values), size = PyBytes_GET_SIZE(argbytes);
    if (n > MAX_SLOTS || PyTuple_GET_SIZE(ptrs) != n || PyTuple_GET_SIZE(scalars) > MAX_SCALARS ||
        size > MAX_ARGS_BYTES || PyTuple_GET_SIZE(allocs) > MAX_SLOTS || PyTuple_GET_SIZE(returns) < 1 ||
        PyTuple_GET_SIZE(returns) > MAX_SLOTS || PyTuple_GET_SIZE(patches) > MAX_PATCHES) {
        PyErr_SetString(PyExc_ValueError, "too many values, patches or argument bytes for the native path");
        return NULL;
    }
    unsigned char key[MAX_KEY];
    Py_ssize_t klen;
    uint64_t key_ptrs[MAX_SLOTS];
    if (make_key(fp, values, key, &klen, key_ptrs) != 0) {
        PyErr_SetString(PyExc_ValueError, "the values are not tensors of the configured types (or too many dims)");
        return NULL;
    }
    Entry *e = PyMem_Calloc(1, sizeof(Entry));
    if (!e) return PyErr_NoMemory();
    e->key = PyMem_Malloc((size_t)klen + 1);
    e->args_base = PyMem_Malloc((size_t)size + 64);
    e->patches = PyMem_Calloc((size_t)PyTuple_GET_SIZE(patches) + 1, sizeof(Patch));
    if (!e->key || !e->args_base || !e->patches) { free_entry(fp, e); return PyErr_NoMemory(); }
    memcpy(e->key, key, (size_t)klen);
    e->key_len = klen; e->nvalues = n;
    e->args = (unsigned char *)(((uintptr_t)e->args_base + 63) & ~(uintptr_t)63);
    memcpy(e->args, PyBytes_AS_STRING(argbytes), (size_t)size);
    e->args_size = size;
    Py_INCREF(op); e->op = op;
    Py_INCREF(options); e->options = options;
    Py_INCREF(what); e->what = what;
    Py_INCREF(repack_fn); e->repack = repack_fn;
    e->nscalars = PyTuple_GET_SIZE(scalars);
    for (Py_ssize_t j = 0; j < e->nscalars; j++) { e->scalars[j] = PyTuple_GET_ITEM(scalars, j); Py_INCREF(e->scalars[j]); }
    e->ptr_patchable = ptr_patchable;
    e->smem = smem;
    uint64_t f, c;
    if (as_u64(function, &f) || as_u64(context, &c) || triple(grid, e->grid, "grid") || triple(block, e->block, "block"))
        goto fail;
    e->function = (void *)(uintptr_t)f; e->context = (void *)(uintptr_t)c;
    for (Py_ssize_t i = 0; i < n; i++)
        if (as_u64(PyTuple_GET_ITEM(ptrs, i), &e->ptrs[i])) goto fail;
    e->npatches = (int)PyTuple_GET_SIZE(patches);
    for (int p = 0; p < e->npatches; p++) {
        Patch *pt = &e->patches[p];
        long long off;
        unsigned long long addend;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(patches, p), "iiLK", &pt->kind, &pt->source, &off, &addend)) goto fail;
        pt->offset = off; pt->addend = addend;
        if ((pt->kind != P_PTR && pt->kind != P_TMAP) || pt->source < 0 || pt->source >= n || off < 0 ||
            off + kind_size(pt->kind) > size || (pt->kind == P_TMAP && off % 64)) {
            PyErr_SetString(PyExc_ValueError, "a patch outside the argument block");
            goto fail;
        }
    }
    e->nalloc = (int)PyTuple_GET_SIZE(allocs);
    for (int a = 0; a < e->nalloc; a++) {
        Alloc *al = &e->allocs[a];
        PyObject *shape, *tdtype, *tdevice;
        int code, bits, lanes, align;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(allocs, a), "iO!(iii)(ii)iOO", &al->slot, &PyTuple_Type, &shape,
                              &code, &bits, &lanes, &al->device.device_type, &al->device.device_id, &align,
                              &tdtype, &tdevice))
            goto fail;
        Py_INCREF(shape); al->shape_tuple = shape;
        Py_INCREF(tdtype); al->torch_dtype = tdtype;
        Py_INCREF(tdevice); al->torch_device = tdevice;
        al->dtype.code = (uint8_t)code; al->dtype.bits = (uint8_t)bits; al->dtype.lanes = (uint16_t)lanes;
        al->align = (uint8_t)align;
        al->ndim = (int)PyTuple_GET_SIZE(shape);
        if (al->slot < 0 || al->slot >= n || PyTuple_GET_ITEM(values, al->slot) != Py_None || al->ndim > MAX_DIMS) {
            PyErr_SetString(PyExc_ValueError, "a bad output to allocate");
            goto fail;
        }
        for (int d = 0; d < al->ndim; d++) {
            al->shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
            if (PyErr_Occurred()) goto fail;
        }
    }
    e->nreturns = (int)PyTuple_GET_SIZE(returns);
    for (int k = 0; k < e->nreturns; k++) {
        e->returns[k] = (int)PyLong_AsLong(PyTuple_GET_ITEM(returns, k));
        if (PyErr_Occurred()) goto fail;
        if (e->returns[k] < 0 || e->returns[k] >= n) { PyErr_SetString(PyExc_ValueError, "a bad return slot"); goto fail; }
    }
    /* Streams are asked for on the device of the first tensor (every tensor of a call is on one). */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(values, i);
        if (v != Py_None) {
            DLView t;
            if (fp->api->view_from_py(v, &t) != 0) goto fail;
            e->device = t.device;
            break;
        }
    }
    e->hash = hash_key(op, key, klen);
    Entry **link;
    Entry *old = lookup(fp, e->hash, op, options, n, key, klen, &link);
    if (old) { *link = old->next; free_entry(fp, old); fp->count--; }
    if (fp->count >= MAX_ENTRIES) clear_table(fp);
    Entry **bucket = &fp->buckets[e->hash & (N_BUCKETS - 1)];
    e->next = *bucket;
    *bucket = e;
    fp->count++;
    Py_RETURN_NONE;
fail:
    free_entry(fp, e);
    return NULL;
}

/* ---- the type ---------------------------------------------------------------------------------- */
/* FastPath(tensor_types, exchange_capsule, slow_call, launch_error, device_error, empty, driver)
   driver: (cuLaunchKernel, cuCtxGetCurrent, cuCtxSetCurrent, cuGetErrorName, cuGetErrorString,
   cuTensorMapReplaceAddress) addresses, or None where there is no driver: test mode, in which
   launches are recorded (last_launch) instead of made. */
static int fp_init(PyObject *self, PyObject *args, PyObject *kwargs) {
    FastPath *fp = (FastPath *)self;
    PyObject *types, *capsule, *slow_call, *launch_error, *device_error, *empty, *driver;
    if (kwargs && PyDict_GET_SIZE(kwargs)) { PyErr_SetString(PyExc_TypeError, "FastPath takes no keywords"); return -1; }
    if (fp->api) { PyErr_SetString(PyExc_RuntimeError, "FastPath is configured once"); return -1; }
    if (!PyArg_ParseTuple(args, "O!OOOOOO", &PyTuple_Type, &types, &capsule, &slow_call, &launch_error,
                          &device_error, &empty, &driver))
        return -1;
    if (PyTuple_GET_SIZE(types) < 1 || PyTuple_GET_SIZE(types) > 4) {
        PyErr_SetString(PyExc_ValueError, "one to four tensor types");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++)
        if (!PyType_Check(PyTuple_GET_ITEM(types, i))) { PyErr_SetString(PyExc_TypeError, "tensor types"); return -1; }
    const Exchange *api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    if (!api) return -1;
    if (api->header.version.major != 1 || !api->view_from_py || !api->current_stream || !api->allocate ||
        !api->managed_to_py) {
        PyErr_Format(PyExc_ValueError, "DLPack exchange table version %u.%u or a missing function: not usable",
                     api->header.version.major, api->header.version.minor);
        return -1;
    }
    uint64_t fns[6] = {0};
    if (driver != Py_None) {
        if (!PyTuple_Check(driver) || PyTuple_GET_SIZE(driver) != 6) {
            PyErr_SetString(PyExc_ValueError, "driver: six function addresses");
            return -1;
        }
        for (int i = 0; i < 6; i++)
            if (PyTuple_GET_ITEM(driver, i) != Py_None && as_u64(PyTuple_GET_ITEM(driver, i), &fns[i])) return -1;
        if (!fns[0] || !fns[1] || !fns[2]) {
            PyErr_SetString(PyExc_ValueError, "driver: cuLaunchKernel and the context functions are required");
            return -1;
        }
    }
    fp->empty_kwnames = Py_BuildValue("(ss)", "dtype", "device");
    if (!fp->empty_kwnames) return -1;
    fp->ntypes = (int)PyTuple_GET_SIZE(types);
    for (int i = 0; i < fp->ntypes; i++) {
        Py_INCREF(PyTuple_GET_ITEM(types, i));
        fp->types[i] = (PyTypeObject *)PyTuple_GET_ITEM(types, i);
    }
    Py_INCREF(slow_call); fp->slow = slow_call;
    Py_INCREF(launch_error); fp->launch_error = launch_error;
    Py_INCREF(device_error); fp->device_error = device_error;
    Py_INCREF(empty); fp->empty = empty;
    fp->launch = (launch_fn)(uintptr_t)fns[0];
    fp->ctx_get = (ctx_get_fn)(uintptr_t)fns[1];
    fp->ctx_set = (ctx_set_fn)(uintptr_t)fns[2];
    fp->err_name = (err_fn)(uintptr_t)fns[3];
    fp->err_string = (err_fn)(uintptr_t)fns[4];
    fp->tmap_replace = (tmap_fn)(uintptr_t)fns[5];
    fp->test = driver == Py_None;
    fp->api = api;
    return 0;
}

static void fp_dealloc(PyObject *self) {
    FastPath *fp = (FastPath *)self;
    clear_table(fp);
    for (int i = 0; i < fp->ntypes; i++) Py_XDECREF(fp->types[i]);
    Py_XDECREF(fp->slow); Py_XDECREF(fp->launch_error); Py_XDECREF(fp->device_error);
    Py_XDECREF(fp->empty); Py_XDECREF(fp->empty_kwnames);
    if (g_recording == fp) g_recording = NULL;
    Py_TYPE(self)->tp_free(self);
}

/* The type takes no part in cycle collection: launch.py keeps its one table for the life of the
   process, and nothing an entry holds (ops, options, repack closures) refers back to a table. */

#define NEED_CONFIGURED(fp) if (!(fp)->api) { PyErr_SetString(PyExc_RuntimeError, "FastPath not configured"); return NULL; }

static PyObject *fp_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NEED_CONFIGURED((FastPath *)self);
    return fast_call(self, args, nargs);
}

static PyObject *fp_register(PyObject *self, PyObject *args) {
    NEED_CONFIGURED((FastPath *)self);
    return py_register(self, args);
}

static PyObject *fp_clear(PyObject *self, PyObject *unused) {
    (void)unused;
    clear_table((FastPath *)self);
    Py_RETURN_NONE;
}

static PyObject *fp_stats(PyObject *self, PyObject *unused) {
    (void)unused;
    FastPath *fp = (FastPath *)self;
    return Py_BuildValue("{sKsKsKsnsK}", "hits", fp->hits, "misses", fp->misses, "repacks", fp->repacks,
                         "entries", fp->count, "test_launches", fp->test_launches);
}

static PyObject *fp_set_alloc_mode(PyObject *self, PyObject *arg) {
    long mode = PyLong_AsLong(arg);
    if (mode == -1 && PyErr_Occurred()) return NULL;
    if (mode != 0 && mode != 1) { PyErr_SetString(PyExc_ValueError, "0 (DLPack allocator) or 1 (torch.empty)"); return NULL; }
    ((FastPath *)self)->alloc_mode = (int)mode;
    Py_RETURN_NONE;
}

static PyObject *fp_last_launch(PyObject *self, PyObject *unused) {
    (void)unused;
    FastPath *fp = (FastPath *)self;
    return Py_BuildValue("{sKsKs(III)s(III)sIsKsy#}", "count", fp->test_launches,
                         "function", (unsigned long long)(uintptr_t)fp->last_function,
                         "grid", fp->last_geom[0], fp->last_geom[1], fp->last_geom[2],
                         "block", fp->last_geom[3], fp->last_geom[4], fp->last_geom[5], "smem", fp->last_geom[6],
                         "stream", (unsigned long long)(uintptr_t)fp->last_stream,
                         "args", (const char *)fp->last_args, fp->last_size);
}

/* describe(tensor) -> (pointer, (code, bits, lanes), (device_type, device_id)): what the exchange
   table says of a tensor (registration takes an output's DLPack dtype from it). */
static PyObject *fp_describe(PyObject *self, PyObject *obj) {
    FastPath *fp = (FastPath *)self;
    NEED_CONFIGURED(fp);
    if (!accepted(fp, Py_TYPE(obj))) { PyErr_SetString(PyExc_TypeError, "not a configured tensor type"); return NULL; }
    DLView t;
    if (fp->api->view_from_py(obj, &t) != 0) return NULL;
    return Py_BuildValue("K(iii)(ii)", (unsigned long long)((uintptr_t)t.data + t.byte_offset), t.dtype.code,
                         t.dtype.bits, t.dtype.lanes, t.device.device_type, t.device.device_id);
}

static PyMethodDef fp_methods[] = {
    {"call", (PyCFunction)(void (*)(void))fp_call, METH_FASTCALL,
     "call(op, values, scalars, options, device, compiler, tiles): hkjit.launch.call, natively where an entry matches"},
    {"register", fp_register, METH_VARARGS, "register an entry (hkjit/native/__init__.py)"},
    {"clear", fp_clear, METH_NOARGS, "forget every entry"},
    {"stats", fp_stats, METH_NOARGS, "hits, misses, repacks, entries, test launches"},
    {"set_alloc_mode", fp_set_alloc_mode, METH_O, "0: DLPack allocator, 1: torch.empty"},
    {"last_launch", fp_last_launch, METH_NOARGS, "the launch last recorded in test mode"},
    {"describe", fp_describe, METH_O, "(pointer, DLPack dtype, DLPack device) of a tensor"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hkjit.native._fastpath.FastPath",
    .tp_basicsize = sizeof(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A table of native repeat-call entries and what it launches with",
    .tp_new = PyType_GenericNew,
    .tp_init = fp_init,
    .tp_dealloc = fp_dealloc,
    .tp_methods = fp_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&FastPathType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&FastPathType);
    if (PyModule_AddObject(m, "FastPath", (PyObject *)&FastPathType) < 0) {
        Py_DECREF(&FastPathType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
