/* immutable.h -- enforced shared grants over immutable memory (immutable.c):
 * exact bytes, and read-only memoryviews and NumPy arrays whose chain ends in
 * one. */
#ifndef PYXBUF_ACQUIRE_IMMUTABLE_H
#define PYXBUF_ACQUIRE_IMMUTABLE_H

#include "view/view.h"

/* Whether the acquired host view's memory lies in an exact bytes object that
 * its exporter (view->base.obj) reaches through read-only links only. */
int pyxbuf__immutable_memory(const pyxbuf_view *view);

/* For a shared borrow request (neither writable nor exclusive) on an
 * acquired view: when its memory is immutable, grant PYXBUF_EXT_SHARED,
 * enforced (no registry entry, nothing to release), and answer 1; else 0 and
 * nothing done (the caller tracks the borrow). */
int pyxbuf__grant_if_immutable(pyxbuf_view *view);

#endif
