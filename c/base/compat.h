/* compat.h -- every difference between the CPython versions and builds that
 * libpyxbuf supports (3.11 to 3.15, with the GIL and free-threaded), in one
 * place: each shim says which CPython change it covers. Other files never
 * test PY_VERSION_HEX or Py_GIL_DISABLED for an API's sake. */
#ifndef PYXBUF_BASE_COMPAT_H
#define PYXBUF_BASE_COMPAT_H

#include "pyxbuf.h" /* Python.h as pyxbuf.h includes it */

/* The limited C API (Py_LIMITED_API, CMake's PYXBUF_LIMITED_API: an abi3
 * build for CPython 3.11 and later). PYXBUF_LIMITED is the one switch the rest
 * of the library reads, through the shims below: a type's name, slots,
 * flags and attribute lookups, and the per-type caches' key (a version tag
 * the limited API does not show). Every difference is here or in
 * base/limited.c; the full-API build expands each shim to what it was. */
#ifdef Py_LIMITED_API
#define PYXBUF_LIMITED 1
#if Py_LIMITED_API + 0 < 0x030B0000
#error "pyxbuf's limited-API build needs Py_LIMITED_API 0x030B0000 (3.11) or later: Py_buffer joined the limited API in 3.11"
#endif
#ifdef Py_GIL_DISABLED
#error "pyxbuf: the limited API has no free-threaded build before CPython 3.15's abi3t; build without PYXBUF_LIMITED_API"
#endif
#if defined(PyBUF_DEVICE) && defined(PyBUF_EXTENDED_FLAGS)
#error "pyxbuf: CPython's native extended buffer protocol (a grown Py_buffer) is not in the limited API; build pyxbuf without PYXBUF_LIMITED_API (abi3)"
#endif
#else
#define PYXBUF_LIMITED 0
#endif

/* Shared state on free-threaded builds (Py_GIL_DISABLED). With the GIL one
 * thread runs the library at a time, switching only where it calls Python or
 * releases the GIL, so plain loads and stores serve and the hot path stays
 * free of atomics. Without the GIL every word another thread may write at
 * the same time is read and written through these: acquire/release where the
 * word publishes other data, relaxed where it stands alone. */
#ifdef Py_GIL_DISABLED
#define PYXBUF__FT_LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define PYXBUF__FT_LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define PYXBUF__FT_STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define PYXBUF__FT_STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#else
#define PYXBUF__FT_LOAD_ACQUIRE(p) (*(p))
#define PYXBUF__FT_LOAD_RELAXED(p) (*(p))
#define PYXBUF__FT_STORE_RELEASE(p, v) ((void)(*(p) = (v)))
#define PYXBUF__FT_STORE_RELAXED(p, v) ((void)(*(p) = (v)))
#endif

/* A lock that exists on free-threaded builds only, for state that the GIL
 * guards otherwise. Never held across a call that may run Python. */
#ifdef Py_GIL_DISABLED
#define PYXBUF__FT_MUTEX(name) static PyMutex name
#define PYXBUF__FT_LOCK(m) PyMutex_Lock(&(m))
#define PYXBUF__FT_UNLOCK(m) PyMutex_Unlock(&(m))
#else
#define PYXBUF__FT_MUTEX(name) typedef int pyxbuf__unused_##name
#define PYXBUF__FT_LOCK(m) ((void)0)
#define PYXBUF__FT_UNLOCK(m) ((void)0)
#endif

/* Py_IsFinalizing is public since CPython 3.13 (gh-108014); 3.11 and 3.12
 * have it as _Py_IsFinalizing. Neither it nor PyGILState_Check is in the
 * limited API: there, base/limited.c finds the running interpreter's own
 * (exported by every CPython 3.11 to 3.15) when first asked. */
