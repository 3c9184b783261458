#include "npu.h"

/* ---- blocked convolution: channel vectors ----------------------------------------------
 *
 * A KxK conv of one group whose input (or an RGB image's 3) and output channels come in
 * blocks of 16, computed with vectors along the output channels: the image is copied once
 * into a channel-blocked scratch (C/ICW blocks, each H rows of WP columns of ICW channel
 * values, zero columns for the left and right padding), the weights are stored
 * (provider/npu/ops/conv_weights.py) as [O/16][C/ICW][KH][KW][ICW][16], and a tile of T
 * positions along one output row x NB blocks keeps T x NB vectors of 16 output channels in
 * registers: each (channel block, kernel row, column, channel) step loads NB weight vectors
 * and broadcasts T input values. Unlike the
 * position tiles (direct.c), no position is computed that is not an output (a 7x7 plane
 * computed 64 positions for 49) and kernel rows in the top and bottom padding are skipped
 * (a 2-row plane's 3x3 conv computed a third of zeros). Sums are taken per output in the
 * order channel block, kernel row, column, channel. */
#ifndef BLOCKED_BATCH_BYTES
#define BLOCKED_BATCH_BYTES (2L << 20)  /* the images' blocked copies one call may build */
#endif

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y, *xb;                /* xb: the call's images, blocked */
    act_t act;
    int64_t n;                    /* the call's first image */
    int64_t icw, cb, wp;          /* channels per block (16, or an RGB image's 3), blocks,
                                   * scratch row width */
    int64_t chunks, chunk_rows;   /* tasks per group of blocks: chunks of output rows (their
                                   * sizes differ by at most one row), the longest's rows */
    int64_t per_image;            /* tasks per image */
    int64_t tile_w, wide_tiles;   /* a row's tiles: tile_w positions, the first wide_tiles + 1 */
    int64_t band, chunk;          /* the reduction: bands of rows x chunks of channel blocks */
    int wide;                     /* AVX-512 tiles (2 blocks x 12 positions) */
} blocked_ctx;

/* A task's reduction runs in chunks of channel blocks whose weights (for the tile's blocks of
 * output channels) take at most BK_CHUNK_BYTES, so they stay in cache across a band of
 * rows whose partial sums fit BK_PART_FLOATS (on the task's stack): the whole reduction per
 * tile streamed all of a group's weights from L2 for every tile (295 KB at 256 channels,
 * measured on a Xeon). 24 KB (L1) was chosen there; on an AVX-512 EPYC (48 KB L1, 1 MB L2)
 * 96 KB took 2-5 % less per conv, each chunk pass saving the tiles' partial-sum round trip
 * (one core, single-conv models alternating with onnxruntime: 64 -> 64 at 128x128 0.88 ->
 * 0.91x onnxruntime's speed, 128 -> 128 at 64x64 0.91 -> 0.96x, 256 -> 256 at 14x14 0.97 ->
 * 1.00x; YOLOX 30.3 -> 29.5 ms, ResNet block 152.5 -> 149.5 us; 192 KB and 1 MB within
 * noise of 96 KB). */
#define BK_CHUNK_BYTES 98304
#define BK_PART_FLOATS 8192

typedef float bvec __attribute__((vector_size(16 * sizeof(float)), aligned(4)));
typedef int32_t bmask __attribute__((vector_size(16 * sizeof(int32_t))));
#define BSPLAT(v) ((bvec){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v})

#if defined(__x86_64__) && defined(__GNUC__)
#define BK(name) name##_v4
#define BK_ATTR __attribute__((target("arch=x86-64-v4")))
#define BK_T 12
#define BK_NB 2
#define BK_WIDE 1
#include "blocked_tiles.h"
#define BLOCKED_WIDE 1
#else
#define BLOCKED_WIDE 0
#endif

#define BK(name) name##_v3
#define BK_ATTR MULTIVERSION
#define BK_T 6
#define BK_NB 1
#define BK_WIDE 0
#include "blocked_tiles.h"

/* Task t: channel block t % CB of image cx->n + t / CB into the scratch: row by row, each
 * input position's ICW channel values side by side, zero padding columns (16 x 16 blocks
 * turned in registers where the CPU has AVX-512). */
static void blocked_input_task(const void *ctx, int64_t t) {
    const blocked_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], PL = p[C_PL], WP = cx->wp, ICW = cx->icw;
    int64_t image = t / cx->cb, cb = t % cx->cb;
    const float *x = cx->x + ((cx->n + image) * p[C_C] + cb * ICW) * H * W;
    float *q = cx->xb + (image * cx->cb + cb) * H * WP * ICW;
    int64_t right = WP - PL - W > 0 ? WP - PL - W : 0, cols = W < WP - PL ? W : WP - PL;
