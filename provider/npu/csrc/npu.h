/* What every source file of the reference NPU's compiled library shares: the step struct
 * Python lowers Program steps into (provider/npu/ops/<family>.py), parameter layouts, the
 * cores (pool.c), per-thread scratch, the fused epilogue and inlined index helpers.
 * One file per kernel family: conv.c (im2col + GEMM), direct.c, deconv.c, dwconv.c (depthwise),
 * window.c (pooling and depthwise planes), layout.c, dense.c; run.c holds the entry points.
 */
#ifndef LITENPU_NPU_H
#define LITENPU_NPU_H
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))

/* Hot loops are compiled for AVX-512 and AVX2 as well as the baseline, picked at load time
 * (GCC/clang function multiversioning; needs ifunc, so Linux x86-64 only). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

enum { OP_CONV = 1, OP_DWCONV, OP_MAXPOOL, OP_AVGPOOL, OP_GLOBALPOOL, OP_CONCAT, OP_TRANSPOSE,
       OP_MATMUL, OP_ACT, OP_SOFTMAX, OP_COUNT };
/* the steps of real models beyond CNNs (elementwise.c, dense.c, rnn.c, reduce.c): codes 11-39 */
enum { OP_UNARY = 11, OP_BINARY, OP_LAYERNORM, OP_BMATMUL, OP_RNN, OP_REDUCE, OP_PAD, OP_CAST, OP_SPLIT,
       OP_DECONV, OP_GATHER, OP_COMPARE, OP_WHERE, OP_GATHER_ND, OP_RESIZE_LINEAR, OP_ARG, OP_TOPK, OP_CUMSUM, OP_ADD_N,
       OP_RESIZE_CUBIC, OP_GATHER_ELEMENTS, OP_TRIANGLE, OP_LRN, OP_LP_NORM,
       OP_SCATTER_ND, OP_SCATTER_ELEMENTS };
/* Integer kernels (qconv.c, qeltwise.c): codes 40-69. */
enum { OP_QCONV = 40, OP_QDENSE = 41, OP_QUANTIZE = 42, OP_DEQUANTIZE = 43, OP_QLUT = 44,
       OP_QADD = 45, OP_QCONCAT = 46, OP_QDWCONV = 47, OP_QMAXPOOL = 48, OP_QMUL = 49,
       OP_QGLOBALPOOL = 50, OP_QRESIZE = 51, OP_QSOFTMAX = 52, OP_QMATMUL = 53 };

#define MAX_SLOTS 16
#define MAX_PARAMS 32

/* One step. Slots are indices into the run's address table (-1: absent); p and f hold the
 * op's parameters, laid out as the P_* / F_* names of each op below say. */
typedef struct {
    int64_t op;
    int64_t slot[MAX_SLOTS];
    int64_t p[MAX_PARAMS];
    float f[4];
} lnpu_step;

/* Fused activation of an output: clamp to [lo, hi] (none: -inf..inf, RELU: 0..inf, RELU6:
 * 0..6, HARD_TANH: min..max), leaky (x < 0: alpha * x), swish (x * sigmoid(x): SiLU,
 * the detectors' activation), sigmoid (a detector's objectness and class heads), hard
 * swish (x * relu6(x + 3) / 6, as the numpy kernel rounds it: the OCR models' MobileNets),
 * tanh (BERT's pooler), softplus, softsign, abs, ELU (x < 0: alpha (e^x - 1)),
 * ThresholdedRelu (x > alpha: x, else 0) or exact GELU (a transformer's feed-forward layer);
 * ops/native_builder.py FINISH and FINISH_ALPHA. */
enum { ACT_CLAMP = 0, ACT_LEAKY = 1, ACT_SWISH = 2, ACT_SIGMOID = 3, ACT_HSWISH = 4, ACT_TANH = 5,
       ACT_SOFTPLUS = 6, ACT_SOFTSIGN = 7, ACT_ABS = 8, ACT_ELU = 9, ACT_THRESHOLD = 10,
       ACT_GELU = 11 };

/* ---- GEMM ---------------------------------------------------------------------------- */

typedef void (*sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k,
                         float alpha, const float *a, int lda, const float *b, int ldb,
                         float beta, float *c, int ldc);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

/* OpenBLAS's sgemm (set by lnpu_set_sgemm), called so that fork() never copies a process
 * with a thread inside it (forksafe.c); blas_ready() is 0 until it is set. */
void sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
           const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
void blas_set(sgemm_fn fn);
int blas_ready(void);

/* The larger of a and b, NaN if either is (like numpy's maximum and the numpy kernels: a
 * NaN in a pooling window must not vanish). Written as a NaN test then a plain max, which
 * GCC vectorizes, and compiles branch-free in the scalar tail of a loop, where a || form
 * took branches that mispredict on real data (pool_plane 2x slower). */
static inline float max_nan(float a, float b) { return a != a ? a : (a > b ? a : b); }

/* Sum of x[i], or with `squares` of (x[i] - mean)^2, for i < n, in double: in LANE_SUMS
 * partial sums that vectorize (one running double sum is a chain of dependent adds the
 * compiler may not reorder, 4 cycles an element), then the tail. layer_norm's rows and
 * reduce's lines take it. */
#define LANE_SUMS 16
static inline __attribute__((always_inline)) double lane_sum(const float *x, int64_t n,
                                                             float mean, int squares) {
    double lane[LANE_SUMS] = {0};
    int64_t whole = n / LANE_SUMS * LANE_SUMS;
    for (int64_t i = 0; i < whole; i += LANE_SUMS)
        for (int l = 0; l < LANE_SUMS; l++) {
            double v = squares ? (double)(x[i + l] - mean) : (double)x[i + l];
            lane[l] += squares ? v * v : v;
        }
    double sum = 0.0;
    for (int l = 0; l < LANE_SUMS; l++) sum += lane[l];
    for (int64_t i = whole; i < n; i++) {
        double v = squares ? (double)(x[i] - mean) : (double)x[i];
        sum += squares ? v * v : v;
    }
    return sum;
}

/* e^x's pieces, shared by exp_clamped and vec16.h's vector form (plain operators and float
 * constants: each expression serves a float and a vector of them alike). n = round(x / ln2)
 * is read from t = x / ln2 + EXP_ROUND_BIAS (1.5 * 2^23 + 127), where the addition rounds to
 * an integer, and t's low bits shifted by 23 are 2^n's bit pattern (no rint and no
 * conversion: a standalone SiLU of 692k values on one core, builds alternating, 146-151 ->
 * 126-133 us); x - n ln2 takes ln2 in two parts, and EXP_POLY(r) is e^r on [-ln2/2, ln2/2]
 * (a degree-6 polynomial in the form r^2 P(r) + r + 1). */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_ROUND_BIAS 12583039.0f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_POLY(r)                                                                          \
    ((((((1.9875691500e-4f * (r) + 1.3981999507e-3f) * (r) + 8.3334519073e-3f) * (r)          \
        + 4.1665795894e-2f) * (r) + 1.6666665459e-1f) * (r) + 5.0000001201e-1f) * (r) * (r)   \
     + (r) + 1.0f)

/* e^x for x in [-87.3, 88.7] (callers clamp), within 2 ulp; a normal float. Inlined (no
 * libm call) so that loops over it vectorize. */
static inline float exp_clamped(float x) {
    union { float f; int32_t i; } t = {x * EXP_LOG2E + EXP_ROUND_BIAS}, scale;
    float n = t.f - EXP_ROUND_BIAS;
    float r = x - n * EXP_LN2_HI;
    r -= n * EXP_LN2_LO;
    scale.i = t.i << 23;
    return EXP_POLY(r) * scale.f;
}

/* e^v in float (exp_clamped): inf past 88.72, 0 below float's normal range (< 1.2e-38),
 * NaN for NaN. */
static inline float fexp(float v) {
    float e = exp_clamped(v < -87.3f ? -87.3f : (v > 88.7f ? 88.7f : v));
    return v > 88.7228f ? INFINITY : (v < -87.3f ? 0.0f : e);
}

/* sigmoid 1 / (1 + e^-x), and tanh through exp (a series near 0, where 1 - 2 / (e^2x + 1)
 * would cancel). The sigmoid clamps -x to [-87.3, 87], where e^-x is a finite normal float,
 * and needs one of fexp's three selects: 0 below -87 (where the exact sigmoid is under
 * 1.7e-38; fexp's form gave 0 only past -88.72), so that a SiLU of -inf is NaN as in
 * onnxruntime. Alternating in one process on one AVX2 core, a SiLU of 260k values 0.83 ->
 * 0.67 ns per value. */
