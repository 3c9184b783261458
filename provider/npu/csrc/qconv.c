/* Integer convolution and dense layers (provider/npu/ops/quant_conv.py lowers to them):
 * 8-bit codes in, int32 accumulation, requantized 8-bit codes out, as onnxruntime's
 * QLinearConv / QGemm compute them (float32(acc) * multiplier, round half to even, clamp).
 *
 * The GEMM multiplies unsigned activation codes by signed int8 weights. Activations are
 * packed (im2col for a conv) as [K/4][N][4] bytes: 4 consecutive K of one output column in
 * 32 bits, the operand order of the x86 VNNI dot product (vpdpbusd: u8 x s8, four products
 * summed into each int32 lane, no saturation). Weights come from the Program in blocks of 8
 * output channels, [O/8][K/4][8][4] (the rule packs them; K and O zero-padded). Int8
 * activations are made unsigned by flipping their sign bit (x + 128); the rule folded
 * -(zero point + 128) * sum(w) into the bias, so the kernel adds the bias and never
 * subtracts a zero point. A tile of 8 output channels x 32 columns keeps its sums in 16
 * registers; the requantization is its epilogue.
 *
 * Paths, picked at run time (qgemm_path): AVX-512 VNNI, AVX-VNNI (256-bit), AVX2 (no dot
 * product: the u8 x s8 products summed in pairs by vpmaddwd on 16-bit halves, exact; the
 * pairwise vpmaddubsw would clip at 16 bits as onnxruntime's kernels do on such CPUs), and
 * a portable one in plain C (compiled per instruction set by MULTIVERSION) on every other
 * CPU; a test forces each available one (lnpu_set_int8_path) and compares them with the
 * numpy kernels.
 *
 * Over 400 lines on purpose: the four paths share the packed layouts, the tile and its
 * requantizing epilogue, and are kept side by side so they stay one algorithm.
 */
#include "npu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define X86 1
#else
#define X86 0
#endif

enum { PATH_AUTO = 0, PATH_PORTABLE = 1, PATH_AVX512_VNNI = 2, PATH_AVX_VNNI = 3, PATH_AVX2 = 4 };
static int forced_path;  /* lnpu_set_int8_path: 0 = the best the CPU has */

static int best_path(void) {
#if X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return PATH_AVX512_VNNI;
#if __GNUC__ >= 11
    if (__builtin_cpu_supports("avxvnni")) return PATH_AVX_VNNI;
#endif
    if (__builtin_cpu_supports("avx2")) return PATH_AVX2;
#endif
    return PATH_PORTABLE;
}

/* The path int8 GEMMs take: the forced one if the CPU has it, else the best. */
static int qgemm_path(void) {
    static int best = -1;
    if (best < 0) best = best_path();
    if (forced_path == PATH_PORTABLE) return PATH_PORTABLE;
    if (forced_path == PATH_AVX2 && best != PATH_PORTABLE) return PATH_AVX2;  /* x86: AVX2 */
    if (forced_path == PATH_AVX_VNNI && (best == PATH_AVX512_VNNI || best == PATH_AVX_VNNI)) {
#if X86 && __GNUC__ >= 11
        if (__builtin_cpu_supports("avxvnni")) return PATH_AVX_VNNI;
#endif
    }
    return best;
}

#ifndef DW_BLOCK_PIXELS
#define DW_BLOCK_PIXELS 784  /* output pixels up to which int8 depthwise convs run in channel
                              * blocks (the depthwise section below): measured faster up to
                              * 28x28 (16x16: 2-2.3x), about even at 32x32 */
#endif
static int64_t dw_block_pixels = DW_BLOCK_PIXELS;

/* Output pixels up to which int8 depthwise convs run in channel blocks (-1: the built-in
 * DW_BLOCK_PIXELS; 0: never); returns the value now taken. For tests and benchmarks. */
API int64_t lnpu_set_qdw_block_pixels(int64_t pixels) {
    dw_block_pixels = pixels < 0 ? DW_BLOCK_PIXELS : pixels;
    return dw_block_pixels;
}

/* Whether 256-entry code tables may use AVX-512 VBMI byte permutes (qeltwise.c): on CPUs
 * that have them, unless a narrower int8 path is forced (which then covers the scalar
 * lookups, as it covers the narrower GEMMs). */
int int8_vbmi(void) {
#if X86
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
    }
    return has && qgemm_path() == PATH_AVX512_VNNI;
#else
    return 0;
#endif
}

/* Force a path (0: automatic); returns the path int8 GEMMs now take. */
API int64_t lnpu_set_int8_path(int64_t path) {
    forced_path = (int)path;
    return qgemm_path();
}

/* The requantization of one int32 sum: rint(float(acc) * m) + zy, clamped to [lo, hi]. */
static inline uint8_t requant(int32_t acc, float m, float lo, float hi, int32_t zy) {
    return (uint8_t)code_of((float)acc * m, lo, hi, zy);
}

typedef struct {
    const uint8_t *b;     /* packed activations [Kg][ldb][4] */
    const int8_t *w;      /* packed weights [Ob][Kg][8][4] */
    const int32_t *wx;    /* the AVX2 path's weights as 16-bit pairs (expand_avx2), or NULL */
    const int32_t *bias;  /* per output channel (zero points folded in) */
    const double *mult;   /* float32 multipliers, per output channel */
    uint8_t *y;           /* output codes, row o at y + o * ldy */
    int64_t kg, n, ldb, ldy, o;  /* K / 4, columns, output channels */
    int64_t cols;         /* columns per task */
    int32_t zy;
    float lo, hi;         /* output range minus zy */
} qgemm_args;

/* The tile's epilogue: acc[r][c] for r < rows, c < ncols. */
static inline __attribute__((always_inline)) void store_tile(
        const qgemm_args *a, int64_t o0, int64_t c0, int64_t rows, int64_t ncols,
        const int32_t *acc, int64_t lda) {
    for (int64_t r = 0; r < rows; r++) {
        float m = (float)a->mult[o0 + r];
        int32_t bias = a->bias[o0 + r];
        uint8_t *y = a->y + (o0 + r) * a->ldy + c0;
        for (int64_t c = 0; c < ncols; c++)
            y[c] = requant(acc[r * lda + c] + bias, m, a->lo, a->hi, a->zy);
    }
}

