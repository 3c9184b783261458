/* TopK: the k best values of each line along one axis, sorted, and their indices. "Best"
 * is a strict total order, so the result is the numpy kernel's (provider/npu/ops/topk.py,
 * a stable sort): larger (smaller) values first, equal values by lower index, and NaNs
 * greatest (first when the largest are asked for, last otherwise), as numpy sorts them.
 *
 * float32 and int32 values (lines under 2^32 long: the lowering's bound) go by keys: one uint64 per value whose
 * order is that order, the value's rank-preserving 32 bits above its index, so a compare
 * is one integer compare. A line is scanned once; a value whose key beats the worst of the
 * k best kept so far joins a buffer, and a full buffer is cut back to its k best (a
 * quickselect), so the work is linear in the line plus k log k to sort the k at the end.
 * Lines along an inner axis (a detector's [1, 8400, 80] scores, axis 1) are scanned
 * TK_GROUP at a time, one row of the group per step, so each cache line of the input is
 * read once, not once per line. Through the EP, one core, against onnxruntime 1.32's CPU EP
 * in the same process (Xeon, AVX-512; before -> after, onnxruntime's time in brackets),
 * float32: k=100 of 8400 90 -> 41 us (46); k=300 of 8400 in 80 lines 15.8 -> 7.5 ms
 * (11.2), the same along axis 1 16.8 -> 7.4 ms (11.4); k=1000 of 25200 712 -> 287 us
 * (541); k=5 of 1000 in 64 lines 351 -> 241 us (183).
 * int64 values keep a heap per line whose root is the worst kept (n log k), then sort it. */
#include "npu.h"

enum { TK_OUTER, TK_N, TK_INNER, TK_K, TK_LARGEST, TK_XTYPE, TK_ITYPE };

#define TK_GROUP 16    /* lines of an inner axis scanned together: a cache line of floats */
#define TK_SLACK 16    /* a line's buffer holds 2k + TK_SLACK keys */

/* ---- keys (float32, int32) -------------------------------------------------------------- */

/* The value's 32 bits in an unsigned order equal to numpy's: -0 as 0, NaNs above +inf. */
static inline uint32_t rank_f32(float v) {
    uint32_t b;
    if (v != v) return 0xffffffffu;
    if (v == 0.0f) v = 0.0f;
    memcpy(&b, &v, sizeof b);
    return b & 0x80000000u ? ~b : b | 0x80000000u;
}

static inline uint32_t rank_i32(int32_t v) { return (uint32_t)v ^ 0x80000000u; }

/* The smallest key is the best: the (flipped, when the largest are asked for) rank, then
 * the index. */
static inline uint64_t key_of(uint32_t rank, int64_t j, int largest) {
    return (uint64_t)(largest ? ~rank : rank) << 32 | (uint64_t)j;
}

static void insertion_sort(uint64_t *a, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        int64_t j = i;
        for (; j > 0 && a[j - 1] > v; j--) a[j] = a[j - 1];
        a[j] = v;
    }
}

static void sift_max(uint64_t *a, int64_t n, int64_t at) {
    for (;;) {
        int64_t big = at, l = 2 * at + 1, r = l + 1;
        if (l < n && a[l] > a[big]) big = l;
        if (r < n && a[r] > a[big]) big = r;
        if (big == at) return;
        uint64_t t = a[at];
        a[at] = a[big], a[big] = t, at = big;
    }
}

static void heap_sort(uint64_t *a, int64_t n) {
    for (int64_t at = n / 2 - 1; at >= 0; at--) sift_max(a, n, at);
    for (int64_t end = n - 1; end > 0; end--) {
        uint64_t t = a[0];
        a[0] = a[end], a[end] = t;
        sift_max(a, end, 0);
    }
}

/* Put the k smallest of a[0..n) (distinct keys) first, in order when `sorted`: quickselect
 * (a median of three, Hoare's partition) that goes on into the part before k only when
 * sorting, and a heap sort when the partitions stay lopsided (`depth` runs out). */
