/* Plans: one Program's run, start to end, in C (provider/npu/executor.py builds them).
 *
 * A run takes an arena from the plan's set, points the slot address table at it (once per
 * arena: each arena has its own table and staging buffers, so concurrent runs share
 * nothing), binds the inputs and outputs by the executor's zero-copy rule (device memory is
 * used in place, anything else is copied once through a staging buffer and counted), runs
 * the native segments with lnpu_run and hands the numpy segments to the plan's callback
 * (the only time a run enters Python), copies staged outputs out and gives the arena back.
 * Messages are the executor's, word for word.
 */
#include "plane.h"

API int64_t lnpu_run(const lnpu_step *steps, int64_t count, void **slots, int64_t *stamps,
                     int threads);
long now_ns(void);

typedef struct {
    void **table;     /* slot addresses of runs in this arena */
    void **staging;   /* per input, then per output: its staging buffer (lazily) */
    void **host;      /* per output: where a staged output goes after the run */
    int64_t generation;
    void *base;
    int filled;
} context;

struct lnpu_plan {
    pthread_mutex_t mu;
    pthread_cond_t idle;
    int64_t active;
    int closing;
    int64_t n_slots, n_inputs, n_outputs, n_segments;
    lnpu_slot *slots;
    int64_t *inputs, *outputs;
    lnpu_segment *segments;
    lnpu_step *steps;
    char *names;
    lnpu_heap *heap;
    lnpu_arenas *arenas;
    void *own_arena;
    lnpu_numpy_fn numpy;
    int64_t owner;
    int cores;
    atomic_llong staging_bytes, staging_blocks;
    context ctx[LNPU_MAX_ARENAS];
};

static void *copy_of(const void *source, size_t nbytes) {
    void *copy = malloc(nbytes ? nbytes : 1);
    if (copy && nbytes) memcpy(copy, source, nbytes);
    return copy;
}

static int valid_spec(const lnpu_plan_spec *s, lnpu_error *err) {
    for (int64_t i = 0; i < s->n_inputs; i++)
        if (s->inputs[i] < 0 || s->inputs[i] >= s->n_slots) goto bad;
    for (int64_t i = 0; i < s->n_outputs; i++)
        if (s->outputs[i] < 0 || s->outputs[i] >= s->n_slots) goto bad;
    for (int64_t i = 0; i < s->n_segments; i++)
        if (s->segments[i].count < 0 || (!s->segments[i].steps && !s->numpy)) goto bad;
    if (!s->heap || !s->arenas) goto bad;
    return 1;
bad:
    lnpu_fail(err, "LitenpuError", "a native plan was built from an inconsistent description");
    return 0;
}

API lnpu_plan *lnpu_plan_new(const lnpu_plan_spec *s, lnpu_error *err) {
    if (!valid_spec(s, err)) return NULL;
    lnpu_plan *p = calloc(1, sizeof *p);
    if (!p) goto no_memory;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->idle, NULL);
    p->n_slots = s->n_slots;
    p->n_inputs = s->n_inputs;
    p->n_outputs = s->n_outputs;
    p->n_segments = s->n_segments;
    p->heap = s->heap;
    p->arenas = s->arenas;
    p->own_arena = s->own_arena;
    p->numpy = s->numpy;
    p->owner = s->owner;
    p->cores = (int)s->cores;
    p->slots = copy_of(s->slots, (size_t)s->n_slots * sizeof(lnpu_slot));
    p->inputs = copy_of(s->inputs, (size_t)s->n_inputs * sizeof(int64_t));
    p->outputs = copy_of(s->outputs, (size_t)s->n_outputs * sizeof(int64_t));
    p->segments = copy_of(s->segments, (size_t)s->n_segments * sizeof(lnpu_segment));
    size_t name_bytes = 0, steps = 0;
    for (int64_t i = 0; i < s->n_slots; i++) name_bytes += strlen(s->slots[i].name ? s->slots[i].name : "") + 1;
    for (int64_t i = 0; i < s->n_segments; i++) steps += s->segments[i].steps ? (size_t)s->segments[i].count : 0;
    p->names = malloc(name_bytes);
    p->steps = malloc((steps ? steps : 1) * sizeof(lnpu_step));
    if (!p->slots || !p->inputs || !p->outputs || !p->segments || !p->names || !p->steps) {
        lnpu_plan_destroy(p);
        goto no_memory;
    }
    char *name = p->names;
    for (int64_t i = 0; i < s->n_slots; i++) {
        const char *given = s->slots[i].name ? s->slots[i].name : "";
        strcpy(name, given);
        p->slots[i].name = name;
        name += strlen(given) + 1;
    }
    lnpu_step *step = p->steps;
    for (int64_t i = 0; i < s->n_segments; i++) {
        if (!s->segments[i].steps) continue;
        memcpy(step, s->segments[i].steps, (size_t)s->segments[i].count * sizeof(lnpu_step));
        p->segments[i].steps = step;
        step += s->segments[i].count;
    }
    return p;
