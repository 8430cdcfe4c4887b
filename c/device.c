/* device.c -- device identifiers. The backend registry and dispatch come with
 * the devices work; what is here is what acquisition needs today. */

#include "internal.h"

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