/* Portable tile: 8 output channels x up to 32 columns from column c0. */
MULTIVERSION
static void tile_portable(const qgemm_args *a, int64_t ob, int64_t c0, int64_t ncols) {
    int32_t acc[8 * 32];
    memset(acc, 0, sizeof(acc));
    const int8_t *w = a->w + ob * a->kg * 32;
    for (int64_t k = 0; k < a->kg; k++) {
        const uint8_t *b = a->b + (k * a->ldb + c0) * 4;
        const int8_t *wk = w + k * 32;
        for (int64_t r = 0; r < 8; r++) {
            int32_t w0 = wk[r * 4], w1 = wk[r * 4 + 1], w2 = wk[r * 4 + 2], w3 = wk[r * 4 + 3];
            int32_t *row = acc + r * 32;
            for (int64_t c = 0; c < ncols; c++)
                row[c] += b[c * 4] * w0 + b[c * 4 + 1] * w1 + b[c * 4 + 2] * w2 + b[c * 4 + 3] * w3;
        }
    }
    int64_t rows = a->o - ob * 8 < 8 ? a->o - ob * 8 : 8;
    store_tile(a, ob * 8, c0, rows, ncols, acc, 32);
}

#if X86
/* AVX-512 VNNI tile: 8 output channels x up to 32 columns (two vectors of 16 int32 each;
 * a narrower tile loads and stores under a column mask). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
static void tile_avx512_vnni(const qgemm_args *a, int64_t ob, int64_t c0, int64_t ncols) {
    /* sixteen named accumulators: with an array GCC funnels every update through one
     * register, a chain of moves that ran the tile at a quarter of its speed */
    __m512i a00 = _mm512_setzero_si512(), a01 = a00, a10 = a00, a11 = a00, a20 = a00,
            a21 = a00, a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00,
            a60 = a00, a61 = a00, a70 = a00, a71 = a00;
    const int32_t *w = (const int32_t *)(a->w + ob * a->kg * 32);
    const int32_t *b = (const int32_t *)(a->b + c0 * 4);
    int64_t step = a->ldb;
    __mmask16 m0 = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
    for (int64_t k = 0; k < a->kg; k++, b += step, w += 8) {
        __m512i b0 = _mm512_maskz_loadu_epi32(m0, b);
        __m512i b1 = _mm512_maskz_loadu_epi32(m1, b + 16);
        _mm_prefetch((const char *)(b + 4 * step), _MM_HINT_T0);
#define ROW(r, x0, x1) do { __m512i wr = _mm512_set1_epi32(w[r]); \
            x0 = _mm512_dpbusd_epi32(x0, b0, wr); x1 = _mm512_dpbusd_epi32(x1, b1, wr); } while (0)
        ROW(0, a00, a01); ROW(1, a10, a11); ROW(2, a20, a21); ROW(3, a30, a31);
        ROW(4, a40, a41); ROW(5, a50, a51); ROW(6, a60, a61); ROW(7, a70, a71);
#undef ROW
    }
    __m512i acc[16] = {a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51, a60, a61,
                       a70, a71};
    /* requantize: float(acc + bias) * m, clamped, rounded half to even, + zy */
    int64_t rows = a->o - ob * 8 < 8 ? a->o - ob * 8 : 8;
    __m512 lo = _mm512_set1_ps(a->lo), hi = _mm512_set1_ps(a->hi);
    __m512i zy = _mm512_set1_epi32(a->zy);
    for (int r = 0; r < rows; r++) {
        int64_t o = ob * 8 + r;
        __m512 m = _mm512_set1_ps((float)a->mult[o]);
        __m512i bias = _mm512_set1_epi32(a->bias[o]);
        uint8_t *y = a->y + o * a->ldy + c0;
        for (int h = 0; h < 2; h++) {
            __mmask16 mk = h ? m1 : m0;
            if (!mk) continue;
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc[2 * r + h], bias)), m);
            f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
            __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zy);  /* MXCSR: nearest even */
            _mm_mask_storeu_epi8(y + 16 * h, mk, _mm512_cvtepi32_epi8(q));
        }
    }
}
#endif

#if X86 && __GNUC__ >= 11
/* AVX-VNNI tile: 8 output channels x 16 columns (two vectors of 8 int32 each). */
__attribute__((target("avx2,avxvnni")))
static void tile_avx_vnni(const qgemm_args *a, int64_t ob, int64_t c0) {
    __m256i acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm256_setzero_si256();
    const int32_t *w = (const int32_t *)(a->w + ob * a->kg * 32);
    const uint8_t *b = a->b + c0 * 4;
    int64_t step = a->ldb * 4;
    for (int64_t k = 0; k < a->kg; k++, b += step, w += 8) {
        __m256i b0 = _mm256_loadu_si256((const void *)b);
        __m256i b1 = _mm256_loadu_si256((const void *)(b + 32));
        for (int r = 0; r < 8; r++) {
            __m256i wr = _mm256_set1_epi32(w[r]);
            acc[2 * r] = _mm256_dpbusd_avx_epi32(acc[2 * r], b0, wr);
            acc[2 * r + 1] = _mm256_dpbusd_avx_epi32(acc[2 * r + 1], b1, wr);
        }
    }
    int32_t out[8 * 16];
    for (int r = 0; r < 8; r++) {
        _mm256_storeu_si256((void *)(out + r * 16), acc[2 * r]);
        _mm256_storeu_si256((void *)(out + r * 16 + 8), acc[2 * r + 1]);
    }
    int64_t rows = a->o - ob * 8 < 8 ? a->o - ob * 8 : 8;
    store_tile(a, ob * 8, c0, rows, 16, out, 16);
}
#endif

