#include "npu.h"

/* ---- windowed planes: depthwise conv (planar), max pool, average pool -----------------
 *
 * One output plane from one input plane, a plane per task. window_t holds the geometry;
 * the depthwise conv goes by phase planes (dw_plane), pooling separably (pool_plane). */
typedef struct {
    int64_t h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, hq, wq;
} window_t;

enum { WIN_DW, WIN_MAX, WIN_AVG };

static window_t window_of(int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                          int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl) {
    /* phase planes: OH rows (+ the deepest tap's row offset, + 1 spare row for the last
     * taps' overrun past the row end) of OW columns (+ the widest tap's column offset) */
    window_t g = {h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl,
                  oh + (kh - 1) * dh / sh + 1, ow + (kw - 1) * dw / sw};
    return g;
}

/* Columns of a pooled row's vertical reduction: input columns -PL .. (OW-1)*SW + KW-1 - PL. */
static int64_t pool_line(const window_t *g) { return (g->ow - 1) * g->sw + g->kw; }

/* Stride-1 pooling goes in passes over the whole padded plane (pool_plane_flat) up to this
 * many padded columns, else row by row (pool_plane). Measured on one AVX-512 core: a
 * detector's 5x5/1 pool of 128x20x20 277 -> 80 us, 32x80x80 420 -> 280 us, even at 122
 * columns (3x3/1). Strided pools stay row by row: the passes reduce every row, the windows
 * only every SH-th (3x3/2 of 32x28x28: 12 us by rows, 20 us in passes). */
#ifndef POOL_FLAT_MAX_W
#define POOL_FLAT_MAX_W 96
#endif

/* Rows of a pooled plane's padded copy: every row a window reaches. */
static int64_t pool_rows(const window_t *g) { return (g->oh - 1) * g->sh + g->kh; }

static int pool_flat(const window_t *g) {
    return g->sh == 1 && g->sw == 1 && pool_line(g) <= POOL_FLAT_MAX_W;
}

/* floats of scratch one plane needs: a depthwise conv's phase planes and wide output; a
 * pool's three planes (flat) or its line and output row */
static int64_t window_scratch(const window_t *g, int kind) {
    if (kind == WIN_DW) return (g->sh * g->sw * g->hq + g->oh) * g->wq;
    return pool_flat(g) ? 3 * pool_rows(g) * pool_line(g) : pool_line(g) + g->ow;
}

/* Depthwise conv of one plane by phase planes: the input is split into SH x SW phase
 * planes, zero padded,
 *     phase[ph][pw][r][c] = x[r * SH + ph - PT][c * SW + pw - PL],
 * in which every tap (i, j) of every output pixel is the same shifted element
 *     phase[(i*DH) % SH][(j*DW) % SW][oh + (i*DH) / SH][ow + (j*DW) / SW],
 * so each tap is one long contiguous multiply-add over the output laid out as OH rows of WQ
 * (the phase width); the WQ - OW extra columns of each row are dropped at the end. */
MULTIVERSION static void dw_plane(const window_t *g, const float *restrict xc,
                                  const float *restrict wk, float b, const float *restrict res,
                                  act_t act, float *restrict yc, float *restrict scratch) {
    int64_t HQ = g->hq, WQ = g->wq, plane = HQ * WQ, SW = g->sw;
    for (int64_t ph = 0; ph < g->sh; ph++)
        for (int64_t pw = 0; pw < SW; pw++)
            fill_phase(scratch + (ph * SW + pw) * plane, HQ, WQ, xc, g->h, g->w, g->sh, SW, ph,
                       pw, g->pt, g->pl, 0.0f);
    float *wide = scratch + g->sh * SW * plane;
    int64_t span = g->oh * WQ;
    for (int64_t k = 0; k < span; k++) wide[k] = b;
    for (int64_t i = 0; i < g->kh; i++) {
        for (int64_t j = 0; j < g->kw; j++) {
            int64_t a = i * g->dh, c = j * g->dw;
            const float *src = scratch + ((a % g->sh) * SW + c % SW) * plane + (a / g->sh) * WQ
                               + c / SW;
            float wv = wk[i * g->kw + j];
            for (int64_t k = 0; k < span; k++) wide[k] += wv * src[k];
        }
    }
    for (int64_t oh = 0; oh < g->oh; oh++)  /* crop the rows, with the epilogue */
        finish(yc + oh * g->ow, wide + oh * WQ, g->ow, 0.0f, res ? res + oh * g->ow : NULL, act);
}

