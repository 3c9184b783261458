/* OrtNodeComputeInfo in C: a fused NPU partition's Compute without Python.
 *
 * A kernel holds a small table, filled from Python (provider/ort/compute.py) as shapes are
 * compiled: per concrete input shape, the runner of its executor (provider/npu: the plan the
 * executor runs now), how the fused node's inputs and outputs map onto the Program's, and the
 * output shapes. Compute reads the inputs from the OrtKernelContext, finds their shapes in the
 * table, asks onnxruntime for the outputs and runs the plan: Python is entered only by the
 * plan's numpy segments. A shape the table does not hold (not compiled yet, evicted), a
 * runner without a plan (caller memory missing), or anything unusual goes to the Python
 * Compute, which compiles, registers and runs it, or raises the error that explains why not.
 * So do all runs while the EP's `divert` flag is set (Python sets it while the profiler is on
 * or a run asked for its own performance mode: those runs need step stamps or other cores).
 *
 * The EP's OnRunStart / OnRunEnd are here too: a run's performance mode is a run config
 * entry, and only a run that carries one enters Python (to parse it and divert the kernels).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>

#include "ep.h"

#define MAX_RANK 16
#define ON_STACK 16  /* inputs/outputs handled without a heap allocation */

typedef OrtStatus *(*compute_fn)(void *self, void *state, void *context);

typedef struct {
    int type, rank;
    int64_t dims[MAX_RANK];
    int64_t nbytes;
} tensor;

typedef struct {
    int64_t id;
    int64_t refs;
    int removed;
    uint64_t tick;
    lnpu_runner *runner;
    tensor *inputs;     /* per fused input: the shape this entry runs */
    tensor *outputs;    /* per fused output: the shape it produces */
    int64_t *order;     /* per Program input: the fused input it is */
    int64_t *position;  /* per fused output: its position among the Program's outputs */
    char **messages;    /* per fused output: the BindingError when onnxruntime refuses it */
} entry;

typedef struct {
    /* OrtNodeComputeInfo, as onnxruntime reads it */
    uint32_t ort_version_supported;
    OrtStatus *(*CreateState)(void *self, void *compute_context, void **state);
    compute_fn Compute;
    void (*ReleaseState)(void *self, void *state);
    /* ours */
    compute_fn python_compute;
    const int *divert;  /* nonzero: every run goes to python_compute (the EP's flag) */
    int64_t n_inputs, n_outputs;
    pthread_mutex_t mu;
    entry **entries;
    int64_t n_entries, cap_entries, next_id;
    uint64_t clock;
    atomic_llong runs;  /* runs that never entered Python's Compute */
} kernel;

static void free_entry(kernel *k, entry *e) {
    if (!e) return;
    if (e->messages)
        for (int64_t j = 0; j < k->n_outputs; j++) free(e->messages[j]);
    free(e->messages);
    free(e->inputs);
    free(e->outputs);
    free(e->order);
    free(e->position);
    free(e);
}

static void drop_entry(kernel *k, entry *e) {
    pthread_mutex_lock(&k->mu);
    int gone = --e->refs == 0 && e->removed;
    pthread_mutex_unlock(&k->mu);
    if (gone) free_entry(k, e);
}

/* Read one input's element type, shape and data; 0 with *status set, or when the shape is
 * one the table cannot hold (rank > MAX_RANK: *status stays NULL, Python runs it). */
static int read_input(const void *context, size_t i, tensor *t, void **data, OrtStatus **status) {
    const void *value;
    void *info = NULL;
    size_t rank;
    if ((*status = ort.KernelContext_GetInput(context, i, &value))) return 0;
    if (!value) return 0;
    if ((*status = ort.GetTensorTypeAndShape(value, &info))) return 0;
    if (!(*status = ort.GetTensorElementType(info, &t->type)) &&
        !(*status = ort.GetDimensionsCount(info, &rank)) && rank <= MAX_RANK) {
        t->rank = (int)rank;
        *status = ort.GetDimensions(info, t->dims, rank);
    } else {
        rank = MAX_RANK + 1;
    }
    ort.ReleaseTensorTypeAndShapeInfo(info);
    if (*status || rank > MAX_RANK) return 0;
    if ((*status = ort.GetTensorMutableData(value, data))) return 0;
    t->nbytes = element_size(t->type);
    for (int d = 0; d < t->rank; d++) t->nbytes *= t->dims[d];
    return 1;
}

