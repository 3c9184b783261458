/* A GEMM of few rows, Y (M x N) = A (M x K) B (K x N), B read in place (row-major) or from
 * panels packed at compile time.
 *
 * OpenBLAS packs B for every call; when A has few rows (a dense layer at batch 1, a
 * transformer at a short sequence, an RNN's output layer) each packed element serves only M
 * products, and the packing took as long as the arithmetic: 16 x 384 x 1536 ran at a third of
 * onnxruntime's speed. Here a tile of 8 rows x 48 columns keeps its 24 accumulator vectors in
 * registers while k walks down B's rows, three vectors of each row, one broadcast of A per
 * row and vector. A task is a run of 48-column panels: the panel's rows stay in cache while
 * the blocks of 8 rows pass over it. The last, partial panel is copied into a zero-padded
 * one first. A constant B too big for cache comes packed (ROW_GEMM_PANEL wide: panel p holds
 * B's columns [48p, 48p + 48) for every k, zero-padded, one contiguous stream), read once
 * per run. AVX-512 runs the tiles; other CPUs take OpenBLAS for B in place and a portable
 * loop for packed panels (the A-transposed form at the end has AVX2 tiles of its own). */
#include "npu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define RG_NR ROW_GEMM_PANEL  /* columns per panel: 3 vectors */
#define RG_MR 8   /* rows per tile */
#define RG_KB 64  /* rows of B in place per pass over a task's panels */
/* How far ahead (floats) a packed panel's first tile asks for B: 16 rows. The 16 x 1024 x
 * 8210 layer alone, 2 cores, 3 rounds: none 2.1-2.9 ms, 16 rows 1.3-1.45, 64 rows 1.36-1.42
 * (OpenBLAS, B in place: 2.1-2.9). */
#define RG_PANEL_PREFETCH (16 * RG_NR)

#if defined(__x86_64__) && defined(__GNUC__)
#define RG_AVAILABLE 1

typedef float rg_vec __attribute__((vector_size(64), aligned(4)));

/* act(v + bias) of a vector for the activations a store can take (a clamp, hard swish),
 * computed as finish() does; max(c, v) is c > v ? c : v and min(c, v) c < v ? c : v, so a
 * NaN v stays NaN as there. */
static inline __attribute__((always_inline, target("arch=x86-64-v4"))) rg_vec rg_act(
        rg_vec v, const float *bias, act_t act) {
    if (bias) v += *(const rg_vec *)bias;
    if (act.kind == ACT_HSWISH) {
        __m512 g = _mm512_min_ps(_mm512_set1_ps(6.0f),
                                 _mm512_max_ps(_mm512_setzero_ps(), (__m512)(v + 3.0f)));
        return v * ((rg_vec)g * (1.0f / 6.0f));
    }
    return (rg_vec)_mm512_min_ps(_mm512_set1_ps(act.hi), _mm512_max_ps(_mm512_set1_ps(act.lo), (__m512)v));
}

/* rows rows (1..RG_MR, a constant after inlining) of A, packed k-major (a[k * lda + r]: lda
 * is the tile's row count), times K rows of the panel from b (ldb), into y (ldy), or added
 * to y when `add`; with `pf` > 0, asking for the floats pf ahead of each row as it goes.
 * With `fused` the stores take the panel's `bias` (NULL: none) and the activation (rg_act). */
