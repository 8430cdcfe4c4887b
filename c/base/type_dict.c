/* type_dict.c -- writing a type's dict, where pyxbuf keeps what it
 * declares for a type (supported flags, the DLPack C exchange table): every
 * copy of the library in the process reads it there. */

#include "base/base.h"

/* Write the type's dict directly: immutable and static types refuse setattr,
 * and the dict is what every copy of libpyxbuf reads. Steals `value`. */
int pyxbuf__type_dict_set(PyTypeObject *type, const char *name, PyObject *value) {
    if (value == NULL) return -1;
    PyObject *dict = PyType_GetDict(type);
    if (dict == NULL) {
        Py_DECREF(value);
        PyErr_Format(PyExc_TypeError, "pyxbuf: type '%.200s' has no dict (is it ready?)",
                     type->tp_name);
        return -1;
    }
    int rc = PyDict_SetItemString(dict, name, value);
    Py_DECREF(dict);
    Py_DECREF(value);
    if (rc == 0) PyType_Modified(type);
    return rc;
}