#if PYXBUF_LIMITED
int pyxbuf__limited_is_finalizing(void);
int pyxbuf__limited_gil_check(void);
#define Py_IsFinalizing() pyxbuf__limited_is_finalizing()
#define PyGILState_Check() pyxbuf__limited_gil_check()
#elif PY_VERSION_HEX < 0x030D0000
#define Py_IsFinalizing() _Py_IsFinalizing()
#endif

/* (Each shim below is a pyxbuf__ function behind a macro of the API's name:
 * newer headers may declare the function even where the limited API version
 * asked for predates it, which a static function of the same name would
 * contradict.)
 *
 * PyErr_GetRaisedException / PyErr_SetRaisedException (3.12, gh-101578)
 * replace PyErr_Fetch / PyErr_Restore, deprecated since. On 3.11 they are
 * built from the old triple: the exception instance, normalized, with its
 * traceback attached (as 3.12 keeps it). SetRaisedException(NULL) clears. */
#if PY_VERSION_HEX < 0x030C0000 || (PYXBUF_LIMITED && Py_LIMITED_API + 0 < 0x030C0000)
static inline PyObject *pyxbuf__get_raised_exception(void) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
    Py_DECREF(type);
    Py_XDECREF(tb);
    return value;
}
#define PyErr_GetRaisedException() pyxbuf__get_raised_exception()

static inline void pyxbuf__set_raised_exception(PyObject *exc) {
    if (exc == NULL) {
        PyErr_Clear();
        return;
    }
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
}
#define PyErr_SetRaisedException(exc) pyxbuf__set_raised_exception((exc))
#endif

/* PyObject_GetOptionalAttr (3.13, gh-106521) is 3.11 and 3.12's
 * _PyObject_LookupAttr under its public name: 1 and a new reference, 0 when
 * the attribute is absent (no AttributeError is built), -1 on error. */
#if PYXBUF_LIMITED && Py_LIMITED_API + 0 < 0x030D0000
/* (The limited API's, from getattr: an AttributeError is built and cleared.) */
static inline int pyxbuf__get_optional_attr(PyObject *obj, PyObject *name, PyObject **result) {
    *result = PyObject_GetAttr(obj, name);
    if (*result != NULL) return 1;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
}
#define PyObject_GetOptionalAttr(obj, name, result) \
    pyxbuf__get_optional_attr((obj), (name), (result))
#elif PY_VERSION_HEX < 0x030D0000
#define PyObject_GetOptionalAttr(obj, name, result) _PyObject_LookupAttr((obj), (name), (result))
#endif

/* PyType_GetDict (3.12, gh-105227): a new reference to the type's dict,
 * which 3.12 no longer keeps in static builtin types' tp_dict. */
#if PY_VERSION_HEX < 0x030C0000 && !PYXBUF_LIMITED
static inline PyObject *pyxbuf__type_get_dict(PyTypeObject *type) {
    return Py_XNewRef(type->tp_dict);
}
#define PyType_GetDict(type) pyxbuf__type_get_dict((type))
#endif

/* PyDict_SetDefaultRef (3.13, gh-112066): a strong reference to what the key
 * holds after the call (in *result); 1 when it was there, 0 when `value` was
 * inserted, -1 on error. Before 3.13, from the borrowed PyDict_SetDefault. */
#if PYXBUF_LIMITED && Py_LIMITED_API + 0 < 0x030D0000
/* (The limited API has no PyDict_SetDefault: a lookup, then an insert; with
 * the GIL, and no Python code between them but the key's hash and eq.) */
static inline int pyxbuf__dict_set_default_ref(PyObject *dict, PyObject *key, PyObject *value,
                                                PyObject **result) {
    PyObject *held = PyDict_GetItemWithError(dict, key);
    if (held == NULL && PyErr_Occurred()) {
        if (result != NULL) *result = NULL;
        return -1;
    }
    if (held != NULL) {
        if (result != NULL) *result = Py_NewRef(held);
        return 1;
    }
    if (PyDict_SetItem(dict, key, value) < 0) {
        if (result != NULL) *result = NULL;
        return -1;
    }
    if (result != NULL) *result = Py_NewRef(value);
    return 0;
}
#define PyDict_SetDefaultRef(dict, key, value, result) \
    pyxbuf__dict_set_default_ref((dict), (key), (value), (result))
