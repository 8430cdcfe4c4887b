/* version.c -- what the loaded library is, for header/library mismatch checks. */
#include "base/base.h"

uint32_t pyxbuf_abi_version(void) { return PYXBUF_ABI_VERSION; }

int pyxbuf_native_protocol(void) { return PYXBUF_NATIVE_PROTOCOL; }

const char *pyxbuf_version_string(void) {
    return PYXBUF__VERSION_TEXT;
}