#if X86
/* requant (and store_tile) for 8 sums of output channel o at once, the same float32 steps
 * in the same order: the sum plus the bias as float, times the multiplier, clamped, rounded
 * half to even by the 1.5 * 2^23 addition, plus the zero point; each code's low byte. Done
 * one value at a time, the epilogue took most of a pointwise conv with few input channels
 * (MobileNetV2's 16 -> 96 1x1 conv: 174 us for 1.6M multiply-adds). */
__attribute__((target("avx2"), always_inline))
static inline void put_row_avx2(const qgemm_args *a, int64_t o, int64_t c0, int64_t ncols,
                                __m256i acc) {
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(acc, _mm256_set1_epi32(a->bias[o])));
    f = _mm256_mul_ps(f, _mm256_set1_ps((float)a->mult[o]));
    f = _mm256_min_ps(_mm256_max_ps(f, _mm256_set1_ps(a->lo)), _mm256_set1_ps(a->hi));
    f = _mm256_sub_ps(_mm256_add_ps(f, magic), magic);
    __m256i codes = _mm256_add_epi32(_mm256_cvttps_epi32(f), _mm256_set1_epi32(a->zy));
    const __m256i low = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                         -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                         -1, -1, -1, -1);
    codes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(codes, low),
                                        _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    uint8_t *y = a->y + o * a->ldy + c0;
    if (ncols == 8) {
        _mm_storel_epi64((__m128i *)y, _mm256_castsi256_si128(codes));
    } else {
        uint8_t bytes[8];
        _mm_storel_epi64((__m128i *)bytes, _mm256_castsi256_si128(codes));
        memcpy(y, bytes, (size_t)ncols);
    }
}

/* AVX2 tile: 8 output channels x up to 8 columns. Each int32 lane of the packed activations
 * holds four u8 codes of one column; vpmaddwd multiplies 16-bit lanes and sums them in pairs,
 * so the even bytes (codes 0, 2) and the odd ones (1, 3), zero-extended, are multiplied by
 * the matching weights as 16-bit pairs (expand_avx2): two exact products summed per lane
 * each time. Each pair is broadcast straight from memory: unpacking the int8 weights in the
 * tile took two shuffles a row and spilled the sums (the tile ran at 2/3 of this speed). */
__attribute__((target("avx2"), always_inline))
static inline void tile_avx2_cols(const qgemm_args *a, int64_t ob, int64_t c0, int64_t ncols,
                                  int masked) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0,
            a6 = a0, a7 = a0;
    const __m256i low = _mm256_set1_epi16(0x00FF);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)ncols),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const int32_t *w = a->wx + ob * a->kg * 16;
    const uint8_t *b = a->b + c0 * 4;
    int64_t step = a->ldb * 4;
    for (int64_t k = 0; k < a->kg; k++, b += step, w += 16) {
        __m256i x = masked ? _mm256_maskload_epi32((const int *)b, mask)
                           : _mm256_loadu_si256((const void *)b);
        __m256i xe = _mm256_and_si256(x, low), xo = _mm256_srli_epi16(x, 8);
#define ROW(r, acc) acc = _mm256_add_epi32(acc, _mm256_add_epi32(                              \
            _mm256_madd_epi16(xe, _mm256_set1_epi32(w[r])),                                    \
            _mm256_madd_epi16(xo, _mm256_set1_epi32(w[8 + r]))))
        ROW(0, a0); ROW(1, a1); ROW(2, a2); ROW(3, a3);
        ROW(4, a4); ROW(5, a5); ROW(6, a6); ROW(7, a7);
#undef ROW
    }
    /* each row requantized from its register (gathered in an array first, GCC kept the sums
     * on the stack all along) */
    int64_t o0 = ob * 8, rows = a->o - o0 < 8 ? a->o - o0 : 8;
    put_row_avx2(a, o0, c0, ncols, a0);
    if (rows > 1) put_row_avx2(a, o0 + 1, c0, ncols, a1);
    if (rows > 2) put_row_avx2(a, o0 + 2, c0, ncols, a2);
    if (rows > 3) put_row_avx2(a, o0 + 3, c0, ncols, a3);
    if (rows > 4) put_row_avx2(a, o0 + 4, c0, ncols, a4);
    if (rows > 5) put_row_avx2(a, o0 + 5, c0, ncols, a5);
    if (rows > 6) put_row_avx2(a, o0 + 6, c0, ncols, a6);
    if (rows > 7) put_row_avx2(a, o0 + 7, c0, ncols, a7);
}

/* 8 columns, and the last 1-7 of a row of tiles: their activations loaded under a column
 * mask (done by the portable tile, a plane's 63 columns, 7x7 in a 9-wide row, took half
 * the GEMM's time in their last 7). */
__attribute__((target("avx2")))
static void tile_avx2(const qgemm_args *a, int64_t ob, int64_t c0) {
    tile_avx2_cols(a, ob, c0, 8, 0);
}

__attribute__((target("avx2")))
static void tile_avx2_last(const qgemm_args *a, int64_t ob, int64_t c0, int64_t ncols) {
    tile_avx2_cols(a, ob, c0, ncols, 1);
}

/* The packed weights [Ob][Kg][8][4] as the AVX2 tile reads them, [Ob][Kg][16] int32: per
 * row, codes 0 and 2 as two int16 (the even pair), then per row codes 1 and 3 (the odd). */
__attribute__((target("avx2")))
static void expand_avx2(const int8_t *w, int64_t groups, int32_t *out) {
    for (int64_t g = 0; g < groups; g++, w += 32, out += 16) {
        __m256i wk = _mm256_loadu_si256((const void *)w);  /* [8 rows][4 codes] */
        _mm256_storeu_si256((void *)out, _mm256_srai_epi16(_mm256_slli_epi16(wk, 8), 8));
        _mm256_storeu_si256((void *)(out + 8), _mm256_srai_epi16(wk, 8));
    }
}
#endif

/* One task: every block of 8 output channels over one block of columns, a tile of columns
 * at a time (its packed activations, K/4 x 128 bytes, stay in cache while every block of
 * weights passes over them). */
