/* Compiled kernels of the reference NPU and the runner that executes a Program's steps.
 *
 * Python (provider/npu/native) lowers each step it can run here into an lnpu_step (slot
 * indices + integer/float parameters, all validated there) and calls lnpu_run once per run
 * of consecutive native steps, with a table of slot addresses. The GEMMs go to a
 * single-threaded OpenBLAS sgemm whose address Python passes in (lnpu_set_sgemm); the
 * NPU's cores are this file's thread pool, which splits every large kernel into tasks.
 *
 * Everything here trusts the lowering: shapes, slot sizes and dtypes were checked when the
 * steps were built, so a kernel never sees a buffer smaller than its parameters say.
 */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))

/* Hot loops are compiled for AVX-512 and AVX2 as well as the baseline, picked at load time
 * (GCC/clang function multiversioning; needs ifunc, so Linux x86-64 only). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

enum { OP_CONV = 1, OP_DWCONV, OP_MAXPOOL, OP_AVGPOOL, OP_GLOBALPOOL, OP_CONCAT, OP_TRANSPOSE,
       OP_MATMUL, OP_ACT, OP_SOFTMAX, OP_COUNT };

#define MAX_SLOTS 16
#define MAX_PARAMS 32

/* One step. Slots are indices into the run's address table (-1: absent); p and f hold the
 * op's parameters, laid out as the P_* / F_* names of each op below say. */
typedef struct {
    int64_t op;
    int64_t slot[MAX_SLOTS];
    int64_t p[MAX_PARAMS];
    float f[4];
} lnpu_step;

/* Fused activation of an output: clamp to [lo, hi] (none: -inf..inf, RELU: 0..inf, RELU6:
 * 0..6, HARD_TANH: min..max), or leaky (x < 0: alpha * x). */
enum { ACT_CLAMP = 0, ACT_LEAKY = 1 };

/* ---- GEMM ---------------------------------------------------------------------------- */

typedef void (*sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k,
                         float alpha, const float *a, int lda, const float *b, int ldb,
                         float beta, float *c, int ldc);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

static sgemm_fn sgemm;

API void lnpu_set_sgemm(void *fn) { sgemm = (sgemm_fn)fn; }

/* ---- thread pool ----------------------------------------------------------------------- */

#define MAX_THREADS 64
/* The tunables below (SPIN_NS, TASK_NS, GEMM_*, DW_SMALL_PLANE) may be overridden with -D to
 * compare settings: a benchmark, not a guess, decides them. */
#ifndef SPIN_NS
#define SPIN_NS 500000L /* idle workers spin this long after a run before they sleep */
#endif

typedef void (*task_fn)(const void *ctx, int64_t task);

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_mutex_t submit;  /* one job at a time; a second caller runs its job inline */
    int threads;             /* cores, the caller included */
    int started;             /* workers running */
    int sleeping;
    int stop;
    atomic_long generation;
    atomic_int running;      /* lnpu_run calls in progress: workers spin, jobs come fast */
    atomic_long next;        /* the job's next task */
    atomic_int open;         /* the job still takes workers */
    atomic_int joined;       /* workers inside the job */
    int limit;               /* the job takes at most this many workers */
    task_fn fn;
    const void *ctx;
    int64_t tasks;
    pthread_t tid[MAX_THREADS];
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 1};

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin-wait step: a pause, and every 64th time a yield, so that a spinning thread sharing
 * a core with the one it waits for (the scheduler does that) lets it run. */
static inline void spin(unsigned *count) {
    if (++*count % 64 == 0) sched_yield();
    else relax();
}

static atomic_long worker_tasks;  /* tasks run by workers, ever: shows the split happens */

static void drain(int worker) {
    for (;;) {
        int64_t t = atomic_fetch_add(&pool.next, 1);
        if (t >= pool.tasks) return;
        pool.fn(pool.ctx, t);
        if (worker) atomic_fetch_add_explicit(&worker_tasks, 1, memory_order_relaxed);
    }
}

API int64_t lnpu_worker_tasks(void) { return atomic_load(&worker_tasks); }

/* A worker joins each published job it sees while the job is open; the caller waits only
 * for workers that joined, so a worker that wakes late never holds a job up.
 * arg: the generation current when the worker was created (it may start after the job
 * that created it was published, and must still take part in that job). */
static void *worker(void *arg) {
    long seen = (long)(intptr_t)arg;
    for (;;) {
        long start = now_ns(), g;
        unsigned spins = 0;
        while ((g = atomic_load(&pool.generation)) == seen) {
            spin(&spins);
            if (spins % 64) continue;  /* the clock only now and then */
            if (atomic_load_explicit(&pool.running, memory_order_relaxed) > 0) start = now_ns();
            if (now_ns() - start < SPIN_NS) continue;
            pthread_mutex_lock(&pool.mu);
            pool.sleeping++;
            while (atomic_load(&pool.generation) == seen && !pool.stop)
                pthread_cond_wait(&pool.wake, &pool.mu);
            pool.sleeping--;
            int stop = pool.stop;
            pthread_mutex_unlock(&pool.mu);
            if (stop) return NULL;
        }
        seen = g;
        int place = atomic_fetch_add(&pool.joined, 1);
        if (place < pool.limit && atomic_load(&pool.open) && atomic_load(&pool.generation) == g)
            drain(1);
        atomic_fetch_sub(&pool.joined, 1);
    }
}

static void stop_workers(void) {
    pthread_mutex_lock(&pool.mu);
    pool.stop = 1;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < pool.started; i++) pthread_join(pool.tid[i], NULL);
    pool.started = 0;
    pool.stop = 0;
}

