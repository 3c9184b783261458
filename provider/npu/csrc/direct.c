#include "npu.h"

/* ---- direct convolution ----------------------------------------------------------------
 *
 * A KxK conv without im2col. The image is copied once into zero-padded phase planes per
 * channel (as for the windowed kernels: phase (ph, pw) holds padded rows ph, ph + SH, ... and
 * columns pw, pw + SW, ...; stride 1 has one phase, the padded image), WQ columns wide, and
 * the output is computed on rows of the same width WQ, flattened: output position
 * k = oh * WQ + ow reads tap (i, j) of channel c at
 *     phase[c][(i*DH) % SH][(j*DW) % SW][k + (i*DH / SH) * WQ + j*DW / SW],
 * one offset per tap for every k. A tile of OB output channels x NV vectors of consecutive
 * positions keeps its OB x NV accumulators in registers; each (c, tap) step loads NV
 * input vectors and broadcasts OB weights, which the compiler stored side by side for it
 * (provider/npu/ops/conv_weights.py; which convs run here is decided there too). The WQ - OW
 * extra columns of each row are computed and dropped. */
#define DIRECT_OB 8               /* output channels per stored block of weights: the compiler
                                   * stores them so (conv_weights.DIRECT_ROWS) */
#define MAX_TAPS 64               /* conv_weights.DIRECT_MAX_TAPS */
#ifndef DIRECT_PREFETCH
#define DIRECT_PREFETCH 64        /* steps ahead of the weights to prefetch */
#endif
#ifndef DIRECT_AHEAD
#define DIRECT_AHEAD 2            /* channels ahead a tile prefetches, where it does */
#endif
#ifndef DIRECT_BATCH_BYTES
#define DIRECT_BATCH_BYTES (2L << 20)  /* the images' phase planes one call may build */
#endif
#ifndef DIRECT_PAIRS
#define DIRECT_PAIRS 1            /* channel-vector tiles for pairs of blocks (8-float width) */
#endif
#ifndef DIRECT_BAND_BYTES
#define DIRECT_BAND_BYTES (512L << 10)  /* phase planes a task's band of rows may span */
#endif

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y, *phases;            /* C x SH*SW phase planes of `plane` floats */
    act_t act;
    int64_t n, wq, hq, plane, span, ptiles, oblocks;  /* n: the call's first image */
    int64_t obgroups, chunks;     /* tasks per group: obgroups x chunks (see direct_conv) */
    int64_t per_image;            /* tasks per image: G x obgroups x chunks */
    int64_t band_rows;            /* banded: phase rows a task builds; 0: phases built first */
    atomic_int *failed;           /* set by a task that found no memory for its band */
    int64_t taps, tap_off[MAX_TAPS];  /* per tap: offset within a channel's phases */
    int64_t ahead;                /* prefetch the rows this many channels ahead (0: none) */
    int64_t rows, row_off[MAX_TAPS];  /* the phase rows a tile reads of a channel: offsets */
    int pairs;                    /* pairs of full blocks go by channel-vector tiles (below) */
    int transpose8;               /* the CPU runs transpose8 (their sums turn through it) */
} direct_ctx;

/* Image n's channel c's SH x SW phase planes into q, `rows` rows of each from phase row r0 (zero
 * padding; zero slack after each plane for the last tiles' overrun). Local row i is phase
 * row r0 + i: input row i*SH + ph - (PT - r0*SH). */
MULTIVERSION static void direct_phases(const direct_ctx *cx, int64_t n, int64_t c, float *q,
                                       int64_t rows, int64_t r0) {
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], SH = p[C_SH], SW = p[C_SW];
    const float *xc = cx->x + (n * p[C_C] + c) * H * W;
    for (int64_t ph = 0; ph < SH; ph++) {
        fill_row_phase(q, cx->plane, rows, cx->wq, xc, H, W, SH, SW, ph, p[C_PT] - r0 * SH, p[C_PL]);
        for (int64_t pw = 0; pw < SW; pw++, q += cx->plane)
            for (int64_t k = rows * cx->wq; k < cx->plane; k++) q[k] = 0.0f;
    }
}

/* A banded task's own phase planes (direct_conv says when): the rows [r0, r0 + band_rows)
 * of every phase plane of image n's group g's channels, built in the task's scratch just
 * before its tiles read them, so they are read from cache; NULL when there is no memory. */
