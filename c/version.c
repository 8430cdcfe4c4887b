/* version.c -- what the loaded library is, for header/library mismatch checks. */
#include "internal.h"

#define PYXBUF_STR2(x) #x
#define PYXBUF_STR(x) PYXBUF_STR2(x)

uint32_t pyxbuf_abi_version(void) { return PYXBUF_ABI_VERSION; }

const char *pyxbuf_version_string(void) {
    return PYXBUF_STR(PYXBUF_VERSION_MAJOR) "." PYXBUF_STR(PYXBUF_VERSION_MINOR) "." PYXBUF_STR(
        PYXBUF_VERSION_PATCH);
}
