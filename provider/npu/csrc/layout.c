/* Data movement: concat, split, transpose (strided copies), gather, pad and cast. */
#include "npu.h"

/* concat and split: outer, then bytes per outer index of each piece (slots 0..k-1); the
 * whole tensor in slot 15. Concat copies the pieces into the whole, split the whole into
 * the pieces. */
static void pieces(const lnpu_step *s, void **slots, int join) {
    int64_t outer = s->p[0], k = s->p[1];
    char *whole = slots[s->slot[MAX_SLOTS - 1]];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < k; i++) {
            int64_t part = s->p[2 + i];
            char *piece = (char *)slots[s->slot[i]] + o * part;
            if (join) memcpy(whole, piece, part);
            else memcpy(piece, whole, part);
            whole += part;
        }
    }
}

void concat(const lnpu_step *s, void **slots) { pieces(s, slots, 1); }

void split_axis(const lnpu_step *s, void **slots) { pieces(s, slots, 0); }

/* transpose: rank r (<= 6, the last output axis is contiguous in the input too when
 * p[1] > 1), p[1] bytes per innermost block, p[2..2+r) output shape, p[8..8+r) input
 * byte strides permuted to the output's axis order (negative for a reversed axis, 0 for a
 * broadcast one), p[14] the byte offset of the first element read (a slice's start), p[15]
 * the element bytes when the innermost axis goes element by element (0: 4). Any strided
 * view of x, copied out contiguously: transposes, slices, broadcasts, SpaceToDepth. */
void transpose(const lnpu_step *s, void **slots) {
    int64_t r = s->p[0], block = s->p[1];
    const int64_t *shape = s->p + 2, *stride = s->p + 8;
    const char *x = (const char *)slots[s->slot[0]] + s->p[14];
    char *y = slots[s->slot[1]];
    int64_t idx[6] = {0};
    int64_t inner = shape[r - 1];
    for (int64_t d = 0; d < r; d++)
        if (shape[d] == 0) return;  /* empty: the odometer below visits at least one block */
    for (;;) {
        const char *src = x;
        for (int64_t d = 0; d < r - 1; d++) src += idx[d] * stride[d];
        if (block > 0) {
            memcpy(y, src, block);
            y += block;
        } else {
            int64_t size = s->p[15] ? s->p[15] : 4;
            for (int64_t i = 0; i < inner; i++, y += size) memcpy(y, src + i * stride[r - 1], size);
        }
        int64_t d = r - 2;
        while (d >= 0 && ++idx[d] == shape[d]) idx[d--] = 0;
        if (d < 0) break;
    }
}


/* gather: outer, the axis's length, bytes per index (the elements after the axis), index
 * count, index bytes (4 or 8), checked (the compiler made them non-negative and in range);
 * slots x, indices, y. Run-time indices are checked first, all of them (nothing is written
 * when one is out of range), and negatives wrap, as the numpy kernel does. */
static int64_t gather_index(const void *idx, int64_t j, int64_t bytes) {
    return bytes == 8 ? ((const int64_t *)idx)[j] : ((const int32_t *)idx)[j];
}

int gather(const lnpu_step *s, void **slots) {
    int64_t outer = s->p[0], dim = s->p[1], inner = s->p[2], count = s->p[3], bytes = s->p[4];
    const char *x = slots[s->slot[0]];
    const void *idx = slots[s->slot[1]];
    char *y = slots[s->slot[2]];
    if (!s->p[5])
        for (int64_t j = 0; j < count; j++) {
            int64_t k = gather_index(idx, j, bytes);
            if (k < -dim || k >= dim)
                return kernel_fail("Gather: index %lld is outside [-%lld, %lld)", (long long)k,
                                   (long long)dim, (long long)dim);
        }
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
        for (int64_t j = 0; j < count; j++) {
            int64_t v = gather_index(idx, j * k + a, bytes);
            if (v < -dims[a] || v >= dims[a])
                return kernel_fail("GatherND: index %lld is outside [-%lld, %lld)", (long long)v,
                                   (long long)dims[a], (long long)dims[a]);
        }
    for (int64_t j = 0; j < count; j++, y += inner) {
        int64_t linear = 0;
        for (int64_t a = 0; a < k; a++) {
            int64_t v = gather_index(idx, j * k + a, bytes);
            linear = linear * dims[a] + (v < 0 ? v + dims[a] : v);
        }
        memcpy(y, x + linear * inner, inner);
    }
    return 0;
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