/* After fork() only the forking thread exists: forget the workers (restarted lazily). */
static void after_fork_child(void) {
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_mutex_init(&pool.submit, NULL);
    pool.started = 0;
    pool.sleeping = 0;
    pool.stop = 0;
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void install_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* Use `n` cores from now on (1: everything on the calling thread). Returns the count. */
API int lnpu_set_threads(int n) {
    pthread_once(&fork_once, install_fork_handler);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    pthread_mutex_lock(&pool.submit);
    stop_workers();
    pool.threads = n;
    pthread_mutex_unlock(&pool.submit);
    return n;
}

API int lnpu_threads(void) { return pool.threads; }

/* Cores of the run in progress on this thread: its caller's limit within the pool's. */
static __thread int run_cores = 0;
static inline int cores(void) {
    return run_cores > 0 && run_cores < pool.threads ? run_cores : pool.threads;
}

/* fn(ctx, t) for t in [0, tasks), on every core; returns when all are done. */
static void parallel(task_fn fn, const void *ctx, int64_t tasks) {
    if (tasks <= 0) return;
    if (tasks == 1 || cores() == 1 || pthread_mutex_trylock(&pool.submit) != 0) {
        for (int64_t t = 0; t < tasks; t++) fn(ctx, t);
        return;
    }
    int workers = pool.threads - 1;
    while (pool.started < workers) {
        void *seen = (void *)(intptr_t)atomic_load(&pool.generation);
        if (pthread_create(&pool.tid[pool.started], NULL, worker, seen) != 0) break;
        pool.started++;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.tasks = tasks;
    pool.limit = cores() - 1;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.open, 1);
    atomic_fetch_add(&pool.generation, 1);
    pthread_mutex_lock(&pool.mu);
    if (pool.sleeping) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    drain(0);
    atomic_store(&pool.open, 0);  /* every task is taken: wait for those still running */
    unsigned spins = 0;
    while (atomic_load(&pool.joined) > 0) spin(&spins);
    pthread_mutex_unlock(&pool.submit);
}

/* How many tasks a kernel of about `ns` nanoseconds on one core is worth: one per
 * TASK_NS (handing a task to a spinning worker costs well under a microsecond), up to 4
 * per core, at most `limit`. Rates for the estimates: */
#ifndef TASK_NS
#define TASK_NS 4000.0
#endif
#define GEMM_MACS_PER_NS 80.0   /* fp32 GEMM on one AVX-512 core */
#define COPY_FLOATS_PER_NS 4.0  /* short strided copies (im2col) */
#ifndef GEMM_TASKS_PER_CORE
#define GEMM_TASKS_PER_CORE 1
#endif
#ifndef GEMM_MIN_COLS
#define GEMM_MIN_COLS 96        /* narrower GEMMs run well below OpenBLAS's peak */
#endif
static int64_t task_count(double ns, int64_t limit) {
    int64_t n = cores() == 1 ? 1 : (int64_t)(ns / TASK_NS);
    if (n > 4 * cores()) n = 4 * cores();
    if (n > limit) n = limit;
    return n < 1 ? 1 : n;
}

/* Per-thread scratch, in two independent slots: SCRATCH_PLANES (phase planes, window
 * planes; a conv's caller keeps its phases there while its own tasks run) and
 * SCRATCH_PACK (a task's packed weights). */
enum { SCRATCH_PLANES, SCRATCH_PACK, SCRATCH_SLOTS };
static pthread_key_t scratch_key[SCRATCH_SLOTS];
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void make_scratch_keys(void) {
    for (int i = 0; i < SCRATCH_SLOTS; i++) pthread_key_create(&scratch_key[i], free);
}

/* This thread's scratch `slot` of at least `floats` floats, 64-byte aligned (kept for its
 * next kernels, freed when the thread ends), or NULL when out of memory. */
static float *thread_scratch(int slot, int64_t floats) {
    pthread_once(&scratch_once, make_scratch_keys);
    int64_t *block = pthread_getspecific(scratch_key[slot]);
    if (block && block[0] >= floats) return (float *)(block + 8);
    free(block);
    block = aligned_alloc(64, (64 + floats * sizeof(float) + 63) / 64 * 64);
    pthread_setspecific(scratch_key[slot], block);
    if (!block) return NULL;
    block[0] = floats;
    return (float *)(block + 8);
}

/* Give back this thread's scratch if it grew past SCRATCH_KEEP_BYTES (a big conv's phase
 * planes), so an idle process does not hold it. */
#define SCRATCH_KEEP_BYTES (8L << 20)
static void trim_thread_scratch(void) {
    pthread_once(&scratch_once, make_scratch_keys);
    for (int i = 0; i < SCRATCH_SLOTS; i++) {
        int64_t *block = pthread_getspecific(scratch_key[i]);
        if (block && block[0] * (int64_t)sizeof(float) > SCRATCH_KEEP_BYTES) {
            free(block);
            pthread_setspecific(scratch_key[i], NULL);
        }
    }
}

/* ---- shared index helpers --------------------------------------------------------------- */

/* [*lo, *hi): the columns c < limit whose input column c * stride + off lies in [0, w). */
static inline void valid_columns(int64_t off, int64_t stride, int64_t w, int64_t limit,
                                 int64_t *lo, int64_t *hi) {
    *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
    *hi = w - off <= 0 ? 0 : (w - off + stride - 1) / stride;
    if (*hi > limit) *hi = limit;
    if (*lo > *hi) *lo = *hi;
}

/* One phase plane of a channel: q[r][c] = x[r*sh + ph - pt][c*sw + pw - pl] for r < hq,
 * c < wq, `pad` outside the input. Inlined into the vectorized callers; a constant stride
 * of 2 vectorizes (shuffles) where a run-time stride would not. */
static inline __attribute__((always_inline)) void fill_phase(
        float *restrict q, int64_t hq, int64_t wq, const float *restrict x, int64_t h,
        int64_t w, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t pt, int64_t pl,
        float pad) {
    int64_t lo, hi, off = pw - pl;
    valid_columns(off, sw, w, wq, &lo, &hi);
    int64_t r0 = pt - ph > 0 ? (pt - ph + sh - 1) / sh : 0;
    int64_t r1 = (h - 1 - ph + pt) / sh + 1;  /* rows [r0, r1) hold input */
    if (r1 > hq) r1 = hq;
    if (r0 > r1) r0 = r1;
    for (int64_t k = 0; k < r0 * wq; k++) q[k] = pad;
    for (int64_t k = r1 * wq; k < hq * wq; k++) q[k] = pad;
    for (int64_t r = r0; r < r1; r++) {
        const float *in = x + (r * sh + ph - pt) * w + off;
        float *row = q + r * wq;
        for (int64_t c = 0; c < lo; c++) row[c] = pad;
        if (sw == 1) {
            for (int64_t c = lo; c < hi; c++) row[c] = in[c];
        } else if (sw == 2) {
            for (int64_t c = lo; c < hi; c++) row[c] = in[2 * c];
        } else {
            for (int64_t c = lo; c < hi; c++) row[c] = in[c * sw];
        }
        for (int64_t c = hi; c < wq; c++) row[c] = pad;
    }
}

/* ---- fused epilogue -------------------------------------------------------------------- */

typedef struct {
    int kind;
    float lo, hi, alpha;
} act_t;

static act_t act_of(const lnpu_step *s, int at) {
    act_t a = {(int)s->p[at], s->f[0], s->f[1], s->f[2]};
    return a;
}

/* y[i] = act(x[i] + bias [+ res[i]]) for i < n, in one pass; y may be x. */
static inline __attribute__((always_inline)) void finish(
        float *y, const float *x, int64_t n, float bias, const float *res, act_t act) {
    float lo = act.lo, hi = act.hi, alpha = act.alpha;
    if (act.kind == ACT_LEAKY) {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] + bias + (res ? res[i] : 0.0f);
            y[i] = v < 0.0f ? v * alpha : v;
        }
    } else if (res) {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] + bias + res[i];
            v = v < lo ? lo : v;
            y[i] = v > hi ? hi : v;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] + bias;
            v = v < lo ? lo : v;
            y[i] = v > hi ? hi : v;
        }
    }
}

/* y[i] = act(y[i] + bias [+ res[i]]) for i < n, in one pass (for callers that are not
 * compiled per instruction set themselves; the others inline finish). */
MULTIVERSION static void epilogue(float *y, int64_t n, float bias, const float *res, act_t act) {
    finish(y, y, n, bias, res, act);
}

