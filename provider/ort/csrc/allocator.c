/* OrtAllocator in C over the NPU pool's heap: onnxruntime's NPU tensors (session outputs,
 * values it copies to the NPU, provider.empty) are carved from the device heap without
 * entering Python. Python serves what only it can (provider/ort/allocator.py): an allocation
 * on a thread that is adopting an imported or wrapped buffer, and every allocation before
 * the pool exists (its first use creates it, sized by the session's options); the blocks it
 * hands out are freed through it too. */
#include <pthread.h>
#include <stdatomic.h>

#include "ep.h"

typedef void *(*python_alloc_fn)(void *self, size_t nbytes);
typedef void (*python_free_fn)(void *self, void *pointer);

typedef struct {
    /* OrtAllocator, as onnxruntime reads it */
    uint32_t version;
    void *(*Alloc)(void *self, size_t nbytes);
    void (*Free)(void *self, void *pointer);
    const void *(*Info)(const void *self);
    void *(*Reserve)(void *self, size_t nbytes);
    void *GetStats, *AllocOnStream, *Shrink;
    /* ours */
    const void *memory_info;
    _Atomic(lnpu_heap *) heap;
    python_alloc_fn python_alloc;
    python_free_fn python_free;
    atomic_llong allocations;
    pthread_mutex_t mu;
    void **python_owned;  /* what Python allocated (its Free goes back to Python) */
    int64_t n_owned, cap_owned;
} allocator;

static __thread int adopting;  /* Python is handing the next allocation a buffer of its own */

/* Python: the next allocation on this thread (or none, with 0) goes through Python. */
LITENPU_EXPORT void litenpu_adopting(int on) { adopting = on; }

static void *alloc_in_python(allocator *a, size_t nbytes) {
    void *p = a->python_alloc(a, nbytes);
    if (!p) return NULL;
    pthread_mutex_lock(&a->mu);
    if (a->n_owned == a->cap_owned) {
        int64_t cap = a->cap_owned ? 2 * a->cap_owned : 16;
        void **more = realloc(a->python_owned, (size_t)cap * sizeof(void *));
        if (more) {
            a->python_owned = more;
            a->cap_owned = cap;
        }
    }
    if (a->n_owned < a->cap_owned) a->python_owned[a->n_owned++] = p;
    pthread_mutex_unlock(&a->mu);
    return p;
}

static void *alloc(void *self, size_t nbytes) {
    allocator *a = self;
    lnpu_heap *heap = atomic_load(&a->heap);
    if (adopting || !heap) return alloc_in_python(a, nbytes);
    int64_t offset = npu.lnpu_heap_alloc(heap, nbytes > 0 ? (int64_t)nbytes : 1, 64);
    if (offset < 0) return alloc_in_python(a, nbytes);  /* Python says why it cannot */
    atomic_fetch_add(&a->allocations, 1);
    return npu.lnpu_heap_address(heap, offset);
}

static void release(void *self, void *pointer) {
    allocator *a = self;
    if (!pointer) return;
    int owned = 0;
    pthread_mutex_lock(&a->mu);
    for (int64_t i = a->n_owned - 1; i >= 0 && !owned; i--) {
        if (a->python_owned[i] != pointer) continue;
        a->python_owned[i] = a->python_owned[--a->n_owned];
        owned = 1;
    }
    pthread_mutex_unlock(&a->mu);
    lnpu_heap *heap = atomic_load(&a->heap);
    if (!owned && heap && npu.lnpu_heap_release_address(heap, pointer) >= 0) return;
    a->python_free(a, pointer);  /* Python's, or unknown: Python reports it */
}

static const void *info(const void *self) { return ((const allocator *)self)->memory_info; }

LITENPU_EXPORT void *litenpu_allocator_new(uint32_t version, const void *memory_info,
                                           python_alloc_fn python_alloc,
                                           python_free_fn python_free) {
    allocator *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->version = version;
    a->Alloc = alloc;
    a->Free = release;
    a->Info = info;
    a->Reserve = alloc;
    a->memory_info = memory_info;
    a->python_alloc = python_alloc;
    a->python_free = python_free;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

/* Allocate from `heap` from now on (NULL: through Python again, e.g. in a forked child). */
LITENPU_EXPORT void litenpu_allocator_set_heap(void *self, lnpu_heap *heap) {
    atomic_store(&((allocator *)self)->heap, heap);
}

/* Allocations made in C so far. */
LITENPU_EXPORT int64_t litenpu_allocator_count(void *self) {
    return atomic_load(&((allocator *)self)->allocations);
}
