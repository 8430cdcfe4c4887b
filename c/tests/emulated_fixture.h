/* emulated_fixture.h -- the emulated device's backend for C tests that work
 * below the public API (staging, the pools, the device itself). */
#ifndef PYXBUF_EMULATED_FIXTURE_H
#define PYXBUF_EMULATED_FIXTURE_H

#include "pyxbuf.h"
#include "device/emulated.h"
#include "testing.h"

/* The emulated device, registered, as the process's backend table has it. */
static inline pyxbuf_backend emulated(void) {
    pyxbuf_error err;
    pyxbuf_backend b;
    CHECK(pyxbuf_emulated_register(&err) == 0);
    CHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, &err) == 0);
    return b;
}

#endif