/* ---- convolution ----------------------------------------------------------------------- */

/* conv / depthwise parameters */
enum { C_N, C_C, C_H, C_W, C_O, C_OH, C_OW, C_G, C_KH, C_KW, C_SH, C_SW, C_DH, C_DW, C_PT, C_PL,
       C_ACT, C_IM2COL };
/* conv slots */
enum { S_X, S_W, S_BIAS, S_RES, S_Y, S_COLS };

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y, *cols;
    act_t act;
    int64_t n;                    /* image */
    int64_t mblocks, nblocks, rows_per_task;
    float *phase;                 /* strided convs: the image's column phases, else NULL */
    int64_t wq;                   /* width of a phase row */
} conv_ctx;

/* Rows [r0, r1), columns [k0, k1) of the image's im2col matrix (C*KH*KW, OH*OW): row
 * (c, i, j) holds input channel c shifted by tap (i, j), zero where the tap falls in the
 * padding; column k is output pixel (k / OW, k % OW). */
MULTIVERSION static void im2col(const conv_ctx *cx, int64_t r0, int64_t r1, int64_t k0, int64_t k1) {
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], OW = p[C_OW], KH = p[C_KH], KW = p[C_KW];
    int64_t SH = p[C_SH], SW = p[C_SW], DH = p[C_DH], DW = p[C_DW], PT = p[C_PT], PL = p[C_PL];
    int64_t HW = p[C_OH] * OW;
    const float *x = cx->x + cx->n * p[C_C] * H * W;
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r / (KH * KW), i = r / KW % KH, j = r % KW;
        const float *xc = x + c * H * W;
        float *row = cx->cols + r * HW;
        int64_t off = j * DW - PL, lo, hi;
        valid_columns(off, SW, W, OW, &lo, &hi);
        for (int64_t oh = k0 / OW; oh * OW < k1; oh++) {
            int64_t a = k0 > oh * OW ? k0 - oh * OW : 0;       /* this row's columns [a, b) */
            int64_t b = k1 < (oh + 1) * OW ? k1 - oh * OW : OW;
            float *out = row + oh * OW;
            int64_t ih = oh * SH + i * DH - PT;
            if (ih < 0 || ih >= H) { memset(out + a, 0, (b - a) * sizeof(float)); continue; }
            if (cx->phase) {  /* a contiguous, already padded phase row */
                const float *src = cx->phase + ((c * SW + j * DW % SW) * H + ih) * cx->wq
                                   + j * DW / SW;
                memcpy(out + a, src + a, (b - a) * sizeof(float));
                continue;
            }
            const float *in = xc + ih * W + off;
            int64_t va = a > lo ? a : lo, vb = b < hi ? b : hi;  /* valid part */
            if (va >= vb) { memset(out + a, 0, (b - a) * sizeof(float)); continue; }
            if (va > a) memset(out + a, 0, (va - a) * sizeof(float));
            memcpy(out + va, in + va, (vb - va) * sizeof(float));
            if (b > vb) memset(out + vb, 0, (b - vb) * sizeof(float));
        }
    }
}

/* Column phases of a strided conv's image, so that im2col copies contiguous rows:
 *     phase[c][pw][ih][q] = x[c][ih][q * SW + pw - PL]  (0 outside the input).
 * Task t: channel t. */
MULTIVERSION static void phase_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], SW = p[C_SW];
    for (int64_t pw = 0; pw < SW; pw++)
        fill_phase(cx->phase + (t * SW + pw) * H * cx->wq, H, cx->wq,
                   cx->x + (cx->n * p[C_C] + t) * H * W, H, W, 1, SW, 0, pw, 0, p[C_PL], 0.0f);
}

static void im2col_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    int64_t rows = cx->p[C_C] * cx->p[C_KH] * cx->p[C_KW];
    int64_t r0 = t * cx->rows_per_task, r1 = r0 + cx->rows_per_task;
    im2col(cx, r0, r1 < rows ? r1 : rows, 0, cx->p[C_OH] * cx->p[C_OW]);
}

/* Task t: group g, a block of output channels and a block of output columns: one GEMM and
 * its epilogue (bias, residual, activation) while the block is in cache. */
static void gemm_task(const void *ctx, int64_t t) {
    const conv_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t G = p[C_G], O = p[C_O], OG = O / G, HW = p[C_OH] * p[C_OW];
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW];
    int64_t nb = t % cx->nblocks, mb = t / cx->nblocks % cx->mblocks, g = t / cx->nblocks / cx->mblocks;
    int64_t mstep = (OG + cx->mblocks - 1) / cx->mblocks;
    int64_t nstep = ((HW + cx->nblocks - 1) / cx->nblocks + 15) / 16 * 16;
    int64_t m0 = mb * mstep, m1 = m0 + mstep < OG ? m0 + mstep : OG;
    int64_t n0 = nb * nstep, n1 = n0 + nstep < HW ? n0 + nstep : HW;
    if (m0 >= m1 || n0 >= n1) return;
    if (p[C_IM2COL] && cx->mblocks == 1)  /* this task alone reads these columns: build them
                                            * now, so the GEMM finds them in cache */
        im2col(cx, g * K, (g + 1) * K, n0, n1);
    const float *b = p[C_IM2COL] ? cx->cols + g * K * HW
                                 : cx->x + (cx->n * p[C_C] + g * (p[C_C] / G)) * HW;
    int64_t o0 = g * OG + m0;
    float *y = cx->y + (cx->n * O + o0) * HW;
    sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, (int)(m1 - m0), (int)(n1 - n0), (int)K, 1.0f,
          cx->w + o0 * K, (int)K, b + n0, (int)HW, 0.0f, y + n0, (int)HW);
    const float *res = cx->res ? cx->res + (cx->n * O + o0) * HW : NULL;
    for (int64_t m = 0; m < m1 - m0; m++)
        epilogue(y + m * HW + n0, n1 - n0, cx->bias ? cx->bias[o0 + m] : 0.0f,
                 res ? res + m * HW + n0 : NULL, cx->act);
}

/* ---- direct convolution ----------------------------------------------------------------
 *
 * A KxK conv without im2col. The image is copied once into zero-padded phase planes per
 * channel (as for the windowed kernels: phase (ph, pw) holds padded rows ph, ph + SH, ... and
 * columns pw, pw + SW, ...; stride 1 has one phase, the padded image), WQ columns wide, and
 * the output is computed on rows of the same width WQ, flattened: output position
 * k = oh * WQ + ow reads tap (i, j) of channel c at
 *     phase[c][(i*DH) % SH][(j*DW) % SW][k + (i*DH / SH) * WQ + j*DW / SW],
 * one offset per tap for every k. A tile of OB output channels x DNV vectors of consecutive
 * positions keeps its OB x DNV accumulators in registers; each (c, tap) step loads DNV
 * input vectors and broadcasts OB weights. The WQ - OW extra columns of each row are computed
 * and dropped. */
