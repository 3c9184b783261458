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

MULTIVERSION static float reduce_line(const float *x, int64_t len, int64_t stride, int64_t mode) {
    if (mode == R_MAX || mode == R_MIN) {
        float m = x[0];
        for (int64_t i = 1; i < len; i++) {
            float v = x[i * stride];
            m = mode == R_MAX ? max_nan(m, v) : (m != m ? m : (v != v || v < m ? v : m));
        }
        return m;
    }
    double sum = 0.0;
    if (mode == R_SUMSQUARE || mode == R_L2)
        for (int64_t i = 0; i < len; i++) sum += (double)x[i * stride] * x[i * stride];
    else
        for (int64_t i = 0; i < len; i++) sum += x[i * stride];
    if (mode == R_MEAN) return (float)(sum / (double)len);
    if (mode == R_L2) return (float)sqrt(sum);
    return (float)sum;
}

static void reduce_task(const void *ctx, int64_t t) {
    const reduce_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t len = p[1], inner = p[2];
    for (int64_t o = t * cx->per; o < (t + 1) * cx->per && o < p[0]; o++)
        for (int64_t i = 0; i < inner; i++)
            cx->y[o * inner + i] = reduce_line(cx->x + o * len * inner + i, len, inner, p[3]);
}

/* reduce: outer, len (>= 1), inner, mode; slots x, y */
void reduce(const lnpu_step *s, void **slots) {
    reduce_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], 0};
    int64_t outer = s->p[0];
    int64_t tasks = task_count((double)outer * s->p[1] * s->p[2] * 0.5, outer);
    cx.per = per_task(outer, tasks);
    parallel(reduce_task, &cx, (outer + cx.per - 1) / cx.per);
}
