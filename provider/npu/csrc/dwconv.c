/* ---- the depthwise conv ------------------------------------------------------------------
 *
 * Its entry (dwconv) picks one of three forms: one tap (a BatchNorm no conv absorbed) as a
 * per-plane affine pass; small planes (or a channels-last input) channels last, a block of
 * channels per vector; bigger planes one at a time by phase planes (window.c). */
#include "window.h"

/* Depthwise conv on small planes, channels last: a block of DW_BLOCK output channels is
 * transposed to (pixel, channel), padded, so that every tap of every pixel is one vector
 * multiply-add across the block's channels (on a 4x4 plane the per-plane loops of
 * dw_plane would be all overhead), then transposed back with the epilogue. An input
 * stored channels last (C_XCL) takes this form whatever the plane size, and a whole block
 * of its channels is read where it is, not copied (the copy was a quarter of this kernel's
 * time on MobileNetV2): the columns whose windows lie inside the image go by rows, each
 * with only its kernel rows inside it; the others in groups of pixels down those columns,
 * each tap checked (a lone pixel's taps are a chain of dependent multiply-adds). */
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

/* Whether every block of channels is read in place (a channels-last input, whole blocks):
 * then no block needs the padded copy. */
static int dwcl_all_in_place(const int64_t *p) { return p[C_XCL] && p[C_O] % DW_BLOCK == 0; }

/* A block's scratch: its weights by tap, its output pixels, and the padded copy of its
 * input unless every block reads its input in place. */
static int64_t dwcl_scratch(const dwcl_ctx *cx) {
    const int64_t *p = cx->p;
    int64_t copy = dwcl_all_in_place(p) ? 0 : cx->hp * cx->wp;
    return (p[C_KH] * p[C_KW] + p[C_OH] * p[C_OW] + copy) * DW_BLOCK;
}

/* A block of DW_BLOCK channels as one vector value (GCC/clang vector extensions). */
typedef float dw_vec __attribute__((vector_size(DW_BLOCK * sizeof(float)), aligned(4)));
/* Output pixels of a row computed together: independent accumulator chains (one pixel's
 * taps form a chain of dependent multiply-adds). 8 with AVX-512 (8 registers); with 8-float
 * vectors each pixel takes two, so 4 (16 accumulators spilled on AVX2, 8x slower). */
#define DW_PIXELS 8
#define DW_PIXELS_NARROW 4

/* NP consecutive output pixels of a row, the taps of kernel rows 0 .. kh, into out
 * (pixel-major, DW_BLOCK lanes); `row` is the input at the first pixel's window corner (ps
 * floats from one input pixel to the next, rs from one row to the next) and wt the weights
 * of its first kernel row. */
static inline __attribute__((always_inline)) void dw_pixels(
        const float *row, const float *wt, dw_vec bias, const int64_t *p, int64_t ps, int64_t rs,
        int64_t kh, float *out, int NP) {
    int64_t KW = p[C_KW], step = p[C_SW] * ps;
    dw_vec acc[DW_PIXELS];
    for (int q = 0; q < NP; q++) acc[q] = bias;
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = 0; j < KW; j++) {
            const float *src = row + i * p[C_DH] * rs + j * p[C_DW] * ps;
            /* plain loads of the unaligned vector type (memcpy became a copy loop) */
            dw_vec w = *(const dw_vec *)(wt + (i * KW + j) * DW_BLOCK);
            for (int q = 0; q < NP; q++) acc[q] += w * *(const dw_vec *)(src + q * step);
        }
    }
    for (int q = 0; q < NP; q++) *(dw_vec *)(out + q * DW_BLOCK) = acc[q];
}

/* dw_pixels for up to DW_PIXELS_NARROW pixels in 8-float halves of the block: AVX2 has the
 * registers for them, while GCC lowers 16-float vector types there through the stack (a
 * GPR round trip per vector: MobileNetV2's channels-last depthwise steps on an AVX2 EPYC). */
static inline __attribute__((always_inline)) void dw_pixels_narrow(
        const float *row, const float *wt, const float *bias, const int64_t *p, int64_t ps,
        int64_t rs, int64_t kh, float *out, int NP) {
    int64_t KW = p[C_KW], step = p[C_SW] * ps;
    vec8f acc[DW_PIXELS_NARROW][2];
    for (int q = 0; q < NP; q++) {
        acc[q][0] = *(const vec8f *)bias;
        acc[q][1] = *(const vec8f *)(bias + 8);
    }
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = 0; j < KW; j++) {
            const float *src = row + i * p[C_DH] * rs + j * p[C_DW] * ps;
            const float *wk = wt + (i * KW + j) * DW_BLOCK;
            vec8f w0 = *(const vec8f *)wk, w1 = *(const vec8f *)(wk + 8);
            for (int q = 0; q < NP; q++) {
                acc[q][0] += w0 * *(const vec8f *)(src + q * step);
                acc[q][1] += w1 * *(const vec8f *)(src + q * step + 8);
            }
        }
    }
    for (int q = 0; q < NP; q++) {
        *(vec8f *)(out + q * DW_BLOCK) = acc[q][0];
        *(vec8f *)(out + q * DW_BLOCK + 8) = acc[q][1];
    }
}

