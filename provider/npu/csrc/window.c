#include "window.h"

/* ---- windowed planes: depthwise conv (planar), max pool, average pool -----------------
 *
 * One output plane from one input plane, a plane per task. window_t (window.h) holds the
 * geometry; the depthwise conv goes by phase planes (dw_plane), pooling separably
 * (pool_plane); the depthwise conv's entry and its small-plane forms are dwconv.c. */

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

/* Output rows whose lines pool_plane makes before reading any (see pool_plane). */
#ifndef POOL_ROWS
#define POOL_ROWS 4
#endif

/* Rows of a pooled plane's padded copy: every row a window reaches. */
static int64_t pool_rows(const window_t *g) { return (g->oh - 1) * g->sh + g->kh; }

static int pool_flat(const window_t *g) {
    return g->sh == 1 && g->sw == 1 && pool_line(g) <= POOL_FLAT_MAX_W;
}

/* floats of scratch one plane needs: a depthwise conv's phase planes and wide output; a
 * pool's three planes (flat) or its lines and output row */
static int64_t window_scratch(const window_t *g, int kind) {
    if (kind == WIN_DW) return (g->sh * g->sw * g->hq + g->oh) * g->wq;
    return pool_flat(g) ? 3 * pool_rows(g) * pool_line(g) : POOL_ROWS * pool_line(g) + g->ow;
}

/* Taps a depthwise plane sums in registers per pass over its output (a 7x7 kernel's 49
 * go in two passes, the second adding to the first's sums). */
#define DW_TAPS 32

/* Depthwise conv of one plane by phase planes (built unless `fill` is 0: the scratch
 * already holds those of this input plane): the input is split into SH x SW phase
 * planes, zero padded,
 *     phase[ph][pw][r][c] = x[r * SH + ph - PT][c * SW + pw - PL],
 * in which every tap (i, j) of every output pixel is the same shifted element
 *     phase[(i*DH) % SH][(j*DW) % SW][oh + (i*DH) / SH][ow + (j*DW) / SW],
 * so each tap is a contiguous load at its own offset over the output laid out as OH rows
 * of WQ (the phase width). Four vectors of outputs take every tap in registers, then are
 * stored once (each output's sum in tap order, as before: the same bits); the WQ - OW extra
 * columns of each row are dropped at the end. Summing tap by tap over chunks of the plane
 * instead (a load, a multiply-add and a store per tap and output) took, alternating in one
 * process on one AVX2 core, 1.5-1.8x the time: 3x3/1 planes of 16x32x32 44 -> 30 us,
 * 32x128x128 887 -> 492 us, 64x56x56 367 -> 236 us; 5x5 16x64x64 233 -> 125 us, 7x7
 * 24x40x40 300 -> 173 us; a 3x3/2 32x64x64 136 -> 112 us (12 rounds, 11-12 of 12 faster). */
MULTIVERSION static void dw_plane(const window_t *g, const float *restrict xc,
                                  const float *restrict wk, float b, const float *restrict res,
                                  act_t act, float *restrict yc, float *restrict scratch,
                                  int fill) {
    int64_t HQ = g->hq, WQ = g->wq, plane = HQ * WQ, SW = g->sw, taps = g->kh * g->kw;
    for (int64_t ph = 0; ph < g->sh && fill; ph++)
        fill_row_phase(scratch + ph * SW * plane, plane, HQ, WQ, xc, g->h, g->w, g->sh, SW, ph,
                       g->pt, g->pl);
    float *wide = scratch + g->sh * SW * plane;
    int64_t span = g->oh * WQ, off[DW_TAPS];
    for (int64_t t0 = 0; t0 < taps; t0 += DW_TAPS) {
        int64_t nt = taps - t0 < DW_TAPS ? taps - t0 : DW_TAPS;
        for (int64_t t = 0; t < nt; t++) {  /* tap t's offset in the phase planes */
            int64_t a = (t0 + t) / g->kw * g->dh, c = (t0 + t) % g->kw * g->dw;
            off[t] = ((a % g->sh) * SW + c % SW) * plane + (a / g->sh) * WQ + c / SW;
        }
        const float *w = wk + t0;
        int64_t k = 0;
        for (; k + 32 <= span; k += 32) {
            vec8f acc[4];
            for (int v = 0; v < 4; v++)
                acc[v] = t0 ? *(const vec8f *)(wide + k + 8 * v)
                            : (vec8f){b, b, b, b, b, b, b, b};
            for (int64_t t = 0; t < nt; t++) {
                const float *src = scratch + off[t] + k;
                float w1 = w[t];
                vec8f wv = {w1, w1, w1, w1, w1, w1, w1, w1};
                for (int v = 0; v < 4; v++) acc[v] += wv * *(const vec8f *)(src + 8 * v);
            }
            for (int v = 0; v < 4; v++) *(vec8f *)(wide + k + 8 * v) = acc[v];
        }
        for (; k < span; k++) {
            float sum = t0 ? wide[k] : b;
            for (int64_t t = 0; t < nt; t++) sum += w[t] * scratch[off[t] + k];
            wide[k] = sum;
        }
    }
    for (int64_t oh = 0; oh < g->oh; oh++)  /* crop the rows, with the epilogue */
        finish(yc + oh * g->ow, wide + oh * WQ, g->ow, 0.0f, res ? res + oh * g->ow : NULL, act);
}

