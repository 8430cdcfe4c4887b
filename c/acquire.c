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

#include "bridges/bridges.h"
#include "borrow/borrow.h"
#include "base/type_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Supported flags                                                           */
/* ------------------------------------------------------------------------- */

/* The mask a supported-flags value stands for: 0 every classic flag, -1
 * PyBUF_SIMPLE only (the empty mask, as the proposal says: a SIMPLE-only type
 * is refused FORMAT, a required flag, before its producer runs). */
static int32_t expand_supported(long value) {
    if (value == PYXBUF_SUPPORTS_CLASSIC) return PYXBUF_CLASSIC_FLAGS;
    if (value == PYXBUF_SUPPORTS_SIMPLE_ONLY) return 0;
    return (int32_t)value;
}

/* Bits pyxbuf does not know are allowed (a producer backporting a newer
 * flag declares it); bits 29 and 30 are the cache's route bits below. */
static int check_supported_value(const char *type_name, long value) {
    if (value == PYXBUF_SUPPORTS_SIMPLE_ONLY) return 0;
    if (value < 0 || value > PYXBUF_SUPPORTED_FLAGS_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf: supported flags %ld for type '%.200s' are invalid: expected 0 "
                     "(every classic flag), -1 (PyBUF_SIMPLE only) or a mask of request flags "
                     "within 0x%x (bits 29 and up are reserved)",
                     value, type_name, (unsigned)PYXBUF_SUPPORTED_FLAGS_MAX);
        return -1;
    }
    return 0;
}

/* A type that declares any bit beyond the classic ones speaks the extended
 * protocol: pyxbuf passes it the extended (and newer) bits it declares. */
static inline int speaks_extended(int32_t supported) {
    return (supported & ~PYXBUF_CLASSIC_FLAGS) != 0;
}

/* One entry per type version seen recently, indexed by the version tag's low
 * bits. A type's version tag changes whenever its dict changes and is never
 * reused, so (type, tag) identifies the answer even if the type dies and
 * another is allocated at the same address; the type is compared too because
 * sub-interpreters number their heap types independently. `key` packs the tag
 * (low 32 bits, never 0 once stored) and the expanded mask (high 32 bits), with
 * one route bit set in the mask when a fast route applies to a type that
 * supports every classic flag and nothing more: CACHE_FAST when it has a
 * bf_getbuffer slot, CACHE_DLPACK_C when it has none but a DLPack C exchange
 * table (the bridge DESIGN.md tries first). A route then tests one word, and
 * a type without a tag (0) never hits. */
#define SUPPORTED_CACHE_SIZE 256
#define CACHE_FAST 0x40000000     /* above PYXBUF_SUPPORTED_FLAGS_MAX */
#define CACHE_DLPACK_C 0x20000000 /* likewise */
#define CACHE_ROUTES (CACHE_FAST | CACHE_DLPACK_C)
/* data: CACHE_DLPACK_C's table (kept alive by the type's dict). */
static pyxbuf__type_cache_entry supported_cache[SUPPORTED_CACHE_SIZE];

static inline pyxbuf__type_cache_entry *cache_entry(unsigned int tag) {
    return &supported_cache[tag & (SUPPORTED_CACHE_SIZE - 1)];
}

static inline uint64_t cache_key(unsigned int tag, int32_t mask) {
    return (uint64_t)tag | (uint64_t)(uint32_t)mask << 32;
}

static PyObject *supported_attr_name(void) {
    static PyObject *name = NULL;
    return pyxbuf__interned(&name, PYXBUF_SUPPORTED_FLAGS_ATTR);
}

static int lookup_supported(PyTypeObject *type, int32_t *mask) {
    PyObject *name = supported_attr_name();
    if (name == NULL) return -1;
    /* _PyType_Lookup searches the MRO only (not the metaclass), raises
     * nothing and gives the type a version tag we can cache under. */
    PyObject *value = _PyType_Lookup(type, name);
    if (value == NULL) {
        *mask = PYXBUF_CLASSIC_FLAGS;
        return 0;
    }
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError,
                     "pyxbuf: %s of type '%.200s' must be an int, found '%.200s'; set it to 0, "
                     "-1 or a mask of request flags",
                     PYXBUF_SUPPORTED_FLAGS_ATTR, type->tp_name, Py_TYPE(value)->tp_name);
        return -1;
    }
    long raw = PyLong_AsLong(value);
    if (raw == -1 && PyErr_Occurred()) return -1;
    if (check_supported_value(type->tp_name, raw) < 0) return -1;
    *mask = expand_supported(raw);
    return 0;
}

