/* Integer elementwise kernels (provider/npu/ops/quant.py and quant_eltwise.py lower to
 * them): quantize (float32 -> codes), dequantize (codes -> float32), the 256-entry table
 * (activations, requantizing copies), the quantized Add of two same-shaped tensors and
 * the joining of code tensors along an axis (Concat), each over elements split across the
 * NPU's cores. Arithmetic as onnxruntime's (QuantizeLinear divides by the scale; round
 * half to even; saturate), as the numpy kernels compute it.
 */
#include "npu.h"

#define ELEMENTS_PER_NS 2.0  /* a simple pass over bytes / floats on one core */

typedef struct {
    const lnpu_step *s;
    void **slots;
    int64_t count, chunk;
    int twice;  /* qresize: output column c is input column c / 2 */
} ew_args;

static int64_t split(ew_args *a, int64_t count) {
    int64_t tasks = task_count(count / ELEMENTS_PER_NS, (count + 4095) / 4096);
    a->count = count;
    a->chunk = per_task(count, tasks);
    return (count + a->chunk - 1) / a->chunk;
}

/* f = x / scale clamped to [lo, hi] (codes minus the zero point), a NaN to lo. */
static inline float clamp_nan(float f, float lo, float hi) {
    f = f >= lo ? f : lo;
    return f > hi ? hi : f;
}

MULTIVERSION
static void quantize_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;
    const lnpu_step *s = a->s;
    const float *x = a->slots[s->slot[0]];
    uint8_t *y = a->slots[s->slot[1]];
    float scale = s->f[0], lo = (float)(s->p[2] - s->p[1]), hi = (float)(s->p[3] - s->p[1]);
    int32_t zp = (int32_t)s->p[1];
    int64_t begin = t * a->chunk, end = begin + a->chunk < a->count ? begin + a->chunk : a->count;
    for (int64_t i = begin; i < end; i++)
        y[i] = (uint8_t)((int32_t)rne(clamp_nan(x[i] / scale, lo, hi)) + zp);
}

MULTIVERSION
static void dequantize_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;
    const lnpu_step *s = a->s;
    float *y = a->slots[s->slot[1]];
    float scale = s->f[0];
    int32_t zp = (int32_t)s->p[1];
    int64_t begin = t * a->chunk, end = begin + a->chunk < a->count ? begin + a->chunk : a->count;
    if (s->p[4]) {  /* int8 codes */
        const int8_t *x = a->slots[s->slot[0]];
        for (int64_t i = begin; i < end; i++) y[i] = (float)((int32_t)x[i] - zp) * scale;
    } else {
        const uint8_t *x = a->slots[s->slot[0]];
        for (int64_t i = begin; i < end; i++) y[i] = (float)((int32_t)x[i] - zp) * scale;
    }
}

/* quantize / dequantize: p = count, zero point, code min, code max, signed; f[0] = scale;
 * slots x, y. */
void quantize(const lnpu_step *s, void **slots) {
    ew_args a = {s, slots, 0, 0};
    parallel(quantize_task, &a, split(&a, s->p[0]));
}

void dequantize(const lnpu_step *s, void **slots) {
    ew_args a = {s, slots, 0, 0};
    parallel(dequantize_task, &a, split(&a, s->p[0]));
}

/* y[i] = table[x[i] ^ flip] for i < n: 64 codes per step with AVX-512 VBMI (each half of
 * the table is one two-register byte permute, the code's top bit picks the half), else one
 * load per code. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static int64_t lookup_vbmi(uint8_t *y, const uint8_t *x, int64_t n, const uint8_t *table,
                           uint8_t flip) {
    __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    __m512i f = _mm512_set1_epi8((char)flip);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i v = _mm512_xor_si512(_mm512_loadu_si512(x + i), f);
        __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);  /* entries 0..127 by bits 0-6 */
        __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);  /* entries 128..255 */
        _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
    }
    return i;
}
#endif

