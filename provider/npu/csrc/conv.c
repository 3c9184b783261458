/* Convolution as im2col + OpenBLAS GEMM (with a fused epilogue), or direct (direct.c). */
#include "npu.h"

#ifndef GEMM_TASKS_PER_CORE
#define GEMM_TASKS_PER_CORE 1
#endif
#ifndef GEMM_CHUNK_COLS
#define GEMM_CHUNK_COLS 256     /* a task's GEMM and epilogue go by this many columns, so the
                                 * epilogue finds them in cache (squeezenet 5% faster) ... */
#endif
#ifndef GEMM_CHUNK_MAX_A
#define GEMM_CHUNK_MAX_A 4096   /* ... when its block of weights has at most this many floats:
                                 * each GEMM call packs them again */
#endif
#ifndef GEMM_MIN_COLS
#define GEMM_MIN_COLS 96        /* narrower GEMMs run well below OpenBLAS's peak */
#endif

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y, *cols;
    act_t act;
    int64_t n;                    /* image */
    int64_t mblocks, nblocks, rows_per_task;
    float *phase;                 /* strided convs: the image's column phases, else NULL */
    int64_t wq;                   /* width of a phase row */
    float *out;                   /* conv_batched: the GEMM's (O, N*OH*OW) result */
} conv_ctx;

/* Rows [r0, r1), columns [k0, k1) of the image's im2col matrix (C*KH*KW, OH*OW): row
 * (c, i, j) holds input channel c shifted by tap (i, j), zero where the tap falls in the
 * padding; column k is output pixel (k / OW, k % OW). */
MULTIVERSION static void im2col(const conv_ctx *cx, int64_t r0, int64_t r1, int64_t k0, int64_t k1) {
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], OW = p[C_OW], KH = p[C_KH], KW = p[C_KW];
    int64_t SH = p[C_SH], SW = p[C_SW], DH = p[C_DH], DW = p[C_DW], PT = p[C_PT], PL = p[C_PL];
    int64_t HW = p[C_OH] * OW;
    const float *x = cx->x + cx->n * p[C_C] * H * W;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r / (KH * KW), i = r / KW % KH, j = r % KW;
        const float *xc = x + c * H * W;
        float *row = cx->cols + r * HW;
        int64_t off = j * DW - PL, lo, hi;
        valid_columns(off, SW, W, OW, &lo, &hi);
        for (int64_t oh = k0 / OW; oh * OW < k1; oh++) {
            int64_t a = k0 > oh * OW ? k0 - oh * OW : 0;       /* this row's columns [a, b) */
            int64_t b = k1 < (oh + 1) * OW ? k1 - oh * OW : OW;
            float *out = row + oh * OW;
            int64_t ih = oh * SH + i * DH - PT;
            if (ih < 0 || ih >= H) { memset(out + a, 0, (b - a) * sizeof(float)); continue; }
            if (cx->phase) {  /* a contiguous, already padded phase row */
                const float *src = cx->phase + ((c * SW + j * DW % SW) * H + ih) * cx->wq
                                   + j * DW / SW;
                memcpy(out + a, src + a, (b - a) * sizeof(float));
                continue;
            }
            const float *in = xc + ih * W + off;  /* column q reads in[q * SW] */
            int64_t va = a > lo ? a : lo, vb = b < hi ? b : hi;  /* valid part */
            if (va >= vb) { memset(out + a, 0, (b - a) * sizeof(float)); continue; }
            if (va > a) memset(out + a, 0, (va - a) * sizeof(float));
            if (SW == 1) memcpy(out + va, in + va, (vb - va) * sizeof(float));
            else for (int64_t q = va; q < vb; q++) out[q] = in[q * SW];
            if (b > vb) memset(out + vb, 0, (b - vb) * sizeof(float));
        }
    }
}

/* Column phases of a strided conv's image, so that im2col copies contiguous rows:
 *     phase[c][pw][ih][q] = x[c][ih][q * SW + pw - PL]  (0 outside the input).
 * Task t: channel t. */
MULTIVERSION static void phase_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], SW = p[C_SW];
    fill_row_phase(cx->phase + t * SW * H * cx->wq, H * cx->wq, H, cx->wq,
                   cx->x + (cx->n * p[C_C] + t) * H * W, H, W, 1, SW, 0, 0, p[C_PL]);
}

