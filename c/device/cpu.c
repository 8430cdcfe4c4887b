/* cpu.c -- the host as a device backend: copies are memmove, memory
 * is 64-byte aligned and zeroed. registry.c registers it. */

#include "device/device.h"
#include "base/platform.h"

#include <stdlib.h>
#include <string.h>

static int cpu_copy(void *ctx, int32_t id, void *dst, const void *src, size_t n, int64_t stream,
                    pyxbuf_error *err) {
    (void)ctx, (void)id, (void)stream, (void)err;
    if (n) memmove(dst, src, n);
    return 0;
}

static int cpu_copy_on_device(void *ctx, int32_t dst_id, void *dst, int32_t src_id,
                              const void *src, size_t n, int64_t stream, pyxbuf_error *err) {
    (void)src_id;
    return cpu_copy(ctx, dst_id, dst, src, n, stream, err);
}

/* Whole cache lines, 64-byte aligned (free with pyxbuf__aligned_free). */
static size_t cache_lines(size_t n) { return ((n ? n : 1) + 63) & ~(size_t)63; }

void *pyxbuf__cpu_alloc_unzeroed(size_t n) {
    size_t rounded = cache_lines(n);
    char *p = pyxbuf__aligned_alloc(64, rounded);
    if (p != NULL) memset(p + n, 0, rounded - n); /* the padding only */
    return p;
}

static int cpu_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx, (void)id;
    *ptr = pyxbuf__cpu_alloc_unzeroed(n);
    if (*ptr == NULL)
        return pyxbuf__error(err, PYXBUF_ENOMEM, -1, "cannot allocate %zu %s of host memory", n,
                             PYXBUF__PLURAL(n, "byte", "bytes"));
    memset(*ptr, 0, n);
    return 0;
}

static int cpu_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    pyxbuf__aligned_free(ptr);
    return 0;
}

static int cpu_pointer_query(void *ctx, const void *ptr, pyxbuf_device *device,
                             pyxbuf_error *err) {
    (void)ctx, (void)ptr, (void)err;
    device->device_type = PYXBUF_DL_CPU;
    device->device_id = 0;
    return 0;
}

const pyxbuf_backend *pyxbuf__cpu_backend(void) {
    static const pyxbuf_backend cpu = {
        .size = sizeof(pyxbuf_backend),
        .device_type = PYXBUF_DL_CPU,
        .name = "cpu",
        .copy_to_host = cpu_copy,
        .copy_from_host = cpu_copy,
        .copy_on_device = cpu_copy_on_device,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .pointer_query = cpu_pointer_query,
    };
    return &cpu;
}