static void lookup(uint8_t *y, const uint8_t *x, int64_t n, const uint8_t *table, uint8_t flip) {
    int64_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (int8_vbmi()) i = lookup_vbmi(y, x, n, table, flip);
#endif
    for (; i < n; i++) y[i] = table[(uint8_t)(x[i] ^ flip)];
}

/* table: p = count, signed input; slots x, table (256 codes), y. */
static void lut_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;
    const lnpu_step *s = a->s;
    const uint8_t *x = a->slots[s->slot[0]], *table = a->slots[s->slot[1]];
    uint8_t *y = a->slots[s->slot[2]];
    uint8_t flip = s->p[1] ? 0x80 : 0;  /* int8 code c is entry c + 128 */
    int64_t begin = t * a->chunk, end = begin + a->chunk < a->count ? begin + a->chunk : a->count;
    lookup(y + begin, x + begin, end - begin, table, flip);
}

void qlut(const lnpu_step *s, void **slots) {
    ew_args a = {s, slots, 0, 0};
    parallel(lut_task, &a, split(&a, s->p[0]));
}

/* add: p = count, za, zb, zy, lo, hi, signed inputs (a then b), then each input's period (its
 * element count: the output's trailing dims it repeats along the leading ones, or the whole
 * output); f[0] = ra, f[1] = rb;
 * slots a, b, y: y = clamp(rint(float(a - za) * ra + float(b - zb) * rb) + zy), the two
 * products rounded before the sum (no fused multiply-add: the library is built with
 * -ffp-contract=fast, which would round once and differ from onnxruntime in the last bit). */
/* The code of input element k (u8 or s8 codes as int32). */
#define CODE(x, k, signed_) ((signed_) ? (int32_t)(int8_t)(x)[k] : (int32_t)(x)[k])

/* n elements of add_task's (or mul_task's) y from a and b with no period wrapping inside:
 * a loop the compiler vectorizes (the wrapping indices of the general loop kept it scalar:
 * YOLOv8n int8's 16 x 256 x 256 residual add took 1.2 ms). The same arithmetic per element. */
#define EW_RUN(NAME, EXPR)                                                                 \
    static inline __attribute__((always_inline)) void NAME(                                \
            const uint8_t *x0, const uint8_t *x1, uint8_t *y, int64_t n, int sa, int sb,   \
            int32_t za, int32_t zb, int32_t zy, float lo, float hi, float ra, float rb) {  \
        for (int64_t k = 0; k < n; k++) {                                                  \
            int32_t va = CODE(x0, k, sa), vb = CODE(x1, k, sb);                            \
            float f = EXPR;                                                                \
            y[k] = (uint8_t)((int32_t)rne(clamp_nan(f, lo, hi)) + zy);                     \
        }                                                                                  \
    }
EW_RUN(add_run, (float)(va - za) * ra + (float)(vb - zb) * rb)
EW_RUN(mul_run, (float)((va - za) * (vb - zb)) * ra)  /* ra: mul's m; rb unused */

/* add_run or mul_run over this task's elements with scales RA, RB, the signedness of both
 * inputs constant inside (the other arguments: the locals of add_task / mul_task) */
#define EW_ARGS x0 + ia, x1 + ib, y + begin, end - begin
#define EW_SIGNED(RUN, RA, RB)                                                             \
    do {                                                                                   \
        if (!sa && !sb) RUN(EW_ARGS, 0, 0, za, zb, zy, lo, hi, RA, RB);                    \
        else if (sa && sb) RUN(EW_ARGS, 1, 1, za, zb, zy, lo, hi, RA, RB);                 \
        else if (sa) RUN(EW_ARGS, 1, 0, za, zb, zy, lo, hi, RA, RB);                       \
        else RUN(EW_ARGS, 0, 1, za, zb, zy, lo, hi, RA, RB);                               \
    } while (0)

