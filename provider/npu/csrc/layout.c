/* Data movement: concat, split, transpose (strided copies), gather, pad and cast. */
#include "npu.h"

#if HAVE_TRANSPOSE16
#include <immintrin.h>

/* The first stages of an N x N transpose in registers r (t: scratch), N = 8 or 16, with
 * the intrinsics of prefix PS (_mm256 or _mm512): pairs of rows interleaved per 128-bit
 * lane, then lane l of r[i + j] holds column 4l + j of rows i..i+3. */
#define TRANSPOSE_IN_LANES(PS, N, r, t)                                                     \
    do {                                                                                    \
        for (int i = 0; i < (N); i += 2) {                                                  \
            t[i] = PS##_unpacklo_ps(r[i], r[i + 1]);                                        \
            t[i + 1] = PS##_unpackhi_ps(r[i], r[i + 1]);                                    \
        }                                                                                   \
        for (int i = 0; i < (N); i += 4) {                                                  \
            r[i] = PS##_shuffle_ps(t[i], t[i + 2], 0x44);                                   \
            r[i + 1] = PS##_shuffle_ps(t[i], t[i + 2], 0xee);                               \
            r[i + 2] = PS##_shuffle_ps(t[i + 1], t[i + 3], 0x44);                           \
            r[i + 3] = PS##_shuffle_ps(t[i + 1], t[i + 3], 0xee);                           \
        }                                                                                   \
    } while (0)

/* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (both at most 16): one 16 x 16
 * block in registers (unpacks, then 128-bit lane shuffles), rows past `rows` read as zeros
 * and lanes past `cols` neither read nor written. The depthwise conv's channels-last blocks
 * move in and out through it (element by element, the moves took 3x the taps' time on
 * MobileNetV2's 16x16 planes), and a 1x1 conv's W^T panels are made with it. AVX-512 only:
 * callers check vector_width() == 16. */
__attribute__((target("avx512f"))) void transpose16(const float *src, int64_t lds, float *dst,
                                                     int64_t ldd, int rows, int cols) {
    __mmask16 in = (__mmask16)((1u << cols) - 1), out = (__mmask16)((1u << rows) - 1);
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(in, src + i * lds) : _mm512_setzero_ps();
    TRANSPOSE_IN_LANES(_mm512, 16, r, t);
    for (int j = 0; j < 4; j++) {  /* the four row quarters of columns j, j + 4, j + 8, j + 12 */
        __m512 a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);   /* j, j + 8 of rows 0-7 */
        __m512 b = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);   /* j + 4, j + 12 */
        __m512 c = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        __m512 d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
        t[j] = _mm512_shuffle_f32x4(a, c, 0x88);
        t[j + 8] = _mm512_shuffle_f32x4(a, c, 0xdd);
        t[j + 4] = _mm512_shuffle_f32x4(b, d, 0x88);
        t[j + 12] = _mm512_shuffle_f32x4(b, d, 0xdd);
    }
    for (int j = 0; j < cols; j++) _mm512_mask_storeu_ps(dst + j * ldd, out, t[j]);
}

/* transpose16's contract for an 8 x 8 block (rows, cols at most 8), in AVX2 registers:
 * the depthwise conv's channels-last blocks move through it in 8-channel halves on CPUs
 * without AVX-512, where they went element by element. */
