/* Recurrent layers: LSTM (gates i, o, f, c) and GRU (gates z, r, h, the reset gate applied
 * after the recurrent product), ONNX's equations, one direction per task.
 *
 * rnn: p[0] T, p[1] B, p[2] I, p[3] H, p[4] D, p[5] kind (0 LSTM, 1 GRU); slots 0 x
 * (T, B, I), 1 W^T (D, I, G*H), 2 R^T (D, H, G*H), 3 bias (D, G*H), 4 the GRU's recurrent
 * bias of the new gate (D, H) or -1, 5 h0 (D, B, H) or -1, 6 c0 or -1, 7 Y (T, D, B, H) or
 * -1, 8 Y_h (D, B, H) or -1, 9 Y_c or -1, 10 the scratch X @ W (D, T, B, G*H). Sequence
 * lengths (checked per run against T) stay on the numpy kernel. */
#include "npu.h"

typedef struct {
    const lnpu_step *s;
    void **slots;
    int status;
} rnn_ctx;

/* g (B x G) = [g +] h (B x H) @ r (H x G): for the few rows of a recurrent step a plain loop
 * (vectorized along G) beats a BLAS call's overhead. */
MULTIVERSION static void recurrent(float *restrict g, const float *restrict h,
                                   const float *restrict r, int64_t B, int64_t H, int64_t G,
                                   int accumulate) {
    if (B > 4) {
        sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)B, (int)G, (int)H, 1.0f, h, (int)H, r, (int)G,
              accumulate ? 1.0f : 0.0f, g, (int)G);
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        float *out = g + b * G;
        if (!accumulate)
            for (int64_t j = 0; j < G; j++) out[j] = 0.0f;
        for (int64_t k = 0; k < H; k++) {
            float hk = h[b * H + k];
            const float *row = r + k * G;
            for (int64_t j = 0; j < G; j++) out[j] += hk * row[j];
        }
    }
}

MULTIVERSION static void lstm_gates(float *restrict h, float *restrict c,
                                    const float *restrict g, float *restrict y, int64_t H) {
    for (int64_t j = 0; j < H; j++) {
        float i = fsigmoid(g[j]), o = fsigmoid(g[H + j]), f = fsigmoid(g[2 * H + j]), cand = ftanh(g[3 * H + j]);
        c[j] = f * c[j] + i * cand;
        h[j] = o * ftanh(c[j]);
        if (y) y[j] = h[j];
    }
}

MULTIVERSION static void gru_gates(float *restrict h, const float *restrict xw,
                                   const float *restrict hr, const float *restrict rb,
                                   float *restrict y, int64_t H) {
    for (int64_t j = 0; j < H; j++) {
        float z = fsigmoid(xw[j] + hr[j]), r = fsigmoid(xw[H + j] + hr[H + j]);
        float n = ftanh(xw[2 * H + j] + r * (hr[2 * H + j] + rb[j]));
        h[j] = n + z * (h[j] - n);
        if (y) y[j] = h[j];
    }
}

static void rnn_direction(const void *ctx, int64_t d) {
    rnn_ctx *cx = (rnn_ctx *)ctx;
    const int64_t *p = cx->s->p;
    const int64_t *slot = cx->s->slot;
    void **slots = cx->slots;
    int64_t T = p[0], B = p[1], I = p[2], H = p[3], D = p[4], gru = p[5] == 1;
    int64_t G = gru ? 3 * H : 4 * H;
    const float *x = slots[slot[0]];
    const float *wt = (const float *)slots[slot[1]] + d * I * G;
    const float *rt = (const float *)slots[slot[2]] + d * H * G;
    const float *bias = (const float *)slots[slot[3]] + d * G;
    const float *rb = slot[4] >= 0 ? (const float *)slots[slot[4]] + d * H : NULL;
    float *Y = slot[7] >= 0 ? slots[slot[7]] : NULL;
    float *xw = (float *)slots[slot[10]] + d * T * B * G;
    /* X @ W + bias for every step at once; few steps on rowgemm's tiles (in this task: a
     * direction is one), which read W in place where OpenBLAS packed it for every call.
     * Before this task's scratch is taken: rowgemm takes it too. */
    if (row_gemm_takes(T * B, G, I, 0)) {
        act_t none = {ACT_CLAMP, -INFINITY, INFINITY, 0.0f};
        if (row_gemm(T * B, G, I, x, wt, bias, xw, none, 0)) {
            cx->status = -1;
            return;
        }
    } else {
        if (T * B > 0)
            sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)(T * B), (int)G, (int)I, 1.0f, x, (int)I,
                  wt, (int)G, 0.0f, xw, (int)G);
        for (int64_t r = 0; r < T * B; r++)
            for (int64_t j = 0; j < G; j++) xw[r * G + j] += bias[j];
    }
    float *mem = thread_scratch(2 * B * H + B * G);
    if (!mem) {
        cx->status = -1;
        return;
    }
    float *h = mem, *c = mem + B * H, *g = mem + 2 * B * H;
    if (slot[5] >= 0) memcpy(h, (const float *)slots[slot[5]] + d * B * H, B * H * sizeof(float));
    else memset(h, 0, B * H * sizeof(float));
    if (!gru && slot[6] >= 0)
        memcpy(c, (const float *)slots[slot[6]] + d * B * H, B * H * sizeof(float));
    else memset(c, 0, B * H * sizeof(float));
    for (int64_t step = 0; step < T; step++) {
        int64_t t = d == 0 ? step : T - 1 - step;
        const float *xt = xw + t * B * G;
        if (!gru) memcpy(g, xt, B * G * sizeof(float));
        recurrent(g, h, rt, B, H, G, !gru);
        for (int64_t b = 0; b < B; b++) {
            float *y = Y ? Y + ((t * D + d) * B + b) * H : NULL;
            if (gru) gru_gates(h + b * H, xt + b * G, g + b * G, rb, y, H);
            else lstm_gates(h + b * H, c + b * H, g + b * G, y, H);
        }
    }
    if (slot[8] >= 0) memcpy((float *)slots[slot[8]] + d * B * H, h, B * H * sizeof(float));
    if (!gru && slot[9] >= 0) memcpy((float *)slots[slot[9]] + d * B * H, c, B * H * sizeof(float));
}

int rnn(const lnpu_step *s, void **slots) {
    rnn_ctx cx = {s, slots, 0};
    parallel(rnn_direction, &cx, s->p[4]);
    return cx.status;
}