static inline __attribute__((always_inline, target("arch=x86-64-v4"))) void rg_tile(
        int rows, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t K, float *y,
        int64_t ldy, int add, int64_t pf, int fused, const float *bias, act_t act) {
    rg_vec acc[RG_MR][3];
    for (int r = 0; r < rows; r++) {
        if (add) {
            acc[r][0] = *(const rg_vec *)(y + r * ldy);
            acc[r][1] = *(const rg_vec *)(y + r * ldy + 16);
            acc[r][2] = *(const rg_vec *)(y + r * ldy + 32);
        } else {
            acc[r][0] = acc[r][1] = acc[r][2] = (rg_vec){0};
        }
    }
    for (int64_t k = 0; k < K; k++) {
        const float *bk = b + k * ldb;
        if (pf) {  /* see rg_panel */
            __builtin_prefetch(bk + pf);
            __builtin_prefetch(bk + pf + 16);
            __builtin_prefetch(bk + pf + 32);
        }
        rg_vec b0 = *(const rg_vec *)bk, b1 = *(const rg_vec *)(bk + 16);
        rg_vec b2 = *(const rg_vec *)(bk + 32);
        for (int r = 0; r < rows; r++) {
            float v = a[k * lda + r];
            rg_vec w = {v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v};
            acc[r][0] += w * b0;
            acc[r][1] += w * b1;
            acc[r][2] += w * b2;
        }
    }
    for (int r = 0; r < rows; r++) {
        if (fused) {
            acc[r][0] = rg_act(acc[r][0], bias, act);
            acc[r][1] = rg_act(acc[r][1], bias ? bias + 16 : NULL, act);
            acc[r][2] = rg_act(acc[r][2], bias ? bias + 32 : NULL, act);
        }
        *(rg_vec *)(y + r * ldy) = acc[r][0];
        *(rg_vec *)(y + r * ldy + 16) = acc[r][1];
        *(rg_vec *)(y + r * ldy + 32) = acc[r][2];
    }
}

/* Every row of A (packed by rg_pack) over one panel, in tiles of 8, 4, 2 and 1 rows. The
 * first tile prefetches pf floats ahead of the rows it reads: in place, the next panel's
 * part of each row (a panel's rows are B's width apart, 64 of them per pass, too many short
 * streams for the hardware prefetcher, and a model's weights come from memory: MiniLM-L3 at
 * 16 tokens, whole Program on 2 cores, 4 alternating rounds: 2.86-3.37 -> 1.85-2.28 ms; its
 * 16 x 384 x 1536 layers took twice their time alone, where the same weights stay in
 * cache). */
__attribute__((target("arch=x86-64-v4"))) static void rg_panel(
        int64_t M, const float *a, const float *b, int64_t ldb, int64_t K, float *y,
        int64_t ldy, int add, int64_t pf) {
    int64_t m = 0;
    act_t none = {ACT_CLAMP, 0, 0, 0};  /* not applied: the epilogue comes after */
#define RG_TILE(r) rg_tile(r, a + m * K, r, b, ldb, K, y + m * ldy, ldy, add, m ? 0 : pf, 0, NULL, none)
    for (; m + 8 <= M; m += 8) RG_TILE(8);
    if (m + 4 <= M) RG_TILE(4), m += 4;
    if (m + 2 <= M) RG_TILE(2), m += 2;
    if (m < M) RG_TILE(1);
#undef RG_TILE
}
#define RG_WIDE_CPU (vector_width() == 16)
#else
#define RG_AVAILABLE 0
#define RG_WIDE_CPU 0
static void rg_panel(int64_t M, const float *a, const float *b, int64_t ldb, int64_t K,
                     float *y, int64_t ldy, int add, int64_t pf) {
    (void)M, (void)a, (void)b, (void)ldb, (void)K, (void)y, (void)ldy, (void)add, (void)pf;
}
#endif

/* Rows of the tile that starts `left` rows before A's end: 8, 4, 2 or 1 (rg_pack's layout,
 * which rg_panel's tiles and rg_panel_portable read). */
