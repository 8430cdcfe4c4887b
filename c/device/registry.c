/* registry.c -- the backend registry's entry points, and the backends built
 * into libpyxbuf: the first use of the registry registers them, and this is
 * the only place that names them (backend_table.c keeps the table). */

#include "device/device.h"
#include "base/fixes.h"

#include <pthread.h>
#include <stdio.h>

/* Where the type has none: with the process's engine shared, the built-ins
 * of the copy that installed it serve every copy (replacing them would
 * strand the state, CUDA contexts and streams, their arrays rely on). */
static void register_builtins(void) {
    pyxbuf__backend_store_if_absent(pyxbuf__cpu_backend());
    /* The CUDA driver serves device, pinned host and managed memory alike;
     * its pointer_query tells them apart. */
    static const int32_t cuda_types[] = {PYXBUF_DL_CUDA, PYXBUF_DL_CUDA_HOST,
                                         PYXBUF_DL_CUDA_MANAGED};
    for (size_t i = 0; i < sizeof cuda_types / sizeof *cuda_types; i++) {
        pyxbuf_backend b = *pyxbuf__cuda_backend();
        b.device_type = cuda_types[i];
        pyxbuf__backend_store_if_absent(&b);
    }
}

static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

/* The engine is resolved first, outside the once-guard: resolving may wait
 * for the GIL, and a thread holding the GIL would wait on the guard. */
static void ensure_builtins(void) {
    (void)pyxbuf__engine_in_use();
    pthread_once(&builtins_once, register_builtins);
}

int pyxbuf_backend_register(const pyxbuf_backend *backend, pyxbuf_error *err) {
    ensure_builtins();
    if (pyxbuf__backend_check(backend, err) < 0) return PYXBUF_EINVAL;
    return pyxbuf__backend_store(backend);
}

int pyxbuf_backend_unregister(int32_t device_type) {
    ensure_builtins();
    return pyxbuf__backend_remove(device_type);
}

int pyxbuf_backend_get(int32_t device_type, pyxbuf_backend *out, pyxbuf_error *err) {
    ensure_builtins();
    if (pyxbuf__backend_lookup(device_type, out)) return 0;
    return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                         "no pyxbuf backend for device type %d (%s) is registered; %s",
                         (int)device_type, pyxbuf_device_type_name(device_type),
                         pyxbuf__fix(PYXBUF__FIX_NO_BACKEND));
}

int pyxbuf__backend_find_pointer(const void *ptr, pyxbuf_device *device, pyxbuf_backend *backend,
                                 pyxbuf_error *err) {
    ensure_builtins();
    char tried[PYXBUF_ERROR_MESSAGE_SIZE] = "";
    size_t used = 0;
    /* CUDA first: it is what foreign device pointers almost always are. */
    int32_t order[PYXBUF__MAX_DEVICE_TYPES];
    int32_t n = 0;
    order[n++] = PYXBUF_DL_CUDA;
    for (int32_t t = 1; t < PYXBUF__MAX_DEVICE_TYPES; t++)
        if (t != PYXBUF_DL_CUDA && t != PYXBUF_DL_CPU) order[n++] = t;
    /* One backend may serve several device types (CUDA's serves cuda,
     * cuda_host and cuda_managed): it is asked, and named in the message,
     * once. */
    pyxbuf_backend asked[PYXBUF__MAX_DEVICE_TYPES];
    int32_t nasked = 0;
    for (int32_t i = 0; i < n; i++) {
        pyxbuf_error why;
        if (pyxbuf_backend_get(order[i], backend, NULL) < 0 || backend->pointer_query == NULL)
            continue;
        int seen = 0;
        for (int32_t k = 0; k < nasked && !seen; k++)
            seen = asked[k].pointer_query == backend->pointer_query && asked[k].ctx == backend->ctx;
        if (seen) continue;
        asked[nasked++] = *backend;
        if (backend->pointer_query(backend->ctx, ptr, device, &why) == 0) return 0;
        int w = snprintf(tried + used, sizeof tried - used, "%s%s: %.200s", used ? "; " : "",
                         backend->name ? backend->name : "?", why.message);
        if (w > 0 && (size_t)w < sizeof tried - used) used += (size_t)w;
    }
    return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                         "no registered device backend knows pointer %p (%s)", ptr,
                         used ? tried : "no device backend is registered");
}