/* 1 and *supported on a cache hit, else 0. */
static inline int cached_supported(PyTypeObject *type, int32_t *supported) {
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    const void *data;
    if (pyxbuf__type_cache_get(cache_entry(tag), type, &key, &data) && tag != 0 &&
        (uint32_t)key == tag) {
        *supported = (int32_t)(key >> 32) & ~CACHE_ROUTES;
        return 1;
    }
    return 0;
}

/* The fast path's test: the type is cached as a classic producer with a
 * bf_getbuffer slot (see the comment on supported_cache). */
static inline int cached_classic_fast(PyTypeObject *type) {
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    const void *data;
    return pyxbuf__type_cache_get(cache_entry(tag), type, &key, &data) &&
           key == cache_key(tag, PYXBUF_CLASSIC_FLAGS | CACHE_FAST);
}

/* The DLPack C route's table for the type, or NULL when it has no such
 * route (see the comment on supported_cache). */
static inline const void *cached_dlpack_c(PyTypeObject *type) {
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    const void *data;
    int hit = pyxbuf__type_cache_get(cache_entry(tag), type, &key, &data) &&
              key == cache_key(tag, PYXBUF_CLASSIC_FLAGS | CACHE_DLPACK_C);
    return hit ? data : NULL;
}

/* The route bit for a type whose supported flags are `supported`, or 0, and
 * what the route needs in *data. */
static int32_t route_of(PyTypeObject *type, int32_t supported, const void **data) {
    *data = NULL;
    if (supported != PYXBUF_CLASSIC_FLAGS) return 0;
    PyBufferProcs *pb = type->tp_as_buffer;
    if (pb != NULL && pb->bf_getbuffer != NULL) return CACHE_FAST;
    *data = pyxbuf__dlpack_c_table_of(type);
    return *data != NULL ? CACHE_DLPACK_C : 0;
}

int pyxbuf_type_supported_flags(PyTypeObject *type, int32_t *supported) {
    if (cached_supported(type, supported)) return 0;
    if (lookup_supported(type, supported) < 0) return -1;
    unsigned int tag = pyxbuf__type_tag(type);
    if (tag != 0) {
        const void *data;
        int32_t route = route_of(type, *supported, &data);
        pyxbuf__type_cache_put(cache_entry(tag), type, cache_key(tag, *supported | route), data);
    }
    return 0;
}

/* Test hook (hidden): forget the cached answer for `type`, so that the next
 * pyxbuf_get of one of its objects takes the uncached path (the differential
 * tests compare both paths with PyObject_GetBuffer). Needs the GIL. */
void pyxbuf__type_cache_forget(PyTypeObject *type) {
    unsigned int tag = pyxbuf__type_tag(type);
    pyxbuf__type_cache_entry *e = cache_entry(tag);
    uint64_t key;
    const void *data;
    if (pyxbuf__type_cache_get(e, type, &key, &data)) pyxbuf__type_cache_put(e, NULL, 0, NULL);
}

int pyxbuf_type_set_supported_flags(PyTypeObject *type, int32_t flags) {
    if (type == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_type_set_supported_flags: type is NULL");
        return -1;
    }
    if (check_supported_value(type->tp_name, flags) < 0) return -1;
    return pyxbuf__type_dict_set(type, PYXBUF_SUPPORTED_FLAGS_ATTR, PyLong_FromLong(flags));
}

/* Whether `obj` has __cuda_array_interface__, without running its code: a
 * descriptor on the type counts as present (it is not called); an instance
 * attribute is looked up only through the generic getattr, which runs no
 * Python code. A type with its own __getattr__ is asked nothing: 0. */
