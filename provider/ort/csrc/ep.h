/* What the EP library's C files share: the functions they call, and how they fail.
 *
 * No onnxruntime header is available: onnxruntime's types are opaque here, and its functions
 * come from Python (provider/ort/clib.py), which reads them from the OrtApi / OrtEpApi tables
 * at the slots provider/ort/abi.py knows, by the names listed below, in this order. The NPU
 * library's functions (provider/npu/csrc/plane.h) arrive the same way. Each list is the one
 * place its order is written: the struct and the names Python reads are both made from it.
 */
#ifndef LITENPU_EP_H
#define LITENPU_EP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../npu/csrc/plane.h"

#define LITENPU_EXPORT __attribute__((visibility("default")))

typedef struct OrtStatus OrtStatus;

/* onnxruntime's functions: X(return type, OrtApi / OrtEpApi member name, parameters) */
#define LITENPU_ORT_FUNCTIONS(X)                                                                  \
    X(OrtStatus *, CreateStatus, (int code, const char *message))                                 \
    X(void, ReleaseStatus, (OrtStatus * status))                                                  \
    X(OrtStatus *, KernelContext_GetInputCount, (const void *context, size_t *count))             \
    X(OrtStatus *, KernelContext_GetOutputCount, (const void *context, size_t *count))            \
    X(OrtStatus *, KernelContext_GetInput, (const void *context, size_t index, const void **out)) \
    X(OrtStatus *, KernelContext_GetOutput,                                                       \
      (void *context, size_t index, const int64_t *dims, size_t rank, void **out))                \
    X(OrtStatus *, GetTensorTypeAndShape, (const void *value, void **info))                       \
    X(OrtStatus *, GetTensorElementType, (const void *info, int *type))                           \
    X(OrtStatus *, GetDimensionsCount, (const void *info, size_t *rank))                          \
    X(OrtStatus *, GetDimensions, (const void *info, int64_t *dims, size_t rank))                 \
    X(void, ReleaseTensorTypeAndShapeInfo, (void *info))                                          \
    X(OrtStatus *, GetTensorMutableData, (const void *value, void **data))                        \
    X(OrtStatus *, GetTensorSizeInBytes, (const void *value, size_t *nbytes))                     \
    X(const void *, Value_GetMemoryDevice, (const void *value))                                   \
    X(int, MemoryDevice_GetDeviceType, (const void *device))                                      \
    X(uint32_t, MemoryDevice_GetVendorId, (const void *device))                                   \
    X(const char *, GetRunConfigEntry, (const void *run_options, const char *key))              \
    LITENPU_ORT_GRAPH_FUNCTIONS(X)

/* what graph_reader.c reads an OrtGraph with; TensorTypeAndShape_HasShape (onnxruntime 1.24
 * on) is NULL where the running onnxruntime lacks it */
