/* Bilinear resize of float32 NCHW planes (the Resize step's LINEAR method; its nearest one
 * is qeltwise.c's qresize), separably, with the index tables and weights the compiler made
 * (provider/npu/ops/resize.py), so coordinate modes cost nothing here. Rows first: per
 * output row, its two source rows blended by the row's weight into a line, then each output
 * column blends two of the line's values; columns first (an upsampling along H, where the
 * gathered values per column are the costly part: H x OW of them instead of OH x OW): each
 * source row a task needs is blended along W once, then each output row is two such rows
 * blended, whole vectors. Each blend is the numpy kernel's, (b - a) * f + a in float32 in
 * that order and never a fused multiply-add: both kernels give the same bits. A 64-channel
 * 16x16 plane upsampled 8x took 2.4 ms rows first, on one core. */
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
            int64_t first = h, last = -1;
            for (int64_t r = r0; r < r1; r++) {
                int64_t i = clamped(hlo[r], h), j = clamped(hhi[r], h);
                first = i < first ? i : first, first = j < first ? j : first;
                last = i > last ? i : last, last = j > last ? j : last;
            }
            float *mid = thread_scratch((last - first + 1) * ow);
            if (!mid) {
                atomic_store(a->failed, 1);
                return;
            }
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