static inline int64_t rg_tile_rows(int64_t left) {
    return left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

/* rg_panel's work without the AVX-512 tiles, for other CPUs and packed panels: a (packed by
 * rg_pack) times one whole panel (K rows of RG_NR floats) into y. NR rows of a tile at a time
 * over half a panel (24 columns, 3 vectors of 8): 12 accumulators, and each row of B loaded
 * once for NR rows (one row at a time, 48 columns, was load-bound: CRNN's 40 x 1024 x 8210
 * output layer at 23 GMAC/s on an AVX2 EPYC's 2 cores), asking for B's rows 16 ahead as
 * rg_panel does (alternating in one process, 8 rounds: 11.0-12.9 ms without, 8.9-10.3). */
static inline __attribute__((always_inline)) void rgp_rows(
        const float *a, int64_t lda, const float *b, int64_t K, float *y, int64_t ldy, int NR) {
    for (int h = 0; h < RG_NR; h += 24) {
        vec8f acc[4][3] = {{{0}}};
        for (int64_t k = 0; k < K; k++) {
            const float *bk = b + k * RG_NR + h;
            __builtin_prefetch(bk + RG_PANEL_PREFETCH);  /* B streams from memory once */
            __builtin_prefetch(bk + RG_PANEL_PREFETCH + 16);
            vec8f b0 = *(const vec8f *)bk, b1 = *(const vec8f *)(bk + 8),
                  b2 = *(const vec8f *)(bk + 16);
            for (int r = 0; r < NR; r++) {
                float v = a[k * lda + r];
                acc[r][0] += v * b0;
                acc[r][1] += v * b1;
                acc[r][2] += v * b2;
            }
        }
        for (int r = 0; r < NR; r++) memcpy(y + r * ldy + h, acc[r], sizeof acc[r]);
    }
}

MULTIVERSION static void rg_panel_portable(int64_t M, const float *a, const float *b, int64_t K,
                                           float *y, int64_t ldy) {
    for (int64_t m = 0; m < M;) {
        int64_t rows = rg_tile_rows(M - m);  /* the tile's rows, k-major: a[m * K + k * rows + r] */
        const float *at = a + m * K;
        if (rows >= 4)  /* 8 or 4: 4 rows at a time */
            for (int64_t r = 0; r < rows; r += 4)
                rgp_rows(at + r, rows, b, K, y + (m + r) * ldy, ldy, 4);
        else if (rows == 2)
            rgp_rows(at, rows, b, K, y + m * ldy, ldy, 2);
        else
            rgp_rows(at, rows, b, K, y + m * ldy, ldy, 1);
        m += rows;
    }
}

typedef struct {
    int64_t M, N, K, per;  /* per: panels per task */
    const float *a, *b, *bias;
    float *y;
    act_t act;
    int packed, wide;  /* B in panels; the CPU runs the AVX-512 tiles */
    atomic_int *failed;
} rg_ctx;

/* The epilogue of Y's columns [n0, n1): bias, then the activation. */
static void rg_finish(const rg_ctx *cx, int64_t n0, int64_t n1) {
    for (int64_t m = 0; m < cx->M; m++) {
        float *row = cx->y + m * cx->N;
        if (cx->bias)
            for (int64_t j = n0; j < n1; j++) row[j] += cx->bias[j];
        epilogue(row + n0, n1 - n0, 0.0f, NULL, cx->act);
    }
}

/* A's columns [0, kb) from a (row stride K), packed for rg_panel: each tile of 8, 4, 2 and
 * 1 rows k-major, so that a tile's broadcasts read consecutive floats (rows of a wide A are
 * a page apart, and eight of them in one L1 set missed). */
static void rg_pack(const float *a, int64_t M, int64_t K, int64_t kb, float *ap) {
    int64_t m = 0;
    while (m < M) {
        int64_t rows = rg_tile_rows(M - m);
        for (int64_t k = 0; k < kb; k++)
            for (int64_t r = 0; r < rows; r++) ap[m * kb + k * rows + r] = a[(m + r) * K + k];
        m += rows;
    }
}

/* Task t: its run of panels. In place, B is taken RG_KB rows at a time across all of them (a
 * panel's rows are apart by B's whole width: walked panel by panel, every row of a wide B
 * was a page of its own, and an RNN's 1024 x 8210 output layer ran 2.5x slower than
 * OpenBLAS), and the last, partial panel goes through a zero-padded copy of its B rows.
 * Packed panels are read whole, one after the other. A partial last panel writes to
 * zero-padded Y rows, copied out at the end. */
static void rg_task(const void *ctx, int64_t t) {
    const rg_ctx *cx = ctx;
    int64_t M = cx->M, N = cx->N, K = cx->K, kbmax = cx->packed ? K : RG_KB;
    int64_t p0 = t * cx->per, p1 = (t + 1) * cx->per, last = (N + RG_NR - 1) / RG_NR;
    if (p1 > last) p1 = last;
    int64_t cols = N - (last - 1) * RG_NR;  /* of the last panel */
    int64_t bfloats = cx->packed ? 0 : RG_KB * RG_NR;
    float *scratch = thread_scratch(M * kbmax + bfloats + M * RG_NR);
    if (!scratch) {
        atomic_store(cx->failed, 1);
        return;
    }
    float *ap = scratch, *bp = ap + M * kbmax;
    float *yp = p1 == last && cols < RG_NR ? bp + bfloats : NULL;
    for (int64_t k0 = 0; k0 < K; k0 += kbmax) {
        int64_t kb = K - k0 < kbmax ? K - k0 : kbmax;
        rg_pack(cx->a + k0, M, K, kb, ap);
        for (int64_t p = p0; p < p1; p++) {
            int64_t n0 = p * RG_NR;
            int full = p < last - 1 || cols == RG_NR;
            float *y = full ? cx->y + n0 : yp;
            int64_t ldy = full ? N : RG_NR;
            if (cx->packed) {
                const float *panel = cx->b + p * K * RG_NR;
                if (cx->wide)
                    rg_panel(M, ap, panel, RG_NR, K, y, ldy, 0, RG_PANEL_PREFETCH);
                else
                    rg_panel_portable(M, ap, panel, K, y, ldy);
                continue;
            }
            const float *b = cx->b + k0 * N + n0;
            int64_t ldb = N;
            if (!full) {
                for (int64_t k = 0; k < kb; k++) {
                    memcpy(bp + k * RG_NR, b + k * N, cols * sizeof(float));
                    memset(bp + k * RG_NR + cols, 0, (RG_NR - cols) * sizeof(float));
                }
                b = bp, ldb = RG_NR;
            }
            rg_panel(M, ap, b, ldb, kb, y, ldy, k0 > 0, RG_NR);
        }
    }
    if (yp)
        for (int64_t m = 0; m < M; m++)
            memcpy(cx->y + m * N + (last - 1) * RG_NR, yp + m * RG_NR, cols * sizeof(float));
    rg_finish(cx, p0 * RG_NR, p1 * RG_NR < N ? p1 * RG_NR : N);
}

/* Measured against OpenBLAS's path (whole step, 2 cores, alternating builds): 16 x 384 x
 * 1536 0.31 -> 0.15-0.17 ms, 16 x 1536 x 384 0.20-0.31 -> 0.15-0.17 ms, 16 x 384 x 384 even;
 * OpenBLAS kept ahead on a B of 8.4 M floats read in place (16 x 1024 x 8210: 2.1-2.3 vs
 * 3.3-3.8 ms) and at one row (1 x 1024 x 1000: even or ahead), hence the bounds; a B that
 * big comes packed instead. With K = 0 no tile runs: OpenBLAS writes the zeros. */
int row_gemm_takes(int64_t M, int64_t N, int64_t K, int64_t trans) {
    return RG_AVAILABLE && !trans && M >= 2 && M <= ROW_GEMM_MAX_M && K > 0
           && N * K <= ROW_GEMM_MAX_B && RG_WIDE_CPU;
}

int row_gemm(int64_t M, int64_t N, int64_t K, const float *a, const float *b, const float *bias,
             float *y, act_t act, int packed) {
    atomic_int failed = 0;
    int64_t panels = (N + RG_NR - 1) / RG_NR;
    rg_ctx cx = {M, N, K, 0, a, b, bias, y, act, packed, RG_WIDE_CPU, &failed};
    /* one run of consecutive panels per core: a task prefetches its next panel, which with
     * several tasks per core was often the other core's (MiniLM-L6 at 16 tokens ran slower
     * on 2 cores than on 1; its matmul steps 3.13 -> 2.44 ms, alternating per run) */
    int64_t tasks = task_count((double)M * N * K / GEMM_MACS_PER_NS, panels);
    cx.per = per_task(panels, tasks < cores() ? tasks : cores());
    parallel(rg_task, &cx, (panels + cx.per - 1) / cx.per);
    return atomic_load(&failed) ? -1 : 0;
}

/* ---- A read transposed: a 1x1 conv's channels-last output -------------------------------
 *
 * Ycl (pixels x O) = X^T W^T for a 1x1 conv whose output a depthwise conv reads channels
 * last: rg_tile's broadcasts of A walk k at a stride, and X's planes are exactly that (8
 * consecutive pixels of plane k), so X is read in place; W^T is put in zero-padded panels
 * once per call (O x K floats, small where depthwise convs follow). A task is a block of
 * pixels: each tile of rows passes over every panel while its pixels are in cache, and its
 * rows get their bias and activation at once. OpenBLAS's transposed-transposed GEMM ran
 * these at 25 GMAC/s (MobileNetV2's 16 -> 96 channels at 32x32). Without AVX-512 (any CPU
 * with AVX2) the panels are cut with 8x8 transposes and the tiles are 4 rows by half a panel
 * in AVX2 registers (rgt_tile8). */

typedef struct {
    int64_t M, N, K, lda, per;  /* per: pixels per task, a multiple of RG_MR */
    const float *a, *panels, *bias;
    float *y;
    act_t act;
    const float *bias_padded;   /* the bias (or NULL) zero-padded to whole panels */
} rgt_ctx;

/* Whether the tiles' stores take the bias and the activation (a clamp, hard swish); others
 * (swish, sigmoid, leaky) are stored as sums and finished by epilogue_rows after each tile.
 * Fused on AVX-512 too: in MobileNetV2 at one core the pointwise convs' samples (rgt_task
 * and epilogue_rows) went from 28.2 % to 26.8 % of the run's (perf; wall time within noise). */
#define RGT_FUSED(act) ((act).kind == ACT_CLAMP || (act).kind == ACT_HSWISH)

#if RG_AVAILABLE
/* `rows` rows of Y (8, 4, 2 or 1, a constant after inlining) from pixel m, over every
 * panel; the last panel, when partial, through yp (rows x RG_NR) */
static inline __attribute__((always_inline, target("arch=x86-64-v4"))) void rgt_rows(
        const rgt_ctx *cx, int rows, int64_t m, float *yp, int fused) {
    int64_t N = cx->N, K = cx->K, last = (N + RG_NR - 1) / RG_NR, cols = N - (last - 1) * RG_NR;
    for (int64_t p = 0; p < last; p++) {
        const float *panel = cx->panels + p * K * RG_NR;
        const float *bias = cx->bias_padded ? cx->bias_padded + p * RG_NR : NULL;
        if (p < last - 1 || cols == RG_NR) {
            rg_tile(rows, cx->a + m, cx->lda, panel, RG_NR, K, cx->y + m * N + p * RG_NR, N, 0, 0,
                    fused, bias, cx->act);
        } else {
            rg_tile(rows, cx->a + m, cx->lda, panel, RG_NR, K, yp, RG_NR, 0, 0, fused, bias, cx->act);
            for (int r = 0; r < rows; r++)
                memcpy(cx->y + (m + r) * N + p * RG_NR, yp + r * RG_NR, cols * sizeof(float));
        }
    }
}

__attribute__((target("arch=x86-64-v4"))) static void rgt_task(const void *ctx, int64_t t) {
    const rgt_ctx *cx = ctx;
    float yp[RG_MR * RG_NR];
    int fused = RGT_FUSED(cx->act);
    int64_t m = t * cx->per, end = m + cx->per < cx->M ? m + cx->per : cx->M;
    for (; m < end;) {
        int64_t rows = rg_tile_rows(end - m);
        if (rows == 8) rgt_rows(cx, 8, m, yp, fused);
        else if (rows == 4) rgt_rows(cx, 4, m, yp, fused);
        else if (rows == 2) rgt_rows(cx, 2, m, yp, fused);
        else rgt_rows(cx, 1, m, yp, fused);
        if (!fused) epilogue_rows(cx->y + m * cx->N, rows, cx->N, cx->N, cx->bias, cx->act);
        m += rows;
    }
}

/* rgt_task's tiles in AVX2 registers: Ycl rows [m, m + NR) (NR = 4, 2 or 1, a constant
 * after inlining) by 24 columns (3 vectors) of a panel, 12 accumulators while k walks down
 * the panel. With `fused` the bias and the activation go into the stores, computed as
 * finish() does (the sum plus the bias, then a clamp or hard swish; a NaN stays NaN); else
 * (swish, sigmoid) the sums are stored and epilogue_rows finishes the rows. */
static inline __attribute__((always_inline, target("avx2,fma"))) void rgt_tile8(
        const float *a, int64_t lda, const float *b, int64_t K, float *y, int64_t ldy, int NR,
        const float *bias, int fused, act_t act) {
    __m256 acc[4][3];
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = acc[r][2] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const float *bk = b + k * RG_NR;
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8), b2 = _mm256_loadu_ps(bk + 16);
        for (int r = 0; r < NR; r++) {
            __m256 v = _mm256_broadcast_ss(a + k * lda + r);
            acc[r][0] = _mm256_fmadd_ps(v, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(v, b1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(v, b2, acc[r][2]);
        }
    }
    /* max(c, v) is c > v ? c : v and min(c, v) is c < v ? c : v: finish's tests, NaN v kept */
    __m256 vlo = _mm256_set1_ps(act.lo), vhi = _mm256_set1_ps(act.hi), zero = _mm256_setzero_ps();
    __m256 three = _mm256_set1_ps(3.0f);
    __m256 six = _mm256_set1_ps(6.0f), sixth = _mm256_set1_ps(1.0f / 6.0f);
    /* unrolled, so that acc is indexed by constants only: a loop left rolled kept acc in
     * memory, every multiply-add above stored back to the stack (2.2x the time) */
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (int j = 0; j < 3; j++) {
            __m256 v = acc[r][j];
            if (fused) {
                if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + 8 * j));
                if (act.kind == ACT_HSWISH) {  /* v * hswish_gate(v) */
                    __m256 g = _mm256_min_ps(six, _mm256_max_ps(zero, _mm256_add_ps(v, three)));
                    v = _mm256_mul_ps(v, _mm256_mul_ps(g, sixth));
                } else {
                    v = _mm256_min_ps(vhi, _mm256_max_ps(vlo, v));
                }
            }
            _mm256_storeu_ps(y + r * ldy + 8 * j, v);
        }
}

