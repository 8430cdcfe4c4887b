/* fill_threads.c -- one memcpy split across persistent host threads: how a
 * staging buffer is filled from (or drained to) pageable memory faster than
 * one core copies, and how new pageable memory is faulted in by several
 * cores at once. The workers start on first use and wait on a condition
 * variable between jobs (no per-chunk thread start); one job runs at a time,
 * and a caller that finds the workers busy copies alone. */

#include "device/device.h"
#include "base/platform.h"

#include <pthread.h>
#include <string.h>

typedef struct fill_job {
    char *dst;
    const char *src;
    size_t n, part; /* bytes per part (page-aligned), parts = ceil(n / part) */
    int32_t parts;
} fill_job;

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_posted = PTHREAD_COND_INITIALIZER;
static pthread_cond_t job_done = PTHREAD_COND_INITIALIZER;
static fill_job job;          /* under state_lock */
static uint64_t generation;   /* bumped per job, under state_lock */
static int32_t parts_left;    /* parts not yet finished, under state_lock */
static int32_t workers;       /* started so far, under state_lock */
/* The generation each worker starts from (set under state_lock when it is
 * created, before the job it was started for is posted): a worker that
 * started from 0 would take a finished job for a new one. */
static uint64_t start_generation[PYXBUF__STAGING_MAX_THREADS];

static void copy_part(const fill_job *j, int32_t index) {
    size_t lo = (size_t)index * j->part;
    if (lo >= j->n) return;
    size_t len = j->n - lo < j->part ? j->n - lo : j->part;
    memcpy(j->dst + lo, j->src + lo, len);
}

/* Worker w copies part w (1..) of every job with that many parts. */
static void *worker_main(void *arg) {
    int32_t index = (int32_t)(intptr_t)arg;
    pthread_mutex_lock(&state_lock);
    uint64_t seen = start_generation[index];
    for (;;) {
        while (generation == seen) pthread_cond_wait(&job_posted, &state_lock);
        seen = generation;
        if (index >= job.parts) continue;
        fill_job j = job;
        pthread_mutex_unlock(&state_lock);
        copy_part(&j, index);
        pthread_mutex_lock(&state_lock);
        if (--parts_left == 0) pthread_cond_signal(&job_done);
    }
    return NULL;
}

#if PYXBUF_HAVE_FORK
/* fork() copies only the calling thread: the child has no workers, and no
 * lock may be held there by a thread that does not exist. */
static void before_fork(void) {
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&state_lock);
}

static void after_fork_parent(void) {
    pthread_mutex_unlock(&state_lock);
    pthread_mutex_unlock(&job_lock);
}

/* The child starts afresh: the copied condition variables still count the
 * parent's waiting workers (a broadcast would wait for them forever). */
static void after_fork_child(void) {
    workers = 0;
    pthread_cond_init(&job_posted, NULL);
    pthread_cond_init(&job_done, NULL);
    pthread_mutex_init(&state_lock, NULL);
    pthread_mutex_init(&job_lock, NULL);
}

static void register_fork_handlers(void) {
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
#else
static void register_fork_handlers(void) {} /* no fork() here */
#endif
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* Start workers up to `want` (part 0 is the caller's); returns how many run. */
static int32_t ensure_workers(int32_t want) {
    pthread_once(&fork_once, register_fork_handlers);
    pthread_mutex_lock(&state_lock);
    while (workers < want && workers + 1 < PYXBUF__STAGING_MAX_THREADS) {
        pthread_t t;
        start_generation[workers + 1] = generation;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(workers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        workers++;
    }
    int32_t have = workers;
    pthread_mutex_unlock(&state_lock);
    return have;
}

int32_t pyxbuf__own_fill_threads(void) {
    pthread_mutex_lock(&state_lock);
    int32_t n = workers;
    pthread_mutex_unlock(&state_lock);
    return n;
}

void pyxbuf__own_parallel_copy(void *dst, const void *src, size_t n, int32_t threads) {
    const size_t page = (size_t)4 << 10, min_part = (size_t)256 << 10;
    int32_t parts = threads;
    if ((size_t)parts > n / min_part) parts = (int32_t)(n / min_part);
    if (parts <= 1 || pthread_mutex_trylock(&job_lock) != 0) {
        memcpy(dst, src, n);
        return;
    }
    int32_t have = ensure_workers(parts - 1);
    if (parts > have + 1) parts = have + 1;
    size_t part = ((n + (size_t)parts - 1) / (size_t)parts + page - 1) & ~(page - 1);
    fill_job j = {dst, src, n, part, parts};
    pthread_mutex_lock(&state_lock);
    job = j;
    parts_left = parts - 1;
    generation++;
    pthread_cond_broadcast(&job_posted);
    pthread_mutex_unlock(&state_lock);
    copy_part(&j, 0);
    pthread_mutex_lock(&state_lock);
    while (parts_left > 0) pthread_cond_wait(&job_done, &state_lock);
    pthread_mutex_unlock(&state_lock);
    pthread_mutex_unlock(&job_lock);
}