static void im2col_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    int64_t rows = cx->p[C_C] * cx->p[C_KH] * cx->p[C_KW];
    int64_t r0 = t * cx->rows_per_task, r1 = r0 + cx->rows_per_task;
    im2col(cx, r0, r1 < rows ? r1 : rows, 0, cx->p[C_OH] * cx->p[C_OW]);
}

/* One GEMM block, output channels [o0, o0 + m) of group g by output pixels [n0, n1), with its
 * epilogue (bias, residual, activation), by chunks of columns. A channels-last output block
 * is Ycl[pixels][channels] = X^T W^T, its bias added along each row (no residual: the
 * lowering gives none to a channels-last output). */
static void gemm_block(const conv_ctx *cx, int64_t g, int64_t o0, int64_t m, int64_t n0,
                       int64_t n1) {
    const int64_t *p = cx->p;
    int64_t G = p[C_G], C = p[C_C], O = p[C_O], HW = p[C_OH] * p[C_OW];
    int64_t K = C / G * p[C_KH] * p[C_KW];
    const float *w = cx->w + o0 * K;
    const float *x = p[C_IM2COL] ? cx->cols + g * K * HW : cx->x + (cx->n * C + g * (C / G)) * HW;
    int64_t chunk = m * K <= GEMM_CHUNK_MAX_A ? GEMM_CHUNK_COLS : n1 - n0;
    for (int64_t c0 = n0; c0 < n1; c0 += chunk) {
        int64_t cols = (c0 + chunk < n1 ? c0 + chunk : n1) - c0;
        if (p[C_YCL]) {  /* Ycl[c0:c1][o0:o0+m] = X[:, c0:c1]^T W^T */
            float *y = cx->y + (cx->n * HW + c0) * O + o0;
            sgemm(ROW_MAJOR, TRANS, TRANS, (int)cols, (int)m, (int)K, 1.0f, x + c0, (int)HW, w,
                  (int)K, 0.0f, y, (int)O);
            epilogue_rows(y, cols, O, m, cx->bias ? cx->bias + o0 : NULL, cx->act);
        } else {
            float *y = cx->y + (cx->n * O + o0) * HW + c0;
            const float *res = cx->res ? cx->res + (cx->n * O + o0) * HW + c0 : NULL;
            sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)m, (int)cols, (int)K, 1.0f, w, (int)K,
                  x + c0, (int)HW, 0.0f, y, (int)HW);
            for (int64_t r = 0; r < m; r++)
                epilogue(y + r * HW, cols, cx->bias ? cx->bias[o0 + r] : 0.0f,
                         res ? res + r * HW : NULL, cx->act);
        }
    }
}

/* Task t: group g, a block of output channels and a block of output columns: one GEMM and
 * its epilogue (bias, residual, activation) while the block is in cache. */
static void gemm_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t G = p[C_G], OG = p[C_O] / G, HW = p[C_OH] * p[C_OW];
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW];
    int64_t nb = t % cx->nblocks, mb = t / cx->nblocks % cx->mblocks, g = t / cx->nblocks / cx->mblocks;
    int64_t mstep = (OG + cx->mblocks - 1) / cx->mblocks;
    int64_t nstep = ((HW + cx->nblocks - 1) / cx->nblocks + 15) / 16 * 16;
    int64_t m0 = mb * mstep, m1 = m0 + mstep < OG ? m0 + mstep : OG;
    int64_t n0 = nb * nstep, n1 = n0 + nstep < HW ? n0 + nstep : HW;
    if (m0 >= m1 || n0 >= n1) return;
    if (p[C_IM2COL] && cx->mblocks == 1)  /* this task alone reads these columns: build them
                                            * now, so the GEMM finds them in cache */
        im2col(cx, g * K, (g + 1) * K, n0, n1);
    gemm_block(cx, g, g * OG + m0, m1 - m0, n0, n1);
}