/* Output pixels 0 .. np of a row into out (pixel-major), dw_pixels' arguments. */
static inline __attribute__((always_inline)) void dw_row(
        const float *row, const float *wt, dw_vec bias, const float *b, const int64_t *p,
        int64_t ps, int64_t rs, int64_t kh, int wide, float *out, int64_t np) {
    int64_t ow = 0, step = p[C_SW] * ps;
    if (wide) {
        for (; ow + DW_PIXELS <= np; ow += DW_PIXELS)
            dw_pixels(row + ow * step, wt, bias, p, ps, rs, kh, out + ow * DW_BLOCK, DW_PIXELS);
        /* the rest in whole-block vectors too (half the instructions of the 8-float halves:
         * most of MobileNetV2's rows are 2, 6 or 14 pixels between their edges) */
        const float *rest = row + ow * step;
        float *o = out + ow * DW_BLOCK;
        switch (np - ow) {
        case 7: dw_pixels(rest, wt, bias, p, ps, rs, kh, o, 7); break;
        case 6: dw_pixels(rest, wt, bias, p, ps, rs, kh, o, 6); break;
        case 5: dw_pixels(rest, wt, bias, p, ps, rs, kh, o, 5); break;
        case 4: dw_pixels(rest, wt, bias, p, ps, rs, kh, o, 4); break;
        case 3: dw_pixels(rest, wt, bias, p, ps, rs, kh, o, 3); break;
        case 2: dw_pixels(rest, wt, bias, p, ps, rs, kh, o, 2); break;
        case 1: dw_pixels(rest, wt, bias, p, ps, rs, kh, o, 1); break;
        default: break;
        }
        return;
    }
    for (; ow + DW_PIXELS_NARROW <= np; ow += DW_PIXELS_NARROW)
        dw_pixels_narrow(row + ow * step, wt, b, p, ps, rs, kh, out + ow * DW_BLOCK,
                         DW_PIXELS_NARROW);
    /* the last pixels together too: one pixel's taps are a chain of dependent multiply-adds */
    const float *last = row + ow * step;
    switch (np - ow) {
    case 3: dw_pixels_narrow(last, wt, b, p, ps, rs, kh, out + ow * DW_BLOCK, 3); break;
    case 2: dw_pixels_narrow(last, wt, b, p, ps, rs, kh, out + ow * DW_BLOCK, 2); break;
    case 1: dw_pixels_narrow(last, wt, b, p, ps, rs, kh, out + ow * DW_BLOCK, 1); break;
    default: break;
    }
}

/* NP output pixels (oh[q], ow[q]) whose windows reach past a side of a channels-last input
 * read where it is (x: image n's first pixel at the block's first channel), each tap
 * checked and those outside skipped; pixels side by side, independent chains of
 * multiply-adds. Into out (pixel-major, the block's OH x OW pixels). */
static inline __attribute__((always_inline)) void dw_edge_pixels(
        const float *x, const float *wt, const float *b, const int64_t *p, const int64_t *oh,
        const int64_t *ow, float *out, int NP) {
    int64_t C = p[C_C], H = p[C_H], W = p[C_W], KW = p[C_KW];
    vec8f acc[DW_PIXELS_NARROW][2];
    for (int q = 0; q < NP; q++) {
        acc[q][0] = *(const vec8f *)b;
        acc[q][1] = *(const vec8f *)(b + 8);
    }
    for (int64_t i = 0; i < p[C_KH]; i++) {
        for (int64_t j = 0; j < KW; j++) {
            const float *wk = wt + (i * KW + j) * DW_BLOCK;
            vec8f w0 = *(const vec8f *)wk, w1 = *(const vec8f *)(wk + 8);
            for (int q = 0; q < NP; q++) {
                int64_t r = oh[q] * p[C_SH] - p[C_PT] + i * p[C_DH];
                int64_t col = ow[q] * p[C_SW] - p[C_PL] + j * p[C_DW];
                if (r < 0 || r >= H || col < 0 || col >= W) continue;
                const float *src = x + (r * W + col) * C;
                acc[q][0] += w0 * *(const vec8f *)src;
                acc[q][1] += w1 * *(const vec8f *)(src + 8);
            }
        }
    }
    for (int q = 0; q < NP; q++) {
        float *o = out + (oh[q] * p[C_OW] + ow[q]) * DW_BLOCK;
        *(vec8f *)o = acc[q][0];
        *(vec8f *)(o + 8) = acc[q][1];
    }
}

