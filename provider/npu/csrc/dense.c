/* Fully connected / 2-D matmul, batched matmul, standalone activations, softmax. */
#include "npu.h"
#include "vec16.h"

/* matmul: M, N, K, transpose_b, act, packed (B in rowgemm.c's panels); slots a, b, bias (N)
 * or -1, y. Split by blocks of columns: with one row (a fully connected layer at batch 1)
 * it streams the weights, which goes faster on every core. */
#ifndef MATMUL_CORE_ROWS
#define MATMUL_CORE_ROWS 64  /* rows of A from which each core takes one block of columns */
#endif

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

/* Returns -1 when there is no host memory for a task's scratch. */
int matmul(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    matmul_ctx cx = {p, slots[s->slot[0]], slots[s->slot[1]],
                     s->slot[2] >= 0 ? slots[s->slot[2]] : NULL, slots[s->slot[3]],
                     act_of(s, 4), p[1]};
    if (p[5] || row_gemm_takes(p[0], p[1], p[2], p[3]))
        return row_gemm(p[0], p[1], p[2], cx.a, cx.b, cx.bias, cx.y, cx.act, (int)p[5]);
    /* at least 64 columns per task; the weights are read at ~8 floats per ns. Each task's
     * sgemm packs all of A again: from MATMUL_CORE_ROWS rows up, one block of columns per
     * core. Alternating in one process, 2 cores, the step alone: 256 x 384 x 1536 1.78 ->
     * 1.61 ms (faster in 8 of 10 rounds), 256 x 1536 x 384 1.76 -> 1.58 (9 of 10), 128 x 384
     * x 1536 0.91 -> 0.89 (9 of 10), 512 x 384 x 384 0.97 -> 0.90 (10 of 10); 64 rows even;
     * MiniLM-L6 at 2 x 128 tokens 52.4 -> 48.1 ms, MiniLM-L3 23.6 -> 22.7 ms. */
    double ns = (double)p[0] * p[1] * p[2] / GEMM_MACS_PER_NS + (double)p[1] * p[2] / 8;
    int64_t limit = p[1] / 64 > 1 ? p[1] / 64 : 1;
    if (p[0] >= MATMUL_CORE_ROWS && limit > cores()) limit = cores();
    int64_t tasks = task_count(ns, limit);
    cx.cols_per_task = (per_task(p[1], tasks) + 15) / 16 * 16;
    parallel(matmul_task, &cx, (p[1] + cx.cols_per_task - 1) / cx.cols_per_task);
    return 0;
}

/* activation: count, act; slots x, y (may be the same memory). One pass from x into y, in
 * blocks over the cores: a copy and then a pass over y in place, on one core, took 106 us
 * for a Relu of 1 MB (2 cores: 106). */
typedef struct {
    const float *x;
    float *y;
    int64_t n, per;
    act_t act;
} activation_ctx;

MULTIVERSION static void activation_task(const void *ctx, int64_t t) {
    const activation_ctx *cx = ctx;
    int64_t lo = t * cx->per, hi = lo + cx->per < cx->n ? lo + cx->per : cx->n;
    if (lo < hi) finish(cx->y + lo, cx->x + lo, hi - lo, 0.0f, NULL, cx->act);
}

void activation(const lnpu_step *s, void **slots) {
    activation_ctx cx = {slots[s->slot[0]], slots[s->slot[1]], s->p[0], 0, act_of(s, 1)};
    int64_t tasks = task_count(cx.n * 8.0 / COPY_BYTES_PER_NS, cx.n / 4096 > 1 ? cx.n / 4096 : 1);
    cx.per = (per_task(cx.n, tasks) + 15) / 16 * 16;
    parallel(activation_task, &cx, (cx.n + cx.per - 1) / cx.per);
}

/* softmax over one axis: outer, length, log, inner (elements after the axis; 0 or 1: the
 * last axis); slots x, y. Sums in double, exps by vec16.h's v16_exp_neg; split by outer rows. */
typedef struct {
    const lnpu_step *s;
    const float *x;
    float *y;
    int64_t per;
} softmax_ctx;

#define SM_CHUNK 1024  /* values whose exps are summed in float lanes before the double sum */

/* One contiguous line's max and sum of exps, the exps stored unless `log_out`: a max, then
 * the exps and their sum in one pass, in 16-value vectors (the tail value by value). */
V16_INLINE double softmax_stats(const float *x, float *y, int64_t len, int log_out, float *max) {
    int64_t whole = len / V16 * V16;
    v16f vm = (v16f){0} - INFINITY;
    for (int64_t i = 0; i < whole; i += V16) {
        v16f v = *(const v16f *)(x + i);
        vm = V16_MAX(vm, v);  /* a NaN is never the max (the sum makes all NaN) */
    }
    V16_FOLD(vm, V16_MAX);
    float m = vm[0];
    for (int64_t i = whole; i < len; i++) m = x[i] > m ? x[i] : m;
    double sum = 0.0;
    for (int64_t c = 0; c < whole; c += SM_CHUNK) {
        int64_t end = c + SM_CHUNK < whole ? c + SM_CHUNK : whole;
        v16f acc = {0};
        for (int64_t i = c; i < end; i += V16) {
            v16f e = v16_exp_neg(*(const v16f *)(x + i) - m);
            if (!log_out) *(v16f *)(y + i) = e;
            acc += e;
        }
        V16_FOLD(acc, V16_ADD);
        sum += acc[0];
    }
    for (int64_t i = whole; i < len; i++) {
        float e = fexp(x[i] - m);
        if (!log_out) y[i] = e;
        sum += e;
    }
    *max = m;
    return sum;
}

