/* python_fixture.h -- an embedded interpreter for C tests that need objects. */
#ifndef PYXBUF_PYTHON_FIXTURE_H
#define PYXBUF_PYTHON_FIXTURE_H

#include "pyxbuf.h"
#include "testing.h"

/* Evaluate a Python expression in a fresh namespace; new reference. */
static inline PyObject *py_eval(const char *expr) {
    PyObject *globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *r = PyRun_String(expr, Py_eval_input, globals, globals);
    if (r == NULL) PyErr_Print();
    Py_DECREF(globals);
    return r;
}

/* The message of the pending exception (cleared), or "" if none. */
static inline const char *take_error(PyObject *expected_type) {
    static char message[1024];
    message[0] = '\0';
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) return message;
    if (expected_type != NULL && !PyErr_GivenExceptionMatches(type, expected_type)) {
        fprintf(stderr, "unexpected exception type %s\n", ((PyTypeObject *)type)->tp_name);
        pyxbuf_test_failures++;
    }
    PyObject *s = value ? PyObject_Str(value) : NULL;
    if (s != NULL) snprintf(message, sizeof message, "%s", PyUnicode_AsUTF8(s));
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return message;
}

#define PYTHON_TEST_MAIN(...)                                                  \
    static const pyxbuf_test_case pyxbuf_test_cases_[] = {__VA_ARGS__};        \
    int main(int argc, char **argv) {                                          \
        Py_Initialize();                                                       \
        int rc = pyxbuf_test_run(pyxbuf_test_cases_,                           \
                                 sizeof pyxbuf_test_cases_ / sizeof *pyxbuf_test_cases_, \
                                 argc, argv);                                  \
        if (Py_FinalizeEx() < 0) rc = 1;                                       \
        return rc;                                                             \
    }

#endif
