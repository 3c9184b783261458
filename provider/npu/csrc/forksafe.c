/* The device's books across fork(): a child must not find them locked, or half updated.
 *
 * A thread of the parent inside a heap's or an arena set's lock when another thread forks
 * left that lock held in the child for good (its holder does not exist there): the child's
 * first allocation from that heap waited forever (1 in 100 forks while a thread allocated).
 * So every heap and arena set registers its lock here, and fork() first takes them all
 * (arena sets before heaps, the order the code nests them), so that no book is mid-update
 * when the process is copied; both processes then let go of them. In the child, the
 * registered `child` callbacks then forget what the parent's other threads held (an arena
 * set's arenas taken by runs that are not in the child).
 *
 * OpenBLAS has the same hazard and no cure for it: a thread inside its sgemm holds the lock
 * of its buffer allocator for a moment, and a child forked then waited for good in its first
 * GEMM (5 in 12,000 forks while another thread ran a convolution, on a loaded machine). So
 * every sgemm runs under a read lock that fork() first takes for writing (writers preferred:
 * the back-to-back GEMMs of other threads cannot keep it out), and the process is copied
 * between GEMMs. (numpy's own OpenBLAS, under the numpy kernels, keeps numpy's hazard.)
 */
#include "plane.h"

typedef struct {
    pthread_mutex_t *mu;
    int rank;                 /* taken in increasing rank */
    void (*child)(void *);   /* after fork, in the child, its lock held; may be NULL */
    void *object;
} book;

static pthread_mutex_t books_mu = PTHREAD_MUTEX_INITIALIZER;
static book *books;
static int64_t n_books, cap_books;
#define RANKS 2

static pthread_rwlock_t blas_guard;
static sgemm_fn blas_sgemm;

static void prepare(void) {
    pthread_rwlock_wrlock(&blas_guard);
    pthread_mutex_lock(&books_mu);
    for (int rank = 0; rank < RANKS; rank++)
        for (int64_t i = 0; i < n_books; i++)
            if (books[i].rank == rank) pthread_mutex_lock(books[i].mu);
}

static void release_books(void) {
    for (int rank = RANKS - 1; rank >= 0; rank--)
        for (int64_t i = n_books - 1; i >= 0; i--)
            if (books[i].rank == rank) pthread_mutex_unlock(books[i].mu);
    pthread_mutex_unlock(&books_mu);
}

/* A fresh guard: at start, and in a child, where readers the parent's other threads had
 * queued up would otherwise stay counted (and keep the child's own fork() out for good). */
static void init_guard(void) {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    pthread_rwlock_init(&blas_guard, &attr);
    pthread_rwlockattr_destroy(&attr);
}

static void in_parent(void) {
    release_books();
    pthread_rwlock_unlock(&blas_guard);
}

static void in_child(void) {
    for (int64_t i = 0; i < n_books; i++)
        if (books[i].child) books[i].child(books[i].object);
    release_books();
    init_guard();
}

static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static void install_handlers(void) {
    init_guard();
    pthread_atfork(prepare, in_parent, in_child);
}

void blas_set(sgemm_fn fn) {
    pthread_once(&handlers_once, install_handlers);
    blas_sgemm = fn;
}

int blas_ready(void) { return blas_sgemm != NULL; }

void sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
           const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    pthread_rwlock_rdlock(&blas_guard);
    blas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    pthread_rwlock_unlock(&blas_guard);
}

int books_register(pthread_mutex_t *mu, int rank, void (*child)(void *), void *object) {
    pthread_once(&handlers_once, install_handlers);
    pthread_mutex_lock(&books_mu);
    int ok = reserve((void **)&books, n_books, &cap_books, sizeof(book));
    if (ok) books[n_books++] = (book){mu, rank, child, object};
    pthread_mutex_unlock(&books_mu);
    return ok;
}

void books_unregister(pthread_mutex_t *mu) {
    pthread_mutex_lock(&books_mu);
    for (int64_t i = 0; i < n_books; i++) {
        if (books[i].mu == mu) {
            books[i] = books[--n_books];
            break;
        }
    }
    pthread_mutex_unlock(&books_mu);
}