static void qgemm_task(const void *ctx, int64_t t) {
    const qgemm_args *a = ctx;
    int64_t c_begin = t * a->cols, c_end = c_begin + a->cols < a->n ? c_begin + a->cols : a->n;
    int path = qgemm_path();
    int64_t blocks = (a->o + 7) / 8;
    for (int64_t c = c_begin; c < c_end; c += 32) {
        int64_t width = c_end - c < 32 ? c_end - c : 32;
        for (int64_t ob = 0; ob < blocks; ob++) {
#if X86
            if (path == PATH_AVX512_VNNI) {
                tile_avx512_vnni(a, ob, c, width);
                continue;
            }
#endif
#if X86 && __GNUC__ >= 11
            if (path == PATH_AVX_VNNI) {  /* 16 columns a tile */
                int64_t done = 0;
                for (; done + 16 <= width; done += 16) tile_avx_vnni(a, ob, c + done);
                if (done < width) tile_portable(a, ob, c + done, width - done);
                continue;
            }
#endif
#if X86
            if (path == PATH_AVX2 && a->wx) {  /* 8 columns a tile */
                int64_t done = 0;
                for (; done + 8 <= width; done += 8) tile_avx2(a, ob, c + done);
                if (done < width) tile_avx2_last(a, ob, c + done, width - done);
                continue;
            }
#endif
            tile_portable(a, ob, c, width);
        }
    }
}

/* The GEMM's tasks: blocks of columns, each over every block of output channels. */
static void qgemm_columns(qgemm_args *a) {
    double macs = (double)a->o * a->kg * 4 * a->n;
    int64_t tasks = task_count(macs / (GEMM_MACS_PER_NS * 4), (a->n + 31) / 32);
    int64_t cols = (per_task(a->n, tasks) + 31) / 32 * 32;
    a->cols = cols;
    parallel(qgemm_task, a, (a->n + cols - 1) / cols);
}

#ifndef QGEMM_EXPANDED_BYTES
#define QGEMM_EXPANDED_BYTES (1L << 20)  /* the AVX2 path's expanded weights per pass */
#endif

/* y[o][c] = requant(sum_k w[o][k] * b[k][c] + bias[o]) for o < O, c < N, on every core.
 * The AVX2 path expands the weights to 16-bit pairs in the caller's scratch (no task of the
 * GEMM uses its thread's scratch), at most QGEMM_EXPANDED_BYTES of them at a time: a big
 * dense layer passes over its output channels in parts instead of doubling its weights in
 * host memory. Without host memory for them, the portable tiles. */
static void qgemm(qgemm_args *a) {
#if X86
    if (qgemm_path() == PATH_AVX2 && a->n) {
        int64_t blocks = (a->o + 7) / 8, per = QGEMM_EXPANDED_BYTES / (a->kg * 64);
        if (per < 1) per = 1;
        if (per > blocks) per = blocks;
        int32_t *wx = (int32_t *)thread_scratch(per * a->kg * 16);
        for (int64_t ob = 0; wx && ob < blocks; ob += per) {
            int64_t nb = blocks - ob < per ? blocks - ob : per;
            qgemm_args part = *a;
            part.w = a->w + ob * a->kg * 32;
            part.wx = wx;
            part.bias = a->bias + ob * 8;
            part.mult = a->mult + ob * 8;
            part.y = a->y + ob * 8 * a->ldy;
            part.o = a->o - ob * 8 < nb * 8 ? a->o - ob * 8 : nb * 8;
            expand_avx2(part.w, nb * a->kg, wx);
            qgemm_columns(&part);
        }
        if (wx) return;
    }
#endif
    qgemm_columns(a);
}

static void fill_range(qgemm_args *a, const lnpu_step *s, int zy_at) {
    a->zy = (int32_t)s->p[zy_at];
    a->lo = (float)(s->p[zy_at + 1] - s->p[zy_at]);
    a->hi = (float)(s->p[zy_at + 2] - s->p[zy_at]);
}

/* ---- convolution -------------------------------------------------------------------- */

typedef struct {
    const uint8_t *x;  /* one image, (C, H, W) codes */
    uint8_t *cols;     /* [G][Kg][OH*OW][4] */
    const lnpu_step *s;
} im2col_args;

/* Row k of one group's im2col matrix (k = c * KH*KW + i*KW + j), unsigned codes: the
 * padding holds the unsigned zero point. */
MULTIVERSION
static void im2col_row(const im2col_args *a, int64_t grp, int64_t k, uint8_t *restrict out) {
    const int64_t *p = a->s->p;
    int64_t c = p[Q_C], h = p[Q_H], w = p[Q_W], g = p[Q_G], kh = p[Q_KH], kw = p[Q_KW];
    int64_t oh = p[Q_OH], ow = p[Q_OW], sh = p[Q_SH], sw = p[Q_SW], dh = p[Q_DH], dw = p[Q_DW];
    int64_t pt = p[Q_PT], pl = p[Q_PL], cg = c / g;
    uint8_t zx = (uint8_t)p[Q_ZX], flip = (uint8_t)p[Q_XFLIP];
    int64_t ch = grp * cg + k / (kh * kw), i = k / kw % kh, j = k % kw;
    const uint8_t *plane = a->x + ch * h * w;
    int64_t lo, hi, off = j * dw - pl;
    valid_columns(off, sw, w, ow, &lo, &hi);
    for (int64_t r = 0; r < oh; r++) {
        int64_t ir = r * sh + i * dh - pt;
        uint8_t *dst = out + r * ow;
        if (ir < 0 || ir >= h) {
            memset(dst, zx, ow);
            continue;
        }
        const uint8_t *row = plane + ir * w + off;
        memset(dst, zx, lo);
        if (sw == 1) {
            for (int64_t col = lo; col < hi; col++) dst[col] = row[col] ^ flip;
        } else {
            for (int64_t col = lo; col < hi; col++) dst[col] = row[col * sw] ^ flip;
        }
        memset(dst + hi, zx, ow - hi);
    }
}