no_memory:
    lnpu_fail(err, "MemoryError", "no host memory for a native plan");
    return NULL;
}

API void lnpu_plan_destroy(lnpu_plan *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
    while (p->active > 0) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
    for (int64_t k = 0; k < LNPU_MAX_ARENAS; k++) {
        context *c = &p->ctx[k];
        if (c->staging)
            for (int64_t i = 0; i < p->n_inputs + p->n_outputs; i++)
                if (c->staging[i]) lnpu_heap_release_address(p->heap, c->staging[i]);
        free(c->table);
        free(c->staging);
        free(c->host);
    }
    free(p->slots);
    free(p->inputs);
    free(p->outputs);
    free(p->segments);
    free(p->steps);
    free(p->names);
    pthread_cond_destroy(&p->idle);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

API int lnpu_plan_hold(lnpu_plan *p) {
    pthread_mutex_lock(&p->mu);
    int ok = !p->closing;
    if (ok) p->active++;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

API void lnpu_plan_drop(lnpu_plan *p) {
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0) pthread_cond_broadcast(&p->idle);
    pthread_mutex_unlock(&p->mu);
}

API void lnpu_plan_staging(lnpu_plan *p, int64_t *nbytes, int64_t *blocks) {
    *nbytes = atomic_load(&p->staging_bytes);
    *blocks = atomic_load(&p->staging_blocks);
}

/* Context k ready for a run in the arena at `base` of `generation`; 0 when out of memory. */
static int prepare(lnpu_plan *p, context *c, int64_t generation, void *base, lnpu_error *err) {
    if (!c->table) {
        int64_t io = p->n_inputs + p->n_outputs;
        c->table = calloc((size_t)(p->n_slots ? p->n_slots : 1), sizeof(void *));
        c->staging = calloc((size_t)(io ? io : 1), sizeof(void *));
        c->host = calloc((size_t)(p->n_outputs ? p->n_outputs : 1), sizeof(void *));
        if (!c->table || !c->staging || !c->host) {
            lnpu_fail(err, "MemoryError", "no host memory for a run's address table");
            return 0;
        }
    }
    if (c->filled && c->generation == generation && c->base == base) return 1;
    char *arena = p->own_arena ? p->own_arena : base;
    for (int64_t i = 0; i < p->n_slots; i++) {
        const lnpu_slot *slot = &p->slots[i];
        c->table[i] = slot->kind == LNPU_SLOT_WEIGHT ? slot->address
                      : slot->kind == LNPU_SLOT_INTERNAL && arena ? arena + slot->offset
                                                                  : NULL;
    }
    c->generation = generation;
    c->base = base;
    c->filled = 1;
    return 1;
}

/* The staging buffer of I/O position `at` in context c (allocated on first need). */
static void *staging(lnpu_plan *p, context *c, int64_t at, const lnpu_slot *slot,
                     lnpu_error *err) {
    if (c->staging[at]) return c->staging[at];
    int64_t offset = lnpu_heap_alloc(p->heap, slot->nbytes, 64);
    if (offset < 0) {
        heap_exhausted(p->heap, slot->nbytes, err);
        return NULL;
    }
    atomic_fetch_add(&p->staging_bytes, slot->nbytes);
    atomic_fetch_add(&p->staging_blocks, (slot->nbytes > 0 ? slot->nbytes + 63 : 64) / 64 * 64);
    return c->staging[at] = lnpu_heap_address(p->heap, offset);
}

static int overlaps(const void *a, int64_t n, const void *b, int64_t m) {
    const char *x = a, *y = b;
    return n > 0 && m > 0 && x < y + m && y < x + n;
}

static int size_matches(const char *what, const lnpu_slot *slot, const lnpu_buffer *b,
                        lnpu_error *err) {
    if (b->nbytes == slot->nbytes) return 1;
    lnpu_fail(err, "BindingError", "%s %s: got %lld bytes, expected %lld", what, slot->name,
              (long long)b->nbytes, (long long)slot->nbytes);
    return 0;
}

static int bind_inputs(lnpu_plan *p, context *c, const lnpu_buffer *inputs, int64_t *copied,
                       lnpu_error *err) {
    for (int64_t i = 0; i < p->n_inputs; i++) {
        int64_t s = p->inputs[i];
        const lnpu_slot *slot = &p->slots[s];
        if (!size_matches("input", slot, &inputs[i], err)) return 0;
        if (lnpu_heap_contains(p->heap, inputs[i].address, slot->nbytes)) {
            c->table[s] = inputs[i].address;
            continue;
        }
        void *copy = staging(p, c, i, slot, err);
        if (!copy) return 0;
        if (slot->nbytes) memcpy(copy, inputs[i].address, (size_t)slot->nbytes);
        c->table[s] = copy;
        *copied += slot->nbytes;
    }
    return 1;
}

static int bind_outputs(lnpu_plan *p, context *c, const lnpu_buffer *outputs, lnpu_error *err) {
    for (int64_t j = 0; j < p->n_outputs; j++) {
        int64_t s = p->outputs[j];
        const lnpu_slot *slot = &p->slots[s];
        void *given = outputs[j].address;
        if (given && !size_matches("output", slot, &outputs[j], err)) return 0;
        if (given && lnpu_heap_contains(p->heap, given, slot->nbytes)) {
            /* in place: it must not share memory with an input or an earlier output */
            for (int64_t k = 0; k < p->n_inputs + j; k++) {
                int64_t other = k < p->n_inputs ? p->inputs[k] : p->outputs[k - p->n_inputs];
                if (!overlaps(given, slot->nbytes, c->table[other], p->slots[other].nbytes)) continue;
                lnpu_fail(err, "BindingError", "output %s shares memory with %s %s; bind separate "
                          "buffers", slot->name, k < p->n_inputs ? "input" : "output",
                          p->slots[other].name);
                return 0;
            }
            c->table[s] = given;
            c->host[j] = NULL;
            continue;
        }
        void *staged = staging(p, c, p->n_inputs + j, slot, err);
        if (!staged) return 0;
        c->table[s] = staged;
        c->host[j] = given;
    }
    return 1;
}

/* The plan's numpy steps [first, first + count) through its callback; with `stamps`, one
 * step per call, each stamped (start, end) as lnpu_run stamps native steps. */
static int run_numpy(lnpu_plan *p, context *c, int64_t first, int64_t count, int64_t *stamps,
                     lnpu_error *err) {
    int64_t step = stamps ? 1 : count;
    for (int64_t at = first; at < first + count; at += step) {
        if (stamps) stamps[2 * at] = now_ns();
        if (p->numpy(p->owner, at, step, c->table, err) != 0) {
            if (err && !err->type[0])
                lnpu_fail(err, "LitenpuError", "numpy steps %lld..%lld failed",
                          (long long)at, (long long)(at + step - 1));
            return 0;
        }
        if (stamps) stamps[2 * at + 1] = now_ns();
    }
    return 1;
}

static int run_segments(lnpu_plan *p, context *c, int cores, int64_t *stamps, lnpu_error *err) {
    for (int64_t i = 0; i < p->n_segments; i++) {
        const lnpu_segment *seg = &p->segments[i];
        if (!seg->steps) {
            if (!run_numpy(p, c, seg->first, seg->count, stamps, err)) return 0;
            continue;
        }
        int64_t status = lnpu_run(seg->steps, seg->count, c->table,
                                  stamps ? stamps + 2 * seg->first : NULL, cores);
        if (status == -1) {
            lnpu_fail(err, "DeviceMemoryError", "native NPU kernel: no memory for its scratch "
                      "buffer (a step's working set is larger than the machine can give)");
            return 0;
        }
        if (status == KERNEL_REFUSED) {
            lnpu_fail(err, "InputValueError", "%s", lnpu_kernel_error());
            return 0;
        }
        if (status) {
            lnpu_fail(err, "LitenpuError", "native NPU run failed with status %lld (-2: no "
                      "sgemm, else 1 + the step with an unknown op)", (long long)status);
            return 0;
        }
    }
    return 1;
}

API int64_t lnpu_plan_execute(lnpu_plan *p, const lnpu_buffer *inputs, const lnpu_buffer *outputs,
                              int64_t cores, int64_t *stamps, lnpu_copies *copies,
                              lnpu_error *err) {
    int64_t generation;
    void *base;
    int64_t k = lnpu_arenas_acquire(p->arenas, &generation, &base, err);
    if (k < 0) return -1;
    context *c = &p->ctx[k];
    int64_t copied_in = 0, copied_out = 0;
    int ok = prepare(p, c, generation, base, err) && bind_inputs(p, c, inputs, &copied_in, err) &&
             bind_outputs(p, c, outputs, err) &&
             run_segments(p, c, cores < 0 ? p->cores : (int)cores, stamps, err);
    for (int64_t j = 0; ok && j < p->n_outputs; j++) {
        const lnpu_slot *slot = &p->slots[p->outputs[j]];
        if (!c->host[j]) continue;
        if (slot->nbytes) memcpy(c->host[j], c->table[p->outputs[j]], (size_t)slot->nbytes);
        copied_out += slot->nbytes;
    }
    lnpu_arenas_release(p->arenas, k);
    if (!ok) return -1;
    copies->copied_in = copied_in;
    copies->copied_out = copied_out;
    return 0;
}

/* ---- runners ---------------------------------------------------------------------------------- */

struct lnpu_runner {
    pthread_mutex_t mu;
    lnpu_plan *plan;
};

API lnpu_runner *lnpu_runner_new(void) {
    lnpu_runner *r = calloc(1, sizeof *r);
    if (r) pthread_mutex_init(&r->mu, NULL);
    return r;
}

API void lnpu_runner_destroy(lnpu_runner *r) {
    if (!r) return;
    pthread_mutex_destroy(&r->mu);
    free(r);
}

API void lnpu_runner_set(lnpu_runner *r, lnpu_plan *plan) {
    pthread_mutex_lock(&r->mu);
    r->plan = plan;
    pthread_mutex_unlock(&r->mu);
}

API lnpu_plan *lnpu_runner_hold(lnpu_runner *r) {
    pthread_mutex_lock(&r->mu);
    lnpu_plan *p = r->plan;
    if (p && !lnpu_plan_hold(p)) p = NULL;
    pthread_mutex_unlock(&r->mu);
    return p;
}

API void lnpu_plane_sizes(int64_t *out) {
    int64_t sizes[LNPU_PLANE_STRUCTS] = {sizeof(lnpu_error), sizeof(lnpu_heap_stats),
                                         sizeof(lnpu_slot), sizeof(lnpu_segment),
                                         sizeof(lnpu_buffer), sizeof(lnpu_copies),
                                         sizeof(lnpu_plan_spec)};
    memcpy(out, sizes, sizeof sizes);
}