__attribute__((target("avx2"))) void transpose8(const float *src, int64_t lds, float *dst,
                                                  int64_t ldd, int rows, int cols) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
    __m256 r[8], t[8];
    /* plain loads and stores for whole rows and columns; fewer columns mask the loads,
     * fewer rows store through memory (AMD's masked stores are microcoded: with them the
     * block ran slower than the element loop it replaces) */
    for (int i = 0; i < 8; i++)
        r[i] = i >= rows ? _mm256_setzero_ps() : cols == 8 ? _mm256_loadu_ps(src + i * lds)
                                                            : _mm256_maskload_ps(src + i * lds, in);
    TRANSPOSE_IN_LANES(_mm256, 8, r, t);
    for (int j = 0; j < 4; j++) {  /* columns j and j + 4: the low and high lanes */
        t[j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x20);
        t[j + 4] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x31);
    }
    for (int j = 0; j < cols; j++) {
        if (rows == 8) {
            _mm256_storeu_ps(dst + j * ldd, t[j]);
        } else {  /* through memory and a copy of `rows` floats */
            float part[8] __attribute__((aligned(32)));
            _mm256_store_ps(part, t[j]);
            memcpy(dst + j * ldd, part, (size_t)rows * sizeof(float));
        }
    }
}

int transpose8_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx2");
    }
    return ok;
}
#endif

/* concat and split: outer, then bytes per outer index of each piece (slots 0..k-1); the
 * whole tensor in slot 15. Concat copies the pieces into the whole, split the whole into
 * the pieces. Tasks take equal byte ranges of the whole: a detector's concat of four
 * 3x208x208 slices (2 MB) took 148 us on one core. */

typedef struct {
    const lnpu_step *s;
    void **slots;
    int64_t row, per_task, total;  /* bytes: of a whole row (one outer index), a task, all */
    int join;
} pieces_ctx;

static void pieces_task(const void *ctx, int64_t t) {
    const pieces_ctx *cx = ctx;
    const int64_t *part = cx->s->p + 2;
    char *whole = cx->slots[cx->s->slot[MAX_SLOTS - 1]];
    int64_t b = t * cx->per_task, end = b + cx->per_task < cx->total ? b + cx->per_task : cx->total;
    while (b < end) {
        int64_t o = b / cx->row, at = b % cx->row, i = 0, start = 0;
        while (start + part[i] <= at) start += part[i++];  /* the piece holding byte `at` */
        int64_t n = start + part[i] - at < end - b ? start + part[i] - at : end - b;
        char *piece = (char *)cx->slots[cx->s->slot[i]] + o * part[i] + (at - start);
        if (cx->join) memcpy(whole + b, piece, n);
        else memcpy(piece, whole + b, n);
        b += n;
    }
}

static void pieces(const lnpu_step *s, void **slots, int join) {
    int64_t row = 0;
    for (int64_t i = 0; i < s->p[1]; i++) row += s->p[2 + i];
    pieces_ctx cx = {s, slots, row, 0, s->p[0] * row, join};
    if (cx.total == 0) return;
    int64_t tasks = task_count(cx.total / COPY_BYTES_PER_NS, cx.total);
    cx.per_task = per_task(cx.total, tasks);
    parallel(pieces_task, &cx, (cx.total + cx.per_task - 1) / cx.per_task);
}

void concat(const lnpu_step *s, void **slots) { pieces(s, slots, 1); }

void split_axis(const lnpu_step *s, void **slots) { pieces(s, slots, 0); }

/* Copies `n` elements of `size` bytes, `stride` bytes apart from `src`, to `y`; returns the
 * end of what it wrote. Typed loops for the common element sizes: a memcpy per element of
 * a run-time size cost ~2.3 ns an element (a slice of every other column, as a detector's
 * space-to-depth stem takes, of 3x416x416: 300 us). */
MULTIVERSION static char *strided_row(char *restrict y, const char *restrict src, int64_t n,
                                      int64_t stride, int64_t size) {
#define STRIDED_COPY(type)                                                                   \
    do {                                                                                     \
        type *restrict out = (type *)y;                                                      \
        for (int64_t i = 0; i < n; i++) memcpy(out + i, src + i * stride, sizeof(type));     \
    } while (0)
    if (size == 4 && stride == 8) {  /* every other float: a constant stride vectorizes */
        uint32_t *restrict out = (uint32_t *)y;
        for (int64_t i = 0; i < n; i++) memcpy(out + i, src + 8 * i, 4);
        return y + n * size;
    }
    switch (size) {
    case 4: STRIDED_COPY(uint32_t); break;
    case 8: STRIDED_COPY(uint64_t); break;
    case 2: STRIDED_COPY(uint16_t); break;
    case 1: STRIDED_COPY(uint8_t); break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(y + i * size, src + i * stride, size);
    }
#undef STRIDED_COPY
    return y + n * size;
}

