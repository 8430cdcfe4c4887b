/* acquire.c -- pyxbuf_get and pyxbuf_release, the dispatcher above the
 * bridges: supported and required flags (and the per-type cache of them),
 * then the first protocol that applies -- the object's native extended buffer
 * (its type advertises extended flags), else its classic buffer (the fast
 * path), then, when it has none or the classic buffer cannot describe the
 * object, the bridges in order (bridges/bridges.h: DLPack, its C exchange
 * table first; __cuda_array_interface__; __array_interface__) -- and the
 * validation of what producers hand back. A bridge reports by return value
 * (1 acquired, 0 not mine, -1 refused); nothing here is called back.
 * DESIGN.md lists the classic buffer after the CUDA Array Interface; trying
 * it first keeps classic CPU arrays on the fast path. */

#include "acquire/acquire.h"
#include "acquire/immutable.h"
#include "borrow/tracked_fast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Errors raised during acquisition                                          */
/* ------------------------------------------------------------------------- */

/* Replace the producer's exception with a BufferError whose message names the
 * object's type, the path and the request, keeping the original as __cause__.
 * Producers disagree on the type of a refusal (NumPy raises ValueError for
 * contiguity, bytes BufferError for writability); consumers of pyxbuf catch
 * one. Other exceptions (MemoryError, KeyboardInterrupt...) keep their type. */
/* What to do about read-only memory refused to a writable request. */
#define READ_ONLY_FIX                                                                      \
    "to write, pass a writable copy (numpy's a.copy()); to read, ask for read-only access " \
    "(no PyBUF_WRITABLE, a shared borrow: PyXBuffer<T> in Rust, view<const T> in C++)"

static void add_context_fix(PyObject *obj, const char *path, int32_t flags, const char *fix);

static void add_context(PyObject *obj, const char *path, int32_t flags) {
    add_context_fix(obj, path, flags, NULL);
}

/* add_context, with `fix` (when not NULL) after the producer's reason. */
static void add_context_fix(PyObject *obj, const char *path, int32_t flags, const char *fix) {
    char names[256];
    pyxbuf__flag_names(flags, names, sizeof names);
    if (!PyErr_Occurred()) {
        /* A producer that fails without an exception would leave the
         * consumer returning NULL with none (SystemError at best). */
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: %s buffer of '%.200s' failed the request %s without setting an "
                     "exception; the producer is broken and must be fixed",
                     path, PYXBUF__TYPE_NAME(obj), names);
        return;
    }
    PyObject *cause = PyErr_GetRaisedException();
    PyObject *text = PyObject_Str(cause);
    const char *reason = text ? PyUnicode_AsUTF8(text) : NULL;
    if (reason == NULL) {
        PyErr_Clear();
        reason = "(no message)";
    }
    /* pyxbuf's own exporters already start with "pyxbuf: "; say it once. */
    if (strncmp(reason, "pyxbuf: ", 8) == 0) reason += 8;
    PyObject *raised = (PyObject *)Py_TYPE(cause);
    if (PyErr_GivenExceptionMatches(cause, PyExc_ValueError) ||
        PyErr_GivenExceptionMatches(cause, PyExc_TypeError) ||
        PyErr_GivenExceptionMatches(cause, PyExc_BufferError))
        raised = PyExc_BufferError;
    PyErr_Format(raised, "pyxbuf: %s buffer of '%.200s' refused the request %s: %s%s%s", path,
                 PYXBUF__TYPE_NAME(obj), names, reason, fix ? "; " : "", fix ? fix : "");
    Py_XDECREF(text);
    PyObject *context = PyErr_GetRaisedException();
    PyException_SetCause(context, cause); /* steals cause */
    PyErr_SetRaisedException(context);
}

static int refuse_unsupported(PyObject *obj, int32_t flags, int32_t missing) {
    char want[256], miss[256];
    pyxbuf__flag_names(flags, want, sizeof want);
    pyxbuf__flag_names(missing, miss, sizeof miss);
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: '%.200s' does not support the required %s %s of the request %s "
                 "(its %s says so); ask for less, or copy the data into a buffer that can",
                 PYXBUF__TYPE_NAME(obj), strchr(miss, '|') != NULL ? "flags" : "flag", miss, want,
                 PYXBUF_SUPPORTED_FLAGS_ATTR);
    return -1;
}

/* ------------------------------------------------------------------------- */
/* Acquisition                                                               */
/* ------------------------------------------------------------------------- */

