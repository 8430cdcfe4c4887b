/* thread_checks.h -- TCHECK, for checks on the C tests' own pthreads. The
 * harness's failure counter (testing.h) is a plain int of the main thread's:
 * a worker counts into pyxbuf_thread_failures, atomic, which the main thread
 * reads (and resets) around starting and joining its workers. */
#ifndef PYXBUF_THREAD_CHECKS_H
#define PYXBUF_THREAD_CHECKS_H

#include "testing.h"

#include <stdatomic.h>

static atomic_int pyxbuf_thread_failures;

#define TCHECK(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed in a thread: %s\n", __FILE__, \
                    __LINE__, #cond);                                          \
            atomic_fetch_add(&pyxbuf_thread_failures, 1);                      \
        }                                                                      \
    } while (0)

#endif