static inline float fsigmoid(float x) {
    float z = -x;
    z = z < -87.3f ? -87.3f : z;
    z = z > 87.0f ? 87.0f : z;
    float s = 1.0f / (1.0f + exp_clamped(z));
    return x < -87.0f ? 0.0f : s;
}

static inline float ftanh(float x) {
    float a = fabsf(x);
    if (a < 0.2f) {
        float a2 = a * a;
        float t = a + a * a2 * (-1.0f / 3 + a2 * (2.0f / 15 + a2 * (-17.0f / 315)));
        return x < 0 ? -t : t;
    }
    float t = 1.0f - 2.0f / (fexp(2.0f * a) + 1.0f);
    return x < 0 ? -t : t;
}

/* log(1 + y) for y in [0, 1]: 2 atanh(s), s = y / (2 + y) in [0, 1/3], by its odd series to
 * s^15 (truncation under 1e-9; exact in relative terms for tiny y, which 1 + y would lose). */
static inline float flog1p_unit(float y) {
    float s = y / (2.0f + y), s2 = s * s, p = 1.0f / 15;
    for (int k = 13; k >= 1; k -= 2) p = p * s2 + 1.0f / (float)k;  /* unrolled: constants */
    return 2.0f * s * p;
}

/* softplus log(1 + e^x) as max(x, 0) + log1p(e^-|x|) (numpy's logaddexp(x, 0)): no
 * overflow, +-inf to inf and 0, NaN to NaN. */
static inline float fsoftplus(float x) {
    return (x > 0.0f ? x : 0.0f) + flog1p_unit(fexp(-fabsf(x)));
}

/* e^x - 1 for x <= 0 (ELU's negative side): the Taylor series to x^8 where |x| < 0.5 (e^x - 1
 * would cancel there), x (1 + x/2 (1 + x/3 (... (1 + x/8)))), else through fexp. */
static inline float fexpm1_neg(float x) {
    float p = 1.0f;
    for (int k = 8; k >= 2; k--) p = 1.0f + x * p * (1.0f / (float)k);  /* unrolled */
    return fabsf(x) < 0.5f ? x * p : fexp(x) - 1.0f;
}

/* erfc(z) for z >= 0 (NaN for NaN) by the numpy kernel's Chebyshev fit (|error| <= 1.2e-7),
 * 0 past 9 (erfc(9) < 1e-36): z taken as 9 there keeps exp_clamped's argument in range. */
static inline float ferfc_nonneg(float z) {
    int far = z > 9.0f;
    z = far ? 9.0f : z;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return far ? 0.0f : t * exp_clamped(p - z * z);
}

/* GELU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, through e = erfc(|x| / sqrt 2): Phi is
 * 1 - e / 2 for x >= 0 and e / 2 below, where 1 + erf would cancel. Written value by value
 * for loops that vectorize (finish, the unary op). */
static inline float fgelu(float x) {
    float e = ferfc_nonneg(fabsf(x) * 0.70710678118654752f);
    return x * (x >= 0.0f ? 1.0f - 0.5f * e : 0.5f * e);
}

/* Element types of the kernels that take more than float32 (binary, AddN, ArgMax/ArgMin,
 * TopK, CumSum), and of index outputs: provider/npu/ops/native_builder.py ELEMENT_TYPES and
 * INDEX_TYPES. */
enum { ET_F32, ET_I32, ET_I64 };
enum { IT_I32, IT_I64 };
static inline int64_t element_bytes(int64_t type) { return type == ET_I64 ? 8 : 4; }

/* ---- cores (pool.c) ------------------------------------------------------------------ */

/* Eight floats as one value (GCC/clang vector extensions), loaded from and stored to any float
 * address: an AVX2 register, and the half of a 16-float block that AVX2 keeps in registers
 * where GCC lowers 16-float types through the stack. */
typedef float vec8f __attribute__((vector_size(8 * sizeof(float)), aligned(4)));

typedef void (*task_fn)(const void *ctx, int64_t task);
void parallel(task_fn fn, const void *ctx, int64_t tasks);  /* fn(ctx, t) for every t, on every core */
int cores(void);                          /* cores of the run in progress on this thread */
int worker_index(void);                   /* 0 on a calling thread, 1.. on the pool's workers */
int64_t task_count(double ns, int64_t limit);  /* tasks worth a kernel of ~ns on one core */
int64_t per_task(int64_t items, int64_t tasks);  /* items per task, at least 1 */
long now_ns(void);

