/* examples/demo.c -- `make demo`: a C consumer that embeds Python, builds a few real
 * arrays and asks pyxbuf what each acquisition found. */
#include "pyxbuf.h"

#include <stdio.h>
#include <string.h>

#include "device/emulated.h" /* the guarded emulated device: demo and tests only */

/* Objects to read, built by Python code (the demo consumer is this C file). */
static const char *const make_objects =
    "import array, numpy as np, ml_dtypes\n"
    "a = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
    "rec = np.dtype([('id', '<i4'), ('pos', '<f8', (3,)), ('ok', '?')], align=True)\n"
    "objects = [\n"
    "  ('numpy float32 (3, 4)', a),\n"
    "  ('numpy a[::-1, ::2] (negative strides)', a[::-1, ::2]),\n"
    "  ('numpy aligned struct', np.zeros(2, dtype=rec)),\n"
    "  ('numpy complex128', np.ones(3, dtype=np.complex128)),\n"
    "  ('bytes', b'pyxbuf'),\n"
    "  (\"array.array('d')\", array.array('d', [1.0, 2.0, 3.0])),\n"
    "  ('ml_dtypes bfloat16 (NumPy user dtype)', np.ones(4, dtype=ml_dtypes.bfloat16)),\n"
    "  ('ml_dtypes float8_e4m3fn, every other row', np.ones((4, 2), dtype=ml_dtypes.float8_e4m3fn)[::2]),\n"
    "]\n"
    "try:\n"
    "  import jax.numpy as jnp\n"
    "  objects.append(('JAX bfloat16 (CPU)', jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3)))\n"
    "except ImportError:\n"
    "  pass\n";

static void print_tuple(const char *label, const Py_ssize_t *v, int n) {
    printf("    %-9s ", label);
    if (v == NULL) {
        printf("(not given)\n");
        return;
    }
    printf("(");
    for (int i = 0; i < n; i++) printf(i ? ", %zd" : "%zd", v[i]);
    printf(n == 1 ? ",)\n" : ")\n");
}

/* "id i@0, pos (3)d@8, ok ?@32": the members of the item (of its one struct). */
static void print_fields(const pyxbuf_format *f) {
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(f);
    const int64_t *dims = pyxbuf_format_dims(f);
    int32_t i = nodes[0].first_child;
    if (nodes[0].nchildren == 1 && nodes[i].kind == PYXBUF_FMT_STRUCT) i = nodes[i].first_child;
    printf("    fields   ");
    for (; i >= 0; i = nodes[i].next) {
        const pyxbuf_format_node *n = &nodes[i];
        if (n->kind == PYXBUF_FMT_PADDING) continue;
        printf(" %.*s", n->name ? (int)n->name_len : 1, n->name ? n->name : "-");
        printf(" ");
        for (int32_t d = 0; d < n->ndim; d++)
            printf("%s%lld%s", d ? "," : "(", (long long)dims[n->dims_start + d],
                   d + 1 == n->ndim ? ")" : "");
        if (n->flags & PYXBUF_FMTN_COMPLEX) printf("Z");
        if (n->kind == PYXBUF_FMT_CUSTOM)
            printf("[%.*s]", (int)n->custom_len, n->custom);
        else if (n->kind == PYXBUF_FMT_STRUCT)
            printf("T{...}");
        else
            printf("%c", (char)n->code);
        printf("@%lld", (long long)n->offset);
        if (n->next >= 0) printf(",");
    }
    printf("\n");
}

static void print_format(const char *fmt) {
    pyxbuf_format f;
    pyxbuf_error err;
    if (pyxbuf_format_parse(fmt, &f, &err) < 0) {
        printf("    format    '%s' -> parse error at %lld: %s\n", fmt, (long long)err.position,
               err.message);
        return;
    }
    char canonical[256];
    if (pyxbuf_format_write(&f, canonical, sizeof canonical, NULL, NULL) < 0)
        strcpy(canonical, "(too long)");
    printf("    format    '%s': itemsize %lld, alignment %lld, canonical '%s'\n", fmt,
           (long long)f.itemsize, (long long)f.alignment, canonical);
    print_fields(&f);
    pyxbuf_format_clear(&f);
}

static void print_grants(int32_t ext_flags) {
    printf("    grants    %s%s%s%s\n", ext_flags == 0 ? "none" : "",
           ext_flags & PYXBUF_EXT_EXCLUSIVE ? "exclusive " : "",
           ext_flags & PYXBUF_EXT_SHARED ? "shared " : "",
           ext_flags & PYXBUF_EXT_TRACKED ? "tracked " : "");
}

