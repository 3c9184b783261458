/* An OrtGraph read in one call: everything GetCapability and Compile need from it, written
 * as one JSON document that provider/ort/graph.py turns into its OrtGraphContents.
 *
 * Read from Python through ctypes, the same walk made ~12 C API calls per value and ~20 per
 * node, a few microseconds each: 11 ms of MobileNetV2's 34 ms session creation. Here the
 * calls cost what a C call costs, and Python parses one string.
 *
 * The document: {"name", "parent" (the graph is a control-flow body), "opset" [[domain,
 * version]], "inputs" / "outputs" / "initializers" [value], "nodes" [{"address", "name",
 * "op", "domain", "inputs" / "outputs" / "implicit" [value or null], "attrs" [[name, kind,
 * value]], "unreadable"}]}, a value being {"name", "type" (ONNX type), "elem", "dims" (null:
 * rank unknown), "symbols", "constant" (an initializer's [data address, element type, dims],
 * or null)}, written so the first time the value is met and by its name only after that (and
 * always when nodes are not read in full). Attribute values: numbers
 * and lists of them; strings as hex of their bytes (they need not be UTF-8); a tensor as
 * the address of an OrtValue the reader owns. A failed call gives {"error": [function,
 * code, message (hex)]}.
 *
 * About 460 lines on purpose: the small JSON writer and name set at the top serve only this
 * walk.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"

enum { ONNX_TYPE_TENSOR = 1 };
enum { ATTR_INT = 1, ATTR_INTS, ATTR_FLOAT, ATTR_FLOATS, ATTR_STRING, ATTR_STRINGS, ATTR_GRAPH,
       ATTR_TENSOR };

typedef struct {
    char *text;
    size_t len, cap;
    int out_of_memory;
    /* the first failed call */
    const char *function;
    int code;
    char message[512];
    /* names of the values written in full so far: an open-addressing set (NULL: free) */
    const char **names;
    size_t names_cap, names_len;
} doc_t;

static void put_bytes(doc_t *d, const char *s, size_t n) {
    if (d->out_of_memory) return;
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap ? d->cap : 4096;
        while (d->len + n + 1 > cap) cap *= 2;
        char *text = realloc(d->text, cap);
        if (!text) {
            d->out_of_memory = 1;
            return;
        }
        d->text = text;
        d->cap = cap;
    }
    memcpy(d->text + d->len, s, n);
    d->len += n;
    d->text[d->len] = 0;
}

static void put(doc_t *d, const char *s) { put_bytes(d, s, strlen(s)); }