/* A kernel that refuses its input (an index outside its axis) records why with kernel_fail
 * and returns KERNEL_REFUSED; lnpu_run stops there and returns it, and the caller reads the
 * message with lnpu_kernel_error (this thread's, until its next refusal). */
#define KERNEL_REFUSED (-3)
int kernel_fail(const char *format, ...) __attribute__((format(printf, 1, 2)));
API const char *lnpu_kernel_error(void);
void run_begin(int threads);              /* lnpu_run's start and end on this thread */
void run_end(void);

/* Rates for task_count's estimates. */
#define GEMM_MACS_PER_NS 80.0   /* fp32 GEMM on one AVX-512 core */
#define COPY_FLOATS_PER_NS 4.0  /* short strided copies (im2col) */
#define COPY_BYTES_PER_NS 12.0  /* memcpy of long blocks (concat, split, transposes) */

/* Per-thread scratch (phase and window planes; a conv's caller keeps its phases there while
 * the conv's tasks run, so those tasks use none). NULL when out of memory. */
float *thread_scratch(int64_t floats);

/* ---- shared index helpers --------------------------------------------------------------- */

/* [*lo, *hi): the columns c < limit whose input column c * stride + off lies in [0, w). */
static inline void valid_columns(int64_t off, int64_t stride, int64_t w, int64_t limit,
                                 int64_t *lo, int64_t *hi) {
    *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
    *hi = w - off <= 0 ? 0 : (w - off + stride - 1) / stride;
    if (*hi > limit) *hi = limit;
    if (*lo > *hi) *lo = *hi;
}

/* [*r0, *r1): the rows r < hq of row phase ph (stride sh, top padding pt) that hold input:
 * phase row r reads input row r * sh + ph - pt, which must lie in [0, h). When
 * h - 1 - ph + pt < 0 no row does (C's division, rounding toward 0, would count row 0 and
 * read past the input: a 1-row or empty image in a stride-2 phase). */
static inline void phase_rows(int64_t h, int64_t hq, int64_t sh, int64_t ph, int64_t pt,
                              int64_t *r0, int64_t *r1) {
    int64_t last = h - 1 - ph + pt;
    *r0 = pt - ph > 0 ? (pt - ph + sh - 1) / sh : 0;
    *r1 = last < 0 ? 0 : last / sh + 1;
    if (*r1 > hq) *r1 = hq;
    if (*r0 > *r1) *r0 = *r1;
}

/* One phase plane of a channel: q[r][c] = x[r*sh + ph - pt][c*sw + pw - pl] for r < hq,
 * c < wq, zero outside the input. Inlined into the vectorized callers; a constant stride
 * of 2 vectorizes (shuffles) where a run-time stride would not. Stride 1 zeroes the plane
 * in one call and copies each row's run: short rows' per-row zeroing and copy loops cost a
 * 3x3 conv of 32x14x14 7% and a 16x32x32 depthwise plane 20% of their time (alternating
 * in one process, one AVX2 core, 12 of 12 rounds; 112- and 128-wide planes unchanged). */
static inline __attribute__((always_inline)) void fill_phase(
        float *restrict q, int64_t hq, int64_t wq, const float *restrict x, int64_t h,
        int64_t w, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t pt, int64_t pl) {
    int64_t lo, hi, off = pw - pl;
    valid_columns(off, sw, w, wq, &lo, &hi);
    int64_t r0, r1;
    phase_rows(h, hq, sh, ph, pt, &r0, &r1);
    if (sw == 1) {
        memset(q, 0, (size_t)(hq * wq) * sizeof(float));
        for (int64_t r = r0; r < r1; r++)
            memcpy(q + r * wq + lo, x + (r * sh + ph - pt) * w + off + lo,
                   (size_t)(hi - lo) * sizeof(float));
        return;
    }
    for (int64_t k = 0; k < r0 * wq; k++) q[k] = 0.0f;
    for (int64_t k = r1 * wq; k < hq * wq; k++) q[k] = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const float *in = x + (r * sh + ph - pt) * w + off;
        float *row = q + r * wq;
        for (int64_t c = 0; c < lo; c++) row[c] = 0.0f;
        if (sw == 2) {
            for (int64_t c = lo; c < hi; c++) row[c] = in[2 * c];
        } else {
            for (int64_t c = lo; c < hi; c++) row[c] = in[c * sw];
        }
        for (int64_t c = hi; c < wq; c++) row[c] = 0.0f;
    }
}