/* ---- pooling, separably ------------------------------------------------------------------
 *
 * Max and average pooling (no dilation) of one plane as a vertical then a horizontal
 * reduction: per output row, the KH input rows of its windows are reduced column by column
 * into `line` (the pad value outside the input), then each output reduces KW consecutive
 * entries of `line` at stride SW. The input rows are read in place: copying them into
 * phase planes first (as dw_plane does) cost pooling more than its taps; a 3x3/2 max pool
 * of 64x111x111 takes 0.6x the time this way. */
#define POOL_OP(max, a, b) ((max) ? max_nan((a), (b)) : (a) + (b))

MULTIVERSION static void pool_plane(const window_t *g, int max, const float *restrict xc,
                                    const float *restrict recip, act_t act,
                                    float *restrict yc, float *restrict line,
                                    float *restrict out) {
    int64_t H = g->h, W = g->w, KH = g->kh, KW = g->kw, SW = g->sw, OW = g->ow, PL = g->pl;
    int64_t wv = pool_line(g);  /* line[k]: input column k - PL */
    int64_t lo = PL < wv ? PL : wv, hi = W + PL < wv ? W + PL : wv, n = hi > lo ? hi - lo : 0;
    float pad = max ? -INFINITY : 0.0f;
    for (int64_t k = 0; k < lo; k++) line[k] = pad;
    for (int64_t k = lo + n; k < wv; k++) line[k] = pad;
    float *v = line + lo;
    for (int64_t oh = 0; oh < g->oh; oh++) {
        int64_t r0 = oh * g->sh - g->pt;
        int64_t i0 = r0 < 0 ? -r0 : 0, i1 = H - r0 < KH ? H - r0 : KH;
        const float *a = xc + (r0 + i0) * W, *b = a + W, *c = b + W;
        if (i1 - i0 <= 0) {
            for (int64_t k = 0; k < n; k++) v[k] = pad;
        } else if (i1 - i0 == 1) {
            for (int64_t k = 0; k < n; k++) v[k] = a[k];
        } else if (i1 - i0 == 2) {
            for (int64_t k = 0; k < n; k++) v[k] = POOL_OP(max, b[k], a[k]);
        } else {  /* three rows in one pass, then any more one by one */
            for (int64_t k = 0; k < n; k++) v[k] = POOL_OP(max, c[k], POOL_OP(max, b[k], a[k]));
            for (int64_t i = i0 + 3; i < i1; i++) {
                const float *d = xc + (r0 + i) * W;
                for (int64_t k = 0; k < n; k++) v[k] = POOL_OP(max, d[k], v[k]);
            }
        }
        if (SW == 2 && KW == 3) {  /* the common 3x3/2 window: one pass, a constant stride */
            for (int64_t k = 0; k < OW; k++)
                out[k] = POOL_OP(max, line[2 * k + 2], POOL_OP(max, line[2 * k + 1], line[2 * k]));
        } else {
            for (int64_t k = 0; k < OW; k++) out[k] = line[k * SW];
            for (int64_t j = 1; j < KW; j++)
                for (int64_t k = 0; k < OW; k++) out[k] = POOL_OP(max, line[k * SW + j], out[k]);
        }
        if (!max)
            for (int64_t k = 0; k < OW; k++) out[k] *= recip[oh * OW + k];
        finish(yc + oh * OW, out, OW, 0.0f, NULL, act);
    }
}

/* Pooling of a small plane in passes over all of it (its rows are too short for vector
 * loops of their own, and a wide window reduces each row KW times in pool_plane; the int8
 * max pool in qeltwise.c goes the same way): the plane is copied
 * into `padded` (pool_rows x pool_line, the pad value around it), each value is reduced with
 * the KH - 1 values below it (`rows`, one flat pass: k, k + wp, k + 2 wp... are a column),
 * then with the KW - 1 values after it (`wins`; values past a row's end mix in the next
 * row's, read by no window), and each output is one value of `wins`. The sums are taken in
 * pool_plane's order, so both give the same bits (but for a pad's 0 added to a -0). */
