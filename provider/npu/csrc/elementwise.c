/* Elementwise: unary math and activations, binary arithmetic with numpy broadcasting.
 *
 * exp, sigmoid, tanh, erfc (the numpy kernel's Chebyshev fit, |error| <= 1.2e-7, behind erf)
 * and GELU are npu.h's (vectorizable). */
#include "npu.h"

static inline float ferf(float x) {
    float r = 1.0f - ferfc_nonneg(fabsf(x));
    return x < 0 ? -r : r;
}

/* unary function codes (provider/npu/ops/elementwise.py UNARY_CODES) */
enum { U_SIGMOID, U_TANH, U_ERF, U_GELU, U_GELU_TANH, U_SWISH, U_HSWISH, U_HSIGMOID, U_EXP,
       U_SQRT, U_NEG, U_ABS, U_RECIPROCAL, U_SQUARE, U_FLOOR, U_CEIL, U_ROUND };

MULTIVERSION static void unary_range(const float *restrict x, float *restrict y, int64_t n,
                                     int64_t fn, float alpha, float beta) {
    switch (fn) {
    case U_SIGMOID: for (int64_t i = 0; i < n; i++) y[i] = fsigmoid(x[i]); break;
    case U_TANH: for (int64_t i = 0; i < n; i++) y[i] = ftanh(x[i]); break;
    case U_ERF: for (int64_t i = 0; i < n; i++) y[i] = ferf(x[i]); break;
    case U_GELU: for (int64_t i = 0; i < n; i++) y[i] = fgelu(x[i]); break;
    case U_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + ftanh(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
    case U_SWISH: for (int64_t i = 0; i < n; i++) y[i] = x[i] * fsigmoid(x[i]); break;
    case U_HSWISH:
        for (int64_t i = 0; i < n; i++) {
            float r = x[i] + 3.0f;
            r = r < 0.0f ? 0.0f : (r > 6.0f ? 6.0f : r);
            y[i] = x[i] * r / 6.0f;
        }
        break;
    case U_HSIGMOID:
        for (int64_t i = 0; i < n; i++) {
            float r = x[i] * alpha + beta;
            y[i] = r < 0.0f ? 0.0f : (r > 1.0f ? 1.0f : r);
        }
        break;
    case U_EXP: for (int64_t i = 0; i < n; i++) y[i] = fexp(x[i]); break;
    case U_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); break;
    case U_NEG: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;
    case U_ABS: for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]); break;
    case U_RECIPROCAL: for (int64_t i = 0; i < n; i++) y[i] = 1.0f / x[i]; break;
    case U_SQUARE: for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i]; break;
    case U_FLOOR: for (int64_t i = 0; i < n; i++) y[i] = floorf(x[i]); break;
    case U_CEIL: for (int64_t i = 0; i < n; i++) y[i] = ceilf(x[i]); break;
    case U_ROUND: for (int64_t i = 0; i < n; i++) y[i] = nearbyintf(x[i]); break;  /* half to even */
    }
}

typedef struct {
    const lnpu_step *s;
    const float *x;
    float *y;
    int64_t per;
} unary_ctx;

static void unary_task(const void *ctx, int64_t t) {
    const unary_ctx *cx = ctx;
    int64_t n = cx->s->p[0], lo = t * cx->per, hi = lo + cx->per < n ? lo + cx->per : n;
    if (lo < hi)
        unary_range(cx->x + lo, cx->y + lo, hi - lo, cx->s->p[1], cx->s->f[2], cx->s->f[3]);
}

/* unary: count, function; f[2] alpha, f[3] beta; slots x, y (may be the same memory) */
void unary(const lnpu_step *s, void **slots) {
    unary_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], 0};
    int64_t n = s->p[0], tasks = task_count(n * 2.0, n / 4096 > 1 ? n / 4096 : 1);
    cx.per = (per_task(n, tasks) + 15) / 16 * 16;
    parallel(unary_task, &cx, (n + cx.per - 1) / cx.per);
}

/* binary op codes (provider/npu/ops/elementwise.py BINARY_CODES) */
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN, B_POW, B_PRELU };