static int acquire_native(PyObject *obj, pyxbuf_view *view, int32_t flags, int32_t supported) {
    /* Extended and newer bits go only to types that advertise them; the
     * others are dropped, as a producer that does not know them would ignore
     * them (the consumer sees them clear in view->flags). */
    int32_t passed = flags & (CLASSIC_RANGE | supported);
    /* pyxbuf reads every format, custom types included: said to the
     * producers that declare they ask (pyxbuf.h). */
    int32_t sent = passed | (supported & PYXBUF_EXTENDED_FORMAT);
    if (PyObject_GetBuffer(obj, &view->base, sent) < 0) {
        reset_view(view, flags);
        add_context(obj, "native extended", passed);
        return -1;
    }
    view->path = PYXBUF_PATH_NATIVE;
    /* ndim first: the device check below walks shape and strides. */
    if (pyxbuf__validate_classic(view, obj, passed) < 0) return -1;
    if (pyxbuf__validate_native_layout(view, obj, passed) < 0) return -1;
    return pyxbuf__validate_extended(view, obj, passed);
}

/* acquire_classic's answer when the producer refused: its exception is set
 * without pyxbuf's context, which is formatted only if no bridge answers (the
 * message costs more than a bridge's whole acquisition: ~10k instructions). */
#define CLASSIC_REFUSED (-2)

/* The refusal a failed acquisition reports if no bridge answers: the first
 * one, its exception held while later bridges try, and the path its context
 * ("<path> buffer of '<type>' refused ...") names, formatted only at the end
 * (NULL when it needs none). */
typedef struct refusal {
    PyObject *exc; /* the exception; NULL: none yet */
    const char *path;
    int32_t flags;
} refusal;

static int acquire_by_bridges(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                              size_t first, refusal *r);
static void refusal_take(refusal *r, const char *path, int32_t flags);
static int classic_cannot_describe(PyObject *obj, int32_t flags, int raw, int *read_only);

static int acquire_classic(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    int32_t passed = flags & CLASSIC_RANGE;
    if (PyObject_GetBuffer(obj, &view->base, passed) < 0) {
        reset_view(view, flags);
        return CLASSIC_REFUSED; /* the producer's exception, context not yet added */
    }
    view->path = PYXBUF_PATH_CLASSIC;
    return pyxbuf__validate_classic(view, obj, passed);
}

/* After the classic buffer failed (`rc` from acquire_classic, or -1 from the
 * fast path's producer call, both CLASSIC_REFUSED then): a bridge answers, or
 * the error stands with its context. 1 = a bridge acquired; -1 = failed. */
static int after_classic_failed(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                                int rc) {
    int32_t passed = flags & CLASSIC_RANGE;
    const char *pending = rc == CLASSIC_REFUSED ? "classic" : NULL;
    int read_only = 0;
    if (classic_cannot_describe(obj, flags, pending != NULL, &read_only)) {
        refusal r;
        refusal_take(&r, pending, passed);
        return acquire_by_bridges(obj, view, flags, stream, 0, &r) == 1 ? 1 : -1;
    }
    if (pending != NULL) add_context_fix(obj, pending, passed, read_only ? READ_ONLY_FIX : NULL);
    return -1;
}

/* The bridges, in order. Each is tried when the object has no
 * classic buffer or its classic buffer refused (a dtype it cannot carry:
 * bfloat16 in JAX or ml_dtypes, device memory). */
typedef struct bridge {
    int (*acquire)(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream);
    const char *path;
} bridge;

static const bridge bridges[] = {
    {pyxbuf__dlpack_acquire, "DLPack"},
    {pyxbuf__cai_acquire, "__cuda_array_interface__"},
    {pyxbuf__array_interface_acquire, "__array_interface__"},
};

/* Holds the pending exception as the refusal of `path`. */
static void refusal_take(refusal *r, const char *path, int32_t flags) {
    r->exc = PyErr_GetRaisedException();
    r->path = path;
    r->flags = flags;
}

/* Bridge i failed: the first failure is kept, later ones are dropped. */
static void refusal_note(refusal *r, PyObject *obj, size_t i, int32_t flags) {
    if (r->exc != NULL) {
        PyErr_Clear();
    } else if (!PyErr_Occurred()) { /* a broken bridge: say so now */
        add_context(obj, bridges[i].path, flags);
        refusal_take(r, NULL, 0);
    } else {
        refusal_take(r, bridges[i].path, flags);
    }
}