static int has_cai_quietly(PyObject *obj) {
    static PyObject *slot = NULL;
    PyObject *name = pyxbuf__interned(&slot, "__cuda_array_interface__");
    if (name == NULL) return -1;
    if (_PyType_Lookup(Py_TYPE(obj), name) != NULL) return 1;
    if (Py_TYPE(obj)->tp_getattro != PyObject_GenericGetAttr) return 0;
    PyObject *value = PyObject_GenericGetAttr(obj, name);
    if (value != NULL) {
        Py_DECREF(value);
        return 1;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
}

/* Whether `obj` speaks a protocol that can describe device memory: DLPack
 * (__dlpack__ or a C exchange table on the type) or the CUDA Array Interface. */
static int speaks_a_device_protocol(PyObject *obj) {
    if (pyxbuf__dlpack_type_speaks(Py_TYPE(obj))) return 1;
    return has_cai_quietly(obj);
}

/* CPython 3.13+ refuses PyBUF_READ or PyBUF_WRITE alone in PyObject_GetBuffer
 * (SystemError, before any producer runs); older versions pass them on.
 * pyxbuf answers as the interpreter it runs on, on every path, for the
 * request without its PYXBUF_* bits. The fast routes call producers
 * directly, so such a request leaves them for get_view_slow, which refuses
 * it (PyBUF_WRITE is outside the routes' masks already). A library built for
 * 3.12 or older runs on no 3.13 (there is no stable-ABI build), so it pays
 * nothing for the test. */
#if PYXBUF__REFUSES_READ_OR_WRITE_ALONE
#define ROUTE_READ_ALONE(flags) (((flags) & PYXBUF_CLASSIC_FLAGS) == PyBUF_READ)

/* PyBUF_READ alone in what a classic producer would receive (3.13's
 * PyBuffer_FillInfo refuses it too, and bytearray then hands back an unfilled
 * view), or PyBUF_WRITE alone with no PyBUF_* bit but PYXBUF_* ones. */
static int read_or_write_alone(int32_t flags) {
    return ROUTE_READ_ALONE(flags) || (flags & ~PYXBUF_EXTENDED_FLAGS) == PyBUF_WRITE;
}

static int refuse_read_write_alone(int32_t flags) {
    PyErr_Format(PyExc_SystemError,
                 "pyxbuf_get: the request 0x%x is %s alone, a PyMemoryView_FromMemory flag "
                 "rather than a buffer request; Python 3.13+ refuses it in PyObject_GetBuffer "
                 "and so does pyxbuf; ask for PyBUF_SIMPLE (0) or the PyBUF_* flags you need",
                 (unsigned)flags,
                 ROUTE_READ_ALONE(flags) ? "PyBUF_READ" : "PyBUF_WRITE");
    return -1;
}
#else
#define ROUTE_READ_ALONE(flags) 0
#endif

/* Whether pyxbuf_get would find a protocol to try on `obj`: a buffer slot,
 * DLPack or the CUDA Array Interface. The __array_interface__ bridge reads
 * only NumPy arrays of user dtypes, which have a buffer slot already. */
static int speaks_a_protocol(PyObject *obj) {
    PyBufferProcs *pb = Py_TYPE(obj)->tp_as_buffer;
    if (pb != NULL && pb->bf_getbuffer != NULL) return 1;
    return speaks_a_device_protocol(obj);
}

#define BORROW_FLAGS (PYXBUF_BORROW_SHARED | PYXBUF_BORROW_EXCLUSIVE)

/* The proposal's query: does `obj` advertise every bit of `flags`? Its type's
 * supported flags, and for a type outside the extended protocol what pyxbuf
 * answers for it (borrows from its registry; device memory through a bridge
 * that can carry it). */
int pyxbuf_check_supports(PyObject *obj, int32_t flags) {
    if (obj == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_check_supports: obj is NULL");
        return -1;
    }
#if PYXBUF__REFUSES_READ_OR_WRITE_ALONE
    if (read_or_write_alone(flags)) return 0;
#endif
    int32_t advertised;
    if (pyxbuf_type_supported_flags(Py_TYPE(obj), &advertised) < 0) return -1;
    if (!speaks_extended(advertised)) {
        advertised |= BORROW_FLAGS;
        if (flags & PYXBUF_DEVICE) {
            int device = speaks_a_device_protocol(obj);
            if (device < 0) return -1;
            if (device) advertised |= PYXBUF_DEVICE;
        }
    }
    if (flags & ~advertised) return 0;
    return speaks_a_protocol(obj);
}

/* ------------------------------------------------------------------------- */
/* Errors raised during acquisition                                          */
/* ------------------------------------------------------------------------- */

/* Empty the view. The classic fields are left to the producer, which fills
 * every one of them (clearing them here would cost more than the rest of
 * the fast path); only `obj` and `buf` are cleared so a failed view holds
 * nothing. */
static void reset_view(pyxbuf_view *view, int32_t requested) {
    view->base.obj = NULL;
    view->base.buf = NULL;
    pyxbuf__view_begin(view, requested);
    view->path = PYXBUF_PATH_NONE;
    view->owner = NULL;
    view->bridge_data = NULL;
    view->borrow_token = 0;
    view->reserved[0] = 0; /* no rust-numpy borrow: a native TRACKED grant releases as one */
}

/* Replace the producer's exception with a BufferError whose message names the
 * object's type, the path and the request, keeping the original as __cause__.
 * Producers disagree on the type of a refusal (NumPy raises ValueError for
 * contiguity, bytes BufferError for writability); consumers of pyxbuf catch
 * one. Other exceptions (MemoryError, KeyboardInterrupt...) keep their type. */
static void add_context(PyObject *obj, const char *path, int32_t flags) {
    char names[256];
    pyxbuf__flag_names(flags, names, sizeof names);
    if (!PyErr_Occurred()) {
        /* A producer that fails without an exception would leave the
         * consumer returning NULL with none (SystemError at best). */
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: %s buffer of '%.200s' failed the request %s without setting an "
                     "exception; the producer is broken and must be fixed",
                     path, Py_TYPE(obj)->tp_name, names);
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
    PyErr_Format(raised, "pyxbuf: %s buffer of '%.200s' refused the request %s: %s", path,
                 Py_TYPE(obj)->tp_name, names, reason);
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
                 "pyxbuf: '%.200s' does not support the required flag(s) %s of the request %s "
                 "(its %s says so); ask for less, or copy the data into a buffer that can",
                 Py_TYPE(obj)->tp_name, miss, want, PYXBUF_SUPPORTED_FLAGS_ATTR);
    return -1;
}

