/* The blocked convolution's tile kernels for one instruction set, included by blocked.c
 * once per set it compiles (the accumulators must fit that set's registers). The includer
 * defines:
 *   BK(name)  the name of this set's copy of `name`
 *   BK_ATTR   the attributes of the task function (its instruction set)
 *   BK_T      positions per full tile (a tile's T x NB vectors of 16 floats fill the
 *             registers: 24 of the 32 AVX-512 ones; on AVX2 a vector is two registers)
 *   BK_NB     blocks of 16 output channels per full tile
 *   BK_WIDE   1 where the set has AVX-512 (results turn through transpose16)
 * and gets BK(blocked_task), a parallel() task. The parameters are undefined at the end. */

/* One tile: T output positions of one row x NB blocks of 16 output channels. src: the first
 * position's input at the row's first valid kernel row, first channel block; w: the first
 * block's weights. Sums over channel blocks [cb0, cb1), valid kernel row i in [i0, i1),
 * column k and channel, in that order, onto the partial sums in `part` when cb0 > 0; leaves
 * them there when blocks remain, else adds bias and activation and stores to y. SW: the
 * stride when it is 1 or 2 (constant offsets between the positions), else 0; ICW: channels
 * per block (16, or an RGB image's 3). */
static inline __attribute__((always_inline)) void BK(blocked_tile)(
        const blocked_ctx *cx, const float *src, const float *w, int64_t i0, int64_t i1,
        int64_t n, int64_t oc, int64_t oh, int64_t ow, int T, int NB, int SW, int ICW,
        int64_t cb0, int64_t cb1, float *part) {
    const int64_t *p = cx->p;
    int64_t KW = p[C_KW], KH = p[C_KH], step = (SW ? SW : p[C_SW]) * ICW;
    int64_t row = p[C_DH] * cx->wp * ICW, col = p[C_DW] * ICW, plane = p[C_H] * cx->wp * ICW;
    int64_t wcb = KH * KW * ICW * 16, wblock = cx->cb * wcb;
    bvec acc[BK_NB][BK_T];
    for (int j = 0; j < NB; j++)
        for (int t = 0; t < T; t++) acc[j][t] = cb0 ? *(const bvec *)(part + (t * NB + j) * 16)
                                                    : (bvec){0};
    for (int64_t cb = cb0; cb < cb1; cb++) {
        for (int64_t i = i0; i < i1; i++) {
            for (int64_t k = 0; k < KW; k++) {
                const float *xs = src + cb * plane + (i - i0) * row + k * col;
                const float *ws = w + cb * wcb + (i * KW + k) * ICW * 16;
                for (int ic = 0; ic < ICW; ic++) {
                    bvec wv[BK_NB];
                    for (int j = 0; j < NB; j++) wv[j] = *(const bvec *)(ws + j * wblock + ic * 16);
                    for (int t = 0; t < T; t++) {
                        float v = xs[t * step + ic];
                        bvec xv = BSPLAT(v);
                        for (int j = 0; j < NB; j++) acc[j][t] += xv * wv[j];
                    }
                }
            }
        }
    }
    if (cb1 < cx->cb) {
        for (int j = 0; j < NB; j++)
            for (int t = 0; t < T; t++) *(bvec *)(part + (t * NB + j) * 16) = acc[j][t];
        return;
    }
    /* bias, residual (turned position-major through the same buffer) and a clamp in
     * registers; another activation over the tile's sums by epilogue (not inlined: inlined
     * in every tile it stayed scalar, a 32-channel SiLU conv on 8x8 took 220 us for 15);
     * then each block's sums turned into a row of T per output channel */
    const int64_t OHW = p[C_OH] * p[C_OW];
    int clamp = cx->act.kind == ACT_CLAMP;
    bvec lo = BSPLAT(cx->act.lo), hi = BSPLAT(cx->act.hi);
    for (int j = 0; j < NB; j++) {
        bvec bias = cx->bias ? *(const bvec *)(cx->bias + oc + j * 16) : (bvec){0};
        int64_t at = (n * p[C_O] + oc + j * 16) * OHW + oh * p[C_OW] + ow;
        float rows[16 * BK_T];
        if (cx->res) {
#if BK_WIDE
            transpose16(cx->res + at, OHW, rows, 16, 16, T);
#else
            for (int o = 0; o < 16; o++)
                for (int t = 0; t < T; t++) rows[t * 16 + o] = cx->res[at + o * OHW + t];
#endif
        }
        for (int t = 0; t < T; t++) {
            bvec v = acc[j][t] + bias;
            if (cx->res) v += *(const bvec *)(rows + t * 16);
            if (clamp) {  /* as finish: a NaN stays NaN */
                bmask below = v < lo, above = v > hi;
                v = (bvec)(((bmask)lo & below) | ((bmask)v & ~below));
                v = (bvec)(((bmask)hi & above) | ((bmask)v & ~above));
            }
            *(bvec *)(rows + t * 16) = v;
        }
        if (!clamp) epilogue(rows, T * 16, 0.0f, NULL, cx->act);
#if BK_WIDE
        transpose16(rows, 16, cx->y + at, OHW, T, 16);
#else
        for (int o = 0; o < 16; o++)
            for (int t = 0; t < T; t++) cx->y[at + o * OHW + t] = rows[t * 16 + o];
#endif
    }
}

