/* ids.c -- device identifiers and devices: the proposal's unique
 * UTF-8 identifiers, DLPack's device types by name, and which of them the
 * host can dereference. Uses nothing of pyxbuf's above base. */

#include "device/device.h"

#include <stdio.h>
#include <string.h>

/* Identifiers are unique strings: equal pointers are the common case, equal
 * content the fallback. NULL and the reserved "cpu" both mean the host. */
int pyxbuf_device_equal(const char *a, const char *b) {
    if (a == b) return 1;
    if (a != NULL && strcmp(a, PYXBUF_DEVICE_CPU) == 0) a = NULL;
    if (b != NULL && strcmp(b, PYXBUF_DEVICE_CPU) == 0) b = NULL;
    if (a == NULL || b == NULL) return a == b;
    return strcmp(a, b) == 0;
}

/* The proposal's device identifiers are NUL-terminated UTF-8 strings. Strict
 * UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF. Returns -1 when `id` is valid, else the offset of the first byte
 * of the bad sequence. Identifiers longer than PYXBUF__DEVICE_ID_MAX are
 * refused at that offset: a producer's id is a short name, and the bound
 * keeps a missing NUL from walking off into memory. */
int64_t pyxbuf__device_id_invalid_at(const char *id) {
    const unsigned char *s = (const unsigned char *)id;
    size_t i = 0;
    while (s[i] != 0) {
        unsigned c = s[i];
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c < 0x80) n = 0;
        else if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0;  /* overlong */
            if (c == 0xED) hi = 0x9F;  /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90;  /* overlong */
            if (c == 0xF4) hi = 0x8F;  /* above U+10FFFF */
        } else
            return (int64_t)i;
        /* the whole character within the limit: its last byte is i + n */
        if (i + n >= PYXBUF__DEVICE_ID_MAX) return (int64_t)i;
        for (size_t k = 1; k <= n; k++) {
            unsigned b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return (int64_t)i;
        }
        i += n + 1;
    }
    return i == 0 ? 0 : -1; /* "" names nothing */
}

int pyxbuf_device_same(const pyxbuf_device *a, const pyxbuf_device *b) {
    return a->device_type == b->device_type && a->device_id == b->device_id;
}

const char *pyxbuf_device_type_name(int32_t device_type) {
    switch (device_type) {
    case PYXBUF_DL_CPU: return "cpu";
    case PYXBUF_DL_CUDA: return "cuda";
    case PYXBUF_DL_CUDA_HOST: return "cuda_host";
    case PYXBUF_DL_OPENCL: return "opencl";
    case PYXBUF_DL_VULKAN: return "vulkan";
    case PYXBUF_DL_METAL: return "metal";
    case PYXBUF_DL_VPI: return "vpi";
    case PYXBUF_DL_ROCM: return "rocm";
    case PYXBUF_DL_ROCM_HOST: return "rocm_host";
    case PYXBUF_DL_EXT_DEV: return "ext_dev";
    case PYXBUF_DL_CUDA_MANAGED: return "cuda_managed";
    case PYXBUF_DL_ONEAPI: return "oneapi";
    case PYXBUF_DL_WEBGPU: return "webgpu";
    case PYXBUF_DL_HEXAGON: return "hexagon";
    case PYXBUF_DL_MAIA: return "maia";
    default: return "unknown";
    }
}

int pyxbuf_device_format(const pyxbuf_device *device, char *buf, size_t cap) {
    int n = device->device_type == PYXBUF_DL_CPU
                ? snprintf(buf, cap, "cpu")
                : snprintf(buf, cap, "%s:%d", pyxbuf_device_type_name(device->device_type),
                           (int)device->device_id);
    if (n < 0 || (size_t)n >= cap) return PYXBUF_ENOSPACE;
    return n;
}

/* Memory the host may dereference: plain host memory, and the pinned and
 * managed kinds DLPack names. */
int pyxbuf__host_accessible(int32_t device_type) {
    return device_type == PYXBUF_DL_CPU || device_type == PYXBUF_DL_CUDA_HOST ||
           device_type == PYXBUF_DL_ROCM_HOST;
}
