/* supported.c -- the proposal's supported flags: what a type advertises
 * (__pyxbuf_supported_flags__, else the interpreter's own declaration where
 * it has the extended protocol; 0 and -1 expanded), the per-type cache
 * pyxbuf_get reads without a lock (acquire/acquire.h) with the fast routes it
 * records, pyxbuf_type_set_supported_flags and pyxbuf_check_supports. */

#include "acquire/acquire.h"

#include <stdio.h>

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

pyxbuf__type_cache_entry pyxbuf__supported_cache[SUPPORTED_CACHE_SIZE];

static PyObject *supported_attr_name(void) {
    static PyObject *name = NULL;
    return pyxbuf__interned(&name, PYXBUF_SUPPORTED_FLAGS_ATTR);
}

/* The class attribute first: pyxbuf_type_set_supported_flags writes it
 * beside the native declaration, and the most derived class that sets it
 * (a Python subclass narrowing its base) wins. On an interpreter with the
 * extended protocol the attribute's value becomes the type's native
 * declaration too, so that CPython's own PyObject_GetBuffer passes the
 * producer what pyxbuf would (a class statement cannot set it otherwise).
 * Without the attribute, the declaration the interpreter keeps (a type slot,
 * or PyType_SetBufferSupportedFlags from a producer that knows nothing of
 * pyxbuf); else 0. */
static int lookup_supported(PyTypeObject *type, int32_t *mask) {
    PyObject *name = supported_attr_name();
    if (name == NULL) return -1;
    /* _PyType_Lookup searches the MRO only (not the metaclass), raises
     * nothing and gives the type a version tag we can cache under (the
     * limited API's shim: base/compat.h). */
    PyObject *value = pyxbuf__type_lookup(type, name);
    if (value == NULL) {
        *mask = expand_supported(pyxbuf__native_supported_flags(type));
        return 0;
    }
    long raw = PyLong_Check(value) ? PyLong_AsLong(value) : 0;
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError,
                     "pyxbuf: %s of type '%.200s' must be an int, found '%.200s'; set it to 0, "
                     "-1 or a mask of request flags",
                     PYXBUF_SUPPORTED_FLAGS_ATTR, PYXBUF__TP_NAME(type), PYXBUF__TYPE_NAME(value));
        Py_DECREF(value);
        return -1;
    }
    Py_DECREF(value); /* (an int: only its value is kept) */
    if (raw == -1 && PyErr_Occurred()) return -1;
    if (check_supported_value(PYXBUF__TP_NAME(type), raw) < 0) return -1;
    if (raw != pyxbuf__native_supported_flags(type) &&
        pyxbuf__set_native_supported_flags(type, (int32_t)raw) < 0)
        return -1;
    *mask = expand_supported(raw);
    return 0;
}

/* The route bit for a type whose supported flags are `supported`, or 0, and
 * what the route needs in *data. */
static int32_t route_of(PyTypeObject *type, int32_t supported, const void **data) {
    *data = NULL;
    if (supported != PYXBUF_CLASSIC_FLAGS) return 0;
    if (PYXBUF__HAS_GETBUFFER(type)) {
        if (pyxbuf__numpy_array_type(type)) return CACHE_NUMPY;
        *data = pyxbuf__getbuffer_as_data(type);
        return CACHE_FAST;
    }
    *data = pyxbuf__dlpack_c_table_of(type);
    return *data != NULL ? CACHE_DLPACK_C : 0;
}

int pyxbuf_type_supported_flags(PyTypeObject *type, int32_t *supported) {
    if (cached_supported(type, supported)) return 0;
    if (lookup_supported(type, supported) < 0) return -1;
    unsigned int tag = pyxbuf__type_tag_to_store(type);
    if (tag != 0) {
        const void *data;
        int32_t route = route_of(type, *supported, &data);
        pyxbuf__type_cache_put(cache_entry(tag), type, cache_key(tag, *supported | route), data);
    }
    return 0;
}

int pyxbuf_type_set_supported_flags(PyTypeObject *type, int32_t flags) {
    if (type == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_type_set_supported_flags: type is NULL");
        return -1;
    }
    if (check_supported_value(PYXBUF__TP_NAME(type), flags) < 0) return -1;
    /* The native declaration, where the interpreter has one (its
     * PyObject_GetBuffer and PyObject_CheckBufferSupports read it), and the
     * attribute, which every copy of pyxbuf reads (the backport's only
     * declaration). */
    if (pyxbuf__set_native_supported_flags(type, flags) < 0) return -1;
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
    if (pyxbuf__type_has(Py_TYPE(obj), name)) return 1;
    if (PYXBUF__TP_GETATTRO(Py_TYPE(obj)) != PyObject_GenericGetAttr) return 0;
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

#if PYXBUF__REFUSES_READ_OR_WRITE_ALONE
int pyxbuf__refuse_read_write_alone(int32_t flags) {
    PyErr_Format(PyExc_SystemError,
                 "pyxbuf_get: the request 0x%x is %s alone, a PyMemoryView_FromMemory flag "
                 "rather than a buffer request; Python 3.13+ refuses it in PyObject_GetBuffer "
                 "and so does pyxbuf; ask for PyBUF_SIMPLE (0) or the PyBUF_* flags you need",
                 (unsigned)flags,
                 ROUTE_READ_ALONE(flags) ? "PyBUF_READ" : "PyBUF_WRITE");
    return -1;
}
#endif

/* Whether pyxbuf_get would find a protocol to try on `obj`: a buffer slot,
 * DLPack or the CUDA Array Interface. The __array_interface__ bridge reads
 * only NumPy arrays of user dtypes, which have a buffer slot already. */
static int speaks_a_protocol(PyObject *obj) {
    if (PYXBUF__HAS_GETBUFFER(Py_TYPE(obj))) return 1;
    return speaks_a_device_protocol(obj);
}

/* Whether `type` declares its supported flags (the attribute, or the
 * interpreter's own declaration) rather than being a classic producer that
 * says nothing. */
static int declares_supported(PyTypeObject *type) {
    PyObject *name = supported_attr_name();
    if (name == NULL) return -1;
    if (pyxbuf__type_has(type, name)) return 1;
    return pyxbuf__native_supported_flags(type) != PYXBUF_SUPPORTS_CLASSIC;
}

/* The proposal's query: does `obj` advertise every bit of `flags`? A type
 * that declares its flags is answered from its declaration alone (the
 * proposal: whether the type "advertises support for all flags"); for one
 * that declares nothing, what pyxbuf answers for it (borrows from its
 * registry; device memory through a bridge that can carry it). */
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
    int declared = speaks_extended(advertised) ? 1 : declares_supported(Py_TYPE(obj));
    if (declared < 0) return -1;
    if (!declared) {
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