/* Contiguous lines (softmax over the last axis), SM_GROUP at a time: every line's statistics,
 * then every line's scaling, so that a line's sum, its division and its scaling do not hold
 * up the next line's exps. MiniLM's [2, 12, 128, 128] attention softmax, the step alone,
 * builds alternating, three rounds: one core 212-218 -> 143-149 us, two 122-134 -> 83-86 us
 * (before: four passes, the max and the sum value by value; onnxruntime's own: about 90
 * and 45 us). */
#define SM_GROUP 8
MULTIVERSION static void softmax_rows(const float *x, float *y, int64_t rows, int64_t len,
                                      int log_out) {
    for (int64_t r0 = 0; r0 < rows; r0 += SM_GROUP) {
        int64_t n = rows - r0 < SM_GROUP ? rows - r0 : SM_GROUP;
        float m[SM_GROUP], k[SM_GROUP];
        for (int64_t r = 0; r < n; r++) {
            double sum = softmax_stats(x + (r0 + r) * len, y + (r0 + r) * len, len, log_out, m + r);
            k[r] = log_out ? (float)log(sum) : (float)(1.0 / sum);
        }
        for (int64_t r = 0; r < n; r++) {
            const float *xr = x + (r0 + r) * len;
            float *yr = y + (r0 + r) * len;
            if (log_out)
                for (int64_t i = 0; i < len; i++) yr[i] = xr[i] - m[r] - k[r];
            else
                for (int64_t i = 0; i < len; i++) yr[i] *= k[r];
        }
    }
}

/* A line whose values lie `stride` apart (softmax over an axis that is not the last). */
static void softmax_strided(const float *x, float *y, int64_t len, int64_t stride, int log_out) {
    float m = -INFINITY;
    double sum = 0.0;
    for (int64_t i = 0; i < len; i++) m = x[i * stride] > m ? x[i * stride] : m;
    for (int64_t i = 0; i < len; i++) {
        float e = fexp(x[i * stride] - m);
        if (!log_out) y[i * stride] = e;
        sum += e;
    }
    if (log_out) {
        float l = (float)log(sum);
        for (int64_t i = 0; i < len; i++) y[i * stride] = x[i * stride] - m - l;
    } else {
        float inv = (float)(1.0 / sum);
        for (int64_t i = 0; i < len; i++) y[i * stride] *= inv;
    }
}

static void softmax_task(const void *ctx, int64_t t) {
    const softmax_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t len = p[1], inner = p[3] > 1 ? p[3] : 1;
    int64_t o0 = t * cx->per, o1 = o0 + cx->per < p[0] ? o0 + cx->per : p[0];
    if (inner == 1 && o0 < o1) {
        softmax_rows(cx->x + o0 * len, cx->y + o0 * len, o1 - o0, len, (int)p[2]);
        return;
    }
    for (int64_t o = o0; o < o1; o++)
        for (int64_t i = 0; i < inner; i++)
            softmax_strided(cx->x + o * len * inner + i, cx->y + o * len * inner + i, len,
                            inner, (int)p[2]);
}

void softmax(const lnpu_step *s, void **slots) {
    softmax_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], 0};
    int64_t outer = s->p[0], inner = s->p[3] > 1 ? s->p[3] : 1;
    int64_t tasks = task_count((double)outer * s->p[1] * inner * 1.0, outer);
    cx.per = per_task(outer, tasks);
    parallel(softmax_task, &cx, (outer + cx.per - 1) / cx.per);
}

/* bmatmul: a batch of GEMMs over broadcast batch dims. p[0] rank r of the batch (<= 4),
 * p[1..5) batch dims, p[5..9) a's batch strides, p[9..13) b's (elements; 0 where
 * broadcast), p[13] M, p[14] N, p[15] K, p[16] transpose_b, p[17] act; slots a, b, bias (N)
 * or -1, y (the batches one after another, each M x N). */
typedef struct {
    const lnpu_step *s;
    const float *a, *b, *bias;
    float *y;
    int64_t per;
} bmatmul_ctx;

static void bmatmul_task(const void *ctx, int64_t t) {
    const bmatmul_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t r = p[0], M = p[13], N = p[14], K = p[15], trans = p[16], batches = 1;
    for (int64_t d = 0; d < r; d++) batches *= p[1 + d];
    act_t act = act_of(cx->s, 17);
    for (int64_t g = t * cx->per; g < (t + 1) * cx->per && g < batches; g++) {
        int64_t rest = g, oa = 0, ob = 0;
        for (int64_t d = r - 1; d >= 0; d--) {
            int64_t i = rest % p[1 + d];
            rest /= p[1 + d];
            oa += i * p[5 + d];
            ob += i * p[9 + d];
        }
        float *y = cx->y + g * M * N;
        sgemm(ROW_MAJOR, NO_TRANS, trans ? TRANS : NO_TRANS, (int)M, (int)N, (int)K, 1.0f,
              cx->a + oa, (int)K, cx->b + ob, trans ? (int)K : (int)N, 0.0f, y, (int)N);
        for (int64_t m = 0; m < M; m++) {
            float *row = y + m * N;
            if (cx->bias)
                for (int64_t j = 0; j < N; j++) row[j] += cx->bias[j];
            epilogue(row, N, 0.0f, NULL, act);
        }
    }
}

void bmatmul(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    bmatmul_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]],
                      s->slot[2] >= 0 ? slots[s->slot[2]] : NULL, slots[s->slot[3]], 0};
    int64_t batches = 1;
    for (int64_t d = 0; d < p[0]; d++) batches *= p[1 + d];
    double ns = (double)batches * p[13] * p[14] * p[15] / GEMM_MACS_PER_NS + batches * 500.0;
    int64_t tasks = task_count(ns, batches);
    cx.per = per_task(batches, tasks);
    parallel(bmatmul_task, &cx, (batches + cx.per - 1) / cx.per);
}