/* Tries the bridges from `first` on, in order, on a view reset for `flags`,
 * with `r` the refusal so far (type NULL: none). 1 = acquired; 0 = no bridge
 * applies and no error; -1 = failed, r's exception set with its context. */
static int acquire_by_bridges(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                              size_t first, refusal *r) {
    for (size_t i = first; i < sizeof bridges / sizeof *bridges; i++) {
        int rc = bridges[i].acquire(obj, view, flags, stream);
        if (rc == 1) {
            Py_XDECREF(r->exc);
            return 1;
        }
        reset_view(view, flags); /* for the next bridge */
        if (rc < 0) refusal_note(r, obj, i, flags);
    }
    if (r->exc == NULL) return 0;
    PyErr_SetRaisedException(r->exc);
    if (r->path != NULL) add_context(obj, r->path, r->flags);
    return -1;
}

/* The first bridge answered `rc` (not 1): the others, in order. */
static PYXBUF_COLD int after_first_bridge(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                          int64_t stream, int rc) {
    reset_view(view, flags);
    refusal r = {NULL, NULL, 0};
    if (rc < 0) refusal_note(&r, obj, 0, flags);
    return acquire_by_bridges(obj, view, flags, stream, 1, &r);
}

/* An object with no classic buffer: the bridges, the first (DLPack, whose C
 * exchange table is the fastest way in) called before any bookkeeping. */
static int acquire_without_buffer(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                  int64_t stream) {
    int rc = bridges[0].acquire(obj, view, flags, stream);
    if (PYXBUF_LIKELY(rc == 1)) return 1;
    return after_first_bridge(obj, view, flags, stream, rc);
}

/* After the classic path failed: may a bridge answer instead? Only when the
 * classic buffer could not describe the object (a dtype it cannot carry, a
 * layout it refuses). Not when the memory is read-only and the request
 * writable: a bridge must not hand out writable access the producer refused
 * (JAX arrays are immutable, yet their DLPack capsules carry no read-only
 * flag): *read_only says that case. Not for errors other than refusals
 * (MemoryError, KeyboardInterrupt). */
static int classic_cannot_describe(PyObject *obj, int32_t flags, int raw, int *read_only) {
    /* A raw producer error counts as a refusal when add_context would make
     * it a BufferError (ValueError, TypeError, BufferError). */
    if (!PyErr_ExceptionMatches(PyExc_BufferError) &&
        !(raw && (PyErr_ExceptionMatches(PyExc_ValueError) ||
                  PyErr_ExceptionMatches(PyExc_TypeError))))
        return 0;
    if (!(flags & PyBUF_WRITABLE)) return 1;
    PyObject *refused = PyErr_GetRaisedException();
    Py_buffer probe;
    int readable = PyObject_GetBuffer(obj, &probe, flags & CLASSIC_RANGE & ~PyBUF_WRITABLE);
    if (readable == 0)
        PyBuffer_Release(&probe);
    else
        PyErr_Clear();
    PyErr_SetRaisedException(refused);
    *read_only = readable == 0; /* readable, not writable: the memory is read-only */
    return readable != 0;
}

/* Every path but the classic one (the native path's producer has a
 * bf_releasebuffer of its own). */
static PYXBUF_NOINLINE void release_by_bridge(pyxbuf_view *view) {
    pyxbuf_device d;
    /* The consumer is done with the memory: device_alloc.c's free of pyxbuf's
     * own memory waits for the work its streams queued until now. */
    if (view->device != NULL && pyxbuf_view_device(view, &d, NULL) == 0)
        pyxbuf__device_block_view_released(view, &d);
    if (view->path == PYXBUF_PATH_NATIVE) {
        PyBuffer_Release(&view->base);
        return;
    }
    Py_CLEAR(view->base.obj);
    if (view->owner != NULL)
        Py_CLEAR(view->owner);
    else if (view->path == PYXBUF_PATH_DLPACK || view->path == PYXBUF_PATH_DLPACK_C)
        pyxbuf__dlpack_release_bare(view->bridge_data);
}

static int refuse_no_protocol(PyObject *obj) {
    PyErr_Format(PyExc_TypeError,
                 "pyxbuf: '%.200s' exports no buffer pyxbuf can read (tried: native extended "
                 "buffer, DLPack, __cuda_array_interface__, classic buffer, "
                 "__array_interface__); pass an array or an object that supports the buffer "
                 "protocol",
                 PYXBUF__TYPE_NAME(obj));
    return -1;
}


