/* consumer.c -- links an installed libpyxbuf and reads a bytes object. */
#include <pyxbuf.h>
#include <stdio.h>

int main(void) {
    if (pyxbuf_abi_version() != PYXBUF_ABI_VERSION) return 2;
    Py_Initialize();
    PyObject *obj = PyBytes_FromString("installed");
    pyxbuf_view v;
    int rc = pyxbuf_get(obj, &v, PyBUF_FULL_RO);
    if (rc == 0) {
        printf("read %zd bytes through %s\n", v.base.len, pyxbuf_path_name(v.path));
        rc = v.base.len == 9 ? 0 : 1;
        pyxbuf_release(&v);
    }
    Py_DECREF(obj);
    Py_FinalizeEx();
    return rc == 0 ? 0 : 1;
}