static const float *direct_band(const direct_ctx *cx, int64_t n, int64_t g, int64_t r0) {
    const int64_t *p = cx->p;
    int64_t planes = p[C_SH] * p[C_SW] * cx->plane, CG = p[C_C] / p[C_G];
    float *band = thread_scratch(CG * planes);
    if (!band) return NULL;
    for (int64_t c = 0; c < CG; c++)
        direct_phases(cx, n, g * CG + c, band + c * planes, cx->band_rows, r0);
    return band;
}

/* Image n's output channel oc's positions k0 .. k1 of the tile row t (`tile` floats,
 * positions on rows of the padded width WQ) into y, with the epilogue. */
static inline __attribute__((always_inline)) void direct_store(
        const direct_ctx *cx, int64_t n, int64_t oc, float *t, int64_t k0, int64_t k1, int64_t OH,
        int64_t OW, int64_t WQ, int64_t O, int64_t tile) {
    float *y = cx->y + (n * O + oc) * OH * OW;
    const float *res = cx->res ? cx->res + (n * O + oc) * OH * OW : NULL;
    float b = cx->bias ? cx->bias[oc] : 0.0f;
    if (!res)  /* the whole row of the tile in one pass of whole vectors (the pieces' short
                * loops and their tails cost 12% of a conv) */
        finish(t, t, tile, b, NULL, cx->act);
    for (int64_t oh = k0 / WQ; oh * WQ < k1; oh++) {  /* row pieces in the tile */
        int64_t a = k0 > oh * WQ ? k0 - oh * WQ : 0;
        int64_t e = k1 - oh * WQ < OW ? k1 - oh * WQ : OW;
        if (a >= e) continue;
        if (res)
            finish(y + oh * OW + a, t + oh * WQ + a - k0, e - a, b, res + oh * OW + a, cx->act);
        else
            memcpy(y + oh * OW + a, t + oh * WQ + a - k0, (e - a) * sizeof(float));
    }
}

/* Two widths: 16 floats (AVX-512: tiles of 8 channels x 48 positions; 2 and 4 vectors
 * measured slower), taken where the CPU has AVX-512; else 8 floats (AVX2 and the rest: 4
 * channels x 24 positions, twelve accumulators in sixteen registers), compiled per
 * instruction set. */
#if defined(__x86_64__) && defined(__GNUC__)
#define DIRECT_WIDE 1
#define DK_VEC 16
#define DK_NV 3
#define DK_OB 8
#define DK(name) name##_16
#define DK_ATTR __attribute__((target("arch=x86-64-v4")))
#define DK_SPLAT(w) {w, w, w, w, w, w, w, w, w, w, w, w, w, w, w, w}
#include "direct_tiles.h"
#else
#define DIRECT_WIDE 0
#endif

#define DK_VEC 8
#define DK_NV 3
#define DK_OB 4
#define DK(name) name##_8
#define DK_ATTR MULTIVERSION
#define DK_SPLAT(w) {w, w, w, w, w, w, w, w}
#include "direct_tiles.h"

/* The phase planes of the call's channel t (of image cx->n + t / C), every row. */
static void direct_phase_task(const void *ctx, int64_t t) {
    const direct_ctx *cx = ctx;
    int64_t C = cx->p[C_C];
    direct_phases(cx, cx->n + t / C, t % C, cx->phases + t * cx->p[C_SH] * cx->p[C_SW] * cx->plane,
                  cx->hq, 0);
}

