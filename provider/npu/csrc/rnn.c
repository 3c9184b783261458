/* Recurrent layers: LSTM (gates i, o, f, c), GRU (gates z, r, h, the reset gate applied
 * after the recurrent product or, p[7], to h before it) and ONNX's RNN (Tanh or Relu),
 * ONNX's equations.
 *
 * rnn: p[0] T, p[1] B, p[2] I, p[3] H, p[4] D, p[5] kind (0 LSTM, 1 GRU, 2 RNN Tanh, 3 RNN
 * Relu), p[6] R^T in blocks (never with p[7]), p[7] the GRU's reset before the product, p[8]
 * the one direction walked from the last step; slots 0 x (T, B, I), 1 W^T (D, I, G*H),
 * 2 R^T (D, H, G*H), or in blocks (D, H/16, H, G, 16: ops/rnn.py's `blocks`), 3 bias
 * (D, G*H), 4 the GRU's recurrent bias of the new gate (D, H) or -1, 5 h0 (D, B, H) or -1,
 * 6 c0 or -1, 7 Y (T, D, B, H) or -1, 8 Y_h (D, B, H) or -1, 9 Y_c or -1, 10 the scratch
 * X @ W (D, T, B, G*H). Sequence lengths (checked per run against T) stay on the numpy
 * kernel.
 *
 * Each direction's X @ W comes first, for all steps at once. Then the recurrence: one task
 * per direction, or, with R^T in blocks (a big one), the directions one after the other,
 * each step cut over the cores by blocks of hidden units. A core then reads a contiguous
 * share of R^T at every step and finds it in its own cache: a task takes the share its
 * thread took the step before. (Rows of R^T cut by columns were slower than one direction
 * per core: their segments, a row apart, fell in few cache sets.) */
#include "npu.h"

#define RNN_BLOCK 16  /* hidden units per block of R^T */
#define RNN_MAX_SHARES 64

enum { RNN_LSTM, RNN_GRU, RNN_TANH, RNN_RELU };

/* The gates of the step's kind, and G: their columns of R^T and of X @ W. */
static inline int gate_count(const int64_t *p) {
    return p[5] == RNN_LSTM ? 4 : p[5] == RNN_GRU ? 3 : 1;
}
static inline int64_t gate_columns(const int64_t *p) { return gate_count(p) * p[3]; }

/* The time index of direction d's step-th step. */
static inline int64_t time_of(const int64_t *p, int64_t d, int64_t step) {
    return d == 0 && !p[8] ? step : p[0] - 1 - step;
}

typedef struct {
    const lnpu_step *s;
    void **slots;
    int status;
    /* a step cut over the cores: direction d, time t; h[cur] holds h(t-1), h[!cur] gets
     * h(t); shares of `per` hidden units, each claimed by one task */
    int64_t d, t, shares, per;
    float *h[2], *c, *g;
    int cur;
    atomic_int claimed[RNN_MAX_SHARES];
} rnn_ctx;

/* g (B x N) = [g +] h (B x H) @ r (H x N), rows of g and r `ld` floats apart: for the few
 * rows of a recurrent step a plain loop (vectorized along N) beats a BLAS call's overhead. */
MULTIVERSION static void recurrent(float *restrict g, const float *restrict h,
                                   const float *restrict r, int64_t B, int64_t H, int64_t N,
                                   int64_t ld, int accumulate) {
    if (B > 4) {
        sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)B, (int)N, (int)H, 1.0f, h, (int)H, r, (int)ld,
              accumulate ? 1.0f : 0.0f, g, (int)ld);
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        float *out = g + b * ld;
        if (!accumulate)
            for (int64_t j = 0; j < N; j++) out[j] = 0.0f;
        for (int64_t k = 0; k < H; k++) {
            float hk = h[b * H + k];
            const float *row = r + k * ld;
            for (int64_t j = 0; j < N; j++) out[j] += hk * row[j];
        }
    }
}

/* recurrent_blocks_16 (AVX-512, where the CPU has it) and recurrent_blocks_8 (the rest). */
#if defined(__x86_64__) && defined(__GNUC__)
#define RNN_WIDE 1
#define RB_LANES 16
#define RB(name) name##_16
#define RB_ATTR __attribute__((target("arch=x86-64-v4")))
#include "rnn_blocks.h"
#else
#define RNN_WIDE 0
#endif

