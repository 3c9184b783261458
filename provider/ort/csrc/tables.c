/* The EP library's function tables (filled from Python at registration), its failure
 * statuses and its copy counters. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ep.h"

litenpu_ort_api ort;
litenpu_npu_api npu;

static char ep_name[64] = "NPUExecutionProvider";
static int ep_fail_code = 1;

#define LITENPU_NAME(type, name, params) #name,
static const char *const ort_names[] = {LITENPU_ORT_FUNCTIONS(LITENPU_NAME) NULL};
static const char *const npu_names[] = {LITENPU_NPU_FUNCTIONS(LITENPU_NAME) NULL};
#undef LITENPU_NAME

/* The member names of each table, NULL-terminated, in table order. */
LITENPU_EXPORT const char *const *litenpu_ort_names(void) { return ort_names; }
LITENPU_EXPORT const char *const *litenpu_npu_names(void) { return npu_names; }

/* Fill a table from `count` function addresses in its names' order; 0 on a count mismatch. */
static int fill(void *table, size_t table_size, const char *const *names, void *const *fns,
                size_t count) {
    size_t n = 0;
    while (names[n]) n++;
    if (count != n || n * sizeof(void *) != table_size) return 0;
    memcpy(table, fns, table_size);
    return 1;
}

/* onnxruntime's functions, the EP's name and the error code its failures carry. */
LITENPU_EXPORT int litenpu_set_ort(void *const *fns, size_t count, const char *name,
                                   int fail_code) {
    snprintf(ep_name, sizeof ep_name, "%s", name);
    ep_fail_code = fail_code;
    return fill(&ort, sizeof ort, ort_names, fns, count);
}

LITENPU_EXPORT int litenpu_set_npu(void *const *fns, size_t count) {
    return fill(&npu, sizeof npu, npu_names, fns, count);
}

OrtStatus *fail_status(const char *where, const char *type, const char *format, ...) {
    char message[LNPU_ERROR_TEXT + 256];
    int at = snprintf(message, sizeof message, "%s %s: %s: ", ep_name, where, type);
    va_list args;
    va_start(args, format);
    if (at >= 0 && (size_t)at < sizeof message)
        vsnprintf(message + at, sizeof message - (size_t)at, format, args);
    va_end(args);
    return ort.CreateStatus(ep_fail_code, message);
}

static atomic_llong copied[4];  /* to device, to host, device to device, copies */

void count_copies(int64_t to_device, int64_t to_host, int64_t device_to_device) {
    atomic_fetch_add_explicit(&copied[0], to_device, memory_order_relaxed);
    atomic_fetch_add_explicit(&copied[1], to_host, memory_order_relaxed);
    atomic_fetch_add_explicit(&copied[2], device_to_device, memory_order_relaxed);
    atomic_fetch_add_explicit(&copied[3], 1, memory_order_relaxed);
}

/* The counters so far: bytes to device, to host, device to device, and copies. */
LITENPU_EXPORT void litenpu_copy_counts(int64_t *out) {
    for (int i = 0; i < 4; i++) out[i] = atomic_load(&copied[i]);
}

int64_t element_size(int type) {
    switch (type) {
    case 2: case 3: case 9: return 1;        /* uint8, int8, bool */
    case 4: case 5: case 10: case 16: return 2;  /* uint16, int16, float16, bfloat16 */
    case 1: case 6: case 12: return 4;       /* float, int32, uint32 */
    case 7: case 11: case 13: return 8;      /* int64, double, uint64 */
    default: return 0;
    }
}

/* OrtEp::IsConcurrentRunSupported: runs of one session may overlap (each takes its own arena;
 * shared memory groups take turns inside). */
LITENPU_EXPORT OrtStatus *litenpu_concurrent_run_supported(void *ep, bool *supported) {
    (void)ep;
    *supported = true;
    return NULL;
}