/* ---- small planes, the batch in one GEMM ------------------------------------------------
 *
 * Below GEMM_MIN_COLS output pixels an image's GEMM is too narrow for OpenBLAS, and each
 * image paid its own task hand-offs and, per channel, phase planes and row copies of a
 * few floats. Here the im2col matrix of the whole batch, (C*KH*KW, N*OH*OW) with image n's
 * columns from n*OH*OW, is gathered element by element into the calling thread's scratch;
 * one GEMM per group and block of output channels covers every image into `out`, whose
 * rows are then finished into y with the epilogue. Measured on Silero VAD's conv1ds
 * (128 -> 64 channels, k3/2 on 4 clips of 4 positions: 62-73 -> 14-24 us on one core) and
 * the whole model against onnxruntime in the same process: 4 clips 0.81-0.87x -> 1.17-1.26x,
 * one clip 0.85-0.88x -> 1.05-1.07x; ResNet/MobileNet zoo models and the OCR models'
 * Programs unchanged within the noise. */

/* Task t: rows [t * rows_per_task, ...) of the batch's im2col matrix. */
MULTIVERSION static void batched_im2col_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t N = p[C_N], C = p[C_C], H = p[C_H], W = p[C_W], OH = p[C_OH], OW = p[C_OW];
    int64_t KH = p[C_KH], KW = p[C_KW], HW = OH * OW, ld = N * HW;
    int64_t rows = C * KH * KW, r1 = (t + 1) * cx->rows_per_task;
    for (int64_t r = t * cx->rows_per_task; r < r1 && r < rows; r++) {
        int64_t c = r / (KH * KW), i = r / KW % KH, j = r % KW;
        for (int64_t n = 0; n < N; n++) {
            const float *xc = cx->x + (n * C + c) * H * W;
            float *out = cx->cols + r * ld + n * HW;
            for (int64_t oh = 0; oh < OH; oh++) {
                int64_t ih = oh * p[C_SH] + i * p[C_DH] - p[C_PT];
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t iw = ow * p[C_SW] + j * p[C_DW] - p[C_PL];
                    out[oh * OW + ow] = ih >= 0 && ih < H && iw >= 0 && iw < W ? xc[ih * W + iw] : 0.0f;
                }
            }
        }
    }
}

/* Task t: group g's block t % mblocks of output channels: its GEMM over the whole batch,
 * then its rows of every image, with the epilogue. */
static void batched_gemm_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t G = p[C_G], O = p[C_O], OG = O / G, HW = p[C_OH] * p[C_OW], N = p[C_N];
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW], ld = N * HW;
    int64_t g = t / cx->mblocks, mstep = (OG + cx->mblocks - 1) / cx->mblocks;
    int64_t m0 = g * OG + t % cx->mblocks * mstep;
    int64_t m1 = m0 + mstep < (g + 1) * OG ? m0 + mstep : (g + 1) * OG;
    if (m0 >= m1) return;
    sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)(m1 - m0), (int)ld, (int)K, 1.0f, cx->w + m0 * K,
          (int)K, cx->cols + g * K * ld, (int)ld, 0.0f, cx->out + m0 * ld, (int)ld);
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = m0; o < m1; o++)
            finish(cx->y + (n * O + o) * HW, cx->out + o * ld + n * HW, HW,
                   cx->bias ? cx->bias[o] : 0.0f, cx->res ? cx->res + (n * O + o) * HW : NULL,
                   cx->act);
}

/* Returns -1 when there is no host memory for the batch's im2col matrix. */
static int conv_batched(conv_ctx *cx) {
    const int64_t *p = cx->p;
    int64_t G = p[C_G], O = p[C_O], OG = O / G, ld = p[C_N] * p[C_OH] * p[C_OW];
    int64_t rows = p[C_C] * p[C_KH] * p[C_KW], K = rows / G;
    float *scratch = thread_scratch((rows + O) * ld);
    if (!scratch) return -1;
    cx->cols = scratch;
    cx->out = scratch + rows * ld;
    cx->rows_per_task = per_task(rows, task_count((double)rows * ld / COPY_FLOATS_PER_NS, rows));
    parallel(batched_im2col_task, cx, (rows + cx->rows_per_task - 1) / cx->rows_per_task);
    /* a block of output channels per core (at least 16 channels a block) */
    int64_t want = task_count((double)O * K * ld / GEMM_MACS_PER_NS, cores());
    cx->mblocks = (want + G - 1) / G;
    if (cx->mblocks > OG / 16) cx->mblocks = OG / 16 > 1 ? OG / 16 : 1;
    parallel(batched_gemm_task, cx, G * cx->mblocks);
    return 0;
}