/* Interleave four rows of n bytes into [n][4], xor `flip` (0x80808080: int8 codes made
 * unsigned; 0: as they are). */
MULTIVERSION
static void interleave4(const uint8_t *restrict r0, const uint8_t *restrict r1,
                        const uint8_t *restrict r2, const uint8_t *restrict r3, int64_t n,
                        uint32_t *restrict out, uint32_t flip) {
    for (int64_t i = 0; i < n; i++)
        out[i] = ((uint32_t)r0[i] | (uint32_t)r1[i] << 8 | (uint32_t)r2[i] << 16 |
                  (uint32_t)r3[i] << 24) ^ flip;
}

/* Pack rows 4q .. 4q + 3 of one group's im2col matrix as [N][4] bytes (rows past K: 0). */
static void im2col_task(const void *ctx, int64_t t) {
    const im2col_args *a = ctx;
    const int64_t *p = a->s->p;
    int64_t kg = p[Q_KG], n = p[Q_OH] * p[Q_OW];
    int64_t k_total = p[Q_C] / p[Q_G] * p[Q_KH] * p[Q_KW];
    int64_t grp = t / kg, q = t % kg;
    uint8_t *rows = (uint8_t *)thread_scratch((4 * n + 3) / 4);
    if (!rows) return;  /* no host memory: the caller checks its own scratch first */
    for (int64_t lane = 0; lane < 4; lane++) {
        int64_t k = q * 4 + lane;
        if (k < k_total) im2col_row(a, grp, k, rows + lane * n);
        else memset(rows + lane * n, 0, n);
    }
    interleave4(rows, rows + n, rows + 2 * n, rows + 3 * n, n,
                (uint32_t *)(a->cols + (grp * kg + q) * n * 4), 0);
}

/* ---- the shifted form ---------------------------------------------------------------------
 * Each channel is copied once into SH x SW padded phase planes (Hp + 1 rows of Wp unsigned
 * codes, Hp = OH + (KH-1)*DH / SH, Wp = OW + (KW-1)*DW / SW; the zero point around the
 * input), phase (ph, pw) holding the padded input's rows ph, ph + SH, ... and columns pw,
 * pw + SW, ...; then the im2col row of tap (i, j) is the contiguous slice of OH*Wp codes of
 * phase (i*DH % SH, j*DW % SW) starting at (i*DH / SH)*Wp + j*DW / SW, and packing four
 * rows is one long interleave. The GEMM computes OH*Wp columns, of which each row's last
 * Wp - OW wrap around; they are cropped when the result is copied out. A stride-1 conv has
 * one phase; a strided one takes this form when its taps read every phase (a 3x3/2 does, a
 * 1x1/2 only one of four: im2col): im2col gathered the strided taps a byte at a time, 2-4x
 * onnxruntime's time on a YOLOv8's 3x3/2 int8 convs. */

typedef struct {
    const lnpu_step *s;
    const uint8_t *x;
    uint8_t *planes, *cols;  /* planes: the input itself for an unpadded 1x1 conv */
    int64_t hp, wp, plane;   /* plane: bytes from one channel's phase planes to the next */
    uint32_t flip;           /* applied when packing (the input's own planes) */
} shift_args;

MULTIVERSION
static void plane_task(const void *ctx, int64_t ch) {
    const shift_args *a = ctx;
    const int64_t *p = a->s->p;
    int64_t h = p[Q_H], w = p[Q_W], sh = p[Q_SH], sw = p[Q_SW], wp = a->wp, rows = a->hp + 1;
    uint8_t zx = (uint8_t)p[Q_ZX], flip = (uint8_t)p[Q_XFLIP];
    const uint8_t *src = a->x + ch * h * w;
    for (int64_t ph = 0; ph < sh; ph++)
        for (int64_t pw = 0; pw < sw; pw++) {
            uint8_t *q = a->planes + ch * a->plane + (ph * sw + pw) * rows * wp;
            int64_t lo, hi;  /* the phase's columns c whose input column c*SW + pw - PL exists */
            valid_columns(pw - p[Q_PL], sw, w, wp, &lo, &hi);
            for (int64_t r = 0; r < rows; r++, q += wp) {
                int64_t ir = r * sh + ph - p[Q_PT];
                if (ir < 0 || ir >= h || hi <= lo) {
                    memset(q, zx, wp);
                    continue;
                }
                const uint8_t *in = src + ir * w + pw - p[Q_PL];
                memset(q, zx, lo);
                if (sw == 1)
                    for (int64_t c = lo; c < hi; c++) q[c] = in[c] ^ flip;
                else
                    for (int64_t c = lo; c < hi; c++) q[c] = in[c * sw] ^ flip;
                memset(q + hi, zx, wp - hi);
            }
        }
}

static void shift_pack_task(const void *ctx, int64_t t) {
    const shift_args *a = ctx;
    const int64_t *p = a->s->p;
    int64_t kh = p[Q_KH], kw = p[Q_KW], dh = p[Q_DH], dw = p[Q_DW], kg = p[Q_KG];
    int64_t sh = p[Q_SH], sw = p[Q_SW];
    int64_t cg = p[Q_C] / p[Q_G], k_total = cg * kh * kw, n = p[Q_OH] * a->wp;
    int64_t grp = t / kg, q = t % kg;
    const uint8_t *rows[4];
    uint8_t *zeros = NULL;
    for (int64_t lane = 0; lane < 4; lane++) {
        int64_t k = q * 4 + lane;
        if (k >= k_total) {
            if (!zeros) {
                zeros = (uint8_t *)thread_scratch((n + 3) / 4);
                if (!zeros) return;  /* the caller checked its scratch: never here */
                memset(zeros, 0, n);
            }
            rows[lane] = zeros;
            continue;
        }
        int64_t ch = grp * cg + k / (kh * kw), i = k / kw % kh, j = k % kw;
        int64_t phase = i * dh % sh * sw + j * dw % sw;
        rows[lane] = a->planes + ch * a->plane + phase * (a->hp + 1) * a->wp
                     + i * dh / sh * a->wp + j * dw / sw;
    }
    uint32_t flip = a->flip;
    if (zeros && flip) {  /* rows past K must pack as zeros: flip them ahead */
        for (int64_t i = 0; i < n; i++) zeros[i] = 0x80;
    }
    interleave4(rows[0], rows[1], rows[2], rows[3], n,
                (uint32_t *)(a->cols + (grp * kg + q) * n * 4), flip);
}

