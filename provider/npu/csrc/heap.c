/* The device heap: the books of the device pool (provider/npu/memory.py), kept in C so that
 * a run can allocate staging and arenas, onnxruntime can allocate NPU tensors and a zero-copy
 * check can ask "is this device memory?" without entering Python.
 *
 * Policy (the same as the pool's Python books, provider/npu/heap.py, which the tests hold it
 * to): blocks are multiples of 64 bytes; an allocation takes the smallest free block that
 * holds it at an aligned start, the lowest address among equals; a freed block merges with
 * free neighbours. Free and live blocks are arrays sorted by start (pools hold hundreds of
 * blocks, not millions: a scan is cheaper than a tree here).
 */
#define _GNU_SOURCE /* madvise, MADV_REMOVE */
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>

#include "plane.h"

#define BLOCK 64

typedef struct {
    int64_t start, size;
} span;

typedef struct {
    int64_t start, size, nbytes; /* block size, and the bytes asked for (what "holds" means) */
} live;

typedef struct {
    uintptr_t address;
    int64_t nbytes;
} external;

struct lnpu_heap {
    pthread_mutex_t mu;
    uintptr_t base;
    int64_t capacity;
    span *free;
    int64_t n_free, cap_free;
    live *used;
    int64_t n_used, cap_used;
    external *ext;
    int64_t n_ext, cap_ext;
    int64_t in_use, peak;
};

void lnpu_fail(lnpu_error *err, const char *type, const char *format, ...) {
    if (!err) return;
    snprintf(err->type, sizeof err->type, "%s", type);
    va_list args;
    va_start(args, format);
    vsnprintf(err->message, sizeof err->message, format, args);
    va_end(args);
}

static int64_t align_up(int64_t n, int64_t alignment) {
    return (n + alignment - 1) / alignment * alignment;
}

/* (plane.h) */
int reserve(void **items, int64_t count, int64_t *cap, size_t size) {
    if (count < *cap) return 1;
    int64_t grown = *cap ? 2 * *cap : 16;
    void *more = realloc(*items, (size_t)grown * size);
    if (!more) return 0;
    *items = more;
    *cap = grown;
    return 1;
}

/* Index of the first element whose start is > `key`, in an array of `n` elements of `stride`
 * bytes that begin with their int64 start and are sorted by it. */