#define LITENPU_ORT_GRAPH_FUNCTIONS(X)                                                            \
    X(int, GetErrorCode, (const OrtStatus *status))                                               \
    X(const char *, GetErrorMessage, (const OrtStatus *status))                                   \
    X(OrtStatus *, Graph_GetName, (const void *graph, const char **out))                         \
    X(OrtStatus *, Graph_GetNumInputs, (const void *graph, size_t *n))                           \
    X(OrtStatus *, Graph_GetInputs, (const void *graph, const void **out, size_t n))             \
    X(OrtStatus *, Graph_GetNumOutputs, (const void *graph, size_t *n))                          \
    X(OrtStatus *, Graph_GetOutputs, (const void *graph, const void **out, size_t n))            \
    X(OrtStatus *, Graph_GetNumInitializers, (const void *graph, size_t *n))                     \
    X(OrtStatus *, Graph_GetInitializers, (const void *graph, const void **out, size_t n))       \
    X(OrtStatus *, Graph_GetNumNodes, (const void *graph, size_t *n))                            \
    X(OrtStatus *, Graph_GetNodes, (const void *graph, const void **out, size_t n))              \
    X(OrtStatus *, Graph_GetParentNode, (const void *graph, const void **out))                   \
    X(OrtStatus *, Graph_GetNumOperatorSets, (const void *graph, size_t *n))                     \
    X(OrtStatus *, Graph_GetOperatorSets,                                                         \
      (const void *graph, const char **domains, int64_t *versions, size_t n))                     \
    X(OrtStatus *, Node_GetName, (const void *node, const char **out))                           \
    X(OrtStatus *, Node_GetOperatorType, (const void *node, const char **out))                   \
    X(OrtStatus *, Node_GetDomain, (const void *node, const char **out))                         \
    X(OrtStatus *, Node_GetNumInputs, (const void *node, size_t *n))                             \
    X(OrtStatus *, Node_GetInputs, (const void *node, const void **out, size_t n))               \
    X(OrtStatus *, Node_GetNumOutputs, (const void *node, size_t *n))                            \
    X(OrtStatus *, Node_GetOutputs, (const void *node, const void **out, size_t n))              \
    X(OrtStatus *, Node_GetNumImplicitInputs, (const void *node, size_t *n))                     \
    X(OrtStatus *, Node_GetImplicitInputs, (const void *node, const void **out, size_t n))       \
    X(OrtStatus *, Node_GetNumAttributes, (const void *node, size_t *n))                         \
    X(OrtStatus *, Node_GetAttributes, (const void *node, const void **out, size_t n))           \
    X(OrtStatus *, OpAttr_GetType, (const void *attr, int *type))                                \
    X(OrtStatus *, OpAttr_GetName, (const void *attr, const char **out))                         \
    X(OrtStatus *, ReadOpAttr, (const void *attr, int type, void *data, size_t len, size_t *out)) \
    X(OrtStatus *, OpAttr_GetTensorAttributeAsOrtValue, (const void *attr, void **value))        \
    X(OrtStatus *, GetValueInfoName, (const void *value_info, const char **out))                 \
    X(OrtStatus *, GetValueInfoTypeInfo, (const void *value_info, const void **out))             \
    X(OrtStatus *, GetOnnxTypeFromTypeInfo, (const void *type_info, int *out))                   \
    X(OrtStatus *, CastTypeInfoToTensorInfo, (const void *type_info, const void **out))          \
    X(OrtStatus *, GetSymbolicDimensions, (const void *info, const char **out, size_t n))        \
    X(OrtStatus *, ValueInfo_IsConstantInitializer, (const void *value_info, bool *out))         \
    X(OrtStatus *, ValueInfo_GetInitializerValue, (const void *value_info, const void **out))    \
    X(bool, TensorTypeAndShape_HasShape, (const void *info))

/* the NPU library's data plane (plane.h): X(return type, name, parameters) */
#define LITENPU_NPU_FUNCTIONS(X)                                                                 \
    X(int64_t, lnpu_heap_alloc, (lnpu_heap * heap, int64_t nbytes, int64_t alignment))           \
    X(int64_t, lnpu_heap_release_address, (lnpu_heap * heap, const void *address))              \
    X(void *, lnpu_heap_address, (lnpu_heap * heap, int64_t offset))                             \
    X(lnpu_plan *, lnpu_runner_hold, (lnpu_runner * runner))                                     \
    X(void, lnpu_plan_drop, (lnpu_plan * plan))                                                  \
    X(int64_t, lnpu_plan_execute, (lnpu_plan * plan, const lnpu_buffer *inputs,                  \
                                   const lnpu_buffer *outputs, int64_t cores, int64_t *stamps,   \
                                   lnpu_copies *copies, lnpu_error *err))

#define LITENPU_MEMBER(type, name, params) type(*name) params;
typedef struct {
    LITENPU_ORT_FUNCTIONS(LITENPU_MEMBER)
} litenpu_ort_api;
typedef struct {
    LITENPU_NPU_FUNCTIONS(LITENPU_MEMBER)
} litenpu_npu_api;
#undef LITENPU_MEMBER

extern litenpu_ort_api ort;   /* filled by litenpu_set_ort */
extern litenpu_npu_api npu;   /* filled by litenpu_set_npu */

/* An ORT_EP_FAIL status "<EP name> <where>: <type>: <message>", the text a Python callback's
 * error gets (provider/ort/status.py reads it back into the litenpu exception). */
OrtStatus *fail_status(const char *where, const char *type, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Bytes copied between CPU and NPU memory (transfer.c and compute.c count, Python reads). */
void count_copies(int64_t to_device, int64_t to_host, int64_t device_to_device);

/* ONNX element type -> bytes per element (0: not a fixed-size type). */
int64_t element_size(int type);

#endif
