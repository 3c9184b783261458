/* The direct convolution's tile kernels for one vector width, included by direct.c once per
 * width it compiles (a tile's accumulators must fit the registers of the CPU that runs it:
 * the AVX-512 tile's 24 vectors of 16 floats spill on AVX2, where the same code ran 35x
 * slower). The includer defines:
 *   DK_VEC    floats per vector
 *   DK_NV     vectors of positions per full tile
 *   DK_OB     output channels per tile (at most DIRECT_OB; a block of stored weights is
 *             computed in tiles of DK_OB channels)
 *   DK(name)  the name of this width's copy of `name`
 *   DK_ATTR   the attributes of the task function (its instruction set)
 *   DK_SPLAT(w)  a vector of DK_VEC copies of w (written out: GCC adds 0 + w for the
 *             shorter forms, and that zero register spilled the AVX2 tile)
 * and gets DK(direct_task), a parallel() task; the parameters are undefined again at the
 * end, ready for the next width. The 8-float width also gets the channel-vector tiles for
 * pairs of blocks (DK(pair_positions)). Everything else is in direct.c. */

typedef float DK(vec) __attribute__((vector_size(DK_VEC * sizeof(float)), aligned(4)));
#define DK_TILE (DK_VEC * DK_NV)

/* One tile: OB output channels x NV vectors of positions from src0 (the group's first
 * channel at the tile's first position), stored to out (OB rows of DK_TILE). The weights
 * of step t (channel, tap) for channel o are wp[t * ld + o]: a stored block holds its rows'
 * weights for one step side by side, `ld` of them. */
static inline __attribute__((always_inline)) void DK(direct_tile)(
        const direct_ctx *cx, const float *wp, int64_t ld, const float *src0, float *out,
        int OB, int NV) {
    int64_t CG = cx->p[C_C] / cx->p[C_G], cstride = cx->p[C_SH] * cx->p[C_SW] * cx->plane;
    DK(vec) acc[DK_OB][DK_NV];
    for (int o = 0; o < OB; o++)
        for (int v = 0; v < NV; v++) acc[o][v] = (DK(vec)){0};
    int64_t t = 0;
    for (int64_t c = 0; c < CG; c++) {
        const float *xc = src0 + c * cstride;
        if (cx->ahead) {  /* a channel's rows a few channels ahead (see direct_conv) */
            const float *next = xc + cx->ahead * cstride;
            for (int64_t r = 0; r < cx->rows; r++)
                for (int64_t f = 0; f <= DK_TILE; f += 16)
                    __builtin_prefetch(next + cx->row_off[r] + f);
        }
        for (int64_t tap = 0; tap < cx->taps; tap++, t++) {
            const float *src = xc + cx->tap_off[tap];
            /* the weights stream in once per block, from memory on big convs: ask for
             * them ahead (ResNet-50's 7x7 stage waited on them) */
            __builtin_prefetch(wp + (t + DIRECT_PREFETCH) * ld);
            DK(vec) x[DK_NV];
            /* plain loads of the unaligned vector type (GCC's memcpy of 32 bytes became a
             * copy loop through the stack in the AVX2 clone, and the tile spilled) */
            for (int v = 0; v < NV; v++) x[v] = *(const DK(vec) *)(src + v * DK_VEC);
            for (int o = 0; o < OB; o++) {
                float w1 = wp[t * ld + o];
                DK(vec) wv = DK_SPLAT(w1);
                for (int v = 0; v < NV; v++) acc[o][v] += wv * x[v];
            }
        }
    }
    for (int o = 0; o < OB; o++)
        for (int v = 0; v < NV; v++) *(DK(vec) *)(out + o * DK_TILE + v * DK_VEC) = acc[o][v];
}

