/* The NPU's cores: a thread pool that runs a kernel's tasks, and per-thread scratch. */
#include "npu.h"

#include <sys/syscall.h>
#include <unistd.h>

#define MAX_THREADS 64
/* Tunables (#ifndef-guarded here and in conv.c, direct.c, window.c) may be overridden with
 * -D to compare builds: a benchmark, not a guess, decides them. */
#ifndef SPIN_NS
#define SPIN_NS 500000L /* idle workers spin this long after a run before they sleep */
#endif

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_mutex_t submit;  /* one job at a time; a second caller runs its job inline */
    int threads;             /* cores, the caller included */
    int started;             /* workers running */
    int sleeping;
    int stop;
    atomic_long generation;
    atomic_int running;      /* multi-core lnpu_run calls in progress: workers spin */
    atomic_long next;        /* the job's tasks taken from the front and the back (drain) */
    atomic_int open;         /* the job still takes workers */
    atomic_int joined;       /* workers inside the job */
    int limit;               /* the job takes at most this many workers */
    task_fn fn;
    const void *ctx;
    int64_t tasks;
    pthread_t tid[MAX_THREADS];
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 1};

long now_ns(void) {
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
static atomic_int caller_cpu = -1; /* the CPU of the thread that published the current job */
static atomic_long worker_moves;   /* times a thread left its caller's CPU (lnpu_leave_cpu) */
static atomic_long worker_steers;  /* wake-ups of a sleeping worker kept off the caller's CPU */

/* A worker that finds itself on the CPU of the thread it works for moves to another one it
 * may use. The scheduler tends to wake a sleeping worker on its waker's CPU (wake-affine),
 * and a spinning worker that shares a CPU with its caller makes every parallel kernel run
 * at one core's speed until the load balancer notices: measured on a 2-vCPU VM, where
 * MobileNetV2 took 196 instead of 146 us for whole blocks of runs after a pause. Setting
 * the affinity without that CPU migrates the thread at once; its mask (the process's,
 * which the user may have narrowed) is then restored as it was. Returns 1 when the calling
 * thread moved (exported so that a test can check the move on its own thread). */
API int lnpu_leave_cpu(int cpu) {
    if (cpu < 0 || sched_getcpu() != cpu) return 0;
    cpu_set_t mask, others;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0 || CPU_COUNT(&mask) < 2 || !CPU_ISSET(cpu, &mask))
        return 0;
    others = mask;
    CPU_CLR(cpu, &others);
    if (sched_setaffinity(0, sizeof others, &others) != 0) return 0;
    sched_setaffinity(0, sizeof mask, &mask);
    atomic_fetch_add_explicit(&worker_moves, 1, memory_order_relaxed);
    return 1;
}

API int64_t lnpu_worker_moves(void) { return atomic_load(&worker_moves); }

/* The calling thread takes tasks from the front, workers from the back, until they meet:
 * a kernel's first tasks run on the caller and its last ones on a worker run after run, so
 * each core finds its part of the data (a conv's weights and rows) in its own cache from
 * the run before; the meeting point still moves with the cores' speeds. pool.next holds
 * the count taken from the front in its low 32 bits, from the back in the high ones. */
static void drain(int worker) {
    for (;;) {
        int64_t seen = atomic_load(&pool.next), t;
        do {
            int64_t front = seen & 0xffffffff, back = seen >> 32;
            if (front + back >= pool.tasks) return;
            t = worker ? pool.tasks - 1 - back : front;
        } while (!atomic_compare_exchange_weak(&pool.next, &seen,
                                               seen + (worker ? (int64_t)1 << 32 : 1)));
        pool.fn(pool.ctx, t);
        if (worker) atomic_fetch_add_explicit(&worker_tasks, 1, memory_order_relaxed);
    }
}

API int64_t lnpu_worker_tasks(void) { return atomic_load(&worker_tasks); }

static atomic_int workers_made;
static __thread int this_worker;  /* 0 on a calling thread */

/* Per worker (index this_worker - 1), guarded by pool.mu: its thread id, whether it sleeps,
 * and the CPU mask it had before a caller steered its wake-up (see steer). */