/* The request bits the fast path serves: classic ones, the soft device and
 * temporary flags (a classic producer honours neither) and borrows, which
 * pyxbuf's cooperative registry grants for classic producers. */
#define FAST_PATH_FLAGS (PYXBUF_CLASSIC_FLAGS | PYXBUF_DEVICE | PYXBUF_TEMPORARY | BORROW_FLAGS)

/* A view acquired from a producer that knows nothing of borrows: take the
 * borrow asked for from pyxbuf's cooperative registry. */
static int track_if_asked(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    if (PYXBUF_LIKELY(!(flags & BORROW_FLAGS))) return 0;
    if ((flags & (BORROW_FLAGS | PyBUF_WRITABLE)) == PYXBUF_BORROW_SHARED &&
        view->base.readonly && pyxbuf__grant_if_immutable(view))
        return 0; /* bytes' memory: enforced by construction (immutable.c) */
    if (pyxbuf__tracked_acquire(obj, view, flags) == 0) return 0;
    pyxbuf_release(view);
    return -1;
}

/* A shared borrow of a read-only host view (no writable or exclusive bit):
 * enforced when the memory is bytes' (immutable.c), else tracked. 0 when
 * granted; -1 refused (view released, exception set). */
static PYXBUF_COLD int readonly_shared(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    if (pyxbuf__grant_if_immutable(view) || pyxbuf__tracked_shared_fast(view, 1)) return 0;
    return track_if_asked(obj, view, flags);
}

/* The same in classic_fast_call's answers: 1 granted, -2 refused. */
static PYXBUF_NOINLINE int classic_readonly_shared(PyObject *obj, pyxbuf_view *view,
                                                   int32_t flags) {
    return readonly_shared(obj, view, flags) == 0 ? 1 : -2;
}

/* The fast path's failures, out of line so that the fast path keeps no
 * registers alive for them. `rc` is the producer's answer: below 0 it refused
 * (view reset, exception set, -1: a bridge may still answer); otherwise the
 * view failed validation or its borrow could not be tracked (-2: for good). */
static PYXBUF_COLD int classic_fast_failed(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                           int rc) {
    int32_t passed = flags & CLASSIC_RANGE;
    if (rc < 0) {
        reset_view(view, flags);
        return -1; /* CLASSIC_REFUSED: get_view_slow adds the context if it stands */
    }
    view->owner = NULL;
    view->bridge_data = NULL;
    view->borrow_token = 0;
    if (pyxbuf__validate_classic(view, obj, passed) < 0) return -2; /* released, says why */
    view->state = PYXBUF__STATE_ACQUIRED;
    return track_if_asked(obj, view, flags) == 0 ? 1 : -2;
}

/* The classic fast path's producer call and checks, for a type cached as a
 * classic producer (or numpy.ndarray, when its struct route declines). */
static PYXBUF_ALWAYS_INLINE int classic_fast_call(PyObject *obj, PyTypeObject *tp,
                                                  const void *slot, pyxbuf_view *view,
                                                  int32_t flags) {
    pyxbuf__view_clear_extended(view, flags);
    view->path = PYXBUF_PATH_CLASSIC;
    /* PyObject_GetBuffer is this call after the checks made above (the cache
     * entry says the slot exists; under the limited API it holds the slot). */
    (void)slot, (void)tp;
    int rc = PYXBUF__CACHED_GETBUFFER(tp, slot)(obj, &view->base, flags & CLASSIC_RANGE);
    if (PYXBUF_UNLIKELY(rc < 0 || (unsigned)view->base.ndim > PYXBUF_MAX_NDIM))
        return classic_fast_failed(obj, view, flags, rc);
    if (PYXBUF_UNLIKELY(flags & (PyBUF_WRITABLE | BORROW_FLAGS))) { /* one test for the plain read */
        if (PYXBUF_LIKELY(!(flags & (PyBUF_WRITABLE | PYXBUF_BORROW_EXCLUSIVE)))) {
            /* A shared borrow (borrow bits here, neither writable nor
             * exclusive): the common grant inline, with no call and so no
             * register saved for it (a classic producer's view is host
             * memory); the rest, and its refusals, through track_if_asked. */
            view->state = PYXBUF__STATE_ACQUIRED;
            /* Read-only memory may be bytes', immutable: one test on the
             * writable producers' way, the rest out of line (a tail call,
             * so the inline grant below still saves no register). */
            if (PYXBUF_UNLIKELY(view->base.readonly)) return classic_readonly_shared(obj, view, flags);
            if (PYXBUF_LIKELY(pyxbuf__tracked_shared_fast(view, 1))) return 1;
            return track_if_asked(obj, view, flags) == 0 ? 1 : -2;
        }
        if (PYXBUF_UNLIKELY((flags & PyBUF_WRITABLE) && view->base.readonly))
            return classic_fast_failed(obj, view, flags, rc);
        view->state = PYXBUF__STATE_ACQUIRED;
        return track_if_asked(obj, view, flags) == 0 ? 1 : -2;
    }
    view->state = PYXBUF__STATE_ACQUIRED;
    return 1;
}

