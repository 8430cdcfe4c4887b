/* header_c_sizes.c -- the C compiler's view of the public structs, compared
 * with the C++ compiler's by header_cxx.cpp. */
#include "pyxbuf.h"

size_t pyxbuf_test_c_sizes(size_t *out, size_t n);

size_t pyxbuf_test_c_sizes(size_t *out, size_t n) {
    const size_t c[] = {sizeof(pyxbuf_view), sizeof(pyxbuf_device_info),
                        sizeof(pyxbuf_export_desc), sizeof(pyxbuf_borrow_counter),
                        sizeof(pyxbuf_format_node), sizeof(pyxbuf_format),
                        sizeof(pyxbuf_dtype_spec), sizeof(pyxbuf_error),
                        offsetof(pyxbuf_view, device_info), offsetof(pyxbuf_view, path),
                        offsetof(pyxbuf_view, inline_dims), offsetof(pyxbuf_format, inline_nodes)};
    size_t count = sizeof c / sizeof *c < n ? sizeof c / sizeof *c : n;
    for (size_t i = 0; i < count; i++) out[i] = c[i];
    return count;
}