typedef struct {
    const lnpu_step *s;
    void **slots;
    int64_t rows, per_task, row_bytes;  /* rows: every output axis but the last */
} transpose_ctx;

/* Task t: output rows [t * per_task, ...), from the odometer set to the first of them. */
static void transpose_task(const void *ctx, int64_t t) {
    const transpose_ctx *cx = ctx;
    const lnpu_step *s = cx->s;
    int64_t r = s->p[0], block = s->p[1], size = s->p[15];
    const int64_t *shape = s->p + 2, *stride = s->p + 8;
    const char *x = (const char *)cx->slots[s->slot[0]] + s->p[14];
    int64_t row0 = t * cx->per_task, n = cx->rows - row0 < cx->per_task ? cx->rows - row0 : cx->per_task;
    char *y = (char *)cx->slots[s->slot[1]] + row0 * cx->row_bytes;
    int64_t idx[6] = {0};
    for (int64_t d = r - 2, rest = row0; d >= 0; d--) {
        idx[d] = rest % shape[d];
        rest /= shape[d];
    }
    for (int64_t k = 0; k < n; k++) {
        const char *src = x;
        for (int64_t d = 0; d < r - 1; d++) src += idx[d] * stride[d];
        if (block > 0) {
            memcpy(y, src, block);
            y += block;
        } else {
            y = strided_row(y, src, shape[r - 1], stride[r - 1], size);
        }
        for (int64_t d = r - 2; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
}

/* A transpose whose output's second-last axis is the input's contiguous one (4-byte
 * elements, AVX-512): per index of the axes before, an A x B matrix transposed in 16 x 16
 * blocks in registers (transpose16) instead of element by element, whose reads each took a
 * cache line of their own. A model's transpose steps alone, alternating in one process, 2
 * cores: MiniLM-L3 at 2 x 128 tokens 0.41 -> 0.33 ms, MiniLM-L6 0.90 -> 0.77, PP-OCRv4's
 * recogniser at 4 x 3 x 48 x 160 0.100 -> 0.073, YOLOv8n at 1024 x 1024 4.2 -> 3.6 ms. Task t:
 * blocks of 16 output rows [t * per_task, ...), matrix by matrix. */
typedef struct {
    const lnpu_step *s;
    void **slots;
    int64_t a, b, lds, blocks, total, per_task;  /* a x b output matrices, `blocks` blocks
                                                  * of 16 rows each, `total` blocks in all */
} blocks_ctx;

static void transpose_blocks_task(const void *ctx, int64_t t) {
#if HAVE_TRANSPOSE16
    const blocks_ctx *cx = ctx;
    const lnpu_step *s = cx->s;
    const int64_t *shape = s->p + 2, *stride = s->p + 8;
    const char *x = (const char *)cx->slots[s->slot[0]] + s->p[14];
    float *y = cx->slots[s->slot[1]];
    int64_t end = (t + 1) * cx->per_task < cx->total ? (t + 1) * cx->per_task : cx->total;
    for (int64_t u = t * cx->per_task; u < end; u++) {
        int64_t m = u / cx->blocks, i0 = u % cx->blocks * 16;  /* matrix m, its rows i0.. */
        const char *src = x;
        for (int64_t d = s->p[0] - 3, rest = m; d >= 0; d--) {
            src += rest % shape[d] * stride[d];
            rest /= shape[d];
        }
        float *dst = y + (m * cx->a + i0) * cx->b;
        int rows = cx->a - i0 < 16 ? (int)(cx->a - i0) : 16;
        for (int64_t j0 = 0; j0 < cx->b; j0 += 16)
            transpose16((const float *)src + j0 * cx->lds + i0, cx->lds, dst + j0, cx->b,
                        cx->b - j0 < 16 ? (int)(cx->b - j0) : 16, rows);
    }
#else
    (void)ctx, (void)t;
#endif
}

/* The blocks_ctx of a transpose step that can go by blocks, else 0. */
static int transpose_by_blocks(const lnpu_step *s, void **slots, blocks_ctx *cx) {
    int64_t r = s->p[0];
    const int64_t *shape = s->p + 2, *stride = s->p + 8;
    if (!HAVE_TRANSPOSE16 || vector_width() != 16 || r < 2 || s->p[1] > 0 || s->p[15] != 4 ||
        stride[r - 2] != 4 || stride[r - 1] <= 0 || stride[r - 1] % 4)
        return 0;
    for (int64_t d = 0; d < r - 2; d++)
        if (stride[d] < 0) return 0;
    *cx = (blocks_ctx){s, slots, shape[r - 2], shape[r - 1], stride[r - 1] / 4,
                       (shape[r - 2] + 15) / 16, 0, 0};
    cx->total = cx->blocks;
    for (int64_t d = 0; d < r - 2; d++) cx->total *= shape[d];
    return 1;
}

/* transpose: rank r (<= 6, the last output axis is contiguous in the input too when
 * p[1] > 1), p[1] bytes per innermost block, p[2..2+r) output shape, p[8..8+r) input
 * byte strides permuted to the output's axis order (negative for a reversed axis, 0 for a
 * broadcast one), p[14] the byte offset of the first element read (a slice's start), p[15]
 * the element bytes when the innermost axis goes element by element. Any strided
 * view of x, copied out contiguously: transposes, slices, broadcasts, SpaceToDepth. */
void transpose(const lnpu_step *s, void **slots) {
    int64_t r = s->p[0], rows = 1;
    for (int64_t d = 0; d < r; d++)
        if (s->p[2 + d] == 0) return;  /* empty */
    for (int64_t d = 0; d < r - 1; d++) rows *= s->p[2 + d];
    blocks_ctx bx;
    if (transpose_by_blocks(s, slots, &bx)) {
        double ns = (double)rows * s->p[2 + r - 1] / (4 * COPY_FLOATS_PER_NS);
        bx.per_task = per_task(bx.total, task_count(ns, bx.total));
        parallel(transpose_blocks_task, &bx, (bx.total + bx.per_task - 1) / bx.per_task);
        return;
    }
    transpose_ctx cx = {s, slots, rows, 0,
                        s->p[1] > 0 ? s->p[1] : s->p[2 + r - 1] * s->p[15]};
    double row_ns = s->p[1] > 0 ? cx.row_bytes / COPY_BYTES_PER_NS
                                : s->p[2 + r - 1] / COPY_FLOATS_PER_NS;  /* per element */
    int64_t tasks = task_count(rows * row_ns, rows);
    cx.per_task = per_task(rows, tasks);
    parallel(transpose_task, &cx, (rows + cx.per_task - 1) / cx.per_task);
}


/* gather: outer, the axis's length, bytes per index (the elements after the axis), index
 * count, index bytes (4 or 8), checked (the compiler made them non-negative and in range);
 * slots x, indices, y. Run-time indices are checked first, all of them (nothing is written
 * when one is out of range), and negatives wrap, as the numpy kernel does. */
static int64_t gather_index(const void *idx, int64_t j, int64_t bytes) {
    return bytes == 8 ? ((const int64_t *)idx)[j] : ((const int32_t *)idx)[j];
}

/* Indices first, first + step, ... (count of them) in [-dim, dim), else the run's error
 * naming `op`, in the numpy kernels' words (check_indices). */
static int check_indices(const void *idx, int64_t first, int64_t step, int64_t count,
                         int64_t bytes, int64_t dim, const char *op) {
    for (int64_t j = 0; j < count; j++) {
        int64_t k = gather_index(idx, first + j * step, bytes);
        if (k < -dim || k >= dim)
            return kernel_fail("%s: index %lld is outside [-%lld, %lld)", op, (long long)k,
                               (long long)dim, (long long)dim);
    }
    return 0;
}

/* The checked k-deep index tuple j, wrapped, as a row number of dims[0] x ... x dims[k-1]. */
static int64_t tuple_row(const void *idx, int64_t j, int64_t k, int64_t bytes,
                         const int64_t *dims) {
    int64_t linear = 0;
    for (int64_t a = 0; a < k; a++) {
        int64_t v = gather_index(idx, j * k + a, bytes);
        linear = linear * dims[a] + (v < 0 ? v + dims[a] : v);
    }
    return linear;
}

int gather(const lnpu_step *s, void **slots) {
    int64_t outer = s->p[0], dim = s->p[1], inner = s->p[2], count = s->p[3], bytes = s->p[4];
    const char *x = slots[s->slot[0]];
    const void *idx = slots[s->slot[1]];
    char *y = slots[s->slot[2]];
    if (!s->p[5] && check_indices(idx, 0, 1, count, bytes, dim, "Gather")) return KERNEL_REFUSED;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < count; j++, y += inner) {
            int64_t k = gather_index(idx, j, bytes);
            memcpy(y, x + (o * dim + (k < 0 ? k + dim : k)) * inner, inner);
        }
    return 0;
}

/* gather_nd (batch_dims 0): p[0] index depth k (<= 6), p[1] bytes per index tuple (the
 * elements after x's first k axes), p[2] tuple count, p[3] index bytes, p[4..4+k) x's first
 * k dims; slots x, indices (count x k), y. Each index column is checked against its axis
 * first, column by column as the numpy kernel does, and negatives wrap. */
int gather_nd(const lnpu_step *s, void **slots) {
    int64_t k = s->p[0], inner = s->p[1], count = s->p[2], bytes = s->p[3];
    const int64_t *dims = s->p + 4;
    const char *x = slots[s->slot[0]];
    const void *idx = slots[s->slot[1]];
    char *y = slots[s->slot[2]];
    for (int64_t a = 0; a < k; a++)
        if (check_indices(idx, a, k, count, bytes, dims[a], "GatherND")) return KERNEL_REFUSED;
    for (int64_t j = 0; j < count; j++, y += inner)
        memcpy(y, x + tuple_row(idx, j, k, bytes, dims) * inner, inner);
    return 0;
}

/* scatter_nd (ScatterND, no reduction): p[0] index depth k (<= 6), p[1] bytes per slice
 * (the elements after data's first k axes), p[2] tuple count, p[3] index bytes, p[4] data's
 * bytes, p[5..5+k) data's first k dims; slots data, indices (count x k), updates (count
 * slices), y. Every index is checked first, column by column as the numpy kernel does
 * (nothing is written when one is out of range); y is data (unless it is data's memory),
 * then each tuple's slice in order, so a repeated tuple keeps its last update. */
int scatter_nd(const lnpu_step *s, void **slots) {
    int64_t k = s->p[0], inner = s->p[1], count = s->p[2], bytes = s->p[3];
    const int64_t *dims = s->p + 5;
    const char *x = slots[s->slot[0]];
    const void *idx = slots[s->slot[1]];
    const char *updates = slots[s->slot[2]];
    char *y = slots[s->slot[3]];
    for (int64_t a = 0; a < k; a++)
        if (check_indices(idx, a, k, count, bytes, dims[a], "ScatterND")) return KERNEL_REFUSED;
    if (y != x) memcpy(y, x, (size_t)s->p[4]);
    for (int64_t j = 0; j < count; j++)
        memcpy(y + tuple_row(idx, j, k, bytes, dims) * inner, updates + j * inner, (size_t)inner);
    return 0;
}

/* gather_elements: rank r (<= 6), element bytes, index bytes (4 or 8), the axis's length in
 * x and its byte stride, then the index's dims (r) and x's byte strides (r) with the axis's
 * 0; slots x, indices, y. y[i] = x[i with its axis coordinate replaced by index[i]] for
 * every index position i, x read through its strides (ONNX lets the index be shorter than x
 * on the other axes). The indices are checked first, all of them in order (nothing is
 * written when one is out of range), and negatives wrap, as the numpy kernel does. */
enum { GE_R, GE_ESIZE, GE_IBYTES, GE_DIM, GE_ALONG, GE_SHAPE, GE_STRIDES = GE_SHAPE + 6,
       GE_BYTES = GE_STRIDES + 6 /* scatter_elements: x's bytes */ };

/* One row of the index (its last axis, n positions): y[c] = x at row + c * step + k * along,
 * k the position's index (wrapped), elements of type T. */
#define GE_ROW(T)                                                                            \
    for (int64_t c = 0; c < n; c++) {                                                        \
        int64_t k = gather_index(idx, c, bytes);                                             \
        ((T *)y)[c] = *(const T *)(row + c * step + (k < 0 ? k + dim : k) * along);          \
    }

static void gather_elements_row(const char *row, const void *idx, char *y, int64_t n,
                                int64_t step, int64_t along, int64_t dim, int64_t bytes,
                                int64_t esize) {
    switch (esize) {
    case 1: GE_ROW(uint8_t) break;
    case 2: GE_ROW(uint16_t) break;
    case 4: GE_ROW(uint32_t) break;
    case 8: GE_ROW(uint64_t) break;
    default:
        for (int64_t c = 0; c < n; c++) {
            int64_t k = gather_index(idx, c, bytes);
            memcpy(y + c * esize, row + c * step + (k < 0 ? k + dim : k) * along, (size_t)esize);
        }
    }
}
#undef GE_ROW

int gather_elements(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p, *shape = p + GE_SHAPE, *strides = p + GE_STRIDES;
    int64_t r = p[GE_R], esize = p[GE_ESIZE], bytes = p[GE_IBYTES], dim = p[GE_DIM], count = 1;
    for (int64_t d = 0; d < r; d++) count *= shape[d];
    const char *x = slots[s->slot[0]];
    const char *idx = slots[s->slot[1]];
    char *y = slots[s->slot[2]];
    if (check_indices(idx, 0, 1, count, bytes, dim, "GatherElements")) return KERNEL_REFUSED;
    if (!count) return 0;
    /* row by row along the last axis, each from the odometer of the axes before it */
    int64_t n = shape[r - 1], at[6] = {0};
    for (int64_t q = 0; q < count / n; q++) {
        const char *row = x;
        for (int64_t d = 0; d < r - 1; d++) row += at[d] * strides[d];
        gather_elements_row(row, idx + q * n * bytes, y + q * n * esize, n, strides[r - 1],
                            p[GE_ALONG], dim, bytes, esize);
        for (int64_t d = r - 2; d >= 0 && ++at[d] == shape[d]; d--) at[d] = 0;
    }
    return 0;
}

/* scatter_elements (ScatterElements, no reduction): gather_elements's parameters, then x's
 * bytes; slots x, indices, updates (the index's shape), y. y is x (unless it is x's memory),
 * then y[i with its axis coordinate replaced by index[i]] = updates[i] for every index
 * position i in order (a repeated place keeps its last update, as onnxruntime writes them);
 * the indices are checked first, all of them, and negatives wrap. */
int scatter_elements(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p, *shape = p + GE_SHAPE, *strides = p + GE_STRIDES;
    int64_t r = p[GE_R], esize = p[GE_ESIZE], bytes = p[GE_IBYTES], dim = p[GE_DIM], count = 1;
    for (int64_t d = 0; d < r; d++) count *= shape[d];
    const char *x = slots[s->slot[0]];
    const char *idx = slots[s->slot[1]];
    const char *updates = slots[s->slot[2]];
    char *y = slots[s->slot[3]];
    if (check_indices(idx, 0, 1, count, bytes, dim, "ScatterElements")) return KERNEL_REFUSED;
    if (y != x) memcpy(y, x, (size_t)p[GE_BYTES]);
    if (!count) return 0;
    int64_t n = shape[r - 1], at[6] = {0};
    for (int64_t q = 0; q < count / n; q++) {
        char *row = y;
        for (int64_t d = 0; d < r - 1; d++) row += at[d] * strides[d];
        for (int64_t c = 0; c < n; c++) {
            int64_t k = gather_index(idx + q * n * bytes, c, bytes);
            memcpy(row + c * strides[r - 1] + (k < 0 ? k + dim : k) * p[GE_ALONG],
                   updates + (q * n + c) * esize, (size_t)esize);
        }
        for (int64_t d = r - 2; d >= 0 && ++at[d] == shape[d]; d--) at[d] = 0;
    }
    return 0;
}

/* triangle (Trilu): matrices, rows, columns, k, upper, element bytes; slots x, y. Each
 * row of each matrix keeps its columns j with j - i >= k (upper) or j - i <= k (lower)
 * and is zero elsewhere: a decoder's causal mask, one copy and one fill per row. */
void triangle(const lnpu_step *s, void **slots) {
    int64_t mats = s->p[0], rows = s->p[1], cols = s->p[2], k = s->p[3], upper = s->p[4];
    size_t e = (size_t)s->p[5];
    const char *x = slots[s->slot[0]];
    char *y = slots[s->slot[1]];
    for (int64_t m = 0; m < mats * rows; m++) {
        int64_t i = m % rows;
        /* the kept columns [lo, hi) */
        int64_t lo = upper ? i + k : 0, hi = upper ? cols : i + k + 1;
        lo = lo < 0 ? 0 : lo > cols ? cols : lo;
        hi = hi < lo ? lo : hi > cols ? cols : hi;
        const char *in = x + m * cols * e;
        char *out = y + m * cols * e;
        memset(out, 0, (size_t)lo * e);
        memcpy(out + lo * e, in + lo * e, (size_t)(hi - lo) * e);
        memset(out + hi * e, 0, (size_t)(cols - hi) * e);
    }
}

/* pad: rank r (<= 6, adjacent unpadded axes merged, trailing ones folded into the element),
 * element bytes, mode, the constant's bytes (p[PD_VALUE]: the low `base` bytes, repeated
 * over an element), base element bytes, input dims, pads before, output dims. Each output
 * row (every axis but the last) is a constant row when its index lies in a constant pad on
 * some axis, else its source row with the last axis's pads around it. The modes map an
 * index outside the input as numpy.pad does, pads longer than the axis included. */
enum { PD_R, PD_ESIZE, PD_MODE, PD_VALUE, PD_BASE, PD_IN = 6, PD_BEFORE = 12, PD_OUT = 18 };
enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_SYMMETRIC };