/* ---- pooling, separably ------------------------------------------------------------------
 *
 * Max and average pooling (no dilation) of one plane as a vertical then a horizontal
 * reduction: per output row, the KH input rows of its windows are reduced column by column
 * into a `line` (the pad value outside the input), then each output reduces KW consecutive
 * entries of its line at stride SW. The input rows are read in place: copying them into
 * phase planes first (as dw_plane does) cost pooling more than its taps; a 3x3/2 max pool
 * of 64x111x111 takes 0.6x the time this way. The lines of POOL_ROWS output rows are made
 * before any is read: a line read right after its vector stores (at other offsets, a
 * strided window's loads) waited for them; alternating in one process on one AVX2 core,
 * 3x3/2 pools of 32x28x28 12.6 -> 10.6 us, 64x56x56 80 -> 66 us, 3x3/1 of 32x160x160
 * 650 -> 633 us (2 and 6 rows: between 1 and 4; 8 and 16: slower than 4). */
#define POOL_OP(max, a, b) \
    ((max) == POOL_MAX_PLAIN ? ((a) > (b) ? (a) : (b)) : (max) ? max_nan((a), (b)) : (a) + (b))

/* `max` of the pooling functions: 0 sums (average), POOL_MAX_NAN takes the max that keeps a
 * NaN, POOL_MAX_PLAIN the hardware's max (one instruction, where max_nan is four), for a
 * plane with no NaN (plane_has_nan: one more pass, which leaves the plane in cache). One
 * AVX-512 core, the step alone, processes alternating (fastest run of 1500 in each of five
 * processes a side): 5x5/1 of 256x13x13 69-99 -> 58-72 us, 3x3/2 of 96x13x13 16-23 -> 13-20
 * us (a noisy host; onnxruntime's NCHWc kernels take 16 and 6 us there). */
enum { POOL_MAX_NAN = 1, POOL_MAX_PLAIN = 2 };

MULTIVERSION static int plane_has_nan(const float *restrict x, int64_t n) {
    int nan = 0;
    for (int64_t i = 0; i < n; i++) nan |= x[i] != x[i];
    return nan;
}

