/* The planar windowed kernels' geometry and task context, shared by window.c (which runs
 * them: pools and the depthwise conv's big planes) and dwconv.c (the depthwise conv's entry,
 * which also has forms of its own for small planes). */
#ifndef LITENPU_WINDOW_H
#define LITENPU_WINDOW_H
#include "npu.h"

typedef struct {
    int64_t h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, hq, wq;
} window_t;

enum { WIN_DW, WIN_MAX, WIN_AVG };

static inline window_t window_of(int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh,
                                 int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                                 int64_t pt, int64_t pl) {
    /* phase planes: OH rows (+ the deepest tap's row offset, + 1 spare row for the last
     * taps' overrun past the row end) of OW columns (+ the widest tap's column offset) */
    window_t g = {h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl,
                  oh + (kh - 1) * dh / sh + 1, ow + (kw - 1) * dw / sw};
    return g;
}

/* A windowed kernel over `planes` planes: plane q reads input plane q / mult (depthwise
 * channel multiplier; 1 for pooling), weights wk + q % per * KH*KW, bias[q % per]. */
typedef struct {
    window_t g;
    int kind;
    const float *x, *w, *bias, *recip, *res;
    float *y;
    act_t act;
    int64_t planes, mult, per, per_task;
    atomic_int *failed;  /* set by a task whose thread has no memory for its scratch */
} window_ctx;

/* Run cx->planes planes in tasks of whole planes; -1 when a thread found no memory for its
 * scratch. */
int windowed(window_ctx *cx);

#endif
