/* Bilinear and bicubic resize of float32 NCHW planes (the Resize step's LINEAR and CUBIC
 * methods; its nearest one is qeltwise.c's qresize), separably, with the index tables and
 * weights the compiler made (provider/npu/ops/resize.py), so coordinate modes cost nothing
 * here. Bilinear rows first: per output row, its two source rows blended by the row's
 * weight into a line, then each output column blends two of the line's values; columns
 * first (an upsampling along H, where the gathered values per column are the costly part:
 * H x OW of them instead of OH x OW): each source row a task needs is blended along W once,
 * then each output row is two such rows blended, whole vectors. Each blend is the numpy
 * kernel's, (b - a) * f + a in float32 in that order and never a fused multiply-add: both
 * kernels give the same bits. A 64-channel 16x16 plane upsampled 8x took 2.4 ms rows
 * first, on one core. Bicubic: see its section below. */
#include "npu.h"

enum { RL_PLANES, RL_H, RL_W, RL_OH, RL_OW, RL_COLUMNS_FIRST };
enum { RL_X, RL_HLO, RL_HHI, RL_HFRAC, RL_WLO, RL_WHI, RL_WFRAC, RL_Y };

typedef struct {
    const lnpu_step *s;
    void **slots;
    int64_t chunk;       /* output rows per task */
    atomic_int *failed;  /* a task found no memory for its line */
} resize_args;

