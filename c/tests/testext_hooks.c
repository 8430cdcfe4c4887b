/* testext_hooks.c -- the test extension's windows into the library's private
 * state, kept out of the library itself: what the DLPack bridge recorded for
 * a view it produced, forgetting a type's supported-flags cache entry, and
 * how many NumPy user-dtype records the library holds.
 * Its own translation unit: it reads private headers (bridges/dlpack.h,
 * acquire/acquire.h), whose DLPack declarations would clash with the tests'
 * own (dlpack_abi.h, written independently so that the tests check the
 * library's ABI instead of sharing it). The extension links the static
 * library, whose hidden symbols and data it can reach. */
#include "acquire/acquire.h"
#include "bridges/dlpack.h"

void pyxbuf__type_cache_forget(PyTypeObject *type);

/* Forget the cached answer for `type`, so that the next pyxbuf_get of one of
 * its objects takes the uncached path (the differential tests compare both
 * paths with PyObject_GetBuffer). Needs the GIL. */
void pyxbuf__type_cache_forget(PyTypeObject *type) {
    unsigned int tag = pyxbuf__type_tag(type);
    pyxbuf__type_cache_entry *e = cache_entry(tag);
    uint64_t key;
    const void *data;
    if (pyxbuf__type_cache_get(e, type, &key, &data)) pyxbuf__type_cache_put(e, NULL, 0, NULL);
}

int pyxbuf__dlpack_view_info(const pyxbuf_view *view, uint64_t *dl_flags, uint32_t *major,
                             uint32_t *minor, int32_t *versioned);

/* 0 with the tensor's flags, version and kind, or -1 when the view did not
 * come from the DLPack bridge. */
int pyxbuf__dlpack_view_info(const pyxbuf_view *view, uint64_t *dl_flags, uint32_t *major,
                             uint32_t *minor, int32_t *versioned) {
    if (!pyxbuf__view_acquired(view) ||
        (view->path != PYXBUF_PATH_DLPACK && view->path != PYXBUF_PATH_DLPACK_C) ||
        view->bridge_data == NULL)
        return -1;
    if (view->owner == NULL) { /* bare: the tensor itself */
        const DLManagedTensorVersioned *m = view->bridge_data;
        *dl_flags = m->flags;
        *major = m->version.major;
        *minor = m->version.minor;
        *versioned = 1;
        return 0;
    }
    const pyxbuf__dl_hold *h = view->bridge_data;
    *dl_flags = h->dl_flags;
    *major = h->version.major;
    *minor = h->version.minor;
    *versioned = h->versioned;
    return 0;
}

size_t pyxbuf__numpy_user_records_now(void);

/* The NumPy struct route's user-dtype records allocated and not freed
 * (bridges/numpy_array.h): bounded however often the format registry
 * changes. */
size_t pyxbuf__numpy_user_records_now(void) {
    return PYXBUF__FT_LOAD_RELAXED(&pyxbuf__numpy_user_records);
}