/* Undo a producer's answer that pyxbuf refuses, then raise BufferError. */
static int refuse_answer(pyxbuf_view *view, PyObject *obj, const char *reason, int32_t bits) {
    PyBuffer_Release(&view->base);
    reset_view(view, view->requested);
    char names[256];
    pyxbuf__flag_names(bits, names, sizeof names);
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: the buffer of '%.200s' is invalid: %s (%s); the producer breaks the "
                 "extended buffer protocol and must be fixed",
                 Py_TYPE(obj)->tp_name, reason, names);
    return -1;
}

/* ------------------------------------------------------------------------- */
/* Acquisition                                                               */
/* ------------------------------------------------------------------------- */

/* The grants a producer may give for the extended flags it was passed. An
 * exclusive request may be answered with the weaker shared grant, and any
 * grant may be marked TRACKED (weaker still: a wrapper of tracked memory). */
static int32_t allowed_grants(int32_t passed) {
    int32_t allowed = 0;
    if (passed & PYXBUF_BORROW_SHARED) allowed |= PYXBUF_EXT_SHARED | PYXBUF_EXT_TRACKED;
    if (passed & PYXBUF_BORROW_EXCLUSIVE)
        allowed |= PYXBUF_EXT_SHARED | PYXBUF_EXT_EXCLUSIVE | PYXBUF_EXT_TRACKED;
    return allowed;
}

/* A "pyxbuf.dlpack" device view names its device in device_info; when pyxbuf
 * has a backend for that device, the backend must agree that the pointer is
 * memory of that very device before pyxbuf hands it on. */
static int validate_device_pointer(pyxbuf_view *view, PyObject *obj) {
    if (!pyxbuf_device_equal(view->device, PYXBUF_DEVICE_DLPACK)) return 0;
    const pyxbuf_device_info *info = view->device_info;
    if (info == NULL || info->size < offsetof(pyxbuf_device_info, reserved))
        return refuse_answer(view, obj, "its \"" PYXBUF_DEVICE_DLPACK "\" device has no valid "
                             "pyxbuf_device_info", view->flags);
    pyxbuf_backend b;
    if (pyxbuf_backend_get(info->device_type, &b, NULL) < 0) return 0;
    Py_ssize_t lo = 0, hi = 0;
    if (pyxbuf__view_span(&view->base, &lo, &hi) < 0)
        return refuse_answer(view, obj, "its shape and strides overflow", view->flags);
    pyxbuf_device claimed = {info->device_type, info->device_id};
    pyxbuf_error err;
    if (pyxbuf__check_device_span(&b, view->base.buf, lo, hi, &claimed, &err) == 0) return 0;
    return refuse_answer(view, obj, err.message, view->flags);
}

