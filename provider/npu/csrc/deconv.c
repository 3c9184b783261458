/* Transposed convolution: per group, cols = W^T x (one OpenBLAS GEMM per block of rows),
 * then each output channel's KH x KW taps are added into its full-size plane (col2im),
 * which is cropped by the pads into y with the bias and the activation: the numpy
 * kernel's steps (ops/conv.py deconv2d), the taps added in the same order. */
#include "npu.h"

/* Parameters: the conv geometry C_N .. C_ACT (C_OH, C_OW: y's size), then the full plane's
 * height and width. Slots: the conv's S_X, S_W (G x (O/G*KH*KW, C/G)), S_BIAS, S_Y, S_COLS
 * ((G, O/G*KH*KW, H*W) for one image), then the full planes (O, FH, FW) for one image. */
enum { DC_FH = C_ACT + 1, DC_FW };
enum { DS_FULL = S_COLS + 1 };

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias;
    float *y, *cols, *full;
    act_t act;
    int64_t n, rows_per;  /* image; GEMM rows per task */
    int64_t rows_per_tile;  /* deconv_tile_task's input rows per task */
} deconv_ctx;

/* Task t: group t / blocks, its block t % blocks of cols rows. */
static void deconv_gemm_task(const void *ctx, int64_t t) {
    const deconv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t G = p[C_G], C = p[C_C], HW = p[C_H] * p[C_W], K = C / G;
    int64_t M = p[C_O] / G * p[C_KH] * p[C_KW], blocks = (M + cx->rows_per - 1) / cx->rows_per;
    int64_t g = t / blocks, r0 = t % blocks * cx->rows_per;
    int64_t m = r0 + cx->rows_per < M ? cx->rows_per : M - r0;
    sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)m, (int)HW, (int)K, 1.0f, cx->w + (g * M + r0) * K,
          (int)K, cx->x + (cx->n * C + g * K) * HW, (int)HW, 0.0f, cx->cols + (g * M + r0) * HW,
          (int)HW);
}

/* Task t: output channel t: its taps into its full plane, then the crop into y. */
MULTIVERSION static void deconv_col2im_task(const void *ctx, int64_t t) {
    const deconv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], O = p[C_O], OH = p[C_OH], OW = p[C_OW];
    int64_t KH = p[C_KH], KW = p[C_KW], SH = p[C_SH], SW = p[C_SW], DH = p[C_DH], DW = p[C_DW];
    int64_t FH = p[DC_FH], FW = p[DC_FW], OG = O / p[C_G];
    float *full = cx->full + t * FH * FW;
    memset(full, 0, FH * FW * sizeof(float));
    const float *taps = cx->cols + (t / OG * OG * KH * KW + t % OG * KH * KW) * H * W;
    for (int64_t i = 0; i < KH; i++) {
        for (int64_t j = 0; j < KW; j++) {
            const float *src = taps + (i * KW + j) * H * W;
            for (int64_t r = 0; r < H; r++) {
                float *dst = full + (r * SH + i * DH) * FW + j * DW;
                const float *row = src + r * W;
                if (SW == 1) {
                    for (int64_t c = 0; c < W; c++) dst[c] += row[c];
                } else {
                    for (int64_t c = 0; c < W; c++) dst[c * SW] += row[c];
                }
            }
        }
    }
    float b = cx->bias ? cx->bias[t] : 0.0f;
    float *y = cx->y + (cx->n * O + t) * OH * OW;
    for (int64_t r = 0; r < OH; r++)
        finish(y + r * OW, full + (r + p[C_PT]) * FW + p[C_PL], OW, b, NULL, cx->act);
}

/* Task t: rows [r0, r1) of input rows of output channel t / row_blocks, when the kernel
 * equals the stride (no dilation, pads or output padding): each input pixel's taps fill
 * their own KH x KW block of y, so the rows are written in place, with no full plane. */
MULTIVERSION static void deconv_tile_task(const void *ctx, int64_t t) {
    const deconv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], O = p[C_O], KH = p[C_KH], KW = p[C_KW], OW = p[C_OW];
    int64_t OG = O / p[C_G], blocks = (H + cx->rows_per_tile - 1) / cx->rows_per_tile;
    int64_t oc = t / blocks, r0 = t % blocks * cx->rows_per_tile;
    int64_t r1 = r0 + cx->rows_per_tile < H ? r0 + cx->rows_per_tile : H;
    const float *taps = cx->cols + (oc / OG * OG * KH * KW + oc % OG * KH * KW) * H * W;
    float b = cx->bias ? cx->bias[oc] : 0.0f;
    float *y = cx->y + (cx->n * O + oc) * p[C_OH] * OW;
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t i = 0; i < KH; i++) {
            float *row = y + (r * KH + i) * OW;
            for (int64_t j = 0; j < KW; j++) {
                const float *src = taps + (i * KW + j) * H * W + r * W;
                for (int64_t c = 0; c < W; c++) row[c * KW + j] = src[c];
            }
            finish(row, row, OW, b, NULL, cx->act);
        }
    }
}

void deconv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    deconv_ctx cx = {p, slots[s->slot[S_X]], slots[s->slot[S_W]],
                     s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL, slots[s->slot[S_Y]],
                     slots[s->slot[S_COLS]], slots[s->slot[DS_FULL]], act_of(s, C_ACT), 0, 1, 1};
    int64_t G = p[C_G], HW = p[C_H] * p[C_W], K = p[C_C] / G;
    int64_t M = p[C_O] / G * p[C_KH] * p[C_KW];
    /* GEMM tasks: about one per core, as the conv's (smaller GEMMs pack their operands
     * more often) */
    int64_t per_group = task_count((double)G * M * K * HW / GEMM_MACS_PER_NS, 1 << 20);
    per_group = (per_group > cores() ? cores() : per_group) / G;
    cx.rows_per = per_task(M, per_group > 1 ? per_group : 1);
    int tiles = p[C_KH] == p[C_SH] && p[C_KW] == p[C_SW] && p[C_DH] == 1 && p[C_DW] == 1
                && !p[C_PT] && !p[C_PL] && p[C_OH] == p[C_H] * p[C_KH] && p[C_OW] == p[C_W] * p[C_KW];
    if (tiles) {  /* blocks of input rows: every core busy even for a single output channel */
        int64_t per_channel = task_count((double)p[C_O] * p[C_OH] * p[C_OW], p[C_O] * p[C_H]);
        per_channel = (per_channel + p[C_O] - 1) / p[C_O];
        cx.rows_per_tile = per_task(p[C_H], per_channel);
    }
    for (int64_t n = 0; n < p[C_N]; n++) {
        cx.n = n;
        parallel(deconv_gemm_task, &cx, G * ((M + cx.rows_per - 1) / cx.rows_per));
        if (tiles) parallel(deconv_tile_task, &cx, p[C_O] * ((p[C_H] + cx.rows_per_tile - 1) / cx.rows_per_tile));
        else parallel(deconv_col2im_task, &cx, p[C_O]);
    }
}