MULTIVERSION static void pool_plane_flat(const window_t *g, int max, const float *restrict xc,
                                         const float *restrict recip, act_t act,
                                         float *restrict yc, float *restrict padded) {
    int64_t H = g->h, W = g->w, OW = g->ow, KH = g->kh, KW = g->kw, SH = g->sh, SW = g->sw;
    int64_t hp = pool_rows(g), wp = pool_line(g), pt = g->pt, pl = g->pl;
    float *restrict rows = padded + hp * wp, *restrict wins = rows + hp * wp;
    float pad = max ? -INFINITY : 0.0f;
    for (int64_t k = 0; k < hp * wp; k++) padded[k] = pad;
    int64_t r0 = pt > 0 ? 0 : -pt, r1 = hp - pt < H ? hp - pt : H;
    int64_t c0 = pl > 0 ? 0 : -pl, c1 = wp - pl < W ? wp - pl : W;
    if (c1 > c0)
        for (int64_t ih = r0; ih < r1; ih++)
            memcpy(padded + (ih + pt) * wp + pl + c0, xc + ih * W + c0,
                   (size_t)(c1 - c0) * sizeof(float));
    int64_t n = (hp - KH + 1) * wp;  /* the values a window's top row can start at */
    const float *col = padded;
    if (KH > 1) {
        for (int64_t k = 0; k < n; k++) rows[k] = POOL_OP(max, padded[k + wp], padded[k]);
        for (int64_t i = 2; i < KH; i++) {
            const float *restrict below = padded + i * wp;
            for (int64_t k = 0; k < n; k++) rows[k] = POOL_OP(max, below[k], rows[k]);
        }
        col = rows;
    }
    int64_t m = n - KW + 1;
    const float *win = col;
    if (KW > 1) {
        for (int64_t k = 0; k < m; k++) wins[k] = POOL_OP(max, col[k + 1], col[k]);
        for (int64_t j = 2; j < KW; j++)
            for (int64_t k = 0; k < m; k++) wins[k] = POOL_OP(max, col[k + j], wins[k]);
        win = wins;
    }
    for (int64_t oh = 0; oh < g->oh; oh++) {
        const float *src = win + oh * SH * wp;
        float *out = yc + oh * OW;
        for (int64_t k = 0; k < OW; k++) out[k] = src[k * SW];
        if (!max)
            for (int64_t k = 0; k < OW; k++) out[k] *= recip[oh * OW + k];
        finish(out, out, OW, 0.0f, NULL, act);
    }
}

/* A windowed kernel over `planes` planes: plane q reads input plane q / mult (depthwise
 * channel multiplier; 1 for pooling), weights wk + q % per * KH*KW, bias[q % per]. */
typedef struct {
    window_t g;
    int kind;
    const float *x, *w, *bias, *recip, *res;
    float *y;
    act_t act;
    int64_t planes, mult, per, per_task;
    atomic_int *failed;  /* set by a task whose thread has no memory for its scratch */
} window_ctx;

static void window_task(const void *ctx, int64_t t) {
    const window_ctx *cx = ctx;
    const window_t *g = &cx->g;
    float *scratch = thread_scratch(window_scratch(g, cx->kind));
    if (!scratch) { atomic_store(cx->failed, 1); return; }
    int64_t q0 = t * cx->per_task, q1 = q0 + cx->per_task;
    if (q1 > cx->planes) q1 = cx->planes;
    for (int64_t q = q0; q < q1; q++) {
        int64_t o = q % cx->per;
        float *y = cx->y + q * g->oh * g->ow;
        if (cx->kind == WIN_DW)
            dw_plane(g, cx->x + q / cx->mult * g->h * g->w, cx->w + o * g->kh * g->kw,
                     cx->bias ? cx->bias[o] : 0.0f, cx->res ? cx->res + q * g->oh * g->ow : NULL,
                     cx->act, y, scratch);
        else if (pool_flat(g))
            pool_plane_flat(g, cx->kind == WIN_MAX, cx->x + q * g->h * g->w, cx->recip, cx->act,
                            y, scratch);
        else
            pool_plane(g, cx->kind == WIN_MAX, cx->x + q * g->h * g->w, cx->recip, cx->act, y,
                       scratch, scratch + pool_line(g));
    }
}