#define RB_LANES 8
#define RB(name) name##_8
#define RB_ATTR MULTIVERSION
#include "rnn_blocks.h"

static void recurrent_blocks(float *restrict g, const float *restrict h,
                             const float *restrict rb, int64_t B, int64_t H, int gates,
                             int64_t b0, int64_t b1, int accumulate) {
#if RNN_WIDE
    if (vector_width() == 16) {
        recurrent_blocks_16(g, h, rb, B, H, gates, b0, b1, accumulate);
        return;
    }
#endif
    recurrent_blocks_8(g, h, rb, B, H, gates, b0, b1, accumulate);
}

/* Hidden units [0, n) of one batch row: gate q of unit j at g[q * H + j]. */
MULTIVERSION static void lstm_gates(float *restrict h, float *restrict c,
                                    const float *restrict g, float *restrict y, int64_t n,
                                    int64_t H) {
    for (int64_t j = 0; j < n; j++) {
        float i = fsigmoid(g[j]), o = fsigmoid(g[H + j]), f = fsigmoid(g[2 * H + j]), cand = ftanh(g[3 * H + j]);
        c[j] = f * c[j] + i * cand;
        h[j] = o * ftanh(c[j]);
        if (y) y[j] = h[j];
    }
}

/* Likewise for the GRU; h_in and h_out may be the same memory. */
MULTIVERSION static void gru_gates(const float *h_in, float *h_out, const float *restrict xw,
                                   const float *restrict hr, const float *restrict rb,
                                   float *restrict y, int64_t n, int64_t H) {
    for (int64_t j = 0; j < n; j++) {
        float z = fsigmoid(xw[j] + hr[j]), r = fsigmoid(xw[H + j] + hr[H + j]);
        float cand = ftanh(xw[2 * H + j] + r * (hr[2 * H + j] + rb[j]));
        h_out[j] = cand + z * (h_in[j] - cand);
        if (y) y[j] = h_out[j];
    }
}

/* ONNX's RNN: h = f(g), f Tanh or Relu (fmaxf: NaN gives 0, as onnxruntime's max). */
MULTIVERSION static void rnn_units(float *restrict h, const float *restrict g,
                                   float *restrict y, int64_t n, int relu) {
    for (int64_t j = 0; j < n; j++) {
        h[j] = relu ? fmaxf(g[j], 0.0f) : ftanh(g[j]);
        if (y) y[j] = h[j];
    }
}

/* Step t of a GRU whose reset gate scales h before the new gate's product (every unit; rows
 * of R^T): z and r from h's product with their columns, then (r * h) with the new gate's.
 * g: B x G scratch, rh: B x H scratch; y (or NULL): the step's B x H rows of Y; h_in and
 * h_out may be the same memory. */
MULTIVERSION static void gru_reset_before(const float *h_in, float *h_out,
                                          const float *restrict xt, float *restrict g,
                                          float *restrict rh, const float *restrict rt,
                                          const float *restrict rb, float *y, int64_t B,
                                          int64_t H) {
    int64_t G = 3 * H;
    recurrent(g, h_in, rt, B, H, 2 * H, G, 0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) {
            const float *x = xt + b * G, *q = g + b * G;
            g[b * G + j] = fsigmoid(x[j] + q[j]);
            rh[b * H + j] = fsigmoid(x[H + j] + q[H + j]) * h_in[b * H + j];
        }
    recurrent(g + 2 * H, rh, rt + 2 * H, B, H, H, G, 0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) {
            float z = g[b * G + j];
            float cand = ftanh(xt[b * G + 2 * H + j] + g[b * G + 2 * H + j] + rb[j]);
            float h = cand + z * (h_in[b * H + j] - cand);
            h_out[b * H + j] = h;
            if (y) y[b * H + j] = h;
        }
}

/* Direction d's X @ W + bias for every step at once; few steps on rowgemm's tiles, which
 * read W in place where OpenBLAS packed it for every call. */
