/* The fused epilogues (bias, residual, activation) for callers not compiled per instruction set. */
#include "npu.h"

MULTIVERSION void epilogue(float *y, int64_t n, float bias, const float *res, act_t act) {
    finish(y, y, n, bias, res, act);
}


MULTIVERSION void epilogue_rows(float *y, int64_t rows, int64_t ld, int64_t n, const float *bias,
                                act_t act) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * ld;
        if (bias)
            for (int64_t i = 0; i < n; i++) row[i] += bias[i];
        finish(row, row, n, 0.0f, NULL, act);
    }
}