int qconv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t n = p[Q_N], c = p[Q_C], h = p[Q_H], w = p[Q_W], o = p[Q_O], g = p[Q_G];
    int64_t oh = p[Q_OH], ow = p[Q_OW], kg = p[Q_KG], og = o / g;
    const uint8_t *x = slots[s->slot[QS_X]];
    const int8_t *wt = slots[s->slot[QS_W]];
    const int32_t *bias = slots[s->slot[QS_BIAS]];
    const double *mult = slots[s->slot[QS_MULT]];
    uint8_t *y = slots[s->slot[QS_Y]];
    uint8_t *cols = slots[s->slot[QS_COLS]];
    int64_t blocks = (og + 7) / 8;
    int shifted = (int)p[Q_SHIFTED];
    int64_t phases = shifted ? p[Q_SH] * p[Q_SW] : 1;
    int64_t wp = shifted ? ow + (p[Q_KW] - 1) * p[Q_DW] / p[Q_SW] : ow;
    int64_t hp = shifted ? oh + (p[Q_KH] - 1) * p[Q_DH] / p[Q_SH] : oh;
    int64_t cols_n = oh * wp;  /* GEMM columns */
    uint8_t *planes = cols + g * kg * 4 * cols_n, *wide = planes + c * phases * (hp + 1) * wp;
    if (n && !thread_scratch(cols_n)) return -1;
    for (int64_t img = 0; img < n; img++) {
        if (shifted) {
            /* an unpadded 1x1 conv reads the input's planes as they are */
            int own = p[Q_KH] == 1 && p[Q_KW] == 1 && phases == 1 && hp == h && wp == w;
            const uint8_t *image = x + img * c * h * w;
            shift_args sa = {s, image, own ? (uint8_t *)image : planes, cols, hp, wp,
                             own ? h * w : phases * (hp + 1) * wp,
                             own && p[Q_XFLIP] ? 0x80808080u : 0};
            if (!own) parallel(plane_task, &sa, c);
            parallel(shift_pack_task, &sa, g * kg);
        } else {
            im2col_args ia = {x + img * c * h * w, cols, s};
            parallel(im2col_task, &ia, g * kg);
        }
        for (int64_t grp = 0; grp < g; grp++) {
            uint8_t *out = y + (img * o + grp * og) * oh * ow;
            qgemm_args a = {cols + grp * kg * cols_n * 4, wt + grp * blocks * kg * 32, NULL,
                            bias + grp * og, mult + grp * og, shifted ? wide : out, kg, cols_n,
                            cols_n, cols_n, og, 0, 0, 0, 0};
            fill_range(&a, s, Q_ZY);
            qgemm(&a);
            if (shifted)  /* crop each row's wrap-around columns */
                for (int64_t r = 0; r < og * oh; r++) memcpy(out + r * ow, wide + r * wp, ow);
        }
    }
    return 0;
}

/* ---- dense ----------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *x;  /* (rows, K) codes */
    uint8_t *packed;   /* [Kg][rows][4] */
    int64_t rows, k, kg;
    uint8_t flip;
} pack_args;

static void pack_task(const void *ctx, int64_t t) {
    const pack_args *a = ctx;
    uint8_t *out = a->packed + t * a->rows * 4;
    for (int64_t r = 0; r < a->rows; r++) {
        const uint8_t *row = a->x + r * a->k;
        for (int64_t lane = 0; lane < 4; lane++) {
            int64_t k = t * 4 + lane;
            out[r * 4 + lane] = k < a->k ? (uint8_t)(row[k] ^ a->flip) : 0;
        }
    }
}

/* y (rows, O) = requant(x (rows, K) @ w^T + bias): the GEMM computes y^T (O, rows) into
 * the scratch and the rows are transposed out. */
void qdense(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t rows = p[D_ROWS], k = p[D_K], o = p[D_O], kg = p[D_KG];
    uint8_t *scratch = slots[s->slot[QS_COLS]];
    uint8_t *packed = scratch, *yt = scratch + kg * rows * 4;
    pack_args pa = {slots[s->slot[QS_X]], packed, rows, k, kg, (uint8_t)p[D_XFLIP]};
    parallel(pack_task, &pa, kg);
    qgemm_args a = {packed, slots[s->slot[QS_W]], NULL, slots[s->slot[QS_BIAS]],
                    slots[s->slot[QS_MULT]], yt, kg, rows, rows, rows, o, 0, 0, 0, 0};
    fill_range(&a, s, D_ZY);
    qgemm(&a);
    uint8_t *y = slots[s->slot[QS_Y]];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < o; j++) y[r * o + j] = yt[j * rows + r];
}

/* ---- depthwise -------------------------------------------------------------------------- */

/* One channel per group. Each channel's padded input is split into row and column phases
 * of the stride (int16, the unsigned zero point around the input), hq x wq each, so that
 * every tap reads one contiguous slice of oh*wq values of one phase: a tap is one long
 * multiply-add over int32 sums (the wq - ow wrap-around columns of each row are computed
 * and dropped), not ow-long pieces. */
typedef struct {
    const lnpu_step *s;
    const uint8_t *x;
    const int8_t *w;
    const int32_t *bias;
    const double *mult;
    uint8_t *y;
    int64_t per_task, hq, wq;  /* the per-channel form: channels per task, a phase's size */
    int64_t hp, wp, blocks;    /* the channel-block form (below): the padded plane; channel
                                * blocks per image */
} dw_args;

