/* The library's entry points: the runner that executes a Program's native steps.
 *
 * Python (provider/npu/ops/<family>.py) lowers each step it can run here into an lnpu_step
 * (slot indices + integer/float parameters, all validated there) and calls lnpu_run once per
 * run of consecutive native steps, with a table of slot addresses. The GEMMs go to a
 * single-threaded OpenBLAS sgemm whose address Python passes in (lnpu_set_sgemm); the NPU's
 * cores are pool.c's thread pool, which splits every large kernel into tasks.
 *
 * Everything here trusts the lowering: shapes, slot sizes and dtypes were checked when the
 * steps were built, so a kernel never sees a buffer smaller than its parameters say.
 */
#include "npu.h"

sgemm_fn sgemm;

API void lnpu_set_sgemm(void *fn) { sgemm = (sgemm_fn)fn; }

/* Run steps[0..count) on the slot address table, on at most `threads` cores (0: all).
 * `seconds`, when not NULL, receives each step's wall time (the profile). Returns 0; 1 + the
 * index of a step with an unknown op (a lowering bug); -1 when a kernel found no host memory
 * for its scratch; -2 when no sgemm was set. */
API int64_t lnpu_run(const lnpu_step *steps, int64_t count, void **slots, double *seconds,
                     int threads) {
    if (!sgemm) return -2;
    run_begin(threads);
    int64_t status = 0;
    for (int64_t i = 0; i < count && !status; i++) {
        const lnpu_step *s = &steps[i];
        long t0 = seconds ? now_ns() : 0;
        switch (s->op) {
        case OP_CONV: status = conv(s, slots); break;
        case OP_DWCONV: status = dwconv(s, slots); break;
        case OP_MAXPOOL: status = pool2d(s, slots, 1); break;
        case OP_AVGPOOL: status = pool2d(s, slots, 0); break;
        case OP_GLOBALPOOL: global_pool(s, slots); break;
        case OP_CONCAT: concat(s, slots); break;
        case OP_TRANSPOSE: transpose(s, slots); break;
        case OP_MATMUL: matmul(s, slots); break;
        case OP_ACT: activation(s, slots); break;
        case OP_SOFTMAX: softmax(s, slots); break;
        case OP_UNARY: unary(s, slots); break;
        case OP_BINARY: binary(s, slots); break;
        case OP_LAYERNORM: layer_norm(s, slots); break;
        case OP_BMATMUL: bmatmul(s, slots); break;
        case OP_RNN: status = rnn(s, slots); break;
        case OP_REDUCE: reduce(s, slots); break;
        case OP_QCONV: status = qconv(s, slots); break;
        case OP_QDENSE: qdense(s, slots); break;
        case OP_QUANTIZE: quantize(s, slots); break;
        case OP_DEQUANTIZE: dequantize(s, slots); break;
        case OP_QLUT: qlut(s, slots); break;
        case OP_QADD: qadd(s, slots); break;
        case OP_QCONCAT: qconcat(s, slots); break;
        case OP_QDWCONV: status = qdwconv(s, slots); break;
        case OP_QMAXPOOL: qmaxpool(s, slots); break;
        case OP_QMUL: qmul(s, slots); break;
        default: status = i + 1; continue;
        }
        if (seconds) seconds[i] = (now_ns() - t0) * 1e-9;
    }
    run_end();
    return status;
}

/* sizeof(lnpu_step), so Python can check its mirror of the struct. */
API int64_t lnpu_step_size(void) { return sizeof(lnpu_step); }
