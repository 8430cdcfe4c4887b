/* device_memory.c -- the door to pyxbuf's own device memory
 * (device_alloc.c) for the rest of the library: the device's backend looked
 * up in the registry, then the allocation made by the engine's allocator,
 * the one copy of libpyxbuf whose index holds every pooled block of the
 * process. */

#include "device/device.h"

int pyxbuf__device_block_new(const pyxbuf_device *device, size_t n, int64_t stream,
                             pyxbuf__device_block **out, pyxbuf_error *err) {
    pyxbuf_backend b;
    int rc = pyxbuf_backend_get(device->device_type, &b, err);
    if (rc != 0) return rc;
    return pyxbuf__engine_in_use()->device_block_new(&b, device, n, stream, out, err);
}
