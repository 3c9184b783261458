/* The data plane's shared declarations: the device heap (heap.c), arena sets (arenas.c) and
 * run plans (plan.c).
 *
 * Three readers agree on these layouts: the NPU library itself, Python (provider/npu/native.py
 * mirrors every struct below with ctypes and checks its size against lnpu_plane_sizes() when
 * the library loads) and the onnxruntime EP library (provider/ort/csrc), which includes this
 * header and calls the functions through pointers Python hands it. Change a struct here and
 * in native.py together.
 */
#ifndef LITENPU_PLANE_H
#define LITENPU_PLANE_H
#include "npu.h"

/* ---- errors ------------------------------------------------------------------------------ */

#define LNPU_ERROR_TEXT 4000

/* What failed, for the caller to raise or to put in an onnxruntime status: the litenpu
 * exception class name ("" when nothing failed), its message, and a DeviceMemoryError's byte
 * counts. */
typedef struct {
    char type[48];
    int64_t requested;
    int64_t available;
    char message[LNPU_ERROR_TEXT];
} lnpu_error;

void lnpu_fail(lnpu_error *err, const char *type, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- device heap (heap.c) ------------------------------------------------------------------ */

/* The books of the device pool: 64-byte blocks carved best fit from [0, capacity) of a
 * mapping at `base`, coalesced when freed, plus the external buffers (imported fds, wrapped
 * arrays) that count as device memory. Thread-safe. */
typedef struct lnpu_heap lnpu_heap;

typedef struct {
    int64_t in_use;       /* bytes of live blocks */
    int64_t peak;
    int64_t allocations;  /* live blocks */
    int64_t largest_free;
    int64_t capacity;
} lnpu_heap_stats;

API lnpu_heap *lnpu_heap_new(void *base, int64_t capacity);
API void lnpu_heap_destroy(lnpu_heap *heap);
/* Offset of a new block holding `nbytes` at a multiple of `alignment`, or -1 (no room). */
API int64_t lnpu_heap_alloc(lnpu_heap *heap, int64_t nbytes, int64_t alignment);
/* Free the block starting at `offset`; returns its size, or -1 when no block starts there. */
API int64_t lnpu_heap_release(lnpu_heap *heap, int64_t offset);
/* The block allocated at `address` (a pointer lnpu_heap_address gave), freed; -1 if none. */
API int64_t lnpu_heap_release_address(lnpu_heap *heap, const void *address);
API void *lnpu_heap_address(lnpu_heap *heap, int64_t offset);
API int lnpu_heap_grow(lnpu_heap *heap, int64_t capacity);
API void lnpu_heap_get_stats(lnpu_heap *heap, lnpu_heap_stats *out);
/* The live block whose requested bytes hold `offset`: its start, or -1. */
API int64_t lnpu_heap_block(lnpu_heap *heap, int64_t offset, int64_t *nbytes);
/* Free blocks as (start, size) pairs into out[0 .. 2 * max); returns how many there are. */
API int64_t lnpu_heap_free_blocks(lnpu_heap *heap, int64_t *out, int64_t max);
/* Free blocks' pages back to the OS, atomically with allocation; the bytes released. */
API int64_t lnpu_heap_trim(lnpu_heap *heap, int64_t page, int64_t keep);
/* External device memory: registered while its buffer lives. */
API int lnpu_heap_add_range(lnpu_heap *heap, const void *address, int64_t nbytes);
API int lnpu_heap_remove_range(lnpu_heap *heap, const void *address);
/* 1 when [address, address + nbytes) lies inside one live buffer (block or external). */
API int lnpu_heap_contains(lnpu_heap *heap, const void *address, int64_t nbytes);
/* A DeviceMemoryError in `err` for `nbytes` the heap could not give (the pool's words). */
void heap_exhausted(lnpu_heap *heap, int64_t nbytes, lnpu_error *err);
/* Holds the heap's lock for `ns` nanoseconds: lets a test fork while another thread is
 * inside the books, where a real allocation stays a microsecond at a time. */
API void lnpu_heap_hold(lnpu_heap *heap, int64_t ns);
/* Room for one more element of `size` bytes in *items (capacity *cap); 0 when out of host
 * memory. */
int reserve(void **items, int64_t count, int64_t *cap, size_t size);

/* ---- the books across fork() (forksafe.c) ------------------------------------------------ */

/* A heap's or an arena set's lock, taken before fork() in rank order (arena sets, then
 * heaps: the order the code nests them) and let go of after it in both processes; `child`
 * (if any) runs in the child first, the lock held. 0 when out of host memory. */
enum { BOOKS_ARENAS = 0, BOOKS_HEAPS = 1 };
int books_register(pthread_mutex_t *mu, int rank, void (*child)(void *), void *object);
void books_unregister(pthread_mutex_t *mu);

/* ---- arena sets (arenas.c) ----------------------------------------------------------------- */

/* The arenas the Programs of one memory group run in. A managed set holds up to `max`
 * arenas of one size from the heap: a run takes a free one, or a new one while fewer than
 * `max` exist, or waits. A lock-only set (no heap) holds no memory and lets one run at a
 * time: its plans bring their own arena (caller memory, an executor's own buffer). */
typedef struct lnpu_arenas lnpu_arenas;

#define LNPU_MAX_ARENAS 64

API lnpu_arenas *lnpu_arenas_new(lnpu_heap *heap, int64_t nbytes, int64_t max, lnpu_error *err);
API void lnpu_arenas_destroy(lnpu_arenas *set);
/* Arenas of `nbytes` from now on, once no run holds one: the new first arena is allocated
 * before the old ones go; -1 (DeviceMemoryError in err) leaves the set as it was. */
API int64_t lnpu_arenas_resize(lnpu_arenas *set, int64_t nbytes, lnpu_error *err);
/* Arenas held and their pool bytes. */
API void lnpu_arenas_held(lnpu_arenas *set, int64_t *count, int64_t *bytes);
/* Blocking: an arena index for one run, its generation and address; -1 on error. */
API int64_t lnpu_arenas_acquire(lnpu_arenas *set, int64_t *generation, void **base,
                                lnpu_error *err);
API void lnpu_arenas_release(lnpu_arenas *set, int64_t index);

/* ---- plans (plan.c) ------------------------------------------------------------------------ */

enum { LNPU_SLOT_INPUT = 0, LNPU_SLOT_OUTPUT, LNPU_SLOT_WEIGHT, LNPU_SLOT_INTERNAL };

/* One Program slot as a plan sees it. `name` is its Python repr, for messages. */
typedef struct {
    int64_t kind;
    int64_t nbytes;
    int64_t offset;       /* internal: offset in the arena */
    void *address;        /* weight: where it is */
    const char *name;
} lnpu_slot;

/* Steps [first, first + count) of the Program: native (`steps`, copied by lnpu_plan_new) or,
 * with steps NULL, numpy kernels that the plan's callback runs. */
typedef struct {
    int64_t first;
    int64_t count;
    const lnpu_step *steps;
} lnpu_segment;

/* An input or output as the caller holds it: C-contiguous bytes. */
typedef struct {
    void *address;
    int64_t nbytes;
} lnpu_buffer;

typedef struct {
    int64_t copied_in;
    int64_t copied_out;
} lnpu_copies;

/* Runs numpy steps [first, first + count) on the slot address table; 0, or nonzero with
 * err filled. Called with the GIL not held (a ctypes callback takes it). */
typedef int64_t (*lnpu_numpy_fn)(int64_t owner, int64_t first, int64_t count, void **slots,
                                 lnpu_error *err);

typedef struct lnpu_plan lnpu_plan;

/* Everything lnpu_plan_new needs (copied: the caller may free it afterwards). */
typedef struct {
    int64_t n_slots;
    const lnpu_slot *slots;
    int64_t n_inputs;
    const int64_t *inputs;    /* slot indices, the Program's order */
    int64_t n_outputs;
    const int64_t *outputs;
    int64_t n_segments;
    const lnpu_segment *segments;
    lnpu_heap *heap;          /* device memory: zero-copy checks, staging */
    lnpu_arenas *arenas;      /* where runs take their arena (or only their turn) */
    void *own_arena;          /* with a lock-only set: this plan's arena */
    lnpu_numpy_fn numpy;
    int64_t owner;            /* passed back to `numpy` */
    int64_t cores;            /* lnpu_run's threads (0: all the NPU's cores) */
} lnpu_plan_spec;

API lnpu_plan *lnpu_plan_new(const lnpu_plan_spec *spec, lnpu_error *err);
/* Waits for the runs in progress, gives staging back to the heap, frees the plan. */
API void lnpu_plan_destroy(lnpu_plan *plan);
/* One more run may start (0 once the plan is being destroyed); lnpu_plan_drop ends it. */
API int lnpu_plan_hold(lnpu_plan *plan);
API void lnpu_plan_drop(lnpu_plan *plan);
/* One run (the caller holds the plan): inputs/outputs in the Program's order; an output
 * whose address is NULL is not collected; on `cores` of the NPU's cores (0: all, < 0: the
 * plan's); `stamps`, when not NULL, receives each step's (start, end) in CLOCK_MONOTONIC ns,
 * one row of two per step (the profile). 0, or -1 with err filled. */
API int64_t lnpu_plan_execute(lnpu_plan *plan, const lnpu_buffer *inputs,
                              const lnpu_buffer *outputs, int64_t cores, int64_t *stamps,
                              lnpu_copies *copies, lnpu_error *err);
/* Staging buffers held: requested bytes and pool bytes. */
API void lnpu_plan_staging(lnpu_plan *plan, int64_t *nbytes, int64_t *blocks);

/* ---- runners (plan.c) ---------------------------------------------------------------------- */

/* The plan one executor runs now (NULL while its memory is not ready): what a compiled
 * onnxruntime kernel holds, so that the executor can swap plans under it. */
typedef struct lnpu_runner lnpu_runner;

API lnpu_runner *lnpu_runner_new(void);
API void lnpu_runner_destroy(lnpu_runner *runner);
/* Install `plan` (may be NULL). The caller destroys the plan it replaced, which waits for
 * the runs that held it. */
API void lnpu_runner_set(lnpu_runner *runner, lnpu_plan *plan);
/* The current plan, held (lnpu_plan_drop it), or NULL. */
API lnpu_plan *lnpu_runner_hold(lnpu_runner *runner);

/* sizeof every struct above, in this order: lnpu_error, lnpu_heap_stats, lnpu_slot,
 * lnpu_segment, lnpu_buffer, lnpu_copies, lnpu_plan_spec (native.py checks its mirrors). */
#define LNPU_PLANE_STRUCTS 7
API void lnpu_plane_sizes(int64_t *out);

#endif
