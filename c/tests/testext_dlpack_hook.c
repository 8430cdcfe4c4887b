/* testext_dlpack_hook.c -- the test extension's window on what the DLPack
 * bridge recorded for a view it produced. Its own translation unit: it reads
 * the bridge's private holder (bridges/dlpack.h), whose DLPack declarations
 * would clash with the tests' own (dlpack_abi.h, written independently so
 * that the tests check the library's ABI instead of sharing it). */
#include "bridges/dlpack.h"

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