/* The device identifier must be a non-empty UTF-8 string and not "cpu". */
static int validate_device_id(pyxbuf_view *view, PyObject *obj) {
    int64_t bad = pyxbuf__device_id_invalid_at(view->device);
    if (PYXBUF_UNLIKELY(bad >= 0)) {
        char why[160];
        unsigned char c = (unsigned char)view->device[bad];
        if (c == 0)
            snprintf(why, sizeof why, "its device identifier is empty");
        else if (bad >= PYXBUF__DEVICE_ID_MAX)
            snprintf(why, sizeof why, "its device identifier is longer than %d bytes",
                     PYXBUF__DEVICE_ID_MAX);
        else
            snprintf(why, sizeof why,
                     "its device identifier is not valid UTF-8 (byte 0x%02X at position %lld)",
                     c, (long long)bad);
        return refuse_answer(view, obj, why, view->flags);
    }
    if (strcmp(view->device, PYXBUF_DEVICE_CPU) == 0)
        return refuse_answer(view, obj, "it named the reserved device \"cpu\" (NULL means CPU)",
                             view->flags);
    return 0;
}

/* The proposal: a consumer reads no extended field whose bit in `flags` is
 * clear, so a producer that fills one without its bit broke the protocol --
 * pyxbuf refuses the view rather than guess which half to believe. */
static int validate_extended(pyxbuf_view *view, PyObject *obj, int32_t passed) {
    int32_t passed_ext = passed & ~PYXBUF_CLASSIC_FLAGS; /* newer bits included */
    if (view->flags & ~passed_ext)
        return refuse_answer(view, obj, "it set extended flags that were not requested",
                             view->flags & ~passed_ext);
    if (view->device != NULL && !(view->flags & PYXBUF_DEVICE))
        return refuse_answer(view, obj, "it set a device without setting PYXBUF_DEVICE in flags",
                             view->flags);
    if (view->device_info != NULL && !(view->flags & PYXBUF_DEVICE))
        return refuse_answer(view, obj,
                             "it set device_info without setting PYXBUF_DEVICE in flags",
                             view->flags);
    /* PYXBUF_DEVICE with device NULL is CPU memory: the proposal allows NULL. */
    if (view->device != NULL && validate_device_id(view, obj) < 0) return -1;
    int32_t allowed = allowed_grants(passed);
    if (view->ext_flags & ~allowed)
        return refuse_answer(view, obj, "it granted a borrow that was not requested (ext_flags)",
                             passed_ext);
    /* A grant counts only with its request bit in `flags` (counter.c's grant()
     * sets both): EXCLUSIVE needs BORROW_EXCLUSIVE, SHARED either borrow bit. */
    int32_t backed = allowed_grants(view->flags);
    if (view->ext_flags & ~backed)
        return refuse_answer(view, obj,
                             "it granted a borrow in ext_flags without setting the matching "
                             "PYXBUF_BORROW_* bit in flags",
                             view->flags);
    if (view->ext_flags == PYXBUF_EXT_TRACKED)
        return refuse_answer(view, obj,
                             "it set PYXBUF_EXT_TRACKED in ext_flags without a shared or "
                             "exclusive grant",
                             view->flags);
    return view->device != NULL ? validate_device_pointer(view, obj) : 0;
}

static int validate_classic(pyxbuf_view *view, PyObject *obj, int32_t passed) {
    if (PYXBUF_UNLIKELY((unsigned)view->base.ndim > PYXBUF_MAX_NDIM))
        return refuse_answer(view, obj, "its ndim is negative or above PYXBUF_MAX_NDIM (64)",
                             passed);
    if (PYXBUF_UNLIKELY((passed & PyBUF_WRITABLE) && view->base.readonly))
        return refuse_answer(view, obj, "it returned read-only memory for a WRITABLE request",
                             passed);
    return 0;
}

/* The size of a single native struct code with no prefix, 0 for any other
 * format (prefixed formats carry producer quirks: ctypes' '<l' is 8 bytes and
 * its '<u' 4; pyxbuf trusts the itemsize there, as its copies do). */
