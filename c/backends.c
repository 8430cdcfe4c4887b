/* backends.c -- the device backends built into libpyxbuf. The registry in
 * device.c calls this once; it is the only place that names them. */

#include "internal.h"

void pyxbuf__register_builtin_backends(void) {
    pyxbuf__backend_register_raw(pyxbuf__cpu_backend());
    pyxbuf__backend_register_raw(pyxbuf__cuda_backend());
}