static int project(const rnn_ctx *cx, int64_t d) {
    const int64_t *p = cx->s->p, *slot = cx->s->slot;
    int64_t T = p[0], B = p[1], I = p[2], G = gate_columns(p);
    const float *x = cx->slots[slot[0]];
    const float *wt = (const float *)cx->slots[slot[1]] + d * I * G;
    const float *bias = (const float *)cx->slots[slot[3]] + d * G;
    float *xw = (float *)cx->slots[slot[10]] + d * T * B * G;
    if (row_gemm_takes(T * B, G, I, 0)) {
        act_t none = {ACT_CLAMP, -INFINITY, INFINITY, 0.0f};
        return row_gemm(T * B, G, I, x, wt, bias, xw, none, 0);
    }
    if (T * B > 0)
        sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)(T * B), (int)G, (int)I, 1.0f, x, (int)I, wt,
              (int)G, 0.0f, xw, (int)G);
    for (int64_t r = 0; r < T * B; r++)
        for (int64_t j = 0; j < G; j++) xw[r * G + j] += bias[j];
    return 0;
}

static void project_task(const void *ctx, int64_t d) {
    rnn_ctx *cx = (rnn_ctx *)ctx;
    if (project(cx, d)) cx->status = -1;
}

/* Direction d's initial state into h (and c), from the inputs or zero. */
static void initial_state(const rnn_ctx *cx, int64_t d, float *h, float *c) {
    const int64_t *p = cx->s->p, *slot = cx->s->slot;
    int64_t B = p[1], H = p[3];
    if (slot[5] >= 0) memcpy(h, (const float *)cx->slots[slot[5]] + d * B * H, B * H * sizeof(float));
    else memset(h, 0, B * H * sizeof(float));
    if (p[5] != RNN_LSTM) return;
    if (slot[6] >= 0) memcpy(c, (const float *)cx->slots[slot[6]] + d * B * H, B * H * sizeof(float));
    else memset(c, 0, B * H * sizeof(float));
}

/* Direction d's final state into Y_h (and Y_c), where wanted. */
static void final_state(const rnn_ctx *cx, int64_t d, const float *h, const float *c) {
    const int64_t *p = cx->s->p, *slot = cx->s->slot;
    int64_t B = p[1], H = p[3];
    if (slot[8] >= 0) memcpy((float *)cx->slots[slot[8]] + d * B * H, h, B * H * sizeof(float));
    if (p[5] == RNN_LSTM && slot[9] >= 0)
        memcpy((float *)cx->slots[slot[9]] + d * B * H, c, B * H * sizeof(float));
}

/* Step t of direction d for hidden units [j0, j0 + n) (whole blocks with R^T in blocks; all
 * of them with R^T by rows): the gates' columns of those units (g: B x G scratch, then B x H
 * more for a reset-before GRU), then the new h into h_out, c in place, and Y. */
static void step_units(const rnn_ctx *cx, int64_t d, int64_t t, const float *h_in,
                       float *h_out, float *c, float *g, int64_t j0, int64_t n) {
    const int64_t *p = cx->s->p, *slot = cx->s->slot;
    int64_t T = p[0], B = p[1], H = p[3], D = p[4], gru = p[5] == RNN_GRU;
    int64_t G = gate_columns(p);
    int gates = gate_count(p);
    const float *rt = (const float *)cx->slots[slot[2]] + d * H * G;
    const float *xt = (const float *)cx->slots[slot[10]] + (d * T + t) * B * G;
    const float *rb = slot[4] >= 0 ? (const float *)cx->slots[slot[4]] + d * H : NULL;
    float *Y = slot[7] >= 0 ? cx->slots[slot[7]] : NULL;
    if (gru && p[7]) {
        gru_reset_before(h_in, h_out, xt, g, g + B * G, rt, rb,
                         Y ? Y + (t * D + d) * B * H : NULL, B, H);
        return;
    }
    if (!gru)
        for (int64_t b = 0; b < B; b++)
            for (int q = 0; q < gates; q++)
                memcpy(g + b * G + q * H + j0, xt + b * G + q * H + j0, n * sizeof(float));
    if (p[6])
        recurrent_blocks(g, h_in, rt, B, H, gates, j0 / RNN_BLOCK, (j0 + n) / RNN_BLOCK, !gru);
    else  /* R^T by rows: always every unit (one GEMM over all the gates' columns) */
        recurrent(g, h_in, rt, B, H, G, G, !gru);
    for (int64_t b = 0; b < B; b++) {
        float *y = Y ? Y + ((t * D + d) * B + b) * H + j0 : NULL;
        if (gru)
            gru_gates(h_in + b * H + j0, h_out + b * H + j0, xt + b * G + j0, g + b * G + j0,
                      rb + j0, y, n, H);
        else if (p[5] == RNN_LSTM)
            lstm_gates(h_out + b * H + j0, c + b * H + j0, g + b * G + j0, y, n, H);
        else
            rnn_units(h_out + b * H + j0, g + b * G + j0, y, n, p[5] == RNN_RELU);
    }
}