/* y[i] = op(a[i * sa], b[i * sb]) for i < n, clamped to [lo, hi] */
MULTIVERSION static void binary_row(const float *restrict a, int64_t sa, const float *restrict b,
                                    int64_t sb, float *y, int64_t n, int64_t op, float lo,
                                    float hi) {
#define ROW(EXPR)                                                                   \
    if (sa == 1 && sb == 1) {                                                       \
        for (int64_t i = 0; i < n; i++) { float u = a[i], v = b[i]; float r = EXPR; \
            r = r < lo ? lo : r; y[i] = r > hi ? hi : r; }                           \
    } else if (sb == 0) {                                                           \
        float v = b[0];                                                             \
        for (int64_t i = 0; i < n; i++) { float u = a[i * sa]; float r = EXPR;      \
            r = r < lo ? lo : r; y[i] = r > hi ? hi : r; }                           \
    } else {                                                                        \
        for (int64_t i = 0; i < n; i++) { float u = a[i * sa], v = b[i * sb];       \
            float r = EXPR; r = r < lo ? lo : r; y[i] = r > hi ? hi : r; }           \
    }
    switch (op) {
    case B_ADD: ROW(u + v) break;
    case B_SUB: ROW(u - v) break;
    case B_MUL: ROW(u * v) break;
    case B_DIV: ROW(u / v) break;
    case B_MAX: ROW(u != u || u > v ? u : v) break;
    case B_MIN: ROW(u != u || u < v ? u : v) break;
    case B_POW: ROW(powf(u, v)) break;
    case B_PRELU: ROW(u > 0.0f ? u : u * v) break;  /* v: the slope (a NaN x stays NaN) */
    }
#undef ROW
}

/* The same rows over integers (int32: T int32_t, U uint32_t; int64 likewise): add, sub and
 * mul wrap around as numpy's do (computed unsigned, so C never overflows a signed type);
 * max and min. No activation (the lowering gives integers none). */
#define INT_ROW(NAME, T, U)                                                                 \
    MULTIVERSION static void NAME(const T *restrict a, int64_t sa, const T *restrict b,     \
                                  int64_t sb, T *y, int64_t n, int64_t op) {                \
        for (int64_t i = 0; i < n; i++) {                                                   \
            T u = a[i * sa], v = b[i * sb];                                                 \
            switch (op) {                                                                   \
            case B_ADD: y[i] = (T)((U)u + (U)v); break;                                     \
            case B_SUB: y[i] = (T)((U)u - (U)v); break;                                     \
            case B_MUL: y[i] = (T)((U)u * (U)v); break;                                     \
            case B_MAX: y[i] = u > v ? u : v; break;                                        \
            default: y[i] = u < v ? u : v; break;                                           \
            }                                                                               \
        }                                                                                   \
    }
INT_ROW(binary_row_i32, int32_t, uint32_t)
INT_ROW(binary_row_i64, int64_t, uint64_t)
#undef INT_ROW


typedef struct {
    const lnpu_step *s;
    const char *a, *b;
    char *y;
    int64_t per, size;      /* units per task; element bytes */
    int64_t pieces, piece;  /* units per row and their length: rows are cut when few */
    int64_t units, inner;   /* units in all (rows x pieces); elements per row */
} binary_ctx;

/* binary: op, rank r (<= 6, dims merged), p[2..2+r) output dims, p[8..8+r) a's element
 * strides, p[14..14+r) b's (0 where broadcast), p[20] act, p[21] element type; slots a, b,
 * y (y may be a when a has the output's shape). A NaN passes the clamp as NaN (the numpy
 * kernels' clip). An activation other than a clamp runs on each row (or piece) once it is
 * written. */