#ifndef DIRECT_CONV
#define DIRECT_CONV 1
#endif
#define DVEC 16                   /* floats per vector (one AVX-512 register) */
#ifndef DIRECT_1X1
#define DIRECT_1X1 0              /* 1x1 convs: OpenBLAS was measured faster */
#endif
#ifndef DIRECT_MIN_K
#define DIRECT_MIN_K 32           /* multiply-adds per output below which GEMM wins */
#endif
#ifndef DNV
#define DNV 3                     /* vectors per tile: 48 positions (2 and 4 measured slower) */
#endif
#define DTILE (DVEC * DNV)
#ifndef DIRECT_OB
#define DIRECT_OB 8               /* output channels per tile */
#endif
#define MAX_TAPS 64
typedef float vf __attribute__((vector_size(DVEC * sizeof(float)), aligned(4)));

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y, *phases;            /* C x SH*SW phase planes of `plane` floats */
    act_t act;
    int64_t n, wq, hq, plane, span, ptiles, oblocks;
    int64_t taps, tap_off[MAX_TAPS];  /* per tap: offset within a channel's phases */
    atomic_int *failed;           /* set by a task whose thread has no memory to pack into */
} direct_ctx;

/* One tile: OB output channels (weights packed wp[t * OB + o]: the OB broadcasts of a step
 * read one run of floats) x DTILE positions from src0 (the group's first channel at the
 * tile's first position), stored to out (OB rows of DTILE). */
static inline __attribute__((always_inline)) void direct_tile(
        const direct_ctx *cx, const float *wp, const float *src0, float *out, int OB) {
    int64_t CG = cx->p[C_C] / cx->p[C_G], cstride = cx->p[C_SH] * cx->p[C_SW] * cx->plane;
    vf acc[DIRECT_OB][DNV];
    for (int o = 0; o < OB; o++)
        for (int v = 0; v < DNV; v++) acc[o][v] = (vf){0};
    int64_t t = 0;
    for (int64_t c = 0; c < CG; c++) {
        const float *xc = src0 + c * cstride;
        for (int64_t tap = 0; tap < cx->taps; tap++, t++) {
            const float *src = xc + cx->tap_off[tap];
            vf x[DNV];
            for (int v = 0; v < DNV; v++) memcpy(&x[v], src + v * DVEC, sizeof(vf));
            for (int o = 0; o < OB; o++) {
                float w1 = wp[t * OB + o];
                vf wv = {w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1, w1};
                for (int v = 0; v < DNV; v++) acc[o][v] += wv * x[v];
            }
        }
    }
    for (int o = 0; o < OB; o++)
        for (int v = 0; v < DNV; v++) memcpy(out + o * DTILE + v * DVEC, &acc[o][v], sizeof(vf));
}

MULTIVERSION static void direct_tile_any(const direct_ctx *cx, const float *wp,
                                         const float *src0, float *out, int ob) {
    /* constant tile heights, so the accumulators stay in registers */
    if (ob == DIRECT_OB) direct_tile(cx, wp, src0, out, DIRECT_OB);
    else if (ob == 4) direct_tile(cx, wp, src0, out, 4);
    else if (ob == 2) direct_tile(cx, wp, src0, out, 2);
    else direct_tile(cx, wp, src0, out, 1);
}

/* Task t: one block of DIRECT_OB output channels (of one group) over every position tile. */
MULTIVERSION static void direct_task(const void *ctx, int64_t t) {
    const direct_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t G = p[C_G], O = p[C_O], OG = O / G, OH = p[C_OH], OW = p[C_OW], WQ = cx->wq;
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW];
    int64_t g = t / cx->oblocks, o0 = g * OG + t % cx->oblocks * DIRECT_OB;
    int64_t o1 = o0 + DIRECT_OB < (g + 1) * OG ? o0 + DIRECT_OB : (g + 1) * OG;
    float tile[DIRECT_OB * DTILE];
    const float *src_g = cx->phases + g * (p[C_C] / G) * p[C_SH] * p[C_SW] * cx->plane;
    float *wp = thread_scratch(SCRATCH_PACK, DIRECT_OB * K);
    if (!wp) { atomic_store(cx->failed, 1); return; }
    for (int64_t o = o0; o < o1;) {  /* the block in tiles of 8, 4, 2, 1 channels */
        int ob = o1 - o >= DIRECT_OB ? DIRECT_OB : o1 - o >= 4 ? 4 : o1 - o >= 2 ? 2 : 1;
        for (int64_t k = 0; k < K; k++)
            for (int r = 0; r < ob; r++) wp[k * ob + r] = cx->w[(o + r) * K + k];
        for (int64_t pt = 0; pt < cx->ptiles; pt++) {
            int64_t k0 = pt * DTILE, k1 = k0 + DTILE < cx->span ? k0 + DTILE : cx->span;
            direct_tile_any(cx, wp, src_g + k0, tile, ob);
            for (int r = 0; r < ob; r++) {  /* the tile's valid positions, with the epilogue */
                int64_t oc = o + r;
                float *y = cx->y + (cx->n * O + oc) * OH * OW;
                const float *res = cx->res ? cx->res + (cx->n * O + oc) * OH * OW : NULL;
                for (int64_t oh = k0 / WQ; oh * WQ < k1; oh++) {  /* row pieces in the tile */
                    int64_t a = k0 > oh * WQ ? k0 - oh * WQ : 0;
                    int64_t e = k1 - oh * WQ < OW ? k1 - oh * WQ : OW;
                    if (a >= e) continue;
                    finish(y + oh * OW + a, tile + r * DTILE + oh * WQ + a - k0, e - a,
                           cx->bias ? cx->bias[oc] : 0.0f, res ? res + oh * OW + a : NULL, cx->act);
                }
            }
        }
        o += ob;
    }
}

/* The phase planes of channel t (zero padding, zero slack after each plane for the last
 * tiles' overrun). */
MULTIVERSION static void direct_phase_task(const void *ctx, int64_t t) {
    const direct_ctx *cx = ctx;
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], SH = p[C_SH], SW = p[C_SW];
    for (int64_t ph = 0; ph < SH; ph++) {
        for (int64_t pw = 0; pw < SW; pw++) {
            float *q = cx->phases + ((t * SH + ph) * SW + pw) * cx->plane;
            fill_phase(q, cx->hq, cx->wq, cx->x + (cx->n * p[C_C] + t) * H * W, H, W, SH, SW,
                       ph, pw, p[C_PT], p[C_PL], 0.0f);
            for (int64_t k = cx->hq * cx->wq; k < cx->plane; k++) q[k] = 0.0f;
        }
    }
}

/* Direct for windows (not 1x1: GEMM does those better) with enough taps per group to fill
 * the tiles, and planes that waste little of the last tile and of the WQ - OW extra columns
 * (a 7x7 output computes 96 positions for 49): measured per conv shape against im2col+GEMM. */