static int same(const tensor *a, const tensor *b) {
    if (a->type != b->type || a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

/* The entry for these input shapes, held, with its plan held in *plan (NULL: no plan now). */
static entry *find(kernel *k, const tensor *inputs, lnpu_plan **plan) {
    entry *found = NULL;
    pthread_mutex_lock(&k->mu);
    for (int64_t n = 0; n < k->n_entries && !found; n++) {
        entry *e = k->entries[n];
        int match = 1;
        for (int64_t i = 0; i < k->n_inputs && match; i++) match = same(&e->inputs[i], &inputs[i]);
        if (match) found = e;
    }
    if (found) {
        found->refs++;
        found->tick = ++k->clock;
        *plan = npu.lnpu_runner_hold(found->runner);
    }
    pthread_mutex_unlock(&k->mu);
    return found;
}

/* Run `plan` on the context's tensors; NULL or the failure's status. */
static OrtStatus *run(kernel *k, entry *e, lnpu_plan *plan, void *context, void *const *data) {
    lnpu_buffer in_stack[ON_STACK], out_stack[ON_STACK];
    lnpu_buffer *ins = k->n_inputs <= ON_STACK ? in_stack : malloc((size_t)k->n_inputs * sizeof *ins);
    lnpu_buffer *outs = k->n_outputs <= ON_STACK ? out_stack : malloc((size_t)k->n_outputs * sizeof *outs);
    OrtStatus *status = NULL;
    if (!ins || !outs) {
        status = fail_status("NodeComputeInfo.Compute", "MemoryError", "no host memory for a run");
        goto done;
    }
    for (int64_t i = 0; i < k->n_inputs; i++) {
        int64_t fused = e->order[i];
        ins[i] = (lnpu_buffer){data[fused], e->inputs[fused].nbytes};
    }
    for (int64_t j = 0; j < k->n_outputs; j++) {
        const tensor *t = &e->outputs[j];
        void *value, *address = NULL;
        OrtStatus *refused = ort.KernelContext_GetOutput(context, (size_t)j, t->dims,
                                                          (size_t)t->rank, &value);
        if (!refused) refused = ort.GetTensorMutableData(value, &address);
        if (refused) {  /* e.g. a bound output of another shape */
            ort.ReleaseStatus(refused);
            status = fail_status("NodeComputeInfo.Compute", "BindingError", "%s", e->messages[j]);
            goto done;
        }
        outs[e->position[j]] = (lnpu_buffer){address, t->nbytes};
    }
    lnpu_copies copies;
    lnpu_error err;
    err.type[0] = 0;
    if (npu.lnpu_plan_execute(plan, ins, outs, -1, NULL, &copies, &err)) {
        status = fail_status("NodeComputeInfo.Compute", err.type[0] ? err.type : "LitenpuError",
                             "%s", err.message);
        goto done;
    }
    if (copies.copied_in || copies.copied_out) count_copies(copies.copied_in, copies.copied_out, 0);
    atomic_fetch_add_explicit(&k->runs, 1, memory_order_relaxed);
done:
    if (ins != in_stack) free(ins);
    if (outs != out_stack) free(outs);
    return status;
}

static OrtStatus *compute(void *self, void *state, void *context) {
    kernel *k = self;
    tensor in_stack[ON_STACK];
    void *data_stack[ON_STACK];
    tensor *inputs = k->n_inputs <= ON_STACK ? in_stack : malloc((size_t)k->n_inputs * sizeof *inputs);
    void **data = k->n_inputs <= ON_STACK ? data_stack : malloc((size_t)k->n_inputs * sizeof *data);
    OrtStatus *status = NULL;
    entry *e = NULL;
    lnpu_plan *plan = NULL;
    int known = inputs && data && !__atomic_load_n(k->divert, __ATOMIC_ACQUIRE);
    for (int64_t i = 0; i < k->n_inputs && known; i++)
        known = read_input(context, (size_t)i, &inputs[i], &data[i], &status);
    if (known) e = find(k, inputs, &plan);
    if (plan) {
        status = run(k, e, plan, context, data);
        npu.lnpu_plan_drop(plan);
    }
    if (e) drop_entry(k, e);
    if (inputs != in_stack) free(inputs);
    if (data != data_stack) free(data);
    if (plan || status) return status;
    return k->python_compute(self, state, context);
}

static OrtStatus *create_state(void *self, void *compute_context, void **state) {
    (void)compute_context;
    *state = self;  /* the kernel is its own state: all per-shape data lives in it */
    return NULL;
}

static void release_state(void *self, void *state) { (void)self, (void)state; }

/* A kernel for a fused node of `n_inputs` / `n_outputs` whose Compute falls back on
 * `python_compute` (called with the same arguments), always while `*divert` is nonzero. */
LITENPU_EXPORT void *litenpu_kernel_new(uint32_t api_version, int64_t n_inputs, int64_t n_outputs,
                                        compute_fn python_compute, const int *divert) {
    kernel *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->ort_version_supported = api_version;
    k->CreateState = create_state;
    k->Compute = compute;
    k->ReleaseState = release_state;
    k->python_compute = python_compute;
    k->divert = divert;
    k->n_inputs = n_inputs;
    k->n_outputs = n_outputs;
    pthread_mutex_init(&k->mu, NULL);
    return k;
}

/* After onnxruntime released the kernel: no Compute runs any more. */
LITENPU_EXPORT void litenpu_kernel_destroy(void *self) {
    kernel *k = self;
    for (int64_t n = 0; n < k->n_entries; n++) free_entry(k, k->entries[n]);
    free(k->entries);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

static int copy_tensors(tensor **out, int64_t n, const int32_t *types, const int32_t *ranks,
                        const int64_t *dims) {
    *out = calloc((size_t)(n ? n : 1), sizeof(tensor));
    if (!*out) return 0;
    for (int64_t i = 0; i < n; i++) {
        tensor *t = &(*out)[i];
        if (ranks[i] < 0 || ranks[i] > MAX_RANK) return 0;
        t->type = types[i];
        t->rank = ranks[i];
        t->nbytes = element_size(t->type);
        for (int d = 0; d < t->rank; d++) {
            t->dims[d] = *dims++;
            t->nbytes *= t->dims[d];
        }
    }
    return 1;
}

/* Register a compiled shape: the fused inputs' types/ranks/dims (dims concatenated), the
 * runner, per Program input the fused input it is, per fused output its Program position, its
 * type/rank/dims and the message when onnxruntime refuses it. Returns the entry's id (> 0),
 * or -1 (a rank above MAX_RANK, no host memory: runs of that shape stay in Python). */
LITENPU_EXPORT int64_t litenpu_kernel_add(void *self, const int32_t *in_types, const int32_t *in_ranks,
                                          const int64_t *in_dims, lnpu_runner *runner,
                                          const int64_t *order, const int64_t *position,
                                          const int32_t *out_types, const int32_t *out_ranks,
                                          const int64_t *out_dims, const char *const *messages) {
    kernel *k = self;
    entry *e = calloc(1, sizeof *e);
    if (!e) return -1;
    e->runner = runner;
    size_t ni = (size_t)(k->n_inputs ? k->n_inputs : 1), no = (size_t)(k->n_outputs ? k->n_outputs : 1);
    e->order = malloc(ni * sizeof(int64_t));
    e->position = malloc(no * sizeof(int64_t));
    e->messages = calloc(no, sizeof(char *));
    int ok = e->order && e->position && e->messages &&
             copy_tensors(&e->inputs, k->n_inputs, in_types, in_ranks, in_dims) &&
             copy_tensors(&e->outputs, k->n_outputs, out_types, out_ranks, out_dims);
    for (int64_t j = 0; ok && j < k->n_outputs; j++) ok = (e->messages[j] = strdup(messages[j])) != NULL;
    if (ok) {
        memcpy(e->order, order, (size_t)k->n_inputs * sizeof(int64_t));
        memcpy(e->position, position, (size_t)k->n_outputs * sizeof(int64_t));
    }
    pthread_mutex_lock(&k->mu);
    if (ok && k->n_entries == k->cap_entries) {
        int64_t cap = k->cap_entries ? 2 * k->cap_entries : 8;
        entry **more = realloc(k->entries, (size_t)cap * sizeof(entry *));
        ok = more != NULL;
        if (ok) {
            k->entries = more;
            k->cap_entries = cap;
        }
    }
    if (ok) {
        e->id = ++k->next_id;
        e->tick = ++k->clock;
        k->entries[k->n_entries++] = e;
    }
    pthread_mutex_unlock(&k->mu);
    if (!ok) {
        free_entry(k, e);
        return -1;
    }
    return e->id;
}

static int64_t index_of(kernel *k, int64_t id) {
    for (int64_t n = 0; n < k->n_entries; n++)
        if (k->entries[n]->id == id) return n;
    return -1;
}

/* Forget an entry: no run finds it any more (runs holding it finish first). */
LITENPU_EXPORT void litenpu_kernel_remove(void *self, int64_t id) {
    kernel *k = self;
    entry *gone = NULL;
    pthread_mutex_lock(&k->mu);
    int64_t n = index_of(k, id);
    if (n >= 0) {
        entry *e = k->entries[n];
        k->entries[n] = k->entries[--k->n_entries];
        e->removed = 1;
        if (e->refs == 0) gone = e;
    }
    pthread_mutex_unlock(&k->mu);
    free_entry(k, gone);
}

/* When the entry was last used (a clock of the kernel's uses: least recent is smallest); 0
 * when it is not in the table. `touch`: count this as a use. */
LITENPU_EXPORT uint64_t litenpu_kernel_tick(void *self, int64_t id, int touch) {
    kernel *k = self;
    uint64_t tick = 0;
    pthread_mutex_lock(&k->mu);
    int64_t n = index_of(k, id);
    if (n >= 0) {
        if (touch) k->entries[n]->tick = ++k->clock;
        tick = k->entries[n]->tick;
    }
    pthread_mutex_unlock(&k->mu);
    return tick;
}

/* Runs this kernel made without entering Python's Compute. */
LITENPU_EXPORT int64_t litenpu_kernel_runs(void *self) { return atomic_load(&((kernel *)self)->runs); }

/* ---- run hooks -------------------------------------------------------------------------------- */

typedef OrtStatus *(*run_start_fn)(void *ep, const void *run_options);
typedef OrtStatus *(*run_end_fn)(void *ep, const void *run_options, bool sync_stream);

static run_start_fn python_run_start;
static run_end_fn python_run_end;
static char run_key[128];
static _Thread_local int run_in_python;  /* this thread's run entered python_run_start */

/* The Python hooks and the run config entry that sends a run to them. */
LITENPU_EXPORT void litenpu_set_run_hooks(run_start_fn start, run_end_fn end, const char *key) {
    python_run_start = start;
    python_run_end = end;
    snprintf(run_key, sizeof run_key, "%s", key);
}

/* OrtEp::OnRunStart: nothing unless the run carries the entry. */
LITENPU_EXPORT OrtStatus *litenpu_on_run_start(void *ep, const void *run_options) {
    if (!run_options || !python_run_start || !ort.GetRunConfigEntry(run_options, run_key))
        return NULL;
    run_in_python = 1;
    return python_run_start(ep, run_options);
}

/* OrtEp::OnRunEnd: the Python hook's end, for a run that started there. */
LITENPU_EXPORT OrtStatus *litenpu_on_run_end(void *ep, const void *run_options, bool sync_stream) {
    if (!run_in_python) return NULL;
    run_in_python = 0;
    return python_run_end(ep, run_options, sync_stream);
}