static void select_keys(uint64_t *a, int64_t n, int64_t k, int depth, int sorted) {
    while (n > 16) {
        if (depth-- == 0) {
            heap_sort(a, n);
            return;
        }
        uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
        uint64_t pivot = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
        int64_t i = -1, j = n;
        for (;;) {  /* the median of three distinct keys is neither end: both parts nonempty */
            do i++; while (a[i] < pivot);
            do j--; while (a[j] > pivot);
            if (i >= j) break;
            uint64_t t = a[i];
            a[i] = a[j], a[j] = t;
        }
        int64_t left = j + 1;  /* a[0..left) <= pivot <= a[left..n) */
        if (left < k) {
            select_keys(a + left, n - left, k - left, depth, sorted);
            if (!sorted) return;
        }
        n = left;
        if (k > n) k = n;
    }
    insertion_sort(a, n);
}

static int depth_for(int64_t n) {
    int d = 0;
    while (n > 1) n >>= 1, d += 2;
    return d;
}

/* One line of the group: its buffer of candidate keys and the worst key it keeps. */
typedef struct {
    uint64_t *keys;
    int64_t count;
    uint64_t worst;
} tk_line;

/* Cut a full buffer back to its k best and take the worst of them as the bar. */
static void tk_cut(tk_line *ln, int64_t k) {
    select_keys(ln->keys, ln->count, k, depth_for(ln->count), 0);
    ln->count = k;
    uint64_t w = 0;
    for (int64_t i = 0; i < k; i++) w = ln->keys[i] > w ? ln->keys[i] : w;
    ln->worst = w;
}