#define BK_SW(t, nb, sw, icw) BK(blocked_tile)(cx, src, w, i0, i1, n, oc, oh, ow, t, nb, sw, icw, \
                                                 cb0, cb1, part)
#define BK_NBS(t, nb)                                                                      \
    if (kind == 1) BK_SW(t, nb, 1, 16);                                                    \
    else if (kind == 2) BK_SW(t, nb, 2, 16);                                               \
    else if (kind == 0) BK_SW(t, nb, 0, 16);                                               \
    else if (kind == 3) BK_SW(t, nb, 2, 3);                                                \
    else BK_SW(t, nb, 0, 3);
#define BK_TILE(t)                                                                         \
    case t:                                                                                \
        BK_NBS(t, nb)                                                                      \
        break;

/* Rows [oh0, oh1) of blocks [oc/16, oc/16 + nb) of image n, summed over channel blocks
 * [cb0, cb1): each row in as few tiles of at most BK_T positions as can be, of even widths (a
 * 14-wide row: 7 + 7, not 12 + 2, whose 2 x NB accumulators kept the arithmetic units idle);
 * parts: the rows' partial sums, position by position (BK_NB x 16 floats each); NULL when
 * [cb0, cb1) is every block. */
static inline __attribute__((always_inline)) void BK(rows_of)(
        const blocked_ctx *cx, const float *xi, const float *w, int64_t n, int64_t oc, int nb,
        int kind, int64_t oh0, int64_t oh1, int64_t cb0, int64_t cb1, float *parts) {
    const int64_t *p = cx->p;
    int64_t OW = p[C_OW], H = p[C_H], DH = p[C_DH], sw = p[C_SW];
    for (int64_t oh = oh0; oh < oh1; oh++) {
        int64_t r = oh * p[C_SH] - p[C_PT];  /* the input row of kernel row 0 */
        int64_t i0 = r >= 0 ? 0 : (-r + DH - 1) / DH;
        int64_t i1 = H - r <= 0 ? 0 : (H - r + DH - 1) / DH;
        if (i1 > p[C_KH]) i1 = p[C_KH];
        if (i0 > i1) i0 = i1;  /* no valid row: the bias alone */
        int tn;
        for (int64_t ow = 0, tile = 0; ow < OW; ow += tn, tile++) {
            tn = (int)(tile < cx->wide_tiles ? cx->tile_w + 1 : cx->tile_w);
            const float *src = i0 < i1 ? xi + ((r + i0 * DH) * cx->wp + ow * sw) * cx->icw : xi;
            float *part = parts ? parts + ((oh - oh0) * OW + ow) * BK_NB * 16 : NULL;
            switch (tn) {
#if BK_T > 6
                BK_TILE(12) BK_TILE(11) BK_TILE(10) BK_TILE(9) BK_TILE(8) BK_TILE(7)
#endif
                BK_TILE(6) BK_TILE(5) BK_TILE(4) BK_TILE(3) BK_TILE(2) BK_TILE(1)
            }
        }
    }
}

