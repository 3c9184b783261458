/* TopK: the k best values of each line along one axis, sorted, and their indices. "Best"
 * is a strict total order, so the result is the numpy kernel's (provider/npu/ops/topk.py,
 * a stable sort): larger (smaller) values first, equal values by lower index, and NaNs
 * greatest (first when the largest are asked for, last otherwise), as numpy sorts them.
 * Each line keeps its k best in a heap whose root is the worst kept (n log k), then sorts
 * them in place. */
#include "npu.h"

enum { TK_OUTER, TK_N, TK_INNER, TK_K, TK_LARGEST, TK_XTYPE, TK_ITYPE };

#define TK_DEFINE(NAME, T, ISNAN)                                                            \
    typedef struct { T v; int64_t i; } NAME##_item;                                           \
    static inline int NAME##_better(NAME##_item a, NAME##_item b, int largest) {             \
        int na = ISNAN(a.v), nb = ISNAN(b.v);                                                 \
        if (na != nb) return largest ? na : nb;                                               \
        if (!na && a.v != b.v) return largest ? a.v > b.v : a.v < b.v;                        \
        return a.i < b.i;                                                                     \
    }                                                                                         \
    /* sift heap[at] down a heap of `size` items whose root is the worst */                   \
    static void NAME##_sift(NAME##_item *heap, int64_t size, int64_t at, int largest) {       \
        for (;;) {                                                                            \
            int64_t worst = at, l = 2 * at + 1, r = l + 1;                                    \
            if (l < size && NAME##_better(heap[worst], heap[l], largest)) worst = l;          \
            if (r < size && NAME##_better(heap[worst], heap[r], largest)) worst = r;          \
            if (worst == at) return;                                                          \
            NAME##_item t = heap[at];                                                         \
            heap[at] = heap[worst], heap[worst] = t, at = worst;                              \
        }                                                                                     \
    }                                                                                         \
    /* the k best of x[0], x[stride], ... (n values) into heap[0..k), best first */           \
    static void NAME##_line(const T *x, int64_t n, int64_t stride, int64_t k, int largest,    \
                            NAME##_item *heap) {                                              \
        for (int64_t j = 0; j < n; j++) {                                                     \
            NAME##_item e = {x[j * stride], j};                                               \
            if (j < k) {                                                                      \
                heap[j] = e;                                                                  \
                if (j == k - 1)                                                               \
                    for (int64_t at = k / 2 - 1; at >= 0; at--) NAME##_sift(heap, k, at, largest); \
            } else if (NAME##_better(e, heap[0], largest)) {                                  \
                heap[0] = e;                                                                  \
                NAME##_sift(heap, k, 0, largest);                                             \
            }                                                                                 \
        }                                                                                     \
        for (int64_t size = k - 1; size > 0; size--) { /* the worst to the end, in turn */    \
            NAME##_item t = heap[0];                                                          \
            heap[0] = heap[size], heap[size] = t;                                             \
            NAME##_sift(heap, size, 0, largest);                                              \
        }                                                                                     \
    }
#define NO_NAN(v) 0
#define F_NAN(v) ((v) != (v))
TK_DEFINE(tk_f32, float, F_NAN)
TK_DEFINE(tk_i32, int32_t, NO_NAN)
TK_DEFINE(tk_i64, int64_t, NO_NAN)
#undef TK_DEFINE

typedef struct {
    const lnpu_step *s;
    const char *x;
    char *values, *indices;
    int64_t per;
    atomic_int *failed;
} topk_ctx;

#define TK_OUT(NAME, T)                                                                      \
    {                                                                                         \
        NAME##_item *heap = (NAME##_item *)scratch;                                           \
        NAME##_line((const T *)cx->x + o * n * inner + in, n, inner, k, largest, heap);       \
        for (int64_t j = 0; j < k; j++) {                                                     \
            int64_t at = (o * k + j) * inner + in;                                            \
            ((T *)cx->values)[at] = heap[j].v;                                                \
            if (!cx->indices) continue;                                                       \
            if (p[TK_ITYPE] == IT_I64) ((int64_t *)cx->indices)[at] = heap[j].i;                        \
            else ((int32_t *)cx->indices)[at] = (int32_t)heap[j].i;                           \
        }                                                                                     \
    }

static void topk_task(const void *ctx, int64_t t) {
    const topk_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t n = p[TK_N], inner = p[TK_INNER], k = p[TK_K], lines = p[TK_OUTER] * inner;
    int largest = (int)p[TK_LARGEST];
    float *scratch = thread_scratch(4 * k);  /* k items of a value and an index: 16 bytes */
    if (!scratch) {
        atomic_store(cx->failed, 1);
        return;
    }
    for (int64_t line = t * cx->per; line < (t + 1) * cx->per && line < lines; line++) {
        int64_t o = line / inner, in = line % inner;
        if (p[TK_XTYPE] == ET_F32) TK_OUT(tk_f32, float)
        else if (p[TK_XTYPE] == ET_I32) TK_OUT(tk_i32, int32_t)
        else TK_OUT(tk_i64, int64_t)
    }
}
#undef TK_OUT

/* topk: outer, n, inner, k (1..n), largest, value type (ET_*), index type (IT_*); slots x, values,
 * indices (-1: none). Returns -1 when a core found no memory for its heap. */
int topk(const lnpu_step *s, void **slots) {
    int64_t lines = s->p[TK_OUTER] * s->p[TK_INNER];
    if (!lines || !s->p[TK_K]) return 0;
    atomic_int failed = 0;
    topk_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]],
                   s->slot[2] >= 0 ? slots[s->slot[2]] : NULL, 0, &failed};
    int64_t tasks = task_count((double)lines * s->p[TK_N] * 4.0, lines);
    cx.per = per_task(lines, tasks);
    parallel(topk_task, &cx, (lines + cx.per - 1) / cx.per);
    return atomic_load(&failed) ? -1 : 0;
}
