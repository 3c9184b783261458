/* Fully connected / 2-D matmul, standalone activations, softmax. */
#include "npu.h"

/* matmul: M, N, K, transpose_b, act; slots a, b, bias (N) or -1, y. Split by blocks of
 * columns: with one row (a fully connected layer at batch 1) it streams the weights, which
 * goes faster on every core. */
typedef struct {
    const int64_t *p;
    const float *a, *b, *bias;
    float *y;
    act_t act;
    int64_t cols_per_task;
} matmul_ctx;

static void matmul_task(const void *ctx, int64_t t) {
    const matmul_ctx *cx = ctx;
    int64_t M = cx->p[0], N = cx->p[1], K = cx->p[2], trans = cx->p[3];
    int64_t n0 = t * cx->cols_per_task, n1 = n0 + cx->cols_per_task < N ? n0 + cx->cols_per_task : N;
    if (n0 >= n1) return;
    sgemm(ROW_MAJOR, NO_TRANS, trans ? TRANS : NO_TRANS, (int)M, (int)(n1 - n0), (int)K, 1.0f,
          cx->a, (int)K, cx->b + (trans ? n0 * K : n0), trans ? (int)K : (int)N, 0.0f,
          cx->y + n0, (int)N);
    for (int64_t m = 0; m < M; m++) {
        float *row = cx->y + m * N;
        if (cx->bias)
            for (int64_t j = n0; j < n1; j++) row[j] += cx->bias[j];
        epilogue(row + n0, n1 - n0, 0.0f, NULL, cx->act);
    }
}

void matmul(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    matmul_ctx cx = {p, slots[s->slot[0]], slots[s->slot[1]],
                     s->slot[2] >= 0 ? slots[s->slot[2]] : NULL, slots[s->slot[3]],
                     act_of(s, 4), p[1]};
    /* at least 64 columns per task; the weights are read at ~8 floats per ns */
    double ns = (double)p[0] * p[1] * p[2] / GEMM_MACS_PER_NS + (double)p[1] * p[2] / 8;
    int64_t tasks = task_count(ns, p[1] / 64 > 1 ? p[1] / 64 : 1);
    cx.cols_per_task = (per_task(p[1], tasks) + 15) / 16 * 16;
    parallel(matmul_task, &cx, (p[1] + cx.cols_per_task - 1) / cx.cols_per_task);
}

/* activation: count, act; slots x, y (may be the same memory) */
void activation(const lnpu_step *s, void **slots) {
    const float *x = slots[s->slot[0]];
    float *y = slots[s->slot[1]];
    if (x != y) memcpy(y, x, s->p[0] * sizeof(float));
    epilogue(y, s->p[0], 0.0f, NULL, act_of(s, 1));
}

/* softmax over the last axis: rows, length, log; slots x, y */
void softmax(const lnpu_step *s, void **slots) {
    int64_t rows = s->p[0], len = s->p[1];
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)slots[s->slot[0]] + r * len;
        float *y = (float *)slots[s->slot[1]] + r * len;
        float m = -INFINITY;
        for (int64_t i = 0; i < len; i++) m = x[i] > m ? x[i] : m;
        double sum = 0.0;
        for (int64_t i = 0; i < len; i++) sum += expf(x[i] - m);
        if (s->p[2]) {
            float l = (float)log(sum);
            for (int64_t i = 0; i < len; i++) y[i] = x[i] - m - l;
        } else {
            float inv = (float)(1.0 / sum);
            for (int64_t i = 0; i < len; i++) y[i] = expf(x[i] - m) * inv;
        }
    }
}