/* Returns -1 when there is no host memory for a strided conv's phases. */
int conv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    if (p[C_DIRECT] == CONV_BLOCKED) return blocked_conv(s, slots);
    if (p[C_DIRECT]) return direct_conv(s, slots);
    conv_ctx cx = {.p = p, .x = slots[s->slot[S_X]], .w = slots[s->slot[S_W]],
                   .bias = s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL,
                   .res = s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL,
                   .y = slots[s->slot[S_Y]],
                   .cols = p[C_IM2COL] ? slots[s->slot[S_COLS]] : NULL,
                   .act = act_of(s, C_ACT), .mblocks = 1, .nblocks = 1};
    int64_t G = p[C_G], OG = p[C_O] / G, HW = p[C_OH] * p[C_OW];
    if (p[C_YCL] && !p[C_IM2COL] && G == 1 && row_gemm_t_takes(HW)) {  /* a 1x1 conv (rowgemm.c) */
        for (int64_t n = 0; n < p[C_N]; n++)
            if (row_gemm_t(HW, p[C_O], p[C_C], cx.x + n * p[C_C] * HW, HW, cx.w, cx.bias,
                           cx.y + n * HW * p[C_O], cx.act))
                return -1;
        return 0;
    }
    if (HW < GEMM_MIN_COLS && !p[C_YCL] && (p[C_N] > 1 || p[C_IM2COL])) return conv_batched(&cx);
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW], rows = p[C_C] * p[C_KH] * p[C_KW];
    /* GEMM tasks: one per core (more, smaller GEMMs pack their operands more often and run
     * measurably slower), whole column blocks of >= GEMM_MIN_COLS when there are enough
     * (each builds its own im2col columns, which it then finds in cache), else blocks of
     * output channels. A 1x1 conv (no im2col) with more output channels than positions
     * takes blocks of output channels: each task packs the weights of its block and all the
     * columns, where a block of columns would pack all the weights (2 cores, the step
     * alone: 256 -> 1024 on 14x14 296 -> 249 us, 1024 -> 256 276 -> 260, 96 -> 576 85 ->
     * 65, 256 -> 512 on 16x16 178 -> 163) */
    int64_t want = task_count((double)p[C_O] * K * HW / GEMM_MACS_PER_NS, 1 << 20);
    int nc = cores();
    if (want > GEMM_TASKS_PER_CORE * nc) want = GEMM_TASKS_PER_CORE * nc;
    if (want > nc) want -= want % nc;
    if (want > G) {
        int64_t per_group = (want + G - 1) / G;
        int by_rows = !p[C_IM2COL] && OG >= HW && OG / 16 >= per_group;
        cx.nblocks = !by_rows && HW / GEMM_MIN_COLS >= per_group ? per_group : 1;
        int64_t left = (per_group + cx.nblocks - 1) / cx.nblocks;
        cx.mblocks = OG / 16 > 1 ? (OG / 16 < left ? OG / 16 : left) : 1;
    }
    cx.rows_per_task = per_task(rows, task_count((double)rows * HW / COPY_FLOATS_PER_NS, rows));
    /* column phases for a strided window (the calling thread's scratch, read by every task);
     * a one-column window reads each input value once: its columns are gathered directly
     * (ResNet-50's 1x1/2 shortcuts copied their whole input into phases to use a quarter) */
    if (p[C_IM2COL] && p[C_SW] > 1 && p[C_KW] > 1) {
        cx.wq = p[C_OW] + (p[C_KW] - 1) * p[C_DW] / p[C_SW];
        cx.phase = thread_scratch(p[C_C] * p[C_SW] * p[C_H] * cx.wq);
        if (!cx.phase) return -1;
    }
    for (int64_t n = 0; n < p[C_N]; n++) {
        cx.n = n;
        if (cx.phase) parallel(phase_task, &cx, p[C_C]);
        if (p[C_IM2COL] && cx.mblocks > 1)  /* blocks of rows share columns: build them first */
            parallel(im2col_task, &cx, (rows + cx.rows_per_task - 1) / cx.rows_per_task);
        parallel(gemm_task, &cx, G * cx.mblocks * cx.nblocks);
    }
    return 0;
}

