#include "npu.h"

/* ---- direct convolution ----------------------------------------------------------------
 *
 * A KxK conv without im2col. The image is copied once into zero-padded phase planes per
 * channel (as for the windowed kernels: phase (ph, pw) holds padded rows ph, ph + SH, ... and
 * columns pw, pw + SW, ...; stride 1 has one phase, the padded image), WQ columns wide, and
 * the output is computed on rows of the same width WQ, flattened: output position
 * k = oh * WQ + ow reads tap (i, j) of channel c at
 *     phase[c][(i*DH) % SH][(j*DW) % SW][k + (i*DH / SH) * WQ + j*DW / SW],
 * one offset per tap for every k. A tile of OB output channels x DNV vectors of consecutive
 * positions keeps its OB x DNV accumulators in registers; each (c, tap) step loads DNV
 * input vectors and broadcasts OB weights, which the compiler stored side by side for it
 * (provider/npu/ops/conv_weights.py; which convs run here is decided there too). The WQ - OW
 * extra columns of each row are computed and dropped. */
#define DVEC 16                   /* floats per vector (one AVX-512 register) */
#ifndef DNV
#define DNV 3                     /* vectors per tile: 48 positions (2 and 4 measured slower) */
#endif
#define DTILE (DVEC * DNV)
#define DIRECT_OB 8               /* output channels per tile: the compiler stores the weights
                                   * in blocks of this many (conv_weights.DIRECT_ROWS) */
#define MAX_TAPS 64               /* conv_weights.DIRECT_MAX_TAPS */
#ifndef DIRECT_PREFETCH
#define DIRECT_PREFETCH 64        /* steps ahead of the weights to prefetch */
#endif
typedef float vf __attribute__((vector_size(DVEC * sizeof(float)), aligned(4)));

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y, *phases;            /* C x SH*SW phase planes of `plane` floats */
    act_t act;
    int64_t n, wq, hq, plane, span, ptiles, oblocks;
    int64_t taps, tap_off[MAX_TAPS];  /* per tap: offset within a channel's phases */
} direct_ctx;

/* One tile: OB output channels (weights wp[t * OB + o]: the OB broadcasts of a step read
 * one run of floats) x NV vectors of positions from src0 (the group's first channel at
 * the tile's first position), stored to out (OB rows of DTILE). */
static inline __attribute__((always_inline)) void direct_tile(
        const direct_ctx *cx, const float *wp, const float *src0, float *out, int OB, int NV) {
    int64_t CG = cx->p[C_C] / cx->p[C_G], cstride = cx->p[C_SH] * cx->p[C_SW] * cx->plane;
    vf acc[DIRECT_OB][DNV];
    for (int o = 0; o < OB; o++)
        for (int v = 0; v < NV; v++) acc[o][v] = (vf){0};
    int64_t t = 0;
    for (int64_t c = 0; c < CG; c++) {
        const float *xc = src0 + c * cstride;
        for (int64_t tap = 0; tap < cx->taps; tap++, t++) {
            const float *src = xc + cx->tap_off[tap];
            /* the weights stream in once per block, from memory on big convs: ask for
             * them ahead (ResNet-50's 7x7 stage waited on them) */
            __builtin_prefetch(wp + (t + DIRECT_PREFETCH) * OB);
            vf x[DNV];
            for (int v = 0; v < NV; v++) memcpy(&x[v], src + v * DVEC, sizeof(vf));
            for (int o = 0; o < OB; o++) {
                float w1 = wp[t * OB + o];
                vf wv = {w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1};
                for (int v = 0; v < NV; v++) acc[o][v] += wv * x[v];
            }
        }
    }
    for (int o = 0; o < OB; o++)
        for (int v = 0; v < NV; v++) memcpy(out + o * DTILE + v * DVEC, &acc[o][v], sizeof(vf));
}

/* constant tile heights, so the accumulators stay in registers */
#define DIRECT_HEIGHTS(NV)                                                                  \
    if (ob == DIRECT_OB) direct_tile(cx, wp, src0, out, DIRECT_OB, NV);                     \
    else if (ob == 4) direct_tile(cx, wp, src0, out, 4, NV);                                \
    else if (ob == 2) direct_tile(cx, wp, src0, out, 2, NV);                                \
    else direct_tile(cx, wp, src0, out, 1, NV);

/* A tile of ob channels x nv vectors: full tiles have DNV vectors; a plane's last positions
 * go in a tile of just the vectors they need, so that at most 15 positions are computed
 * past the span. */
MULTIVERSION static void direct_tile_any(const direct_ctx *cx, const float *wp,
                                         const float *src0, float *out, int ob, int nv) {
    if (nv == DNV) { DIRECT_HEIGHTS(DNV) }
    else if (nv == 2) { DIRECT_HEIGHTS(2) }
    else { DIRECT_HEIGHTS(1) }
}