/* Returns -1 when there is no host memory for the phase planes. */
int direct_conv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t SH = p[C_SH], SW = p[C_SW], OH = p[C_OH], OW = p[C_OW];
    int64_t G = p[C_G], OG = p[C_O] / G;
    direct_ctx cx = {.p = p, .x = slots[s->slot[S_X]], .w = slots[s->slot[S_W]],
                     .bias = s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL,
                     .res = s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL,
                     .y = slots[s->slot[S_Y]], .act = act_of(s, C_ACT),
                     .oblocks = (OG + DIRECT_OB - 1) / DIRECT_OB, .chunks = 1,
                     .taps = p[C_KH] * p[C_KW]};
    atomic_int failed = 0;
    cx.failed = &failed;
    int64_t row_reach = (p[C_KH] - 1) * p[C_DH] / SH, col_reach = (p[C_KW] - 1) * p[C_DW] / SW;
    cx.wq = OW + col_reach;
    cx.hq = OH + row_reach + 1;  /* + a spare row: the last taps read past their row end */
    int64_t tile = DIRECT_WIDE && vector_width() == 16 ? 16 * 3 : 8 * 3;  /* DK_VEC * DK_NV */
    cx.span = OH * cx.wq;
    cx.ptiles = (cx.span + tile - 1) / tile;
    cx.plane = cx.hq * cx.wq + tile;  /* + slack: the last tile reads past the span */
    /* Tasks. When a group's phase planes fit in DIRECT_BAND_BYTES, one per block of output
     * channels over every position, the phases built first for all of them; else bands of
     * positions, each with every block of the group, each task building the phase rows its
     * band reads (direct_band) just before it reads them. A band's rows stay in cache while
     * each block's weights pass over them: one block per task streamed the whole image from
     * memory once per block (a detector's 16 -> 32 channel 3x3/2 conv at 512x512 ran at a
     * quarter of the stride-1 speed), and phases built for the whole image first went to
     * memory and back: that conv 7.4-11.2 -> 4.9-7.5 ms, a 3 -> 16 channel stem at
     * 1024x1024 4.1-5.2 -> 2.9-4.2 ms on 2 cores (4 alternating rounds). */
    int64_t group_bytes = p[C_C] / G * SH * SW * cx.plane * (int64_t)sizeof(float);
    int64_t nc = cores();
    int banded = group_bytes > DIRECT_BAND_BYTES;
    /* Channel-vector tiles (direct_tiles.h: DK(pair_positions)) at the 8-float width, where
     * a group has two full blocks of output channels: a task then takes a pair of blocks.
     * Whole step, the two kinds of tile alternating in one process on an AVX2 host (AMD
     * EPYC), 2 cores, time of the pairs over the position tiles' (median of 8 rounds): 3x3
     * convs of 64 channels on 7x7 0.74, 256 on 7x7 0.69, 512 on 7x7 0.75, 128 on 14x14 0.80,
     * 32 on 14x14 0.80, 64 on 28x28 0.85, a 7x7/2 stem 3 -> 32 at 56x56 0.82; 32 -> 64 3x3/2
     * on 14x14 0.91 and 64 -> 128 3x3/2 at 56x56 1.02 (within the noise). Banded convs too:
     * position tiles stream the band's rows from L2 once per block of 8 output channels (a
     * 3x3/2 conv, four phase planes a channel, ran at 0.6x the speed of a stride-1 conv of
     * the same work). Runs alternating one by one in one process (that host, 20-138 of each),
     * time with pairs over without: one core, 3x3/2 convs 24 -> 48 at 208x208 0.85, 16 -> 32
     * at 256x256 0.78-0.83, 48 -> 96 at 104x104 0.90, 64 -> 128 at 56x56 0.92, a 3 -> 16 stem
     * at 640x640 0.78; 3x3 convs 12 -> 24 at 208x208 0.94, 32 -> 64 at 128x128 0.94, 64 at
     * 56x56 0.91-1.01, 96 at 52x52 0.99-1.00; two cores 0.79-0.94 on five of them. */
    cx.pairs = DIRECT_PAIRS && tile == 24 && OG >= 2 * DIRECT_OB;
    cx.obgroups = cx.pairs ? (cx.oblocks + 1) / 2 : cx.oblocks;
#if HAVE_TRANSPOSE16
    cx.transpose8 = cx.pairs && transpose8_ok();