#elif PY_VERSION_HEX < 0x030D0000
static inline int pyxbuf__dict_set_default_ref(PyObject *dict, PyObject *key, PyObject *value,
                                                PyObject **result) {
    PyObject *held = PyDict_SetDefault(dict, key, value);
    if (result != NULL) *result = Py_XNewRef(held);
    if (held == NULL) return -1;
    return held == value ? 0 : 1;
}
#define PyDict_SetDefaultRef(dict, key, value, result) \
    pyxbuf__dict_set_default_ref((dict), (key), (value), (result))
#endif

/* PyDict_GetItemStringRef (3.13, gh-106004): a strong reference in *result;
 * 1 when the key is there, 0 (and NULL) when it is not, -1 on error. Before
 * 3.13, from the borrowed PyDict_GetItemWithError (GIL builds only there). */
#if PY_VERSION_HEX < 0x030D0000 || (PYXBUF_LIMITED && Py_LIMITED_API + 0 < 0x030D0000)
static inline int pyxbuf__dict_get_item_string_ref(PyObject *dict, const char *key,
                                                   PyObject **result) {
    PyObject *name = PyUnicode_FromString(key);
    if (name == NULL) {
        *result = NULL;
        return -1;
    }
    PyObject *held = PyDict_GetItemWithError(dict, name);
    Py_DECREF(name);
    *result = Py_XNewRef(held);
    if (held != NULL) return 1;
    return PyErr_Occurred() ? -1 : 0;
}
#define PyDict_GetItemStringRef(dict, key, result) \
    pyxbuf__dict_get_item_string_ref((dict), (key), (result))
#endif

/* Behaviour, not API: from 3.13 PyObject_GetBuffer raises SystemError for a
 * request of PyBUF_READ or PyBUF_WRITE alone, before any producer runs, and
 * PyBuffer_FillInfo refuses them too (gh-114685); pyxbuf answers as the
 * interpreter it runs on (acquire/acquire.c). */
#define PYXBUF__REFUSES_READ_OR_WRITE_ALONE (PY_VERSION_HEX >= 0x030D0000)

/* Per-object critical sections: CPython 3.13 and later (a no-op there with
 * the GIL); before 3.13 only GIL builds exist, as in the limited API, whose
 * headers (3.13, 3.14) may not define them. */
