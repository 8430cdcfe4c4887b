/* type_dict.c -- writing a type's dict, where pyxbuf keeps what it
 * declares for a type (supported flags, the DLPack C exchange table): every
 * copy of the library in the process reads it there. */

#include "base/base.h"

/* Write the type's dict directly: immutable and static types refuse setattr,
 * and the dict is what every copy of libpyxbuf reads. Steals `value`. */
int pyxbuf__type_dict_set(PyTypeObject *type, const char *name, PyObject *value) {
    if (value == NULL) return -1;
#if PYXBUF_LIMITED
    /* The limited API shows no type's dict (type.__dict__ is a read-only
     * proxy). The generic setattr writes the dict the type's type points it
     * to (tp_dict) without type's check for immutable types. Entries of the
     * per-type caches made before stop answering (pyxbuf__type_tag). */
    if (!PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE)) {
        /* A builtin static type (bytes, memoryview) keeps its dict in the
         * interpreter from 3.12, out of the generic setattr's reach. */
        PyObject *module = PyObject_GetAttrString((PyObject *)type, "__module__");
        int builtin = module != NULL && PyUnicode_Check(module) &&
                      PyUnicode_CompareWithASCIIString(module, "builtins") == 0;
        if (module == NULL) PyErr_Clear(); /* no module: not a builtin */
        Py_XDECREF(module);
        if (builtin) {
            Py_DECREF(value);
            PyErr_Format(PyExc_TypeError,
                         "pyxbuf: setting %s on the builtin type '%.200s' needs CPython's full "
                         "C API (the interpreter keeps a builtin type's dict), which this "
                         "limited-API (abi3) build of pyxbuf does not use; build pyxbuf "
                         "without abi3 (CMake PYXBUF_LIMITED_API=OFF, or without PyO3's "
                         "abi3 feature) to declare it",
                         name, PYXBUF__TP_NAME(type));
            return -1;
        }
    }
    PyObject *key = PyUnicode_InternFromString(name);
    int rc = key != NULL ? PyObject_GenericSetAttr((PyObject *)type, key, value) : -1;
    Py_XDECREF(key);
    Py_DECREF(value);
    if (rc == 0) {
        PyType_Modified(type);
        pyxbuf__limited_generation++;
    }
    return rc;
#else
    PyObject *dict = PyType_GetDict(type);
    if (dict == NULL) {
        Py_DECREF(value);
        PyErr_Format(PyExc_TypeError, "pyxbuf: type '%.200s' has no dict (is it ready?)",
                     PYXBUF__TP_NAME(type));
        return -1;
    }
    int rc = PyDict_SetItemString(dict, name, value);
    Py_DECREF(dict);
    Py_DECREF(value);
    if (rc == 0) PyType_Modified(type);
    return rc;
#endif
}