static int direct_eligible(const int64_t *p) {
    int64_t taps = p[C_KH] * p[C_KW];
    if ((taps == 1 && !DIRECT_1X1) || taps > MAX_TAPS || p[C_C] / p[C_G] * taps < DIRECT_MIN_K)
        return 0;
    int64_t wq = p[C_OW] + (p[C_KW] - 1) * p[C_DW] / p[C_SW];
    int64_t computed = (p[C_OH] * wq + DTILE - 1) / DTILE * DTILE;
    return p[C_OH] * p[C_OW] * 10 >= computed * 7;
}

/* Returns -1 when there is no host memory for the phase planes. */
static int direct_conv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    int64_t SH = p[C_SH], SW = p[C_SW], OH = p[C_OH], OW = p[C_OW];
    int64_t G = p[C_G], OG = p[C_O] / G;
    atomic_int failed = 0;
    direct_ctx cx = {p, slots[s->slot[S_X]], slots[s->slot[S_W]],
                     s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL,
                     s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL, slots[s->slot[S_Y]],
                     NULL, act_of(s, C_ACT), 0, 0, 0, 0, 0, 0, (OG + DIRECT_OB - 1) / DIRECT_OB,
                     p[C_KH] * p[C_KW], {0}, &failed};
    int64_t row_reach = (p[C_KH] - 1) * p[C_DH] / SH, col_reach = (p[C_KW] - 1) * p[C_DW] / SW;
    cx.wq = OW + col_reach;
    cx.hq = OH + row_reach + 1;  /* + a spare row: the last taps read past their row end */
    cx.span = OH * cx.wq;
    cx.ptiles = (cx.span + DTILE - 1) / DTILE;
    cx.plane = cx.hq * cx.wq + DTILE;  /* + slack: the last tile reads past the span */
    for (int64_t i = 0; i < p[C_KH]; i++) {
        for (int64_t j = 0; j < p[C_KW]; j++) {
            int64_t a = i * p[C_DH], b = j * p[C_DW];
            cx.tap_off[i * p[C_KW] + j] = ((a % SH) * SW + b % SW) * cx.plane + a / SH * cx.wq + b / SW;
        }
    }
    cx.phases = thread_scratch(SCRATCH_PLANES, p[C_C] * SH * SW * cx.plane);
    if (!cx.phases) return -1;
    for (int64_t n = 0; n < p[C_N]; n++) {
        cx.n = n;
        parallel(direct_phase_task, &cx, p[C_C]);
        parallel(direct_task, &cx, G * cx.oblocks);
    }
    return atomic_load(&failed) ? -1 : 0;
}

/* Returns -1 when there is no host memory for a strided conv's phases. */
static int conv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    if (DIRECT_CONV && direct_eligible(p)) return direct_conv(s, slots);
    conv_ctx cx = {p, slots[s->slot[S_X]], slots[s->slot[S_W]],
                   s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL,
                   s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL,
                   slots[s->slot[S_Y]], p[C_IM2COL] ? slots[s->slot[S_COLS]] : NULL,
                   act_of(s, C_ACT), 0, 1, 1, 0, NULL, 0};
    int64_t G = p[C_G], OG = p[C_O] / G, HW = p[C_OH] * p[C_OW];
    int64_t K = p[C_C] / G * p[C_KH] * p[C_KW], rows = p[C_C] * p[C_KH] * p[C_KW];
    /* GEMM tasks: one per core (more, smaller GEMMs pack their operands more often and run
     * measurably slower), whole column blocks of >= GEMM_MIN_COLS when there are enough
     * (each builds its own im2col columns, which it then finds in cache), else blocks of
     * output channels */
    int64_t want = task_count((double)p[C_O] * K * HW / GEMM_MACS_PER_NS, 1 << 20);
    int nc = cores();
    if (want > GEMM_TASKS_PER_CORE * nc) want = GEMM_TASKS_PER_CORE * nc;
    if (want > nc) want -= want % nc;
    if (want > G) {
        int64_t per_group = (want + G - 1) / G;
        cx.nblocks = HW / GEMM_MIN_COLS >= per_group ? per_group : 1;
        int64_t left = (per_group + cx.nblocks - 1) / cx.nblocks;
        cx.mblocks = OG / 16 > 1 ? (OG / 16 < left ? OG / 16 : left) : 1;
    }
    int64_t im2col_tasks = task_count((double)rows * HW / COPY_FLOATS_PER_NS, rows);
    cx.rows_per_task = (rows + im2col_tasks - 1) / im2col_tasks;
    if (p[C_IM2COL] && p[C_SW] > 1) {  /* the calling thread's scratch, read by every task */
        cx.wq = p[C_OW] + (p[C_KW] - 1) * p[C_DW] / p[C_SW];
        cx.phase = thread_scratch(SCRATCH_PLANES, p[C_C] * p[C_SW] * p[C_H] * cx.wq);
        if (!cx.phase) return -1;
    }
    for (int64_t n = 0; n < p[C_N]; n++) {
        cx.n = n;
        if (cx.phase) parallel(phase_task, &cx, p[C_C]);
        if (p[C_IM2COL] && cx.mblocks > 1)  /* blocks of rows share columns: build them first */
            parallel(im2col_task, &cx, (rows + cx.rows_per_task - 1) / cx.rows_per_task);
        parallel(gemm_task, &cx, G * cx.mblocks * cx.nblocks);
    }
    return 0;
}

/* ---- windowed planes: depthwise conv, max pool, average pool --------------------------
 *
 * One output plane from one input plane. The input is split into SH x SW phase planes,
 * padded with the window's pad value,
 *     phase[ph][pw][r][c] = x[r * SH + ph - PT][c * SW + pw - PL],
 * in which every tap (i, j) of every output pixel is the same shifted element
 *     phase[(i*DH) % SH][(j*DW) % SW][oh + (i*DH) / SH][ow + (j*DW) / SW],
 * so each tap is one long contiguous multiply-add (max, add) over the output laid out as OH
 * rows of WQ (the phase width); the WQ - OW extra columns of each row are dropped at the end.
 * Small loops are written out instead of memcpy/memset calls: planes are often 7x7. */
typedef struct {
    int64_t h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, hq, wq;
} window_t;

enum { WIN_DW, WIN_MAX, WIN_AVG };

static window_t window_of(int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                          int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl) {
    /* phase planes: OH rows (+ the deepest tap's row offset, + 1 spare row for the last
     * taps' overrun past the row end) of OW columns (+ the widest tap's column offset) */
    window_t g = {h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl,
                  oh + (kh - 1) * dh / sh + 1, ow + (kw - 1) * dw / sw};
    return g;
}

/* floats of scratch one plane needs: the phase planes and the wide output */
static int64_t window_scratch(const window_t *g) { return (g->sh * g->sw * g->hq + g->oh) * g->wq; }

