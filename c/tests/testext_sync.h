/* testext_sync.h -- shared state of the test extensions between threads.
 *
 * On a free-threaded build with the GIL off, getbuffer, DLPack deleters and
 * methods of one producer run on many threads at once (test_threads.py), and
 * with the GIL a device copy releases it in the middle of a method. So:
 * counters are C11 atomics (read through getters: a PyMemberDef would read
 * them non-atomically), per-object Python references are swapped under a
 * critical section, and a held view is used by one thread at a time (a busy
 * flag; a second user gets RuntimeError, never a half-released view). */
#ifndef PYXBUF_TESTEXT_SYNC_H
#define PYXBUF_TESTEXT_SYNC_H

#include "pyxbuf.h" /* Python.h first */

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef _Atomic Py_ssize_t testext_counter;

static inline void testext_count(testext_counter *c) { atomic_fetch_add(c, 1); }

/* A PyGetSetDef getter of the testext_counter at byte offset `closure`. */
static inline PyObject *testext_counter_get(PyObject *self, void *closure) {
    testext_counter *c = (testext_counter *)((char *)self + (uintptr_t)closure);
    return PyLong_FromSsize_t(atomic_load(c));
}

#define TESTEXT_COUNTER_GETSET(type, field, doc)                               \
    {#field, testext_counter_get, NULL, doc, (void *)(uintptr_t)offsetof(type, field)}

/* Claim an object's held view for this thread: 0, or -1 with RuntimeError
 * when another thread is using it. */
static inline int testext_claim(atomic_int *busy) {
    int idle = 0;
    if (atomic_compare_exchange_strong(busy, &idle, 1)) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the view is in use by another thread");
    return -1;
}

static inline void testext_unclaim(atomic_int *busy) { atomic_store(busy, 0); }

/* No-ops before 3.13, which has no free-threaded build. */
#if PY_VERSION_HEX < 0x030D0000
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* Single-phase init's Py_mod_gil: the module's own state is synchronised as
 * above (libpyxbuf's, which it links, is the library's to synchronise).
 * Returns 0 or -1. */
static inline int testext_gil_not_used(PyObject *module) {
#ifdef Py_GIL_DISABLED
    return PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED);
#else
    (void)module;
    return 0;
#endif
}

#endif