/* Every pixel of the output columns outside [lo, hi), DW_PIXELS_NARROW at a time down the
 * columns (dw_edge_pixels). */
static inline __attribute__((always_inline)) void dw_edges(
        const float *x, const float *wt, const float *b, const int64_t *p, int64_t lo,
        int64_t hi, float *out) {
    int64_t oh[DW_PIXELS_NARROW], ow[DW_PIXELS_NARROW];
    int np = 0;
    for (int64_t c = 0; c < p[C_OW]; c++) {
        if (c == lo) c = hi;
        for (int64_t r = 0; r < p[C_OH] && c < p[C_OW]; r++) {
            oh[np] = r;
            ow[np++] = c;
            if (np == DW_PIXELS_NARROW) {
                dw_edge_pixels(x, wt, b, p, oh, ow, out, DW_PIXELS_NARROW);
                np = 0;
            }
        }
    }
    switch (np) {
    case 3: dw_edge_pixels(x, wt, b, p, oh, ow, out, 3); break;
    case 2: dw_edge_pixels(x, wt, b, p, oh, ow, out, 2); break;
    case 1: dw_edge_pixels(x, wt, b, p, oh, ow, out, 1); break;
    default: break;
    }
}

/* Image n's block of channels from c0 (cb of them) into xin: (pixel, channel) on the padded
 * extent HP x WP, zeros around the input and in the lanes past cb. */
MULTIVERSION static void dwcl_fill(const dwcl_ctx *cx, int64_t n, int64_t c0, int64_t cb, float *xin) {
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], PT = p[C_PT], PL = p[C_PL];
    int64_t C = p[C_C], mult = p[C_O] / C, HP = cx->hp, WP = cx->wp;
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
    if (p[C_XCL]) {  /* channels last already (then mult is 1): a run of channels per pixel */
        for (int64_t r = r0; r < r1; r++) {
            for (int64_t q = q0; q < q1; q++) {
                const float *src = cx->x + ((n * H + r - PT) * W + q - PL) * C + c0;
                if (cb == DW_BLOCK) memcpy(xin + (r * WP + q) * DW_BLOCK, src, sizeof(dw_vec));
                else memcpy(xin + (r * WP + q) * DW_BLOCK, src, cb * sizeof(float));
            }
        }
    } else if (cb == DW_BLOCK && mult == 1) {  /* a pixel's lanes at once (a gather of 16
                                                * planes' values): the stores go in order */
        const float *xc = cx->x + (n * C + c0) * H * W;
#if HAVE_TRANSPOSE16
        if (vector_width() == 16) {  /* 16 pixels of a row at a time */
            for (int64_t r = r0; r < r1; r++)
                for (int64_t q = q0; q < q1; q += 16)
                    transpose16(xc + (r - PT) * W + q - PL, H * W, xin + (r * WP + q) * DW_BLOCK,
                                DW_BLOCK, DW_BLOCK, q1 - q < 16 ? (int)(q1 - q) : 16);
        } else if (transpose8_ok()) {  /* 8 pixels of a row, 8 channels, at a time */
            for (int64_t r = r0; r < r1; r++)
                for (int64_t q = q0; q < q1; q += 8)
                    for (int h = 0; h < DW_BLOCK; h += 8)
                        transpose8(xc + h * H * W + (r - PT) * W + q - PL, H * W,
                                   xin + (r * WP + q) * DW_BLOCK + h, DW_BLOCK, 8,
                                   q1 - q < 8 ? (int)(q1 - q) : 8);
        } else
#endif
        for (int64_t r = r0; r < r1; r++)
            for (int64_t q = q0; q < q1; q++) {
                const float *src = xc + (r - PT) * W + q - PL;
                float *dst = xin + (r * WP + q) * DW_BLOCK;
                for (int64_t cc = 0; cc < DW_BLOCK; cc++) dst[cc] = src[cc * H * W];
            }
    } else {
        for (int64_t cc = 0; cc < cb; cc++) {
            const float *xc = cx->x + (n * C + (c0 + cc) / mult) * H * W;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t q = q0; q < q1; q++)
                    xin[(r * WP + q) * DW_BLOCK + cc] = xc[(r - PT) * W + q - PL];
        }
    }
}

