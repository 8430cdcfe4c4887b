// header_cxx.cpp -- pyxbuf.h compiles as C++ and describes the same layout
// there as in C (checked against the C side's figures passed in by CMake).
#include "pyxbuf.h"

#include <cstddef>
#include <cstdio>

static_assert(offsetof(pyxbuf_view, base) == 0, "Py_buffer comes first");
#if PYXBUF_NATIVE_PROTOCOL
// the interpreter's Py_buffer ends with the extended fields: they are the view's
static_assert(offsetof(pyxbuf_view, flags) == offsetof(Py_buffer, flags), "the native fields");
static_assert(offsetof(pyxbuf_view, path) == sizeof(Py_buffer), "bookkeeping follows them");
#else
static_assert(offsetof(pyxbuf_view, flags) == sizeof(Py_buffer), "extended fields follow it");
#endif
static_assert(sizeof(pyxbuf_error) == 512, "pyxbuf_error is 512 bytes");
static_assert(sizeof(pyxbuf_device_info) == 64, "pyxbuf_device_info is 64 bytes");

extern "C" size_t pyxbuf_test_c_sizes(size_t *out, size_t n);

int main() {
    const size_t cxx[] = {sizeof(pyxbuf_view), sizeof(pyxbuf_device_info),
                          sizeof(pyxbuf_export_desc), sizeof(pyxbuf_borrow_counter),
                          sizeof(pyxbuf_format_node), sizeof(pyxbuf_format),
                          sizeof(pyxbuf_dtype_spec), sizeof(pyxbuf_error),
                          offsetof(pyxbuf_view, device_info), offsetof(pyxbuf_view, path),
                          offsetof(pyxbuf_view, inline_dims), offsetof(pyxbuf_format, inline_nodes)};
    size_t c[sizeof cxx / sizeof *cxx];
    size_t n = pyxbuf_test_c_sizes(c, sizeof cxx / sizeof *cxx);
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        if (c[i] != cxx[i]) {
            std::fprintf(stderr, "layout entry %zu: C says %zu, C++ says %zu\n", i, c[i], cxx[i]);
            failures++;
        }
    }
    std::fprintf(stderr, "%s header.cxx_layout_matches_c (%zu entries)\n", failures ? "FAIL" : "ok  ", n);
    return failures ? 1 : 0;
}