/* The tiles of BK_NB blocks and those of one block (a group's leftover) in functions of their
 * own: compiled into one, behind a branch GCC took for the rare one, the single-block tiles
 * kept their sums on the stack (a load and a store around every multiply-add), and a conv to
 * 16 channels took 450 us where one to 32 took 330 (48 channels in, 52x52, one core). */
BK_ATTR __attribute__((noinline)) static void BK(rows_nb)(
        const blocked_ctx *cx, const float *xi, const float *w, int64_t n, int64_t oc, int kind,
        int64_t oh0, int64_t oh1, int64_t cb0, int64_t cb1, float *parts) {
    BK(rows_of)(cx, xi, w, n, oc, BK_NB, kind, oh0, oh1, cb0, cb1, parts);
}

#if BK_NB > 1
BK_ATTR __attribute__((noinline)) static void BK(rows_1)(
        const blocked_ctx *cx, const float *xi, const float *w, int64_t n, int64_t oc, int kind,
        int64_t oh0, int64_t oh1, int64_t cb0, int64_t cb1, float *parts) {
    BK(rows_of)(cx, xi, w, n, oc, 1, kind, oh0, oh1, cb0, cb1, parts);
}
#endif

static inline void BK(blocked_rows)(const blocked_ctx *cx, const float *xi, const float *w,
                                    int64_t n, int64_t oc, int nb, int kind, int64_t oh0,
                                    int64_t oh1, int64_t cb0, int64_t cb1, float *parts) {
#if BK_NB > 1
    if (nb != BK_NB) {
        BK(rows_1)(cx, xi, w, n, oc, kind, oh0, oh1, cb0, cb1, parts);
        return;
    }
#endif
    (void)nb;
    BK(rows_nb)(cx, xi, w, n, oc, kind, oh0, oh1, cb0, cb1, parts);
}

/* Task t: of image cx->n + t / per_image, a group of BK_NB blocks of 16 output channels
 * (the last group's leftover blocks one by one) over a chunk of output rows. The reduction
 * runs in chunks of channel blocks over bands of rows, both decided in blocked_conv (see
 * BK_CHUNK_BYTES). */
BK_ATTR static void BK(blocked_task)(const void *ctx, int64_t t) {
    const blocked_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t image = t / cx->per_image, n = cx->n + image;
    t %= cx->per_image;
    int64_t OH = p[C_OH], OB = p[C_O] / 16;
    int64_t b0 = t / cx->chunks * BK_NB, b1 = b0 + BK_NB < OB ? b0 + BK_NB : OB;
    int64_t r0 = t % cx->chunks * OH / cx->chunks, r1 = (t % cx->chunks + 1) * OH / cx->chunks;
    const float *xi = cx->xb + image * cx->cb * p[C_H] * cx->wp * cx->icw;
    /* 16 channels a block at stride 1, 2 or another (1, 2, 0); an RGB image's 3 at stride 2
     * or another (3, 4) */
    int64_t sw = p[C_SW];
    int kind = cx->icw == 3 ? (sw == 2 ? 3 : 4) : sw == 1 || sw == 2 ? (int)sw : 0;
    float parts[BK_PART_FLOATS] __attribute__((aligned(64)));
    int64_t band = cx->band, chunk = cx->chunk;
    float *use = chunk < cx->cb ? parts : NULL;
    for (int64_t b = b0; b < b1;) {
        int nb = b1 - b >= BK_NB ? BK_NB : 1;
        const float *w = cx->w + b * cx->cb * p[C_KH] * p[C_KW] * cx->icw * 16;
        for (int64_t oh = r0; oh < r1; oh += band)
            for (int64_t cb = 0; cb < cx->cb; cb += chunk)
                BK(blocked_rows)(cx, xi, w, n, b * 16, nb, kind, oh,
                                 oh + band < r1 ? oh + band : r1, cb,
                                 cb + chunk < cx->cb ? cb + chunk : cx->cb, use);
        b += nb;
    }
}

#undef BK_TILE
#undef BK_NBS
#undef BK_SW
#undef BK
#undef BK_ATTR
#undef BK_T
#undef BK_NB
#undef BK_WIDE