MULTIVERSION static void pool_plane(const window_t *g, int max, const float *restrict xc,
                                    const float *restrict recip, act_t act,
                                    float *restrict yc, float *restrict lines,
                                    float *restrict out) {
    int64_t H = g->h, W = g->w, KH = g->kh, KW = g->kw, SW = g->sw, OW = g->ow, PL = g->pl;
    int64_t wv = pool_line(g);  /* line[k]: input column k - PL */
    int64_t lo = PL < wv ? PL : wv, hi = W + PL < wv ? W + PL : wv, n = hi > lo ? hi - lo : 0;
    float pad = max ? -INFINITY : 0.0f;
    for (int64_t r = 0; r < POOL_ROWS && r < g->oh; r++) {
        float *line = lines + r * wv;
        for (int64_t k = 0; k < lo; k++) line[k] = pad;
        for (int64_t k = lo + n; k < wv; k++) line[k] = pad;
    }
    for (int64_t o0 = 0; o0 < g->oh; o0 += POOL_ROWS) {
        int64_t o1 = o0 + POOL_ROWS < g->oh ? o0 + POOL_ROWS : g->oh;
        for (int64_t oh = o0; oh < o1; oh++) {
            float *v = lines + (oh - o0) * wv + lo;
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
        }
        for (int64_t oh = o0; oh < o1; oh++) {
            const float *line = lines + (oh - o0) * wv;
            if (SW == 2 && KW == 3) {  /* the common 3x3/2 window: one pass, a constant stride */
                for (int64_t k = 0; k < OW; k++)
                    out[k] = POOL_OP(max, line[2 * k + 2], POOL_OP(max, line[2 * k + 1], line[2 * k]));
            } else if (SW == 2 && KW == 2) {  /* the 2x2/2 one (VGG, U-Net, CRNN): the
                * general loop's strided reads ran 2x2/2 max pools of 3x16x32x160 in 114 us,
                * this one in 49 (3x32x16x80: 69 -> 34; one core, the step alone) */
                for (int64_t k = 0; k < OW; k++) out[k] = POOL_OP(max, line[2 * k + 1], line[2 * k]);
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
}

/* Pooling of a small plane in passes over all of it (its rows are too short for vector
 * loops of their own, and a wide window reduces each row KW times in pool_plane; the int8
 * max pool in qeltwise.c goes the same way): the plane is copied
 * into `padded` (pool_rows x pool_line, the pad value around it), each value is reduced with
 * the KH - 1 values below it (`rows`, one flat pass: k, k + wp, k + 2 wp... are a column),
 * then with the KW - 1 values after it (`wins`; values past a row's end mix in the next
 * row's, read by no window), and each output is one value of `wins`. The sums are taken in
 * pool_plane's order, so both give the same bits (but for a pad's 0 added to a -0). A max's
 * output row is finished straight from `wins`: copied into the output first, value by value,
 * the epilogue's vector loads waited on those stores (5x5/1 of 128x20x20 80 -> 45 us). */
MULTIVERSION static void pool_plane_flat(const window_t *g, int max, const float *restrict xc,
                                         const float *restrict recip, act_t act,
                                         float *restrict yc, float *restrict padded) {
    int64_t H = g->h, W = g->w, OW = g->ow, KH = g->kh, KW = g->kw;
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
    for (int64_t oh = 0; oh < g->oh; oh++) {  /* stride 1 (pool_flat): a window per value */
        const float *src = win + oh * wp;
        float *out = yc + oh * OW;
        if (max) {
            finish(out, src, OW, 0.0f, NULL, act);
            continue;
        }
        for (int64_t k = 0; k < OW; k++) out[k] = src[k] * recip[oh * OW + k];
        finish(out, out, OW, 0.0f, NULL, act);
    }
}


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
        if (cx->kind == WIN_DW)  /* the planes of one input channel (a channel multiplier)
                                  * share its phase planes */
            dw_plane(g, cx->x + q / cx->mult * g->h * g->w, cx->w + o * g->kh * g->kw,
                     cx->bias ? cx->bias[o] : 0.0f, cx->res ? cx->res + q * g->oh * g->ow : NULL,
                     cx->act, y, scratch, q == q0 || q / cx->mult != (q - 1) / cx->mult);
        else {
            const float *x = cx->x + q * g->h * g->w;
            int max = cx->kind != WIN_MAX ? 0
                      : plane_has_nan(x, g->h * g->w) ? POOL_MAX_NAN : POOL_MAX_PLAIN;
            if (pool_flat(g))
                pool_plane_flat(g, max, x, cx->recip, cx->act, y, scratch);
            else
                pool_plane(g, max, x, cx->recip, cx->act, y, scratch,
                           scratch + POOL_ROWS * pool_line(g));
        }
    }
}

/* Returns -1 when a thread found no memory for its scratch. */
int windowed(window_ctx *cx) {
    atomic_int failed = 0;
    const window_t *g = &cx->g;
    /* per plane: the taps' vector loops (8 lanes), and ~5 ns per row loop */
    double plane_ns = (double)g->oh * g->wq * g->kh * g->kw / 8 + (g->hq + 2 * g->oh) * 5;
    cx->per_task = per_task(cx->planes, task_count(cx->planes * plane_ns, cx->planes));
    cx->failed = &failed;
    parallel(window_task, cx, (cx->planes + cx->per_task - 1) / cx->per_task);
    return atomic_load(&failed) ? -1 : 0;
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

