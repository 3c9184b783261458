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

static void prepare(void) {
    pthread_mutex_lock(&books_mu);
    for (int rank = 0; rank < RANKS; rank++)
        for (int64_t i = 0; i < n_books; i++)
            if (books[i].rank == rank) pthread_mutex_lock(books[i].mu);
}

static void release_all(void) {
    for (int rank = RANKS - 1; rank >= 0; rank--)
        for (int64_t i = n_books - 1; i >= 0; i--)
            if (books[i].rank == rank) pthread_mutex_unlock(books[i].mu);
    pthread_mutex_unlock(&books_mu);
}

static void in_child(void) {
    for (int64_t i = 0; i < n_books; i++)
        if (books[i].child) books[i].child(books[i].object);
    release_all();
}

static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static void install_handlers(void) { pthread_atfork(prepare, release_all, in_child); }

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