#endif
    if (banded) {
        cx.obgroups = 1;
        cx.chunks = (group_bytes + DIRECT_BAND_BYTES - 1) / DIRECT_BAND_BYTES;
    }
    /* Whole rounds of tasks on every core: a detector's 96-channel 3x3 at 52x52 in 3 bands
     * ran on 2 cores at 1.5x one core's speed, in 4 at 1.8x. Few blocks of output channels
     * that do not divide among the cores are cut in bands of positions too. */
    /* On more than one core, the phases of the whole batch (up to DIRECT_BATCH_BYTES) and
     * every image's tasks go in one call each, not in calls per image: fewer hand-offs, and
     * more tasks per call to share. Alternating in one process, 2 cores: 3x3 convs, batch 2,
     * 32 channels on 12x12 53.7 -> 44.7 us, 16 -> 32 stride 2 on 24x24 54.8 -> 34.2; batch 4,
     * 32 channels on 14x14 122 -> 99; the yolo_detector zoo Program at 2x3x96x128 2.42 ->
     * 2.21 ms (8 of 8 rounds faster), svtr_recognizer at 2x3x32x128 1.53 -> 1.47 ms (7 of 8);
     * batch 1 unchanged. One core keeps a call per image, each image's phases still in cache
     * when its tiles read them. */
    int64_t images = banded || nc == 1 || !group_bytes ? 1 : DIRECT_BATCH_BYTES / (group_bytes * G);
    images = images < 1 ? 1 : images > p[C_N] ? p[C_N] : images;
    int64_t tasks = images * G * cx.obgroups * cx.chunks;
    if (nc > 1 && tasks % nc && tasks < 4 * nc)
        cx.chunks = banded ? (cx.chunks + nc - 1) / nc * nc : nc;
    if (cx.chunks > cx.ptiles) cx.chunks = cx.ptiles;
    if (banded && cx.chunks > 1) {
        /* a band's positions span at most this many rows, straddling; then the deepest
         * tap's rows, and a spare row for the columns read past a row's end */
        int64_t chunk = (cx.ptiles + cx.chunks - 1) / cx.chunks;
        cx.band_rows = (chunk * tile - 1) / cx.wq + 2 + row_reach + 1;
        cx.plane = cx.band_rows * cx.wq + tile;
    }
    for (int64_t i = 0; i < p[C_KH]; i++) {
        for (int64_t j = 0; j < p[C_KW]; j++) {
            int64_t a = i * p[C_DH], b = j * p[C_DW];
            cx.tap_off[i * p[C_KW] + j] = ((a % SH) * SW + b % SW) * cx.plane + a / SH * cx.wq + b / SW;
            if (b / SW == 0)  /* a row's first tap */
                cx.row_off[cx.rows++] = cx.tap_off[i * p[C_KW] + j];
        }
    }
    /* Phases built by every core: half of each tile's input rows are in the other core's
     * cache, and a tile's first pass over them waited on each. Its tiles then ask for the
     * rows DIRECT_AHEAD channels ahead. Measured in one process, alternating, 2 cores: a
     * 3x3 conv of 32 channels on 14x14, 39.5 -> 32.7 us; 64 on 7x7 34.0 -> 29.2; the
     * resnet_block zoo Program 417 -> 380 us (faster in 10 of 12 rounds) and 379 -> 364
     * (6 of 10). On one core, whose own cache holds the rows, the requests cost 4-6%, and a
     * 3x3/2 conv (four phase planes) gained nothing: those prefetch nothing. A banded task
     * asks too, on any core count and stride: its band (up to DIRECT_BAND_BYTES, an AVX2
     * host's whole L2) is no longer in L1 when its tiles pass over it once per block of
     * output channels. Alternating in one process on that host (AMD EPYC, 512 KB L2), whole
     * step: 128 -> 256 3x3/2 at 64x64 0.87-0.88x the time on 2 cores, 0.84-0.87x on 1; 128
     * -> 64 3x3 at 64x64 0.89-0.91x on 2; 16 -> 32 3x3/2 at 512x512 and 16 -> 16 3x3 at
     * 256x256 unchanged (0.95-1.07x). */
    if (cx.band_rows || (cores() > 1 && SH == 1 && SW == 1)) cx.ahead = DIRECT_AHEAD;
    if (!cx.band_rows) {
        cx.phases = thread_scratch(images * p[C_C] * SH * SW * cx.plane);
        if (!cx.phases) return -1;
    }
    cx.per_image = G * cx.obgroups * cx.chunks;
    for (int64_t n = 0; n < p[C_N]; n += images) {
        int64_t count = p[C_N] - n < images ? p[C_N] - n : images;
        cx.n = n;
        if (!cx.band_rows) parallel(direct_phase_task, &cx, count * p[C_C]);
#if DIRECT_WIDE
        parallel(tile == 48 ? direct_task_16 : direct_task_8, &cx, count * cx.per_image);
#else
        parallel(direct_task_8, &cx, count * cx.per_image);
#endif
    }
    return atomic_load(&failed) ? -1 : 0;
}