static void binary_task(const void *ctx, int64_t t) {
    const binary_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t r = p[1], inner = cx->inner, lo = t * cx->per;
    int64_t hi = lo + cx->per < cx->units ? lo + cx->per : cx->units;
    float flo = cx->s->f[0], fhi = cx->s->f[1];
    for (int64_t u = lo; u < hi; u++) {
        int64_t row = u / cx->pieces, i0 = u % cx->pieces * cx->piece;
        int64_t n = inner - i0 < cx->piece ? inner - i0 : cx->piece;
        int64_t rest = row, sa = p[8 + r - 1], sb = p[14 + r - 1], oa = i0 * sa, ob = i0 * sb;
        for (int64_t d = r - 2; d >= 0; d--) {
            int64_t i = rest % p[2 + d];
            rest /= p[2 + d];
            oa += i * p[8 + d];
            ob += i * p[14 + d];
        }
        const char *a = cx->a + oa * cx->size, *b = cx->b + ob * cx->size;
        char *y = cx->y + (row * inner + i0) * cx->size;
        if (p[21] == ET_I32) {
            binary_row_i32((const int32_t *)a, sa, (const int32_t *)b, sb, (int32_t *)y, n, p[0]);
            continue;
        }
        if (p[21] == ET_I64) {
            binary_row_i64((const int64_t *)a, sa, (const int64_t *)b, sb, (int64_t *)y, n, p[0]);
            continue;
        }
        if (sa == 0 && sb != 0) {  /* keep the broadcast operand second: swap for + and * */
            if (p[0] == B_ADD || p[0] == B_MUL || p[0] == B_MAX || p[0] == B_MIN) {
                binary_row((const float *)b, sb, (const float *)a, sa, (float *)y, n, p[0],
                           flo, fhi);
                if (p[20] != ACT_CLAMP) epilogue((float *)y, n, 0.0f, NULL, act_of(cx->s, 20));
                continue;
            }
        }
        binary_row((const float *)a, sa, (const float *)b, sb, (float *)y, n, p[0], flo, fhi);
        if (p[20] != ACT_CLAMP) epilogue((float *)y, n, 0.0f, NULL, act_of(cx->s, 20));
    }
}

void binary(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t r = p[1], inner = p[2 + r - 1], rows = 1;
    for (int64_t d = 0; d < r - 1; d++) rows *= p[2 + d];
    binary_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], slots[s->slot[2]], 0,
                     element_bytes(p[21]), 1, 0, 0, inner};
    /* same-shape operands merge into one row: a detector's residual add of 16x256x256 ran
     * on one core; rows fewer than the tasks are cut in pieces of at least 4096 elements */
    int64_t tasks = task_count((double)rows * inner * 0.5, rows * (inner / 4096 > 1 ? inner / 4096 : 1));
    if (rows > 0 && tasks > rows) cx.pieces = (tasks + rows - 1) / rows;
    cx.piece = (inner + cx.pieces - 1) / cx.pieces;
    cx.units = rows * cx.pieces;
    cx.per = per_task(cx.units, tasks);
    parallel(binary_task, &cx, (cx.units + cx.per - 1) / cx.per);
}

/* layer_norm: rows, length, has gamma, has beta, per-row channels; f[0] epsilon; slots x,
 * gamma, beta, y. Gamma and beta go along the row, or with p[4] = C > 0 (instance norm:
 * a row per (image, channel)) one value per row, that of channel row % C. Mean and variance
 * accumulated in double (lane_sum: in one running sum, MiniLM's 256 x 384 rows took 124 us
 * a step), then rounded to float; y may be x. */
typedef struct {
    const lnpu_step *s;
    const float *x, *g, *b;
    float *y;
    int64_t per;
} norm_ctx;

MULTIVERSION static void norm_rows(const norm_ctx *cx, int64_t lo, int64_t hi) {
    int64_t len = cx->s->p[1], channels = cx->s->p[4];
    float eps = cx->s->f[0];
    for (int64_t r = lo; r < hi; r++) {
        const float *x = cx->x + r * len;
        float *y = cx->y + r * len;
        float mean = (float)(lane_sum(x, len, 0.0f, 0) / (double)len);
        double sq = lane_sum(x, len, mean, 1);
        /* the variance as float32 holds it (an overflow is inf, as onnxruntime's is) */
        float inv = 1.0f / sqrtf((float)(sq / (double)len) + eps);
        if (channels) {
            float g = cx->g[r % channels], b = cx->b[r % channels];
            for (int64_t i = 0; i < len; i++) y[i] = (x[i] - mean) * inv * g + b;
            continue;
        }
        for (int64_t i = 0; i < len; i++) {
            float v = (x[i] - mean) * inv;
            if (cx->g) v *= cx->g[i];
            if (cx->b) v += cx->b[i];
            y[i] = v;
        }
    }
}

static void norm_task(const void *ctx, int64_t t) {
    const norm_ctx *cx = ctx;
    int64_t rows = cx->s->p[0], lo = t * cx->per, hi = lo + cx->per < rows ? lo + cx->per : rows;
    if (lo < hi) norm_rows(cx, lo, hi);
}