/* get_classic_fast's answer for numpy.ndarray: its struct route applies. */
#define NUMPY_ROUTE 2

/* The common case in as few instructions as we can: a classic producer whose
 * type pyxbuf has seen, a request it can answer alone. 1 = acquired; 0 = not
 * this path (nothing done); NUMPY_ROUTE = NumPy's struct route instead
 * (nothing done); -1 = the producer refused (view reset, exception set: a
 * bridge may still answer); -2 = failed for good (exception set).
 * `owner`, `bridge_data` and `borrow_token` are left as they were: only a
 * bridge's path or a TRACKED grant reads them, and those set them first. */
static inline int get_classic_fast(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    PyTypeObject *tp = Py_TYPE(obj);
    if (PYXBUF_UNLIKELY((flags & ~FAST_PATH_FLAGS) != 0)) return 0;
    const void *slot;
    int32_t route = cached_host_route(tp, &slot);
    if (PYXBUF_UNLIKELY(route != CACHE_FAST)) return route == CACHE_NUMPY ? NUMPY_ROUTE : 0;
    return classic_fast_call(obj, tp, slot, view, flags);
}

/* After NumPy's struct route declined an array: when its dtype is a user
 * dtype the route has not learnt yet (ml_dtypes' bfloat16 the first time),
 * learn it and read again. 1 when read. */
static PYXBUF_NOINLINE int numpy_read_learning(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    /* The learning reads the array's descriptor under its critical section
     * (a.dtype = ... may swap and free it on a free-threaded build): no
     * cheaper test of it here. */
    return pyxbuf__numpy_user_learn(obj) &&
           pyxbuf__numpy_array_read(obj, view, flags & CLASSIC_RANGE);
}

/* Everything but the fast path, out of line so that the fast path saves no
 * registers it does not use. `fast` is get_classic_fast's answer. */
static PYXBUF_COLD int get_view_slow(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                     int64_t stream, int fast) {
    if (fast == -2) return -1;
    if (fast == -1) {
        if (after_classic_failed(obj, view, flags, stream, CLASSIC_REFUSED) != 1) return -1;
        view->state = PYXBUF__STATE_ACQUIRED;
        return track_if_asked(obj, view, flags);
    }
    if (PYXBUF_UNLIKELY(obj == NULL || view == NULL)) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_get: obj and view must not be NULL");
        return -1;
    }
    reset_view(view, flags);
#if PYXBUF__REFUSES_READ_OR_WRITE_ALONE
    if (PYXBUF_UNLIKELY(read_or_write_alone(flags))) return pyxbuf__refuse_read_write_alone(flags);
#endif
    /* Unknown request bits are not refused: only a type that declares them
     * receives them (acquire_native). */
    int32_t supported;
    if (!cached_supported(Py_TYPE(obj), &supported) &&
        pyxbuf_type_supported_flags(Py_TYPE(obj), &supported) < 0)
        return -1;
    int32_t missing = flags & PYXBUF_REQUIRED_FLAGS & ~supported;
    if (PYXBUF_UNLIKELY(missing)) return refuse_unsupported(obj, flags, missing);

    int rc;
    if (speaks_extended(supported)) {
        rc = acquire_native(obj, view, flags, supported);
    } else if (PYXBUF_LIKELY(PYXBUF__HAS_GETBUFFER(Py_TYPE(obj)))) {
        /* (PyObject_CheckBuffer, without the call.) The classic buffer
         * answers most CPU arrays; NumPy's, read from the array struct when
         * the route applies, as on the fast path. */
        if (pyxbuf__numpy_array_type(Py_TYPE(obj)) &&
            (pyxbuf__numpy_array_read(obj, view, flags & CLASSIC_RANGE) ||
             numpy_read_learning(obj, view, flags)))
            rc = 0;
        else
            rc = acquire_classic(obj, view, flags);
        if (PYXBUF_UNLIKELY(rc < 0))
            rc = after_classic_failed(obj, view, flags, stream, rc) == 1 ? 0 : -1;
    } else {
        rc = acquire_without_buffer(obj, view, flags, stream);
        if (rc == 0) return refuse_no_protocol(obj);
        rc = rc == 1 ? 0 : -1;
    }
    if (rc < 0) return -1;
    view->state = PYXBUF__STATE_ACQUIRED;
    /* Producers that know nothing of borrows: pyxbuf's cooperative registry. */
    return view->path == PYXBUF_PATH_NATIVE ? 0 : track_if_asked(obj, view, flags);
}