/* The input index output index `o` copies along an axis (-1: the constant). */
static int64_t pad_source(int64_t o, int64_t before, int64_t n, int mode) {
    int64_t i = o - before;
    if (i >= 0 && i < n) return i;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_EDGE) return i < 0 ? 0 : n - 1;
    if (mode == PAD_REFLECT && n == 1) return 0;
    for (;;) {  /* mirrored without the edge (reflect) or with it, as often as needed */
        if (i < 0) i = mode == PAD_REFLECT ? -i : -i - 1;
        else if (i >= n) i = mode == PAD_REFLECT ? 2 * (n - 1) - i : 2 * n - 1 - i;
        else return i;
    }
}

static void pad_fill(char *dst, int64_t bytes, const char *value, int64_t base) {
    for (int64_t k = 0; k < bytes; k++) dst[k] = value[k % base];
}

void pad(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p, *in = p + PD_IN, *before = p + PD_BEFORE, *out = p + PD_OUT;
    int64_t r = p[PD_R], es = p[PD_ESIZE], base = p[PD_BASE];
    int mode = (int)p[PD_MODE];
    char value[8];
    memcpy(value, &p[PD_VALUE], sizeof value);
    const char *x = slots[s->slot[0]];
    char *y = slots[s->slot[1]];
    int64_t rows = 1;
    for (int64_t d = 0; d < r - 1; d++) rows *= out[d];
    int64_t w = out[r - 1], n = in[r - 1], b = before[r - 1];
    int64_t idx[6] = {0};
    for (int64_t row = 0; row < rows && w > 0; row++) {
        char *dst = y + row * w * es;
        int64_t src = 0, blank = n == 0;
        for (int64_t d = 0; d < r - 1 && !blank; d++) {
            int64_t i = pad_source(idx[d], before[d], in[d], mode);
            blank = i < 0;
            src = src * in[d] + i;
        }
        if (blank) {
            pad_fill(dst, w * es, value, base);
        } else {
            const char *xr = x + src * n * es;
            for (int64_t k = 0; k < w; k++) {
                if (k == b) {  /* the row itself */
                    memcpy(dst + k * es, xr, (size_t)(n * es));
                    k += n - 1;
                    continue;
                }
                int64_t i = pad_source(k, b, n, mode);
                if (i < 0) pad_fill(dst + k * es, es, value, base);
                else memcpy(dst + k * es, xr + i * es, (size_t)es);
            }
        }
        for (int64_t d = r - 2; d >= 0; d--) {  /* the next row's index */
            if (++idx[d] < out[d]) break;
            idx[d] = 0;
        }
    }
}