MULTIVERSION __attribute__((optimize("fp-contract=off")))
static void add_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;
    const lnpu_step *s = a->s;
    const uint8_t *x0 = a->slots[s->slot[0]], *x1 = a->slots[s->slot[1]];
    uint8_t *y = a->slots[s->slot[2]];
    int32_t za = (int32_t)s->p[1], zb = (int32_t)s->p[2], zy = (int32_t)s->p[3];
    float lo = (float)(s->p[4] - zy), hi = (float)(s->p[5] - zy), ra = s->f[0], rb = s->f[1];
    int sa = (int)s->p[6], sb = (int)s->p[7];
    int64_t begin = t * a->chunk, end = begin + a->chunk < a->count ? begin + a->chunk : a->count;
    int64_t pa = s->p[8], pb = s->p[9], ia = begin % pa, ib = begin % pb;
    if (ia + (end - begin) <= pa && ib + (end - begin) <= pb) {
        EW_SIGNED(add_run, ra, rb);
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int32_t va = sa ? (int32_t)(int8_t)x0[ia] : (int32_t)x0[ia];
        int32_t vb = sb ? (int32_t)(int8_t)x1[ib] : (int32_t)x1[ib];
        float f = (float)(va - za) * ra + (float)(vb - zb) * rb;
        y[i] = (uint8_t)((int32_t)rne(clamp_nan(f, lo, hi)) + zy);
        if (++ia == pa) ia = 0;
        if (++ib == pb) ib = 0;
    }
}

/* mul: p as add; f[0] = m: y = clamp(rint(float((a - za) * (b - zb)) * m) + zy) (the
 * product is an exact int32, its float conversion exact below 2^24). */
MULTIVERSION
static void mul_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;
    const lnpu_step *s = a->s;
    const uint8_t *x0 = a->slots[s->slot[0]], *x1 = a->slots[s->slot[1]];
    uint8_t *y = a->slots[s->slot[2]];
    int32_t za = (int32_t)s->p[1], zb = (int32_t)s->p[2], zy = (int32_t)s->p[3];
    float lo = (float)(s->p[4] - zy), hi = (float)(s->p[5] - zy), m = s->f[0];
    int sa = (int)s->p[6], sb = (int)s->p[7];
    int64_t begin = t * a->chunk, end = begin + a->chunk < a->count ? begin + a->chunk : a->count;
    int64_t pa = s->p[8], pb = s->p[9], ia = begin % pa, ib = begin % pb;
    if (ia + (end - begin) <= pa && ib + (end - begin) <= pb) {
        EW_SIGNED(mul_run, m, 0.0f);  /* mul_run takes m as ra; rb unused */
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int32_t va = sa ? (int32_t)(int8_t)x0[ia] : (int32_t)x0[ia];
        int32_t vb = sb ? (int32_t)(int8_t)x1[ib] : (int32_t)x1[ib];
        float f = (float)((va - za) * (vb - zb)) * m;
        y[i] = (uint8_t)((int32_t)rne(clamp_nan(f, lo, hi)) + zy);
        if (++ia == pa) ia = 0;
        if (++ib == pb) ib = 0;
    }
}

void qmul(const lnpu_step *s, void **slots) {
    ew_args a = {s, slots, 0, 0};
    parallel(mul_task, &a, split(&a, s->p[0]));
}

void qadd(const lnpu_step *s, void **slots) {
    ew_args a = {s, slots, 0, 0};
    parallel(add_task, &a, split(&a, s->p[0]));
}

/* concat of code tensors: p = outer, inner of the output (its elements after the axis,
 * times the axis), the inputs' count, then per input its inner size and signedness;
 * slots: the output, then per input its codes and its table (-1: copied). */
static void concat_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;
    const lnpu_step *s = a->s;
    int64_t inner = s->p[1], inputs = s->p[2];
    uint8_t *y = (uint8_t *)a->slots[s->slot[0]] + t * inner;
    for (int64_t i = 0; i < inputs; i++) {
        int64_t size = s->p[3 + 2 * i];
        const uint8_t *x = (const uint8_t *)a->slots[s->slot[1 + 2 * i]] + t * size;
        int64_t table_slot = s->slot[2 + 2 * i];
        if (table_slot < 0) {
            memcpy(y, x, size);
        } else {
            lookup(y, x, size, a->slots[table_slot], s->p[4 + 2 * i] ? 0x80 : 0);
        }
        y += size;
    }
}