MULTIVERSION
static void dw_channel(const dw_args *a, int64_t ch, int16_t *plane, int32_t *acc) {
    const int64_t *p = a->s->p;
    int64_t h = p[Q_H], w = p[Q_W], kh = p[Q_KH], kw = p[Q_KW], oh = p[Q_OH], ow = p[Q_OW];
    int64_t sh = p[Q_SH], sw = p[Q_SW], dh = p[Q_DH], dw = p[Q_DW], pt = p[Q_PT], pl = p[Q_PL];
    int64_t hq = a->hq, wq = a->wq, size = hq * wq;
    int16_t zx = (int16_t)p[Q_ZX];
    uint8_t flip = (uint8_t)p[Q_XFLIP];
    const uint8_t *src = a->x + ch * h * w;
    for (int64_t pr = 0; pr < sh; pr++) {
        for (int64_t pc = 0; pc < sw; pc++) {
            int16_t *q = plane + (pr * sw + pc) * size;
            int64_t lo, hi, off = pc - pl;
            valid_columns(off, sw, w, wq, &lo, &hi);
            for (int64_t r = 0; r < hq; r++) {
                int64_t ir = r * sh + pr - pt;
                int16_t *row = q + r * wq;
                if (ir < 0 || ir >= h) {
                    for (int64_t c = 0; c < wq; c++) row[c] = zx;
                    continue;
                }
                const uint8_t *in = src + ir * w + off;
                for (int64_t c = 0; c < lo; c++) row[c] = zx;
                for (int64_t c = lo; c < hi; c++) row[c] = (int16_t)(uint8_t)(in[c * sw] ^ flip);
                for (int64_t c = hi; c < wq; c++) row[c] = zx;
            }
        }
    }
    const int8_t *wt = a->w + ch * kh * kw;
    int64_t n = (oh - 1) * wq + ow;  /* the last row's wrap-around columns are not needed */
    int32_t bias = a->bias[ch];
    for (int64_t k = 0; k < n; k++) acc[k] = bias;
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = 0; j < kw; j++) {
            int64_t ri = i * dh, cj = j * dw;
            const int16_t *in = plane + ((ri % sh) * sw + cj % sw) * size + (ri / sh) * wq + cj / sw;
            int32_t wv = wt[i * kw + j];
            for (int64_t k = 0; k < n; k++) acc[k] += (int32_t)in[k] * wv;
        }
    }
    float m = (float)a->mult[ch];
    int32_t zy = (int32_t)p[Q_ZY];
    float lo = (float)(p[Q_LO] - zy), hi = (float)(p[Q_HI] - zy);
    uint8_t *y = a->y + ch * oh * ow;
    for (int64_t r = 0; r < oh; r++) {
        const int32_t *sums = acc + r * wq;
        uint8_t *out = y + r * ow;
        for (int64_t c = 0; c < ow; c++) out[c] = requant(sums[c], m, lo, hi, zy);
    }
}

static int64_t dw_scratch_floats(int64_t sh, int64_t sw, int64_t hq, int64_t wq) {
    return (sh * sw * hq * wq * 2 + 63) / 64 * 16 + hq * wq + 16;
}

static void dw_task(const void *ctx, int64_t t) {
    const dw_args *a = ctx;
    const int64_t *p = a->s->p;
    int64_t c = p[Q_C], n = p[Q_N], oh = p[Q_OH], ow = p[Q_OW];
    int64_t plane_floats = (p[Q_SH] * p[Q_SW] * a->hq * a->wq * 2 + 63) / 64 * 16;
    float *scratch = thread_scratch(dw_scratch_floats(p[Q_SH], p[Q_SW], a->hq, a->wq));
    if (!scratch) return;  /* the caller checked: never here */
    int16_t *plane = (int16_t *)scratch;
    int32_t *acc = (int32_t *)(scratch + plane_floats);
    int64_t end = (t + 1) * a->per_task < n * c ? (t + 1) * a->per_task : n * c;
    for (int64_t k = t * a->per_task; k < end; k++) {
        dw_args one = *a;
        int64_t img = k / c, ch = k % c;
        one.x = a->x + img * c * p[Q_H] * p[Q_W];
        one.y = a->y + img * c * oh * ow;
        dw_channel(&one, ch, plane, acc);
    }
}

/* ---- depthwise on small planes: channel blocks --------------------------------------- *
 *
 * On a small plane the per-channel form is all loop overhead (a 4x4 output: ~20 loops of a
 * few elements per channel, 0.4 us a channel). Here a task takes DWB channels at once: their
 * padded input is copied channels-last as floats, every output pixel is one vector of DWB
 * channels summed over the taps, and the sums are requantized. The float sums are the exact
 * integer ones: a code (0..255) times a weight (-128..127) is at most 2^15 in size, so up to
 * DW_EXACT_TAPS of them stay within a float's 24 bits (longer kernels take the per-channel
 * form). A block's missing channels (C not a multiple of DWB) read zeros and are not
 * stored. */
#define DWB 16
#define DW_EXACT_TAPS 512    /* 512 codes (<= 255) x weights (>= -128) sum exactly in float */
/* The sums run in 8-lane halves of the block: GCC lowers 16-lane vector types on AVX2
 * through the stack (a GPR round trip per vector, in the innermost loop). */
typedef int32_t dwb_ivec __attribute__((vector_size(8 * sizeof(int32_t)), aligned(4)));

static int64_t dwb_scratch_floats(const int64_t *p, int64_t hp, int64_t wp) {
    /* the plane, the sums, then the weights (whose room then holds the codes) */
    int64_t taps = p[Q_KH] * p[Q_KW], pixels = p[Q_OH] * p[Q_OW];
    return (hp * wp + pixels + (taps > pixels ? taps : pixels)) * DWB;
}