static Py_ssize_t native_code_size(const char *format) {
    if (format == NULL || format[0] == '\0' || format[1] != '\0') return 0;
    switch (format[0]) {
    case 'c': case 'b': case 'B': case '?': return 1;
    case 'h': case 'H': case 'e': return 2;
    case 'i': case 'I': return (Py_ssize_t)sizeof(int);
    case 'l': case 'L': return (Py_ssize_t)sizeof(long);
    case 'q': case 'Q': return (Py_ssize_t)sizeof(long long);
    case 'n': case 'N': return (Py_ssize_t)sizeof(Py_ssize_t);
    case 'f': return (Py_ssize_t)sizeof(float);
    case 'd': return (Py_ssize_t)sizeof(double);
    case 'P': return (Py_ssize_t)sizeof(void *);
    default: return 0;
    }
}

/* Native (extended) producers only: the classic fields must agree with each
 * other -- itemsize positive and equal to a plain native format's size, a
 * shape when PyBUF_ND was asked, no negative extent, and len equal to the
 * product of the shape times itemsize (PEP 3118). Consumers size slices by
 * the shape (the Rust layer) and copies by len; a producer whose two answers
 * differ would send one of them past the memory. The classic path does not
 * pay for this loop: CPython's and NumPy's buffers are consistent, and the
 * copy functions check again (pyxbuf__check_copy_size in device/view_device.c). */
static int validate_native_layout(pyxbuf_view *view, PyObject *obj, int32_t passed) {
    const Py_buffer *b = &view->base;
    char why[200];
    if (PYXBUF_UNLIKELY(b->itemsize < 1)) {
        snprintf(why, sizeof why, "its itemsize %zd is not positive", b->itemsize);
        return refuse_answer(view, obj, why, passed);
    }
    Py_ssize_t code_size = native_code_size(b->format);
    if (PYXBUF_UNLIKELY(code_size != 0 && code_size != b->itemsize)) {
        snprintf(why, sizeof why, "its itemsize %zd disagrees with its format '%s' (%zd bytes)",
                 b->itemsize, b->format, code_size);
        return refuse_answer(view, obj, why, passed);
    }
    if (b->shape == NULL) {
        if (PYXBUF_UNLIKELY((passed & PyBUF_ND) && b->ndim > 0))
            return refuse_answer(view, obj, "its shape is NULL though PyBUF_ND was requested",
                                 passed);
        if (PYXBUF_UNLIKELY(b->len < 0)) {
            snprintf(why, sizeof why, "its len %zd is negative", b->len);
            return refuse_answer(view, obj, why, passed);
        }
        return 0;
    }
    Py_ssize_t bytes = b->itemsize;
    for (int i = 0; i < b->ndim; i++) {
        if (PYXBUF_UNLIKELY(b->shape[i] < 0)) {
            snprintf(why, sizeof why, "its shape[%d] = %zd is negative", i, b->shape[i]);
            return refuse_answer(view, obj, why, passed);
        }
        if (PYXBUF_UNLIKELY(!PYXBUF__MUL_OK(bytes, b->shape[i], &bytes))) {
            snprintf(why, sizeof why, "its shape times itemsize %zd overflows", b->itemsize);
            return refuse_answer(view, obj, why, passed);
        }
    }
    if (PYXBUF_UNLIKELY(bytes != b->len)) {
        snprintf(why, sizeof why,
                 "its len %zd disagrees with its shape times itemsize %zd (%zd bytes)", b->len,
                 b->itemsize, bytes);
        return refuse_answer(view, obj, why, passed);
    }
    return 0;
}