static struct {
    pid_t tid;
    int asleep, steered;
    cpu_set_t mask;
} crew[MAX_THREADS];

/* Keep sleeping worker i off CPU `cpu`, the waking caller's, until it is awake. The
 * scheduler tends to queue a woken thread on its waker's CPU (a VM's halted vCPU looks
 * dear to wake), and there the worker waited for the caller's time slice to end: on a
 * 2-vCPU VM the first three runs of ResNet-style blocks after an idle spell ran at one
 * core's speed; steered, the worker takes its share from the first run. pool.mu held. */
static void steer(int i, int cpu) {
    cpu_set_t m;
    if (cpu < 0 || crew[i].steered || sched_getaffinity(crew[i].tid, sizeof m, &m) != 0
        || CPU_COUNT(&m) < 2 || !CPU_ISSET(cpu, &m))
        return;
    crew[i].mask = m;
    CPU_CLR(cpu, &m);
    crew[i].steered = sched_setaffinity(crew[i].tid, sizeof m, &m) == 0;
    if (crew[i].steered) atomic_fetch_add_explicit(&worker_steers, 1, memory_order_relaxed);
}

API int64_t lnpu_worker_steers(void) { return atomic_load(&worker_steers); }

/* 0 on a thread that calls parallel(), 1, 2, ... on the pool's workers: lets a kernel whose
 * calls follow each other give a thread the same share of its data each time. */
int worker_index(void) { return this_worker; }

/* A worker joins each published job it sees while the job is open; the caller waits only
 * for workers that joined, so a worker that wakes late never holds a job up.
 * arg: the generation current when the worker was created (it may start after the job
 * that created it was published, and must still take part in that job). */
static void *worker(void *arg) {
    long seen = (long)(intptr_t)arg;
    this_worker = atomic_fetch_add(&workers_made, 1) + 1;
    int me = this_worker - 1;
    pthread_mutex_lock(&pool.mu);
    crew[me].tid = (pid_t)syscall(SYS_gettid);
    crew[me].asleep = crew[me].steered = 0;
    pthread_mutex_unlock(&pool.mu);
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
            crew[me].asleep = 1;
            while (atomic_load(&pool.generation) == seen && !pool.stop)
                pthread_cond_wait(&pool.wake, &pool.mu);
            crew[me].asleep = 0;
            pool.sleeping--;
            if (crew[me].steered) {  /* awake, off the caller's CPU: its own mask again */
                sched_setaffinity(0, sizeof crew[me].mask, &crew[me].mask);
                crew[me].steered = 0;
            }
            int stop = pool.stop;
            pthread_mutex_unlock(&pool.mu);
            if (stop) return NULL;
        }
        seen = g;
        lnpu_leave_cpu(atomic_load_explicit(&caller_cpu, memory_order_relaxed));
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
    atomic_store(&workers_made, 0);
    pool.stop = 0;
}

/* After fork() only the forking thread exists: forget the workers (restarted lazily) and
 * the state of any job and run another thread of the parent had in progress. Its workers'
 * count in `joined` made the child's first parallel kernel wait for them for good (4 of 40
 * children forked while a thread ran a 2-core model), and its runs' count in `running`
 * would keep the child's workers spinning. */