/* constant tile sizes, so the accumulators stay in registers */
#define DK_HEIGHTS(NV)                                                                      \
    if (ob == DK_OB) DK(direct_tile)(cx, wp, ld, src0, out, DK_OB, NV);                     \
    else if (ob >= 4) DK(direct_tile)(cx, wp, ld, src0, out, 4, NV);                        \
    else if (ob >= 2) DK(direct_tile)(cx, wp, ld, src0, out, 2, NV);                        \
    else DK(direct_tile)(cx, wp, ld, src0, out, 1, NV);

/* A tile of ob channels (DK_OB, 4, 2 or 1) x nv vectors: full tiles have DK_NV vectors; a
 * plane's last positions go in a tile of just the vectors they need. */
static inline __attribute__((always_inline)) void DK(direct_tile_any)(
        const direct_ctx *cx, const float *wp, int64_t ld, const float *src0, float *out, int ob,
        int nv) {
    if (nv >= DK_NV) { DK_HEIGHTS(DK_NV) }
    else if (nv == 2) { DK_HEIGHTS(2) }
    else { DK_HEIGHTS(1) }
}
#undef DK_HEIGHTS

#if DK_VEC == 8
/* ---- channel-vector tiles: a pair of stored blocks (16 output channels) ----------------
 *
 * The position tiles above compute the WQ - OW padded columns of every row (a 7x7 output:
 * 64 positions for 49) and broadcast four weights per step. Here the vectors run along the
 * output channels instead: a stored block's 8 weights of one step are one vector, and a
 * tile of DP_POSITIONS exact output positions x 2 blocks broadcasts each position's input
 * value, 12 accumulators. Each output sums its (channel, tap) products in the same order
 * as the position tiles, so both give the same bits. */
#define DP_POSITIONS 6
#define DP_CHUNK 48               /* positions finished together, per output channel */
#define DP_ROW (2 * DIRECT_OB)    /* a position's outputs in a tile's buffer */

/* NP positions (at most DP_POSITIONS) whose phase offsets are k[0..NP) (relative to src,
 * the group's first channel's phases), blocks w0 and w0 + 8 * K: sums into
 * out[i * DP_ROW + o], 16 outputs per position. TAPS: the taps per channel when the caller
 * knows them at compile time (9: a 3x3 conv, its tap loop unrolled), else 0. */
static inline __attribute__((always_inline)) void DK(pair_tile)(
        const direct_ctx *cx, const float *w0, int64_t K, const float *src, const int64_t *k,
        float *out, int NP, int TAPS) {
    int64_t CG = cx->p[C_C] / cx->p[C_G], cstride = cx->p[C_SH] * cx->p[C_SW] * cx->plane;
    int64_t taps = TAPS ? TAPS : cx->taps;
    const float *w1 = w0 + DIRECT_OB * K;
    DK(vec) acc[DP_POSITIONS][2];
    for (int i = 0; i < NP; i++) acc[i][0] = acc[i][1] = (DK(vec)){0};
    int64_t t = 0;
    for (int64_t c = 0; c < CG; c++) {
        const float *q[DP_POSITIONS];  /* each position's own pointer: no address sums per tap */
        for (int i = 0; i < NP; i++) q[i] = src + c * cstride + k[i];
        for (int64_t tap = 0; tap < taps; tap++, t++) {
            int64_t off = cx->tap_off[tap];
            DK(vec) a = *(const DK(vec) *)(w0 + t * DIRECT_OB);
            DK(vec) b = *(const DK(vec) *)(w1 + t * DIRECT_OB);
            for (int i = 0; i < NP; i++) {
                float v = q[i][off];
                DK(vec) x = DK_SPLAT(v);
                acc[i][0] += x * a;
                acc[i][1] += x * b;
            }
        }
    }
    for (int i = 0; i < NP; i++) {  /* whole vectors, position-major: pair_positions turns them */
        *(DK(vec) *)(out + i * DP_ROW) = acc[i][0];
        *(DK(vec) *)(out + i * DP_ROW + DIRECT_OB) = acc[i][1];
    }
}