static int64_t upper(const void *array, int64_t n, size_t stride, int64_t key) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (*(const int64_t *)((const char *)array + (size_t)mid * stride) <= key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
#define UPPER(array, n, key) upper((array), (n), sizeof *(array), (key))

static int add_free(lnpu_heap *h, int64_t start, int64_t size) {
    if (!reserve((void **)&h->free, h->n_free, &h->cap_free, sizeof(span))) return 0;
    int64_t i = UPPER(h->free, h->n_free, start);
    memmove(&h->free[i + 1], &h->free[i], (size_t)(h->n_free - i) * sizeof(span));
    h->free[i] = (span){start, size};
    h->n_free++;
    return 1;
}

static void remove_free(lnpu_heap *h, int64_t i) {
    memmove(&h->free[i], &h->free[i + 1], (size_t)(h->n_free - i - 1) * sizeof(span));
    h->n_free--;
}

/* Add [start, start + size) to the free blocks, merged with its free neighbours; 0 when out
 * of host memory (never when the caller reserved room for one more free block). */
static int free_range(lnpu_heap *h, int64_t start, int64_t size) {
    int64_t j = UPPER(h->free, h->n_free, start);  /* the free block after it, if any */
    if (j < h->n_free && h->free[j].start == start + size) {
        size += h->free[j].size;
        remove_free(h, j);
    }
    if (j > 0 && h->free[j - 1].start + h->free[j - 1].size == start) {
        start = h->free[j - 1].start;
        size += h->free[j - 1].size;
        remove_free(h, j - 1);
    }
    return add_free(h, start, size);
}

API lnpu_heap *lnpu_heap_new(void *base, int64_t capacity) {
    lnpu_heap *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    pthread_mutex_init(&h->mu, NULL);
    h->base = (uintptr_t)base;
    h->capacity = capacity;
    if (!add_free(h, 0, capacity) || !books_register(&h->mu, BOOKS_HEAPS, NULL, NULL)) {
        free(h->free);
        free(h);
        return NULL;
    }
    return h;
}

API void lnpu_heap_destroy(lnpu_heap *h) {
    if (!h) return;
    books_unregister(&h->mu);
    pthread_mutex_destroy(&h->mu);
    free(h->free);
    free(h->used);
    free(h->ext);
    free(h);
}

API int64_t lnpu_heap_alloc(lnpu_heap *h, int64_t nbytes, int64_t alignment) {
    if (nbytes < 0) return -1;
    if (alignment < BLOCK) alignment = BLOCK;
    int64_t size = align_up(nbytes > 0 ? nbytes : 1, BLOCK);
    pthread_mutex_lock(&h->mu);
    int64_t best = -1;
    for (int64_t i = 0; i < h->n_free; i++) {
        span f = h->free[i];
        if (align_up(f.start, alignment) - f.start + size > f.size) continue;
        if (best < 0 || f.size < h->free[best].size) best = i;  /* scan order: lowest start wins ties */
    }
    int64_t begin = -1;
    if (best >= 0 && reserve((void **)&h->used, h->n_used, &h->cap_used, sizeof(live)) &&
        reserve((void **)&h->free, h->n_free + 1, &h->cap_free, sizeof(span))) {
        span f = h->free[best];
        begin = align_up(f.start, alignment);
        remove_free(h, best);
        if (begin > f.start) add_free(h, f.start, begin - f.start);
        if (f.start + f.size > begin + size) add_free(h, begin + size, f.start + f.size - begin - size);
        int64_t i = UPPER(h->used, h->n_used, begin);
        memmove(&h->used[i + 1], &h->used[i], (size_t)(h->n_used - i) * sizeof(live));
        h->used[i] = (live){begin, size, nbytes};
        h->n_used++;
        h->in_use += size;
        if (h->in_use > h->peak) h->peak = h->in_use;
    }
    pthread_mutex_unlock(&h->mu);
    return begin;
}

API void lnpu_heap_hold(lnpu_heap *h, int64_t ns) {
    pthread_mutex_lock(&h->mu);
    struct timespec wait = {ns / 1000000000, ns % 1000000000};
    while (nanosleep(&wait, &wait) != 0) continue;
    pthread_mutex_unlock(&h->mu);
}

API void *lnpu_heap_address(lnpu_heap *h, int64_t offset) { return (void *)(h->base + offset); }

API int64_t lnpu_heap_release(lnpu_heap *h, int64_t offset) {
    pthread_mutex_lock(&h->mu);
    /* room for the free block first (without host memory for it the block stays lost) */
    reserve((void **)&h->free, h->n_free, &h->cap_free, sizeof(span));
    int64_t i = UPPER(h->used, h->n_used, offset) - 1;
    if (i < 0 || h->used[i].start != offset) {
        pthread_mutex_unlock(&h->mu);
        return -1;
    }
    int64_t freed = h->used[i].size;
    memmove(&h->used[i], &h->used[i + 1], (size_t)(h->n_used - i - 1) * sizeof(live));
    h->n_used--;
    h->in_use -= freed;
    free_range(h, offset, freed);
    pthread_mutex_unlock(&h->mu);
    return freed;
}

API int64_t lnpu_heap_release_address(lnpu_heap *h, const void *address) {
    uintptr_t a = (uintptr_t)address;
    if (a < h->base) return -1;
    return lnpu_heap_release(h, (int64_t)(a - h->base));
}

API int lnpu_heap_grow(lnpu_heap *h, int64_t capacity) {
    pthread_mutex_lock(&h->mu);
    int ok = 1;
    if (capacity > h->capacity) {
        ok = free_range(h, h->capacity, capacity - h->capacity);
        if (ok) h->capacity = capacity;
    }
    pthread_mutex_unlock(&h->mu);
    return ok;
}

static int64_t largest_free(const lnpu_heap *h) {
    int64_t largest = 0;
    for (int64_t i = 0; i < h->n_free; i++)
        if (h->free[i].size > largest) largest = h->free[i].size;
    return largest;
}

API void lnpu_heap_get_stats(lnpu_heap *h, lnpu_heap_stats *out) {
    pthread_mutex_lock(&h->mu);
    *out = (lnpu_heap_stats){h->in_use, h->peak, h->n_used, largest_free(h), h->capacity};
    pthread_mutex_unlock(&h->mu);
}

/* The live block holding `offset` within its requested bytes, or -1 (lock held). */
static int64_t block_at(const lnpu_heap *h, int64_t offset) {
    int64_t i = UPPER(h->used, h->n_used, offset) - 1;
    if (i < 0 || offset >= h->used[i].start + h->used[i].nbytes) return -1;
    return i;
}

API int64_t lnpu_heap_block(lnpu_heap *h, int64_t offset, int64_t *nbytes) {
    pthread_mutex_lock(&h->mu);
    int64_t i = block_at(h, offset), start = -1;
    if (i >= 0) {
        start = h->used[i].start;
        if (nbytes) *nbytes = h->used[i].nbytes;
    }
    pthread_mutex_unlock(&h->mu);
    return start;
}

/* Give the pages of the free blocks back to the OS (MADV_REMOVE: the shared mapping's pages
 * are freed and committed again on next touch), all but the first `keep` free bytes in address
 * order (best fit takes a block's low end, so those are what the next allocation reuses), under
 * the heap's lock, so that no allocation (a run's staging or arena, on another thread) takes a
 * block while its pages go. Returns the bytes released. */
API int64_t lnpu_heap_trim(lnpu_heap *h, int64_t page, int64_t keep) {
    int64_t released = 0;
    pthread_mutex_lock(&h->mu);
    for (int64_t i = 0; i < h->n_free; i++) {
        int64_t kept = keep < h->free[i].size ? keep : h->free[i].size;
        keep -= kept;
        int64_t first = align_up(h->free[i].start + kept, page);
        int64_t length = (h->free[i].start + h->free[i].size - first) / page * page;
        /* MADV_DONTNEED: a forked child's private copy (MADV_REMOVE needs a shared map) */
        if (length > 0 && (madvise((void *)(h->base + first), (size_t)length, MADV_REMOVE) == 0 ||
                           madvise((void *)(h->base + first), (size_t)length, MADV_DONTNEED) == 0))
            released += length;
    }
    pthread_mutex_unlock(&h->mu);
    return released;
}

API int64_t lnpu_heap_free_blocks(lnpu_heap *h, int64_t *out, int64_t max) {
    pthread_mutex_lock(&h->mu);
    int64_t n = h->n_free;
    for (int64_t i = 0; i < n && i < max; i++) {
        out[2 * i] = h->free[i].start;
        out[2 * i + 1] = h->free[i].size;
    }
    pthread_mutex_unlock(&h->mu);
    return n;
}

API int lnpu_heap_add_range(lnpu_heap *h, const void *address, int64_t nbytes) {
    pthread_mutex_lock(&h->mu);
    int ok = reserve((void **)&h->ext, h->n_ext, &h->cap_ext, sizeof(external));
    if (ok) h->ext[h->n_ext++] = (external){(uintptr_t)address, nbytes};
    pthread_mutex_unlock(&h->mu);
    return ok;
}

API int lnpu_heap_remove_range(lnpu_heap *h, const void *address) {
    pthread_mutex_lock(&h->mu);
    int found = 0;
    for (int64_t i = 0; i < h->n_ext && !found; i++) {
        if (h->ext[i].address != (uintptr_t)address) continue;
        memmove(&h->ext[i], &h->ext[i + 1], (size_t)(h->n_ext - i - 1) * sizeof(external));
        h->n_ext--;
        found = 1;
    }
    pthread_mutex_unlock(&h->mu);
    return found;
}

API int lnpu_heap_contains(lnpu_heap *h, const void *address, int64_t nbytes) {
    uintptr_t a = (uintptr_t)address;
    int inside = 0;
    pthread_mutex_lock(&h->mu);
    if (a >= h->base && a - h->base < (uintptr_t)h->capacity) {
        int64_t i = block_at(h, (int64_t)(a - h->base));
        inside = i >= 0 && (int64_t)(a - h->base) + nbytes <= h->used[i].start + h->used[i].nbytes;
    } else {
        for (int64_t i = 0; i < h->n_ext; i++) {  /* the first registered buffer holding it */
            external e = h->ext[i];
            if (e.address <= a && a < e.address + (uintptr_t)e.nbytes) {
                inside = a + (uintptr_t)nbytes <= e.address + (uintptr_t)e.nbytes;
                break;
            }
        }
    }
    pthread_mutex_unlock(&h->mu);
    return inside;
}

void heap_exhausted(lnpu_heap *h, int64_t nbytes, lnpu_error *err) {
    lnpu_heap_stats s;
    lnpu_heap_get_stats(h, &s);
    lnpu_fail(err, "DeviceMemoryError",
              "device pool exhausted: requested %lld bytes (alignment %d), largest free block "
              "%lld, %lld of %lld bytes free",
              (long long)nbytes, BLOCK, (long long)s.largest_free,
              (long long)(s.capacity - s.in_use), (long long)s.capacity);
    if (err) {
        err->requested = nbytes;
        err->available = s.largest_free;
    }
}
