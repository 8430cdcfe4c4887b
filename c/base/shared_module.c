/* shared_module.c -- the one place every copy of libpyxbuf in a process meets:
 * sys.modules[PYXBUF_SHARED_MODULE], whose attributes hold capsules of
 * process-wide tables (the borrow registry's "API", the transfer engine's
 * "ENGINE") and process-wide Python objects (the "ItemTypeError" class). The
 * first copy to ask for an attribute installs its own; every later copy
 * finds it. */

#include "base/base.h"

/* `value` at `key` of `dict` unless a value is there already: a new
 * reference to whichever is there now (setdefault, so two first callers at
 * once, in two threads or two copies, install one). */
static PyObject *set_default(PyObject *dict, const char *key, PyObject *value) {
    PyObject *name = PyUnicode_FromString(key), *found = NULL;
    if (name != NULL && PyDict_SetDefaultRef(dict, name, value, &found) < 0) found = NULL;
    Py_XDECREF(name);
    return found;
}

/* sys.modules[PYXBUF_SHARED_MODULE] (made if missing): a new reference, with
 * its dict (borrowed: the module keeps it) in *dict; NULL with an exception
 * set if it could not be made or something else stands there. */
static PyObject *shared_module(PyObject **dict) {
    PyObject *fresh = PyModule_New(PYXBUF_SHARED_MODULE);
    PyObject *module = fresh ? set_default(PyImport_GetModuleDict(), PYXBUF_SHARED_MODULE, fresh)
                             : NULL;
    Py_XDECREF(fresh);
    if (module == NULL) return NULL;
    *dict = PyModule_Check(module) ? PyModule_GetDict(module) : NULL; /* borrowed */
    if (*dict == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "pyxbuf: sys.modules['%s'] is a %.100s, not the module pyxbuf shares its "
                     "process-wide tables through; remove what replaced it",
                     PYXBUF_SHARED_MODULE, PYXBUF__TYPE_NAME(module));
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

PyObject *pyxbuf__shared_capsule(const char *attr, const char *capsule_name, void *own) {
    PyObject *dict = NULL;
    PyObject *module = shared_module(&dict);
    if (module == NULL) return NULL;
    PyObject *capsule = PyCapsule_New(own, capsule_name, NULL);
    PyObject *found = capsule ? set_default(dict, attr, capsule) : NULL;
    Py_XDECREF(capsule);
    Py_DECREF(module);
    return found;
}

PyObject *pyxbuf__shared_object(const char *attr, PyObject *(*make)(void)) {
    PyObject *dict = NULL;
    PyObject *module = shared_module(&dict);
    if (module == NULL) return NULL;
    PyObject *found = NULL;
    if (PyDict_GetItemStringRef(dict, attr, &found) == 0) { /* absent: make one */
        PyObject *made = make();
        found = made ? set_default(dict, attr, made) : NULL;
        Py_XDECREF(made);
    }
    Py_DECREF(module);
    return found;
}
