/* CumSum along one axis (x as (outer, n, inner)): inclusive or exclusive, forward or from
 * the end, in the element type, one row after the other: each running sum adds in the
 * order numpy's cumsum adds (the first row taken as it is), so float32 gives the numpy
 * kernel's bits (provider/npu/ops/cumsum.py) and integers wrap as numpy's do (computed
 * unsigned). Rows of the inner axis go side by side, whole vectors. */
#include "npu.h"

enum { CS_OUTER, CS_N, CS_INNER, CS_EXCLUSIVE, CS_REVERSE, CS_TYPE };
#define CS_CHUNK 4096  /* inner elements per task */

/* y's rows of one outer block, columns [c0, c1): y[j] = y[prev] + x[...] in scan order */
#define CS_ROWS(NAME, T, A)                                                                   \
    MULTIVERSION static void NAME(const T *x, T *y, int64_t n, int64_t inner, int64_t c0,    \
                                  int64_t c1, int exclusive, int reverse) {                  \
        int64_t prev = -1; /* the previous row of the scan */                               \
        for (int64_t k = 0; k < n; k++) {                                                     \
            int64_t j = reverse ? n - 1 - k : k;                                              \
            T *out = y + j * inner;                                                           \
            if (exclusive && k == 0) {                                                        \
                for (int64_t c = c0; c < c1; c++) out[c] = 0;                                 \
            } else if (k == (exclusive ? 1 : 0)) {                                            \
                const T *in = x + (exclusive ? prev : j) * inner;                             \
                for (int64_t c = c0; c < c1; c++) out[c] = in[c];                             \
            } else {                                                                          \
                const T *in = x + (exclusive ? prev : j) * inner, *last = y + prev * inner;   \
                for (int64_t c = c0; c < c1; c++) out[c] = (T)((A)last[c] + (A)in[c]);        \
            }                                                                                 \
            prev = j;                                                                         \
        }                                                                                     \
    }
CS_ROWS(cs_rows_f32, float, float)
CS_ROWS(cs_rows_i32, int32_t, uint32_t)
CS_ROWS(cs_rows_i64, int64_t, uint64_t)
#undef CS_ROWS

typedef struct {
    const lnpu_step *s;
    const char *x;
    char *y;
    int64_t chunks;  /* per outer block */
} cs_ctx;

static void cumsum_task(const void *ctx, int64_t t) {
    const cs_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t n = p[CS_N], inner = p[CS_INNER], o = t / cx->chunks, c0 = t % cx->chunks * CS_CHUNK;
    int64_t c1 = c0 + CS_CHUNK < inner ? c0 + CS_CHUNK : inner;
    int64_t size = element_bytes(p[CS_TYPE]), block = o * n * inner * size;
    int ex = (int)p[CS_EXCLUSIVE], rev = (int)p[CS_REVERSE];
    if (p[CS_TYPE] == ET_F32)
        cs_rows_f32((const float *)(cx->x + block), (float *)(cx->y + block), n, inner, c0, c1, ex, rev);
    else if (p[CS_TYPE] == ET_I32)
        cs_rows_i32((const int32_t *)(cx->x + block), (int32_t *)(cx->y + block), n, inner, c0, c1, ex, rev);
    else
        cs_rows_i64((const int64_t *)(cx->x + block), (int64_t *)(cx->y + block), n, inner, c0, c1, ex, rev);
}

/* cumsum: outer, n, inner, exclusive, reverse, type; slots x, y (not the same memory) */
void cumsum(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    if (!p[CS_OUTER] || !p[CS_N] || !p[CS_INNER]) return;
    cs_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], (p[CS_INNER] + CS_CHUNK - 1) / CS_CHUNK};
    parallel(cumsum_task, &cx, p[CS_OUTER] * cx.chunks);
}
