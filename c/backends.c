/* backends.c -- the device backends built into libpyxbuf. The registry in
 * device.c calls this once; it is the only place that names them. */

#include "internal.h"

void pyxbuf__register_builtin_backends(void) {
    pyxbuf__backend_register_raw(pyxbuf__cpu_backend());
    /* The CUDA driver serves device, pinned host and managed memory alike;
     * its pointer_query tells them apart. */
    static const int32_t cuda_types[] = {PYXBUF_DL_CUDA, PYXBUF_DL_CUDA_HOST,
                                         PYXBUF_DL_CUDA_MANAGED};
    for (size_t i = 0; i < sizeof cuda_types / sizeof *cuda_types; i++) {
        pyxbuf_backend b = *pyxbuf__cuda_backend();
        b.device_type = cuda_types[i];
        pyxbuf__backend_register_raw(&b);
    }
}