/* Key j of line l (value v): kept when it beats the line's worst; a full buffer is cut. */
#define TK_TAKE(v, j, l, RANK, FLIP)                                                             \
    do {                                                                                     \
        uint64_t key_ = key_of(RANK(v), (j), largest);                                       \
        tk_line *ln_ = &lines[l];                                                            \
        if (key_ < ln_->worst) {                                                             \
            ln_->keys[ln_->count++] = key_;                                                  \
            if (ln_->count == cap) {                                                         \
                tk_cut(ln_, k);                                                              \
                bar[l] = FLIP(x[(int64_t)(ln_->worst & 0xffffffffu) * inner + (l)], f);      \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* The scan of `g` lines x[l], x[l + inner], ... (n values each). The first `cap` rows fill
 * the buffers; after the first cut each line has a bar, its worst kept value with the
 * order flipped so that larger is better (FLIP by f), and a row (a block of TK_BLOCK values
 * of a lone line) none of whose values beats its bar in a vector compare is passed over
 * (a NaN fails the compare, so it is looked at). */
#define TK_BLOCK 16
#define TK_SCAN_DEFINE(NAME, T, RANK, FLIP, F_LARGEST, F_SMALLEST)                            \
    MULTIVERSION static void NAME(const T *restrict x, int64_t n, int64_t inner, int64_t g,  \
                                  int64_t k, int largest, tk_line *lines, int64_t cap) {     \
        T f = largest ? F_LARGEST : F_SMALLEST, bar[TK_GROUP];                               \
        int64_t j = 0;                                                                       \
        for (; j < n && j < cap; j++)                                                        \
            for (int64_t l = 0; l < g; l++) TK_TAKE(x[j * inner + l], j, l, RANK, FLIP);           \
        while (j < n) {                                                                      \
            int any = 0;                                                                     \
            if (g == 1) {                                                                    \
                int64_t m = n - j < TK_BLOCK ? n - j : TK_BLOCK;                             \
                for (int64_t i = 0; i < m; i++) any |= !(FLIP(x[(j + i) * inner], f) <= bar[0]); \
                for (int64_t i = 0; any && i < m; i++)                                       \
                    if (!(FLIP(x[(j + i) * inner], f) <= bar[0]))                                \
                        TK_TAKE(x[(j + i) * inner], j + i, 0, RANK, FLIP);                       \
                j += m;                                                                      \
            } else {                                                                         \
                const T *row = x + j * inner;                                                \
                for (int64_t l = 0; l < g; l++) any |= !(FLIP(row[l], f) <= bar[l]);        \
                for (int64_t l = 0; any && l < g; l++)                                       \
                    if (!(FLIP(row[l], f) <= bar[l])) TK_TAKE(row[l], j, l, RANK, FLIP);          \
                j++;                                                                         \
            }                                                                                \
        }                                                                                    \
    }
#define FLIP_F32(v, f) ((v) * (f))
#define FLIP_I32(v, f) ((v) ^ (f))
TK_SCAN_DEFINE(scan_f32, float, rank_f32, FLIP_F32, 1.0f, -1.0f)
TK_SCAN_DEFINE(scan_i32, int32_t, rank_i32, FLIP_I32, 0, -1)
#undef TK_SCAN_DEFINE
#undef TK_TAKE

/* The k best of `g` lines x[l], x[l + inner], ... (n values each) sorted into each line's
 * keys[0..k). */
static void tk_keys(const void *x, int xtype, int64_t n, int64_t inner, int64_t g, int64_t k,
                    int largest, tk_line *lines, int64_t cap) {
    if (xtype == ET_F32) scan_f32(x, n, inner, g, k, largest, lines, cap);
    else scan_i32(x, n, inner, g, k, largest, lines, cap);
    for (int64_t l = 0; l < g; l++)
        select_keys(lines[l].keys, lines[l].count, k, depth_for(lines[l].count), 1);
}

/* ---- a heap per line (int64) -------------------------------------------------------------- */

typedef struct { int64_t v, i; } tk_item;

static inline int tk_better(tk_item a, tk_item b, int largest) {
    if (a.v != b.v) return largest ? a.v > b.v : a.v < b.v;
    return a.i < b.i;
}

/* sift heap[at] down a heap of `size` items whose root is the worst */
static void tk_sift(tk_item *heap, int64_t size, int64_t at, int largest) {
    for (;;) {
        int64_t worst = at, l = 2 * at + 1, r = l + 1;
        if (l < size && tk_better(heap[worst], heap[l], largest)) worst = l;
        if (r < size && tk_better(heap[worst], heap[r], largest)) worst = r;
        if (worst == at) return;
        tk_item t = heap[at];
        heap[at] = heap[worst], heap[worst] = t, at = worst;
    }
}

/* the k best of x[0], x[stride], ... (n values) into heap[0..k), best first */
static void tk_heap_line(const int64_t *x, int64_t n, int64_t stride, int64_t k, int largest,
                         tk_item *heap) {
    for (int64_t j = 0; j < n; j++) {
        tk_item e = {x[j * stride], j};
        if (j < k) {
            heap[j] = e;
            if (j == k - 1)
                for (int64_t at = k / 2 - 1; at >= 0; at--) tk_sift(heap, k, at, largest);
        } else if (tk_better(e, heap[0], largest)) {
            heap[0] = e;
            tk_sift(heap, k, 0, largest);
        }
    }
    for (int64_t size = k - 1; size > 0; size--) { /* the worst to the end, in turn */
        tk_item t = heap[0];
        heap[0] = heap[size], heap[size] = t;
        tk_sift(heap, size, 0, largest);
    }
}

/* ---- the step ------------------------------------------------------------------------------ */

typedef struct {
    const lnpu_step *s;
    const char *x;
    char *values, *indices;
    int64_t groups;  /* groups of lines per outer index */
    int64_t cap;     /* keys a line's buffer holds (0: the heap) */
    int64_t per;
    atomic_int *failed;
} topk_ctx;

static void put_index(const topk_ctx *cx, int64_t at, int64_t j) {
    if (!cx->indices) return;
    if (cx->s->p[TK_ITYPE] == IT_I64) ((int64_t *)cx->indices)[at] = j;
    else ((int32_t *)cx->indices)[at] = (int32_t)j;
}

/* Group q: lines [in0, in0 + g) of outer index o. */
static void topk_group(const topk_ctx *cx, int64_t q, void *scratch) {
    const int64_t *p = cx->s->p;
    int64_t n = p[TK_N], inner = p[TK_INNER], k = p[TK_K], o = q / cx->groups;
    int64_t in0 = q % cx->groups * TK_GROUP, g = inner - in0 < TK_GROUP ? inner - in0 : TK_GROUP;
    int largest = (int)p[TK_LARGEST];
    size_t size = (size_t)element_bytes(p[TK_XTYPE]);
    const char *x = cx->x + (o * n * inner + in0) * size;
    if (!cx->cap) {
        tk_item *heap = scratch;
        for (int64_t l = 0; l < g; l++) {
            tk_heap_line((const int64_t *)x + l, n, inner, k, largest, heap);
            for (int64_t r = 0; r < k; r++) {
                int64_t at = (o * k + r) * inner + in0 + l;
                ((int64_t *)cx->values)[at] = heap[r].v;
                put_index(cx, at, heap[r].i);
            }
        }
        return;
    }
    tk_line lines[TK_GROUP];
    for (int64_t l = 0; l < g; l++)
        lines[l] = (tk_line){(uint64_t *)scratch + l * cx->cap, 0, UINT64_MAX};
    tk_keys(x, (int)p[TK_XTYPE], n, inner, g, k, largest, lines, cx->cap);
    for (int64_t l = 0; l < g; l++)
        for (int64_t r = 0; r < k; r++) {
            int64_t j = (int64_t)(lines[l].keys[r] & 0xffffffffu);
            int64_t at = (o * k + r) * inner + in0 + l;
            memcpy(cx->values + at * size, x + (j * inner + l) * size, size);
            put_index(cx, at, j);
        }
}

static void topk_task(const void *ctx, int64_t t) {
    const topk_ctx *cx = ctx;
    int64_t total = cx->s->p[TK_OUTER] * cx->groups;
    /* keys: a buffer of cap keys per line of a group; the heap: k items of a value and an
     * index */
    int64_t g = cx->s->p[TK_INNER] < TK_GROUP ? cx->s->p[TK_INNER] : TK_GROUP;
    void *scratch = thread_scratch(cx->cap ? g * cx->cap * 2 : 4 * cx->s->p[TK_K]);
    if (!scratch) {
        atomic_store(cx->failed, 1);
        return;
    }
    for (int64_t q = t * cx->per; q < (t + 1) * cx->per && q < total; q++) topk_group(cx, q, scratch);
}

/* topk: outer, n, inner, k (1..n), largest, value type (ET_*), index type (IT_*); slots x, values,
 * indices (-1: none). Returns -1 when a core found no memory for its scratch. */
int topk(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t lines = p[TK_OUTER] * p[TK_INNER], k = p[TK_K];
    if (!lines || !k) return 0;
    atomic_int failed = 0;
    int keyed = p[TK_XTYPE] != ET_I64;  /* the lowering keeps keyed lines under 2^32 */
    topk_ctx cx = {s, slots[s->slot[0]], slots[s->slot[1]],
                   s->slot[2] >= 0 ? slots[s->slot[2]] : NULL,
                   (p[TK_INNER] + TK_GROUP - 1) / TK_GROUP, keyed ? 2 * k + TK_SLACK : 0,
                   0, &failed};
    int64_t groups = p[TK_OUTER] * cx.groups;
    int64_t tasks = task_count((double)lines * p[TK_N] * 1.0, groups);
    cx.per = per_task(groups, tasks);
    parallel(topk_task, &cx, (groups + cx.per - 1) / cx.per);
    return atomic_load(&failed) ? -1 : 0;
}