/* Returns -1 when a thread found no memory for its scratch. */
static int windowed(window_ctx *cx) {
    atomic_int failed = 0;
    const window_t *g = &cx->g;
    /* per plane: the taps' vector loops (8 lanes), and ~5 ns per row loop */
    double plane_ns = (double)g->oh * g->wq * g->kh * g->kw / 8 + (g->hq + 2 * g->oh) * 5;
    cx->per_task = per_task(cx->planes, task_count(cx->planes * plane_ns, cx->planes));
    cx->failed = &failed;
    parallel(window_task, cx, (cx->planes + cx->per_task - 1) / cx->per_task);
    return atomic_load(&failed) ? -1 : 0;
}

/* Depthwise conv on small planes, channels last: a block of DW_BLOCK output channels is
 * transposed to (pixel, channel), padded, so that every tap of every pixel is one vector
 * multiply-add across the block's channels (on a 4x4 plane the per-plane loops of
 * dw_plane would be all overhead), then transposed back with the epilogue. An input
 * stored channels last (C_XCL) is copied as it is, a run of channels per pixel, and then
 * this form is used whatever the plane size. */
#define DW_BLOCK 16
#ifndef DW_SMALL_PLANE
#define DW_SMALL_PLANE 256  /* output planes up to this many pixels go channels-last (64 and
                            * 1024 measured slower on MobileNetV2 and ShuffleNet) */
#endif

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y;
    act_t act;
    int64_t hp, wp, blocks, per_task;  /* padded input extent; channel blocks per image */
    atomic_int *failed;
} dwcl_ctx;

static int64_t dwcl_scratch(const dwcl_ctx *cx) {
    const int64_t *p = cx->p;
    return (cx->hp * cx->wp + p[C_KH] * p[C_KW] + p[C_OH] * p[C_OW]) * DW_BLOCK;
}

/* A block of DW_BLOCK channels as one vector value (GCC/clang vector extensions). */
typedef float dw_vec __attribute__((vector_size(DW_BLOCK * sizeof(float)), aligned(4)));
/* Output pixels of a row computed together: independent accumulator chains (one pixel's
 * taps form a chain of dependent multiply-adds). 8 with AVX-512 (8 registers); with 8-float
 * vectors each pixel takes two, so 4 (16 accumulators spilled on AVX2, 8x slower). */
#define DW_PIXELS 8
#define DW_PIXELS_NARROW 4

/* NP consecutive output pixels of a row, every tap, into out (pixel-major, DW_BLOCK lanes);
 * `row` is the padded input at the first pixel's window corner. */
static inline __attribute__((always_inline)) void dw_pixels(
        const float *row, const float *wt, dw_vec bias, const int64_t *p, int64_t wp,
        float *out, int NP) {
    int64_t KW = p[C_KW], step = p[C_SW] * DW_BLOCK;
    dw_vec acc[DW_PIXELS];
    for (int q = 0; q < NP; q++) acc[q] = bias;
    for (int64_t i = 0; i < p[C_KH]; i++) {
        for (int64_t j = 0; j < KW; j++) {
            const float *src = row + (i * p[C_DH] * wp + j * p[C_DW]) * DW_BLOCK;
            /* plain loads of the unaligned vector type (memcpy became a copy loop) */
            dw_vec w = *(const dw_vec *)(wt + (i * KW + j) * DW_BLOCK);
            for (int q = 0; q < NP; q++) acc[q] += w * *(const dw_vec *)(src + q * step);
        }
    }
    for (int q = 0; q < NP; q++) *(dw_vec *)(out + q * DW_BLOCK) = acc[q];
}

