/* hkjit's XLA FFI handler: launches an hkjit kernel on XLA's stream inside jax.jit.
 *
 * One handler serves every op. hkjit/frameworks/jax_ffi.py compiles the kernel when jax traces the
 * call (from the abstract shapes) and hands this handler, as attributes of the custom call, what a
 * launch needs:
 *   launch   u64[12]: CUfunction, CUcontext, grid x y z, block x y z, dynamic shared memory,
 *            workspace buffer index (or ~0), bytes of it to zero before the launch, buffer count
 *   block    u8[]:    the kernel's argument struct, filled with made-up pointers
 *   patches  u64[4n]: (kind, buffer index, offset, addend): where each buffer's pointer goes;
 *            kind 0 writes pointer + addend as 8 bytes, kind 1 points the 128-byte CUtensorMap
 *            at the offset at it (cuTensorMapReplaceAddress)
 * Buffers are the call's operands, then its results (the last ones: the workspace, then the scratch,
 * where the kernel has them; XLA allocates both per call).
 * Every buffer must be 16-byte aligned: the kernel was bound (vector widths, TMA) for that.
 *
 * Driver functions come from hkjit's own libcuda handle (hkjit_xla_init): the same library, so
 * the same contexts and modules. Written in C against the FFI's C API only (xla/ffi/api/c_api.h,
 * from jax.ffi.include_dir()), built by hkjit/hostcc.py on first use.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_BLOCK 4096
#define MAX_BUFFERS 64

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                         void **, void **);
typedef int (*ctx_get_fn)(void **);
typedef int (*ctx_set_fn)(void *);
typedef int (*tmap_fn)(void *, void *);
typedef int (*memset_fn)(uint64_t, unsigned char, size_t, void *);
typedef int (*error_name_fn)(int, const char **);

static launch_fn cu_launch;
static ctx_get_fn cu_ctx_get;
static ctx_set_fn cu_ctx_set;
static tmap_fn cu_tmap_replace;
static memset_fn cu_memset;
static error_name_fn cu_error_name;

EXPORT int hkjit_xla_init(void *launch, void *ctx_get, void *ctx_set, void *tmap_replace, void *memset_async,
                          void *error_name) {
    if (!launch || !ctx_get || !ctx_set || !memset_async || !error_name) return -1;
    cu_launch = (launch_fn)launch;
    cu_ctx_get = (ctx_get_fn)ctx_get;
    cu_ctx_set = (ctx_set_fn)ctx_set;
    cu_tmap_replace = (tmap_fn)tmap_replace;     /* NULL on drivers without TMA: kind 1 patches fail */
    cu_memset = (memset_fn)memset_async;
    cu_error_name = (error_name_fn)error_name;
    return 0;
}

static XLA_FFI_Error *fail(const XLA_FFI_CallFrame *frame, XLA_FFI_Error_Code code, const char *message) {
    XLA_FFI_Error_Create_Args args;
    memset(&args, 0, sizeof args);
    args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    args.message = message;
    args.errc = code;
    return frame->api->XLA_FFI_Error_Create(&args);
}

static XLA_FFI_Error *cuda_fail(const XLA_FFI_CallFrame *frame, const char *what, int err) {
    char message[256];
    const char *name = NULL;
    if (!cu_error_name || cu_error_name(err, &name) != 0 || !name) name = "an unknown CUresult";
    snprintf(message, sizeof message, "hkjit (XLA FFI): %s failed: %s (%d)", what, name, err);
    return fail(frame, XLA_FFI_Error_Code_INTERNAL, message);
}

/* The attribute called `name` as an array of 64-bit (or 8-bit) integers, or NULL. MLIR's dense
   arrays have no unsigned types, so jax may hand u64 / u8 arrays over as signed: either is read. */
static const XLA_FFI_Array *attribute(const XLA_FFI_CallFrame *frame, const char *name, int bits) {
    size_t len = strlen(name);
    for (int64_t i = 0; i < frame->attrs.size; i++) {
        const XLA_FFI_ByteSpan *span = frame->attrs.names[i];
        if (span->len == len && memcmp(span->ptr, name, len) == 0) {
            if (frame->attrs.types[i] != XLA_FFI_AttrType_ARRAY) return NULL;
            const XLA_FFI_Array *array = (const XLA_FFI_Array *)frame->attrs.attrs[i];
            int ok = bits == 64 ? (array->dtype == XLA_FFI_DataType_U64 || array->dtype == XLA_FFI_DataType_S64)
                                : (array->dtype == XLA_FFI_DataType_U8 || array->dtype == XLA_FFI_DataType_S8);
            return ok ? array : NULL;
        }
    }
    return NULL;
}

/* The layout every FFI extension starts with, and the metadata extension's. Mirrored here: the
   headers' names for them changed between jaxlib releases (XLA_FFI_Extension_Base, then internal
   types), their ABI did not. */
struct hk_extension {
    size_t struct_size;
    int type;
    struct hk_extension *next;
};
struct hk_metadata_extension {
    struct hk_extension base;
    XLA_FFI_Metadata *metadata;
};

