/* internal.h -- helpers shared by the C files of libpyxbuf. Nothing here is
 * exported: the library is built with -fvisibility=hidden. */
#ifndef PYXBUF_INTERNAL_H
#define PYXBUF_INTERNAL_H

#include "pyxbuf.h"

#if defined(__GNUC__)
#define PYXBUF_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define PYXBUF_LIKELY(x) __builtin_expect(!!(x), 1)
#define PYXBUF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define PYXBUF_PRINTF(f, a)
#define PYXBUF_LIKELY(x) (x)
#define PYXBUF_UNLIKELY(x) (x)
#endif

/* Fill `err` (if not NULL) and return `code`. */
int pyxbuf__error(pyxbuf_error *err, int32_t code, int64_t position, const char *fmt, ...)
    PYXBUF_PRINTF(4, 5);

/* Markers in pyxbuf_view.state. */
#define PYXBUF__STATE_ACQUIRED 0x50584231u /* "PXB1" */
#define PYXBUF__STATE_RELEASED 0x50584230u /* "PXB0" */

/* Writes a human-readable list of the request bits in `flags`
 * ("WRITABLE|STRIDES|PYXBUF_DEVICE") into buf. */
void pyxbuf__flag_names(int32_t flags, char *buf, size_t cap);

/* Backends built into the library: backends.c registers them (through
 * pyxbuf__backend_register_raw) the first time the registry is used. */
const pyxbuf_backend *pyxbuf__cpu_backend(void);
const pyxbuf_backend *pyxbuf__cuda_backend(void);
void pyxbuf__register_builtin_backends(void);
int pyxbuf__backend_register_raw(const pyxbuf_backend *backend);

/* The exporter's memory, and adopting an event recorded after writing it
 * (export.c; the caller knows `obj` is an exporter). */
void *pyxbuf__exporter_buffer(PyObject *obj);
void pyxbuf__exporter_adopt_event(PyObject *obj, void *event, int64_t stream);

#endif