MULTIVERSION static void dwcl_block(const dwcl_ctx *cx, int64_t n, int64_t c0, float *scratch) {
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], OH = p[C_OH], OW = p[C_OW], KH = p[C_KH], KW = p[C_KW];
    int64_t SH = p[C_SH], SW = p[C_SW], PT = p[C_PT], PL = p[C_PL];
    int64_t O = p[C_O], C = p[C_C], mult = O / C, KK = KH * KW, HP = cx->hp, WP = cx->wp;
    int64_t cb = O - c0 < DW_BLOCK ? O - c0 : DW_BLOCK;
    float *xin = scratch, *wt = xin + HP * WP * DW_BLOCK, *out = wt + KK * DW_BLOCK;
    int64_t r0 = PT, r1 = H + PT < HP ? H + PT : HP, q0 = PL, q1 = W + PL < WP ? W + PL : WP;
    if (cb < DW_BLOCK) {  /* lanes past the channels are computed too: zero them */
        for (int64_t k = 0; k < HP * WP * DW_BLOCK; k++) xin[k] = 0.0f;
    } else {  /* the padding only; the input overwrites the rest */
        for (int64_t k = 0; k < r0 * WP * DW_BLOCK; k++) xin[k] = 0.0f;
        for (int64_t k = r1 * WP * DW_BLOCK; k < HP * WP * DW_BLOCK; k++) xin[k] = 0.0f;
        for (int64_t r = r0; r < r1; r++) {
            float *row = xin + r * WP * DW_BLOCK;
            for (int64_t k = 0; k < q0 * DW_BLOCK; k++) row[k] = 0.0f;
            for (int64_t k = q1 * DW_BLOCK; k < WP * DW_BLOCK; k++) row[k] = 0.0f;
        }
    }
    for (int64_t k = 0; k < KK * DW_BLOCK; k++) wt[k] = 0.0f;
    if (p[C_XCL]) {  /* channels last already (then mult is 1): a run of channels per pixel */
        for (int64_t r = r0; r < r1; r++) {
            for (int64_t q = q0; q < q1; q++) {
                const float *src = cx->x + ((n * H + r - PT) * W + q - PL) * C + c0;
                if (cb == DW_BLOCK) memcpy(xin + (r * WP + q) * DW_BLOCK, src, sizeof(dw_vec));
                else memcpy(xin + (r * WP + q) * DW_BLOCK, src, cb * sizeof(float));
            }
        }
    } else {
        for (int64_t cc = 0; cc < cb; cc++) {
            const float *xc = cx->x + (n * C + (c0 + cc) / mult) * H * W;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t q = q0; q < q1; q++)
                    xin[(r * WP + q) * DW_BLOCK + cc] = xc[(r - PT) * W + q - PL];
        }
    }
    for (int64_t cc = 0; cc < cb; cc++)
        for (int64_t t = 0; t < KK; t++) wt[t * DW_BLOCK + cc] = cx->w[(c0 + cc) * KK + t];
    float b[DW_BLOCK];
    for (int64_t cc = 0; cc < DW_BLOCK; cc++) b[cc] = cx->bias && cc < cb ? cx->bias[c0 + cc] : 0.0f;
    dw_vec bias;
    memcpy(&bias, b, sizeof bias);
    int wide = vector_width() == 16;
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *row = xin + oh * SH * WP * DW_BLOCK;
        float *o = out + oh * OW * DW_BLOCK;
        int64_t ow = 0;
        if (wide) {
            for (; ow + DW_PIXELS <= OW; ow += DW_PIXELS)
                dw_pixels(row + ow * SW * DW_BLOCK, wt, bias, p, WP, o + ow * DW_BLOCK, DW_PIXELS);
        }
        for (; ow + DW_PIXELS_NARROW <= OW; ow += DW_PIXELS_NARROW)
            dw_pixels(row + ow * SW * DW_BLOCK, wt, bias, p, WP, o + ow * DW_BLOCK,
                      DW_PIXELS_NARROW);
        for (; ow < OW; ow++)
            dw_pixels(row + ow * SW * DW_BLOCK, wt, bias, p, WP, o + ow * DW_BLOCK, 1);
    }
    for (int64_t cc = 0; cc < cb; cc++) {
        float *yc = cx->y + (n * O + c0 + cc) * OH * OW;
        const float *rc = cx->res ? cx->res + (n * O + c0 + cc) * OH * OW : NULL;
        for (int64_t k = 0; k < OH * OW; k++)
            yc[k] = act_apply(out[k * DW_BLOCK + cc] + (rc ? rc[k] : 0.0f), cx->act);
    }
}

