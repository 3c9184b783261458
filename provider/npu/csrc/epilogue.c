/* The fused epilogue (bias, residual, activation) for callers not compiled per instruction set. */
#include "npu.h"

MULTIVERSION void epilogue(float *y, int64_t n, float bias, const float *res, act_t act) {
    finish(y, y, n, bias, res, act);
}

