/* One width of rnn.c's recurrent product with R^T in blocks of RNN_BLOCK hidden units,
 * included once per width: RB_LANES floats per vector, RB(name) names this width's copy,
 * RB_ATTR its target. A 16-unit block is one vector per gate at 16 floats (AVX-512) and two
 * at 8: GCC lowers a 16-float vector type on an AVX2 target through the stack (a bidirectional
 * LSTM of 512 units ran 7x slower than onnxruntime's on an AVX2 EPYC that way). */

typedef float RB(vec) __attribute__((vector_size(RB_LANES * sizeof(float)), aligned(4)));

/* The gates' columns of blocks [b0, b1) into g (B x gates*H) = [g +] h @ R^T: a block's
 * accumulators (RNN_BLOCK / RB_LANES vectors per gate) stay in registers down its H rows. */
static inline __attribute__((always_inline)) void RB(blocks_of)(
        float *restrict g, const float *restrict h, const float *restrict rb, int64_t B,
        int64_t H, int gates, int64_t b0, int64_t b1, int accumulate) {
    enum { PARTS = RNN_BLOCK / RB_LANES };
    int64_t G = gates * H;
    for (int64_t blk = b0; blk < b1; blk++) {
        const float *base = rb + blk * H * gates * RNN_BLOCK;
        for (int64_t row = 0; row < B; row++) {
            float *out = g + row * G + blk * RNN_BLOCK;
            RB(vec) acc[4][PARTS];
            for (int q = 0; q < gates; q++)
                for (int v = 0; v < PARTS; v++)
                    acc[q][v] = accumulate ? *(const RB(vec) *)(out + q * H + v * RB_LANES)
                                           : (RB(vec)){0};
            for (int64_t k = 0; k < H; k++) {
                float hk = h[row * H + k];
                const float *rk = base + k * gates * RNN_BLOCK;
                for (int q = 0; q < gates; q++)
                    for (int v = 0; v < PARTS; v++)
                        acc[q][v] += hk * *(const RB(vec) *)(rk + q * RNN_BLOCK + v * RB_LANES);
            }
            for (int q = 0; q < gates; q++)
                for (int v = 0; v < PARTS; v++)
                    *(RB(vec) *)(out + q * H + v * RB_LANES) = acc[q][v];
        }
    }
}

RB_ATTR static void RB(recurrent_blocks)(float *restrict g, const float *restrict h,
                                         const float *restrict rb, int64_t B, int64_t H,
                                         int gates, int64_t b0, int64_t b1, int accumulate) {
    /* a constant count per call: the gate loops unroll */
    if (gates == 4) RB(blocks_of)(g, h, rb, B, H, 4, b0, b1, accumulate);
    else if (gates == 3) RB(blocks_of)(g, h, rb, B, H, 3, b0, b1, accumulate);
    else RB(blocks_of)(g, h, rb, B, H, 1, b0, b1, accumulate);
}

#undef RB_LANES
#undef RB
#undef RB_ATTR
