// cxx_module.cpp -- a CPython extension built on pyxbuf.hpp the way a plain
// setuptools C++ Extension builds one: default symbol visibility, inline
// functions not hidden. CMake builds it twice (_pyxbuf_cxx_a, and
// _pyxbuf_cxx_b with PYXBUF_HPP_CONCURRENT), each linking its own copy of
// libpyxbuf, and python-tests/test_cxx_modules.py loads both together: each
// module must keep its own spare view block (issue 38, item 4).
#include <Python.h>

#include <cstdint>

#include "pyxbuf.hpp"

#ifndef MODULE_NAME
#error "define MODULE_NAME"
#endif
#define STR2(x) #x
#define STR(x) STR2(x)
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

// The address of this module's spare view block slot.
static PyObject *spare_slot(PyObject *, PyObject *) {
    return PyLong_FromVoidPtr((void *)&pyxbuf::detail::spare_view_storage);
}

// The sum of a float32 array, through pyxbuf::view<const float>: a view made
// and released, so the module's spare block is taken and given back.
static PyObject *sum(PyObject *, PyObject *obj) {
    try {
        auto v = pyxbuf::view<const float>::get(obj);
        double total = 0;
        for (float x : v) total += x;
        return PyFloat_FromDouble(total);
    } catch (const pyxbuf::error &e) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_BufferError, e.what());
        return nullptr;
    }
}

// sum() without C++ exceptions: try_get leaves pyxbuf's Python exception
// set, and the caller gets it as raised (pyxbuf.ItemTypeError for items that
// are not float32).
static PyObject *sum_raw(PyObject *, PyObject *obj) {
    auto v = pyxbuf::view<const float>::try_get(obj);
    if (!v) return nullptr;
    double total = 0;
    for (float x : *v) total += x;
    return PyFloat_FromDouble(total);
}

// The class this module's pyxbuf.hpp raises for another item type.
static PyObject *item_type_error(PyObject *, PyObject *) {
    return Py_NewRef(pyxbuf::detail::item_type_error());
}

static PyMethodDef methods[] = {
    {"spare_slot", spare_slot, METH_NOARGS, "Address of this module's spare view slot."},
    {"sum", sum, METH_O, "Sum of a float32 array through pyxbuf::view<const float>."},
    {"sum_raw", sum_raw, METH_O, "sum() through try_get: pyxbuf's Python exception as raised."},
    {"item_type_error", item_type_error, METH_NOARGS, "The class of an item-type refusal."},
    {nullptr, nullptr, 0, nullptr},
};

static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, STR(MODULE_NAME), nullptr, -1, methods,
                                 nullptr, nullptr, nullptr, nullptr};

PyMODINIT_FUNC CAT(PyInit_, MODULE_NAME)(void) { return PyModule_Create(&module_def); }