MULTIVERSION static void window_plane(const window_t *g, int kind, const float *restrict xc,
                                      const float *restrict wk, float b,
                                      const float *restrict recip, const float *restrict res,
                                      act_t act, float *restrict yc, float *restrict scratch) {
    int64_t HQ = g->hq, WQ = g->wq, plane = HQ * WQ, SW = g->sw;
    float pad = kind == WIN_MAX ? -INFINITY : 0.0f;
    for (int64_t ph = 0; ph < g->sh; ph++)
        for (int64_t pw = 0; pw < SW; pw++)
            fill_phase(scratch + (ph * SW + pw) * plane, HQ, WQ, xc, g->h, g->w, g->sh, SW, ph,
                       pw, g->pt, g->pl, pad);
    float *wide = scratch + g->sh * SW * plane;
    int64_t span = g->oh * WQ;
    for (int64_t k = 0; k < span; k++) wide[k] = kind == WIN_DW ? b : pad;
    for (int64_t i = 0; i < g->kh; i++) {
        for (int64_t j = 0; j < g->kw; j++) {
            int64_t a = i * g->dh, c = j * g->dw;
            const float *src = scratch + ((a % g->sh) * SW + c % SW) * plane
                               + (a / g->sh) * WQ + c / SW;
            if (kind == WIN_DW) {
                float wv = wk[i * g->kw + j];
                for (int64_t k = 0; k < span; k++) wide[k] += wv * src[k];
            } else if (kind == WIN_MAX) {
                for (int64_t k = 0; k < span; k++) wide[k] = src[k] > wide[k] ? src[k] : wide[k];
            } else {
                for (int64_t k = 0; k < span; k++) wide[k] += src[k];
            }
        }
    }
    for (int64_t oh = 0; oh < g->oh; oh++) {  /* crop the rows, with the epilogue */
        float *in = wide + oh * WQ;
        if (kind == WIN_AVG) {
            const float *rc = recip + oh * g->ow;
            for (int64_t ow = 0; ow < g->ow; ow++) in[ow] *= rc[ow];
        }
        finish(yc + oh * g->ow, in, g->ow, 0.0f, res ? res + oh * g->ow : NULL, act);
    }
}

/* A windowed kernel over `planes` planes: plane q reads input plane q / mult (depthwise
 * channel multiplier; 1 for pooling), weights wk + q % per * KH*KW, bias[q % per]. */
typedef struct {
    window_t g;
    int kind;
    const float *x, *w, *bias, *recip, *res;
    float *y;
    act_t act;
    int64_t planes, mult, per, per_task;
    atomic_int *failed;  /* set by a task whose thread has no memory for its scratch */
} window_ctx;

static void window_task(const void *ctx, int64_t t) {
    const window_ctx *cx = ctx;
    const window_t *g = &cx->g;
    float *scratch = thread_scratch(SCRATCH_PLANES, window_scratch(g));
    if (!scratch) { atomic_store(cx->failed, 1); return; }
    int64_t q0 = t * cx->per_task, q1 = q0 + cx->per_task;
    if (q1 > cx->planes) q1 = cx->planes;
    for (int64_t q = q0; q < q1; q++) {
        int64_t o = q % cx->per;
        window_plane(g, cx->kind, cx->x + q / cx->mult * g->h * g->w,
                     cx->w ? cx->w + o * g->kh * g->kw : NULL, cx->bias ? cx->bias[o] : 0.0f,
                     cx->recip, cx->res ? cx->res + q * g->oh * g->ow : NULL, cx->act,
                     cx->y + q * g->oh * g->ow, scratch);
    }
}

/* Returns -1 when a thread found no memory for its scratch. */
static int windowed(window_ctx *cx) {
    atomic_int failed = 0;
    const window_t *g = &cx->g;
    /* per plane: the taps' vector loops (8 lanes), and ~5 ns per row loop */
    double plane_ns = (double)g->oh * g->wq * g->kh * g->kw / 8 + (g->hq + 2 * g->oh) * 5;
    int64_t tasks = task_count(cx->planes * plane_ns, cx->planes);
    cx->per_task = (cx->planes + tasks - 1) / tasks;
    cx->failed = &failed;
    parallel(window_task, cx, (cx->planes + cx->per_task - 1) / cx->per_task);
    return atomic_load(&failed) ? -1 : 0;
}

/* Depthwise conv on small planes, channels last: a block of DW_BLOCK output channels is
 * transposed to (pixel, channel), padded, so that every tap of every pixel is one vector
 * multiply-add across the block's channels (on a 4x4 plane the per-plane loops of
 * window_plane would be all overhead), then transposed back with the epilogue. */
#define DW_BLOCK 16
#ifndef DW_SMALL_PLANE
#define DW_SMALL_PLANE 256  /* output planes up to this many pixels go channels-last (64 and
                            * 1024 measured slower on MobileNetV2 and ShuffleNet) */
#endif

typedef struct {
    const int64_t *p;
    const float *x, *w, *bias, *res;
    float *y;
    act_t act;
    int64_t hp, wp, blocks, per_task;  /* padded input extent; channel blocks per image */
    atomic_int *failed;
} dwcl_ctx;

static int64_t dwcl_scratch(const dwcl_ctx *cx) {
    const int64_t *p = cx->p;
    return (cx->hp * cx->wp + p[C_KH] * p[C_KW] + p[C_OH] * p[C_OW]) * DW_BLOCK;
}

MULTIVERSION static void dwcl_block(const dwcl_ctx *cx, int64_t n, int64_t c0, float *scratch) {
    const int64_t *p = cx->p;
    int64_t H = p[C_H], W = p[C_W], OH = p[C_OH], OW = p[C_OW], KH = p[C_KH], KW = p[C_KW];
    int64_t SH = p[C_SH], SW = p[C_SW], DH = p[C_DH], DW = p[C_DW], PT = p[C_PT], PL = p[C_PL];
    int64_t O = p[C_O], C = p[C_C], mult = O / C, KK = KH * KW, HP = cx->hp, WP = cx->wp;
    int64_t cb = O - c0 < DW_BLOCK ? O - c0 : DW_BLOCK;
    float *xin = scratch, *wt = xin + HP * WP * DW_BLOCK, *out = wt + KK * DW_BLOCK;
    for (int64_t k = 0; k < HP * WP * DW_BLOCK; k++) xin[k] = 0.0f;
    for (int64_t k = 0; k < KK * DW_BLOCK; k++) wt[k] = 0.0f;
    int64_t r0 = PT, r1 = H + PT < HP ? H + PT : HP, q0 = PL, q1 = W + PL < WP ? W + PL : WP;
    for (int64_t cc = 0; cc < cb; cc++) {
        const float *xc = cx->x + (n * C + (c0 + cc) / mult) * H * W;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t q = q0; q < q1; q++)
                xin[(r * WP + q) * DW_BLOCK + cc] = xc[(r - PT) * W + q - PL];
        for (int64_t t = 0; t < KK; t++) wt[t * DW_BLOCK + cc] = cx->w[(c0 + cc) * KK + t];
    }
    float b[DW_BLOCK];
    for (int64_t cc = 0; cc < DW_BLOCK; cc++) b[cc] = cx->bias && cc < cb ? cx->bias[c0 + cc] : 0.0f;
    for (int64_t oh = 0; oh < OH; oh++) {
        for (int64_t ow = 0; ow < OW; ow++) {
            float acc[DW_BLOCK];
            for (int64_t cc = 0; cc < DW_BLOCK; cc++) acc[cc] = b[cc];
            for (int64_t i = 0; i < KH; i++) {
                for (int64_t j = 0; j < KW; j++) {
                    const float *src = xin + ((oh * SH + i * DH) * WP + ow * SW + j * DW) * DW_BLOCK;
                    const float *wv = wt + (i * KW + j) * DW_BLOCK;
                    for (int64_t cc = 0; cc < DW_BLOCK; cc++) acc[cc] += wv[cc] * src[cc];
                }
            }
            float *o = out + (oh * OW + ow) * DW_BLOCK;
            for (int64_t cc = 0; cc < DW_BLOCK; cc++) o[cc] = acc[cc];
        }
    }
    float lo = cx->act.lo, hi = cx->act.hi;
    for (int64_t cc = 0; cc < cb; cc++) {
        float *yc = cx->y + (n * O + c0 + cc) * OH * OW;
        const float *rc = cx->res ? cx->res + (n * O + c0 + cc) * OH * OW : NULL;
        for (int64_t k = 0; k < OH * OW; k++) {
            float v = out[k * DW_BLOCK + cc] + (rc ? rc[k] : 0.0f);
            if (cx->act.kind == ACT_LEAKY) {
                v = v < 0.0f ? v * cx->act.alpha : v;
            } else {
                v = v < lo ? lo : v;
                v = v > hi ? hi : v;
            }
            yc[k] = v;
        }
    }
}