/* pair_tile with NP and TAPS as constants: a plane's last positions go in a tile of just
 * as many (a 7x7 output, 49 = 8 x 6 + 1, was computed as 54 positions), and a 3x3 conv's
 * taps are unrolled. One core, the resnet_block zoo Program's steps: 64-channel 3x3 convs on
 * 7x7 50.7 -> 46.2 us, 32-channel ones on 14x14 45.8 -> 44.6 us; the Program's steps 0.97x
 * the time (alternating processes, 8 rounds, 0.96-0.99x). */
#define DP_TILE(np)                                                                          \
    case np:                                                                                 \
        if (cx->taps == 9) DK(pair_tile)(cx, w0, K, src, k, out, np, 9);                     \
        else DK(pair_tile)(cx, w0, K, src, k, out, np, 0);                                   \
        break;
static inline __attribute__((always_inline)) void DK(pair_tile_any)(
        const direct_ctx *cx, const float *w0, int64_t K, const float *src, const int64_t *k,
        float *out, int np) {
    switch (np) { DP_TILE(1) DP_TILE(2) DP_TILE(3) DP_TILE(4) DP_TILE(5) default: DP_TILE(6) }
}
#undef DP_TILE

/* Image n's output channels oc .. oc + 15 (blocks at w, K steps each) at the exact
 * positions whose phase offsets lie in [k0, k1): tiles of DP_POSITIONS (the last of just
 * the positions left), DP_CHUNK positions finished at a time. src: the group's first
 * channel's phases, offset so that src + k is position k's. */
static inline __attribute__((always_inline)) void DK(pair_positions)(
        const direct_ctx *cx, int64_t n, int64_t oc, const float *w, int64_t K, const float *src,
        int64_t k0, int64_t k1) {
    const int64_t *p = cx->p;
    int64_t OW = p[C_OW], WQ = cx->wq, O = p[C_O], HW = p[C_OH] * OW;
    int64_t p0 = k0 / WQ * OW + (k0 % WQ < OW ? k0 % WQ : OW);
    int64_t p1 = k1 / WQ * OW + (k1 % WQ < OW ? k1 % WQ : OW);
    float buf[DP_CHUNK * DP_ROW], rows[DP_ROW * DP_CHUNK];
    for (int64_t c0 = p0; c0 < p1; c0 += DP_CHUNK) {
        int64_t count = p1 - c0 < DP_CHUNK ? p1 - c0 : DP_CHUNK;
        for (int64_t i = 0; i < count; i += DP_POSITIONS) {
            int np = count - i < DP_POSITIONS ? (int)(count - i) : DP_POSITIONS;
            int64_t k[DP_POSITIONS];
            for (int j = 0; j < np; j++) {
                int64_t q = c0 + i + j;
                k[j] = q / OW * WQ + q % OW;
            }
            DK(pair_tile_any)(cx, w, K, src, k, buf + i * DP_ROW, np);
        }
        /* the tiles' position-major sums as a row per output channel: 8 x 8 blocks in
         * registers (extracted lane by lane, the sums' stores took as many instructions as
         * a 32-channel tile's multiply-adds) */
#if HAVE_TRANSPOSE16
        if (cx->transpose8)
            for (int64_t i = 0; i < count; i += 8)
                for (int o = 0; o < DP_ROW; o += DIRECT_OB)
                    transpose8(buf + i * DP_ROW + o, DP_ROW, rows + o * DP_CHUNK + i, DP_CHUNK,
                               count - i < 8 ? (int)(count - i) : 8, DIRECT_OB);
        else
#endif
            for (int64_t i = 0; i < count; i++)
                for (int o = 0; o < DP_ROW; o++) rows[o * DP_CHUNK + i] = buf[i * DP_ROW + o];
        for (int o = 0; o < 2 * DIRECT_OB; o++) {
            int64_t at = (n * O + oc + o) * HW + c0;
            finish(cx->y + at, rows + o * DP_CHUNK, count, cx->bias ? cx->bias[oc + o] : 0.0f,
                   cx->res ? cx->res + at : NULL, cx->act);
        }
    }
}
#undef DP_POSITIONS
#undef DP_CHUNK
#undef DP_ROW
#endif

