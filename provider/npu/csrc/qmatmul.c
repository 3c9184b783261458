/* The integer MatMul of two run-time code tensors (provider/npu/ops/quant_conv.py's qmatmul:
 * an int8 transformer's attention scores and their product with V): y = requant((a - za) @
 * (b - zb)) per matrix of a batch, exact int32 sums, requantized as every integer kernel here
 * (code_of: float32(sum) * multiplier, clamped, rounded half to even, plus zy).
 *
 * Each task packs its matrix of b as int16 differences (b - zb) once and computes rows of a
 * against it, one row of int32 sums at a time. A matrix broadcast over the batch (batch
 * stride 0) is read in place. |a - za| and |b - zb| are at most 255, so K up to 33000 keeps
 * the sums exact in int32 (the lowering checks it).
 */
#include "npu.h"

/* parameters: batch, M, K, N, a's and b's batch strides in codes (0: one matrix for all),
 * 1 for int8 a / b codes (else uint8), za, zb, zy, the output clamp [lo, hi]; f[0]: the
 * multiplier */
enum { QM_BATCH, QM_M, QM_K, QM_N, QM_ABATCH, QM_BBATCH, QM_ASIGNED, QM_BSIGNED, QM_ZA, QM_ZB,
       QM_ZY, QM_LO, QM_HI };

typedef struct {
    const int64_t *p;
    const uint8_t *a, *b;
    uint8_t *y;
    float mult;
    int64_t chunks, rows;  /* tasks per matrix, rows of a per task */
    atomic_int *failed;
} qmm_ctx;

static inline int32_t code_at(const uint8_t *x, int64_t i, int64_t is_signed) {
    return is_signed ? (int32_t)(int8_t)x[i] : (int32_t)x[i];
}

MULTIVERSION static void qmm_task(const void *ctx, int64_t t) {
    const qmm_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t m = p[QM_M], k = p[QM_K], n = p[QM_N], mat = t / cx->chunks;
    int64_t r0 = t % cx->chunks * cx->rows, r1 = r0 + cx->rows < m ? r0 + cx->rows : m;
    int32_t *acc = (int32_t *)thread_scratch(n + (k * n + 1) / 2);
    if (!acc) {
        atomic_store(cx->failed, 1);
        return;
    }
    int16_t *bp = (int16_t *)(acc + n);
    const uint8_t *b = cx->b + mat * p[QM_BBATCH];
    int32_t za = (int32_t)p[QM_ZA], zb = (int32_t)p[QM_ZB], zy = (int32_t)p[QM_ZY];
    for (int64_t i = 0; i < k * n; i++) bp[i] = (int16_t)(code_at(b, i, p[QM_BSIGNED]) - zb);
    float lo = (float)(p[QM_LO] - zy), hi = (float)(p[QM_HI] - zy);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *a = cx->a + mat * p[QM_ABATCH] + r * k;
        for (int64_t j = 0; j < n; j++) acc[j] = 0;
        for (int64_t q = 0; q < k; q++) {
            int32_t av = code_at(a, q, p[QM_ASIGNED]) - za;
            const int16_t *row = bp + q * n;
            for (int64_t j = 0; j < n; j++) acc[j] += av * row[j];
        }
        uint8_t *y = cx->y + (mat * m + r) * n;
        for (int64_t j = 0; j < n; j++)
            y[j] = (uint8_t)code_of((float)acc[j] * cx->mult, lo, hi, zy);
    }
}

/* Returns -1 when there is no host memory for a task's scratch. */
int qmatmul(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t batch = p[QM_BATCH], m = p[QM_M];
    if (batch * m * p[QM_N] == 0) return 0;
    atomic_int failed = 0;
    double macs = (double)batch * m * p[QM_K] * p[QM_N];
    int64_t tasks = task_count(macs / (GEMM_MACS_PER_NS / 8), batch * m);
    int64_t chunks = (tasks + batch - 1) / batch, rows = per_task(m, chunks);
    qmm_ctx cx = {p, slots[s->slot[0]], slots[s->slot[1]], slots[s->slot[2]], s->f[0],
                  (m + rows - 1) / rows, rows, &failed};
    parallel(qmm_task, &cx, batch * cx.chunks);
    return atomic_load(&failed) ? -1 : 0;
}