/* Answer XLA's question about the handler's API version and traits (asked once, at registration). */
static int metadata(XLA_FFI_CallFrame *frame) {
    for (struct hk_extension *ext = (struct hk_extension *)(void *)frame->extension_start; ext; ext = ext->next) {
        if (ext->type == XLA_FFI_Extension_Metadata) {
            XLA_FFI_Metadata *meta = ((struct hk_metadata_extension *)ext)->metadata;
            meta->api_version.major_version = XLA_FFI_API_MAJOR;
            meta->api_version.minor_version = XLA_FFI_API_MINOR;
            /* Every call launches the same work for the same attributes: XLA may record it in a
               CUDA graph (command buffer) and replay it. */
            meta->traits = XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE;
            return 1;
        }
    }
    return 0;
}

EXPORT XLA_FFI_Error *hkjit_xla_launch(XLA_FFI_CallFrame *frame) {
    if (metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    if (!cu_launch) return fail(frame, XLA_FFI_Error_Code_FAILED_PRECONDITION, "hkjit (XLA FFI): not initialised");

    const XLA_FFI_Array *launch = attribute(frame, "launch", 64);
    const XLA_FFI_Array *block = attribute(frame, "block", 8);
    const XLA_FFI_Array *patches = attribute(frame, "patches", 64);
    if (!launch || launch->size != 12 || !block || block->size > MAX_BLOCK || !patches || patches->size % 4)
        return fail(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "hkjit (XLA FFI): launch, block or patches attribute missing or malformed");
    const uint64_t *L = (const uint64_t *)launch->data;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs + nrets > MAX_BUFFERS || (int64_t)L[11] != nargs + nrets)
        return fail(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "hkjit (XLA FFI): the call's buffers are not those the kernel was bound for");

    uint64_t ptrs[MAX_BUFFERS];
    for (int64_t i = 0; i < nargs + nrets; i++) {
        int is_arg = i < nargs;
        if (is_arg ? frame->args.types[i] != XLA_FFI_ArgType_BUFFER
                   : frame->rets.types[i - nargs] != XLA_FFI_RetType_BUFFER)
            return fail(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT, "hkjit (XLA FFI): an operand is not a buffer");
        const XLA_FFI_Buffer *buf = (const XLA_FFI_Buffer *)(is_arg ? frame->args.args[i] : frame->rets.rets[i - nargs]);
        ptrs[i] = (uint64_t)(uintptr_t)buf->data;
        if (ptrs[i] & 15) {
            char message[160];
            snprintf(message, sizeof message, "hkjit (XLA FFI): buffer %lld is not 16-byte aligned; the kernel "
                     "was bound for aligned XLA buffers", (long long)i);
            return fail(frame, XLA_FFI_Error_Code_FAILED_PRECONDITION, message);
        }
    }

    _Alignas(64) unsigned char args[MAX_BLOCK];     /* tensor maps must be 64-byte aligned */
    memcpy(args, block->data, block->size);
    const uint64_t *P = (const uint64_t *)patches->data;
    for (size_t k = 0; k < patches->size; k += 4) {
        uint64_t kind = P[k], slot = P[k + 1], offset = P[k + 2], addend = P[k + 3];
        if (slot >= (uint64_t)(nargs + nrets) || offset + (kind ? 128 : 8) > block->size)
            return fail(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT, "hkjit (XLA FFI): a patch is outside the block");
        uint64_t value = ptrs[slot] + addend;
        if (kind == 0) {
            memcpy(args + offset, &value, 8);
        } else {
            int err = cu_tmap_replace ? cu_tmap_replace(args + offset, (void *)(uintptr_t)value) : -1;
            if (err) return cuda_fail(frame, "cuTensorMapReplaceAddress", err);
        }
    }

    XLA_FFI_Stream_Get_Args sargs;
    memset(&sargs, 0, sizeof sargs);
    sargs.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
    sargs.ctx = frame->ctx;
    XLA_FFI_Error *error = frame->api->XLA_FFI_Stream_Get(&sargs);
    if (error) return error;
    void *stream = sargs.stream;

    /* The module lives in the device's primary context, which XLA uses too; make it current for
       the launch and put back whatever this thread had. */
    void *previous = NULL, *context = (void *)(uintptr_t)L[1];
    int err = cu_ctx_get(&previous);
    if (err) return cuda_fail(frame, "cuCtxGetCurrent", err);
    if (previous != context && (err = cu_ctx_set(context)) != 0) return cuda_fail(frame, "cuCtxSetCurrent", err);
    if (L[9] != UINT64_MAX && L[10]) {
        if (L[9] >= (uint64_t)(nargs + nrets)) err = -1;
        else err = cu_memset(ptrs[L[9]], 0, (size_t)L[10], stream);
        if (err) {
            if (previous != context) cu_ctx_set(previous);
            return cuda_fail(frame, "zeroing the workspace (cuMemsetD8Async)", err);
        }
    }
    void *params[1] = {args};
    err = cu_launch((void *)(uintptr_t)L[0], (unsigned)L[2], (unsigned)L[3], (unsigned)L[4], (unsigned)L[5],
                    (unsigned)L[6], (unsigned)L[7], (unsigned)L[8], stream, params, NULL);
    if (previous != context) cu_ctx_set(previous);
    if (err) return cuda_fail(frame, "cuLaunchKernel", err);
    return NULL;
}
