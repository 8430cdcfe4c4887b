/* testext_pep.c -- the differential test of pyxbuf against the extended buffer
 * protocol in CPython itself (cpython/'s patch series;
 * python-tests/test_pep_differential.py). One producer type, made with any
 * declaration and answering each request as its mode says (correctly or
 * not), and the same request through each implementation:
 *   pep_pyxbuf_get / check_supports (pyxbuf, on every interpreter);
 *   pep_native_get / pep_native_check_supports (CPython's PyObject_GetBuffer
 *   and PyObject_CheckBufferSupports, on an interpreter that has them).
 * The producer declares its flags with pyxbuf_type_set_supported_flags, which
 * on the patched interpreter is the native declaration. Its memory is host
 * memory even when it calls it a device's, so a wrong answer reads nothing
 * dangerous. */
#include "pyxbuf.h"

#include <string.h>

int pyxbuf_testext_add_pep(PyObject *module);

#define PEP_DEVICE "pyxbuf_testext.pep_device"
/* The extended range: a request with any of these bits has the extended
 * fields (bits below 0x400 are classic, or no flag at all). */
#define EXTENDED_RANGE (~0x3FF)
static int pep_device_info = 7;

/* 256 bytes, the longest valid device identifier; 257 bytes, ASCII and with
 * a last character of two bytes that starts at byte 255. */
static char long_id_256[257];
static char long_id_257[258];
static char long_id_257_utf8[258];

typedef struct {
    PyObject_HEAD
    char data[16];
    int mode;
    Py_ssize_t exports;
} PepProducer;

static const char *const pep_modes[] = {
    "host",                /* classic fill; extended fields untouched */
    "device",              /* device memory: refuses a request without PYXBUF_DEVICE */
    "cpu_flagged",         /* PYXBUF_DEVICE answered with device NULL (CPU memory) */
    "device_without_flag", /* misfill: device set, PYXBUF_DEVICE not in flags */
    "info_without_flag",   /* misfill: device_info set, PYXBUF_DEVICE not in flags */
    "unrequested_flag",    /* misfill: a bit in flags that nobody asked for */
    "device_cpu",          /* misfill: the reserved id "cpu" */
    "device_empty",        /* misfill: "" */
    "device_bad_utf8",     /* misfill: not UTF-8 */
    "device_256",          /* a 256-byte identifier: valid */
    "device_257",          /* a 257-byte identifier: too long */
    "device_257_utf8",     /* 257 bytes, the last character two bytes long */
    "ext_flags",           /* ext_flags 0x100, a bit pyxbuf's grants leave free */
    NULL,
};

enum {
    M_HOST, M_DEVICE, M_CPU_FLAGGED, M_DEVICE_WITHOUT_FLAG, M_INFO_WITHOUT_FLAG,
    M_UNREQUESTED_FLAG, M_DEVICE_CPU, M_DEVICE_EMPTY, M_DEVICE_BAD_UTF8, M_DEVICE_256,
    M_DEVICE_257, M_DEVICE_257_UTF8, M_EXT_FLAGS
};

static PyObject *pep_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)kwargs;
    const char *mode = "host";
    if (!PyArg_ParseTuple(args, "|s", &mode)) return NULL;
    int m = -1;
    for (int i = 0; pep_modes[i] != NULL; i++)
        if (strcmp(pep_modes[i], mode) == 0) m = i;
    if (m < 0) {
        PyErr_Format(PyExc_ValueError, "unknown producer mode '%s'", mode);
        return NULL;
    }
    PepProducer *self = (PepProducer *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    for (int i = 0; i < 16; i++) self->data[i] = (char)i;
    self->mode = m;
    return (PyObject *)self;
}

static void pep_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static const char *device_id_of(int mode) {
    switch (mode) {
    case M_DEVICE_CPU: return "cpu";
    case M_DEVICE_EMPTY: return "";
    case M_DEVICE_BAD_UTF8: return "bad\xff\xfe";
    case M_DEVICE_256: return long_id_256;
    case M_DEVICE_257: return long_id_257;
    case M_DEVICE_257_UTF8: return long_id_257_utf8;
    default: return PEP_DEVICE;
    }
}

static int pep_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    PepProducer *p = (PepProducer *)self;
    if (p->mode == M_DEVICE && !(flags & PYXBUF_DEVICE)) {
        PyErr_SetString(PyExc_BufferError, "pep producer: device memory needs PYXBUF_DEVICE");
        return -1;
    }
    if (PyBuffer_FillInfo(view, self, p->data, 16, 0, flags) < 0) return -1;
    p->exports++;
    /* The extended fields exist only when an extended bit was passed. */
    if (!(flags & EXTENDED_RANGE) || p->mode == M_HOST) return 0;
    pyxbuf_view *x = (pyxbuf_view *)view;
    switch (p->mode) {
    case M_DEVICE: case M_DEVICE_CPU: case M_DEVICE_EMPTY: case M_DEVICE_BAD_UTF8:
    case M_DEVICE_256: case M_DEVICE_257: case M_DEVICE_257_UTF8:
        if (flags & PYXBUF_DEVICE) {
            x->flags |= PYXBUF_DEVICE;
            x->device = device_id_of(p->mode);
            x->device_info = &pep_device_info;
        }
        break;
    case M_CPU_FLAGGED: x->flags |= flags & PYXBUF_DEVICE; break;
    case M_DEVICE_WITHOUT_FLAG: x->device = PEP_DEVICE; break;
    case M_INFO_WITHOUT_FLAG: x->device_info = &pep_device_info; break;
    case M_UNREQUESTED_FLAG: x->flags |= 0x40000000; break;
    case M_EXT_FLAGS: x->ext_flags = 0x100; break;
    }
    return 0;
}

