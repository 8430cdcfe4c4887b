/* compat.h -- every difference between the CPython versions and builds that
 * libpyxbuf supports (3.11 to 3.15, with the GIL and free-threaded), in one
 * place: each shim says which CPython change it covers. Other files never
 * test PY_VERSION_HEX or Py_GIL_DISABLED for an API's sake. */
#ifndef PYXBUF_BASE_COMPAT_H
#define PYXBUF_BASE_COMPAT_H

#include "pyxbuf.h" /* Python.h as pyxbuf.h includes it */

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
 * have it as _Py_IsFinalizing. */
#if PY_VERSION_HEX < 0x030D0000
#define Py_IsFinalizing() _Py_IsFinalizing()
#endif

/* PyErr_GetRaisedException / PyErr_SetRaisedException (3.12, gh-101578)
 * replace PyErr_Fetch / PyErr_Restore, deprecated since. On 3.11 they are
 * built from the old triple: the exception instance, normalized, with its
 * traceback attached (as 3.12 keeps it). SetRaisedException(NULL) clears. */
#if PY_VERSION_HEX < 0x030C0000
static inline PyObject *PyErr_GetRaisedException(void) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
    Py_DECREF(type);
    Py_XDECREF(tb);
    return value;
}

static inline void PyErr_SetRaisedException(PyObject *exc) {
    if (exc == NULL) {
        PyErr_Clear();
        return;
    }
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
}
#endif

/* PyObject_GetOptionalAttr (3.13, gh-106521) is 3.11 and 3.12's
 * _PyObject_LookupAttr under its public name: 1 and a new reference, 0 when
 * the attribute is absent (no AttributeError is built), -1 on error. */
#if PY_VERSION_HEX < 0x030D0000
#define PyObject_GetOptionalAttr(obj, name, result) _PyObject_LookupAttr((obj), (name), (result))
#endif

/* PyType_GetDict (3.12, gh-105227): a new reference to the type's dict,
 * which 3.12 no longer keeps in static builtin types' tp_dict. */
#if PY_VERSION_HEX < 0x030C0000
static inline PyObject *PyType_GetDict(PyTypeObject *type) { return Py_XNewRef(type->tp_dict); }
#endif

/* PyDict_SetDefaultRef (3.13, gh-112066): a strong reference to what the key
 * holds after the call (in *result); 1 when it was there, 0 when `value` was
 * inserted, -1 on error. Before 3.13, from the borrowed PyDict_SetDefault. */
#if PY_VERSION_HEX < 0x030D0000
static inline int PyDict_SetDefaultRef(PyObject *dict, PyObject *key, PyObject *value,
                                       PyObject **result) {
    PyObject *held = PyDict_SetDefault(dict, key, value);
    if (result != NULL) *result = Py_XNewRef(held);
    if (held == NULL) return -1;
    return held == value ? 0 : 1;
}
#endif

/* PyDict_GetItemStringRef (3.13, gh-106004): a strong reference in *result;
 * 1 when the key is there, 0 (and NULL) when it is not, -1 on error. Before
 * 3.13, from the borrowed PyDict_GetItemWithError (GIL builds only there). */
#if PY_VERSION_HEX < 0x030D0000
static inline int PyDict_GetItemStringRef(PyObject *dict, const char *key, PyObject **result) {
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
#endif

/* Behaviour, not API: from 3.13 PyObject_GetBuffer raises SystemError for a
 * request of PyBUF_READ or PyBUF_WRITE alone, before any producer runs, and
 * PyBuffer_FillInfo refuses them too (gh-114685); pyxbuf answers as the
 * interpreter it runs on (acquire/acquire.c). */
#define PYXBUF__REFUSES_READ_OR_WRITE_ALONE (PY_VERSION_HEX >= 0x030D0000)

/* Per-object critical sections: CPython 3.13 and later (a no-op there with
 * the GIL); before 3.13 only GIL builds exist. */
#if PY_VERSION_HEX < 0x030D0000
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* A type's version tag: CPython assigns it without a lock on free-threaded
 * builds (relaxed atomics there). */
static inline unsigned int pyxbuf__type_tag(PyTypeObject *type) {
    return PYXBUF__FT_LOAD_RELAXED(&type->tp_version_tag);
}

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
