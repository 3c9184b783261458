/* Arena sets: where the runs of a memory group take their arena (provider/npu/arenas.py).
 *
 * A run holds one arena from start to end. A partition's own set grows on demand up to its
 * bound, so concurrent runs of one session each get an arena; a shared group's set (and a
 * lock-only set, whose plans bring their own memory) has one, so its runs take turns. A
 * resize (a member Program needing a larger arena) waits until no run holds an arena and
 * replaces them all by one of the new size; plans see the new generation and refill their
 * address tables.
 */
#include "plane.h"

struct lnpu_arenas {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    lnpu_heap *heap;  /* NULL: lock only */
    int64_t nbytes;   /* of each arena */
    int64_t max, count, busy, frozen, generation;
    void *base[LNPU_MAX_ARENAS];
    int taken[LNPU_MAX_ARENAS];
    pthread_t owner[LNPU_MAX_ARENAS];  /* the thread whose run holds a taken arena */
};

/* In a forked child (forksafe.c): the arenas the parent's other threads held for their runs
 * are free (those runs are not here), and so is a resize they waited in; the condition
 * variable is new (the parent's waiters are not here, and glibc's could wait for them). */
static void after_fork_child(void *object) {
    lnpu_arenas *set = object;
    pthread_t self = pthread_self();
    for (int64_t k = 0; k < set->count; k++) {
        if (set->taken[k] && !pthread_equal(set->owner[k], self)) {
            set->taken[k] = 0;
            set->busy--;
        }
    }
    set->frozen = 0;
    pthread_cond_init(&set->changed, NULL);
}

static int64_t block_bytes(int64_t nbytes) { return nbytes > 0 ? (nbytes + 63) / 64 * 64 : 0; }

/* An arena of `nbytes` from the heap into *base (none for 0 bytes); 0 when there is no room. */
static int take_arena(lnpu_arenas *set, int64_t nbytes, void **base, lnpu_error *err) {
    *base = NULL;
    if (nbytes <= 0) return 1;
    int64_t offset = lnpu_heap_alloc(set->heap, nbytes, 64);
    if (offset < 0) {
        heap_exhausted(set->heap, nbytes, err);
        return 0;
    }
    *base = lnpu_heap_address(set->heap, offset);
    return 1;
}

static void give_back(lnpu_arenas *set) {
    for (int64_t k = 0; k < set->count; k++)
        if (set->base[k]) lnpu_heap_release_address(set->heap, set->base[k]);
    set->count = 0;
}

API lnpu_arenas *lnpu_arenas_new(lnpu_heap *heap, int64_t nbytes, int64_t max, lnpu_error *err) {
    lnpu_arenas *set = calloc(1, sizeof *set);
    if (!set) {
        lnpu_fail(err, "MemoryError", "no host memory for an arena set");
        return NULL;
    }
    pthread_mutex_init(&set->mu, NULL);
    pthread_cond_init(&set->changed, NULL);
    set->heap = heap;
    set->max = heap == NULL || max < 1 ? 1 : max > LNPU_MAX_ARENAS ? LNPU_MAX_ARENAS : max;
    set->nbytes = heap ? nbytes : 0;
    set->count = 1;
    if (!books_register(&set->mu, BOOKS_ARENAS, after_fork_child, set)) {
        lnpu_fail(err, "MemoryError", "no host memory for an arena set");
        pthread_cond_destroy(&set->changed);
        pthread_mutex_destroy(&set->mu);
        free(set);
        return NULL;
    }
    if (heap && !take_arena(set, nbytes, &set->base[0], err)) {
        lnpu_arenas_destroy(set);
        return NULL;
    }
    return set;
}

/* Wait until no run holds an arena and keep new runs out (lock held). */
static void freeze(lnpu_arenas *set) {
    set->frozen++;
    while (set->busy > 0) pthread_cond_wait(&set->changed, &set->mu);
}

static void thaw(lnpu_arenas *set) {
    set->frozen--;
    pthread_cond_broadcast(&set->changed);
}

API void lnpu_arenas_destroy(lnpu_arenas *set) {
    if (!set) return;
    books_unregister(&set->mu);  /* first: fork() takes the books' lock, then this one */
    pthread_mutex_lock(&set->mu);
    freeze(set);
    if (set->heap) give_back(set);
    pthread_mutex_unlock(&set->mu);
    pthread_cond_destroy(&set->changed);
    pthread_mutex_destroy(&set->mu);
    free(set);
}

API int64_t lnpu_arenas_resize(lnpu_arenas *set, int64_t nbytes, lnpu_error *err) {
    if (!set->heap) return 0;
    pthread_mutex_lock(&set->mu);
    freeze(set);
    for (int64_t k = 1; k < set->count; k++)  /* the extra arenas go first: less memory at once */
        if (set->base[k]) lnpu_heap_release_address(set->heap, set->base[k]);
    set->count = 1;
    void *first;
    int ok = take_arena(set, nbytes, &first, err);
    if (ok) {
        if (set->base[0]) lnpu_heap_release_address(set->heap, set->base[0]);
        set->base[0] = first;
        set->nbytes = nbytes;
    }
    set->generation++;
    thaw(set);
    pthread_mutex_unlock(&set->mu);
    return ok ? 0 : -1;
}

API void lnpu_arenas_held(lnpu_arenas *set, int64_t *count, int64_t *bytes) {
    pthread_mutex_lock(&set->mu);
    *count = set->heap ? set->count : 0;
    *bytes = set->heap ? set->count * block_bytes(set->nbytes) : 0;
    pthread_mutex_unlock(&set->mu);
}

API int64_t lnpu_arenas_acquire(lnpu_arenas *set, int64_t *generation, void **base,
                                lnpu_error *err) {
    pthread_mutex_lock(&set->mu);
    int64_t index = -1;
    while (index < 0) {
        if (!set->frozen) {
            for (int64_t k = 0; k < set->count && index < 0; k++)
                if (!set->taken[k]) index = k;
            if (index < 0 && set->count < set->max) {
                /* all busy: one more arena, unless the pool has no room for it (then wait) */
                void *more;
                if (take_arena(set, set->nbytes, &more, NULL)) {
                    index = set->count++;
                    set->base[index] = more;
                } else if (set->count == 0) {
                    heap_exhausted(set->heap, set->nbytes, err);
                    break;
                }
            }
        }
        if (index < 0) pthread_cond_wait(&set->changed, &set->mu);
    }
    if (index >= 0) {
        set->taken[index] = 1;
        set->owner[index] = pthread_self();
        set->busy++;
        *generation = set->generation;
        *base = set->base[index];
    }
    pthread_mutex_unlock(&set->mu);
    return index;
}

API void lnpu_arenas_release(lnpu_arenas *set, int64_t index) {
    pthread_mutex_lock(&set->mu);
    set->taken[index] = 0;
    set->busy--;
    pthread_cond_broadcast(&set->changed);
    pthread_mutex_unlock(&set->mu);
}