static void dwcl_task(const void *ctx, int64_t t) {
    const dwcl_ctx *cx = ctx;
    float *scratch = thread_scratch(dwcl_scratch(cx));
    if (!scratch) { atomic_store(cx->failed, 1); return; }
    int64_t total = cx->p[C_N] * cx->blocks, q0 = t * cx->per_task, q1 = q0 + cx->per_task;
    for (int64_t q = q0; q < q1 && q < total; q++)
        dwcl_block(cx, q / cx->blocks, q % cx->blocks * DW_BLOCK, scratch);
}

/* Depthwise conv (one input channel per group): conv parameters, slots x, w, bias,
 * residual, y. Returns -1 when a thread found no memory for its scratch. */
/* A one-tap depthwise conv (a BatchNorm no conv absorbed): y = act(x * w[c] + b[c]) by
 * blocks of planes, in place when y is x. */
typedef struct {
    const float *x, *w, *bias, *res;
    float *y;
    act_t act;
    int64_t planes, channels, size, per;
} affine_ctx;

MULTIVERSION static void affine_task(const void *ctx, int64_t t) {
    const affine_ctx *cx = ctx;
    int64_t end = (t + 1) * cx->per < cx->planes ? (t + 1) * cx->per : cx->planes;
    for (int64_t q = t * cx->per; q < end; q++) {
        int64_t c = q % cx->channels;
        const float *x = cx->x + q * cx->size;
        float *y = cx->y + q * cx->size, scale = cx->w[c];
#pragma GCC ivdep
        for (int64_t i = 0; i < cx->size; i++) y[i] = x[i] * scale;
        finish(y, y, cx->size, cx->bias ? cx->bias[c] : 0.0f, cx->res ? cx->res + q * cx->size : NULL,
               cx->act);
    }
}

static int one_tap(const int64_t *p) {
    return p[C_KH] == 1 && p[C_KW] == 1 && p[C_SH] == 1 && p[C_SW] == 1 && !p[C_PT] && !p[C_PL]
           && p[C_O] == p[C_C] && p[C_OH] == p[C_H] && p[C_OW] == p[C_W] && !p[C_XCL];
}

int dwconv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    const float *x = slots[s->slot[S_X]], *w = slots[s->slot[S_W]];
    const float *bias = s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL;
    const float *res = s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL;
    float *y = slots[s->slot[S_Y]];
    if (one_tap(p)) {
        int64_t planes = p[C_N] * p[C_C], size = p[C_H] * p[C_W];
        affine_ctx cx = {x, w, bias, res, y, act_of(s, C_ACT), planes, p[C_C], size, 0};
        cx.per = per_task(planes, task_count((double)planes * size * 0.5, planes));
        parallel(affine_task, &cx, (planes + cx.per - 1) / cx.per);
        return 0;
    }
    if (p[C_OH] * p[C_OW] <= DW_SMALL_PLANE || p[C_XCL]) {
        atomic_int failed = 0;
        dwcl_ctx cx = {p, x, w, bias, res, y, act_of(s, C_ACT),
                       (p[C_OH] - 1) * p[C_SH] + (p[C_KH] - 1) * p[C_DH] + 1,
                       (p[C_OW] - 1) * p[C_SW] + (p[C_KW] - 1) * p[C_DW] + 1,
                       (p[C_O] + DW_BLOCK - 1) / DW_BLOCK, 1, &failed};
        int64_t total = p[C_N] * cx.blocks;
        /* per block: the taps' vector loops and ~1 ns per element moved */
        double ns = (double)p[C_OH] * p[C_OW] * p[C_KH] * p[C_KW] / 2
                    + (double)(cx.hp * cx.wp + 2 * p[C_OH] * p[C_OW]) * DW_BLOCK;
        cx.per_task = per_task(total, task_count(total * ns, total));
        parallel(dwcl_task, &cx, (total + cx.per_task - 1) / cx.per_task);
        return atomic_load(&failed) ? -1 : 0;
    }
    window_ctx cx = {window_of(p[C_H], p[C_W], p[C_OH], p[C_OW], p[C_KH], p[C_KW], p[C_SH],
                               p[C_SW], p[C_DH], p[C_DW], p[C_PT], p[C_PL]),
                     WIN_DW, x, w, bias, NULL, res, y, act_of(s, C_ACT), p[C_N] * p[C_O],
                     p[C_O] / p[C_C], p[C_O], 1, NULL};
    return windowed(&cx);
}