static void pep_releasebuffer(PyObject *self, Py_buffer *view) {
    (void)view;
    ((PepProducer *)self)->exports--;
}

/* The views of the producer not yet released. */
static PyObject *pep_exports(PyObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(((PepProducer *)self)->exports);
}

static PyGetSetDef pep_getset[] = {
    {"exports", pep_exports, NULL, "views not yet released", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* pep_producer_type(name, supported=None): a new producer type, declaring
 * `supported` when it is not None. */
static PyObject *pep_producer_type(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *name;
    PyObject *supported = Py_None;
    if (!PyArg_ParseTuple(args, "s|O", &name, &supported)) return NULL;
    PyType_Slot slots[] = {
        {Py_tp_new, (void *)pep_new},
        {Py_tp_dealloc, (void *)pep_dealloc},
        {Py_tp_getset, pep_getset},
        {Py_bf_getbuffer, (void *)pep_getbuffer},
        {Py_bf_releasebuffer, (void *)pep_releasebuffer},
        {0, NULL},
    };
    PyType_Spec spec = {name, (int)sizeof(PepProducer), 0,
                        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, slots};
    PyObject *type = PyType_FromSpec(&spec);
    if (type == NULL || supported == Py_None) return type;
    long value = PyLong_AsLong(supported);
    if ((value == -1 && PyErr_Occurred()) ||
        pyxbuf_type_set_supported_flags((PyTypeObject *)type, (int32_t)value) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return type;
}

/* (flags, ext_flags, device) of an answer: the extended fields only for an
 * extended request (a classic one leaves them unwritten), else (0, 0, None). */
static PyObject *answer(int requested, int flags, int ext_flags, const char *device) {
    if (!(requested & EXTENDED_RANGE)) return Py_BuildValue("(iiO)", 0, 0, Py_None);
    if (device == NULL) return Py_BuildValue("(iiO)", flags, ext_flags, Py_None);
    return Py_BuildValue("(iiy)", flags, ext_flags, device);
}

static PyObject *pep_pyxbuf_get(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, flags) < 0) return NULL;
    /* pyxbuf zeroes its view's extended fields on every request: report them */
    PyObject *out = answer(PYXBUF_DEVICE, view.flags, view.ext_flags, view.device);
    pyxbuf_release(&view);
    return out;
}

static PyObject *pep_native(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    return PyBool_FromLong(PYXBUF_NATIVE_PROTOCOL);
}

#if PYXBUF_NATIVE_PROTOCOL
/* CPython's own answer, into a whole native Py_buffer that starts out full
 * of 0xA5 (PyObject_GetBuffer zeroes the extended fields of an extended
 * request). */
static PyObject *pep_native_get(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    Py_buffer view;
    memset(&view, 0xA5, sizeof view);
    if (PyObject_GetBuffer(obj, &view, flags) < 0) return NULL;
    PyObject *out = answer(flags, view.flags, view.ext_flags, view.device);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *pep_native_check_supports(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    return PyLong_FromLong(PyObject_CheckBufferSupports(obj, flags));
}
#endif

static PyMethodDef pep_methods[] = {
    {"pep_producer_type", pep_producer_type, METH_VARARGS,
     "pep_producer_type(name, supported=None) -> a producer type; instances take a mode"},
    {"pep_pyxbuf_get", pep_pyxbuf_get, METH_VARARGS,
     "pep_pyxbuf_get(obj, flags) -> (flags, ext_flags, device) of pyxbuf_get's view"},
    {"pep_native", pep_native, METH_NOARGS,
     "True when built against an interpreter with the extended protocol (native mode)"},
#if PYXBUF_NATIVE_PROTOCOL
    {"pep_native_get", pep_native_get, METH_VARARGS,
     "pep_native_get(obj, flags) -> (flags, ext_flags, device) of PyObject_GetBuffer's view"},
    {"pep_native_check_supports", pep_native_check_supports, METH_VARARGS,
     "PyObject_CheckBufferSupports(obj, flags)"},
#endif
    {NULL, NULL, 0, NULL},
};

int pyxbuf_testext_add_pep(PyObject *module) {
    memset(long_id_256, 'd', 256);
    memset(long_id_257, 'd', 257);
    memset(long_id_257_utf8, 'd', 255);
    memcpy(long_id_257_utf8 + 255, "\xc3\xa9", 2); /* U+00E9 */
    return PyModule_AddFunctions(module, pep_methods) < 0 ||
                   PyModule_AddStringConstant(module, "PEP_DEVICE", PEP_DEVICE) < 0
               ? -1
               : 0;
}
