/* A third-party C extension built against pyxbuf's wheel, the way an
 * extension author would: pyxbuf.h from pyxbuf.get_include(), the static
 * libpyxbuf.a from pyxbuf.get_library_dir() (setuptools) or from
 * find_package(pyxbuf CONFIG) (scikit-build-core). The build names the module
 * (CONSUMER_NAME). make test-wheel builds it both ways and runs
 * check_consumers.py against it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include <pyxbuf.h>

#ifndef CONSUMER_NAME
#error "define CONSUMER_NAME, the module's name"
#endif
#define CONCAT(a, b) a##b
#define INIT_NAME(name) CONCAT(PyInit_, name)
#define STRING(x) #x
#define NAME_STRING(x) STRING(x)

/* One item as a double: float32 or ml_dtypes bfloat16 (the high half of a
 * float32), the two types this consumer reads. */
static int read_item(const char *format, const unsigned char *p, double *out) {
    if (strcmp(format, "f") == 0 || strcmp(format, "<f") == 0) {
        float f;
        memcpy(&f, p, sizeof f);
        *out = f;
        return 0;
    }
    if (strcmp(format, "[ml_dtypes$bfloat16]") == 0) {
        uint16_t half;
        memcpy(&half, p, sizeof half);
        uint32_t bits = (uint32_t)half << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        *out = f;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "consumer: reads float32 and bfloat16, not format '%s'",
                 format);
    return -1;
}

/* describe(obj) -> {"sum", "format", "shape", "itemsize", "path"}: obj read
 * through pyxbuf_get as a C-contiguous host buffer. */
static PyObject *describe(PyObject *self, PyObject *obj) {
    (void)self;
    pyxbuf_view v;
    if (pyxbuf_get(obj, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    const char *format = v.base.format != NULL ? v.base.format : "B";
    double sum = 0;
    const unsigned char *p = v.base.buf;
    for (Py_ssize_t i = 0; i < v.base.len / v.base.itemsize; i++) {
        double x;
        if (read_item(format, p + i * v.base.itemsize, &x) < 0) {
            pyxbuf_release(&v);
            return NULL;
        }
        sum += x;
    }
    PyObject *shape = PyTuple_New(v.base.ndim);
    for (int i = 0; shape != NULL && i < v.base.ndim; i++)
        PyTuple_SET_ITEM(shape, i, PyLong_FromSsize_t(v.base.shape[i]));
    PyObject *out = shape == NULL ? NULL
                                  : Py_BuildValue("{sdsssNsnss}", "sum", sum, "format", format,
                                                  "shape", shape, "itemsize", v.base.itemsize,
                                                  "path", pyxbuf_path_name(v.path));
    pyxbuf_release(&v);
    return out;
}

/* abi_versions() -> (PYXBUF_ABI_VERSION compiled in, pyxbuf_abi_version() linked) */
static PyObject *abi_versions(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("(II)", (unsigned)PYXBUF_ABI_VERSION, (unsigned)pyxbuf_abi_version());
}

static PyMethodDef methods[] = {
    {"describe", describe, METH_O, "describe(obj) -> what pyxbuf_get found"},
    {"abi_versions", abi_versions, METH_NOARGS, "abi_versions() -> (header, library)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, NAME_STRING(CONSUMER_NAME), NULL,
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC INIT_NAME(CONSUMER_NAME)(void) {
    /* The header this module was compiled with must describe the library it
     * linked: refuse to import otherwise. */
    if (pyxbuf_abi_version() != PYXBUF_ABI_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "%s: compiled against pyxbuf ABI %u but linked with ABI %u; rebuild it "
                     "against the installed pyxbuf",
                     NAME_STRING(CONSUMER_NAME), (unsigned)PYXBUF_ABI_VERSION,
                     (unsigned)pyxbuf_abi_version());
        return NULL;
    }
    return PyModule_Create(&module);
}