static void show(const char *label, PyObject *obj, int32_t flags) {
    pyxbuf_view view;
    printf("\n%s\n", label);
    if (pyxbuf_get(obj, &view, flags) < 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *msg = value ? PyObject_Str(value) : NULL;
        printf("    refused   %s: %s\n", ((PyTypeObject *)type)->tp_name,
               msg ? PyUnicode_AsUTF8(msg) : "?");
        Py_XDECREF(msg);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    printf("    path      %s\n", pyxbuf_path_name(view.path));
    print_format(view.base.format ? view.base.format : "B");
    print_tuple("shape", view.base.shape, view.base.ndim);
    print_tuple("strides", view.base.strides, view.base.ndim);
    pyxbuf_device where;
    char name[64] = "cpu (host memory)";
    if (view.device != NULL && pyxbuf_view_device(&view, &where, NULL) == 0)
        pyxbuf_device_format(&where, name, sizeof name);
    printf("    device    %s\n", name);
    printf("    readonly  %s\n", view.base.readonly ? "yes" : "no");
    print_grants(view.ext_flags);
    pyxbuf_release(&view);
}

static int run(void) {
    PyObject *globals = PyDict_New();
    if (globals == NULL) return -1;
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *r = PyRun_String(make_objects, Py_file_input, globals, globals);
    if (r == NULL) {
        Py_DECREF(globals);
        return -1;
    }
    Py_DECREF(r);
    printf("pyxbuf %s (ABI %u): what pyxbuf_get finds for real objects\n",
           pyxbuf_version_string(), pyxbuf_abi_version());
    printf("request: PyBUF_RECORDS_RO | PYXBUF_DEVICE | PYXBUF_BORROW_SHARED\n");
    PyObject *objects = PyDict_GetItemString(globals, "objects");
    int32_t flags = PyBUF_RECORDS_RO | PYXBUF_DEVICE | PYXBUF_BORROW_SHARED;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects); i++) {
        PyObject *pair = PyList_GET_ITEM(objects, i);
        show(PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0)), PyTuple_GET_ITEM(pair, 1), flags);
    }

    /* Custom types in format strings, through pyxbuf's own exporter. */
    const char *custom[] = {"[ml_dtypes$bfloat16]", "Z[ml_dtypes$bfloat16]",
                            "[mylib$quaternion;struct$4f]"};
    for (size_t i = 0; i < sizeof custom / sizeof *custom; i++) {
        Py_ssize_t n = 4;
        PyObject *e = pyxbuf_exporter_new(custom[i], 1, &n, 0, NULL);
        if (e == NULL) {
            Py_DECREF(globals);
            return -1;
        }
        char label[128];
        snprintf(label, sizeof label, "pyxbuf.Exporter of 4 x '%s'", custom[i]);
        show(label, e, flags);
        Py_DECREF(e);
    }

    /* Device memory: the float32 array copied to the guarded emulated device.
     * Its pointer cannot be dereferenced by the host; pyxbuf copies it back. */
    pyxbuf_error err;
    pyxbuf_view host_view;
    const pyxbuf_device ext0 = {PYXBUF_DL_EXT_DEV, 0};
    PyObject *array = PyTuple_GET_ITEM(PyList_GET_ITEM(objects, 0), 1);
    if (pyxbuf_emulated_register(&err) < 0 || pyxbuf_get(array, &host_view, flags) < 0) {
        Py_DECREF(globals);
        return -1;
    }
    PyObject *on_device = pyxbuf_to_device(&host_view, &ext0, PYXBUF_STREAM_DEFAULT);
    pyxbuf_release(&host_view);
    if (on_device == NULL) {
        Py_DECREF(globals);
        return -1;
    }
    show("the float32 array after pyxbuf_to_device(ext_dev:0), without PYXBUF_DEVICE", on_device,
         PyBUF_RECORDS_RO);
    show("... and with PYXBUF_DEVICE", on_device, flags);
    pyxbuf_view dv;
    float back[12];
    if (pyxbuf_get(on_device, &dv, flags) == 0) {
        if (pyxbuf_copy_to_host(&dv, back, sizeof back) == 0) {
            float sum = 0;
            for (int i = 0; i < 12; i++) sum += back[i];
            printf("    copied back to the host with pyxbuf_copy_to_host: sum = %g (expected 66)\n",
                   (double)sum);
        }
        pyxbuf_release(&dv);
    }
    Py_DECREF(on_device);

    /* pyxbuf's own exporter keeps borrow promises. */
    Py_ssize_t shape[2] = {2, 3};
    PyObject *exp = pyxbuf_exporter_new("<f", 2, shape, 0, NULL);
    if (exp == NULL) {
        Py_DECREF(globals);
        return -1;
    }
    pyxbuf_view held;
    if (pyxbuf_get(exp, &held, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) < 0) {
        Py_DECREF(exp);
        Py_DECREF(globals);
        return -1;
    }
    show("pyxbuf.Exporter '<f' (2, 3), while another consumer holds a shared borrow", exp, flags);
    show("... the same exporter, asking for an exclusive borrow", exp,
         PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE);
    pyxbuf_release(&held);
    show("... after the shared borrow is released", exp, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE);
    Py_DECREF(exp);
    Py_DECREF(globals);
    return 0;
}

int main(void) {
    Py_Initialize();
    int rc = run();
    if (rc < 0) PyErr_Print();
    if (Py_FinalizeEx() < 0) rc = -1;
    return rc < 0 ? 1 : 0;
}
