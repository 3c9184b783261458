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
#include <stdarg.h>
#include <stdio.h>

#include "npu.h"

API void lnpu_set_sgemm(void *fn) { blas_set((sgemm_fn)fn); }

static int64_t forced_width;  /* lnpu_set_vector_width: 0 = the widest the CPU has */

/* Floats per vector of the fp32 kernels that come in two widths (direct.c, window.c): 16
 * where the CPU has AVX-512 (the x86-64-v4 level), else 8; a forced 8 everywhere (16 only where the CPU has it). */
int64_t vector_width(void) {
    static int64_t widest;
    if (!widest) {
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        /* the x86-64-v4 level, which the wide copies are compiled for */
        widest = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512cd") ? 16 : 8;
#else
        widest = 8;
#endif
    }
    return forced_width == 8 ? 8 : widest;
}

/* Force the width (0: automatic, 8: the 8-float kernels); returns the width now taken. For
 * tests and benchmarks: process-wide, set while no run is in progress. */
API int64_t lnpu_set_vector_width(int64_t floats) {
    forced_width = floats;
    return vector_width();
}

/* Run steps[0..count) on the slot address table, on at most `threads` cores (0: all).
 * `stamps`, when not NULL, receives each step's start and end (CLOCK_MONOTONIC nanoseconds,
 * stamps[2i] and stamps[2i + 1]): the profile of this run; NULL costs one test per step.
 * Returns 0; 1 + the
 * index of a step with an unknown op (a lowering bug); -1 when a kernel found no host memory
 * for its scratch; -2 when no sgemm was set; KERNEL_REFUSED when a kernel refused its input
 * (lnpu_kernel_error says why). */
API int64_t lnpu_run(const lnpu_step *steps, int64_t count, void **slots, int64_t *stamps,
                     int threads) {
    if (!blas_ready()) return -2;
    run_begin(threads);
    int64_t status = 0;
    for (int64_t i = 0; i < count && !status; i++) {
        const lnpu_step *s = &steps[i];
        if (stamps) stamps[2 * i] = now_ns();
        switch (s->op) {
        case OP_CONV: status = conv(s, slots); break;
        case OP_DWCONV: status = dwconv(s, slots); break;
        case OP_MAXPOOL: status = pool2d(s, slots, 1); break;
        case OP_AVGPOOL: status = pool2d(s, slots, 0); break;
        case OP_GLOBALPOOL: global_pool(s, slots); break;
        case OP_CONCAT: concat(s, slots); break;
        case OP_TRANSPOSE: transpose(s, slots); break;
        case OP_MATMUL: status = matmul(s, slots); break;
        case OP_ACT: activation(s, slots); break;
        case OP_SOFTMAX: softmax(s, slots); break;
        case OP_UNARY: unary(s, slots); break;
        case OP_BINARY: binary(s, slots); break;
        case OP_LAYERNORM: layer_norm(s, slots); break;
        case OP_BMATMUL: bmatmul(s, slots); break;
        case OP_RNN: status = rnn(s, slots); break;
        case OP_REDUCE: reduce(s, slots); break;
        case OP_PAD: pad(s, slots); break;
        case OP_CAST: cast(s, slots); break;
        case OP_SPLIT: split_axis(s, slots); break;
        case OP_DECONV: deconv(s, slots); break;
        case OP_GATHER: status = gather(s, slots); break;
        case OP_COMPARE: compare(s, slots); break;
        case OP_WHERE: where(s, slots); break;
        case OP_GATHER_ND: status = gather_nd(s, slots); break;
        case OP_GATHER_ELEMENTS: status = gather_elements(s, slots); break;
        case OP_SCATTER_ND: status = scatter_nd(s, slots); break;
        case OP_SCATTER_ELEMENTS: status = scatter_elements(s, slots); break;
        case OP_TRIANGLE: triangle(s, slots); break;
        case OP_LRN: lrn(s, slots); break;
        case OP_LP_NORM: lp_norm(s, slots); break;
        case OP_RESIZE_LINEAR: status = resize_linear(s, slots); break;
        case OP_RESIZE_CUBIC: status = resize_cubic(s, slots); break;
        case OP_ARG: argreduce(s, slots); break;
        case OP_TOPK: status = topk(s, slots); break;
        case OP_CUMSUM: cumsum(s, slots); break;
        case OP_ADD_N: add_n(s, slots); break;
        case OP_QCONV: status = qconv(s, slots); break;
        case OP_QDENSE: qdense(s, slots); break;
        case OP_QUANTIZE: quantize(s, slots); break;
        case OP_DEQUANTIZE: dequantize(s, slots); break;
        case OP_QLUT: qlut(s, slots); break;
        case OP_QADD: qadd(s, slots); break;
        case OP_QCONCAT: qconcat(s, slots); break;
        case OP_QDWCONV: status = qdwconv(s, slots); break;
        case OP_QMAXPOOL: status = qmaxpool(s, slots); break;
        case OP_QMUL: qmul(s, slots); break;
        case OP_QGLOBALPOOL: qglobalpool(s, slots); break;
        case OP_QRESIZE: qresize(s, slots); break;
        case OP_QSOFTMAX: status = qsoftmax(s, slots); break;
        case OP_QMATMUL: status = qmatmul(s, slots); break;
        default: status = i + 1; continue;
        }
        if (stamps) stamps[2 * i + 1] = now_ns();
    }
    run_end();
    return status;
}

static __thread char kernel_error[512];

int kernel_fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(kernel_error, sizeof kernel_error, format, args);
    va_end(args);
    return KERNEL_REFUSED;
}

API const char *lnpu_kernel_error(void) { return kernel_error; }

/* sizeof(lnpu_step), so Python can check its mirror of the struct. */
API int64_t lnpu_step_size(void) { return sizeof(lnpu_step); }