void qconcat(const lnpu_step *s, void **slots) {
    ew_args a = {s, slots, s->p[0], 1};
    parallel(concat_task, &a, s->p[0]);
}

/* ---- max pooling of codes ---------------------------------------------------------------- */

/* p = N, C, H, W, OH, OW, KH, KW, SH, SW, PT, PL, signed; slots x, table (-1: none), y.
 * Padding never wins (the window's max is over the input positions it covers), as
 * onnxruntime's MaxPool; a table maps the max code to the output's quantization. */
enum { MP_N, MP_C, MP_H, MP_W, MP_OH, MP_OW, MP_KH, MP_KW, MP_SH, MP_SW, MP_PT, MP_PL, MP_SIGNED };

/* One plane, separably, in passes over the whole plane (rows of small planes are too short
 * for vector loops of their own): the plane is copied into `padded` ((oh - 1) * sh + kh rows
 * of wp = (ow - 1) * sw + kw bytes, the padding 0), each value is replaced by the max of
 * the kh values below it (`rows`, one flat pass: value k and k + wp, k + 2 wp... are a
 * column's neighbours), then by the max of the kw values after it (`wins`, another flat
 * pass; the values past a row's end that mixes in are read by no window), and every output
 * is one value of `wins`. Codes compare as unsigned after `flip` (int8 codes: the sign bit);
 * the padding's 0 is then below every code, so a window's padded part never wins (a window
 * always holds an input value: pads < kernel). */
MULTIVERSION
static void maxpool_plane(const lnpu_step *s, const uint8_t *x, const uint8_t *table, uint8_t *y,
                          uint8_t *restrict padded, uint8_t *restrict rows,
                          uint8_t *restrict wins) {
    const int64_t *p = s->p;
    int64_t h = p[MP_H], w = p[MP_W], oh = p[MP_OH], ow = p[MP_OW], kh = p[MP_KH], kw = p[MP_KW];
    int64_t sh = p[MP_SH], sw = p[MP_SW], pt = p[MP_PT], pl = p[MP_PL];
    int64_t hp = (oh - 1) * sh + kh, wp = (ow - 1) * sw + kw;
    uint8_t flip = p[MP_SIGNED] ? 0x80 : 0;  /* compare int8 codes as unsigned */
    memset(padded, 0, (size_t)(hp * wp));
    int64_t r0 = pt > 0 ? 0 : -pt, r1 = hp - pt < h ? hp - pt : h;
    int64_t q0 = pl > 0 ? 0 : -pl, q1 = wp - pl < w ? wp - pl : w;
    for (int64_t ih = r0; ih < r1; ih++) {
        const uint8_t *restrict in = x + ih * w;
        uint8_t *restrict out = padded + (ih + pt) * wp + pl;
        for (int64_t j = q0; j < q1; j++) out[j] = in[j] ^ flip;
    }
    int64_t n = (hp - kh + 1) * wp;  /* the values a window's top row can start at */
    memcpy(rows, padded, (size_t)n);
    for (int64_t i = 1; i < kh; i++) {
        const uint8_t *restrict below = padded + i * wp;
        for (int64_t k = 0; k < n; k++) rows[k] = below[k] > rows[k] ? below[k] : rows[k];
    }
    int64_t m = n - kw + 1;
    memcpy(wins, rows, (size_t)m);
    for (int64_t j = 1; j < kw; j++) {
        const uint8_t *restrict after = rows + j;
        for (int64_t k = 0; k < m; k++) wins[k] = after[k] > wins[k] ? after[k] : wins[k];
    }
    for (int64_t r = 0; r < oh; r++) {
        const uint8_t *src = wins + r * sh * wp;
        uint8_t *out = y + r * ow;
        if (table)
            for (int64_t c = 0; c < ow; c++) out[c] = table[src[c * sw]];
        else
            for (int64_t c = 0; c < ow; c++) out[c] = (uint8_t)(src[c * sw] ^ flip);
    }
}