/* The DLPack C route's refusal (`rc` 0 or -1): the later bridges, then the
 * refusal, as pyxbuf_get reports it. */
static PYXBUF_COLD int get_after_dlpack(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                        int64_t stream, int rc) {
    rc = after_first_bridge(obj, view, flags, stream, rc);
    if (rc != 1) return rc == 0 ? refuse_no_protocol(obj) : -1;
    view->state = PYXBUF__STATE_ACQUIRED;
    return 0; /* the route takes no borrow bits: nothing to track */
}

/* The DLPack C route, out of line so that the classic fast path in get_view
 * keeps its tail calls and registers: the table's answer, else the later
 * bridges. */
static PYXBUF_NOINLINE int get_by_dlpack_c(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                           int64_t stream, const void *api) {
    int rc = pyxbuf__dlpack_get_c(obj, view, flags, stream, api);
    if (PYXBUF_LIKELY(rc == 1)) return 0;
    return get_after_dlpack(obj, view, flags, stream, rc);
}

/* NumPy's struct route (bridges/numpy_array.h), for a type cached as
 * numpy.ndarray and a request the fast path serves; out of line so that the
 * classic fast path in get_view keeps its registers. Where the route declines
 * (a dtype, layout or request it leaves to NumPy), NumPy's export as on the
 * classic fast path. pyxbuf_get's answer. */
static PYXBUF_NOINLINE int get_by_numpy(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                        int64_t stream) {
    pyxbuf__view_clear_extended(view, flags);
    if (PYXBUF_LIKELY(pyxbuf__numpy_array_read(obj, view, flags & CLASSIC_RANGE)) ||
        PYXBUF_UNLIKELY(numpy_read_learning(obj, view, flags))) {
        view->state = PYXBUF__STATE_ACQUIRED;
        /* A shared borrow: the common grant inline, as on the classic fast
         * path (an array read from its struct is host memory). */
        if ((flags & (BORROW_FLAGS | PyBUF_WRITABLE)) == PYXBUF_BORROW_SHARED) {
            if (PYXBUF_UNLIKELY(view->base.readonly)) return readonly_shared(obj, view, flags);
            if (PYXBUF_LIKELY(pyxbuf__tracked_shared_fast(view, 1))) return 0;
        }
        return track_if_asked(obj, view, flags);
    }
    /* (numpy.ndarray's entry keeps no slot: asked for here.) */
    int fast = classic_fast_call(obj, Py_TYPE(obj), pyxbuf__getbuffer_as_data(Py_TYPE(obj)), view,
                                 flags);
    if (PYXBUF_LIKELY(fast == 1)) return 0;
    return get_view_slow(obj, view, flags, stream, fast);
}

/* The requests the DLPack C route serves: the fast path's, borrows aside
 * (they take get_view_slow, which tracks them). */
#define DLPACK_C_ROUTE_FLAGS (FAST_PATH_FLAGS & ~BORROW_FLAGS)

static inline int get_view(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    if (PYXBUF_UNLIKELY(obj == NULL || view == NULL || ROUTE_READ_ALONE(flags)))
        return get_view_slow(obj, view, flags, stream, 0);
    int fast = get_classic_fast(obj, view, flags);
    if (PYXBUF_LIKELY(fast == 1)) return 0;
    if (fast == NUMPY_ROUTE) return get_by_numpy(obj, view, flags, stream);
    if (fast == 0 && (flags & ~DLPACK_C_ROUTE_FLAGS) == 0) {
        const void *api = cached_dlpack_c(Py_TYPE(obj));
        if (api != NULL) return get_by_dlpack_c(obj, view, flags, stream, api);
    }
    return get_view_slow(obj, view, flags, stream, fast);
}