static int acquire_native(PyObject *obj, pyxbuf_view *view, int32_t flags, int32_t supported) {
    /* Extended and newer bits go only to types that advertise them; the
     * others are dropped, as a producer that does not know them would ignore
     * them (the consumer sees them clear in view->flags). */
    int32_t passed = flags & (PYXBUF_CLASSIC_FLAGS | supported);
    if (PyObject_GetBuffer(obj, &view->base, passed) < 0) {
        reset_view(view, flags);
        add_context(obj, "native extended", passed);
        return -1;
    }
    view->path = PYXBUF_PATH_NATIVE;
    /* ndim first: the device check below walks shape and strides. */
    if (validate_classic(view, obj, passed) < 0) return -1;
    if (validate_native_layout(view, obj, passed) < 0) return -1;
    return validate_extended(view, obj, passed);
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
static int classic_cannot_describe(PyObject *obj, int32_t flags, int raw);

static int acquire_classic(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    int32_t passed = flags & PYXBUF_CLASSIC_FLAGS;
    if (PyObject_GetBuffer(obj, &view->base, passed) < 0) {
        reset_view(view, flags);
        return CLASSIC_REFUSED; /* the producer's exception, context not yet added */
    }
    view->path = PYXBUF_PATH_CLASSIC;
    return validate_classic(view, obj, passed);
}

/* After the classic buffer failed (`rc` from acquire_classic, or -1 from the
 * fast path's producer call, both CLASSIC_REFUSED then): a bridge answers, or
 * the error stands with its context. 1 = a bridge acquired; -1 = failed. */
static int after_classic_failed(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                                int rc) {
    int32_t passed = flags & PYXBUF_CLASSIC_FLAGS;
    const char *pending = rc == CLASSIC_REFUSED ? "classic" : NULL;
    if (classic_cannot_describe(obj, flags, pending != NULL)) {
        refusal r;
        refusal_take(&r, pending, passed);
        return acquire_by_bridges(obj, view, flags, stream, 0, &r) == 1 ? 1 : -1;
    }
    if (pending != NULL) add_context(obj, pending, passed);
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
 * flag). Not for errors other than refusals (MemoryError, KeyboardInterrupt). */
static int classic_cannot_describe(PyObject *obj, int32_t flags, int raw) {
    /* A raw producer error counts as a refusal when add_context would make
     * it a BufferError (ValueError, TypeError, BufferError). */
    if (!PyErr_ExceptionMatches(PyExc_BufferError) &&
        !(raw && (PyErr_ExceptionMatches(PyExc_ValueError) ||
                  PyErr_ExceptionMatches(PyExc_TypeError))))
        return 0;
    if (!(flags & PyBUF_WRITABLE)) return 1;
    PyObject *refused = PyErr_GetRaisedException();
    Py_buffer probe;
    int readable = PyObject_GetBuffer(obj, &probe, flags & PYXBUF_CLASSIC_FLAGS & ~PyBUF_WRITABLE);
    if (readable == 0)
        PyBuffer_Release(&probe);
    else
        PyErr_Clear();
    PyErr_SetRaisedException(refused);
    return readable != 0;
}

/* Every path but the classic one (the native path's producer has a
 * bf_releasebuffer of its own). */
static PYXBUF_NOINLINE void release_by_bridge(pyxbuf_view *view) {
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
                 Py_TYPE(obj)->tp_name);
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
    if (pyxbuf__tracked_acquire(obj, view, flags) == 0) return 0;
    pyxbuf_release(view);
    return -1;
}

/* The fast path's failures, out of line so that the fast path keeps no
 * registers alive for them. `rc` is the producer's answer: below 0 it refused
 * (view reset, exception set, -1: a bridge may still answer); otherwise the
 * view failed validation or its borrow could not be tracked (-2: for good). */
static PYXBUF_COLD int classic_fast_failed(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                           int rc) {
    int32_t passed = flags & PYXBUF_CLASSIC_FLAGS;
    if (rc < 0) {
        reset_view(view, flags);
        return -1; /* CLASSIC_REFUSED: get_view_slow adds the context if it stands */
    }
    view->owner = NULL;
    view->bridge_data = NULL;
    view->borrow_token = 0;
    if (validate_classic(view, obj, passed) < 0) return -2; /* released, says why */
    view->state = PYXBUF__STATE_ACQUIRED;
    return track_if_asked(obj, view, flags) == 0 ? 1 : -2;
}

/* The common case in as few instructions as we can: a classic producer whose
 * type pyxbuf has seen, a request it can answer alone. 1 = acquired; 0 = not
 * this path (nothing done); -1 = the producer refused (view reset, exception
 * set: a bridge may still answer); -2 = failed for good (exception set).
 * `owner`, `bridge_data` and `borrow_token` are left as they were: only a
 * bridge's path or a TRACKED grant reads them, and those set them first. */
