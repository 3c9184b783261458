/* OrtDataTransferImpl in C: onnxruntime's copies between CPU memory and NPU memory (feeding
 * numpy inputs to the NPU, fetching NPU outputs, OrtValue.numpy() on an NPU value), counted
 * (provider/ort/transfer.py reads the counters). */
#include <string.h>

#include "ep.h"

enum { DEVICE_CPU = 0, DEVICE_NPU = 3 };  /* OrtMemoryInfoDeviceType */
enum { KIND_OTHER, KIND_CPU, KIND_NPU };

typedef struct {
    /* OrtDataTransferImpl, as onnxruntime reads it */
    uint32_t ort_version_supported;
    void (*Release)(void *self);
    bool (*CanCopy)(const void *self, const void *src, const void *dst);
    OrtStatus *(*CopyTensors)(void *self, const void **src, void **dst, void **streams,
                              size_t count);
    /* ours */
    uint32_t vendor_id;
} transfer;

static int kind(const transfer *t, const void *device) {
    int type = ort.MemoryDevice_GetDeviceType(device);
    if (type == DEVICE_CPU) return KIND_CPU;
    if (type == DEVICE_NPU && ort.MemoryDevice_GetVendorId(device) == t->vendor_id) return KIND_NPU;
    return KIND_OTHER;
}

static void release(void *self) { (void)self; /* the factory's, for the life of the process */ }

static bool can_copy(const void *self, const void *src, const void *dst) {
    int a = kind(self, src), b = kind(self, dst);
    return (a == KIND_NPU || b == KIND_NPU) && a != KIND_OTHER && b != KIND_OTHER;
}

static OrtStatus *copy_tensors(void *self, const void **src, void **dst, void **streams,
                               size_t count) {
    (void)streams;
    const transfer *t = self;
    for (size_t i = 0; i < count; i++) {
        size_t nbytes, dst_bytes;
        OrtStatus *status = ort.GetTensorSizeInBytes(src[i], &nbytes);
        if (!status) status = ort.GetTensorSizeInBytes(dst[i], &dst_bytes);
        if (status) return status;
        if (nbytes != dst_bytes)
            return fail_status("DataTransfer.CopyTensors", "ValueError",
                               "CopyTensors: source has %zu bytes, destination %zu", nbytes,
                               dst_bytes);
        if (nbytes) {
            void *from, *to;
            status = ort.GetTensorMutableData(src[i], &from);
            if (!status) status = ort.GetTensorMutableData(dst[i], &to);
            if (status) return status;
            memmove(to, from, nbytes);
        }
        int a = kind(t, ort.Value_GetMemoryDevice(src[i]));
        int b = kind(t, ort.Value_GetMemoryDevice(dst[i]));
        int64_t n = (int64_t)nbytes;
        if (a == KIND_CPU && b == KIND_NPU) count_copies(n, 0, 0);
        else if (a == KIND_NPU && b == KIND_CPU) count_copies(0, n, 0);
        else count_copies(0, 0, n);
    }
    return NULL;
}

/* The factory's data transfer between CPU memory and NPU memory of `vendor_id`. */
LITENPU_EXPORT void *litenpu_transfer_new(uint32_t api_version, uint32_t vendor_id) {
    transfer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->ort_version_supported = api_version;
    t->Release = release;
    t->CanCopy = can_copy;
    t->CopyTensors = copy_tensors;
    t->vendor_id = vendor_id;
    return t;
}
