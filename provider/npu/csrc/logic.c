/* Comparisons into bool masks and Where (cond ? x : y), with numpy broadcasting: the masks
 * of a transformer's attention (ops/elementwise.py's compare and where). A NaN compares as
 * numpy's does (only not_equal holds); logical ops take any nonzero as true. */
#include "npu.h"

/* compare op codes (ops/elementwise.py COMPARE_CODES) and input types */
enum { C_EQ, C_LT, C_GT, C_LE, C_GE, C_NE, C_AND, C_OR };
enum { LT_F32, LT_I32, LT_I64, LT_BOOL };

/* Both kernels walk the output by rows of its last (merged) dim: p[1] rank r (<= 6),
 * p[2..2+r) output dims, then per operand r element strides (0 where broadcast). */
#define DIMS 2
#define STRIDES(i) (8 + 6 * (i))

typedef struct {
    const lnpu_step *s;
    void **slots;
    int64_t rows_per;
} logic_ctx;

/* Element offsets of row `row` in each of `n` operands. */
static void row_offsets(const int64_t *p, int64_t row, int n, int64_t *off) {
    int64_t r = p[1];
    for (int i = 0; i < n; i++) off[i] = 0;
    for (int64_t d = r - 2; d >= 0; d--) {
        int64_t at = row % p[DIMS + d];
        row /= p[DIMS + d];
        for (int i = 0; i < n; i++) off[i] += at * p[STRIDES(i) + d];
    }
}

/* One row of compare results: a loop per op (a switch inside the loop kept it from
 * vectorizing: an attention mask's IsNaN over 2 x 12 x 128 x 128 scores took 0.47 ms). */
#define COMPARE_LOOP(T, expr)                                                               \
    for (int64_t i = 0; i < inner; i++) {                                                   \
        T u = a[i * sa], v = b[i * sb];                                                     \
        y[i] = (uint8_t)(expr);                                                             \
    }                                                                                       \
    break;
#define COMPARE_ROW(T)                                                                      \
    {                                                                                       \
        const T *a = (const T *)cx->slots[s->slot[0]] + off[0];                             \
        const T *b = (const T *)cx->slots[s->slot[1]] + off[1];                             \
        switch (op) {                                                                       \
        case C_EQ: COMPARE_LOOP(T, u == v)                                                  \
        case C_LT: COMPARE_LOOP(T, u < v)                                                   \
        case C_GT: COMPARE_LOOP(T, u > v)                                                   \
        case C_LE: COMPARE_LOOP(T, u <= v)                                                  \
        case C_GE: COMPARE_LOOP(T, u >= v)                                                  \
        case C_NE: COMPARE_LOOP(T, u != v)                                                  \
        case C_AND: COMPARE_LOOP(T, u != 0 && v != 0)                                       \
        default: COMPARE_LOOP(T, u != 0 || v != 0)                                          \
        }                                                                                   \
    }

/* compare: p[0] op, p[20] input type; slots a, b, y (bool) */
static void compare_task(const void *ctx, int64_t t) {
    const logic_ctx *cx = ctx;
    const lnpu_step *s = cx->s;
    const int64_t *p = s->p;
    int64_t r = p[1], inner = p[DIMS + r - 1], rows = 1, op = p[0];
    for (int64_t d = 0; d < r - 1; d++) rows *= p[DIMS + d];
    int64_t sa = p[STRIDES(0) + r - 1], sb = p[STRIDES(1) + r - 1];
    for (int64_t row = t * cx->rows_per; row < (t + 1) * cx->rows_per && row < rows; row++) {
        int64_t off[2];
        row_offsets(p, row, 2, off);
        uint8_t *y = (uint8_t *)cx->slots[s->slot[2]] + row * inner;
        switch (p[20]) {
        case LT_F32: COMPARE_ROW(float) break;
        case LT_I32: COMPARE_ROW(int32_t) break;
        case LT_I64: COMPARE_ROW(int64_t) break;
        default: COMPARE_ROW(uint8_t) break;
        }
    }
}

#define WHERE_ROW(T)                                                                        \
    {                                                                                       \
        const T *xt = (const T *)x, *yt = (const T *)y;                                     \
        T *o = (T *)out;                                                                    \
        for (int64_t i = 0; i < inner; i++) o[i] = c[i * sc] ? xt[i * sx] : yt[i * sy];     \
    }

/* where: p[26] element bytes; slots cond, x, y, out */
static void where_task(const void *ctx, int64_t t) {
    const logic_ctx *cx = ctx;
    const lnpu_step *s = cx->s;
    const int64_t *p = s->p;
    int64_t r = p[1], inner = p[DIMS + r - 1], rows = 1, size = p[26];
    for (int64_t d = 0; d < r - 1; d++) rows *= p[DIMS + d];
    int64_t sc = p[STRIDES(0) + r - 1], sx = p[STRIDES(1) + r - 1], sy = p[STRIDES(2) + r - 1];
    for (int64_t row = t * cx->rows_per; row < (t + 1) * cx->rows_per && row < rows; row++) {
        int64_t off[3];
        row_offsets(p, row, 3, off);
        const uint8_t *c = (const uint8_t *)cx->slots[s->slot[0]] + off[0];
        const char *x = (const char *)cx->slots[s->slot[1]] + off[1] * size;
        const char *y = (const char *)cx->slots[s->slot[2]] + off[2] * size;
        char *out = (char *)cx->slots[s->slot[3]] + row * inner * size;
        switch (size) {  /* typed: a memcpy of a run-time size per element cost ~2 ns */
        case 1: WHERE_ROW(uint8_t) break;
        case 2: WHERE_ROW(uint16_t) break;
        case 4: WHERE_ROW(uint32_t) break;
        case 8: WHERE_ROW(uint64_t) break;
        default:
            for (int64_t i = 0; i < inner; i++)
                memcpy(out + i * size, c[i * sc] ? x + i * sx * size : y + i * sy * size, size);
        }
    }
}

static void run_rows(const lnpu_step *s, void **slots, task_fn fn) {
    const int64_t *p = s->p;
    int64_t r = p[1], rows = 1;
    for (int64_t d = 0; d < r - 1; d++) rows *= p[DIMS + d];
    logic_ctx cx = {s, slots, 0};
    cx.rows_per = per_task(rows, task_count((double)rows * p[DIMS + r - 1], rows));
    parallel(fn, &cx, (rows + cx.rows_per - 1) / cx.rows_per);
}

void compare(const lnpu_step *s, void **slots) { run_rows(s, slots, compare_task); }

void where(const lnpu_step *s, void **slots) { run_rows(s, slots, where_task); }