void layer_norm(const lnpu_step *s, void **slots) {
    norm_ctx cx = {s, slots[s->slot[0]], s->slot[1] >= 0 ? slots[s->slot[1]] : NULL,
                   s->slot[2] >= 0 ? slots[s->slot[2]] : NULL, slots[s->slot[3]], 0};
    int64_t rows = s->p[0];
    int64_t tasks = task_count((double)rows * s->p[1] * 1.5, rows);
    cx.per = per_task(rows, tasks);
    parallel(norm_task, &cx, (rows + cx.per - 1) / cx.per);
}

/* ---- LRN across channels ----------------------------------------------------------------
 *
 * lrn: images, channels, positions per channel (the spatial size), radius; f: alpha (per
 * element: ONNX's alpha / size), bias, beta; slots x, y. y = x / (bias + alpha * the sum of
 * x^2 over channels c - radius .. c + radius)^beta, a chunk of LRN_CHUNK positions of one
 * image per task, the sums and scalings in the numpy kernel's order (no fused multiply-add).
 * The power: beta 0.75 (AlexNet, GoogLeNet, every LRN the model zoo has) as sqrt(w) *
 * sqrt(sqrt(w)), square roots that vectorize, within 2 ulp of powf; other betas powf. */
#define LRN_CHUNK 512

typedef struct {
    const lnpu_step *s;
    const float *x;
    float *y;
    int64_t chunks;  /* chunks of positions per image */
} lrn_ctx;

__attribute__((optimize("fp-contract=off"))) MULTIVERSION static void lrn_task(const void *ctx,
                                                                                 int64_t t) {
    const lrn_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t C = p[1], inner = p[2], r = p[3];
    float alpha = cx->s->f[0], bias = cx->s->f[1], beta = cx->s->f[2];
    int64_t image = t / cx->chunks, p0 = t % cx->chunks * LRN_CHUNK;
    int64_t n = inner - p0 < LRN_CHUNK ? inner - p0 : LRN_CHUNK;
    const float *x = cx->x + image * C * inner + p0;
    float *y = cx->y + image * C * inner + p0;
    float w[LRN_CHUNK];
    for (int64_t c = 0; c < C; c++) {
        for (int64_t i = 0; i < n; i++) w[i] = 0.0f;
        int64_t d0 = c - r < 0 ? 0 : c - r, d1 = c + r < C ? c + r : C - 1;
        for (int64_t d = d0; d <= d1; d++) {  /* the window's channels inside the image */
            const float *xd = x + d * inner;
            for (int64_t i = 0; i < n; i++) w[i] += xd[i] * xd[i];
        }
        const float *xc = x + c * inner;
        float *yc = y + c * inner;
        if (beta == 0.75f)
            for (int64_t i = 0; i < n; i++) {
                float v = w[i] * alpha + bias, root = sqrtf(v);
                yc[i] = xc[i] / (root * sqrtf(root));
            }
        else
            for (int64_t i = 0; i < n; i++) yc[i] = xc[i] / powf(w[i] * alpha + bias, beta);
    }
}

void lrn(const lnpu_step *s, void **slots) {
    int64_t images = s->p[0], inner = s->p[2];
    if (!images || !s->p[1] || !inner) return;
    lrn_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], (inner + LRN_CHUNK - 1) / LRN_CHUNK};
    parallel(lrn_task, &cx, images * cx.chunks);  /* a task: LRN_CHUNK positions, every channel */
}

/* ---- LpNormalization -----------------------------------------------------------------------
 *
 * lp_norm: outer, length, inner (the axis's view), p (1 or 2); slots x, y. Each line along
 * the axis divided by its L1 or L2 norm, summed in double; a zero norm gives 0 (not 0 / 0),
 * as onnxruntime's kernel does. A task takes whole outer blocks (every inner line of one
 * outer index): a line along an inner axis is read across the block, LP_LANES lines at a
 * time. */
#define LP_LANES 16

typedef struct {
    const lnpu_step *s;
    const float *x;
    float *y;
    int64_t per;
} lp_ctx;