/* Both column phases of a stride-2 row phase at once: q0 and q1 as fill_phase(..., sw = 2,
 * pw = 0 / 1) makes them, each input row read once (in whole vectors, split into evens and
 * odds) instead of once per phase. Alternating in one process on one AVX2 core, time over
 * the two passes': 3x3/2 convs 0.97-1.00 on 64x64 to 1024x1024 inputs, 0.85 on 13x13, 0.92
 * on 7x6; a 1x1/2 conv 64 -> 128 on 28x28 (im2col) 0.90; the yolox detector 0.985. */
static inline __attribute__((always_inline)) void fill_phase_pair(
        float *restrict q0, float *restrict q1, int64_t hq, int64_t wq, const float *restrict x,
        int64_t h, int64_t w, int64_t sh, int64_t ph, int64_t pt, int64_t pl) {
    int64_t lo0, hi0, lo1, hi1;
    valid_columns(-pl, 2, w, wq, &lo0, &hi0);
    valid_columns(1 - pl, 2, w, wq, &lo1, &hi1);
    int64_t r0, r1;
    phase_rows(h, hq, sh, ph, pt, &r0, &r1);
    for (int64_t k = 0; k < r0 * wq; k++) q0[k] = q1[k] = 0.0f;
    for (int64_t k = r1 * wq; k < hq * wq; k++) q0[k] = q1[k] = 0.0f;
    int64_t lo = lo0 > lo1 ? lo0 : lo1, hi = hi0 < hi1 ? hi0 : hi1;  /* both phases valid */
    if (hi < lo) hi = lo;
    for (int64_t r = r0; r < r1; r++) {
        const float *in = x + (r * sh + ph - pt) * w - pl;
        float *a = q0 + r * wq, *b = q1 + r * wq;
        for (int64_t c = 0; c < wq; c++) {  /* the edges: zero, or one phase valid */
            if (c == lo) c = hi;
            if (c >= wq) break;
            a[c] = c >= lo0 && c < hi0 ? in[2 * c] : 0.0f;
            b[c] = c >= lo1 && c < hi1 ? in[2 * c + 1] : 0.0f;
        }
        int64_t c = lo;
        for (; c + 8 <= hi; c += 8) {  /* sixteen floats into eight evens and eight odds */
            vec8f u = *(const vec8f *)(in + 2 * c), v = *(const vec8f *)(in + 2 * c + 8);
            *(vec8f *)(a + c) = __builtin_shufflevector(u, v, 0, 2, 4, 6, 8, 10, 12, 14);
            *(vec8f *)(b + c) = __builtin_shufflevector(u, v, 1, 3, 5, 7, 9, 11, 13, 15);
        }
        for (; c < hi; c++) {
            a[c] = in[2 * c];
            b[c] = in[2 * c + 1];
        }
    }
}

/* The sw column phases of row phase ph, `plane` floats apart from q on: the pair at once
 * where sw is 2, else one by one. */
static inline __attribute__((always_inline)) void fill_row_phase(
        float *restrict q, int64_t plane, int64_t hq, int64_t wq, const float *restrict x,
        int64_t h, int64_t w, int64_t sh, int64_t sw, int64_t ph, int64_t pt, int64_t pl) {
    if (sw == 2) {
        fill_phase_pair(q, q + plane, hq, wq, x, h, w, sh, ph, pt, pl);
        return;
    }
    for (int64_t pw = 0; pw < sw; pw++) fill_phase(q + pw * plane, hq, wq, x, h, w, sh, sw, ph, pw, pt, pl);
}

/* ---- integer codes ---------------------------------------------------------------------- */

/* Round half to even in float32: adding and subtracting 1.5 * 2^23 does it exactly for
 * |v| < 2^22 (callers clamp first). */
static inline float rne(float v) { return (v + 12582912.0f) - 12582912.0f; }

/* The code of a requantized value f (already scaled to output steps): clamped to [lo, hi]
 * (the code range minus the zero point zy), rounded half to even, plus zy; an int8 code as
 * its two's complement in the low byte. f is never NaN here (it comes from integer sums). */
static inline int32_t code_of(float f, float lo, float hi, int32_t zy) {
    f = f < lo ? lo : f;
    f = f > hi ? hi : f;
    return (int32_t)rne(f) + zy;
}

/* ---- fused epilogue -------------------------------------------------------------------- */