static void dwcl_task(const void *ctx, int64_t t) {
    const dwcl_ctx *cx = ctx;
    float *scratch = thread_scratch(SCRATCH_PLANES, dwcl_scratch(cx));
    if (!scratch) { atomic_store(cx->failed, 1); return; }
    int64_t total = cx->p[C_N] * cx->blocks, q0 = t * cx->per_task, q1 = q0 + cx->per_task;
    for (int64_t q = q0; q < q1 && q < total; q++)
        dwcl_block(cx, q / cx->blocks, q % cx->blocks * DW_BLOCK, scratch);
}

/* Depthwise conv (one input channel per group): conv parameters, slots x, w, bias,
 * residual, y. Returns -1 when a thread found no memory for its scratch. */
static int dwconv(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    const float *x = slots[s->slot[S_X]], *w = slots[s->slot[S_W]];
    const float *bias = s->slot[S_BIAS] >= 0 ? slots[s->slot[S_BIAS]] : NULL;
    const float *res = s->slot[S_RES] >= 0 ? slots[s->slot[S_RES]] : NULL;
    float *y = slots[s->slot[S_Y]];
    if (p[C_OH] * p[C_OW] <= DW_SMALL_PLANE) {
        atomic_int failed = 0;
        dwcl_ctx cx = {p, x, w, bias, res, y, act_of(s, C_ACT),
                       (p[C_OH] - 1) * p[C_SH] + (p[C_KH] - 1) * p[C_DH] + 1,
                       (p[C_OW] - 1) * p[C_SW] + (p[C_KW] - 1) * p[C_DW] + 1,
                       (p[C_O] + DW_BLOCK - 1) / DW_BLOCK, 1, &failed};
        int64_t total = p[C_N] * cx.blocks;
        /* per block: the taps' vector loops and ~1 ns per element moved */
        double ns = (double)p[C_OH] * p[C_OW] * p[C_KH] * p[C_KW] / 2
                    + (double)(cx.hp * cx.wp + 2 * p[C_OH] * p[C_OW]) * DW_BLOCK;
        int64_t tasks = task_count(total * ns, total);
        cx.per_task = (total + tasks - 1) / tasks;
        parallel(dwcl_task, &cx, (total + cx.per_task - 1) / cx.per_task);
        return atomic_load(&failed) ? -1 : 0;
    }
    window_ctx cx = {window_of(p[C_H], p[C_W], p[C_OH], p[C_OW], p[C_KH], p[C_KW], p[C_SH],
                               p[C_SW], p[C_DH], p[C_DW], p[C_PT], p[C_PL]),
                     WIN_DW, x, w, bias, NULL, res, y, act_of(s, C_ACT), p[C_N] * p[C_O],
                     p[C_O] / p[C_C], p[C_O], 1, NULL};
    return windowed(&cx);
}

/* pool parameters: planes (N*C), H, W, OH, OW, KH, KW, SH, SW, PT, PL, act; slots x,
 * reciprocal window counts (OH, OW) for avg, y */
enum { P_PLANES, P_H, P_W, P_OH, P_OW, P_KH, P_KW, P_SH, P_SW, P_PT, P_PL, P_ACT };

static int pool2d(const lnpu_step *s, void **slots, int max) {
    const int64_t *p = s->p;
    window_ctx cx = {window_of(p[P_H], p[P_W], p[P_OH], p[P_OW], p[P_KH], p[P_KW], p[P_SH],
                               p[P_SW], 1, 1, p[P_PT], p[P_PL]),
                     max ? WIN_MAX : WIN_AVG, slots[s->slot[0]], NULL, NULL,
                     max ? NULL : slots[s->slot[1]], NULL, slots[s->slot[2]], act_of(s, P_ACT),
                     p[P_PLANES], 1, 1, 1, NULL};
    return windowed(&cx);
}

/* global pool: planes, plane size, max?, act. Task t: a block of planes, each reduced in
 * GP_LANES partial sums (maxima) that vectorize, then combined. */
enum { G_PLANES, G_SIZE, G_MAX, G_ACT };
#define GP_LANES 16

typedef struct {
    const float *x;
    float *y;
    int64_t size, per_task, planes;
    int max;
    act_t act;
} gpool_ctx;

MULTIVERSION static void gpool_task(const void *ctx, int64_t t) {
    const gpool_ctx *cx = ctx;
    int64_t q0 = t * cx->per_task, q1 = q0 + cx->per_task < cx->planes ? q0 + cx->per_task : cx->planes;
    int64_t size = cx->size, whole = size / GP_LANES * GP_LANES;
    for (int64_t q = q0; q < q1; q++) {
        const float *xc = cx->x + q * size;
        float lane[GP_LANES], r;
        if (cx->max) {
            for (int l = 0; l < GP_LANES; l++) lane[l] = -INFINITY;
            for (int64_t i = 0; i < whole; i += GP_LANES)
                for (int l = 0; l < GP_LANES; l++) lane[l] = xc[i + l] > lane[l] ? xc[i + l] : lane[l];
            r = -INFINITY;
            for (int l = 0; l < GP_LANES; l++) r = lane[l] > r ? lane[l] : r;
            for (int64_t i = whole; i < size; i++) r = xc[i] > r ? xc[i] : r;
        } else {
            for (int l = 0; l < GP_LANES; l++) lane[l] = 0.0f;
            for (int64_t i = 0; i < whole; i += GP_LANES)
                for (int l = 0; l < GP_LANES; l++) lane[l] += xc[i + l];
            double sum = 0.0;
            for (int l = 0; l < GP_LANES; l++) sum += lane[l];
            for (int64_t i = whole; i < size; i++) sum += xc[i];
            r = (float)(sum / (double)size);
        }
        finish(cx->y + q, &r, 1, 0.0f, NULL, cx->act);
    }
}