static inline int64_t clamped(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* The source rows [first, last] that output rows [r0, r1) of a plane read (each row's
 * `count` taps: taps[j][r * stride]) and thread scratch for them resized along W (OW
 * floats a row); NULL, the failure flagged, when the thread has no memory for it. */
static float *source_rows(const resize_args *a, const int64_t *const *taps, int count,
                          int64_t stride, int64_t r0, int64_t r1, int64_t *first, int64_t *last) {
    int64_t h = a->s->p[RL_H], ow = a->s->p[RL_OW];
    *first = h, *last = -1;
    for (int64_t r = r0; r < r1; r++)
        for (int j = 0; j < count; j++) {
            int64_t i = clamped(taps[j][r * stride], h);
            *first = i < *first ? i : *first, *last = i > *last ? i : *last;
        }
    float *mid = thread_scratch((*last - *first + 1) * ow);
    if (!mid) atomic_store(a->failed, 1);
    return mid;
}

__attribute__((optimize("fp-contract=off"))) static void resize_linear_task(const void *ctx,
                                                                              int64_t t) {
    const resize_args *a = ctx;
    const int64_t *p = a->s->p;
    const int64_t *slot = a->s->slot;
    void **slots = a->slots;
    int64_t h = p[RL_H], w = p[RL_W], oh = p[RL_OH], ow = p[RL_OW];
    int64_t k0 = t * a->chunk, k1 = k0 + a->chunk < p[RL_PLANES] * oh ? k0 + a->chunk : p[RL_PLANES] * oh;
    const float *x = slots[slot[RL_X]], *hfrac = slots[slot[RL_HFRAC]], *wfrac = slots[slot[RL_WFRAC]];
    const int64_t *hlo = slots[slot[RL_HLO]], *hhi = slots[slot[RL_HHI]];
    const int64_t *wlo = slots[slot[RL_WLO]], *whi = slots[slot[RL_WHI]];
    float *y = slots[slot[RL_Y]];
    if (p[RL_COLUMNS_FIRST]) {  /* per plane of the task's rows: its source rows, then rows */
        for (int64_t k = k0; k < k1;) {
            int64_t plane = k / oh, r0 = k % oh, r1 = k1 - plane * oh < oh ? k1 - plane * oh : oh;
            const int64_t *taps[2] = {hlo, hhi};
            int64_t first, last;
            float *mid = source_rows(a, taps, 2, 1, r0, r1, &first, &last);
            if (!mid) return;
            for (int64_t i = first; i <= last; i++) {
                const float *in = x + (plane * h + i) * w;
                float *m = mid + (i - first) * ow;
                for (int64_t c = 0; c < ow; c++) {
                    float left = in[clamped(wlo[c], w)];
                    m[c] = (in[clamped(whi[c], w)] - left) * wfrac[c] + left;
                }
            }
            for (int64_t r = r0; r < r1; r++) {
                const float *top = mid + (clamped(hlo[r], h) - first) * ow;
                const float *bottom = mid + (clamped(hhi[r], h) - first) * ow;
                float f = hfrac[r], *out = y + (plane * oh + r) * ow;
                for (int64_t c = 0; c < ow; c++) out[c] = (bottom[c] - top[c]) * f + top[c];
            }
            k = plane * oh + r1;
        }
        return;
    }
    float *line = thread_scratch(w);
    if (!line) {
        atomic_store(a->failed, 1);
        return;
    }
    for (int64_t k = k0; k < k1; k++) {
        int64_t plane = k / oh, r = k % oh;
        const float *top = x + (plane * h + clamped(hlo[r], h)) * w;
        const float *bottom = x + (plane * h + clamped(hhi[r], h)) * w;
        float f = hfrac[r];
        for (int64_t c = 0; c < w; c++) line[c] = (bottom[c] - top[c]) * f + top[c];
        float *out = y + k * ow;
        for (int64_t c = 0; c < ow; c++) {
            float left = line[clamped(wlo[c], w)];
            out[c] = (line[clamped(whi[c], w)] - left) * wfrac[c] + left;
        }
    }
}

/* Returns -1 when a core found no memory for its line. */
int resize_linear(const lnpu_step *s, void **slots) {
    int64_t rows = s->p[RL_PLANES] * s->p[RL_OH];
    if (!rows || !s->p[RL_OW] || !s->p[RL_W]) return 0;
    atomic_int failed = 0;
    /* a line and a row of outputs per output row, ~1 ns per float on one core */
    double ns = (double)rows * (double)(s->p[RL_W] + s->p[RL_OW]);
    resize_args a = {s, slots, per_task(rows, task_count(ns, rows)), &failed};
    parallel(resize_linear_task, &a, (rows + a.chunk - 1) / a.chunk);
    return atomic_load(&failed) ? -1 : 0;
}

/* ---- bicubic ------------------------------------------------------------------------------
 *
 * Columns first, as onnxruntime sums it: each source row a task's output rows read is
 * resized along W once (four taps per output column), then each output row sums four such
 * rows, whole vectors. Every sum is ((a w0 + b w1) + c w2) + d w3 in float32, no fused
 * multiply-add: the numpy kernel's bits. */
/* parameters: the linear step's first five (RL_PLANES .. RL_OW) */
enum { RC_X, RC_HINDEX, RC_HWEIGHT, RC_WINDEX, RC_WWEIGHT, RC_Y };

__attribute__((optimize("fp-contract=off"))) static void resize_cubic_task(const void *ctx,
                                                                             int64_t t) {
    const resize_args *a = ctx;
    const int64_t *p = a->s->p, *slot = a->s->slot;
    void **slots = a->slots;
    int64_t h = p[RL_H], w = p[RL_W], oh = p[RL_OH], ow = p[RL_OW];
    int64_t k0 = t * a->chunk, k1 = k0 + a->chunk < p[RL_PLANES] * oh ? k0 + a->chunk : p[RL_PLANES] * oh;
    const float *x = slots[slot[RC_X]], *hw = slots[slot[RC_HWEIGHT]], *ww = slots[slot[RC_WWEIGHT]];
    const int64_t *hi = slots[slot[RC_HINDEX]], *wi = slots[slot[RC_WINDEX]];
    float *y = slots[slot[RC_Y]];
    for (int64_t k = k0; k < k1;) {  /* per plane of the task's rows: its source rows, then rows */
        int64_t plane = k / oh, r0 = k % oh, r1 = k1 - plane * oh < oh ? k1 - plane * oh : oh;
        const int64_t *taps[4] = {hi, hi + 1, hi + 2, hi + 3};
        int64_t first, last;
        float *mid = source_rows(a, taps, 4, 4, r0, r1, &first, &last);
        if (!mid) return;
        for (int64_t i = first; i <= last; i++) {
            const float *in = x + (plane * h + i) * w;
            float *m = mid + (i - first) * ow;
            for (int64_t c = 0; c < ow; c++) {
                const int64_t *ci = wi + 4 * c;
                const float *cw = ww + 4 * c;
                m[c] = ((in[clamped(ci[0], w)] * cw[0] + in[clamped(ci[1], w)] * cw[1])
                        + in[clamped(ci[2], w)] * cw[2]) + in[clamped(ci[3], w)] * cw[3];
            }
        }
        for (int64_t r = r0; r < r1; r++) {
            const float *rows[4];
            for (int j = 0; j < 4; j++) rows[j] = mid + (clamped(hi[4 * r + j], h) - first) * ow;
            const float *f = hw + 4 * r;
            float *out = y + (plane * oh + r) * ow;
            for (int64_t c = 0; c < ow; c++)
                out[c] = ((rows[0][c] * f[0] + rows[1][c] * f[1]) + rows[2][c] * f[2]) + rows[3][c] * f[3];
        }
        k = plane * oh + r1;
    }
}

/* resize_cubic: planes, H, W, OH, OW; slots x, row indices and weights (OH x 4), column
 * indices and weights (OW x 4), y. Returns -1 when a core found no memory for its rows. */
int resize_cubic(const lnpu_step *s, void **slots) {
    int64_t rows = s->p[RL_PLANES] * s->p[RL_OH];
    if (!rows || !s->p[RL_OW] || !s->p[RL_W]) return 0;
    atomic_int failed = 0;
    /* four taps per value of the columns pass and of the output, ~1 ns per tap */
    double ns = (double)rows * (double)s->p[RL_OW] * 8.0;
    resize_args a = {s, slots, per_task(rows, task_count(ns, rows)), &failed};
    parallel(resize_cubic_task, &a, (rows + a.chunk - 1) / a.chunk);
    return atomic_load(&failed) ? -1 : 0;
}