static void after_fork_child(void) {
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_mutex_init(&pool.submit, NULL);
    pool.started = 0;
    pool.sleeping = 0;
    pool.stop = 0;
    atomic_store(&pool.joined, 0);
    atomic_store(&pool.open, 0);
    atomic_store(&pool.running, 0);
    atomic_store(&workers_made, 0);
    memset(crew, 0, sizeof crew);
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
int cores(void) {
    return run_cores > 0 && run_cores < pool.threads ? run_cores : pool.threads;
}

/* fn(ctx, t) for t in [0, tasks), on every core; returns when all are done. */
void parallel(task_fn fn, const void *ctx, int64_t tasks) {
    if (tasks <= 0) return;
    if (tasks == 1 || tasks > 0x7fffffff || cores() == 1 || pthread_mutex_trylock(&pool.submit) != 0) {
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
    int cpu = sched_getcpu();
    atomic_store_explicit(&caller_cpu, cpu, memory_order_relaxed);
    atomic_store(&pool.next, 0);
    atomic_store(&pool.open, 1);
    atomic_fetch_add(&pool.generation, 1);
    pthread_mutex_lock(&pool.mu);
    if (pool.sleeping) {
        for (int i = 0; i < pool.started; i++)
            if (crew[i].asleep) steer(i, cpu);
        pthread_cond_broadcast(&pool.wake);
    }
    pthread_mutex_unlock(&pool.mu);
    drain(0);
    atomic_store(&pool.open, 0);  /* every task is taken: wait for those still running */
    unsigned spins = 0;
    while (atomic_load(&pool.joined) > 0) spin(&spins);
    pthread_mutex_unlock(&pool.submit);
}

/* How many tasks a kernel of about `ns` nanoseconds on one core is worth: one per
 * TASK_NS (handing a task to a spinning worker costs well under a microsecond), up to 4
 * per core, at most `limit`. 1.5 us: MobileNetV2's pointwise convs of a few microseconds
 * then split too, 0.9x the model's time against 4 us (1 and 2 us measured the same or
 * slower; SqueezeNet and ShuffleNet unchanged). Rates for the estimates: */
#ifndef TASK_NS
#define TASK_NS 1500.0
#endif
int64_t task_count(double ns, int64_t limit) {
    int64_t n = cores() == 1 ? 1 : (int64_t)(ns / TASK_NS);
    if (n > 4 * cores()) n = 4 * cores();
    if (n > limit) n = limit;
    return n < 1 ? 1 : n;
}

/* Items per task when `items` are cut into `tasks` tasks: at least 1, so that a kernel may
 * divide by it when it has no items at all (an empty batch: no planes, no columns). */
int64_t per_task(int64_t items, int64_t tasks) {
    int64_t per = tasks > 1 ? (items + tasks - 1) / tasks : items;
    return per > 0 ? per : 1;
}

/* Per-thread scratch: a kernel's phase or window planes. A conv's caller keeps its phases
 * there while the conv's tasks run, so no task of a kernel that does may use it. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void make_scratch_key(void) { pthread_key_create(&scratch_key, free); }

/* This thread's scratch of at least `floats` floats, 64-byte aligned (kept for its next
 * kernels, freed when the thread ends), or NULL when out of memory. */
float *thread_scratch(int64_t floats) {
    pthread_once(&scratch_once, make_scratch_key);
    int64_t *block = pthread_getspecific(scratch_key);
    if (block && block[0] >= floats) return (float *)(block + 8);
    free(block);
    block = aligned_alloc(64, (64 + floats * sizeof(float) + 63) / 64 * 64);
    pthread_setspecific(scratch_key, block);
    if (!block) return NULL;
    block[0] = floats;
    return (float *)(block + 8);
}

/* Give back this thread's scratch if it grew past SCRATCH_KEEP_BYTES (a big conv's phase
 * planes), so an idle process does not hold it. */
#define SCRATCH_KEEP_BYTES (8L << 20)
static void trim_thread_scratch(void) {
    pthread_once(&scratch_once, make_scratch_key);
    int64_t *block = pthread_getspecific(scratch_key);
    if (block && block[0] * (int64_t)sizeof(float) > SCRATCH_KEEP_BYTES) {
        free(block);
        pthread_setspecific(scratch_key, NULL);
    }
}

/* lnpu_run's start and end on this thread: its core limit, workers that keep spinning while
 * a run that may use them is in progress (one limited to a single core never does: its
 * spinning would only take CPU from concurrent single-core runs), and the scratch given
 * back after it. */
static __thread int run_spins = 0;

void run_begin(int threads) {
    run_cores = threads;
    run_spins = cores() > 1;
    if (run_spins) atomic_fetch_add(&pool.running, 1);
}

void run_end(void) {
    if (run_spins) atomic_fetch_sub(&pool.running, 1);
    run_spins = 0;
    trim_thread_scratch();
}