/* Task t: of one image (cx->n + t / per_image) and group, a run of its blocks of DIRECT_OB
 * output channels (one block, or all) over a band of position tiles (every tile, or a chunk
 * of them). */
DK_ATTR static void DK(direct_task)(const void *ctx, int64_t t) {
    const direct_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t image = t / cx->per_image, n = cx->n + image;
    t %= cx->per_image;
    int64_t G = p[C_G], O = p[C_O], OG = O / G, OH = p[C_OH], OW = p[C_OW], WQ = cx->wq;
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW];
    int64_t per_group = cx->obgroups * cx->chunks, g = t / per_group, r = t % per_group;
    int64_t obs = (cx->oblocks + cx->obgroups - 1) / cx->obgroups;
    int64_t chunk = (cx->ptiles + cx->chunks - 1) / cx->chunks;
    int64_t o0 = g * OG + r / cx->chunks * obs * DIRECT_OB;
    int64_t o1 = o0 + obs * DIRECT_OB < (g + 1) * OG ? o0 + obs * DIRECT_OB : (g + 1) * OG;
    int64_t pt0 = r % cx->chunks * chunk, pt1 = pt0 + chunk < cx->ptiles ? pt0 + chunk : cx->ptiles;
    float tile[DK_OB * DK_TILE];
    const float *src_g;
    int64_t base = 0;  /* the position src_g's planes start at */
    if (pt0 >= pt1) return;
    if (cx->band_rows) {  /* this band's own phase rows, from the row of its first position */
        int64_t r0 = pt0 * DK_TILE / WQ;
        src_g = direct_band(cx, n, g, r0);
        if (!src_g) {
            atomic_store(cx->failed, 1);
            return;
        }
        base = r0 * WQ;
    } else {
        src_g = cx->phases + (image * p[C_C] + g * (p[C_C] / G)) * p[C_SH] * p[C_SW] * cx->plane;
    }
    for (int64_t b = o0; b < o1;) {  /* the stored blocks of 8, 4, 2, 1 rows (K-major) */
        int64_t ld = o1 - b >= DIRECT_OB ? DIRECT_OB : o1 - b >= 4 ? 4 : o1 - b >= 2 ? 2 : 1;
        const float *block = cx->w + b * K;
#if DK_VEC == 8
        if (cx->pairs && o1 - b >= 2 * DIRECT_OB) {
            DK(pair_positions)(cx, n, b, block, K, src_g - base, pt0 * DK_TILE,
                               pt1 * DK_TILE < cx->span ? pt1 * DK_TILE : cx->span);
            b += 2 * DIRECT_OB;
            continue;
        }
#endif
        for (int64_t pt = pt0; pt < pt1; pt++) {
            int64_t k0 = pt * DK_TILE, k1 = k0 + DK_TILE < cx->span ? k0 + DK_TILE : cx->span;
            for (int64_t sub = 0; sub < ld;) {  /* the block in tiles of DK_OB, 4, 2, 1 rows,
                                                 * one after the other on the same positions */
                int64_t left = ld - sub;
                int ob = left >= DK_OB ? DK_OB : left >= 4 ? 4 : left >= 2 ? 2 : 1;
                DK(direct_tile_any)(cx, block + sub, ld, src_g + k0 - base, tile, ob,
                                    (int)((k1 - k0 + DK_VEC - 1) / DK_VEC));
                for (int r = 0; r < ob; r++)
                    direct_store(cx, n, b + sub + r, tile + r * DK_TILE, k0, k1, OH, OW, WQ, O,
                                 DK_TILE);
                sub += ob;
            }
        }
        b += ld;
    }
}

#undef DK_TILE
#undef DK_VEC
#undef DK_NV
#undef DK_OB
#undef DK
#undef DK_ATTR
#undef DK_SPLAT