typedef struct {
    int kind;
    float lo, hi, alpha;
} act_t;

static inline act_t act_of(const lnpu_step *s, int at) {
    act_t a = {(int)s->p[at], s->f[0], s->f[1], s->f[2]};
    return a;
}

/* relu6(v + 3) / 6, rounded as the numpy kernel does (times 1/6) */
static inline float hswish_gate(float v) {
    float r = v + 3.0f;
    r = r < 0.0f ? 0.0f : (r > 6.0f ? 6.0f : r);
    return r * (1.0f / 6.0f);
}

/* v clamped to [lo, hi]: lo where v < lo, hi where v > hi (a NaN stays NaN). */
static inline float fclamp(float v, float lo, float hi) {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* act(v) for one value (loops that must vectorize use finish). */
static inline float act_apply(float v, act_t act) {
    if (act.kind == ACT_LEAKY) return v < 0.0f ? v * act.alpha : v;
    if (act.kind == ACT_SWISH) return v * fsigmoid(v);
    if (act.kind == ACT_SIGMOID) return fsigmoid(v);
    if (act.kind == ACT_HSWISH) return v * hswish_gate(v);
    if (act.kind == ACT_TANH) return ftanh(v);
    if (act.kind == ACT_SOFTPLUS) return fsoftplus(v);
    if (act.kind == ACT_SOFTSIGN) return v / (1.0f + fabsf(v));
    if (act.kind == ACT_ABS) return fabsf(v);
    if (act.kind == ACT_ELU) return v < 0.0f ? act.alpha * fexpm1_neg(v) : v;
    if (act.kind == ACT_THRESHOLD) return v > act.alpha ? v : 0.0f;
    if (act.kind == ACT_GELU) return fgelu(v);
    return fclamp(v, act.lo, act.hi);
}

/* finish's two loops for one activation EXPR of v (the sum): with the residual and without
 * (the test outside the loop, see finish). */
#define FINISH_LOOPS(EXPR)                                                                   \
    do {                                                                                     \
        if (res) {                                                                           \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                           \
                float v = x[i] + bias + res[i];                                              \
                y[i] = (EXPR);                                                               \
            }                                                                                \
        } else {                                                                             \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                           \
                float v = x[i] + bias;                                                       \
                y[i] = (EXPR);                                                               \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* y[i] = act(x[i] + bias [+ res[i]]) for i < n, in one pass; y may be x (ivdep: element i
 * reads only index i, so GCC need not test x and y for overlap, a test that failed for
 * every in-place epilogue and sent it to the scalar copy of the loop). */
static inline __attribute__((always_inline)) void finish(
        float *y, const float *x, int64_t n, float bias, const float *res, act_t act) {
    float lo = act.lo, hi = act.hi, alpha = act.alpha;
    /* one loop per case, the residual's test outside it (FINISH_LOOPS): a conditional load
     * inside kept the swish loop scalar (8x slower) */
    if (act.kind == ACT_LEAKY) {
        FINISH_LOOPS(v < 0.0f ? v * alpha : v);
    } else if (act.kind == ACT_SWISH) {
        FINISH_LOOPS(v * fsigmoid(v));
    } else if (act.kind == ACT_SIGMOID) {
        FINISH_LOOPS(fsigmoid(v));
    } else if (act.kind == ACT_HSWISH) {
        FINISH_LOOPS(v * hswish_gate(v));
    } else if (act.kind == ACT_TANH) {
        FINISH_LOOPS(ftanh(v));
    } else if (act.kind == ACT_SOFTPLUS) {
        FINISH_LOOPS(fsoftplus(v));
    } else if (act.kind == ACT_SOFTSIGN) {
        FINISH_LOOPS(v / (1.0f + fabsf(v)));
    } else if (act.kind == ACT_ABS) {
        FINISH_LOOPS(fabsf(v));
    } else if (act.kind == ACT_ELU) {
        FINISH_LOOPS(v < 0.0f ? alpha * fexpm1_neg(v) : v);
    } else if (act.kind == ACT_THRESHOLD) {
        FINISH_LOOPS(v > alpha ? v : 0.0f);
    } else if (act.kind == ACT_GELU) {
        FINISH_LOOPS(fgelu(v));
    } else {
        FINISH_LOOPS(fclamp(v, lo, hi));
    }
}

/* y[i] = act(y[i] + bias [+ res[i]]) for i < n, in one pass (for callers that are not
 * compiled per instruction set themselves; the others inline finish). */
void epilogue(float *y, int64_t n, float bias, const float *res, act_t act);

/* y[r * ld + i] = act(y[r * ld + i] + bias[i]) for r < rows, i < n: the epilogue of a
 * channels-last block (a bias per column). bias may be NULL. */
void epilogue_rows(float *y, int64_t rows, int64_t ld, int64_t n, const float *bias, act_t act);

/* ---- kernels (one file per family) ----------------------------------------------------- */

/* conv / depthwise parameters. C_YCL (a GEMM conv's output), C_XCL (a depthwise conv's
 * input): stored channels last, (N, H, W, C) instead of (N, C, H, W). An arena tensor passed
 * from a GEMM conv to depthwise convs goes so (native_steps decides which): the depthwise
 * kernel wants channels last, and the GEMM writes it at no cost. */
enum { C_N, C_C, C_H, C_W, C_O, C_OH, C_OW, C_G, C_KH, C_KW, C_SH, C_SW, C_DH, C_DW, C_PT, C_PL,
       C_ACT, C_IM2COL, C_XCL, C_YCL, C_DIRECT };
/* C_DIRECT: which kernel and weight order (ops/conv_weights.py): 0 im2col + GEMM */
enum { CONV_DIRECT = 1, CONV_BLOCKED = 2 };
/* conv slots */
enum { S_X, S_W, S_BIAS, S_RES, S_Y, S_COLS };

int64_t vector_width(void);  /* run.c: 16 (AVX-512) or 8 floats, for kernels with both widths */
int conv(const lnpu_step *s, void **slots);          /* conv.c: im2col + GEMM, or direct */
int direct_conv(const lnpu_step *s, void **slots);   /* direct.c */
int blocked_conv(const lnpu_step *s, void **slots);  /* blocked.c */
int dwconv(const lnpu_step *s, void **slots);        /* dwconv.c */
void deconv(const lnpu_step *s, void **slots);       /* deconv.c */
int pool2d(const lnpu_step *s, void **slots, int max);
void global_pool(const lnpu_step *s, void **slots);
void concat(const lnpu_step *s, void **slots);       /* layout.c */
void transpose(const lnpu_step *s, void **slots);
/* layout.c: one 16 x 16 block transposed in registers (x86 with AVX-512 at run time), and
 * one 8 x 8 block (x86 with AVX2: transpose8_ok() says whether this CPU has it) */
#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_TRANSPOSE16 1
void transpose16(const float *src, int64_t lds, float *dst, int64_t ldd, int rows, int cols);
void transpose8(const float *src, int64_t lds, float *dst, int64_t ldd, int rows, int cols);
int transpose8_ok(void);
#else
#define HAVE_TRANSPOSE16 0
#endif
void pad(const lnpu_step *s, void **slots);
void cast(const lnpu_step *s, void **slots);
void split_axis(const lnpu_step *s, void **slots);
int gather(const lnpu_step *s, void **slots);       /* KERNEL_REFUSED: an index out of range */
int gather_nd(const lnpu_step *s, void **slots);    /* likewise */
int matmul(const lnpu_step *s, void **slots);        /* dense.c; -1: no host scratch */
/* rowgemm.c: Y = A B (+ bias, activation) for few rows of A, B row-major when
 * row_gemm_takes (AVX-512, B not transposed, 2 <= M <= ROW_GEMM_MAX_M, K > 0, B of at most
 * ROW_GEMM_MAX_B floats), or `packed` at compile time in panels of ROW_GEMM_PANEL columns
 * (ops/matmul.py: (panels, K, ROW_GEMM_PANEL), zero-padded; any CPU); -1: no host scratch */
#define ROW_GEMM_PANEL 48
#ifndef ROW_GEMM_MAX_M
#define ROW_GEMM_MAX_M 32
#endif
#ifndef ROW_GEMM_MAX_B
#define ROW_GEMM_MAX_B (1L << 20)
#endif
int row_gemm_takes(int64_t M, int64_t N, int64_t K, int64_t trans);
int row_gemm(int64_t M, int64_t N, int64_t K, const float *a, const float *b, const float *bias,
             float *y, act_t act, int packed);
/* Y (M x N) = A^T B (+ bias along rows, activation) with A (K x M) read in place, row
 * stride lda (a 1x1 conv's input planes: Y is its channels-last output), B = W^T of a (N x K)
 * W; AVX2 or AVX-512 and at least ROW_GEMM_T_MIN_M rows (row_gemm_t_takes); -1: no host
 * scratch */
#ifndef ROW_GEMM_T_MIN_M
#define ROW_GEMM_T_MIN_M 64
#endif
int row_gemm_t_takes(int64_t M);
int row_gemm_t(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda, const float *w,
               const float *bias, float *y, act_t act);
void activation(const lnpu_step *s, void **slots);
void softmax(const lnpu_step *s, void **slots);
void bmatmul(const lnpu_step *s, void **slots);
void unary(const lnpu_step *s, void **slots);        /* elementwise.c */
void binary(const lnpu_step *s, void **slots);
void layer_norm(const lnpu_step *s, void **slots);
void compare(const lnpu_step *s, void **slots);      /* logic.c */
void where(const lnpu_step *s, void **slots);
int rnn(const lnpu_step *s, void **slots);           /* rnn.c */
void reduce(const lnpu_step *s, void **slots);       /* reduce.c */

/* Integer conv parameters (qconv.c): geometry as C_*, then the packed GEMM's K / 4 per
 * group, the unsigned input zero point (the padding code), 0x80 to flip int8 input codes to
 * unsigned, the output zero point and its clamp [lo, hi] (codes), and 1 for the shifted
 * stride-1 form (padded planes, each tap a contiguous slice; see qconv.c). */
enum { Q_N, Q_C, Q_H, Q_W, Q_O, Q_OH, Q_OW, Q_G, Q_KH, Q_KW, Q_SH, Q_SW, Q_DH, Q_DW, Q_PT, Q_PL,
       Q_KG, Q_ZX, Q_XFLIP, Q_ZY, Q_LO, Q_HI, Q_SHIFTED };
/* Integer dense parameters: rows, K, output channels, K / 4, flip, zy, lo, hi. */
enum { D_ROWS, D_K, D_O, D_KG, D_XFLIP, D_ZY, D_LO, D_HI };
/* Integer conv / dense slots: codes, packed weights, folded bias (int32), multipliers
 * (float64 holding float32 values), output codes, byte scratch. */
enum { QS_X, QS_W, QS_BIAS, QS_MULT, QS_Y, QS_COLS };
int qconv(const lnpu_step *s, void **slots);  /* -1: no host scratch */
int int8_vbmi(void);  /* qconv.c: code tables may use AVX-512 VBMI */
void qdense(const lnpu_step *s, void **slots);
int qdwconv(const lnpu_step *s, void **slots);  /* depthwise; -1: no host scratch */
void quantize(const lnpu_step *s, void **slots);     /* qeltwise.c */
void dequantize(const lnpu_step *s, void **slots);
void qlut(const lnpu_step *s, void **slots);
void qadd(const lnpu_step *s, void **slots);
int qsoftmax(const lnpu_step *s, void **slots);   /* qsoftmax.c; -1: no host scratch */
int qmatmul(const lnpu_step *s, void **slots);    /* qmatmul.c; -1: no host scratch */
void qmul(const lnpu_step *s, void **slots);
void qconcat(const lnpu_step *s, void **slots);
int qmaxpool(const lnpu_step *s, void **slots);  /* -1: no host scratch */
void qglobalpool(const lnpu_step *s, void **slots);
void qresize(const lnpu_step *s, void **slots);
int resize_linear(const lnpu_step *s, void **slots);  /* resize.c */
int resize_cubic(const lnpu_step *s, void **slots);   /* resize.c */
int gather_elements(const lnpu_step *s, void **slots); /* layout.c */
int scatter_nd(const lnpu_step *s, void **slots);      /* layout.c: KERNEL_REFUSED likewise */
int scatter_elements(const lnpu_step *s, void **slots); /* layout.c: likewise */
void triangle(const lnpu_step *s, void **slots);       /* layout.c */
void lrn(const lnpu_step *s, void **slots);            /* elementwise.c */
void lp_norm(const lnpu_step *s, void **slots);        /* elementwise.c */
void argreduce(const lnpu_step *s, void **slots);   /* reduce.c */
int topk(const lnpu_step *s, void **slots);         /* topk.c */
void cumsum(const lnpu_step *s, void **slots);      /* cumsum.c */
void add_n(const lnpu_step *s, void **slots);       /* elementwise.c */

#endif
