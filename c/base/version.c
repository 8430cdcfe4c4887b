/* version.c -- what the loaded library is, for header/library mismatch checks. */
#include "base/base.h"

uint32_t pyxbuf_abi_version(void) { return PYXBUF_ABI_VERSION; }

const char *pyxbuf_version_string(void) {
    return PYXBUF__VERSION_TEXT;
}