int pyxbuf_get(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    return get_view(obj, view, flags, PYXBUF__STREAM_UNSET);
}

/* A device view handed to a consumer on `stream`: pyxbuf's own memory behind
 * it is freed only after the work queued there (device/device_alloc.c). */
static PYXBUF_NOINLINE void note_stream_use(const pyxbuf_view *view, int64_t stream) {
    pyxbuf_device d;
    if (pyxbuf_view_device(view, &d, NULL) == 0)
        pyxbuf__device_block_used_on(view, &d, stream);
}

int pyxbuf_get_stream(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    int rc = get_view(obj, view, flags, stream);
    if (rc == 0 && view->device != NULL) note_stream_use(view, stream);
    return rc;
}

#ifdef PYXBUF_DEBUG
/* After release: what a use after release would read. */
static void clear_released(pyxbuf_view *view) {
    view->base.buf = NULL;
    view->base.len = 0;
    view->base.ndim = 0;
    view->base.shape = view->base.strides = view->base.suboffsets = NULL;
    view->base.format = NULL;
    view->device = NULL;
    view->device_info = NULL;
    view->ext_flags = 0;
    view->flags = 0;
}
#endif

/* Marks the view released before the producer's release runs (a finalizer
 * that reaches this view again finds it released), then releases. Only
 * `state` is cleared outside PYXBUF_DEBUG: every pyxbuf call checks it, and
 * the rest costs stores on the hot path; the header says the pointers are
 * stale after release. */
static PYXBUF_ALWAYS_INLINE void release_acquired(pyxbuf_view *view) {
    view->state = PYXBUF__STATE_RELEASED;
    if (PYXBUF_LIKELY(view->path == PYXBUF_PATH_CLASSIC)) {
        PyBuffer_Release(&view->base); /* a tail call outside PYXBUF_DEBUG */
    } else if (PYXBUF_LIKELY(view->path == PYXBUF_PATH_NUMPY)) {
        /* PyBuffer_Release's work for a type without bf_releasebuffer. */
        PyObject *array = view->base.obj;
        view->base.obj = NULL;
        Py_DECREF(array);
    } else {
        release_by_bridge(view);
    }
#ifdef PYXBUF_DEBUG
    clear_released(view); /* a use after release finds NULLs */
#endif
}

/* A TRACKED view: its registry entry first. A native producer's TRACKED
 * grant is its own (pyxbuf never tracks native views): its view holds no
 * registry token and no rust-numpy borrow (reset_view), so the same release
 * undoes nothing for it. Out of line so that the common release keeps no
 * register across its tail call. */
static PYXBUF_NOINLINE void release_tracked(pyxbuf_view *view) {
    pyxbuf__tracked_release(view); /* clears TRACKED */
    release_acquired(view);
}

void pyxbuf_release(pyxbuf_view *view) {
    if (view == NULL || view->state != PYXBUF__STATE_ACQUIRED) {
#ifdef PYXBUF_DEBUG
        fprintf(stderr, "pyxbuf_release: view %p was not acquired or is already released\n",
                (void *)view);
        abort();
#endif
        return;
    }
    /* A TRACKED view's common release inline (tracked_fast.h), the rest out
     * of line. */
    if (PYXBUF_UNLIKELY(view->ext_flags & PYXBUF_EXT_TRACKED) &&
        !pyxbuf__tracked_release_fast(view))
        release_tracked(view);
    else
        release_acquired(view);
}

int pyxbuf_view_is_acquired(const pyxbuf_view *view) { return pyxbuf__view_acquired(view); }

int pyxbuf_view_is_host(const pyxbuf_view *view) {
    return view != NULL && view->device == NULL;
}

const char *pyxbuf_path_name(int32_t path) {
    switch (path) {
    case PYXBUF_PATH_NATIVE: return "native";
    case PYXBUF_PATH_DLPACK_C: return "dlpack-c";
    case PYXBUF_PATH_DLPACK: return "dlpack";
    case PYXBUF_PATH_CAI: return "cuda-array-interface";
    case PYXBUF_PATH_CLASSIC: return "classic";
    case PYXBUF_PATH_ARRAY_INTERFACE: return "array-interface";
    case PYXBUF_PATH_NUMPY: return "numpy";
    default: return "none";
    }
}