/* `rows` rows from pixel m over every panel, by halves; the last panel, when partial,
 * through yp (rows x RG_NR). `bias`: zero-padded to whole panels. */
static inline __attribute__((always_inline, target("avx2,fma"))) void rgt_rows8(
        const rgt_ctx *cx, int rows, int64_t m, float *yp, const float *bias, int fused) {
    int64_t N = cx->N, K = cx->K, last = (N + RG_NR - 1) / RG_NR, cols = N - (last - 1) * RG_NR;
    for (int64_t p = 0; p < last; p++) {
        const float *panel = cx->panels + p * K * RG_NR;
        int full = p < last - 1 || cols == RG_NR;
        float *y = full ? cx->y + m * N + p * RG_NR : yp;
        int64_t ldy = full ? N : RG_NR;
        for (int h = 0; h < RG_NR && p * RG_NR + h < N; h += 24)  /* no half of padding alone */
            rgt_tile8(cx->a + m, cx->lda, panel + h, K, y + h, ldy, rows,
                      bias ? bias + p * RG_NR + h : NULL, fused, cx->act);
        if (!full)
            for (int r = 0; r < rows; r++)
                memcpy(cx->y + (m + r) * N + p * RG_NR, yp + r * RG_NR, cols * sizeof(float));
    }
}