/* cast: count, source type, target type (CT_*: ops/shape.py's CAST_TYPES); slots x, y. The
 * pairs the lowering sends here have one exact meaning in C and numpy: integers and bools
 * to anything (to bool: nonzero), float32 to float32 or bool. A float to an integer stays
 * with numpy (outside the range C leaves it undefined). */
enum { CT_F32, CT_I32, CT_I64, CT_U8, CT_I8, CT_BOOL };

#define CAST_TO(EXPR)                                                        \
    switch (to) {                                                            \
    case CT_F32: for (int64_t i = 0; i < n; i++) ((float *)y)[i] = (float)(EXPR); break;       \
    case CT_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)y)[i] = (int32_t)(EXPR); break;   \
    case CT_I64: for (int64_t i = 0; i < n; i++) ((int64_t *)y)[i] = (int64_t)(EXPR); break;   \
    case CT_U8: for (int64_t i = 0; i < n; i++) ((uint8_t *)y)[i] = (uint8_t)(EXPR); break;    \
    case CT_I8: for (int64_t i = 0; i < n; i++) ((int8_t *)y)[i] = (int8_t)(EXPR); break;      \
    default: for (int64_t i = 0; i < n; i++) ((uint8_t *)y)[i] = (EXPR) != 0; break;           \
    }

void cast(const lnpu_step *s, void **slots) {
    int64_t n = s->p[0], from = s->p[1], to = s->p[2];
    const void *x = slots[s->slot[0]];
    void *y = slots[s->slot[1]];
    switch (from) {
    case CT_F32: CAST_TO(((const float *)x)[i]) break;
    case CT_I32: CAST_TO(((const int32_t *)x)[i]) break;
    case CT_I64: CAST_TO(((const int64_t *)x)[i]) break;
    case CT_U8: case CT_BOOL: CAST_TO(((const uint8_t *)x)[i]) break;
    default: CAST_TO(((const int8_t *)x)[i]) break;
    }
}
#undef CAST_TO