MULTIVERSION static void lp_task(const void *ctx, int64_t t) {
    const lp_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t outer = p[0], n = p[1], inner = p[2], l2 = p[3] == 2;
    for (int64_t o = t * cx->per; o < (t + 1) * cx->per && o < outer; o++) {
        if (inner == 1 && l2) {  /* a contiguous line (an embedding): lane_sum's vector sums */
            const float *x = cx->x + o * n;
            float *y = cx->y + o * n, norm = (float)sqrt(lane_sum(x, n, 0.0f, 1));
            for (int64_t j = 0; j < n; j++) y[j] = norm == 0.0f ? 0.0f : x[j] / norm;
            continue;
        }
        for (int64_t i0 = 0; i0 < inner; i0 += LP_LANES) {
            int64_t lanes = inner - i0 < LP_LANES ? inner - i0 : LP_LANES;
            const float *x = cx->x + o * n * inner + i0;
            float *y = cx->y + o * n * inner + i0;
            double sum[LP_LANES] = {0};
            for (int64_t j = 0; j < n; j++)
                for (int64_t l = 0; l < lanes; l++) {
                    double v = x[j * inner + l];
                    sum[l] += l2 ? v * v : fabs(v);
                }
            float norm[LP_LANES];
            for (int64_t l = 0; l < lanes; l++) norm[l] = (float)(l2 ? sqrt(sum[l]) : sum[l]);
            for (int64_t j = 0; j < n; j++)
                for (int64_t l = 0; l < lanes; l++)
                    y[j * inner + l] = norm[l] == 0.0f ? 0.0f : x[j * inner + l] / norm[l];
        }
    }
}

void lp_norm(const lnpu_step *s, void **slots) {
    int64_t outer = s->p[0];
    if (!outer || !s->p[1] || !s->p[2]) return;
    lp_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]], 0};
    cx.per = per_task(outer, task_count((double)outer * s->p[1] * s->p[2] * 2.0, outer));
    parallel(lp_task, &cx, (outer + cx.per - 1) / cx.per);
}

/* ---- AddN: inputs of the output's shape summed in order -----------------------------------
 *
 * add_n: inputs (2..15), elements, type (ET_*); slots 0.. the inputs, 15 the output. Per
 * element ((x0 + x1) + x2) + ..., each sum in the element type (integers wrap, computed
 * unsigned): the numpy kernel's adds in its order, so the same bits. */
#define AN_CHUNK 16384

#define AN_RANGE(NAME, T, A)                                                                  \
    MULTIVERSION static void NAME(void **in, int64_t count, T *y, int64_t lo, int64_t hi) {   \
        const T *a = in[0], *b = in[1];                                                       \
        for (int64_t i = lo; i < hi; i++) y[i] = (T)((A)a[i] + (A)b[i]);                     \
        for (int64_t k = 2; k < count; k++) {                                                 \
            const T *x = in[k];                                                               \
            for (int64_t i = lo; i < hi; i++) y[i] = (T)((A)y[i] + (A)x[i]);                 \
        }                                                                                     \
    }
AN_RANGE(add_n_f32, float, float)
AN_RANGE(add_n_i32, int32_t, uint32_t)
AN_RANGE(add_n_i64, int64_t, uint64_t)
#undef AN_RANGE

typedef struct {
    const lnpu_step *s;
    void *in[MAX_SLOTS];
    void *y;
} add_n_ctx;

static void add_n_task(const void *ctx, int64_t t) {
    const add_n_ctx *cx = ctx;
    const int64_t *p = cx->s->p;
    int64_t lo = t * AN_CHUNK, hi = lo + AN_CHUNK < p[1] ? lo + AN_CHUNK : p[1];
    void **in = (void **)cx->in;
    if (p[2] == ET_F32) add_n_f32(in, p[0], cx->y, lo, hi);
    else if (p[2] == ET_I32) add_n_i32(in, p[0], cx->y, lo, hi);
    else add_n_i64(in, p[0], cx->y, lo, hi);
}

void add_n(const lnpu_step *s, void **slots) {
    add_n_ctx cx = {.s = s, .y = slots[s->slot[MAX_SLOTS - 1]]};
    for (int64_t k = 0; k < s->p[0]; k++) cx.in[k] = slots[s->slot[k]];
    parallel(add_n_task, &cx, (s->p[1] + AN_CHUNK - 1) / AN_CHUNK);
}