/* Bytes of each of maxpool_plane's three buffers (rounded to whole floats). */
static int64_t maxpool_buffer_bytes(const int64_t *p) {
    int64_t hp = (p[MP_OH] - 1) * p[MP_SH] + p[MP_KH], wp = (p[MP_OW] - 1) * p[MP_SW] + p[MP_KW];
    return (hp * wp + 63) / 64 * 64;
}

static void maxpool_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;  /* count: planes, chunk: planes per task */
    const int64_t *p = a->s->p;
    int64_t in = p[MP_H] * p[MP_W], out = p[MP_OH] * p[MP_OW];
    const uint8_t *x = a->slots[a->s->slot[0]];
    const uint8_t *table = a->s->slot[1] >= 0 ? a->slots[a->s->slot[1]] : NULL;
    uint8_t *y = a->slots[a->s->slot[2]];
    int64_t end = (t + 1) * a->chunk < a->count ? (t + 1) * a->chunk : a->count;
    int64_t bytes = maxpool_buffer_bytes(p);
    uint8_t *padded = (uint8_t *)thread_scratch(3 * bytes / 4);
    if (!padded) return;  /* the caller checked: never here */
    for (int64_t k = t * a->chunk; k < end; k++)
        maxpool_plane(a->s, x + k * in, table, y + k * out, padded, padded + bytes,
                      padded + 2 * bytes);
}

/* Returns -1 when there is no host memory for the plane's buffers. */
int qmaxpool(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t planes = p[MP_N] * p[MP_C];
    if (!planes || !p[MP_OH] || !p[MP_OW]) return 0;
    if (!thread_scratch(3 * maxpool_buffer_bytes(p) / 4)) return -1;
    double work = (double)planes * p[MP_OH] * p[MP_OW] * p[MP_KH] * p[MP_KW];
    ew_args a = {s, slots, planes, per_task(planes, task_count(work / ELEMENTS_PER_NS, planes))};
    parallel(maxpool_task, &a, (planes + a.chunk - 1) / a.chunk);
    return 0;
}

/* ---- global average pooling of codes ----------------------------------------------------
 * Per plane: the sum of its hw codes minus hw * zx (int64), requantized: rint(float(sum) *
 * mult) + zy, saturated (the numpy kernel's order; clamping before rounding gives the same
 * codes). params: planes, hw, zx, zy, lo, hi, x is int8; f[0]: mult. */
enum { GP_PLANES, GP_HW, GP_ZX, GP_ZY, GP_LO, GP_HI, GP_XSIGNED };

MULTIVERSION
static void gavg_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;  /* count: planes, chunk: planes per task */
    const int64_t *p = a->s->p;
    int64_t hw = p[GP_HW], end = (t + 1) * a->chunk < a->count ? (t + 1) * a->chunk : a->count;
    const uint8_t *x = a->slots[a->s->slot[0]];
    uint8_t *y = a->slots[a->s->slot[1]];
    float m = a->s->f[0];
    int32_t zy = (int32_t)p[GP_ZY];
    float lo = (float)(p[GP_LO] - zy), hi = (float)(p[GP_HI] - zy);
    for (int64_t plane = t * a->chunk; plane < end; plane++) {
        int64_t sum = 0;
        if (p[GP_XSIGNED]) {
            const int8_t *v = (const int8_t *)x + plane * hw;
            for (int64_t k = 0; k < hw; k++) sum += v[k];
        } else {
            const uint8_t *v = x + plane * hw;
            for (int64_t k = 0; k < hw; k++) sum += v[k];
        }
        y[plane] = (uint8_t)code_of((float)(sum - hw * p[GP_ZX]) * m, lo, hi, zy);
    }
}

void qglobalpool(const lnpu_step *s, void **slots) {
    int64_t planes = s->p[GP_PLANES];
    if (!planes) return;
    double work = (double)planes * s->p[GP_HW];
    ew_args a = {s, slots, planes, per_task(planes, task_count(work / ELEMENTS_PER_NS, planes))};
    parallel(gavg_task, &a, (planes + a.chunk - 1) / a.chunk);
}