MULTIVERSION static void dwb_task(const void *ctx, int64_t t) {
    const dw_args *a = ctx;
    const int64_t *p = a->s->p;
    int64_t C = p[Q_C], H = p[Q_H], W = p[Q_W], OH = p[Q_OH], OW = p[Q_OW];
    int64_t KH = p[Q_KH], KW = p[Q_KW], SH = p[Q_SH], SW = p[Q_SW], DH = p[Q_DH], DW = p[Q_DW];
    int64_t hp = a->hp, wp = a->wp, img = t / a->blocks, c0 = t % a->blocks * DWB;
    int64_t nc = C - c0 < DWB ? C - c0 : DWB;
    float *plane = thread_scratch(dwb_scratch_floats(p, hp, wp));
    if (!plane) return;  /* the caller checked: never here */
    float *sums = plane + hp * wp * DWB, *wt = sums + OH * OW * DWB;
    float zx = (float)p[Q_ZX];
    uint8_t flip = (uint8_t)p[Q_XFLIP];
    float pad[DWB] = {0};  /* the padding's code; a missing channel reads 0 */
    const uint8_t *src[DWB];
    for (int64_t c = 0; c < nc; c++) {
        pad[c] = zx;
        src[c] = a->x + (img * C + c0 + c) * H * W;
    }
    for (int64_t k = 0; k < hp * wp; k++) memcpy(plane + k * DWB, pad, sizeof pad);
    /* channels-last copy, a pixel's channels at a time (one cache line written per pixel;
     * a channel at a time wrote a line per value) */
    int64_t r0 = p[Q_PT] > 0 ? 0 : -p[Q_PT], r1 = hp - p[Q_PT] < H ? hp - p[Q_PT] : H;
    int64_t q0 = p[Q_PL] > 0 ? 0 : -p[Q_PL], q1 = wp - p[Q_PL] < W ? wp - p[Q_PL] : W;
    for (int64_t ih = r0; ih < r1; ih++) {
        float *dst = plane + ((ih + p[Q_PT]) * wp + p[Q_PL]) * DWB;
        for (int64_t iw = q0; iw < q1; iw++)
            for (int64_t c = 0; c < nc; c++)
                dst[iw * DWB + c] = (float)(int32_t)(uint8_t)(src[c][ih * W + iw] ^ flip);
    }
    for (int64_t tap = 0; tap < KH * KW; tap++)
        for (int64_t c = 0; c < DWB; c++)
            wt[tap * DWB + c] = c < nc ? (float)a->w[(c0 + c) * KH * KW + tap] : 0.0f;
    int32_t bias[DWB] = {0};
    float mult[DWB] = {0};
    for (int64_t c = 0; c < nc; c++) {
        bias[c] = a->bias[c0 + c];
        mult[c] = (float)a->mult[c0 + c];
    }
    for (int64_t oh = 0; oh < OH; oh++) {
        for (int64_t ow = 0; ow < OW; ow++) {
            for (int h = 0; h < DWB; h += 8) {
                vec8f acc = {0};
                for (int64_t i = 0; i < KH; i++) {
                    const float *row = plane + ((oh * SH + i * DH) * wp + ow * SW) * DWB + h;
                    for (int64_t j = 0; j < KW; j++)
                        acc += *(const vec8f *)(row + j * DW * DWB) *
                               *(const vec8f *)(wt + (i * KW + j) * DWB + h);
                }
                /* requant's first half, a vector of channels at a time: the exact integer
                 * sum plus the bias, as float, times the multiplier */
                dwb_ivec sum = __builtin_convertvector(acc, dwb_ivec) + *(const dwb_ivec *)(bias + h);
                *(vec8f *)(sums + (oh * OW + ow) * DWB + h) =
                        __builtin_convertvector(sum, vec8f) * *(const vec8f *)(mult + h);
            }
        }
    }
    /* its second half (clamp, round, zero point) in one loop over the block, then each
     * channel's codes copied out */
    int32_t zy = (int32_t)p[Q_ZY];
    float lo = (float)(p[Q_LO] - zy), hi = (float)(p[Q_HI] - zy);
    int32_t *codes = (int32_t *)wt;  /* the weights are no longer needed */
    int64_t total = OH * OW * DWB;
    for (int64_t k = 0; k < total; k++) codes[k] = code_of(sums[k], lo, hi, zy);
    for (int64_t c = 0; c < nc; c++) {
        uint8_t *out = a->y + (img * C + c0 + c) * OH * OW;
        for (int64_t k = 0; k < OH * OW; k++) out[k] = (uint8_t)codes[k * DWB + c];
    }
}

int qdwconv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t n = p[Q_N], c = p[Q_C], kh = p[Q_KH], kw = p[Q_KW], oh = p[Q_OH], ow = p[Q_OW];
    int64_t sh = p[Q_SH], sw = p[Q_SW], dh = p[Q_DH], dw = p[Q_DW];
    int64_t hq = oh + ((kh - 1) * dh) / sh + 1, wq = ow + ((kw - 1) * dw) / sw;
    if (n * c == 0) return 0;
    if (oh * ow <= dw_block_pixels && kh * kw <= DW_EXACT_TAPS) {
        int64_t hp = (oh - 1) * sh + (kh - 1) * dh + 1, wp = (ow - 1) * sw + (kw - 1) * dw + 1;
        if (!thread_scratch(dwb_scratch_floats(p, hp, wp))) return -1;
        dw_args b = {s, slots[s->slot[QS_X]], slots[s->slot[QS_W]], slots[s->slot[QS_BIAS]],
                     slots[s->slot[QS_MULT]], slots[s->slot[QS_Y]], 0, 0, 0, hp, wp,
                     (c + DWB - 1) / DWB};
        parallel(dwb_task, &b, n * b.blocks);
        return 0;
    }
    if (!thread_scratch(dw_scratch_floats(sh, sw, hq, wq))) return -1;
    dw_args a = {s, slots[s->slot[QS_X]], slots[s->slot[QS_W]], slots[s->slot[QS_BIAS]],
                 slots[s->slot[QS_MULT]], slots[s->slot[QS_Y]], 0, hq, wq};
    double work = (double)n * c * oh * ow * (kh * kw + 4);
    int64_t tasks = task_count(work / 4.0, n * c);
    a.per_task = per_task(n * c, tasks);
    parallel(dw_task, &a, (n * c + a.per_task - 1) / a.per_task);
    return 0;
}