/* Direction d whole, on this thread (after its projection). */
static void direction_task(const void *ctx, int64_t d) {
    rnn_ctx *cx = (rnn_ctx *)ctx;
    const int64_t *p = cx->s->p;
    int64_t T = p[0], B = p[1], H = p[3], G = gate_columns(p);
    if (project(cx, d)) {  /* before this thread's scratch is taken: rowgemm takes it too */
        cx->status = -1;
        return;
    }
    float *mem = thread_scratch(3 * B * H + B * G);  /* h, c, g, and a reset-before GRU's r * h */
    if (!mem) {
        cx->status = -1;
        return;
    }
    float *h = mem, *c = mem + B * H, *g = mem + 2 * B * H;
    initial_state(cx, d, h, c);
    for (int64_t step = 0; step < T; step++)
        step_units(cx, d, time_of(p, d, step), h, h, c, g, 0, H);
    final_state(cx, d, h, c);
}

/* One share of the step in progress: the share this thread had the step before, when free. */
static void share_task(const void *ctx, int64_t task) {
    rnn_ctx *cx = (rnn_ctx *)ctx;
    (void)task;
    int64_t want = worker_index() % cx->shares, share = -1;
    for (int64_t i = 0; i < cx->shares && share < 0; i++) {
        int free = 0;
        if (atomic_compare_exchange_strong(&cx->claimed[(want + i) % cx->shares], &free, 1))
            share = (want + i) % cx->shares;
    }
    int64_t j0 = share * cx->per, H = cx->s->p[3];
    if (share < 0 || j0 >= H) return;
    int64_t n = H - j0 < cx->per ? H - j0 : cx->per;
    step_units(cx, cx->d, cx->t, cx->h[cx->cur], cx->h[!cx->cur], cx->c, cx->g, j0, n);
}

int rnn(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t T = p[0], B = p[1], H = p[3], D = p[4], G = gate_columns(p);
    rnn_ctx cx = {.s = s, .slots = slots};
    int64_t blocks = H / RNN_BLOCK;
    int64_t shares = cores() < RNN_MAX_SHARES ? cores() : RNN_MAX_SHARES;
    if (shares > blocks) shares = blocks;
    if (p[6] && p[7]) return -1;  /* a reset-before GRU's two products run by rows */
    if (!p[6] || shares < 2) {
        parallel(direction_task, &cx, D);
        return cx.status;
    }
    parallel(project_task, &cx, D);
    float *mem = cx.status ? NULL : thread_scratch(3 * B * H + B * G);
    if (!mem) return -1;
    cx.h[0] = mem, cx.h[1] = mem + B * H, cx.c = mem + 2 * B * H, cx.g = mem + 3 * B * H;
    cx.shares = shares;
    cx.per = (blocks + shares - 1) / shares * RNN_BLOCK;
    for (int64_t d = 0; d < D; d++) {
        cx.d = d;
        cx.cur = 0;
        initial_state(&cx, d, cx.h[0], cx.c);
        for (int64_t step = 0; step < T; step++) {
            cx.t = time_of(p, d, step);
            for (int64_t i = 0; i < shares; i++) atomic_store(&cx.claimed[i], 0);
            parallel(share_task, &cx, shares);
            cx.cur = !cx.cur;
        }
        final_state(&cx, d, cx.h[cx.cur], cx.c);
    }
    return 0;
}