static void putf(doc_t *d, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void putf(doc_t *d, const char *format, ...) {
    char buf[64];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(buf, sizeof buf, format, args);
    va_end(args);
    if (n > 0) put_bytes(d, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* A JSON string of a NUL-terminated UTF-8 name (NULL: ""). */
static void put_string(doc_t *d, const char *s) {
    put(d, "\"");
    for (const char *c = s ? s : ""; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u == '"' || u == '\\') {
            char esc[2] = {'\\', (char)u};
            put_bytes(d, esc, 2);
        } else if (u < 0x20) {
            putf(d, "\\u%04x", u);
        } else {
            put_bytes(d, c, 1);
        }
    }
    put(d, "\"");
}

static void put_hex(doc_t *d, const unsigned char *bytes, size_t n) {
    static const char digits[] = "0123456789abcdef";
    put(d, "\"");
    for (size_t i = 0; i < n; i++) {
        char pair[2] = {digits[bytes[i] >> 4], digits[bytes[i] & 15]};
        put_bytes(d, pair, 2);
    }
    put(d, "\"");
}

/* A float32 as the double it widens to, exactly (17 digits; ".0" added to whole numbers,
 * which JSON would read back as ints), or NaN / Infinity. */
static void put_float(doc_t *d, float v) {
    char buf[40];
    if (isnan(v)) put(d, "NaN");
    else if (isinf(v)) put(d, v > 0 ? "Infinity" : "-Infinity");
    else {
        snprintf(buf, sizeof buf, "%.17g", (double)v);
        put(d, buf);
        if (!strpbrk(buf, ".e")) put(d, ".0");
    }
}

/* Records the first failure; 1 when `status` was one. */
static int failed(doc_t *d, const char *function, OrtStatus *status) {
    if (!status) return 0;
    if (!d->function) {
        d->function = function;
        d->code = ort.GetErrorCode(status);
        snprintf(d->message, sizeof d->message, "%s", ort.GetErrorMessage(status));
    }
    ort.ReleaseStatus(status);
    return 1;
}

#define CALL(d, fn, ...) failed((d), #fn, ort.fn(__VA_ARGS__))

/* count/get pairs: a malloc'ed array of n pointers (NULL when n is 0 or on failure) */
typedef OrtStatus *(*count_fn)(const void *, size_t *);
typedef OrtStatus *(*get_fn)(const void *, const void **, size_t);
static const void **items(doc_t *d, const char *count_name, count_fn count, get_fn get,
                          const void *obj, size_t *n) {
    *n = 0;
    if (failed(d, count_name, count(obj, n)) || !*n) return NULL;
    const void **out = calloc(*n, sizeof *out);
    if (!out) {
        d->out_of_memory = 1;
        *n = 0;
        return NULL;
    }
    if (failed(d, count_name, get(obj, out, *n))) {
        free(out);
        *n = 0;
        return NULL;
    }
    return out;
}

/* A JSON list of n int64s. */
static void put_ints(doc_t *d, const int64_t *v, size_t n) {
    put(d, "[");
    for (size_t i = 0; i < n; i++) putf(d, i ? ",%" PRId64 : "%" PRId64, v[i]);
    put(d, "]");
}

/* The element type, dims (NULL: rank unknown) and symbols of a tensor value. */
static void put_type(doc_t *d, const void *value) {
    const void *type_info = NULL, *tensor = NULL;
    int onnx_type = 0;
    if (CALL(d, GetValueInfoTypeInfo, value, &type_info) ||
        CALL(d, GetOnnxTypeFromTypeInfo, type_info, &onnx_type))
        return;
    if (onnx_type == ONNX_TYPE_TENSOR && CALL(d, CastTypeInfoToTensorInfo, type_info, &tensor))
        return;
    if (onnx_type != ONNX_TYPE_TENSOR || !tensor) {
        putf(d, ",\"type\":%d,\"elem\":0,\"dims\":null,\"symbols\":[]", onnx_type);
        return;
    }
    int elem = 0;
    size_t rank = 0;
    if (CALL(d, GetTensorElementType, tensor, &elem) || CALL(d, GetDimensionsCount, tensor, &rank))
        return;
    int64_t dims[rank ? rank : 1];
    const char *symbols[rank ? rank : 1];
    if (rank && (CALL(d, GetDimensions, tensor, dims, rank) ||
                 CALL(d, GetSymbolicDimensions, tensor, symbols, rank)))
        return;
    putf(d, ",\"type\":%d,\"elem\":%d,\"dims\":", onnx_type, elem);
    if (!rank && ort.TensorTypeAndShape_HasShape && !ort.TensorTypeAndShape_HasShape(tensor)) {
        put(d, "null,\"symbols\":[]");  /* rank unknown (before 1.24 this reads as a scalar) */
        return;
    }
    put_ints(d, dims, rank);
    put(d, ",\"symbols\":[");
    for (size_t i = 0; i < rank; i++) {
        if (i) put(d, ",");
        put_string(d, symbols[i]);
    }
    put(d, "]");
}

/* A tensor OrtValue as [data address, element type, [dims]] (null for none): Python views
 * the data in place. */
static void put_tensor(doc_t *d, const void *tensor) {
    void *info = NULL, *data = NULL;
    int elem = 0;
    size_t rank = 0;
    if (!tensor || CALL(d, GetTensorTypeAndShape, tensor, &info)) {
        put(d, "null");
        return;
    }
    int64_t dims[64];
    int ok = !CALL(d, GetTensorElementType, info, &elem) &&
             !CALL(d, GetDimensionsCount, info, &rank) && rank <= 64 &&
             !(rank && CALL(d, GetDimensions, info, dims, rank)) &&
             !CALL(d, GetTensorMutableData, tensor, &data);
    ort.ReleaseTensorTypeAndShapeInfo(info);
    if (!ok) {
        put(d, "null");
        return;
    }
    putf(d, "[%" PRIuPTR ",%d,", (uintptr_t)data, elem);
    put_ints(d, dims, rank);
    put(d, "]");
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Adds `name` to the set of values written in full; 0 when it was there already (or when
 * the set cannot grow: the value is then written in full again, as Python accepts). */
static int first_time(doc_t *d, const char *name) {
    if (2 * (d->names_len + 1) > d->names_cap) {
        size_t cap = d->names_cap ? 2 * d->names_cap : 256;
        const char **names = calloc(cap, sizeof *names);
        if (!names) return 1;
        for (size_t i = 0; i < d->names_cap; i++)
            if (d->names[i]) {
                size_t j = name_hash(d->names[i]) & (cap - 1);
                while (names[j]) j = (j + 1) & (cap - 1);
                names[j] = d->names[i];
            }
        free(d->names);
        d->names = names;
        d->names_cap = cap;
    }
    size_t j = name_hash(name) & (d->names_cap - 1);
    for (; d->names[j]; j = (j + 1) & (d->names_cap - 1))
        if (!strcmp(d->names[j], name)) return 0;
    d->names[j] = name;
    d->names_len++;
    return 1;
}

/* One value: in full the first time (full = 1), else by name; null for a missing optional
 * input. A value's later readings repeat its first (a graph input read again as each
 * consumer's input): by name they halve the document and Python's work on it. */
static void put_value(doc_t *d, const void *value, int full) {
    if (!value) {
        put(d, "null");
        return;
    }
    const char *name = NULL;
    if (CALL(d, GetValueInfoName, value, &name)) return;
    if (!full || !first_time(d, name ? name : "")) {
        put_string(d, name);
        return;
    }
    put(d, "{\"name\":");
    put_string(d, name);
    put_type(d, value);
    bool constant = false;
    const void *initializer = NULL;
    if (!CALL(d, ValueInfo_IsConstantInitializer, value, &constant) && constant)
        CALL(d, ValueInfo_GetInitializerValue, value, &initializer);
    put(d, ",\"constant\":");
    put_tensor(d, initializer);
    put(d, "}");
}

static void put_values(doc_t *d, const char *count_name, count_fn count, get_fn get,
                       const void *obj, int full) {
    size_t n;
    const void **values = items(d, count_name, count, get, obj, &n);
    put(d, "[");
    for (size_t i = 0; i < n; i++) {
        if (i) put(d, ",");
        put_value(d, values[i], full);
    }
    put(d, "]");
    free(values);
}

/* [name, kind, value] of one attribute; a failure or a kind not read makes the node's
 * `unreadable` reason instead (a node with one is never claimed). */
static void put_attribute(doc_t *d, const void *attr, int *first, char *unreadable,
                          size_t unreadable_size) {
    doc_t local = {0};  /* this attribute's own failures: they do not fail the graph */
    int kind = 0;
    const char *name = NULL;
    void *tensor = NULL;
    unsigned char *raw = NULL;
    size_t size = 0;
    if (!CALL(&local, OpAttr_GetType, attr, &kind) && !CALL(&local, OpAttr_GetName, attr, &name)) {
        if (kind == ATTR_GRAPH) {
            snprintf(unreadable, unreadable_size,
                     "has subgraph attributes (control flow stays on CPU)");
            return;
        }
        if (kind < ATTR_INT || kind > ATTR_TENSOR) {
            snprintf(unreadable, unreadable_size,
                     "an attribute cannot be read through the C API: attribute type %d is not "
                     "read by the NPU EP", kind);
            return;
        }
        if (kind == ATTR_TENSOR) {
            CALL(&local, OpAttr_GetTensorAttributeAsOrtValue, attr, &tensor);
        } else {
            /* the size first: its status, "buffer too small", is expected */
            OrtStatus *status = ort.ReadOpAttr(attr, kind, NULL, 0, &size);
            if (status) ort.ReleaseStatus(status);
            raw = malloc(size ? size : 1);
            if (!raw) {  /* the whole document is dropped */
                d->out_of_memory = 1;
                return;
            }
            CALL(&local, ReadOpAttr, attr, kind, raw, size, &size);
        }
    }
    if (local.function) {
        snprintf(unreadable, unreadable_size,
                 "an attribute cannot be read through the C API: %s failed (OrtErrorCode %d): %s",
                 local.function, local.code, local.message);
        free(raw);
        return;
    }
    put(d, *first ? "[" : ",[");
    *first = 0;
    put_string(d, name);
    putf(d, ",%d,", kind);
    if (kind == ATTR_TENSOR) {
        putf(d, "%" PRIuPTR, (uintptr_t)tensor);
    } else if (kind != ATTR_STRING && kind != ATTR_STRINGS) {  /* a number or a list */
        int ints = kind == ATTR_INT || kind == ATTR_INTS;
        int list = kind == ATTR_INTS || kind == ATTR_FLOATS;
        size_t width = ints ? sizeof(int64_t) : sizeof(float), n = size / width;
        if (list) put(d, "[");
        for (size_t i = 0; i < n; i++) {
            if (i) put(d, ",");
            if (ints) {
                int64_t v;
                memcpy(&v, raw + i * width, sizeof v);
                putf(d, "%" PRId64, v);
            } else {
                float v;
                memcpy(&v, raw + i * width, sizeof v);
                put_float(d, v);
            }
        }
        if (list) put(d, "]");
        else if (!n) put(d, ints ? "0" : "0.0");
    } else {
        put_hex(d, raw, size);
    }
    put(d, "]");
    free(raw);
}

static void put_node(doc_t *d, const void *node, int full) {
    const char *name = NULL, *op = NULL, *domain = NULL;
    if (CALL(d, Node_GetName, node, &name) || CALL(d, Node_GetOperatorType, node, &op) ||
        CALL(d, Node_GetDomain, node, &domain))
        return;
    putf(d, "{\"address\":%" PRIuPTR ",\"name\":", (uintptr_t)node);
    put_string(d, name);
    put(d, ",\"op\":");
    put_string(d, op);
    put(d, ",\"domain\":");
    put_string(d, domain);
    put(d, ",\"inputs\":");
    put_values(d, "Node_GetInputs", ort.Node_GetNumInputs, ort.Node_GetInputs, node, full);
    put(d, ",\"outputs\":");
    put_values(d, "Node_GetOutputs", ort.Node_GetNumOutputs, ort.Node_GetOutputs, node, full);
    char unreadable[640] = "";
    put(d, ",\"implicit\":");
    if (full) {
        put_values(d, "Node_GetImplicitInputs", ort.Node_GetNumImplicitInputs,
                   ort.Node_GetImplicitInputs, node, 1);
        put(d, ",\"attrs\":[");
        size_t n;
        const void **attrs = items(d, "Node_GetAttributes", ort.Node_GetNumAttributes,
                                   ort.Node_GetAttributes, node, &n);
        int first = 1;
        for (size_t i = 0; i < n; i++)
            put_attribute(d, attrs[i], &first, unreadable, sizeof unreadable);
        free(attrs);
        put(d, "]");
    } else {
        put(d, "[],\"attrs\":[]");
    }
    put(d, ",\"unreadable\":");
    if (unreadable[0]) put_string(d, unreadable);
    else put(d, "null");
    put(d, "}");
}

/* Read `graph` (nodes in full or by name only) into *out, a malloc'ed NUL-terminated JSON
 * document (free it with litenpu_free). Returns its length, or -1 when out of memory. */
LITENPU_EXPORT int64_t litenpu_read_graph(const void *graph, int full, char **out) {
    doc_t d = {0};
    const char *name = NULL;
    const void *parent = NULL;
    CALL(&d, Graph_GetName, graph, &name);
    CALL(&d, Graph_GetParentNode, graph, &parent);
    put(&d, "{\"name\":");
    put_string(&d, name);
    putf(&d, ",\"parent\":%d,\"opset\":[", parent != NULL);
    size_t sets = 0;
    if (!CALL(&d, Graph_GetNumOperatorSets, graph, &sets) && sets) {
        const char **domains = calloc(sets, sizeof *domains);
        int64_t *versions = calloc(sets, sizeof *versions);
        if (!domains || !versions) d.out_of_memory = 1;
        else if (!CALL(&d, Graph_GetOperatorSets, graph, domains, versions, sets))
            for (size_t i = 0; i < sets; i++) {
                put(&d, i ? ",[" : "[");
                put_string(&d, domains[i]);
                putf(&d, ",%" PRId64 "]", versions[i]);
            }
        free(domains);
        free(versions);
    }
    put(&d, "],\"inputs\":");
    put_values(&d, "Graph_GetInputs", ort.Graph_GetNumInputs, ort.Graph_GetInputs, graph, 1);
    put(&d, ",\"outputs\":");
    put_values(&d, "Graph_GetOutputs", ort.Graph_GetNumOutputs, ort.Graph_GetOutputs, graph, 1);
    put(&d, ",\"initializers\":");
    put_values(&d, "Graph_GetInitializers", ort.Graph_GetNumInitializers,
               ort.Graph_GetInitializers, graph, 1);
    put(&d, ",\"nodes\":[");
    size_t n;
    const void **nodes = items(&d, "Graph_GetNodes", ort.Graph_GetNumNodes, ort.Graph_GetNodes,
                               graph, &n);
    for (size_t i = 0; i < n; i++) {
        if (i) put(&d, ",");
        put_node(&d, nodes[i], full);
    }
    free(nodes);
    free(d.names);
    put(&d, "]}");
    if (d.function) {  /* replace what was written by the failure */
        d.len = 0;
        put(&d, "{\"error\":[");
        put_string(&d, d.function);
        putf(&d, ",%d,", d.code);
        put_hex(&d, (const unsigned char *)d.message, strlen(d.message));
        put(&d, "]}");
    }
    if (d.out_of_memory) {
        free(d.text);
        *out = NULL;
        return -1;
    }
    *out = d.text;
    return (int64_t)d.len;
}

LITENPU_EXPORT void litenpu_free(void *p) { free(p); }