#if BLOCKED_WIDE
    int turn = ICW == 16 && cx->wide;
#endif
    for (int64_t h = 0; h < H; h++, q += WP * ICW) {
        memset(q, 0, (size_t)(PL * ICW) * sizeof(float));
        memset(q + (PL + cols) * ICW, 0, (size_t)(right * ICW) * sizeof(float));
        const float *row = x + h * W;
#if BLOCKED_WIDE
        if (turn) {
            for (int64_t w = 0; w < cols; w += 16)
                transpose16(row + w, H * W, q + (PL + w) * 16, 16, 16,
                            cols - w < 16 ? (int)(cols - w) : 16);
            continue;
        }
#endif
        for (int64_t c = 0; c < ICW; c++)
            for (int64_t w = 0; w < cols; w++) q[(PL + w) * ICW + c] = row[c * H * W + w];
    }
}

/* Returns -1 when there is no host memory for the blocked copy. */
int blocked_conv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t C = p[C_C], H = p[C_H], OH = p[C_OH], OW = p[C_OW], OB = p[C_O] / 16;
    blocked_ctx cx = {.p = p, .x = slots[s->slot[S_X]], .w = slots[s->slot[S_W]],
                      .bias = s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL,
                      .res = s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL,
                      .y = slots[s->slot[S_Y]], .act = act_of(s, C_ACT)};
    if (!p[C_N] || !OH || !OW) return 0;  /* no output to write */
    cx.icw = C == 3 ? 3 : 16;
    cx.cb = C / cx.icw;                   /* (none: the bias alone) */
    /* every column a window reaches, and the input's */
    int64_t reach = (OW - 1) * p[C_SW] + (p[C_KW] - 1) * p[C_DW] + 1;
    cx.wp = reach > p[C_PL] + p[C_W] ? reach : p[C_PL] + p[C_W];
    int wide = cx.wide = BLOCKED_WIDE && vector_width() == 16;
    int64_t nb = wide ? 2 : 1, groups = (OB + nb - 1) / nb, max_t = wide ? 12 : 6;
    int64_t row_tiles = (OW + max_t - 1) / max_t;
    cx.tile_w = OW / row_tiles;
    cx.wide_tiles = OW % row_tiles;
    int64_t image_bytes = C * H * cx.wp * (int64_t)sizeof(float);
    int64_t images = cores() == 1 || !image_bytes ? 1 : BLOCKED_BATCH_BYTES / image_bytes;
    images = images < 1 ? 1 : images > p[C_N] ? p[C_N] : images;
    /* tasks: groups of blocks x chunks of rows, enough for every core (and whole rounds) */
    double ns = (double)images * p[C_O] * OH * OW * C * p[C_KH] * p[C_KW] / GEMM_MACS_PER_NS;
    int64_t want = task_count(ns, images * groups * OH);
    int64_t per = images * groups;
    cx.chunks = want > per ? (want + per - 1) / per : 1;
    if (cx.chunks > 1 && cores() > 1) cx.chunks = (cx.chunks + cores() - 1) / cores() * cores();
    if (cx.chunks > OH) cx.chunks = OH;
    cx.chunk_rows = (OH + cx.chunks - 1) / cx.chunks;  /* the longest chunk's */
    cx.per_image = groups * cx.chunks;
    int64_t wbytes = p[C_KH] * p[C_KW] * cx.icw * 16 * nb * (int64_t)sizeof(float);
    cx.band = BK_PART_FLOATS / (OW * nb * 16);
    cx.chunk = BK_CHUNK_BYTES / wbytes > 1 ? BK_CHUNK_BYTES / wbytes : 1;
    if (cx.band < 1) cx.band = cx.chunk_rows, cx.chunk = cx.cb;  /* whole reduction per tile */
    cx.xb = thread_scratch(images * C * H * cx.wp);
    if (!cx.xb) return -1;
    for (int64_t n = 0; n < p[C_N]; n += images) {
        int64_t count = p[C_N] - n < images ? p[C_N] - n : images;
        cx.n = n;
        parallel(blocked_input_task, &cx, count * cx.cb);
#if BLOCKED_WIDE
        parallel(wide ? blocked_task_v4 : blocked_task_v3, &cx, count * cx.per_image);
#else
        parallel(blocked_task_v3, &cx, count * cx.per_image);
#endif
    }
    return 0;
}
