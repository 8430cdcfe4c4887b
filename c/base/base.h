/* base.h -- what every file of libpyxbuf uses and that uses nothing of
 * pyxbuf's but the public header: compiler attributes, the version text,
 * errors, the view's state markers, type dicts. Includes the rest of base/'s
 * always-needed headers (compat, checked arithmetic). Nothing here is
 * exported: the library is built with -fvisibility=hidden. */
#ifndef PYXBUF_BASE_BASE_H
#define PYXBUF_BASE_BASE_H

#include "pyxbuf.h"

#include "base/checked.h"
#include "base/compat.h"

#include <stdatomic.h>

#if defined(__GNUC__) && defined(__MINGW32__) && !defined(__clang__)
/* mingw-w64 checks `printf` formats against Microsoft's C library; pyxbuf's
 * are C99's (%zu), which mingw's own stdio (__USE_MINGW_ANSI_STDIO) prints. */
#define PYXBUF_PRINTF(f, a) __attribute__((format(gnu_printf, f, a)))
#elif defined(__GNUC__)
#define PYXBUF_PRINTF(f, a) __attribute__((format(printf, f, a)))
#endif
#if defined(__GNUC__)
#define PYXBUF_LIKELY(x) __builtin_expect(!!(x), 1)
#define PYXBUF_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Error and rare paths: out of line, so hot callers save no registers for them. */
#define PYXBUF_COLD __attribute__((noinline, cold))
/* Taken often enough to stay warm, but kept out of a hot caller's frame. */
#define PYXBUF_NOINLINE __attribute__((noinline))
/* A small step of a hot loop whose call would cost more than its body. */
#define PYXBUF_ALWAYS_INLINE inline __attribute__((always_inline))
/* On an extern variable one file defines and others read: -fvisibility=hidden
 * hides the definition, but a plain declaration makes readers go through the
 * GOT (an extra load per access). */
#if defined(_WIN32)
#define PYXBUF_HIDDEN /* a DLL exports only what PYXBUF_API marks */
#else
#define PYXBUF_HIDDEN __attribute__((visibility("hidden")))
#endif
#else
#define PYXBUF_HIDDEN
#define PYXBUF_COLD
#define PYXBUF_NOINLINE
#define PYXBUF_ALWAYS_INLINE inline
#define PYXBUF_PRINTF(f, a)
#define PYXBUF_LIKELY(x) (x)
#define PYXBUF_UNLIKELY(x) (x)
#endif

/* pyxbuf_version_string()'s text, a constant. */
#define PYXBUF__STR2(x) #x
#define PYXBUF__STR(x) PYXBUF__STR2(x)
#define PYXBUF__VERSION_TEXT                                                                 \
    PYXBUF__STR(PYXBUF_VERSION_MAJOR) "." PYXBUF__STR(PYXBUF_VERSION_MINOR) "." PYXBUF__STR( \
        PYXBUF_VERSION_PATCH)

/* Fill `err` (if not NULL) and return `code`. */
int pyxbuf__error(pyxbuf_error *err, int32_t code, int64_t position, const char *fmt, ...)
    PYXBUF_PRINTF(4, 5);

/* The interned string `text`, made once and kept in *slot for the process.
 * Borrowed; NULL with an exception set if it could not be made. */
static inline PyObject *pyxbuf__interned(PyObject **slot, const char *text) {
    PyObject *s = PYXBUF__FT_LOAD_ACQUIRE(slot);
    if (PYXBUF_LIKELY(s != NULL)) return s;
    s = PyUnicode_InternFromString(text);
    return s == NULL ? NULL : pyxbuf__publish_once(slot, s);
}

/* shared_module.c: the capsule named `capsule_name` at attribute `attr` of
 * sys.modules[PYXBUF_SHARED_MODULE] (made if missing): the one there, or a
 * new one holding `own`, put there first. A new reference, or NULL with an
 * exception set. Needs an attached thread state (the GIL). */
PyObject *pyxbuf__shared_capsule(const char *attr, const char *capsule_name, void *own);

/* shared_module.c: the object at attribute `attr` of
 * sys.modules[PYXBUF_SHARED_MODULE]: the one there, or (when there is none)
 * the one `make` returns (a new reference, or NULL with an exception set),
 * put there first. A new reference, or NULL with an exception set. Needs an
 * attached thread state (the GIL). */
PyObject *pyxbuf__shared_object(const char *attr, PyObject *(*make)(void));

/* The shared module's attribute holding pyxbuf.ItemTypeError (errors.c,
 * pyxbuf_item_type_error). */
#define PYXBUF__ITEM_TYPE_ERROR_ATTR "ItemTypeError"

/* Markers in pyxbuf_view.state. */
#define PYXBUF__STATE_ACQUIRED 0x50584231u /* "PXB1" */
#define PYXBUF__STATE_RELEASED 0x50584230u /* "PXB0" */

/* pyxbuf_view_is_acquired, for every layer (it reads one field). */
static inline int pyxbuf__view_acquired(const pyxbuf_view *view) {
    return view != NULL && view->state == PYXBUF__STATE_ACQUIRED;
}

/* For messages: `one` when the count `n` is 1, else `many` ("1 byte", "0 bytes",
 * "2 entries"). A macro, so that any integer type goes in unconverted. */
#define PYXBUF__PLURAL(n, one, many) ((n) == 1 ? (one) : (many))

/* Raise BufferError with the formatted message (at most
 * PYXBUF_ERROR_MESSAGE_SIZE bytes) and return -1. */
int pyxbuf__buffer_error(const char *fmt, ...) PYXBUF_PRINTF(1, 2);

/* Writes a human-readable list of the request bits in `flags`
 * ("WRITABLE|STRIDES|PYXBUF_DEVICE") into buf. */
void pyxbuf__flag_names(int32_t flags, char *buf, size_t cap);

/* type_dict.c: set `name` in `type`'s dict (static and immutable types too) and
 * tell the type it changed. Steals `value` (NULL: an error is already set).
 * Returns 0, or -1 with a Python exception set. */
int pyxbuf__type_dict_set(PyTypeObject *type, const char *name, PyObject *value);

#endif
