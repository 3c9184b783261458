/* Data movement: concat and transpose. */
#include "npu.h"

/* concat: outer, then bytes per outer index of each input (slots 0..k-1, output slot 15) */
void concat(const lnpu_step *s, void **slots) {
    int64_t outer = s->p[0], k = s->p[1];
    char *y = slots[s->slot[MAX_SLOTS - 1]];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < k; i++) {
            int64_t part = s->p[2 + i];
            memcpy(y, (const char *)slots[s->slot[i]] + o * part, part);
            y += part;
        }
    }
}

/* transpose: rank r (<= 6, the last output axis is contiguous in the input too when
 * p[1] > 1), p[1] bytes per innermost block, p[2..2+r) output shape, p[8..8+r) input
 * byte strides permuted to the output's axis order (negative for a reversed axis), p[14] the
 * byte offset of the first element read (a slice's start). Any strided view of x, copied out
 * contiguously: transposes, slices, SpaceToDepth. */
void transpose(const lnpu_step *s, void **slots) {
    int64_t r = s->p[0], block = s->p[1];
    const int64_t *shape = s->p + 2, *stride = s->p + 8;
    const char *x = (const char *)slots[s->slot[0]] + s->p[14];
    char *y = slots[s->slot[1]];
    int64_t idx[6] = {0};
    int64_t inner = shape[r - 1];
    for (int64_t d = 0; d < r; d++)
        if (shape[d] == 0) return;  /* empty: the odometer below visits at least one block */
    for (;;) {
        const char *src = x;
        for (int64_t d = 0; d < r - 1; d++) src += idx[d] * stride[d];
        if (block > 0) {
            memcpy(y, src, block);
            y += block;
        } else {
            for (int64_t i = 0; i < inner; i++, y += 4) memcpy(y, src + i * stride[r - 1], 4);
        }
        int64_t d = r - 2;
        while (d >= 0 && ++idx[d] == shape[d]) idx[d--] = 0;
        if (d < 0) break;
    }
}