MULTIVERSION static void dwcl_block(const dwcl_ctx *cx, int64_t n, int64_t c0, float *scratch) {
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], OH = p[C_OH], OW = p[C_OW], KH = p[C_KH], KW = p[C_KW];
    int64_t SH = p[C_SH], SW = p[C_SW], PT = p[C_PT], PL = p[C_PL];
    int64_t O = p[C_O], C = p[C_C], KK = KH * KW, WP = cx->wp;
    int64_t cb = O - c0 < DW_BLOCK ? O - c0 : DW_BLOCK;
    float *wt = scratch, *out = wt + KK * DW_BLOCK, *xin = out + OH * OW * DW_BLOCK;
    int wide = vector_width() == 16;  /* 8 pixels per call, and transpose16 (else transpose8) */
    /* a whole block of a channels-last input is read where it is, else from a padded copy */
    int in_place = p[C_XCL] && cb == DW_BLOCK;
    if (!in_place) dwcl_fill(cx, n, c0, cb, xin);
    for (int64_t k = 0; k < KK * DW_BLOCK; k++) wt[k] = 0.0f;
    for (int64_t cc = 0; cc < cb; cc++)
        for (int64_t t = 0; t < KK; t++) wt[t * DW_BLOCK + cc] = cx->w[(c0 + cc) * KK + t];
    float b[DW_BLOCK];
    for (int64_t cc = 0; cc < DW_BLOCK; cc++) b[cc] = cx->bias && cc < cb ? cx->bias[c0 + cc] : 0.0f;
    dw_vec bias;
    memcpy(&bias, b, sizeof bias);
    if (in_place) {  /* the columns whose windows lie inside the image by rows, with the
                      * kernel rows inside it; the other columns by dw_edges */
        const float *xn = cx->x + n * H * W * C + c0;
        int64_t DH = p[C_DH], DW = p[C_DW], top = W - 1 - (KW - 1) * DW + PL;
        int64_t hi = top < 0 ? 0 : top / SW + 1 < OW ? top / SW + 1 : OW;
        int64_t lo = (PL + SW - 1) / SW < hi ? (PL + SW - 1) / SW : hi;
        for (int64_t oh = 0; oh < OH && lo < hi; oh++) {
            float *o = out + (oh * OW + lo) * DW_BLOCK;
            int64_t r = oh * SH - PT, i0 = r >= 0 ? 0 : (-r + DH - 1) / DH;
            int64_t i1 = r >= H ? 0 : (H - 1 - r) / DH + 1 < KH ? (H - 1 - r) / DH + 1 : KH;
            if (i0 >= i1) {  /* every tap in the padding: the bias alone */
                for (int64_t ow = lo; ow < hi; ow++, o += DW_BLOCK) memcpy(o, b, sizeof b);
                continue;
            }
            dw_row(xn + ((r + i0 * DH) * W + lo * SW - PL) * C, wt + i0 * KW * DW_BLOCK, bias,
                   b, p, C, W * C, i1 - i0, wide, o, hi - lo);
        }
        dw_edges(xn, wt, b, p, lo, hi, out);
    } else {
        for (int64_t oh = 0; oh < OH; oh++)
            dw_row(xin + oh * SH * WP * DW_BLOCK, wt, bias, b, p, DW_BLOCK, WP * DW_BLOCK, KH, wide,
                   out + oh * OW * DW_BLOCK, OW);
    }
    /* the activation over the whole block while it is one contiguous run (a residual is
     * stored in planes: then per plane after the transpose; one act_apply per element cost
     * more than the taps), then back to planes */
    if (!cx->res) finish(out, out, OH * OW * DW_BLOCK, 0.0f, NULL, cx->act);
    float *y0 = cx->y + (n * O + c0) * OH * OW;
#if HAVE_TRANSPOSE16
    if (wide) {
        for (int64_t k = 0; k < OH * OW; k += 16)
            transpose16(out + k * DW_BLOCK, DW_BLOCK, y0 + k, OH * OW,
                        OH * OW - k < 16 ? (int)(OH * OW - k) : 16, (int)cb);
    } else if (transpose8_ok()) {
        for (int64_t k = 0; k < OH * OW; k += 8)
            for (int64_t h = 0; h < cb; h += 8)
                transpose8(out + k * DW_BLOCK + h, DW_BLOCK, y0 + h * OH * OW + k, OH * OW,
                           OH * OW - k < 8 ? (int)(OH * OW - k) : 8, cb - h < 8 ? (int)(cb - h) : 8);
    } else
#endif
    for (int64_t cc = 0; cc < cb; cc++)
        for (int64_t k = 0; k < OH * OW; k++) y0[cc * OH * OW + k] = out[k * DW_BLOCK + cc];
    for (int64_t cc = 0; cc < cb && cx->res; cc++) {
        float *yc = y0 + cc * OH * OW;
        finish(yc, yc, OH * OW, 0.0f, cx->res + (n * O + c0 + cc) * OH * OW, cx->act);
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

/* Depthwise conv (one input channel per group): conv parameters, slots x, w, bias,
 * residual, y. Returns -1 when a thread found no memory for its scratch. */
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

