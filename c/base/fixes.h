/* fixes.h -- the fix a message names, in the terms of the binding this copy
 * of the library serves (fixes.c): a Python user is told to call
 * pyxbuf.to_device, a Rust author PyXBuffer::<T>::request().device(), a C
 * author to request PYXBUF_DEVICE. Each copy of libpyxbuf is linked into one
 * binding (the pyxbuf module, a Rust crate, a C++ or Cython extension, a C
 * extension), which sets it once with pyxbuf_message_binding; a message
 * raised by a copy names that copy's binding's API. */
#ifndef PYXBUF_BASE_FIXES_H
#define PYXBUF_BASE_FIXES_H

#include "base/base.h"

typedef enum pyxbuf__fix_id {
    /* "...which the host cannot read; <fix>" */
    PYXBUF__FIX_DEVICE_VIEW,
    /* "no pyxbuf backend for device type N is registered; <fix>" */
    PYXBUF__FIX_NO_BACKEND,
    /* "...custom type 'k' which this consumer does not support; <fix>" */
    PYXBUF__FIX_REGISTER_DTYPE,
    /* the call that registers a custom type's size: "register it (<call>
     * with key ... and itemsize N)" */
    PYXBUF__FIX_REGISTER_DTYPE_CALL,
    /* "pyxbuf never moves data implicitly: <fix>" */
    PYXBUF__FIX_MOVE_FIRST,
    /* "a shared borrow promises that nobody writes; <fix>" */
    PYXBUF__FIX_WRITE_EXCLUSIVE,
    /* a borrow of a view with suboffsets: "<fix>, or pass a contiguous copy" */
    PYXBUF__FIX_WITHOUT_BORROW,
    PYXBUF__FIX_COUNT
} pyxbuf__fix_id;

/* The fix's phrase for this copy's binding (static storage). */
const char *pyxbuf__fix(pyxbuf__fix_id id);

#endif