#if PY_VERSION_HEX < 0x030D0000 || (PYXBUF_LIMITED && !defined(Py_BEGIN_CRITICAL_SECTION))
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* A type's version tag: CPython assigns it without a lock on free-threaded
 * builds (relaxed atomics there).
 *
 * The limited API shows no tag. There the per-type caches key a type by its
 * address, and only a type with Py_TPFLAGS_IMMUTABLETYPE (every static type:
 * bytes, memoryview, numpy.ndarray; heap types that ask for it), whose dict
 * no setattr can change, gets a key; other types (Python classes) are never
 * cached (pyxbuf__type_tag_to_store is 0 for them). A cache entry holds a strong
 * reference to its type (base/type_cache.h), so no other type can take the
 * address while the entry answers for it. The one writer of an immutable
 * type's dict is pyxbuf__type_dict_set: each write moves a generation mixed
 * into every key, so that entries made before it stop answering. (Another
 * copy of libpyxbuf writing the dict is not seen by this one's generation.) */
#if PYXBUF_LIMITED
extern unsigned int pyxbuf__limited_generation;
static inline unsigned int pyxbuf__type_tag(PyTypeObject *type) {
    uintptr_t a = (uintptr_t)type;
    unsigned int tag = (unsigned int)((a >> 4) ^ (a >> 12) ^ (a >> 32)) +
                       pyxbuf__limited_generation * 0x9E3779B1u;
    return tag != 0 ? tag : 1;
}
/* The key to store under: 0 (not cached) but for immutable types. A lookup
 * needs no such test (pyxbuf__type_tag alone): only an immutable type is
 * ever stored, and while its entry holds it no other type has its address. */
static inline unsigned int pyxbuf__type_tag_to_store(PyTypeObject *type) {
    return PyType_GetFlags(type) & Py_TPFLAGS_IMMUTABLETYPE ? pyxbuf__type_tag(type) : 0;
}
#else
static inline unsigned int pyxbuf__type_tag(PyTypeObject *type) {
    return PYXBUF__FT_LOAD_RELAXED(&type->tp_version_tag);
}
#define pyxbuf__type_tag_to_store(type) pyxbuf__type_tag(type)
#endif

/* A type's fields, through the limited API's accessors where the struct is
 * opaque (PyType_GetSlot reads static types too from 3.10); in the full API,
 * the fields themselves.
 * PYXBUF__TP_NAME(type): the name for messages, tp_name's text ("module.qualname",
 *   the module left out for builtins), valid until a few more names are made
 *   on the same thread (base/limited.c keeps a small ring of them);
 * PYXBUF__TYPE_NAME(obj): the same for the object's type;
 * PYXBUF__HAS_GETBUFFER(type): whether it has a bf_getbuffer slot;
 * PYXBUF__GETBUFFER(type): that slot, where the caller knows there is one;
 * PYXBUF__HAS_RELEASEBUFFER(type): whether it has a bf_releasebuffer slot;
 * PYXBUF__TP_GETATTRO(type), PYXBUF__TP_FREE(type): those slots. */
#if PYXBUF_LIMITED
typedef int (*pyxbuf__getbufferproc)(PyObject *, Py_buffer *, int);
const char *pyxbuf__limited_type_name(PyTypeObject *type);
#define PYXBUF__TP_NAME(type) pyxbuf__limited_type_name(type)
#define PYXBUF__HAS_GETBUFFER(type) (PyType_GetSlot((type), Py_bf_getbuffer) != NULL)
#define PYXBUF__GETBUFFER(type) ((pyxbuf__getbufferproc)PyType_GetSlot((type), Py_bf_getbuffer))
#define PYXBUF__HAS_RELEASEBUFFER(type) (PyType_GetSlot((type), Py_bf_releasebuffer) != NULL)
#define PYXBUF__TP_GETATTRO(type) ((getattrofunc)PyType_GetSlot((type), Py_tp_getattro))
#define PYXBUF__TP_FREE(type) ((freefunc)PyType_GetSlot((type), Py_tp_free))
#else
#define PYXBUF__TP_NAME(type) ((type)->tp_name)
#define PYXBUF__HAS_GETBUFFER(type) \
    ((type)->tp_as_buffer != NULL && (type)->tp_as_buffer->bf_getbuffer != NULL)
#define PYXBUF__GETBUFFER(type) ((type)->tp_as_buffer->bf_getbuffer)
#define PYXBUF__HAS_RELEASEBUFFER(type) \
    ((type)->tp_as_buffer != NULL && (type)->tp_as_buffer->bf_releasebuffer != NULL)
#define PYXBUF__TP_GETATTRO(type) ((type)->tp_getattro)
#define PYXBUF__TP_FREE(type) ((type)->tp_free)
#endif
#define PYXBUF__TYPE_NAME(obj) PYXBUF__TP_NAME(Py_TYPE(obj))

/* The bf_getbuffer slot of a type the acquisition cache holds as a classic
 * producer (acquire.h's CACHE_FAST): under the limited API PyType_GetSlot is
 * a call on every acquisition, so the entry keeps the slot in its data word
 * (pyxbuf__getbuffer_as_data when stored): the entry holds its type, an
 * immutable one, whose slots no code can change. In the full API the field
 * is read. The union carries the function pointer's bits through the data
 * pointer without a conversion ISO C leaves undefined. */
#if PYXBUF_LIMITED
typedef union pyxbuf__getbuffer_word {
    pyxbuf__getbufferproc fn;
    const void *data;
} pyxbuf__getbuffer_word;
_Static_assert(sizeof(pyxbuf__getbufferproc) == sizeof(const void *),
               "a function pointer fits a data pointer");
static inline const void *pyxbuf__getbuffer_as_data(PyTypeObject *type) {
    pyxbuf__getbuffer_word w = {.fn = PYXBUF__GETBUFFER(type)};
    return w.data;
}
static inline pyxbuf__getbufferproc pyxbuf__getbuffer_of_data(const void *data) {
    pyxbuf__getbuffer_word w = {.data = data};
    return w.fn;
}
#define PYXBUF__CACHED_GETBUFFER(type, data) pyxbuf__getbuffer_of_data(data)
#else
#define pyxbuf__getbuffer_as_data(type) ((const void *)NULL)
#define PYXBUF__CACHED_GETBUFFER(type, data) PYXBUF__GETBUFFER(type)
#endif

/* _PyType_Lookup (the MRO only, raising nothing): whether `type` has
 * attribute `name` (pyxbuf__type_has), and its value as a new reference or
 * NULL (pyxbuf__type_lookup). The limited API has no MRO lookup: there the
 * type's own getattr answers (the MRO, then the metaclass; a descriptor
 * found answers as on the class), and an error it raises is cleared. */
#if PYXBUF_LIMITED
PyObject *pyxbuf__type_lookup(PyTypeObject *type, PyObject *name);
static inline int pyxbuf__type_has(PyTypeObject *type, PyObject *name) {
    PyObject *value = pyxbuf__type_lookup(type, name);
    Py_XDECREF(value);
    return value != NULL;
}
#else
static inline PyObject *pyxbuf__type_lookup(PyTypeObject *type, PyObject *name) {
    return Py_XNewRef(_PyType_Lookup(type, name));
}
static inline int pyxbuf__type_has(PyTypeObject *type, PyObject *name) {
    return _PyType_Lookup(type, name) != NULL;
}
#endif

/* Macros and functions of the full API that the limited one has as
 * functions, or not at all before the version pyxbuf's abi3 build targets. */
#if PYXBUF_LIMITED
#define PyTuple_GET_SIZE(t) PyTuple_Size(t)
#define PyTuple_GET_ITEM(t, i) PyTuple_GetItem((t), (i))
#define PyTuple_SET_ITEM(t, i, v) ((void)PyTuple_SetItem((t), (i), (v)))
#define PyList_GET_SIZE(l) PyList_Size(l)
#define PyList_GET_ITEM(l, i) PyList_GetItem((l), (i))
#define PyUnicode_GET_LENGTH(s) PyUnicode_GetLength(s)
#define PyUnicode_AsUTF8(s) PyUnicode_AsUTF8AndSize((s), NULL)
#define PyBytes_AS_STRING(b) PyBytes_AsString(b)
#define PyBytes_GET_SIZE(b) PyBytes_Size(b)
#define PyObject_CallMethodNoArgs(obj, name) PyObject_CallMethodObjArgs((obj), (name), NULL)
/* (In 3.11's limited headers; from 3.12 in the full API's alone.) */
#ifndef PySequence_Fast_GET_SIZE
#define PySequence_Fast_GET_SIZE(o) (PyList_Check(o) ? PyList_GET_SIZE(o) : PyTuple_GET_SIZE(o))
#define PySequence_Fast_GET_ITEM(o, i) \
    (PyList_Check(o) ? PyList_GET_ITEM((o), (i)) : PyTuple_GET_ITEM((o), (i)))
#endif
#if Py_LIMITED_API + 0 < 0x030D0000
/* (Memory pyxbuf allocates and frees itself, at any time, GIL or not.) */
#include <stdlib.h>
#define PyMem_RawCalloc(n, size) calloc((n), (size))
#define PyMem_RawFree(p) free(p)
#endif
#if Py_LIMITED_API + 0 < 0x030C0000
/* PyObject_VectorcallMethod (limited from 3.12): args[0] the object,
 * nargsf's count, then the values of kwnames (a tuple, or NULL). */
#define PY_VECTORCALL_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))
PyObject *pyxbuf__limited_vectorcall_method(PyObject *name, PyObject *const *args, size_t nargsf,
                                            PyObject *kwnames);
#define PyObject_VectorcallMethod(name, args, nargsf, kwnames) \
    pyxbuf__limited_vectorcall_method((name), (args), (nargsf), (kwnames))
#endif
#endif

/* Publish `made` (a new reference) in the process-lifetime *slot unless
 * another thread published one while `made` was being built: building
 * allocates, which may run finalizers that switch threads (with the GIL), and
 * without it two threads really build at once. The first object published
 * stays; returns it (borrowed). Read the slot with PYXBUF__FT_LOAD_ACQUIRE. */
static inline PyObject *pyxbuf__publish_once(PyObject **slot, PyObject *made) {
#ifdef Py_GIL_DISABLED
    PyObject *first = NULL;
    if (__atomic_compare_exchange_n(slot, &first, made, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return made;
    Py_DECREF(made);
    return first;
#else
    if (*slot == NULL)
        *slot = made;
    else
        Py_DECREF(made);
    return *slot;
#endif
}

/* The same for a pointer to memory the caller built: returns the pointer
 * published first; when that is not `made`, the caller frees `made`. */
static inline void *pyxbuf__publish_ptr_once(void **slot, void *made) {
#ifdef Py_GIL_DISABLED
    void *first = NULL;
    if (__atomic_compare_exchange_n(slot, &first, made, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return made;
    return first;
#else
    if (*slot == NULL) *slot = made;
    return *slot;
#endif
}

/* The extended buffer protocol in CPython itself (cpython/'s patch series,
 * PYXBUF_NATIVE_PROTOCOL in pyxbuf.h): its flags are pyxbuf's, and its grown
 * Py_buffer ends exactly where pyxbuf_view's extended fields are, so one
 * view layout serves both. On other interpreters pyxbuf is the backport and
 * keeps the declarations in type dicts. */
#if PYXBUF_NATIVE_PROTOCOL
_Static_assert(PYXBUF_DEVICE == PyBUF_DEVICE, "pyxbuf's device flag is CPython's");
_Static_assert(PYXBUF_REQUIRED_FLAGS == PyBUF_REQUIRED_FLAGS, "the same required flags");
_Static_assert(PYXBUF_SUPPORTS_SIMPLE_ONLY == PyBUF_SUPPORTS_SIMPLE_ONLY, "-1 is SIMPLE only");
_Static_assert(offsetof(pyxbuf_view, flags) == offsetof(Py_buffer, flags) &&
                   offsetof(pyxbuf_view, ext_flags) == offsetof(Py_buffer, ext_flags) &&
                   offsetof(pyxbuf_view, device) == offsetof(Py_buffer, device) &&
                   offsetof(pyxbuf_view, device_info) == offsetof(Py_buffer, device_info) &&
                   offsetof(pyxbuf_view, path) == sizeof(Py_buffer),
               "pyxbuf_view's extended fields are the native Py_buffer's");
#endif

/* A type's native declaration (0 where the interpreter keeps none), and
 * setting it (nothing to do there). */
static inline int pyxbuf__native_supported_flags(PyTypeObject *type) {
#if PYXBUF_NATIVE_PROTOCOL
    return PyType_GetBufferSupportedFlags(type);
#else
    (void)type;
    return PYXBUF_SUPPORTS_CLASSIC;
#endif
}

static inline int pyxbuf__set_native_supported_flags(PyTypeObject *type, int32_t flags) {
#if PYXBUF_NATIVE_PROTOCOL
    return PyType_SetBufferSupportedFlags(type, (int)flags);
#else
    (void)type;
    (void)flags;
    return 0;
#endif
}

#endif