/* pool parameters: planes (N*C), H, W, OH, OW, KH, KW, SH, SW, PT, PL, act; slots x,
 * reciprocal window counts (OH, OW) for avg, y */
enum { P_PLANES, P_H, P_W, P_OH, P_OW, P_KH, P_KW, P_SH, P_SW, P_PT, P_PL, P_ACT };

int pool2d(const lnpu_step *s, void **slots, int max) {
    const int64_t *p = s->p;
    window_ctx cx = {window_of(p[P_H], p[P_W], p[P_OH], p[P_OW], p[P_KH], p[P_KW], p[P_SH],
                               p[P_SW], 1, 1, p[P_PT], p[P_PL]),
                     max ? WIN_MAX : WIN_AVG, slots[s->slot[0]], NULL, NULL,
                     max ? NULL : slots[s->slot[1]], NULL, slots[s->slot[2]], act_of(s, P_ACT),
                     p[P_PLANES], 1, 1, 1, NULL};
    return windowed(&cx);
}

/* global pool: planes, plane size, max?, act. Task t: a block of planes, each reduced in
 * GP_LANES partial sums (maxima) that vectorize, then combined. */
enum { G_PLANES, G_SIZE, G_MAX, G_ACT };
#define GP_LANES 16

typedef struct {
    const float *x;
    float *y;
    int64_t size, per_task, planes;
    int max;
    act_t act;
} gpool_ctx;

MULTIVERSION static void gpool_task(const void *ctx, int64_t t) {
    const gpool_ctx *cx = ctx;
    int64_t q0 = t * cx->per_task, q1 = q0 + cx->per_task < cx->planes ? q0 + cx->per_task : cx->planes;
    int64_t size = cx->size, whole = size / GP_LANES * GP_LANES;
    for (int64_t q = q0; q < q1; q++) {
        const float *xc = cx->x + q * size;
        float lane[GP_LANES], r;
        if (cx->max) {
            for (int l = 0; l < GP_LANES; l++) lane[l] = -INFINITY;
            for (int64_t i = 0; i < whole; i += GP_LANES)
                for (int l = 0; l < GP_LANES; l++) lane[l] = max_nan(xc[i + l], lane[l]);
            r = -INFINITY;
            for (int l = 0; l < GP_LANES; l++) r = max_nan(lane[l], r);
            for (int64_t i = whole; i < size; i++) r = max_nan(xc[i], r);
        } else {
            for (int l = 0; l < GP_LANES; l++) lane[l] = 0.0f;
            for (int64_t i = 0; i < whole; i += GP_LANES)
                for (int l = 0; l < GP_LANES; l++) lane[l] += xc[i + l];
            double sum = 0.0;
            for (int l = 0; l < GP_LANES; l++) sum += lane[l];
            for (int64_t i = whole; i < size; i++) sum += xc[i];
            r = (float)(sum / (double)size);
        }
        finish(cx->y + q, &r, 1, 0.0f, NULL, cx->act);
    }
}

void global_pool(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    gpool_ctx cx = {slots[s->slot[0]], slots[s->slot[1]], p[G_SIZE], 1, p[G_PLANES],
                    (int)p[G_MAX], act_of(s, G_ACT)};
    cx.per_task = per_task(p[G_PLANES], task_count((double)p[G_PLANES] * p[G_SIZE]
                                                   / COPY_FLOATS_PER_NS, p[G_PLANES]));
    parallel(gpool_task, &cx, (p[G_PLANES] + cx.per_task - 1) / cx.per_task);
}