static void global_pool(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    gpool_ctx cx = {slots[s->slot[0]], slots[s->slot[1]], p[G_SIZE], 1, p[G_PLANES],
                    (int)p[G_MAX], act_of(s, G_ACT)};
    int64_t tasks = task_count((double)p[G_PLANES] * p[G_SIZE] / COPY_FLOATS_PER_NS, p[G_PLANES]);
    cx.per_task = (p[G_PLANES] + tasks - 1) / tasks;
    parallel(gpool_task, &cx, (p[G_PLANES] + cx.per_task - 1) / cx.per_task);
}

/* ---- data movement --------------------------------------------------------------------- */

/* concat: outer, then bytes per outer index of each input (slots 0..k-1, output slot 15) */
static void concat(const lnpu_step *s, void **slots) {
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
 * byte strides permuted to the output's axis order. */
static void transpose(const lnpu_step *s, void **slots) {
    int64_t r = s->p[0], block = s->p[1];
    const int64_t *shape = s->p + 2, *stride = s->p + 8;
    const char *x = slots[s->slot[0]];
    char *y = slots[s->slot[1]];
    int64_t idx[6] = {0};
    int64_t inner = shape[r - 1];
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

/* ---- matmul, activation, softmax ------------------------------------------------------- */

/* matmul: M, N, K, transpose_b, act; slots a, b, bias (N) or -1, y. Split by blocks of
 * columns: with one row (a fully connected layer at batch 1) it streams the weights, which
 * goes faster on every core. */
typedef struct {
    const int64_t *p;
    const float *a, *b, *bias;
    float *y;
    act_t act;
    int64_t cols_per_task;
} matmul_ctx;

static void matmul_task(const void *ctx, int64_t t) {
    const matmul_ctx *cx = ctx;
    int64_t M = cx->p[0], N = cx->p[1], K = cx->p[2], trans = cx->p[3];
    int64_t n0 = t * cx->cols_per_task, n1 = n0 + cx->cols_per_task < N ? n0 + cx->cols_per_task : N;
    if (n0 >= n1) return;
    sgemm(ROW_MAJOR, NO_TRANS, trans ? TRANS : NO_TRANS, (int)M, (int)(n1 - n0), (int)K, 1.0f,
          cx->a, (int)K, cx->b + (trans ? n0 * K : n0), trans ? (int)K : (int)N, 0.0f,
          cx->y + n0, (int)N);
    for (int64_t m = 0; m < M; m++) {
        float *row = cx->y + m * N;
        if (cx->bias)
            for (int64_t j = n0; j < n1; j++) row[j] += cx->bias[j];
        epilogue(row + n0, n1 - n0, 0.0f, NULL, cx->act);
    }
}

static void matmul(const lnpu_step *s, void **slots) {
    const int64_t *p = s->p;
    matmul_ctx cx = {p, slots[s->slot[0]], slots[s->slot[1]],
                     s->slot[2] >= 0 ? slots[s->slot[2]] : NULL, slots[s->slot[3]],
                     act_of(s, 4), p[1]};
    /* at least 64 columns per task; the weights are read at ~8 floats per ns */
    double ns = (double)p[0] * p[1] * p[2] / GEMM_MACS_PER_NS + (double)p[1] * p[2] / 8;
    int64_t tasks = task_count(ns, p[1] / 64 > 1 ? p[1] / 64 : 1);
    cx.cols_per_task = ((p[1] + tasks - 1) / tasks + 15) / 16 * 16;
    parallel(matmul_task, &cx, (p[1] + cx.cols_per_task - 1) / cx.cols_per_task);
}

/* activation: count, act; slots x, y (may be the same memory) */
static void activation(const lnpu_step *s, void **slots) {
    const float *x = slots[s->slot[0]];
    float *y = slots[s->slot[1]];
    if (x != y) memcpy(y, x, s->p[0] * sizeof(float));
    epilogue(y, s->p[0], 0.0f, NULL, act_of(s, 1));
}

/* softmax over the last axis: rows, length, log; slots x, y */
static void softmax(const lnpu_step *s, void **slots) {
    int64_t rows = s->p[0], len = s->p[1];
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)slots[s->slot[0]] + r * len;
        float *y = (float *)slots[s->slot[1]] + r * len;
        float m = -INFINITY;
        for (int64_t i = 0; i < len; i++) m = x[i] > m ? x[i] : m;
        double sum = 0.0;
        for (int64_t i = 0; i < len; i++) sum += expf(x[i] - m);
        if (s->p[2]) {
            float l = (float)log(sum);
            for (int64_t i = 0; i < len; i++) y[i] = x[i] - m - l;
        } else {
            float inv = (float)(1.0 / sum);
            for (int64_t i = 0; i < len; i++) y[i] = expf(x[i] - m) * inv;
        }
    }
}

/* ---- runner ---------------------------------------------------------------------------- */

/* Run steps[0..count) on the slot address table, on at most `threads` cores (0: all).
 * `seconds`, when not NULL, receives each step's wall time (the profile). Returns 0; 1 + the
 * index of a step with an unknown op (a lowering bug); -1 when a kernel found no host memory
 * for its scratch; -2 when no sgemm was set. */
API int64_t lnpu_run(const lnpu_step *steps, int64_t count, void **slots, double *seconds,
                     int threads) {
    if (!sgemm) return -2;
    run_cores = threads;
    atomic_fetch_add(&pool.running, 1);
    int64_t status = 0;
    for (int64_t i = 0; i < count && !status; i++) {
        const lnpu_step *s = &steps[i];
        long t0 = seconds ? now_ns() : 0;
        switch (s->op) {
        case OP_CONV: status = conv(s, slots); break;
        case OP_DWCONV: status = dwconv(s, slots); break;
        case OP_MAXPOOL: status = pool2d(s, slots, 1); break;
        case OP_AVGPOOL: status = pool2d(s, slots, 0); break;
        case OP_GLOBALPOOL: global_pool(s, slots); break;
        case OP_CONCAT: concat(s, slots); break;
        case OP_TRANSPOSE: transpose(s, slots); break;
        case OP_MATMUL: matmul(s, slots); break;
        case OP_ACT: activation(s, slots); break;
        case OP_SOFTMAX: softmax(s, slots); break;
        default: status = i + 1; continue;
        }
        if (seconds) seconds[i] = (now_ns() - t0) * 1e-9;
    }
    atomic_fetch_sub(&pool.running, 1);
    trim_thread_scratch();
    return status;
}

/* How a conv step runs: 1 direct, 0 im2col/GEMM (for the tests that cover both). */
API int lnpu_conv_is_direct(const lnpu_step *s) {
    return s->op == OP_CONV && DIRECT_CONV && direct_eligible(s->p);
}

/* sizeof(lnpu_step), so Python can check its mirror of the struct. */
API int64_t lnpu_step_size(void) { return sizeof(lnpu_step); }