static inline int get_classic_fast(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    PyTypeObject *tp = Py_TYPE(obj);
    if (PYXBUF_UNLIKELY((flags & ~FAST_PATH_FLAGS) != 0 || !cached_classic_fast(tp))) return 0;
    pyxbuf__view_clear_extended(view, flags);
    view->path = PYXBUF_PATH_CLASSIC;
    /* PyObject_GetBuffer is this call after the checks made above (the cache
     * entry says the slot exists). */
    int rc = tp->tp_as_buffer->bf_getbuffer(obj, &view->base, flags & PYXBUF_CLASSIC_FLAGS);
    if (PYXBUF_UNLIKELY(rc < 0 || (unsigned)view->base.ndim > PYXBUF_MAX_NDIM))
        return classic_fast_failed(obj, view, flags, rc);
    if (flags & (PyBUF_WRITABLE | BORROW_FLAGS)) { /* one test for the plain read */
        if (PYXBUF_UNLIKELY((flags & PyBUF_WRITABLE) && view->base.readonly))
            return classic_fast_failed(obj, view, flags, rc);
        view->state = PYXBUF__STATE_ACQUIRED;
        return track_if_asked(obj, view, flags) == 0 ? 1 : -2;
    }
    view->state = PYXBUF__STATE_ACQUIRED;
    return 1;
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
    if (PYXBUF_UNLIKELY(read_or_write_alone(flags))) return refuse_read_write_alone(flags);
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
    } else if (PYXBUF_LIKELY(Py_TYPE(obj)->tp_as_buffer != NULL &&
                             Py_TYPE(obj)->tp_as_buffer->bf_getbuffer != NULL)) {
        /* (PyObject_CheckBuffer, without the call.) The classic buffer
         * answers most CPU arrays. */
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

/* The requests the DLPack C route serves: the fast path's, borrows aside
 * (they take get_view_slow, which tracks them). */
#define DLPACK_C_ROUTE_FLAGS (FAST_PATH_FLAGS & ~BORROW_FLAGS)

static inline int get_view(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    if (PYXBUF_UNLIKELY(obj == NULL || view == NULL || ROUTE_READ_ALONE(flags)))
        return get_view_slow(obj, view, flags, stream, 0);
    int fast = get_classic_fast(obj, view, flags);
    if (PYXBUF_LIKELY(fast == 1)) return 0;
    if (fast == 0 && (flags & ~DLPACK_C_ROUTE_FLAGS) == 0) {
        const void *api = cached_dlpack_c(Py_TYPE(obj));
        if (api != NULL) return get_by_dlpack_c(obj, view, flags, stream, api);
    }
    return get_view_slow(obj, view, flags, stream, fast);
}

int pyxbuf_get(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    return get_view(obj, view, flags, PYXBUF__STREAM_UNSET);
}

int pyxbuf_get_stream(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    return get_view(obj, view, flags, stream);
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

/* A TRACKED view: its registry entry first. A native producer's TRACKED
 * grant is its own (pyxbuf never tracks native views): its view holds no
 * registry token and no rust-numpy borrow (reset_view), so the same release
 * undoes nothing for it. Out of line so that the common release keeps no
 * register across its tail call. */
static PYXBUF_NOINLINE void release_tracked(pyxbuf_view *view) {
    pyxbuf__tracked_release(view); /* clears TRACKED */
    pyxbuf_release(view);
}

/* Marks the view released before the producer's release runs (a finalizer
 * that reaches this view again finds it released), then releases. Only
 * `state` is cleared outside PYXBUF_DEBUG: every pyxbuf call checks it, and
 * the rest costs stores on the hot path; the header says the pointers are
 * stale after release. */
void pyxbuf_release(pyxbuf_view *view) {
    if (view == NULL || view->state != PYXBUF__STATE_ACQUIRED) {
#ifdef PYXBUF_DEBUG
        fprintf(stderr, "pyxbuf_release: view %p was not acquired or is already released\n",
                (void *)view);
        abort();
#endif
        return;
    }
    if (PYXBUF_UNLIKELY(view->ext_flags & PYXBUF_EXT_TRACKED)) {
        release_tracked(view);
        return;
    }
    view->state = PYXBUF__STATE_RELEASED;
    if (PYXBUF_LIKELY(view->path == PYXBUF_PATH_CLASSIC))
        PyBuffer_Release(&view->base); /* a tail call outside PYXBUF_DEBUG */
    else
        release_by_bridge(view);
#ifdef PYXBUF_DEBUG
    clear_released(view); /* a use after release finds NULLs */
#endif
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
    default: return "none";
    }
}
