/* nodes.c -- a format's node and dimension storage: inline in the
 * descriptor while they fit, then on the heap; a parsed single scalar
 * shares the library's read-only nodes (node_capacity 0). */
#include "format/format.h"

#include <stdlib.h>

pyxbuf_format_node *pyxbuf_format_nodes(const pyxbuf_format *f) { return pyxbuf__fmt_nodes(f); }

int64_t *pyxbuf_format_dims(const pyxbuf_format *f) {
    return f->heap_dims ? f->heap_dims : (int64_t *)f->inline_dims;
}

/* pyxbuf_format_clear of a format with memory of its own: out of line, so
 * the common case needs no frame. */
static PYXBUF_NOINLINE void clear_heap(pyxbuf_format *f) {
    if (f->node_capacity > 0) free(f->heap_nodes);
    free(f->heap_dims);
    pyxbuf__fmt_reset(f, NULL);
}

/* With nothing on the heap (every single item, most formats), emptying is
 * a few stores: no nodes, no dimensions, the inline nodes again. The rest is
 * reset only after a free. */
void pyxbuf_format_clear(pyxbuf_format *f) {
    if (f == NULL) return;
    if (PYXBUF_UNLIKELY(f->heap_dims != NULL || (f->heap_nodes != NULL && f->node_capacity > 0))) {
        clear_heap(f);
        return;
    }
    f->nnodes = 0;
    f->ndims = 0;
    f->flags = 0;
    f->node_capacity = PYXBUF_FORMAT_INLINE_NODES;
    f->heap_nodes = NULL;
}

/* A parsed single scalar shares the library's read-only nodes (node_capacity
 * 0): the builder copies them inline before it changes anything. */
static void unshare_nodes(pyxbuf_format *f) {
    memcpy(f->inline_nodes, f->heap_nodes, (size_t)f->nnodes * sizeof *f->heap_nodes);
    f->heap_nodes = NULL;
    f->node_capacity = PYXBUF_FORMAT_INLINE_NODES;
}

/* Out of line: it is rare. */
PYXBUF_NOINLINE int32_t pyxbuf__fmt_node_grow(pyxbuf_format *f) {
    if (f->node_capacity == 0 && f->heap_nodes != NULL) {
        unshare_nodes(f);
        return f->nnodes++;
    }
    if (f->node_capacity > INT32_MAX / 2) return -1;
    /* 8 first: 960 bytes, which glibc serves from its per-thread cache (up
     * to 1032 bytes), unlike the general allocator for 16. */
    int32_t cap = f->node_capacity * 2 < 8 ? 8 : f->node_capacity * 2;
    pyxbuf_format_node *n;
    if (f->heap_nodes == NULL) {
        n = malloc((size_t)cap * sizeof *n);
        if (n) memcpy(n, f->inline_nodes, (size_t)f->nnodes * sizeof *n);
    } else {
        n = realloc(f->heap_nodes, (size_t)cap * sizeof *n);
    }
    if (n == NULL) return -1;
    f->heap_nodes = n;
    f->node_capacity = cap;
    return f->nnodes++;
}

PYXBUF_NOINLINE bool pyxbuf__fmt_dim_grow(pyxbuf_format *f) {
    if (f->dims_capacity > INT32_MAX / 2) return false;
    int32_t cap = f->dims_capacity * 2 < 16 ? 16 : f->dims_capacity * 2;
    int64_t *n;
    if (f->heap_dims == NULL) {
        n = malloc((size_t)cap * sizeof *n);
        if (n) memcpy(n, f->inline_dims, sizeof f->inline_dims);
    } else {
        n = realloc(f->heap_dims, (size_t)cap * sizeof *n);
    }
    if (n == NULL) return false;
    f->heap_dims = n;
    f->dims_capacity = cap;
    return true;
}
