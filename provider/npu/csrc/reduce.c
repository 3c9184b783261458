/* Reductions over one block of consecutive axes: x seen as (outer, len, inner), y as
 * (outer, inner). Sums accumulate in double; max/min keep a NaN (like numpy's). */
#include "npu.h"

/* reduce modes (provider/npu/ops/reduce.py NATIVE_MODES) */
enum { R_MEAN, R_SUM, R_MAX, R_MIN, R_SUMSQUARE, R_L2 };

typedef struct {
    const lnpu_step *s;
    const float *x;
    float *y;
    int64_t per;
} reduce_ctx;

#define RED_COLUMNS 256  /* lines summed side by side across an inner axis */

/* a line's sum as the mode's result */
static inline float reduced(double sum, int64_t len, int64_t mode) {
    if (mode == R_MEAN) return (float)(sum / (double)len);
    if (mode == R_L2) return (float)sqrt(sum);
    return (float)sum;
}

MULTIVERSION static float reduce_line(const float *x, int64_t len, int64_t stride, int64_t mode) {
    if (mode == R_MAX || mode == R_MIN) {
        float m = x[0];
        for (int64_t i = 1; i < len; i++) {
            float v = x[i * stride];
            m = mode == R_MAX ? max_nan(m, v) : (m != m ? m : (v != v || v < m ? v : m));
        }
        return m;
    }
    int squares = mode == R_SUMSQUARE || mode == R_L2;
    double sum = 0.0;
    if (stride == 1) {
        sum = lane_sum(x, len, 0.0f, squares);
    } else {
        for (int64_t i = 0; i < len; i++)
            sum += squares ? (double)x[i * stride] * x[i * stride] : x[i * stride];
    }
    return reduced(sum, len, mode);
}

/* Sums of one outer block's lines across an inner axis: the lines side by side, RED_COLUMNS
 * at a time, each row of x added to all of them (contiguous, vectorized), in the order a
 * line alone would take (the same bits as reduce_line). */
MULTIVERSION static void reduce_columns(const float *x, float *y, int64_t len, int64_t inner,
                                        int64_t mode) {
    int squares = mode == R_SUMSQUARE || mode == R_L2;
    for (int64_t k0 = 0; k0 < inner; k0 += RED_COLUMNS) {
        int64_t n = inner - k0 < RED_COLUMNS ? inner - k0 : RED_COLUMNS;
        double acc[RED_COLUMNS] = {0};
        for (int64_t i = 0; i < len; i++) {
            const float *row = x + i * inner + k0;
            for (int64_t k = 0; k < n; k++)
                acc[k] += squares ? (double)row[k] * row[k] : (double)row[k];
        }
        for (int64_t k = 0; k < n; k++) y[k0 + k] = reduced(acc[k], len, mode);
    }
}

static void reduce_task(const void *ctx, int64_t t) {
    const reduce_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t len = p[1], inner = p[2], mode = p[3];
    for (int64_t o = t * cx->per; o < (t + 1) * cx->per && o < p[0]; o++) {
        if (inner > 1 && mode != R_MAX && mode != R_MIN) {
            reduce_columns(cx->x + o * len * inner, cx->y + o * inner, len, inner, mode);
            continue;
        }
        for (int64_t i = 0; i < inner; i++)
            cx->y[o * inner + i] = reduce_line(cx->x + o * len * inner + i, len, inner, mode);
    }
}

/* Outer blocks per task for a step over (outer = p[0], len = p[1], inner = p[2]), about
 * half a nanosecond per element on one core; returns the task count. */
static int64_t outer_tasks(const lnpu_step *s, int64_t *per) {
    int64_t outer = s->p[0];
    *per = per_task(outer, task_count((double)outer * s->p[1] * s->p[2] * 0.5, outer));
    return (outer + *per - 1) / *per;
}

/* reduce: outer, len (>= 1), inner, mode; slots x, y */
void reduce(const lnpu_step *s, void **slots) {
    reduce_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], 0};
    int64_t tasks = outer_tasks(s, &cx.per);
    parallel(reduce_task, &cx, tasks);
}


/* ---- ArgMax / ArgMin ---------------------------------------------------------------------
 *
 * arg: outer, len (>= 1), inner, min, x type (ET_*), y type (IT_*); slots x, y. Each
 * output scans its line from the first value, taking a later one only when it compares
 * strictly greater (less): the first index on a tie; a NaN wins only as the first value
 * (nothing compares greater than it) and loses anywhere else, as onnxruntime scans (the
 * numpy kernel's rule). Lines across an inner axis go RED_COLUMNS side by side. */

/* idx[k] for the n (<= RED_COLUMNS) lines starting at x + k, values `stride` apart */
#define ARG_LINES(NAME, T)                                                                   \
    MULTIVERSION static void NAME(const T *x, int64_t len, int64_t stride, int64_t n,       \
                                  int min, int64_t *idx) {                                  \
        T best[RED_COLUMNS];                                                                \
        for (int64_t k = 0; k < n; k++) best[k] = x[k], idx[k] = 0;                         \
        for (int64_t i = 1; i < len; i++) {                                                 \
            const T *row = x + i * stride;                                                  \
            for (int64_t k = 0; k < n; k++) {                                               \
                T v = row[k];                                                               \
                if (min ? v < best[k] : v > best[k]) best[k] = v, idx[k] = i;              \
            }                                                                               \
        }                                                                                   \
    }
ARG_LINES(arg_lines_f32, float)
ARG_LINES(arg_lines_i32, int32_t)
ARG_LINES(arg_lines_i64, int64_t)
#undef ARG_LINES

typedef struct {
    const lnpu_step *s;
    const char *x;
    char *y;
    int64_t per;
} arg_ctx;

static void arg_task(const void *ctx, int64_t t) {
    const arg_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t len = p[1], inner = p[2], xt = p[4], size = element_bytes(xt);
    int min = (int)p[3];
    int64_t idx[RED_COLUMNS];
    for (int64_t o = t * cx->per; o < (t + 1) * cx->per && o < p[0]; o++) {
        for (int64_t k0 = 0; k0 < inner; k0 += RED_COLUMNS) {
            int64_t n = inner - k0 < RED_COLUMNS ? inner - k0 : RED_COLUMNS;
            const char *x = cx->x + (o * len * inner + k0) * size;
            if (xt == ET_F32) arg_lines_f32((const float *)x, len, inner, n, min, idx);
            else if (xt == ET_I32) arg_lines_i32((const int32_t *)x, len, inner, n, min, idx);
            else arg_lines_i64((const int64_t *)x, len, inner, n, min, idx);
            int64_t at = o * inner + k0;
            if (p[5] == IT_I64) memcpy((int64_t *)cx->y + at, idx, (size_t)n * sizeof(int64_t));
            else for (int64_t k = 0; k < n; k++) ((int32_t *)cx->y)[at + k] = (int32_t)idx[k];
        }
    }
}

void argreduce(const lnpu_step *s, void **slots) {
    arg_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], 0};
    int64_t tasks = outer_tasks(s, &cx.per);
    parallel(arg_task, &cx, tasks);
}
