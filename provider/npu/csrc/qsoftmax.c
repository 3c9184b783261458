/* Softmax of 8-bit codes along one axis (a quantized model's Softmax between its
 * DequantizeLinear and QuantizeLinear: ops/quant.py's qwrap of softmax). Each code is
 * dequantized through a 256-entry table of its float value, the softmax is computed in
 * float (exp by fexp) and the result quantized as QuantizeLinear does (divide by the scale,
 * round half to even, saturate). The lines along the axis go QS_BLOCK at a time, side
 * by side, so that the float loops vectorize across them: neighbours along the inner axis
 * (elements after the softmax axis), or, over the last axis, consecutive rows. */
#include "npu.h"

/* Parameters: outer, length of the axis, inner, x's zero point, x signed, y's zero point,
 * y's code min and max; f[0] x's scale, f[1] y's. Slots x, y. */
enum { QS_OUTER, QS_LEN, QS_INNER, QS_ZX, QS_XSIGNED, QS_ZY, QS_LO, QS_HI };
#define QS_BLOCK 64

typedef struct {
    const int64_t *p;
    const uint8_t *x;
    uint8_t *y;
    float value[256];  /* by the code's byte */
    float scale;       /* y's */
    int64_t lines;     /* lines per group: the inner size, or over the last axis every row */
    int64_t blocks;    /* blocks of QS_BLOCK lines per group */
    int64_t group, kstride, bstride;  /* elements from a group, an axis step, a line to the next */
    atomic_int *failed;
} qsm_ctx;

/* Lines [i0, i0 + nb) of group g; e: len x QS_BLOCK floats of scratch. */
MULTIVERSION static void qsm_lines(const qsm_ctx *cx, int64_t g, int64_t i0, int64_t nb,
                                   float *e) {
    const int64_t *p = cx->p;
    int64_t len = p[QS_LEN], ks = cx->kstride, bs = cx->bstride;
    const uint8_t *x = cx->x + g * cx->group + i0 * bs;
    uint8_t *y = cx->y + g * cx->group + i0 * bs;
    float m[QS_BLOCK], sum[QS_BLOCK], lo = (float)(p[QS_LO] - p[QS_ZY]);
    float hi = (float)(p[QS_HI] - p[QS_ZY]), scale = cx->scale;
    int32_t zy = (int32_t)p[QS_ZY];
    for (int64_t b = 0; b < nb; b++) m[b] = -INFINITY, sum[b] = 0.0f;
    for (int64_t k = 0; k < len; k++)
        for (int64_t b = 0; b < nb; b++) {
            float v = cx->value[x[k * ks + b * bs]];
            e[k * QS_BLOCK + b] = v;
            m[b] = v > m[b] ? v : m[b];
        }
    for (int64_t k = 0; k < len; k++)
        for (int64_t b = 0; b < nb; b++) {
            float v = fexp(e[k * QS_BLOCK + b] - m[b]);
            sum[b] += v;
            e[k * QS_BLOCK + b] = v;
        }
    for (int64_t k = 0; k < len; k++)
        for (int64_t b = 0; b < nb; b++) {
            float v = e[k * QS_BLOCK + b] / sum[b] / scale;
            v = v >= lo ? v : lo;
            v = v > hi ? hi : v;
            y[k * ks + b * bs] = (uint8_t)((int32_t)rne(v) + zy);
        }
}

static void qsm_task(const void *ctx, int64_t t) {
    const qsm_ctx *cx = ctx;
    int64_t i0 = t % cx->blocks * QS_BLOCK;
    float *e = thread_scratch(cx->p[QS_LEN] * QS_BLOCK);
    if (!e) {
        atomic_store(cx->failed, 1);
        return;
    }
    qsm_lines(cx, t / cx->blocks, i0, cx->lines - i0 < QS_BLOCK ? cx->lines - i0 : QS_BLOCK, e);
}

/* Returns -1 when there is no host memory for a task's scratch. */
int qsoftmax(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    atomic_int failed = 0;
    int64_t len = p[QS_LEN], inner = p[QS_INNER] > 1 ? p[QS_INNER] : 1, groups = p[QS_OUTER];
    qsm_ctx cx = {p, slots[s->slot[0]], slots[s->slot[1]], {0}, s->f[1], inner, 0,
                  len * inner, inner, 1, &failed};
    if (inner == 1) {  /* the last axis: every row a line */
        cx.lines = groups;
        cx.group = 0;
        cx.bstride = len;
        groups = 1;
    }
    cx.blocks = (cx.lines + QS_BLOCK - 1) / QS_BLOCK;
    for (int b = 0; b < 256; b++) {
        int32_t code = p[QS_XSIGNED] ? (int32_t)(int8_t)b : b;
        cx.value[b] = (float)(code - (int32_t)p[QS_ZX]) * s->f[0];
    }
    if (len > 0) parallel(qsm_task, &cx, groups * cx.blocks);
    return atomic_load(&failed) ? -1 : 0;
}
