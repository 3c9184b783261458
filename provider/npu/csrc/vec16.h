/* 16-float vectors (GCC/clang vector extensions) and their math: a select, e^x for x <= 0
 * and a fold of a vector's lanes (the softmax's, dense.c). Each target clone of a caller
 * (MULTIVERSION) compiles them for its own width: one zmm, two ymm or four xmm. */
#ifndef LITENPU_VEC16_H
#define LITENPU_VEC16_H

#include "npu.h"

typedef float v16f __attribute__((vector_size(16 * sizeof(float)), aligned(4)));
typedef int32_t v16i __attribute__((vector_size(16 * sizeof(int32_t))));
#define V16 16

/* The helpers are inlined into each clone of their caller, so their vector arguments never
 * cross a call (GCC warns of the ABI of 64-byte vectors on targets without AVX-512, at the
 * end of the file that includes them: off from here on). */
#pragma GCC diagnostic ignored "-Wpsabi"
#define V16_INLINE static inline __attribute__((always_inline))

/* a where mask, else b (mask lanes all ones or all zeros: a vector comparison's result) */
V16_INLINE v16f v16_select(v16i mask, v16f a, v16f b) {
    return (v16f)((mask & (v16i)a) | (~mask & (v16i)b));
}

/* e^d for d <= 0, 0 below -87.3 (-inf included), NaN for NaN: exp_clamped's steps (npu.h's
 * EXP_*) on 16 values, without its caller's clamp: values below -87.3 are masked to 0 at the
 * end. */
V16_INLINE v16f v16_exp_neg(v16f d) {
    v16i under = d < -87.3f;
    v16f t = d * EXP_LOG2E + EXP_ROUND_BIAS;
    v16f n = t - EXP_ROUND_BIAS;
    v16f r = d - n * EXP_LN2_HI;
    r -= n * EXP_LN2_LO;
    v16f scale = (v16f)((v16i)t << 23);
    return (v16f)((v16i)(EXP_POLY(r) * scale) & ~under);
}

/* Lane 0 of v folded in halves with `op` (four dependent steps, not sixteen). */
#if defined(__clang__)
#define V16_SHUFFLE(v, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
#define V16_SHUFFLE(v, ...) __builtin_shuffle(v, (v16i){__VA_ARGS__})
#endif
#define V16_FOLD(v, op) do { \
    v16f f_ = (v); \
    f_ = op(f_, V16_SHUFFLE(f_, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)); \
    f_ = op(f_, V16_SHUFFLE(f_, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3)); \
    f_ = op(f_, V16_SHUFFLE(f_, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1)); \
    f_ = op(f_, V16_SHUFFLE(f_, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0)); \
    (v) = f_; \
} while (0)
#define V16_ADD(a, b) ((a) + (b))
#define V16_MAX(a, b) v16_select((b) > (a), (b), (a))  /* a NaN b is never taken */

#endif