/* Task t: one block of DIRECT_OB output channels (of one group) over every position tile. */
MULTIVERSION static void direct_task(const void *ctx, int64_t t) {
    const direct_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t G = p[C_G], O = p[C_O], OG = O / G, OH = p[C_OH], OW = p[C_OW], WQ = cx->wq;
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW];
    int64_t g = t / cx->oblocks, o0 = g * OG + t % cx->oblocks * DIRECT_OB;
    int64_t o1 = o0 + DIRECT_OB < (g + 1) * OG ? o0 + DIRECT_OB : (g + 1) * OG;
    float tile[DIRECT_OB * DTILE];
    const float *src_g = cx->phases + g * (p[C_C] / G) * p[C_SH] * p[C_SW] * cx->plane;
    for (int64_t o = o0; o < o1;) {  /* the block in tiles of 8, 4, 2, 1 channels */
        int ob = o1 - o >= DIRECT_OB ? DIRECT_OB : o1 - o >= 4 ? 4 : o1 - o >= 2 ? 2 : 1;
        const float *wp = cx->w + o * K;  /* this tile's rows, K-major (conv_weights.py) */
        for (int64_t pt = 0; pt < cx->ptiles; pt++) {
            int64_t k0 = pt * DTILE, k1 = k0 + DTILE < cx->span ? k0 + DTILE : cx->span;
            direct_tile_any(cx, wp, src_g + k0, tile, ob, (int)((k1 - k0 + DVEC - 1) / DVEC));
            for (int r = 0; r < ob; r++) {  /* the tile's valid positions, with the epilogue */
                int64_t oc = o + r;
                float *y = cx->y + (cx->n * O + oc) * OH * OW, *t = tile + r * DTILE;
                const float *res = cx->res ? cx->res + (cx->n * O + oc) * OH * OW : NULL;
                float b = cx->bias ? cx->bias[oc] : 0.0f;
                if (!res)  /* the whole row of the tile in one pass of whole vectors (the
                            * pieces' short loops and their tails cost 12% of a conv) */
                    finish(t, t, DTILE, b, NULL, cx->act);
                for (int64_t oh = k0 / WQ; oh * WQ < k1; oh++) {  /* row pieces in the tile */
                    int64_t a = k0 > oh * WQ ? k0 - oh * WQ : 0;
                    int64_t e = k1 - oh * WQ < OW ? k1 - oh * WQ : OW;
                    if (a >= e) continue;
                    if (res)
                        finish(y + oh * OW + a, t + oh * WQ + a - k0, e - a, b,
                               res + oh * OW + a, cx->act);
                    else
                        memcpy(y + oh * OW + a, t + oh * WQ + a - k0, (e - a) * sizeof(float));
                }
            }
        }
        o += ob;
    }
}

/* The phase planes of channel t (zero padding, zero slack after each plane for the last
 * tiles' overrun). */
MULTIVERSION static void direct_phase_task(const void *ctx, int64_t t) {
    const direct_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], SH = p[C_SH], SW = p[C_SW];
    for (int64_t ph = 0; ph < SH; ph++) {
        for (int64_t pw = 0; pw < SW; pw++) {
            float *q = cx->phases + ((t * SH + ph) * SW + pw) * cx->plane;
            fill_phase(q, cx->hq, cx->wq, cx->x + (cx->n * p[C_C] + t) * H * W, H, W, SH, SW,
                       ph, pw, p[C_PT], p[C_PL], 0.0f);
            for (int64_t k = cx->hq * cx->wq; k < cx->plane; k++) q[k] = 0.0f;
        }
    }
}

/* Returns -1 when there is no host memory for the phase planes. */
int direct_conv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t SH = p[C_SH], SW = p[C_SW], OH = p[C_OH], OW = p[C_OW];
    int64_t G = p[C_G], OG = p[C_O] / G;
    direct_ctx cx = {p, slots[s->slot[S_X]], slots[s->slot[S_W]],
                     s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL,
                     s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL, slots[s->slot[S_Y]],
                     NULL, act_of(s, C_ACT), 0, 0, 0, 0, 0, 0, (OG + DIRECT_OB - 1) / DIRECT_OB,
                     p[C_KH] * p[C_KW], {0}};
    int64_t row_reach = (p[C_KH] - 1) * p[C_DH] / SH, col_reach = (p[C_KW] - 1) * p[C_DW] / SW;
    cx.wq = OW + col_reach;
    cx.hq = OH + row_reach + 1;  /* + a spare row: the last taps read past their row end */
    cx.span = OH * cx.wq;
    cx.ptiles = (cx.span + DTILE - 1) / DTILE;
    cx.plane = cx.hq * cx.wq + DTILE;  /* + slack: the last tile reads past the span */
    for (int64_t i = 0; i < p[C_KH]; i++) {
        for (int64_t j = 0; j < p[C_KW]; j++) {
            int64_t a = i * p[C_DH], b = j * p[C_DW];
            cx.tap_off[i * p[C_KW] + j] = ((a % SH) * SW + b % SW) * cx.plane + a / SH * cx.wq + b / SW;
        }
    }
    cx.phases = thread_scratch(p[C_C] * SH * SW * cx.plane);
    if (!cx.phases) return -1;
    for (int64_t n = 0; n < p[C_N]; n++) {
        cx.n = n;
        parallel(direct_phase_task, &cx, p[C_C]);
        parallel(direct_task, &cx, G * cx.oblocks);
    }
    return 0;
}