__attribute__((target("avx2,fma"))) static void rgt_task8(const void *ctx, int64_t t) {
    const rgt_ctx *cx = ctx;
    float yp[4 * RG_NR];
    int fused = RGT_FUSED(cx->act);
    const float *bias = fused ? cx->bias_padded : NULL;
    int64_t m = t * cx->per, end = m + cx->per < cx->M ? m + cx->per : cx->M;
    for (; m < end;) {
        int rows = end - m >= 4 ? 4 : end - m >= 2 ? 2 : 1;
        if (rows == 4) rgt_rows8(cx, 4, m, yp, bias, fused);
        else if (rows == 2) rgt_rows8(cx, 2, m, yp, bias, fused);
        else rgt_rows8(cx, 1, m, yp, bias, fused);
        if (!fused) epilogue_rows(cx->y + m * cx->N, rows, cx->N, cx->N, cx->bias, cx->act);
        m += rows;
    }
}
#endif

int row_gemm_t_takes(int64_t M) {
#if RG_AVAILABLE
    return transpose8_ok() && M >= ROW_GEMM_T_MIN_M;  /* AVX2, which AVX-512 CPUs have too */
#else
    (void)M;
    return 0;
#endif
}

int row_gemm_t(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda, const float *w,
               const float *bias, float *y, act_t act) {
#if RG_AVAILABLE
    int64_t last = (N + RG_NR - 1) / RG_NR;
    if (!M || !N) return 0;
    int wide = RG_WIDE_CPU, b = wide ? 16 : 8;
    float *panels = thread_scratch(last * K * RG_NR + last * RG_NR);
    if (!panels) return -1;
    float *bias_padded = bias ? panels + last * K * RG_NR : NULL;
    if (bias_padded) {
        memcpy(bias_padded, bias, N * sizeof(float));
        memset(bias_padded + N, 0, (last * RG_NR - N) * sizeof(float));
    }
    /* panel p: W's rows [48p, 48p + 48) as columns, by blocks of b x b (a block never
     * straddles two panels); the last panel's columns past N are zeros */
    memset(panels + (last - 1) * K * RG_NR, 0, K * RG_NR * sizeof(float));
    for (int64_t o = 0; o < N; o += b)
        for (int64_t k = 0; k < K; k += b)
            (wide ? transpose16 : transpose8)(w + o * K + k, K,
                                              panels + (o / RG_NR * K + k) * RG_NR + o % RG_NR,
                                              RG_NR, N - o < b ? (int)(N - o) : b,
                                              K - k < b ? (int)(K - k) : b);
    rgt_ctx cx = {M, N, K, lda, 0, a, panels, bias, y, act, bias_padded};
    int64_t tasks = task_count((double)M * N * K / GEMM_MACS_PER_NS, (M + RG_MR - 1) / RG_MR);
    if (tasks > cores()) tasks = cores();
    cx.per = (per_task(M, tasks) + RG_MR - 1) / RG_MR * RG_MR;
    parallel(wide ? rgt_task : rgt_task8, &cx, (M + cx.per - 1) / cx.per);
    return 0;
#else
    (void)M, (void)N, (void)K, (void)a, (void)lda, (void)w, (void)bias, (void)y, (void)act;
    return -1;
#endif
}