/* ---- nearest resize of codes (and of floats) ----------------------------------------------
 * p = planes, H, W, OH, OW, signed, element bytes (1: codes; 4: float32, never a table);
 * slots x, the source row of each output row (OH int64), the source column of each output
 * column (OW int64), table (-1: none), y. Output (r, c) is input (rows[r], cols[c])
 * [through the table]. A row whose source is the previous row's is a copy of it, and a 2x
 * upsample's columns a loop that vectorizes: YOLOv8n int8's two upsamples (to 128 x 128 and
 * 64 x 64, 128 and 256 planes) 1.86-1.95 -> 0.20 ms, output bit-identical. */
enum { RS_PLANES, RS_H, RS_W, RS_OH, RS_OW, RS_SIGNED, RS_BYTES };

static void resize_task(const void *ctx, int64_t t) {
    const ew_args *a = ctx;
    const lnpu_step *s = a->s;
    const int64_t *p = s->p;
    const uint8_t *x = a->slots[s->slot[0]];
    const int64_t *rows = a->slots[s->slot[1]], *cols = a->slots[s->slot[2]];
    const uint8_t *table = s->slot[3] >= 0 ? a->slots[s->slot[3]] : NULL;
    uint8_t *y = a->slots[s->slot[4]];
    int64_t h = p[RS_H], w = p[RS_W], oh = p[RS_OH], ow = p[RS_OW];
    uint8_t flip = p[RS_SIGNED] ? 0x80 : 0;
    int64_t end = (t + 1) * a->chunk < a->count ? (t + 1) * a->chunk : a->count;
    int64_t row_bytes = ow * p[RS_BYTES];
    for (int64_t k = t * a->chunk; k < end; k++) {  /* output rows of all planes */
        int64_t plane = k / oh, r = k % oh, src = rows[r] < 0 ? 0 : rows[r] >= h ? h - 1 : rows[r];
        /* the row just made again (an upsample's), when this task made it: another task's
         * row may not be written yet */
        if (r > 0 && k > t * a->chunk && rows[r] == rows[r - 1]) {
            memcpy(y + k * row_bytes, y + (k - 1) * row_bytes, (size_t)row_bytes);
            continue;
        }
        if (p[RS_BYTES] == 4) {  /* float32 (the float Resize's nearest mode) */
            const float *in = (const float *)x + (plane * h + src) * w;
            float *out = (float *)y + k * ow;
            for (int64_t c = 0; c < ow; c++) out[c] = in[cols[c] < 0 ? 0 : cols[c] >= w ? w - 1 : cols[c]];
            continue;
        }
        const uint8_t *in = x + (plane * h + src) * w;
        uint8_t *out = y + k * ow;
        if (a->twice) {  /* every column twice: a loop that vectorizes */
            for (int64_t c = 0; c < w; c++) out[2 * c] = out[2 * c + 1] = in[c];
        } else {
            for (int64_t c = 0; c < ow; c++) {
                int64_t col = cols[c] < 0 ? 0 : cols[c] >= w ? w - 1 : cols[c];
                out[c] = in[col];
            }
        }
        if (table) lookup(out, out, ow, table, flip);
    }
}

void qresize(const lnpu_step *s, void **slots) {
    int64_t count = s->p[RS_PLANES] * s->p[RS_OH], w = s->p[RS_W], ow = s->p[RS_OW];
    if (!count || !ow) return;
    ew_args a = {s, slots, count, 0, 0};
    const int64_t *cols = slots[s->slot[2]];
    a.twice = ow == 2 * w;  /* a 2x upsample's columns: codes, every column twice */
    for (int64_t c = 0; c < ow && a.twice; c++) a.twice = cols[c] == c / 2;
    a.chunk = per_task(count, task_count((double)count * s->p[RS_OW] / ELEMENTS_PER_NS, count));
    parallel(resize_task, &a, (count + a.chunk - 1) / a.chunk);
}
